"""The ``codex exec`` command line of one turn (a pure function).

First turn: ``codex exec --json [options] -- <prompt>``; later turns continue the thread:
``codex exec resume --json [options] -- <thread_id> <prompt>``. The prompt always comes after
``--`` so it is never read as a flag. ``resume`` takes fewer flags than ``exec`` (no
``--sandbox``, ``--add-dir``, ``--profile``), so settings that must hold on every turn go through
``-c key=value`` overrides, which both accept.

Session options:

* ``model`` -> ``-m``; ``effort`` -> ``-c model_reasoning_effort=`` (``max`` is ``xhigh``);
* ``hitl``: ``False`` approves everything (``approval_policy="never"``,
  ``sandbox_mode="danger-full-access"``); ``True`` cannot ask in exec mode, so nothing that needs
  approval runs (``approval_policy="never"``, ``sandbox_mode="read-only"``) and an
  ``unsupported_option`` message says so — use ``codex-app-server`` to answer approvals;
  ``None`` keeps Codex's configuration;
* ``mode="plan"`` -> ``sandbox_mode="read-only"``;
* ``add_dirs`` -> ``--add-dir`` (first turn) and ``sandbox_workspace_write.writable_roots``;
* ``resume_id`` -> the first turn resumes that thread; ``continue_last`` -> ``resume --last``;
  ``fork`` -> ``codex exec fork <id>``;
* engine options: ``codex.profile`` (``-p``, first turn), ``codex.ephemeral`` (``--ephemeral``),
  ``codex.skip_git_repo_check`` (``--skip-git-repo-check``), ``codex.config.<key>`` (``-c
  <key>=<value>``, the value parsed as TOML by Codex);
* a turn's output schema (``output=``) -> ``--output-schema FILE``;
* ``extra_args`` go before ``--``. Not supported by ``codex exec``: ``system_prompt``,
  ``append_system_prompt``, ``max_turns``, ``thinking_budget``, ``allowed_tools``, ``agent_id``
  (each reported once per turn).

A prompt that is exactly ``-`` (Codex would read stdin) or too long for one argument goes through
stdin instead (``-`` as the argument, the prompt written to the pipe, which is then closed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..._vocabulary.options import SessionOptions

__all__ = ["PROMPT_ARG_LIMIT", "ExecArgs", "build_exec_argv"]

#: Longer prompts go through stdin (Linux limits one argument to 128 KiB).
PROMPT_ARG_LIMIT = 100_000

_EFFORT = {"low": "low", "medium": "medium", "high": "high", "max": "xhigh"}
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ExecArgs:
    argv: tuple[str, ...]
    #: The prompt for stdin when it is not on the command line.
    stdin: bytes | None
    unsupported: tuple[tuple[str, str], ...]


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _flag(options: SessionOptions, name: str) -> bool:
    value = options.option("codex", name)
    return value is not None and value.strip().lower() in _TRUE


def _unsupported(options: SessionOptions) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    reason = "codex exec has no such option"
    for name in ("system_prompt", "append_system_prompt", "max_turns", "thinking_budget"):
        if getattr(options, name) is not None:
            out.append((name, reason))
    if options.allowed_tools:
        out.append(("allowed_tools", reason))
    if options.agent_id is not None:
        out.append(("agent_id", reason))
    if options.hitl is True:
        out.append(
            (
                "hitl",
                "codex exec cannot ask for approval: tools that need it are refused "
                "(read-only sandbox); use the codex-app-server engine to answer approvals",
            )
        )
    return out


def build_exec_argv(
    binary: str | Sequence[str],
    options: SessionOptions,
    prompt: str,
    *,
    thread_id: str | None,
    output_schema: str | None = None,
) -> ExecArgs:
    """The argv of one turn. ``thread_id`` is the thread to continue (``None``: the first turn
    of a session that resumes nothing captured yet); ``output_schema`` the path of a JSON Schema
    file for the final answer (``--output-schema``)."""
    head = [binary] if isinstance(binary, str) else list(binary)
    first = thread_id is None
    resume_target = thread_id if thread_id is not None else options.resume_id
    argv: list[str] = [*head, "exec"]
    positional: list[str] = []
    if resume_target is not None and first and options.fork:
        argv.append("fork")
        positional.append(resume_target)
    elif resume_target is not None:
        argv.append("resume")
        positional.append(resume_target)
    elif first and options.continue_last:
        argv += ["resume", "--last"]
        if options.fork:
            argv[-2:] = ["fork", "--last"]
    resuming = len(argv) > len(head) + 1
    argv.append("--json")

    configs: list[tuple[str, str]] = []
    if options.hitl is False:
        configs += [
            ("approval_policy", _toml("never")),
            ("sandbox_mode", _toml("danger-full-access")),
        ]
    elif options.hitl is True or options.mode == "plan":
        configs += [("approval_policy", _toml("never")), ("sandbox_mode", _toml("read-only"))]
    if options.effort is not None:
        configs.append(("model_reasoning_effort", _toml(_EFFORT[options.effort])))
    if options.add_dirs:
        roots = "[" + ", ".join(_toml(d) for d in options.add_dirs) + "]"
        configs.append(("sandbox_workspace_write.writable_roots", roots))
    for key, value in sorted(options.options.items()):
        if key.startswith("codex.config."):
            configs.append((key.removeprefix("codex.config."), value))

    if options.model is not None:
        argv += ["-m", options.model]
    for key, value in configs:
        argv += ["-c", f"{key}={value}"]
    if not resuming:
        profile = options.option("codex", "profile")
        if profile:
            argv += ["-p", profile]
        for directory in options.add_dirs:
            argv += ["--add-dir", directory]
    if _flag(options, "ephemeral"):
        argv.append("--ephemeral")
    if _flag(options, "skip_git_repo_check"):
        argv.append("--skip-git-repo-check")
    if output_schema is not None:
        argv += ["--output-schema", output_schema]
    argv += list(options.extra_args)

    stdin: bytes | None = None
    argument = prompt
    if prompt == "-" or len(prompt.encode("utf-8")) > PROMPT_ARG_LIMIT:
        stdin, argument = prompt.encode("utf-8"), "-"
    argv += ["--", *positional, argument]
    return ExecArgs(argv=tuple(argv), stdin=stdin, unsupported=tuple(_unsupported(options)))
