"""The Claude Code engine (``claude -p`` in stream-json mode). See ``docs/engines/claude.md``."""

from ._argv import PERMISSION_MODES, build_argv
from ._engine import ClaudeEngine, ClaudeSession
from ._translate import ClaudeTranslator

__all__ = ["PERMISSION_MODES", "ClaudeEngine", "ClaudeSession", "ClaudeTranslator", "build_argv"]
