"""The engine from docs/engines/writing-an-engine.md, through the same scenarios every engine
must pass: turns that resume one conversation, per-turn usage from running totals, a tool pair,
cancel then a clean turn, a crash with the stderr tail, garbage and unknown events."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from agents_support import descendants
from toy_engine import ToyEngine

from agentrun import (
    MessageType,
    ProcessExitError,
    SessionOptions,
    TurnTimeoutError,
    run_turn,
)

pytestmark = pytest.mark.anyio


def _options(tmp_path: Path) -> SessionOptions:
    return SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})


async def test_turns_resume_one_conversation_with_their_own_usage(tmp_path: Path) -> None:
    async with ToyEngine().start(_options(tmp_path)) as session:
        first = await run_turn(session, "hello there")
        second = await run_turn(session, "run ls")
    assert first.ok and first.text == "you said: hello there"
    assert first.usage is not None and first.usage.output_tokens == 6
    assert second.resume_id == first.resume_id is not None
    assert second.usage is not None and second.usage.output_tokens == 6  # its own, not the total
    assert [t.output for t in second.tool_calls] == ["LS"]


async def test_cancel_then_a_clean_turn(tmp_path: Path) -> None:
    before = descendants()
    async with ToyEngine().start(_options(tmp_path)) as session:
        await run_turn(session, "hi")
        with pytest.raises(TurnTimeoutError) as caught:
            await run_turn(session, "slow", timeout=1)
        assert caught.value.summary is not None
        assert caught.value.summary.stop_reason == "cancelled"
        with anyio.fail_after(30):
            after = await run_turn(session, "again")
    assert after.ok and after.text == "you said: again" and "thinking" not in after.text
    assert descendants() <= before


async def test_a_crash_is_a_process_exit_error_with_what_came_before(tmp_path: Path) -> None:
    async with ToyEngine().start(_options(tmp_path)) as session:
        with pytest.raises(ProcessExitError) as caught:
            await run_turn(session, "crash")
    error = caught.value
    assert error.exit_code == 3 and "simulated crash" in error.stderr_tail
    assert error.summary is not None and "about to fall over" in error.summary.text


async def test_garbage_and_unknown_events_do_not_end_the_turn(tmp_path: Path) -> None:
    seen = []
    async with ToyEngine().start(_options(tmp_path)) as session:
        summary = await run_turn(session, "garbage", on_message=seen.append)
    assert summary.ok
    assert any(m.type is MessageType.ERROR and m.error.code == "invalid_json" for m in seen)
