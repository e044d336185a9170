"""A session's totals (``Session.totals``) on the scripted engine (asyncio and trio): the sum of
every turn, side calls included, an honest unknown cost once one turn's cost is not known, and
the journal that carries them into a session that goes on with it. The real agents' totals are
held against the model server's ledger in tests/engines/test_session_totals_e2e.py."""

from __future__ import annotations

import anyio
import pytest

from agentrun import (
    JournalError,
    JsonlSessionStore,
    SessionOptions,
    SessionTotals,
    Usage,
    run_turn,
)
from agentrun.testing import Hang, ScriptedEngine
from agentrun.testing._scripted_engine import result

pytestmark = pytest.mark.anyio


def _usage(fresh: int, output: int, cost: float | None, source: str = "reported") -> Usage:
    return Usage(input_tokens=fresh, output_tokens=output, cost_usd=cost, usage_source=source,  # type: ignore[arg-type]
                 cost_source="estimated" if cost is not None else "unavailable")  # fmt: skip


SIDE = Usage(input_tokens=900, output_tokens=6, cost_usd=0.003, usage_source="derived",
             cost_source="estimated")  # fmt: skip


async def test_the_totals_sum_every_turn_and_side_call() -> None:
    script = [
        [result("one", usage=_usage(100, 10, 0.01))],
        [result("two", usage=_usage(7, 1, 0.002), data={"side_usage": SIDE.model_dump()})],
        # A call that failed before it spent anything: known to cost nothing.
        [result("three", usage=_usage(0, 0, None))],
    ]  # fmt: skip
    engine = ScriptedEngine(script)  # type: ignore[arg-type]
    async with engine.start() as session:
        assert session.totals == SessionTotals()  # nothing spent yet, known
        for prompt in ("1", "2", "3"):
            await run_turn(session, prompt)
        totals = session.totals
    assert totals.turns == 3 and totals.unaccounted_turns == 0 and totals.unpriced_turns == 0
    assert totals.usage is not None
    assert (totals.usage.input_tokens, totals.usage.output_tokens) == (107, 11)
    assert totals.side_usage == SIDE
    assert totals.cost_usd == pytest.approx(0.01 + 0.002 + 0.003)


@pytest.mark.parametrize(
    "unknown",
    [
        pytest.param([result("tokens, no price", usage=_usage(50, 5, None))], id="unpriced"),
        pytest.param([result("last", usage=_usage(50, 5, 0.001, "last_call"))], id="last_call"),
        pytest.param([Hang()], id="cancelled"),
    ],
)
async def test_one_turn_of_unknown_cost_makes_the_sessions_cost_unknown(
    unknown: list[object],
) -> None:
    script = [
        [result("one", usage=_usage(100, 10, 0.01))],
        unknown,
        [result("three", usage=_usage(10, 1, 0.001))],
    ]
    engine = ScriptedEngine(script)  # type: ignore[arg-type]
    async with engine.start() as session:
        await run_turn(session, "1")
        assert session.totals.cost_usd == pytest.approx(0.01)
        with anyio.move_on_after(0.2):
            await run_turn(session, "2")  # a hanging turn is cancelled here
        await run_turn(session, "3")
        totals = session.totals
    # Never the sum of the costs that are known, which would look like the whole bill.
    assert totals.turns == 3 and totals.cost_usd is None and totals.unpriced_turns == 1


async def test_a_session_that_goes_on_with_its_journal_goes_on_with_its_totals(
    tmp_path: pytest.TempPathFactory,
) -> None:
    store = JsonlSessionStore(str(tmp_path))
    script = [
        [result("one", usage=_usage(100, 10, 0.01))],
        [result("two", usage=_usage(7, 1, 0.002), data={"side_usage": SIDE.model_dump()})],
    ]  # fmt: skip
    async with ScriptedEngine(script).start(SessionOptions(journal=store)) as session:  # type: ignore[arg-type]
        await run_turn(session, "1")
        await run_turn(session, "2")
        first, journal_id = session.totals, session.journal_id
    assert journal_id is not None
    assert SessionTotals.from_journal(store.records(journal_id)) == first
    again = JsonlSessionStore(str(tmp_path), journal_id=journal_id)
    script = [[result("three", usage=_usage(40, 4, 0.004))]]
    async with ScriptedEngine(script).start(SessionOptions(journal=again)) as session:  # type: ignore[arg-type]
        assert session.totals == first
        summary = await run_turn(session, "3")
        after = session.totals
    assert after == first.with_turn(summary.usage)
    assert after.turns == 3 and after.cost_usd == pytest.approx(0.01 + 0.002 + 0.003 + 0.004)
    assert SessionTotals.from_journal(store.records(journal_id)) == after
    # A fresh journal in the same store begins at zero.
    async with ScriptedEngine(script).start(SessionOptions(journal=store)) as session:  # type: ignore[arg-type]
        assert session.totals == SessionTotals()


async def test_a_journal_that_cannot_be_read_back_stops_the_session_before_it_starts(
    tmp_path: pytest.TempPathFactory,
) -> None:
    store = JsonlSessionStore(str(tmp_path))
    store.append("j1", {"kind": "session", "engine": "scripted"})
    store.close("j1")
    path = store.path("j1")
    damaged = path.read_text() + "{not json\n" + '{"kind":"closed"}\n'
    path.write_text(damaged)
    again = JsonlSessionStore(str(tmp_path), journal_id="j1")
    with pytest.raises(JournalError, match="j1"):
        async with ScriptedEngine([]).start(SessionOptions(journal=again)):
            pass
    assert path.read_text() == damaged  # nothing appended to what cannot be read back


def test_a_damaged_usage_in_a_journal_counts_as_not_known() -> None:
    records = [
        {"kind": "summary", "summary": {"usage": {"input_tokens": 5, "output_tokens": 1,
                                                  "cost_usd": 0.001}}},
        {"kind": "summary", "summary": {"usage": {"input_tokens": "many"}}},
        {"kind": "summary", "summary": "not an object"},
    ]  # fmt: skip
    totals = SessionTotals.from_journal(records)
    assert (totals.turns, totals.unaccounted_turns, totals.unpriced_turns) == (3, 2, 2)
    assert totals.cost_usd is None
    assert totals.usage == Usage(input_tokens=5, output_tokens=1, cost_usd=0.001)
