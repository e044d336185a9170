"""The ``opencode run`` command line of one turn, and the options it cannot honour.

The prompt is **never** on the command line. OpenCode 1.18 wraps every positional word that
contains a space in double quotes before sending it to the model (``opencode run "say hi"`` makes
the model read ``"say hi"`` with the quotes), and a prompt that starts with ``-`` would be parsed
as a flag. When stdin is not a terminal, ``opencode run`` without a message reads all of stdin
and sends it unchanged, so the engine writes the prompt to stdin and closes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..._vocabulary.options import SessionOptions

__all__ = ["TurnArgs", "build_argv", "unsupported_options"]


@dataclass(frozen=True)
class TurnArgs:
    """The argv of one turn (without the prompt) and what it could not express."""

    argv: tuple[str, ...]
    #: ``(option, reason)`` for each session option this turn ignores.
    unsupported: tuple[tuple[str, str], ...] = field(default=())


def unsupported_options(session: SessionOptions) -> list[tuple[str, str]]:
    """Session options ``opencode run`` cannot honour, with the reason (stable order)."""
    out: list[tuple[str, str]] = []
    if session.system_prompt is not None:
        out.append(("system_prompt", "opencode run has no system prompt flag (use an agent)"))
    if session.append_system_prompt is not None:
        out.append(("append_system_prompt", "opencode run has no system prompt flag"))
    if session.max_turns is not None:
        out.append(("max_turns", "opencode run has no step limit flag"))
    if session.allowed_tools:
        out.append(("allowed_tools", "use OPENCODE_PERMISSION or an agent's tool settings"))
    if session.add_dirs:
        out.append(("add_dirs", "opencode run works in one directory"))
    if session.hitl is True and session.permission_handler is not None:
        out.append(
            (
                "permission_handler",
                "opencode run cannot ask: permissions set to 'ask' are auto-rejected and "
                "recorded as denials; use the ACP engine for permission callbacks",
            )
        )
    if session.mode == "plan" and session.agent_id is not None and session.agent_id != "plan":
        out.append(("mode", f"mode='plan' ignored: agent_id {session.agent_id!r} is used"))
    if session.thinking_budget is not None:
        out.append(
            ("thinking_budget", "only turns reasoning output on (--thinking); no token budget")
        )
    return out


def build_argv(
    binary: str,
    session: SessionOptions,
    *,
    resume_id: str | None,
    first_turn: bool,
) -> TurnArgs:
    """``opencode run --format json ...`` for one turn.

    ``resume_id`` is the session id to continue: the id captured from an earlier turn of this
    process, or ``SessionOptions.resume_id`` on the first turn. ``fork`` and ``continue_last``
    apply to the first turn only; later turns continue the (possibly forked) session by its id.
    """
    argv: list[str] = [binary, "run", "--format", "json"]
    if session.model is not None:
        argv += ["--model", session.model]
    agent = session.agent_id
    if agent is None and session.mode == "plan":
        agent = "plan"
    if agent is not None:
        argv += ["--agent", agent]
    if resume_id is not None:
        argv += ["--session", resume_id]
        if first_turn and session.fork and session.resume_id == resume_id:
            argv.append("--fork")
    elif first_turn and session.continue_last:
        argv.append("--continue")
        if session.fork:
            argv.append("--fork")
    if session.thinking_budget is not None or session.effort is not None:
        argv.append("--thinking")
    unsupported = unsupported_options(session)
    variant = session.option("opencode", "variant") or session.effort
    if variant:
        if variant.startswith("-"):
            unsupported.append(("opencode.variant", f"{variant!r} would be read as a flag"))
        else:
            argv += ["--variant", variant]
    title = session.option("opencode", "title")
    if title and first_turn and resume_id is None:
        if title.startswith("-"):
            unsupported.append(("opencode.title", f"{title!r} would be read as a flag"))
        else:
            argv += ["--title", title]
    if session.hitl is False:
        argv.append("--auto")
    argv += list(session.extra_args)
    return TurnArgs(argv=tuple(argv), unsupported=tuple(unsupported))
