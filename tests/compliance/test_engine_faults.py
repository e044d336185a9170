"""The engine compliance suite: every engine, driven by name through its real pinned agent, meets
the faults a real agent can throw at it.

Run it for some engines only with ``make compliance ENGINES=claude,codex``
(the default is every engine of :data:`agentrun.offline.EMBEDDED_ENGINES` plus the toy engine of
the engine-writing guide). The agent runs behind the fault shim of the testing kit
(:func:`agentrun.testing.fault_shim`), which passes everything through until a prompt carries a
fault marker. Per engine, on asyncio and trio:

* a clean turn, then ``garbage`` (undecodable and unknown lines) and ``huge`` (a line beyond the
  64 MiB limit): the turn still ends with its result, the junk arrives as ``error`` messages, the
  next turn is clean;
* ``detach`` (a descendant that left the process group holds stdout): the turn ends, and the
  descendant is gone once the session is closed;
* ``hang`` (the agent goes silent and ignores SIGINT/SIGTERM): ``timeout`` raises
  :class:`TurnTimeoutError` within ``timeout + cancel_grace`` (plus slack); a long-lived session
  is then over (:class:`SessionTerminatedError`), a spawn-per-turn one goes on;
* ``crash`` mid-turn: a typed :class:`AgentrunError` (the exit code and stderr tail when the
  engine saw the exit), the messages before the crash delivered;
* afterwards: no process of the session alive, no file descriptor of the test process leaked.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from agents_support import descendants, require_engine

from agentrun import (
    AgentrunError,
    Engine,
    EngineUnavailableError,
    Message,
    MessageType,
    ProcessExitError,
    Session,
    SessionOptions,
    SessionTerminatedError,
    TurnTimeoutError,
    get_engine,
    run_turn,
)
from agentrun._wire.programs import resolve_binary
from agentrun.offline import EMBEDDED_ENGINES, ModelServer, Script, embedded_engine
from agentrun.testing import fault_prompt, fault_shim

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

ANSWER = "compliance answer"
#: Spawn-per-turn engines start a new process every turn: a fault never ends their session.
PER_TURN = {"codex", "opencode", "toy"}


def _engines() -> list[str]:
    chosen = os.environ.get("AGENTRUN_COMPLIANCE_ENGINES")
    if chosen:
        return [name.strip() for name in chosen.split(",") if name.strip()]
    return [*sorted(EMBEDDED_ENGINES), "toy"]


ENGINES = _engines()


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


@asynccontextmanager
async def _session(name: str, tmp_path: Path) -> AsyncIterator[tuple[Session, Path]]:
    """A session of engine ``name`` whose agent runs behind the fault shim; once the block and
    the model server are closed, nothing of it may be left: no process, no file descriptor."""
    before_procs = descendants()
    before_fds = _open_fds()
    async with _started(name, tmp_path) as started:
        yield started
    deadline = time.monotonic() + 10
    while descendants() - before_procs and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert descendants() - before_procs == set(), "processes of the session outlived it"
    assert _open_fds() - before_fds == set(), "file descriptors leaked"


@asynccontextmanager
async def _started(name: str, tmp_path: Path) -> AsyncIterator[tuple[Session, Path]]:
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    if name == "toy":
        from engines.toy.toy_engine import ToyEngine

        engine: Engine = ToyEngine()
        shim, shim_env = fault_shim(agent_dir, sys.executable)
        options = SessionOptions(
            cwd=str(workspace), env={"TOY_HOME": str(agent_dir), **shim_env}, binary=shim
        )
        yield await _enter(engine, options), Path(shim_env["AGENTRUN_FAULT_PIDFILE"])
        return
    async with ModelServer(Script(turns=[], exhausted_text=ANSWER)) as server:
        shim, shim_env = fault_shim(agent_dir, _agent_program(name, agent_dir))
        engine, options = embedded_engine(
            name, server.url, agent_dir, cwd=str(workspace), binary=shim
        )
        options = options.model_copy(update={"env": {**options.env, **shim_env}})
        yield await _enter(engine, options), Path(shim_env["AGENTRUN_FAULT_PIDFILE"])


def _agent_program(name: str, agent_dir: Path) -> str:
    """The one program the fault shim wraps: the pinned binary, or for the presets that run a
    script under a pinned Node.js, a small launcher of both."""
    if name in ("claude-acp", "codex-acp", "qwen", "gemini"):
        from agentrun.engines.acp import AcpEngine

        engine = get_engine(name)
        assert isinstance(engine, AcpEngine)
        try:
            argv = engine.command_for(SessionOptions())
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        launcher = agent_dir / f"{name}-launcher"
        # The preset's own arguments (``--acp``) come back from the engine through the shim:
        # they are what it adds after an explicit program.
        own_args = engine.command_for(SessionOptions(binary=sys.executable))[1:]
        program = argv[: len(argv) - len(own_args)]
        launcher.write_text("#!/bin/sh\nexec " + shlex.join(program) + ' "$@"\n')
        launcher.chmod(0o755)
        return str(launcher)
    program = EMBEDDED_ENGINES[name]
    require_engine(program)
    return resolve_binary(program)


async def _enter(engine: Engine, options: SessionOptions) -> Session:
    session = engine.start(options)
    session.cancel_grace = 1.0
    return session


def _pids(pidfile: Path) -> list[int]:
    if not pidfile.exists():
        return []
    return [int(line) for line in pidfile.read_text().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _gone(pids: list[int]) -> bool:
    with anyio.move_on_after(5):
        while any(_alive(p) for p in pids):
            await anyio.sleep(0.05)
    return not any(_alive(p) for p in pids)


def _toy_answer(prompt: str) -> str:
    return f"you said: {prompt}"


def _expected(name: str) -> Callable[[str], str]:
    return _toy_answer if name == "toy" else (lambda prompt: ANSWER)


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _junk_turn(
    engine_name: str, tmp_path: Path, fault: str
) -> tuple[list[str], list[Message]]:
    """A clean turn, a turn with the ``fault``'s junk lines, a clean turn: the junk's error codes
    and the faulty turn's messages."""
    expected = _expected(engine_name)
    async with _session(engine_name, tmp_path) as (session, _):
        async with session:
            first = await run_turn(session, "first", timeout=120)
            seen: list[Message] = []
            prompt = fault_prompt(fault)
            noisy = await run_turn(session, prompt, on_message=seen.append, timeout=120)
            last = await run_turn(session, "last", timeout=120)
    assert first.has_result and first.text == expected("first")
    assert noisy.has_result and noisy.text == expected(prompt)
    assert last.has_result and last.ok and last.text == expected("last")
    assert all(m.turn == 2 for m in seen)
    codes = [m.error.code for m in seen if m.type is MessageType.ERROR and m.error is not None]
    return [c for c in codes if c is not None], seen


