"""Context thresholds and the budget, engine-agnostic, on the scripted in-process engine."""

from __future__ import annotations

import time

import anyio
import pytest

from agentrun import (
    Budget,
    BudgetExceededError,
    ConfigurationError,
    ContextPolicy,
    ContextWindow,
    Message,
    MessageType,
    SessionOptions,
    Usage,
    run_turn,
)
from agentrun._turns.driver import EngineDriver
from agentrun._turns.session import Session
from agentrun._turns.turn import TurnContext
from agentrun.testing import ScriptedDriver, ScriptedEngine, Sleep
from agentrun.testing._scripted_engine import result, text

pytestmark = pytest.mark.anyio


def reading(used: int, size: int = 1000) -> Message:
    return Message.context_window(
        ContextWindow(used_tokens=used, size_tokens=size, used_source="agent", size_source="agent")
    )


def call(cost: float, tokens: int) -> Message:
    return Message(
        type=MessageType.SYSTEM,
        subtype="message_delta",
        usage=Usage(output_tokens=tokens, cost_usd=cost),
    )


async def _thresholds(options: SessionOptions, script: list[list[object]]) -> list[list[Message]]:
    seen: list[list[Message]] = []
    engine = ScriptedEngine(script)  # type: ignore[arg-type]
    async with engine.start(options) as session:
        for _ in script:
            turn: list[Message] = []
            await run_turn(session, "go", on_message=turn.append)
            seen.append([m for m in turn if m.type is MessageType.CONTEXT_THRESHOLD])
    return seen


async def test_each_threshold_is_announced_once_per_crossing_and_rearmed_after_a_drop() -> None:
    script = [
        [reading(500), reading(800), result("a")],  # crosses 0.75
        [reading(850), reading(960), result("b")],  # crosses 0.90 and 0.95 at once
        [reading(970), result("c")],  # nothing new
        [reading(300), reading(760), result("d")],  # dropped (compaction), crosses 0.75 again
    ]
    seen = await _thresholds(SessionOptions(), script)  # type: ignore[arg-type]
    assert [[m.data["threshold"] for m in turn if m.data] for turn in seen] == [
        [0.75], [0.9, 0.95], [], [0.75],
    ]  # fmt: skip
    note = seen[0][0]
    assert note.context is not None and note.context.used_tokens == 800
    assert note.context.used_source == "agent" and note.turn == 1


async def test_thresholds_are_configurable_and_can_be_turned_off() -> None:
    script = [[reading(600), result("a")]]
    custom = SessionOptions(context_policy=ContextPolicy(thresholds=(0.5,)))
    assert [len(t) for t in await _thresholds(custom, script)] == [1]  # type: ignore[arg-type]
    off = SessionOptions(context_policy=None)
    assert [len(t) for t in await _thresholds(off, script)] == [0]  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        SessionOptions(context_policy=ContextPolicy(thresholds=(1.5,)))


async def test_a_turn_that_crosses_the_cost_limit_is_interrupted() -> None:
    budget = Budget(max_cost_usd=0.10)
    engine = ScriptedEngine(
        [[text("one"), call(0.06, 10), Sleep(0.05), call(0.06, 10), Sleep(30), result("never")]]
    )
    t0 = time.monotonic()
    async with engine.start(SessionOptions(budget=budget)) as session:
        with pytest.raises(BudgetExceededError) as caught:
            await run_turn(session, "go", timeout=60)
        assert isinstance(session.driver, ScriptedDriver)
        assert session.driver.log[
            0
        ].cancelled  # the backend turn was cancelled, not just the reader
        with pytest.raises(BudgetExceededError) as refused:
            await run_turn(session, "again")
    assert time.monotonic() - t0 < 20
    assert caught.value.limit == "cost" and caught.value.error_code == "budget"
    summary = caught.value.summary
    assert summary is not None and summary.stop_reason == "budget" and not summary.ok
    assert budget.spent_cost_usd == pytest.approx(0.12)
    assert refused.value.limit == "cost"


async def test_a_budget_can_return_the_summary_instead_of_raising() -> None:
    budget = Budget(max_tokens=15, raise_on_exceed=False)
    engine = ScriptedEngine([[call(0.0, 10), call(0.0, 10), Sleep(30), result("never")]])
    async with engine.start(SessionOptions(budget=budget)) as session:
        summary = await run_turn(session, "go", timeout=60)
    assert summary.stop_reason == "budget"


