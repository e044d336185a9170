"""run_turn and Turn semantics, exercised with the scripted in-process engine."""

from __future__ import annotations

import anyio
import pytest

import agentrun
from agentrun import (
    Message,
    MessageType,
    NoResultError,
    ProcessExitError,
    SessionTerminatedError,
    TurnInProgressError,
    TurnTimeoutError,
    Usage,
    run_turn,
)
from agentrun.testing._scripted_engine import (
    Fail,
    Hang,
    ScriptedDriver,
    ScriptedEngine,
    Sleep,
    result,
    text,
    tool_result,
    tool_use,
)

pytestmark = pytest.mark.anyio


def _multi_step() -> list[Message]:
    return [
        text("I'll look."),
        tool_use("t1", "Bash", {"command": "ls"}),
        tool_result("t1", "a.txt"),
        text("Found a.txt."),
        result(usage=Usage(input_tokens=10, output_tokens=4, cost_usd=0.5)),
    ]


async def test_first_and_later_turns_are_alike() -> None:
    engine = ScriptedEngine()
    async with engine.start() as process:
        first = await run_turn(process, "one")
        second = await run_turn(process, "two")
    assert (first.turn, first.text, first.ok) == (1, "echo: one", True)
    assert (second.turn, second.text, second.ok) == (2, "echo: two", True)


async def test_multi_step_turn_is_one_turn_and_ends_at_result() -> None:
    engine = ScriptedEngine([_multi_step()])
    seen: list[Message] = []
    async with engine.start() as process:
        summary = await run_turn(process, "go", on_message=seen.append)
    assert [m.type for m in seen] == [
        MessageType.TEXT,
        MessageType.TOOL_USE,
        MessageType.TOOL_RESULT,
        MessageType.TEXT,
        MessageType.RESULT,
    ]
    assert all(m.turn == 1 for m in seen)
    assert summary.text == "Found a.txt."
    assert [(t.id, t.name, t.output, t.completed) for t in summary.tool_calls] == [
        ("t1", "Bash", "a.txt", True)
    ]
    assert summary.usage is not None and summary.usage.cost_usd == 0.5


async def test_async_on_message_callback_is_awaited() -> None:
    seen: list[str] = []

    async def on_message(message: Message) -> None:
        await anyio.sleep(0)
        seen.append(str(message.type))

    async with ScriptedEngine().start() as process:
        await run_turn(process, "x", on_message=on_message)
    assert seen == ["text", "result"]


async def test_streaming_form_matches_run_turn() -> None:
    async with ScriptedEngine([_multi_step()]).start() as process:
        async with process.turn("go") as turn:
            types = [m.type async for m in turn]
        assert turn.done
        assert turn.summary.text == "Found a.txt."
    assert types[-1] is MessageType.RESULT


async def test_total_timeout_cancels_backend_and_session_goes_on() -> None:
    engine = ScriptedEngine([[text("partial"), Hang()], [text("fine"), result("fine")]])
    async with engine.start() as process:
        assert isinstance(process.driver, ScriptedDriver)
        with pytest.raises(TurnTimeoutError) as info:
            await run_turn(process, "slow", timeout=0.2)
        assert info.value.kind == "total"
        assert process.driver.log[0].cancelled, "the backend turn itself must be cancelled"
        partial = info.value.summary
        assert partial is not None and partial.text == "partial"
        assert partial.errors[-1].code == "timeout"
        assert not partial.ok
        nxt = await run_turn(process, "next")
    assert (nxt.turn, nxt.text, nxt.ok) == (2, "fine", True)


async def test_idle_timeout_resets_on_each_message() -> None:
    # Ten messages 0.05 s apart take 0.5 s in all, but never go silent for 0.3 s.
    steps = [s for i in range(10) for s in (Sleep(0.05), text(f"m{i}"))] + [result()]
    async with ScriptedEngine([steps, [text("a"), Sleep(5), result()]]).start() as process:
        summary = await run_turn(process, "steady", idle_timeout=0.3)
        assert summary.ok
        with pytest.raises(TurnTimeoutError) as info:
            await run_turn(process, "stalls", idle_timeout=0.3)
    assert info.value.kind == "idle"
    assert info.value.summary is not None
    assert info.value.summary.errors[-1].code == "idle_timeout"


async def test_caller_cancellation_cancels_backend_turn() -> None:
    engine = ScriptedEngine([[Hang()], [text("after"), result("after")]])
    async with engine.start() as process:
        assert isinstance(process.driver, ScriptedDriver)
        with anyio.move_on_after(0.2) as scope:
            await run_turn(process, "hang")
        assert scope.cancelled_caught
        assert process.driver.log[0].cancelled
        summary = await run_turn(process, "next")
    assert summary.text == "after"
    assert summary.turn == 2


