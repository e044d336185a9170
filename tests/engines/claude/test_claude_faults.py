"""Claude engine against fake programs that break in every way a real CLI can."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest
from repo_paths import FAKES

from agentrun._turns.run import run_turn
from agentrun._turns.session import Session
from agentrun._vocabulary.errors import ProcessExitError, SessionTerminatedError, TurnTimeoutError
from agentrun._vocabulary.messages import Message, MessageType
from agentrun._vocabulary.options import SessionOptions
from agentrun.engines.claude import ClaudeDriver, ClaudeEngine

FAKE = FAKES / "claude_fake.py"

pytestmark = pytest.mark.anyio


def _engine(mode: str, **kwargs: float) -> ClaudeEngine:
    return ClaudeEngine(
        argv_prefix=[sys.executable, str(FAKE), mode],
        cancel_grace=kwargs.pop("cancel_grace", 1.0),
        close_stdin_timeout=kwargs.pop("close_stdin_timeout", 1.0),
        terminate_timeout=kwargs.pop("terminate_timeout", 1.0),
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has no open state worth worrying about.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


async def _collect(process: Session, prompt: str, **kw: float) -> list[Message]:
    seen: list[Message] = []
    await run_turn(process, prompt, on_message=seen.append, **kw)
    return seen


async def test_control_case_two_turns() -> None:
    async with _engine("ok").start(SessionOptions(partial_messages=False)) as process:
        one = await run_turn(process, "a")
        two = await run_turn(process, "b")
    assert (one.text, two.text) == ("answer 1", "answer 2")
    assert two.usage is not None and two.usage.cost_usd == 0.001


async def test_crash_mid_turn_raises_with_stderr_and_delivers_earlier_messages() -> None:
    seen: list[Message] = []
    async with _engine("crash").start() as process:
        assert isinstance(process.driver, ClaudeDriver)
        with pytest.raises(ProcessExitError) as info:
            await run_turn(process, "a", on_message=seen.append)
        with pytest.raises(SessionTerminatedError):
            await run_turn(process, "again")
    assert info.value.exit_code == 3
    assert "simulated crash" in info.value.stderr_tail
    assert [m.text for m in seen if m.type is MessageType.TEXT] == ["before the fault 1"]
    assert info.value.summary is not None and not info.value.summary.ok


async def test_hang_idle_timeout_kills_the_process() -> None:
    async with _engine("hang").start() as process:
        driver = process.driver
        assert isinstance(driver, ClaudeDriver)
        pid = driver.pid
        assert pid is not None
        t0 = time.monotonic()
        with pytest.raises(TurnTimeoutError) as info:
            await run_turn(process, "a", idle_timeout=0.5)
        assert time.monotonic() - t0 < 5
        assert info.value.summary is not None and "before the fault 1" in info.value.summary.text
        with anyio.fail_after(5):
            while _alive(pid):
                await anyio.sleep(0.05)
        with pytest.raises(SessionTerminatedError):
            await run_turn(process, "again")


async def test_sigterm_ignored_is_killed_on_close() -> None:
    t0 = time.monotonic()
    async with _engine("term").start() as process:
        driver = process.driver
        assert isinstance(driver, ClaudeDriver)
        pid = driver.pid
        assert pid is not None
        with anyio.move_on_after(0.5):
            await run_turn(process, "a")
    assert time.monotonic() - t0 < 8
    assert pid is not None and not _alive(pid)


async def test_grandchild_is_not_orphaned(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    session = SessionOptions(env={"FAKE_PIDFILE": str(pidfile)})
    async with _engine("grandchild").start(session) as process:
        with pytest.raises(ProcessExitError) as info:
            await run_turn(process, "a")
    assert info.value.exit_code == 4
    grandchild = int(pidfile.read_text())
    with anyio.fail_after(5):
        while _alive(grandchild):
            await anyio.sleep(0.05)


async def test_exit_is_seen_although_a_detached_child_holds_stdout(tmp_path: Path) -> None:
    # The agent exits mid-turn; a child that called setsid() still holds its stdout. No
    # timeout is given: the turn must still end, with the exit, and the next one fail fast.
    pidfile = tmp_path / "detached.pid"
    session = SessionOptions(env={"FAKE_PIDFILE": str(pidfile)})
    with anyio.fail_after(15):
        async with _engine("detached").start(session) as process:
            with pytest.raises(ProcessExitError) as info:
                await run_turn(process, "a")
            t0 = time.monotonic()
            with pytest.raises((ProcessExitError, SessionTerminatedError)):
                await run_turn(process, "b")
            assert time.monotonic() - t0 < 2
    assert info.value.exit_code == 4
    detached = int(pidfile.read_text())
    with anyio.fail_after(5):
        while _alive(detached):
            await anyio.sleep(0.05)


async def test_no_trailing_newline_still_delivers_the_result() -> None:
    async with _engine("nonewline").start() as process:
        summary = await run_turn(process, "a")
        assert summary.ok and summary.text == "answer 1"
        with pytest.raises(ProcessExitError):
            await run_turn(process, "b")


async def test_huge_line_is_skipped_with_an_error_message() -> None:
    engine = ClaudeEngine(argv_prefix=[sys.executable, str(FAKE), "huge"])
    engine.max_line_bytes = 1 << 20
    async with engine.start() as process:
        seen = await _collect(process, "a")
    errors = [m.error for m in seen if m.type is MessageType.ERROR and m.error is not None]
    assert [e.code for e in errors] == ["line_too_long"]
    assert seen[-1].type is MessageType.RESULT and seen[-1].text == "answer 1"


async def test_garbage_bytes_become_error_messages() -> None:
    async with _engine("garbage").start() as process:
        seen = await _collect(process, "a")
    codes = [m.error.code for m in seen if m.type is MessageType.ERROR and m.error is not None]
    assert len(codes) == 2
    assert set(codes) <= {"invalid_utf8", "invalid_json"}
    assert seen[-1].type is MessageType.RESULT
