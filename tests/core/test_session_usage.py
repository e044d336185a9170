"""The session's usage: the sum of its turns' usage, on the scripted engine (asyncio and trio).

A reported turn, a turn with only its last call (``last_call``), a turn cancelled before the
agent said anything, a turn whose tokens are ``unavailable``, a compaction and a turn with side
calls: ``session.usage`` is the sum of every turn's ``summary.usage``, ``side_usage`` the sum of
the side calls', and ``unaccounted_turns`` names the turns not known in full.
"""

from __future__ import annotations

import anyio
import pytest

from agentrun import Message, MessageType, TurnSummary, Usage, run_turn
from agentrun.testing import Hang, ScriptedEngine
from agentrun.testing._scripted_engine import result

pytestmark = pytest.mark.anyio


def _usage(fresh: int, output: int, cost: float | None, source: str = "reported") -> Usage:
    return Usage(input_tokens=fresh, cache_read_tokens=fresh * 10, output_tokens=output,
                 cost_usd=cost, usage_source=source, cost_source="estimated")  # type: ignore[arg-type]  # fmt: skip


SIDE = Usage(input_tokens=900, output_tokens=6, cost_usd=0.003, usage_source="derived",
             cost_source="estimated")  # fmt: skip
UNAVAILABLE = Usage(usage_source="unavailable", cost_source="unavailable")


async def test_the_sessions_usage_is_the_sum_of_its_turns() -> None:
    script = [
        [result("one", usage=_usage(100, 10, 0.01))],
        [result("two", usage=_usage(40, 4, 0.004, "last_call"))],
        [Hang()],
        [result("four", usage=UNAVAILABLE)],
        [result("five", usage=_usage(7, 1, 0.002), data={"side_usage": SIDE.model_dump()})],
        [Message(type=MessageType.COMPACTION, text="compacted"),
         result("compacted", usage=_usage(3_000, 20, 0.05))],
    ]  # fmt: skip
    engine = ScriptedEngine(script, compacts=True)  # type: ignore[arg-type]
    summaries: list[TurnSummary] = []
    async with engine.start() as session:
        assert session.usage is None and session.unaccounted_turns == ()
        summaries.append(await run_turn(session, "1"))
        assert session.usage == summaries[0].usage  # the first turn's, exactly
        summaries.append(await run_turn(session, "2"))
        with anyio.move_on_after(0.2):
            await run_turn(session, "3")  # cancelled: the agent said nothing
        summaries.append(await run_turn(session, "4"))
        summaries.append(await run_turn(session, "5"))
        summaries.append(await session.compact())
        total = session.usage
        unaccounted = session.unaccounted_turns
        side = session.side_usage
    assert total is not None
    assert (total.input_tokens, total.cache_read_tokens, total.output_tokens) == (
        100 + 40 + 7 + 3_000,
        1_000 + 400 + 70 + 30_000,
        10 + 4 + 1 + 20,
    )
    assert total.cost_usd == pytest.approx(0.01 + 0.004 + 0.002 + 0.05)
    assert total.cache_write_tokens is None and total.thinking_tokens is None
    # Turn 2 holds only its last call, turn 3 nothing, turn 4 no token figure.
    assert unaccounted == (2, 3, 4)
    assert side == SIDE


async def test_a_long_session_of_unaccounted_turns_keeps_flat_books() -> None:
    # Every turn reports only its last call: the session names them all, and what it keeps
    # for that does not grow with the number of turns (one run of consecutive numbers).
    turns = 300
    script = [[result(str(n), usage=_usage(5, 1, None, "last_call"))] for n in range(turns)]
    engine = ScriptedEngine(script)  # type: ignore[arg-type]
    async with engine.start() as session:
        for n in range(turns):
            await run_turn(session, str(n))
        unaccounted = session.unaccounted_turns
        kept = len(session._unaccounted)  # pyright: ignore[reportPrivateUsage]
    assert unaccounted == tuple(range(1, turns + 1))
    assert kept == 1
