"""The embedded default: real agent programs against a scripted model server on 127.0.0.1.

What ``agentrun run``, ``agentrun compare --script`` and the offline quick start use, and what
users testing their own orchestrators import: the :class:`ModelServer` (Anthropic Messages,
OpenAI Responses, Chat Completions and the Gemini API, streamed from a :class:`Script`) with
its usage :class:`Ledger`, :func:`embedded_engine` (an engine and its session options pointed at
it), each agent's offline configuration, the loopback-only network namespace, and the recorder
behind ``agentrun record``; and the metering :class:`CredentialProxy`, which forwards the same
four APIs to a real (or any compatible) upstream with the real key swapped in, a ledger of every
call and a budget enforced at the edge.

Script building blocks are exported under unambiguous names (``ModelTurn``, ``TextBlock``,
``ToolCallBlock``, ...) so they never shadow the library's own ``Turn`` and ``ToolCall``.

May import: the vocabulary, the wire, the turn model, the engine bases and the engines
(their offline configurations); never :mod:`agentrun.testing`, the fleets or the face.
"""

from .._bases.offline import OfflineAgentConfig, base_env
from ..engines.acp._offline import gemini_offline, qwen_offline
from ..engines.claude._offline import claude_acp_offline, claude_offline
from ..engines.codex._offline import codex_acp_offline, codex_offline
from ..engines.opencode._offline import (
    OPENCODE_PLUGIN_VERSION,
    opencode_offline,
    write_opencode_plugin_stub,
)
from ._dialects import map_tool_call
from ._embedded import EMBEDDED_ENGINES, embedded_engine, offline_config
from ._ledger import Ledger, LedgerEntry, LedgerSlice
from ._modelserver import ModelServer
from ._netns import can_isolate_network, isolated_argv, network_is_loopback_only, run_isolated
from ._proxy import CredentialProxy, ProxyClient, usage_disagreement
from ._requests import DEFAULT_SIDE_REQUESTS, ApiKind, RecordedRequest, SideRequest
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

__all__ = [
    "DEFAULT_SHELL_COMMAND",
    "DEFAULT_SIDE_REQUESTS",
    "EMBEDDED_ENGINES",
    "EXHAUSTED_TEXT",
    "OPENCODE_PLUGIN_VERSION",
    "ApiKind",
    "CredentialProxy",
    "HttpError",
    "Ledger",
    "LedgerEntry",
    "LedgerSlice",
    "ModelServer",
    "ModelTurn",
    "OfflineAgentConfig",
    "ProxyClient",
    "RecordedRequest",
    "Script",
    "ScriptUsage",
    "SideRequest",
    "StreamError",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "base_env",
    "can_isolate_network",
    "claude_acp_offline",
    "claude_offline",
    "codex_acp_offline",
    "codex_offline",
    "default_script",
    "embedded_engine",
    "gemini_offline",
    "isolated_argv",
    "map_tool_call",
    "network_is_loopback_only",
    "offline_config",
    "opencode_offline",
    "qwen_offline",
    "run_isolated",
    "usage_disagreement",
    "write_opencode_plugin_stub",
]
