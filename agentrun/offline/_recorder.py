"""Record a real agent's wire traffic against the embedded model server (fixtures).

:func:`record` starts the scripted :class:`~agentrun.offline.ModelServer`, points the agent at it
with its offline configuration (:func:`~agentrun.offline.offline_config`), runs the prompts
through :func:`~agentrun.run_turn` and writes two files:

``<out>.jsonl``
    The raw wire. Engines whose ``wire_format`` is ``"stdout"`` (Claude Code, OpenCode run):
    every stdout line exactly as read. ``"jsonrpc"`` engines (ACP): both directions, one
    ``{"dir": "send"|"recv", "msg": {...}}`` object per line.
``<out>.meta.json``
    Agent name and version, argv, the *names* of the environment variables (never values),
    exit code, stderr tail, wall time, the script, the prompts, what each turn ended with and
    how the scenario was driven. Each turn's ``ledger`` says what the server served during it,
    from :attr:`ModelServer.ledger`: the main model calls (how many, their HTTP statuses,
    whether every answer was written whole), their summed ``usage`` in the library's
    convention, and how many side requests. A replay's usage is checked against it.

Everything runs on 127.0.0.1; run it inside ``python -m agentrun.offline netns`` to be sure
nothing else is reachable.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

import anyio

from .._turns.run import run_turn
from .._turns.session import Session
from .._vocabulary.errors import AgentrunError
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.options import SessionOptions
from .._vocabulary.permissions import approve_all, deny_all
from ..engines._registry import get_engine
from ._embedded import offline_config
from ._modelserver import ModelServer
from ._script import Script

__all__ = ["record"]

#: Kept in the meta file.
_STDERR_TAIL_CHARS = 8192
#: The most seconds a turn's ledger waits for the entries of abandoned model calls.
_SETTLE_S = 5.0


async def record(
    engine_name: str,
    *,
    prompts: list[str],
    script: Script,
    out: Path,
    session: dict[str, Any] | None = None,
    interrupt_after: float | None = None,
    sigterm_after: float | None = None,
    permission: Literal["approve", "deny", "none"] | None = None,
    workdir: Path | None = None,
    turn_timeout: float = 90.0,
    engine_options: Mapping[str, Any] | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """Run ``prompts`` (one turn each) through a real ``engine_name`` agent and record it.

    ``session`` holds extra :class:`SessionOptions` options (JSON-able: ``hitl``, ``max_turns``,
    ``resume_id``...). ``interrupt_after`` cancels the first turn after that many seconds (the
    engine's interrupt path), ``sigterm_after`` sends SIGTERM to the agent's process group
    instead. ``permission`` installs an approve-all or deny-all handler (with ``hitl=True``;
    ``"none"``: hitl without a handler). ``workdir`` keeps HOME and the workspace between
    recordings (resume needs the first session's files). Returns the meta dictionary.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    owned: tempfile.TemporaryDirectory[str] | None = None
    if workdir is None:
        owned = tempfile.TemporaryDirectory(prefix=f"agentrun-record-{engine_name}-")
        workdir = Path(owned.name)
    try:
        return await _record(
            engine_name,
            prompts=prompts,
            script=script,
            out=out,
            session_options=dict(session or {}),
            interrupt_after=interrupt_after,
            sigterm_after=sigterm_after,
            permission=permission,
            workdir=Path(workdir),
            turn_timeout=turn_timeout,
            engine_options=dict(engine_options or {}),
            note=note,
        )
    finally:
        if owned is not None:
            owned.cleanup()


async def _record(
    engine_name: str,
    *,
    prompts: list[str],
    script: Script,
    out: Path,
    session_options: dict[str, Any],
    interrupt_after: float | None,
    sigterm_after: float | None,
    permission: str | None,
    workdir: Path,
    turn_timeout: float,
    engine_options: dict[str, Any],
    note: str | None,
) -> dict[str, Any]:
    engine = get_engine(engine_name, **engine_options)
    wire_format = engine.wire_format
    workspace = workdir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    wire: list[bytes] = []
    stderr_lines: list[str] = []
    turns: list[dict[str, Any]] = []
    started = time.monotonic()
    agent_version: str | None = None

    def tap(direction: str, line: bytes) -> None:
        if direction == "stderr":
            stderr_lines.append(line.decode("utf-8", "replace"))
        elif wire_format == "jsonrpc":
            try:
                msg: Any = json.loads(line)
            except ValueError:
                msg = line.decode("utf-8", "replace")
            wire.append(json.dumps({"dir": direction, "msg": msg}, ensure_ascii=False).encode())
        elif direction == "recv":
            wire.append(line)

    def on_message(message: Message) -> None:
        nonlocal agent_version
        if message.type is MessageType.INIT and message.init is not None:
            agent_version = agent_version or message.init.agent_version

    process: Session | None = None
    async with ModelServer(script) as server:
        config = offline_config(engine_name, server.url, workdir)
        options = dict(session_options)
        if config.model is not None:
            options.setdefault("model", config.model)
        options["extra_args"] = (*config.args, *options.get("extra_args", ()))
        if permission is not None:
            options["hitl"] = True
            if permission == "approve":
                options["permission_handler"] = approve_all
            elif permission == "deny":
                options["permission_handler"] = deny_all
        options.setdefault("cwd", str(workspace))
        sess = SessionOptions(env=dict(config.env), inherit_env=False, **options)
        process = engine.start(sess)
        process.wire_tap = tap
        async with process:
            for number, prompt in enumerate(prompts, 1):
                outcome: dict[str, Any] = {"turn": number, "prompt": prompt}
                t0 = time.monotonic()
                mark = server.ledger.mark()
                try:
                    if number == 1 and interrupt_after is not None:
                        with anyio.move_on_after(interrupt_after) as scope:
                            await run_turn(process, prompt, on_message=on_message)
                        outcome["interrupted"] = scope.cancelled_caught
                    elif number == 1 and sigterm_after is not None:
                        failure: list[AgentrunError] = []

                        async def signalled(
                            prompt: str = prompt, failure: list[AgentrunError] = failure
                        ) -> None:
                            try:
                                await run_turn(
                                    process, prompt, on_message=on_message, timeout=turn_timeout
                                )
                            except AgentrunError as exc:
                                failure.append(exc)

                        async with anyio.create_task_group() as tg:
                            tg.start_soon(_sigterm_later, process, sigterm_after)
                            await signalled()
                            tg.cancel_scope.cancel()
                        if failure:
                            raise failure[0]
                    else:
                        summary = await run_turn(
                            process, prompt, on_message=on_message, timeout=turn_timeout
                        )
                        outcome["ok"] = summary.ok
                        outcome["resume_id"] = summary.resume_id
                        if summary.errors:
                            outcome["errors"] = [e.code for e in summary.errors]
                except AgentrunError as exc:
                    outcome["raised"] = type(exc).__name__
                    outcome["message"] = exc.message[:500]
                outcome["seconds"] = round(time.monotonic() - t0, 3)
                outcome["ledger"] = await _served(server, mark)
                turns.append(outcome)
                if "raised" in outcome and process.closed:
                    break
        requests = len(server.model_requests)
    wall = round(time.monotonic() - started, 3)
    out_jsonl = out.with_suffix(".jsonl")
    out_jsonl.write_bytes(b"".join(line + b"\n" for line in wire))
    driver = process.driver  # the engine's own extras: its files, its process
    sidecars = getattr(driver, "sidecar_files", None)
    if callable(sidecars):
        # Files the agent wrote beside its stdout (Codex's rollout) that replay also reads.
        files = cast("dict[str, Path]", sidecars())
        for suffix, source in files.items():
            shutil.copyfile(source, out.with_name(f"{out.name}.{suffix}"))
    stderr_tail = getattr(driver, "stderr_tail", None)
    tail = stderr_tail() if callable(stderr_tail) else "\n".join(stderr_lines)
    meta: dict[str, Any] = {
        "name": out.name,
        "engine": engine_name,
        "wire_format": wire_format,
        "agent_version": agent_version,
        "argv": [_relative(a) for a in getattr(driver, "argv", [])],
        "env_names": sorted(config.env),
        "session": {k: v for k, v in options.items() if _jsonable(v) and k != "cwd"},
        "prompts": prompts,
        "driver": {
            "interrupt_after": interrupt_after,
            "sigterm_after": sigterm_after,
            "permission": permission,
        },
        "turns": turns,
        "exit_code": getattr(driver, "returncode", None),
        "stderr_tail": str(tail)[-_STDERR_TAIL_CHARS:],
        "model_requests": requests,
        "wall_time_s": wall,
        "script": script.model_dump(mode="json", exclude_none=True),  # loads back as it is
    }
    if note:
        meta["note"] = note
    out.with_suffix(".meta.json").write_text(
        json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return meta


async def _served(server: ModelServer, mark: int) -> dict[str, Any]:
    """What the server served during a turn, from its ledger: the main model calls, their
    usage in the library's convention, and the side requests apart. A call the agent abandoned
    is entered once the server notices, so this waits (bounded) for every call received."""
    with anyio.move_on_after(_SETTLE_S):
        while _unsettled(server):  # noqa: ASYNC110 (the server's thread appends)
            await anyio.sleep(0.05)
    served = server.ledger.since(mark)
    main = served.main
    figures = main.usage.model_dump(
        include={
            "input_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "output_tokens",
            "thinking_tokens",
        }
    )
    return {
        "calls": len(main),
        "statuses": [e.status for e in main.entries],
        "complete": all(e.complete for e in main.entries),
        "usage": figures,
        "side_calls": len(served.side),
    }


def _unsettled(server: ModelServer) -> set[int]:
    """The model calls received that have no ledger entry yet."""
    return {r.seq for r in server.model_requests} - {e.seq for e in server.ledger.entries}


async def _sigterm_later(process: Session, seconds: float) -> None:
    await anyio.sleep(seconds)
    pid = getattr(process.driver, "pid", None)
    if isinstance(pid, int):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)


def _relative(arg: str) -> str:
    """Paths inside the repository are kept relative so fixtures do not depend on a checkout."""
    root = str(Path(__file__).resolve().parents[2]) + os.sep
    return arg.replace(root, "")


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
