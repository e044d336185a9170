"""Compaction: ``Session.compact()`` where the agent can, and the context policy's compact
action, on the scripted engine."""

from __future__ import annotations

import pytest

from agentrun import (
    CompactionNotSupportedError,
    ContextPolicy,
    ContextWindow,
    Message,
    MessageType,
    SessionOptions,
    run_turn,
)
from agentrun.testing import ScriptedEngine
from agentrun.testing._scripted_engine import result, scripted, text

pytestmark = pytest.mark.anyio


def reading(used: int) -> Message:
    return Message.context_window(
        ContextWindow(used_tokens=used, size_tokens=1000, used_source="agent", size_source="agent")
    )


def script(prompt: str, number: int) -> list[Message]:
    if prompt == "/compact":
        after = ContextWindow(used_tokens=100, size_tokens=1000, used_source="agent",
                              size_source="agent")  # fmt: skip
        return [Message.compaction(trigger="manual", before_tokens=950, after=after),
                reading(100), result("")]  # fmt: skip
    used = {"fill": 950, "half": 500}.get(prompt, 300)
    return [text("answer"), reading(used), result("answer")]


async def test_compact_is_a_turn_with_a_compaction_message_and_the_gauge_drops() -> None:
    engine = ScriptedEngine(script, compacts=True)
    seen: list[Message] = []
    async with engine.start() as session:
        assert session.can_compact
        await run_turn(session, "fill", on_message=seen.append)
        summary = await session.compact(on_message=seen.append, timeout=30)
        assert summary.ok and summary.turn == 2
        assert summary.context is not None and summary.context.used == 100
        assert scripted(session).log[1].prompt == "/compact"
    compaction = next(m for m in seen if m.type is MessageType.COMPACTION)
    assert compaction.data == {"trigger": "manual", "before_tokens": 950, "after_tokens": 100}
    assert compaction.turn == 2


async def test_an_agent_that_cannot_compact_says_so() -> None:
    async with ScriptedEngine(script).start() as session:
        assert not session.can_compact
        with pytest.raises(CompactionNotSupportedError, match="no way to compact"):
            await session.compact()
        assert session.turns == 0


async def test_the_compact_action_compacts_after_a_turn_past_compact_at() -> None:
    policy = ContextPolicy(thresholds=(0.75, 0.9), action="compact", compact_at=0.9)
    engine = ScriptedEngine(script, compacts=True)
    seen: list[Message] = []
    async with engine.start(SessionOptions(context_policy=policy)) as session:
        summary = await run_turn(session, "half", on_message=seen.append)
        assert session.turns == 1  # 50 %: nothing to do
        summary = await run_turn(session, "fill", on_message=seen.append)
        # The prompt's own summary comes back; the compaction ran after it, as turn 3.
        assert summary.text == "answer" and summary.turn == 2
        assert [r.prompt for r in scripted(session).log] == ["half", "fill", "/compact"]
        kinds = [(m.turn, str(m.type)) for m in seen if m.type in (
            MessageType.CONTEXT_THRESHOLD, MessageType.COMPACTION)]  # fmt: skip
        assert kinds == [(2, "context_threshold"), (2, "context_threshold"), (3, "compaction")]
        # After the drop the thresholds are armed again.
        await run_turn(session, "fill", on_message=seen.append)
        assert [r.prompt for r in scripted(session).log][-2:] == ["fill", "/compact"]


async def test_the_compact_action_stays_at_notify_where_the_agent_cannot_compact() -> None:
    policy = ContextPolicy(action="compact")
    async with ScriptedEngine(script).start(SessionOptions(context_policy=policy)) as session:
        summary = await run_turn(session, "fill")
        assert summary.ok and session.turns == 1


def test_compact_at_is_a_fraction() -> None:
    from agentrun import ConfigurationError

    with pytest.raises(ConfigurationError, match="compact_at"):
        ContextPolicy(action="compact", compact_at=1.5)


def handoff_script(prompt: str, number: int) -> list[Message]:
    if prompt.startswith("Write a hand-off summary"):
        return [text("We fixed the parser; the tests are left."), reading(960),
                result("We fixed the parser; the tests are left.")]  # fmt: skip
    used = 950 if prompt == "fill" else 120
    return [text(f"answer to: {prompt[-40:]}"), reading(used), result("answer")]


async def test_handoff_seeds_a_fresh_session_with_the_summary_as_one_logical_session() -> None:
    engine = ScriptedEngine(handoff_script, hands_off=True)
    seen: list[Message] = []
    async with engine.start(SessionOptions(resume_id="scripted-0")) as session:
        assert session.can_handoff and not session.can_compact
        await run_turn(session, "fill", on_message=seen.append)
        handed = await session.handoff(on_message=seen.append, timeout=30)
        assert handed.text == "We fixed the parser; the tests are left."
        after = await run_turn(session, "run the tests", on_message=seen.append)
        assert after.ok
        # The next prompt carries the summary, then the request.
        prompt = scripted(session).log[2].prompt
        assert "hand-off summary" in prompt and prompt.endswith("run the tests")
        assert "We fixed the parser" in prompt
        assert session.handoffs == [("scripted-0", "scripted-1")]
    (note,) = [m for m in seen if m.type is MessageType.COMPACTION]
    assert note.turn == 3
    assert note.data is not None and note.data["trigger"] == "handoff"
    assert note.data["previous_session_id"] == "scripted-0"
    assert note.data["session_id"] == "scripted-1"
    assert note.data["before_tokens"] == 960


async def test_the_compact_action_falls_back_to_handoff() -> None:
    policy = ContextPolicy(thresholds=(0.9,), action="compact", compact_at=0.9)
    engine = ScriptedEngine(handoff_script, hands_off=True)
    async with engine.start(SessionOptions(context_policy=policy)) as session:
        summary = await run_turn(session, "fill")
        assert summary.text == "answer" and scripted(session).fresh_starts == 1
        # The hand-off turn itself never sets the policy off again.
        assert [r.prompt[:24] for r in scripted(session).log] == [
            "fill",
            "Write a hand-off summary",
        ]


async def test_an_empty_hand_off_summary_leaves_the_session_as_it_was() -> None:
    from agentrun import NoResultError

    engine = ScriptedEngine([[result("")]], hands_off=True)
    async with engine.start() as session:
        with pytest.raises(NoResultError, match="no hand-off summary"):
            await session.handoff()
        assert scripted(session).fresh_starts == 0 and session.handoffs == []
