"""The Claude Code command line for a :class:`~agentrun.SessionOptions` (a pure function).

One long-lived ``claude -p`` process per session in streaming input mode: user turns and control
requests are written to its stdin as stream-json lines, so no prompt ever appears on the command
line. Values that could be read as flags were already rejected by ``SessionOptions`` validation.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..._vocabulary.errors import ConfigurationError
from ..._vocabulary.options import SessionOptions

__all__ = ["PERMISSION_MODES", "build_argv", "needs_sandbox_env"]

#: Values ``--permission-mode`` accepts in the pinned CLI (``default`` is accepted too).
PERMISSION_MODES = frozenset(
    {"default", "acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan"}
)

_BASE = (
    "-p",
    "--verbose",
    "--output-format",
    "stream-json",
    "--input-format",
    "stream-json",
)


def permission_mode(session: SessionOptions) -> str | None:
    """The ``--permission-mode`` value, if any: plan mode > ``claude.permission_mode`` >
    ``hitl=False`` (bypass)."""
    if session.mode == "plan":
        return "plan"
    explicit = session.option("claude", "permission_mode")
    if explicit is not None:
        if explicit not in PERMISSION_MODES:
            raise ConfigurationError(
                f"claude.permission_mode {explicit!r} is not one of "
                f"{', '.join(sorted(PERMISSION_MODES))}",
                option="options.claude.permission_mode",
                engine="claude",
            )
        return explicit
    if session.hitl is False:
        return "bypassPermissions"
    return None


def needs_sandbox_env(session: SessionOptions, *, is_root: bool | None = None) -> bool:
    """True when the CLI would refuse to start as root without ``IS_SANDBOX=1``."""
    if is_root is None:
        geteuid = getattr(os, "geteuid", None)
        is_root = geteuid is not None and geteuid() == 0
    return bool(is_root) and permission_mode(session) == "bypassPermissions"


def build_argv(session: SessionOptions, binary: str | Sequence[str]) -> list[str]:
    """The full argv: ``binary`` (a path, or an argv prefix such as ``[python, fake.py]``)
    followed by the flags for ``session``."""
    argv = [binary] if isinstance(binary, str) else list(binary)
    argv += _BASE
    if session.partial_messages:
        argv.append("--include-partial-messages")
    if session.model is not None:
        argv += ["--model", session.model]
    if session.agent_id is not None:
        argv += ["--agent", session.agent_id]
    if session.system_prompt is not None:
        argv += ["--system-prompt", session.system_prompt]
    if session.append_system_prompt is not None:
        argv += ["--append-system-prompt", session.append_system_prompt]
    mode = permission_mode(session)
    if mode is not None:
        argv += ["--permission-mode", mode]
    if session.hitl is True or session.question_handler is not None:
        # Permission prompts (and AskUserQuestion) arrive as control requests on stdout,
        # answered on stdin.
        argv += ["--permission-prompt-tool", "stdio"]
    if session.max_turns is not None:
        argv += ["--max-turns", str(session.max_turns)]
    if session.thinking_budget is not None:
        argv += ["--max-thinking-tokens", str(session.thinking_budget)]
    if session.effort is not None:
        argv += ["--effort", session.effort]
    if session.resume_id is not None:
        argv += ["--resume", session.resume_id]
    elif session.continue_last:
        argv.append("--continue")
    if session.fork:
        argv.append("--fork-session")
    # Variadic options last, each list closed by the next flag (so a value never runs into
    # another option's values).
    for directory in session.add_dirs:
        argv += ["--add-dir", directory]
    if session.allowed_tools:
        argv += ["--allowedTools", ",".join(session.allowed_tools)]
    argv += session.extra_args
    return argv