async def test_consumer_leaving_early_cancels_turn() -> None:
    engine = ScriptedEngine([[text("one"), Hang()], [result("two")]])
    async with engine.start() as process:
        assert isinstance(process.driver, ScriptedDriver)
        async with process.turn("x") as turn:
            async for message in turn:
                assert message.text == "one"
                break
        assert process.driver.log[0].cancelled
        assert (await run_turn(process, "y")).text == "two"


async def test_stale_messages_of_a_cancelled_turn_never_reach_the_next() -> None:
    engine = ScriptedEngine([[Hang()], [Sleep(0.05), result("second")]])
    async with engine.start() as process:
        assert isinstance(process.driver, ScriptedDriver)
        with anyio.move_on_after(0.1):
            await run_turn(process, "first")
        seen: list[Message] = []
        async with anyio.create_task_group() as tg:

            async def second() -> None:
                seen.append((await run_turn(process, "second")).model_copy())  # type: ignore[arg-type]

            tg.start_soon(second)
            await anyio.sleep(0.01)
            # A misbehaving backend emits into the first turn after it ended.
            await process.driver.emit_late(1, text("LEAKED"))
    summary = seen[0]
    assert summary.text == "second"  # type: ignore[attr-defined]
    assert "LEAKED" not in summary.model_dump_json()  # type: ignore[attr-defined]


async def test_on_message_error_cancels_turn_and_propagates() -> None:
    engine = ScriptedEngine([[text("a"), Hang()]])

    def boom(message: Message) -> None:
        raise KeyError("handler failed")

    async with engine.start() as process:
        assert isinstance(process.driver, ScriptedDriver)
        with pytest.raises(KeyError):
            await run_turn(process, "x", on_message=boom)
        assert process.driver.log[0].cancelled


async def test_turn_without_result_raises_no_result_with_partial_summary() -> None:
    async with ScriptedEngine([[text("hello")]]).start() as process:
        with pytest.raises(NoResultError) as info:
            await run_turn(process, "x")
    assert info.value.summary is not None
    assert info.value.summary.text == "hello"
    assert info.value.summary.errors[-1].code == "no_result"


async def test_engine_failure_is_raised_typed_after_earlier_messages() -> None:
    crash = ProcessExitError("agent died", exit_code=3, stderr_tail="boom\n", engine="scripted")
    seen: list[Message] = []
    async with ScriptedEngine([[text("before"), Fail(crash)]]).start() as process:
        with pytest.raises(ProcessExitError) as info:
            await run_turn(process, "x", on_message=seen.append)
    assert info.value.exit_code == 3
    assert "boom" in str(info.value)
    assert [m.type for m in seen] == [MessageType.TEXT, MessageType.ERROR]
    assert seen[-1].error is not None and seen[-1].error.code == "process_exit"


async def test_engine_bug_surfaces_as_agentrun_error_not_group() -> None:
    def broken(prompt: str, number: int) -> list[Message]:
        raise ZeroDivisionError("bug")

    async with ScriptedEngine(broken).start() as process:
        with pytest.raises(agentrun.AgentrunError) as info:
            await run_turn(process, "x")
    assert isinstance(info.value.__cause__, ZeroDivisionError)


async def test_concurrent_turns_are_refused() -> None:
    async with ScriptedEngine([[Sleep(0.2), result()], [result()]]).start() as process:
        async with process.turn("a") as turn:
            with pytest.raises(TurnInProgressError):
                async with process.turn("b"):
                    pass
            [m async for m in turn]


async def test_turn_needs_an_open_process() -> None:
    process = ScriptedEngine().start()
    with pytest.raises(SessionTerminatedError):
        await run_turn(process, "x")
    async with process:
        pass
    with pytest.raises(SessionTerminatedError):
        await run_turn(process, "x")
    assert isinstance(process.driver, ScriptedDriver) and process.driver.shutdowns == 1


async def test_bad_turn_arguments_are_rejected_before_anything_runs() -> None:
    async with ScriptedEngine().start() as process:
        with pytest.raises(ValueError, match="timeout"):
            await run_turn(process, "x", timeout=0)
        with pytest.raises(ValueError, match="NUL"):
            await run_turn(process, "a\0b")
        assert process.turns == 0


async def test_slow_consumer_applies_backpressure_without_loss() -> None:
    count = 2000
    steps: list[Message] = [text(f"t{i}") for i in range(count)]
    steps.append(result())
    received = 0
    async with ScriptedEngine([steps]).start() as process:
        async with process.turn("flood") as turn:
            async for _message in turn:
                received += 1
                if received % 500 == 0:
                    await anyio.sleep(0.01)
    assert received == count + 1
    assert turn.summary.messages == count + 1
