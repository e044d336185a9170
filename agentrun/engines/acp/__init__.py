"""The ACP client engine: any Agent Client Protocol agent, and the ``opencode acp`` preset.

See ``docs/engines/acp.md``.
"""

from ._engine import AcpEngine, AcpSession, AcpTimeoutError, opencode_acp
from ._translate import AcpState, AcpTranslator

__all__ = [
    "AcpEngine",
    "AcpSession",
    "AcpState",
    "AcpTimeoutError",
    "AcpTranslator",
    "opencode_acp",
]
