"""Context thresholds and the budget on the real pinned agents, offline (embedded model server).

The scripted model server reports whatever usage a test needs: a context fill past a threshold,
a model call whose output spends the token budget while its tool still runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agents_support import live_engine, require_engine

from agentrun import (
    Budget,
    BudgetExceededError,
    ContextPolicy,
    Message,
    MessageType,
    SessionOptions,
    run_turn,
)
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


def _filled(cached: int) -> ScriptUsage:
    return ScriptUsage(input_tokens=10, cache_read_tokens=cached, output_tokens=5)


@pytest.mark.parametrize("name", ["gemini"])
async def test_a_context_policy_on_an_agent_that_cannot_know_the_fill_is_reported_ignored(
    name: str, tmp_path: Path
) -> None:
    """Gemini CLI 0.61 sends no ``usage_update``, and its prompt result's token count sums the
    prompts of all the turn's model calls (no window size): the fill is never known. A context
    policy is reported ignored on the first turn, and no reading is made up, even with the
    window given."""
    require_engine(name)
    full = ModelTurn.text("Full.", usage=_filled(750_000)).model_copy(update={"repeat": 10})
    async with ModelServer(Script(turns=[full])) as server:
        engine, options = live_engine(name, server.url, tmp_path / "agent")
        options = options.model_copy(
            update={
                "context_window_tokens": 1_000_000,
                "context_policy": ContextPolicy(thresholds=(0.25, 0.5)),
            }
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            first = await run_turn(session, "one", on_message=seen.append, timeout=120)
            second = await run_turn(session, "two", on_message=seen.append, timeout=120)
    assert first.ok and second.ok, (first, second)
    notices = [
        m for m in seen if m.type is MessageType.SYSTEM and m.subtype == "unsupported_option"
    ]
    ignored = [entry["option"] for m in notices for entry in (m.data or {}).get("options", [])]
    assert ignored.count("context_policy") == 1, notices  # said once, on the first turn
    assert all(m.turn == 1 for m in notices), notices
    kinds = {m.type for m in seen}
    assert MessageType.CONTEXT_WINDOW not in kinds and MessageType.CONTEXT_THRESHOLD not in kinds
    assert first.context is None and second.context is None


@pytest.mark.parametrize("name", ["claude", "opencode", "codex-app-server", "acp"])
async def test_context_thresholds_through_a_real_agent(name: str, tmp_path: Path) -> None:
    require_engine({"codex-app-server": "codex", "acp": "claude-acp"}.get(name, name))
    # Every model call reports a context three quarters full (agents make side calls too, such
    # as titles: each gets the same answer). Fuller contexts make some agents compact on their
    # own, which is a different story.
    most = ModelTurn.text("Most.", usage=_filled(750_000)).model_copy(update={"repeat": 50})
    script = Script(turns=[most])
    async with ModelServer(script) as server:
        engine, options = live_engine(name, server.url, tmp_path / "agent")
        # Every agent's window is 1,000,000 here, whatever it would report or look up.
        options = options.model_copy(
            update={
                "context_window_tokens": 1_000_000,
                "context_policy": ContextPolicy(thresholds=(0.25, 0.5, 0.7)),
            }
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            await run_turn(session, "one", on_message=seen.append, timeout=120)
            await run_turn(session, "two", on_message=seen.append, timeout=120)
    notes = [m for m in seen if m.type is MessageType.CONTEXT_THRESHOLD]
    events = [
        (m.turn, str(m.type), m.data and m.data.get("threshold", m.data.get("trigger")))
        for m in seen
        if m.type in (MessageType.CONTEXT_THRESHOLD, MessageType.COMPACTION)
    ]
    crossings = [(1, "context_threshold", 0.25), (1, "context_threshold", 0.5),
                 (1, "context_threshold", 0.7)]  # fmt: skip
    if name == "codex-app-server":
        # Codex compacts by itself when its context is past its own window (258,400 here):
        # the gauge drops, and the next full call crosses every threshold once again.
        assert events == [*crossings, (2, "compaction", "auto"),
                          *[(2, kind, t) for _, kind, t in crossings]], events  # fmt: skip
    else:
        # Each threshold once, in the first turn; the second turn stays as full: nothing new.
        assert events == crossings, events
    for note in notes:
        # The size is the agent's own where it reports one (Codex), else the session's.
        assert note.context is not None and note.context.size_tokens
        assert note.context.used_tokens is not None and note.context.used_tokens >= 750_000
        assert note.data is not None and note.data["fraction"] >= note.data["threshold"]


async def test_claude_is_interrupted_when_a_call_spends_the_token_budget(tmp_path: Path) -> None:
    require_engine("claude")
    budget = Budget(max_tokens=40_000)
    script = Script(
        turns=[
            # The first call's output spends the budget; its tool would then run for 20 s.
            ModelTurn.shell("sleep 20", say="Working.", usage=ScriptUsage(
                input_tokens=10, cache_read_tokens=1_000, output_tokens=50_000)),
            ModelTurn.text("Done."),
        ]
    )  # fmt: skip
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", hitl=False)
        options = options.model_copy(update={"budget": budget})
        assert isinstance(options, SessionOptions)
        async with engine.start(options) as session:
            t0 = time.monotonic()
            with pytest.raises(BudgetExceededError) as caught:
                await run_turn(session, "work", timeout=120)
            assert time.monotonic() - t0 < 15  # interrupted, not after the 20 s tool
            with pytest.raises(BudgetExceededError):
                await run_turn(session, "more", timeout=60)
    assert caught.value.limit == "tokens"
    summary = caught.value.summary
    assert summary is not None and summary.stop_reason == "budget"
    assert budget.spent_tokens >= 40_000


async def test_claude_is_interrupted_when_a_calls_estimated_cost_spends_the_budget(
    tmp_path: Path,
) -> None:
    # Claude Code's per-call usage carries tokens but no cost: the budget prices them from the
    # catalog. 50,000 output tokens cost more than $0.10 on any Claude model.
    require_engine("claude")
    budget = Budget(max_cost_usd=0.10)
    script = Script(
        turns=[
            ModelTurn.shell("sleep 20", say="Working.", usage=ScriptUsage(
                input_tokens=10, cache_read_tokens=1_000, output_tokens=50_000)),
            ModelTurn.text("Done."),
        ]
    )  # fmt: skip
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", hitl=False)
        options = options.model_copy(update={"budget": budget})
        assert isinstance(options, SessionOptions)
        async with engine.start(options) as session:
            t0 = time.monotonic()
            with pytest.raises(BudgetExceededError) as caught:
                await run_turn(session, "work", timeout=120)
            assert time.monotonic() - t0 < 15  # interrupted, not after the 20 s tool
    assert caught.value.limit == "cost"
    summary = caught.value.summary
    assert summary is not None and summary.stop_reason == "budget"
    assert [e.turn_index for e in server.ledger.entries if not e.is_side] == [0]
    assert budget.spent_cost_usd > 0.10
