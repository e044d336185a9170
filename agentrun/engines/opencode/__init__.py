"""OpenCode in ``run`` mode: ``opencode run --format json``, one process per turn.

:class:`OpenCodeEngine` drives the program; :class:`OpenCodeTranslator` turns its JSON lines into
messages (also used by ``agentrun replay --engine opencode``). See ``docs/engines/opencode.md``.
For permission callbacks use the ACP engine (``opencode acp``): run mode cannot ask.
"""

from ._argv import TurnArgs, build_argv, unsupported_options
from ._engine import OpenCodeDriver, OpenCodeEngine
from ._translate import STOP_REASONS, OpenCodeTranslator, step_usage

__all__ = [
    "STOP_REASONS",
    "OpenCodeDriver",
    "OpenCodeEngine",
    "OpenCodeTranslator",
    "TurnArgs",
    "build_argv",
    "step_usage",
    "unsupported_options",
]
