"""``timeout`` bounds the caller's wall time, whatever the agent or the callback does.

An agent that ignores its interrupt is stopped by force ``cancel_grace`` seconds after the cancel
began; an async ``on_message`` that takes too long is cancelled at ``timeout + cancel_grace``.
Each case takes more than 8 s on the code before these bounds existed. No test asserts a time
tighter than several seconds of slack: they prove a bound, not a speed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest
from repo_paths import FAKES

from agentrun import Message, SessionOptions, run_turn
from agentrun._turns.session import Session
from agentrun._vocabulary.errors import SessionTerminatedError, TurnTimeoutError
from agentrun.engines.acp import AcpEngine
from agentrun.engines.claude import ClaudeEngine

pytestmark = pytest.mark.anyio

GRACE = 0.5
#: timeout 1 s + grace 0.5 s + stopping the agent; the unbounded code took 8 s or more.
WALL_BOUND = 5.0


async def _timed_out(session: Session, prompt: str, **kwargs: object) -> TurnTimeoutError:
    session.cancel_grace = GRACE
    t0 = time.monotonic()
    with pytest.raises(TurnTimeoutError) as caught:
        await run_turn(session, prompt, timeout=1, **kwargs)  # type: ignore[arg-type]
    assert time.monotonic() - t0 < WALL_BOUND
    assert caught.value.summary is not None
    return caught.value


async def test_claude_that_ignores_the_interrupt_is_stopped_within_the_grace() -> None:
    engine = ClaudeEngine(argv_prefix=[sys.executable, str(FAKES / "claude_fake.py"), "hang"])
    async with engine.start(SessionOptions(partial_messages=False)) as session:
        await _timed_out(session, "a")
        with pytest.raises(SessionTerminatedError):
            await run_turn(session, "b", timeout=5)


async def test_acp_agent_that_ignores_the_cancel_is_stopped_within_the_grace(
    tmp_path: Path,
) -> None:
    engine = AcpEngine([sys.executable, str(FAKES / "acp_agent.py")], terminate_timeout=1.0)
    async with engine.start(SessionOptions(cwd=str(tmp_path))) as session:
        await _timed_out(session, "deaf")
        with pytest.raises(SessionTerminatedError):
            await run_turn(session, "next", timeout=5)


async def test_spawn_per_turn_agent_that_ignores_signals_is_killed_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    from engines.toy.toy_engine import ToyEngine

    options = SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})
    async with ToyEngine().start(options) as session:
        await run_turn(session, "first", timeout=10)
        await _timed_out(session, "stubborn")
        after = await run_turn(session, "hello", timeout=10)
    assert after.text == "you said: hello"


async def test_a_slow_callback_cannot_stretch_the_timeout(tmp_path: Path) -> None:
    async def slow(message: Message) -> None:
        await anyio.sleep(8)

    engine = AcpEngine([sys.executable, str(FAKES / "acp_agent.py")])
    async with engine.start(SessionOptions(cwd=str(tmp_path))) as session:
        error = await _timed_out(session, "hello", on_message=slow)
        assert error.kind == "total"
        # The session is still usable: the agent itself did nothing wrong.
        summary = await run_turn(session, "again", timeout=10)
    assert summary.text == "echo: again"


# -- the caller's own cancel is bounded the same way ---------------------------------------------

#: grace 0.5 s + stopping the agent + generous slack; before, a caller's cancel waited for the
#: engine's own interrupt timeout (10 s for Claude, 5 s for ACP) instead of the grace.
CANCEL_BOUND = 4.0


async def _cancelled_by_the_caller(session: Session, prompt: str, how: str) -> float:
    """Cancel a turn from outside after 0.5 s (a cancel scope or a task group): the wall time
    from the cancel to the caller getting control back."""
    session.cancel_grace = GRACE
    cancelled_at = 0.0
    if how == "scope":
        with anyio.move_on_after(0.5) as scope:
            await run_turn(session, prompt)
        assert scope.cancelled_caught
        cancelled_at = scope.deadline
    else:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_turn, session, prompt)
            await anyio.sleep(0.5)
            cancelled_at = anyio.current_time()
            tg.cancel_scope.cancel()
    return anyio.current_time() - cancelled_at


@pytest.mark.parametrize("how", ["scope", "task_group"])
async def test_a_caller_cancel_of_claude_ignoring_the_interrupt_is_bounded_by_the_grace(
    how: str,
) -> None:
    engine = ClaudeEngine(argv_prefix=[sys.executable, str(FAKES / "claude_fake.py"), "hang"])
    async with engine.start(SessionOptions(partial_messages=False)) as session:
        assert await _cancelled_by_the_caller(session, "a", how) < CANCEL_BOUND
        with pytest.raises(SessionTerminatedError):
            await run_turn(session, "b", timeout=5)


@pytest.mark.parametrize("how", ["scope", "task_group"])
async def test_a_caller_cancel_of_an_acp_agent_ignoring_session_cancel_is_bounded_by_the_grace(
    how: str, tmp_path: Path
) -> None:
    engine = AcpEngine([sys.executable, str(FAKES / "acp_agent.py")], terminate_timeout=1.0)
    async with engine.start(SessionOptions(cwd=str(tmp_path))) as session:
        assert await _cancelled_by_the_caller(session, "deaf", how) < CANCEL_BOUND
        with pytest.raises(SessionTerminatedError):
            await run_turn(session, "again", timeout=5)
