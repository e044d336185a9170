"""Compaction on the real pinned agents, offline: Claude Code's ``/compact`` and Codex
app-server's ``thread/compact/start`` each become one ``compaction`` message with the fill
before and after, the gauge drops, and the session goes on; the context policy's compact action
does it by itself after a turn that fills the context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import ContextPolicy, Message, MessageType, Usage, run_turn
from agentrun._vocabulary.permissions import approve_all
from agentrun.offline import (
    LedgerSlice,
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    TextBlock,
    ToolCallBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: A price for the scripted model of Codex (US dollars per million tokens).
PRICES = {"models": {"fake-model": {"input": 3.0, "cached_input": 0.3, "output": 15.0}}}


def _script() -> Script:
    full = ScriptUsage(input_tokens=10, cache_read_tokens=200_000, output_tokens=5)
    return Script(
        turns=[
            ModelTurn.text("First answer.", usage=full),
            # The summary the agent asks for when it compacts (in the shape Claude Code asks
            # for; without it Claude Code asks twice).
            ModelTurn.text("<analysis>Short.</analysis>\n<summary>The user said hi.</summary>",
                           usage=ScriptUsage(input_tokens=200_000, output_tokens=20)),
            ModelTurn.text("After compaction.", usage=ScriptUsage(input_tokens=3_000,
                                                                  output_tokens=5)),
        ]
    )  # fmt: skip


@pytest.mark.parametrize("name", ["claude", "codex-app-server"])
async def test_compact_drops_the_gauge_and_the_session_goes_on(name: str, tmp_path: Path) -> None:
    require_engine({"codex-app-server": "codex"}.get(name, name))
    async with ModelServer(_script()) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        seen: list[Message] = []
        async with engine.start(options) as session:
            assert session.can_compact
            first = await run_turn(session, "hi", on_message=seen.append, timeout=120)
            compacted = await session.compact(on_message=seen.append, timeout=120)
            after = await run_turn(session, "and now?", on_message=seen.append, timeout=120)
    assert first.context is not None and first.context.used is not None
    before = first.context.used
    assert before >= 200_000
    (compaction,) = [m for m in seen if m.type is MessageType.COMPACTION]
    assert compaction.turn == 2 and compaction.data is not None
    assert compaction.data["trigger"] == "manual"
    assert compaction.data["before_tokens"] >= 200_000
    dropped = compaction.data["after_tokens"]
    assert dropped is not None and 0 < dropped < before // 10
    assert compacted.ok and compacted.context is not None
    assert compacted.context.used == dropped  # the gauge drops with it
    assert after.ok and after.text == "After compaction."


async def test_the_compact_action_compacts_claude_after_a_full_turn(tmp_path: Path) -> None:
    require_engine("claude")
    async with ModelServer(_script()) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
        # Claude Code reports a window of 1,000,000: 200,000 tokens are 20 % of it.
        policy = ContextPolicy(thresholds=(0.15,), action="compact", compact_at=0.15)
        options = options.model_copy(update={"context_policy": policy})
        seen: list[Message] = []
        async with engine.start(options) as session:
            summary = await run_turn(session, "hi", on_message=seen.append, timeout=120)
            assert summary.text == "First answer." and session.turns == 2
            nxt = await run_turn(session, "and now?", on_message=seen.append, timeout=120)
    kinds = [(m.turn, str(m.type)) for m in seen
             if m.type in (MessageType.CONTEXT_THRESHOLD, MessageType.COMPACTION)]  # fmt: skip
    assert kinds == [(1, "context_threshold"), (2, "compaction")]
    assert nxt.text == "After compaction."


def _tokens(usage: Usage | None) -> tuple[int | None, ...]:
    assert usage is not None
    return (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
            usage.output_tokens)  # fmt: skip


#: What makes each agent compact by itself once a call filled its context (Claude Code's window
#: is the model's; Codex's limit is set lower than the first call's prompt).
AUTO_COMPACTING: dict[str, dict[str, Any]] = {
    "claude": {},
    "claude-acp": {"hitl": True, "permission_handler": approve_all},
    "codex-app-server": {"options": {"codex.config.model_auto_compact_token_limit": "100000"}},
}


@pytest.mark.parametrize("name", list(AUTO_COMPACTING))
async def test_a_compaction_the_agent_makes_inside_a_turn_is_accounted_apart(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent compacts by itself in the middle of a turn (its first call filled the window,
    a tool call follows): the summarising call is the turn's side usage, not its usage. The
    turn's tokens are the ledger's two calls of the conversation, the side usage the summarising
    call's (and, where the agent makes one, the title's), priced at the catalog; the turn's cost
    and the side cost add up to what everything served costs."""
    require_engine({"claude-acp": "claude", "codex-app-server": "codex"}.get(name, name))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    full = ScriptUsage(input_tokens=10, cache_read_tokens=990_000, output_tokens=5)
    script = Script(
        turns=[
            ModelTurn(blocks=[TextBlock(text="Checking."),
                              ToolCallBlock(arguments={"command": "echo hi"})], usage=full),
            ModelTurn.text("<analysis>Short.</analysis>\n<summary>The user ran echo.</summary>",
                           usage=ScriptUsage(input_tokens=30_000, output_tokens=20)),
            ModelTurn.text("It printed hi.", usage=ScriptUsage(input_tokens=3_000,
                                                               output_tokens=7)),
        ]
    )  # fmt: skip
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            name, server.url, tmp_path / "agent", **AUTO_COMPACTING[name]
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            mark = server.ledger.mark()
            summary = await run_turn(session, "run echo hi", on_message=seen.append, timeout=120)
            served = server.ledger.since(mark)
    assert summary.ok and summary.text == "It printed hi.", summary
    assert [e.turn_index for e in served.main.entries] == [0, 1, 2], served
    calls, summarising = served.main.entries, served.main.entries[1]
    if name != "claude-acp":  # claude-agent-acp does not tell
        (compaction,) = [m for m in seen if m.type is MessageType.COMPACTION]
        assert compaction.data is not None and compaction.data["trigger"] == "auto"
    loop = calls[0].usage + calls[2].usage
    assert _tokens(summary.usage) == _tokens(loop), (summary.usage, loop)
    side = summarising.usage + served.side.usage
    assert _tokens(summary.side_usage) == _tokens(side), (summary.side_usage, side)
    assert summary.usage is not None and summary.side_usage is not None
    # The agent's cost less the summarising call's priced; Codex reports none: estimated.
    expected = "estimated" if name == "codex-app-server" else "derived"
    assert summary.usage.cost_source == expected, summary.usage
    apart = LedgerSlice(entries=(summarising, *served.side.entries)).cost()
    assert summary.side_usage.cost_usd == pytest.approx(apart), (summary.side_usage, apart)
    everything = served.cost()
    cost, side_cost = summary.usage.cost_usd, summary.side_usage.cost_usd
    assert cost is not None and side_cost is not None and everything is not None
    assert cost + side_cost == pytest.approx(everything)
