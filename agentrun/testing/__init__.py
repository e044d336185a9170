"""Offline testing kit: the embedded scripted model server, offline agent configuration,
network isolation, a fault shim that makes a real agent misbehave on cue, and a scripted
in-process engine.

Script building blocks are exported under unambiguous names (``ModelTurn``, ``TextBlock``,
``ToolCallBlock``, ...) so they never shadow the library's own ``Turn`` and ``ToolCall``.
"""

from ._embedded import EMBEDDED_ENGINES, embedded_engine
from ._faults import FAULTS, fault_prompt, fault_shim
from ._modelserver import (
    DEFAULT_SIDE_REQUESTS,
    ApiKind,
    ModelServer,
    RecordedRequest,
    SideRequest,
    map_tool_call,
)
from ._netns import can_isolate_network, isolated_argv, network_is_loopback_only, run_isolated
from ._offline import (
    OPENCODE_PLUGIN_VERSION,
    OfflineAgentConfig,
    base_env,
    claude_acp_offline,
    claude_offline,
    codex_acp_offline,
    codex_offline,
    gemini_offline,
    offline_config,
    opencode_offline,
    qwen_offline,
    write_opencode_plugin_stub,
)
from ._script import (
    DEFAULT_SHELL_COMMAND,
    EXHAUSTED_TEXT,
    HttpError,
    Script,
    StreamError,
    default_script,
)
from ._script import Text as TextBlock
from ._script import Thinking as ThinkingBlock
from ._script import ToolCall as ToolCallBlock
from ._script import Turn as ModelTurn
from ._script import Usage as ScriptUsage
from ._scripted import Ask, Fail, Hang, ScriptedEngine, ScriptedSession, Sleep, TurnRecord

__all__ = [
    "DEFAULT_SHELL_COMMAND",
    "DEFAULT_SIDE_REQUESTS",
    "EMBEDDED_ENGINES",
    "EXHAUSTED_TEXT",
    "FAULTS",
    "OPENCODE_PLUGIN_VERSION",
    "ApiKind",
    "Ask",
    "Fail",
    "Hang",
    "HttpError",
    "ModelServer",
    "ModelTurn",
    "OfflineAgentConfig",
    "RecordedRequest",
    "Script",
    "ScriptUsage",
    "ScriptedEngine",
    "ScriptedSession",
    "SideRequest",
    "Sleep",
    "StreamError",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "TurnRecord",
    "base_env",
    "can_isolate_network",
    "claude_acp_offline",
    "claude_offline",
    "codex_acp_offline",
    "codex_offline",
    "default_script",
    "embedded_engine",
    "fault_prompt",
    "fault_shim",
    "gemini_offline",
    "isolated_argv",
    "map_tool_call",
    "network_is_loopback_only",
    "offline_config",
    "opencode_offline",
    "qwen_offline",
    "run_isolated",
    "write_opencode_plugin_stub",
]
