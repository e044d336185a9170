"""Pooled sessions (``pool=N``): several sessions on one real agent process, every promise kept
per session.

Two sessions of one pooled engine run on one process (one pid) and run their turns at the same
time: each gets one answer, neither sees a word of the other's, and each turn's usage is the
model server's ledger figure of the answer it got. A cancel of one session's turn leaves the
other's turn finishing whole. A kill of the shared process fails both sessions' turns with
:class:`~agentrun.ProcessExitError`, and the next session gets a fresh process. The process
outlives the close of one session and ends with the last.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import require_engine

from agentrun import (
    Message,
    ProcessExitError,
    Session,
    SessionTerminatedError,
    TurnSummary,
    run_turn,
)
from agentrun._vocabulary.permissions import approve_all
from agentrun.engines.acp import AcpEngine
from agentrun.engines.codex import CodexAppServerEngine
from agentrun.offline import (
    EMBEDDED_ENGINES,
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    TextBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

PoolingEngine = AcpEngine | CodexAppServerEngine

ENGINES = ["opencode-acp", "claude-acp", "codex-app-server"]
#: One word per answer: a session's messages name its own and never the other's.
WORDS = ("walrus", "zeppelin")
USAGES = (
    ScriptUsage(input_tokens=1_101, output_tokens=31),
    ScriptUsage(input_tokens=2_202, output_tokens=62),
)
CLEAN = "a clean answer of its own"
#: Words of a slow answer (a chunk of 8 characters every 0.2 s: about 3.5 s of streaming).
SLOW_WORDS = 20


def _answer(index: int, *, slow: bool = False) -> ModelTurn:
    text = " ".join([WORDS[index]] * (SLOW_WORDS if slow else 3))
    if slow:
        return ModelTurn(
            blocks=[TextBlock(text=text)], usage=USAGES[index], chunk_delay=0.2, chunk_chars=8
        )
    return ModelTurn(blocks=[TextBlock(text=text)], usage=USAGES[index])


def _pooled(
    name: str, server: ModelServer, tmp_path: Path, *, pool: int = 3
) -> tuple[PoolingEngine, Any]:
    require_engine(EMBEDDED_ENGINES[name])
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    engine, options = embedded_engine(
        name,
        server.url,
        tmp_path / "agent",
        cwd=str(workspace),
        pool=pool,
        hitl=True,
        permission_handler=approve_all,
    )
    assert isinstance(engine, (AcpEngine, CodexAppServerEngine))
    return engine, options


def _pid(session: Session) -> int:
    pid = getattr(session.driver, "pid", None)
    assert isinstance(pid, int)
    return pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _wait_for_requests(server: ModelServer, count: int) -> None:
    while len(server.model_requests) < count:
        await anyio.sleep(0.05)


@pytest.mark.parametrize("name", ENGINES)
async def test_pooled_sessions_share_one_process_and_keep_their_turns_apart(
    name: str, tmp_path: Path
) -> None:
    async with ModelServer(Script(turns=[_answer(0), _answer(1)], exhausted_text=CLEAN)) as server:
        engine, options = _pooled(name, server, tmp_path)
        first = engine.start(options)
        async with first:
            async with engine.start(options) as second:
                pid = _pid(first)
                assert _pid(second) == pid
                seen: dict[int, list[Message]] = {0: [], 1: []}
                summaries: dict[int, TurnSummary] = {}

                async def turn(index: int, session: Session) -> None:
                    summaries[index] = await run_turn(
                        session, "say your word", on_message=seen[index].append, timeout=120
                    )

                mark = server.ledger.mark()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(turn, 0, first)
                    tg.start_soon(turn, 1, second)
                got: list[int] = []
                for index in (0, 1):
                    summary = summaries[index]
                    assert summary.ok, summary.errors
                    said = " ".join(m.text or "" for m in seen[index])
                    words = [i for i, word in enumerate(WORDS) if word in said]
                    assert len(words) == 1, said  # its own answer, nothing of the other's
                    got.append(words[0])
                    usage = summary.usage
                    assert usage is not None
                    ledger = [
                        e.usage
                        for e in server.ledger.since(mark).main.entries
                        if e.turn_index == words[0]
                    ]
                    assert len(ledger) == 1
                    assert usage.input_tokens == ledger[0].input_tokens
                    assert usage.output_tokens == ledger[0].output_tokens
                assert sorted(got) == [0, 1]
            # One session closed: the process goes on for the other.
            assert _alive(pid)
            again = await run_turn(first, "say something new", timeout=120)
            assert again.ok, again.errors
            assert CLEAN in again.text
        # The last one closed: nothing is left.
        assert not _alive(pid)
        assert engine.pool is not None and engine.pool.processes == []


@pytest.mark.parametrize("name", ["claude-acp", "codex-app-server"])
async def test_a_cancel_of_one_pooled_session_leaves_the_others_turn(
    name: str, tmp_path: Path
) -> None:
    script = Script(turns=[_answer(0, slow=True), _answer(1, slow=True)], exhausted_text=CLEAN)
    async with ModelServer(script) as server:
        engine, options = _pooled(name, server, tmp_path)
        async with engine.start(options) as first, engine.start(options) as second:
            second.cancel_grace = 8.0
            assert _pid(first) == _pid(second)
            kept: list[TurnSummary] = []

            async def finish() -> None:
                kept.append(await run_turn(first, "say your word", timeout=120))

            asked = len(server.model_requests)
            async with anyio.create_task_group() as tg:
                tg.start_soon(finish)
                await _wait_for_requests(server, asked + 1)
                # The other session's turn, cancelled once its answer streams.
                async with anyio.create_task_group() as cancelled:
                    cancelled.start_soon(partial(run_turn, second, "say your word"))
                    await _wait_for_requests(server, asked + 2)
                    await anyio.sleep(0.5)
                    cancelled.cancel_scope.cancel()
                assert not kept  # the first session's turn still runs
            (summary,) = kept
            assert summary.ok, summary.errors
            words = [w for w in WORDS if w in summary.text]
            assert len(words) == 1 and summary.text.count(words[0]) == SLOW_WORDS, summary.text
            after = await run_turn(second, "say something new", timeout=120)
            assert after.ok, after.errors
            assert CLEAN in after.text
            assert not [w for w in WORDS if w in after.text]


@pytest.mark.parametrize("name", ["claude-acp", "codex-app-server"])
async def test_a_killed_pooled_process_fails_each_session_and_the_next_gets_a_fresh_one(
    name: str, tmp_path: Path
) -> None:
    script = Script(turns=[_answer(0, slow=True), _answer(1, slow=True)], exhausted_text=CLEAN)
    async with ModelServer(script) as server:
        engine, options = _pooled(name, server, tmp_path)
        failures: list[BaseException] = []
        async with engine.start(options) as first, engine.start(options) as second:
            pid = _pid(first)
            assert _pid(second) == pid

            async def turn(session: Session) -> None:
                try:
                    await run_turn(session, "say your word", timeout=120)
                except ProcessExitError as exc:
                    failures.append(exc)

            asked = len(server.model_requests)
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn, first)
                tg.start_soon(turn, second)
                await _wait_for_requests(server, asked + 2)
                os.killpg(pid, 9)
            assert len(failures) == 2
            async with engine.start(options) as fresh:
                assert _pid(fresh) != pid
                summary = await run_turn(fresh, "say something new", timeout=120)
                assert summary.ok, summary.errors
                assert CLEAN in summary.text
        assert engine.pool is not None and engine.pool.processes == []


async def test_a_full_pool_or_other_options_start_another_process_and_aclose_ends_them(
    tmp_path: Path,
) -> None:
    async with ModelServer(Script(turns=[], exhausted_text=CLEAN)) as server:
        engine, options = _pooled("claude-acp", server, tmp_path, pool=2)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        moved = options.model_copy(update={"cwd": str(elsewhere)})
        other_env = options.model_copy(update={"env": {**options.env, "AGENTRUN_POOL_MARK": "1"}})
        async with (
            engine.start(options) as first,
            engine.start(options) as second,
            engine.start(options) as third,
            engine.start(moved) as fourth,
            engine.start(other_env) as fifth,
        ):
            pids = [_pid(s) for s in (first, second, third, fourth, fifth)]
            assert pids[0] == pids[1]  # two on one process: the pool's size
            # Full: another; a session of another directory joins it (ACP gives each session
            # its own cwd); another environment gets a process of its own.
            assert pids[2] == pids[3]
            assert len({pids[0], pids[2], pids[4]}) == 3
            assert engine.pool is not None and len(engine.pool.processes) == 3
            await engine.aclose()
            assert not [pid for pid in pids if _alive(pid)]
            assert engine.pool.processes == []
            for session in (first, fourth):
                with pytest.raises(SessionTerminatedError):
                    await run_turn(session, "anyone there?", timeout=60)