async def test_garbage_in_a_turn_is_reported_and_the_session_goes_on(
    engine_name: str, tmp_path: Path
) -> None:
    codes, _ = await _junk_turn(engine_name, tmp_path, "garbage")
    assert {"invalid_utf8", "invalid_json"} <= set(codes)


async def test_a_line_beyond_the_limit_is_skipped_and_reported(
    engine_name: str, tmp_path: Path
) -> None:
    codes, _ = await _junk_turn(engine_name, tmp_path, "huge")
    assert codes == ["line_too_long"]


async def test_a_detached_descendant_neither_wedges_the_turn_nor_outlives_the_session(
    engine_name: str, tmp_path: Path
) -> None:
    expected = _expected(engine_name)
    async with _session(engine_name, tmp_path) as (session, pidfile):
        async with session:
            await run_turn(session, "first", timeout=120)
            prompt = fault_prompt("detach")
            summary = await run_turn(session, prompt, timeout=120)
            assert summary.has_result and summary.text == expected(prompt)
            pids = _pids(pidfile)
            assert pids, "the shim left no descendant"
        assert await _gone(pids), f"descendants {pids} outlived the session"


async def test_a_silent_agent_ignoring_signals_times_out_within_the_bound(
    engine_name: str, tmp_path: Path
) -> None:
    expected = _expected(engine_name)
    async with _session(engine_name, tmp_path) as (session, _):
        async with session:
            await run_turn(session, "first", timeout=120)
            t0 = time.monotonic()
            with pytest.raises(TurnTimeoutError) as caught:
                await run_turn(session, fault_prompt("hang"), timeout=3)
            # timeout 3 s + cancel_grace 1 s + stopping the agent; generous for a busy CI box.
            assert time.monotonic() - t0 < 15
            assert caught.value.summary is not None
            if engine_name in PER_TURN:
                after = await run_turn(session, "after", timeout=120)
                assert after.has_result and after.text == expected("after")
            else:
                with pytest.raises(SessionTerminatedError):
                    await run_turn(session, "after", timeout=30)


async def test_a_crash_mid_turn_is_a_typed_error_with_what_came_before(
    engine_name: str, tmp_path: Path
) -> None:
    async with _session(engine_name, tmp_path) as (session, _):
        async with session:
            await run_turn(session, "first", timeout=120)
            seen: list[Message] = []
            with pytest.raises(AgentrunError) as caught:
                await run_turn(session, fault_prompt("crash"), on_message=seen.append, timeout=120)
            error = caught.value
            assert error.summary is not None
            assert seen, "the messages before the crash were not delivered"
            if isinstance(error, ProcessExitError):
                assert error.exit_code == 3
                assert "simulated crash" in error.stderr_tail
            if engine_name not in PER_TURN:
                with pytest.raises((ProcessExitError, SessionTerminatedError)):
                    await run_turn(session, "after", timeout=30)
