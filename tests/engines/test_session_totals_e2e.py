"""A session's totals (``Session.totals``) against the model server's ledger, on the real pinned
agents: two turns, then the session resumed by a new ``Session`` object that goes on with the
same journal, and one more turn there.

The totals' tokens must be what the server served the session's main loop over all three turns
(each turn is one model call, so an agent that reports only its last call is right too, and
says so in ``unaccounted_turns``); its side usage never more than the side requests served. Its
cost is the sum of the turns' costs, side calls included, and the ledger's tokens at the
catalog's price where every cost was estimated; ``None`` (with ``unpriced_turns``) where a
turn's cost is not known, never a partial sum. The resumed session starts from the journaled
totals, and every ``summary`` record of the journal carries the totals as they were then.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents_support import GEMINI_RESUME_ON_ASYNCIO, live_engine

from agentrun import (
    EngineUnavailableError,
    JsonlSessionStore,
    PriceCatalog,
    SessionTotals,
    TurnSummary,
    Usage,
    run_turn,
)
from agentrun.offline import (
    LedgerSlice,
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

ENGINES = [
    "claude", "codex", "codex-app-server", "opencode", "opencode-acp",
    "claude-acp", "codex-acp", "qwen", "gemini", "acp",
]  # fmt: skip

#: A price for the scripted model (US dollars per million tokens).
PRICES = {
    "models": {
        "fake-model": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}
    }
}

#: One model call per turn; every figure distinct.
CALLS = (
    ScriptUsage(input_tokens=1_204, cache_read_tokens=20_480, cache_write_tokens=3_072,
                output_tokens=52),
    ScriptUsage(input_tokens=96, cache_read_tokens=23_552, cache_write_tokens=310,
                output_tokens=27),
    ScriptUsage(input_tokens=2_500, cache_read_tokens=24_500, cache_write_tokens=128,
                output_tokens=6),
)  # fmt: skip


def _tokens(usage: Usage | None) -> dict[str, int | None]:
    if usage is None:
        return {}
    return {
        "input": usage.input_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_write": usage.cache_write_tokens,
        "output": usage.output_tokens,
    }


def _check(
    name: str, totals: SessionTotals, summaries: list[TurnSummary], served: LedgerSlice
) -> None:
    """``totals`` against the turns' summaries and what the server served meanwhile."""
    assert totals.turns == len(summaries), (name, totals)
    usages = [s.usage for s in summaries]
    # Not held in full: no usage, none reported, or figures without their split (Gemini's).
    unavailable = [
        u is None
        or u.usage_source == "unavailable"
        or (u.input_tokens is None and u.output_tokens is None)
        for u in usages
    ]
    partial = [u is not None and u.usage_source == "last_call" for u in usages]
    assert totals.unaccounted_turns == sum(
        a or b for a, b in zip(unavailable, partial, strict=True)
    ), totals
    if not any(unavailable):
        # One call per turn: the main loop's tokens are the ledger's, figure by figure (a
        # figure the API cannot carry is left unreported, never wrong).
        reported = {k: v for k, v in _tokens(totals.usage).items() if v is not None}
        assert {"input", "output"} <= reported.keys(), (name, totals.usage)
        ledger = _tokens(served.main.usage)
        assert reported == {k: ledger[k] for k in reported}, (name, reported, ledger)
    side = totals.side_usage
    if side is not None:
        # The side calls reported are some of those served (one may end after the last turn).
        assert (side.input_tokens or 0) <= (served.side.usage.input_tokens or 0), (name, side)
        assert (side.output_tokens or 0) <= (served.side.usage.output_tokens or 0), (name, side)
    costs: list[float | None] = []
    for summary in summaries:
        usage, extra = summary.usage, summary.side_usage
        last_only = usage is not None and usage.usage_source == "last_call"
        if usage is None or usage.cost_source == "last_call":
            cost = None
        elif last_only and usage.cost_source == "estimated":
            cost = None  # priced from the last call's tokens only
        else:
            cost = usage.cost_usd
        if cost is not None and extra is not None:
            cost = None if extra.cost_usd is None else cost + extra.cost_usd
        costs.append(cost)
    unpriced = sum(cost is None for cost in costs)
    assert totals.unpriced_turns == unpriced, (name, totals, costs)
    if unpriced:
        assert totals.cost_usd is None, (name, totals)  # never a partial sum
        return
    assert totals.cost_usd == pytest.approx(sum(c for c in costs if c is not None)), (name, totals)
    if all(u is not None and u.cost_source == "estimated" for u in usages) and side is None:
        expected = PriceCatalog(PRICES).estimate(served.main.usage, "fake-model")
        assert totals.cost_usd == pytest.approx(expected), (name, totals, served.main.usage)


def _journaled(store: JsonlSessionStore, journal_id: str) -> list[dict[str, Any]]:
    return [r["totals"] for r in store.records(journal_id) if r.get("kind") == "summary"]


@pytest.mark.parametrize("name", ENGINES)
@GEMINI_RESUME_ON_ASYNCIO
async def test_a_sessions_totals_are_what_the_server_served_across_a_resume(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    store = JsonlSessionStore(tmp_path / "journals")
    texts = ("First answer.", "Second answer.", "Resumed answer.")
    script = Script(turns=[ModelTurn.text(t, usage=u) for t, u in zip(texts, CALLS, strict=True)])
    summaries: list[TurnSummary] = []
    async with ModelServer(script) as server:
        try:
            engine, options = live_engine(
                name, server.url, tmp_path / "agent", cwd=str(workspace), journal=store
            )
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        async with engine.start(options) as session:
            assert session.totals == SessionTotals()
            for prompt in ("say one thing", "say another"):
                summaries.append(await run_turn(session, prompt, timeout=120))
            first = session.totals
            journal_id, resume_id = session.journal_id, session.resume_id
        assert all(s.ok for s in summaries), summaries
        _check(name, first, summaries, server.ledger.since(0))
        assert journal_id is not None and resume_id is not None
        written = _journaled(store, journal_id)
        assert SessionTotals.model_validate(written[-1]) == first
        # A new Session object, as a new process would make it: it goes on with the journal.
        continuing = JsonlSessionStore(store.directory, journal_id=journal_id)
        engine, options = live_engine(
            name, server.url, tmp_path / "agent", cwd=str(workspace), resume_id=resume_id,
            journal=continuing,
        )  # fmt: skip
        async with engine.start(options) as resumed:
            assert resumed.totals == first  # the journaled turns, before any turn here
            summaries.append(await run_turn(resumed, "and once more", timeout=120))
            after = resumed.totals
            assert resumed.usage == summaries[-1].usage  # this process's own turns only
    assert summaries[-1].ok, summaries[-1]
    # The resumed turn said its own answer only: history the agent replayed is not part of it.
    assert summaries[-1].all_text == "Resumed answer.", summaries[-1].all_text
    _check(name, after, summaries, server.ledger.since(0))
    written = _journaled(store, journal_id)
    assert [SessionTotals.model_validate(t).turns for t in written] == [1, 2, 3]
    assert SessionTotals.model_validate(written[-1]) == after
    assert SessionTotals.from_journal(store.records(journal_id)) == after
