"""The ACP client engine: any Agent Client Protocol agent, and presets for ``opencode acp``,
``claude-agent-acp`` (``claude-acp``), ``codex-acp``, Gemini CLI (``gemini``) and Qwen Code
(``qwen``).

See ``docs/engines/acp.md``.
"""

from ._engine import AcpDriver, AcpEngine, AcpTimeoutError, opencode_acp
from ._presets import claude_acp, codex_acp, gemini, qwen
from ._translate import AcpState, AcpTranslator

__all__ = [
    "AcpDriver",
    "AcpEngine",
    "AcpState",
    "AcpTimeoutError",
    "AcpTranslator",
    "claude_acp",
    "codex_acp",
    "gemini",
    "opencode_acp",
    "qwen",
]
