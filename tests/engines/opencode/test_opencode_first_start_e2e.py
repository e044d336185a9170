"""Many OpenCode sessions started at once on one home, through the real pinned OpenCode.

OpenCode creates and migrates its SQLite store when a process first starts on a home; starts
that ran together on a fresh home each migrated it and some died ("database is locked", a failed
``CREATE TABLE``): measured 6 of 24 starts over three rounds of eight. A start now waits for the
one making the store (``agentrun._bases.first_start``).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from agents_support import require_engine

from agentrun import SessionTerminatedError, run_turn
from agentrun._bases.first_start import StoreLock, store_lock
from agentrun.offline import ModelServer, Script, embedded_engine

#: Sessions started at once per round (half ``opencode run``, half ``opencode acp``), and rounds,
#: each on a fresh home.
AT_ONCE = 8
ROUNDS = 2


async def _at_once(home: Path) -> list[tuple[str, bool, str]]:
    """Start ``AT_ONCE`` sessions together on ``home`` (fresh), one turn each: their outcomes."""
    outcomes: list[tuple[str, bool, str]] = []
    async with ModelServer(Script(turns=[], exhausted_text="ready")) as server:

        async def one(name: str) -> None:
            engine, options = embedded_engine(name, server.url, home)
            try:
                async with engine.start(options) as session:
                    summary = await run_turn(session, "hi", timeout=180)
                outcomes.append((name, summary.ok, str(summary.errors)))
            except SessionTerminatedError as exc:
                outcomes.append((name, False, str(exc)[-400:]))

        async with anyio.create_task_group() as tg:
            for index in range(AT_ONCE):
                tg.start_soon(one, ("opencode", "opencode-acp")[index % 2])
    return outcomes


@pytest.mark.anyio
@pytest.mark.agent
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_sessions_started_at_once_on_a_fresh_home_all_answer(tmp_path: Path) -> None:
    require_engine("opencode")
    for round_number in range(ROUNDS):
        outcomes = await _at_once(tmp_path / f"round-{round_number}")
        assert len(outcomes) == AT_ONCE
        assert [o for o in outcomes if not o[1]] == []


@pytest.mark.anyio
async def test_a_start_waits_for_the_one_making_the_store(tmp_path: Path) -> None:
    database = tmp_path / "data" / "opencode" / "opencode.db"
    first = await store_lock(database, engine="opencode")
    assert isinstance(first, StoreLock) and first.held  # no store yet: the first start makes it
    got: list[StoreLock | None] = []

    async def second() -> None:
        got.append(await store_lock(database, engine="opencode"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(second)
        await anyio.sleep(0.3)
        assert got == []  # still waiting while the first start has not made the store
        database.parent.mkdir(parents=True)
        database.write_bytes(b"")
        first.release()
    assert got == [None]  # the store is there: nothing to hold
    first.release()  # idempotent


@pytest.mark.anyio
async def test_a_start_that_waits_too_long_is_a_typed_error(tmp_path: Path) -> None:
    database = tmp_path / "opencode.db"
    first = await store_lock(database, engine="opencode")
    assert first is not None
    try:
        with pytest.raises(SessionTerminatedError, match="database is locked"):
            await store_lock(database, engine="opencode", wait=0.2)
    finally:
        first.release()
    again = await store_lock(database, engine="opencode")  # free again: taken at once
    assert again is not None
    again.release()
    assert not os.path.exists(database)  # the lock never makes the store itself