async def test_turn_and_wall_limits_and_a_budget_shared_by_two_sessions() -> None:
    budget = Budget(max_turns=3)
    engine = ScriptedEngine(lambda prompt, n: [result(f"{prompt} {n}")])
    async with engine.start(SessionOptions(budget=budget)) as one:
        async with engine.start(SessionOptions(budget=budget)) as two:
            await run_turn(one, "a")
            await run_turn(two, "b")
            await run_turn(one, "c")
            with pytest.raises(BudgetExceededError) as caught:
                await run_turn(two, "d")
    assert caught.value.limit == "turns" and budget.turns == 3

    wall = Budget(max_wall_s=0.5)
    slow = ScriptedEngine([[text("working"), Sleep(30), result("never")]])
    async with slow.start(SessionOptions(budget=wall)) as session:
        t0 = time.monotonic()
        with pytest.raises(BudgetExceededError) as caught:
            await run_turn(session, "go", timeout=60)
        assert time.monotonic() - t0 < 10
    assert caught.value.limit == "wall"


async def test_the_result_spends_the_budget_and_the_next_turn_is_refused() -> None:
    budget = Budget(max_cost_usd=1.0)
    engine = ScriptedEngine([[result("a", usage=Usage(cost_usd=1.5))], [result("b")]])
    async with engine.start(SessionOptions(budget=budget)) as session:
        first = await run_turn(session, "go")
        with pytest.raises(BudgetExceededError):
            await run_turn(session, "go")
    assert first.ok and first.stop_reason == "end_turn"
    assert budget.spent_cost_usd == 1.5
    await anyio.sleep(0)


async def test_the_live_view_shows_a_crossing() -> None:
    import io

    from agentrun._cli.render import Renderer

    out = io.StringIO()
    renderer = Renderer(out, colour=False)
    engine = ScriptedEngine([[reading(900), result("a")]])
    async with engine.start() as session:
        await run_turn(session, "go", on_message=renderer.message)
    assert "▲ context 90% full (crossed 75%)" in out.getvalue()


class _HandingOver(EngineDriver):
    """Delivers like a long-lived engine's reader: straight to the consumer when it can."""

    engine_name = "handing-over"

    def __init__(self, turns: list[list[Message]], options: SessionOptions) -> None:
        super().__init__(options)
        self._script = turns
        self.handed_over: list[str] = []

    async def run_turn(self, ctx: TurnContext) -> None:
        for message in self._script[ctx.number - 1]:
            if ctx.emit_nowait(message):
                self.handed_over.append(str(message.type))
            else:
                await ctx.emit(message)


async def test_readings_handed_straight_to_the_consumer_set_off_their_thresholds_in_order() -> None:
    script = [
        [reading(500), reading(800), result("a")],
        [reading(850), reading(960), result("b")],
        [reading(300), reading(760), result("c")],
    ]
    streams: list[list[str]] = []
    driver = _HandingOver(script, SessionOptions())
    async with Session(driver) as session:
        for _ in script:
            seen: list[Message] = []
            await run_turn(session, "go", on_message=seen.append)
            streams.append(
                [f"{m.type}:{m.data['threshold'] if m.data else m.context.used_tokens}"
                 for m in seen if m.context is not None]
            )  # fmt: skip
    assert streams == [
        ["context_window:500", "context_window:800", "context_threshold:0.75"],
        ["context_window:850", "context_window:960", "context_threshold:0.9",
         "context_threshold:0.95"],
        ["context_window:300", "context_window:760", "context_threshold:0.75"],
    ]  # fmt: skip
    assert driver.handed_over.count("context_window") == 6


def test_a_budget_counts_tokens_reported_without_their_split() -> None:
    # Gemini CLI's turn: the whole prompt and the output without thoughts, no split of either.
    budget = Budget(max_tokens=1_000)
    budget.spend(Usage(whole_prompt_tokens=900, answer_tokens=150, usage_source="reported"))
    assert budget.spent_tokens == 1_050
    assert budget.limit_reached() == "tokens"
