"""The Claude Code engine (``claude -p`` in stream-json mode). See ``docs/engines/claude.md``."""

from ._argv import PERMISSION_MODES, build_argv
from ._engine import ClaudeDriver, ClaudeEngine
from ._translate import ClaudeTranslator

__all__ = ["PERMISSION_MODES", "ClaudeDriver", "ClaudeEngine", "ClaudeTranslator", "build_argv"]
