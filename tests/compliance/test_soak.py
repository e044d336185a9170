"""Soak: many turns with random cancels and timeouts, and many sessions at once, on fake agents of
three kinds (the JSON-RPC base, the long-lived stream base, the spawn-per-turn base).

Invariants, checked after every turn and at the end: a finished turn's answer is its own prompt's
(nothing lost or misattributed), every message carries its turn's number, and once everything is
closed no process of the run is alive and no file descriptor is left open; the test process's
memory stays within a stated bound.

The small run is part of every test run. The large one (1,000 turns, 200 concurrent sessions)
runs with ``pytest -m soak tests/compliance/test_soak.py``; ``SOAK_TURNS`` and ``SOAK_SESSIONS``
change its size.
"""

from __future__ import annotations

import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from agents_support import descendants
from repo_paths import FAKES

from agentrun import (
    Engine,
    Message,
    SessionOptions,
    TurnTimeoutError,
    run_turn,
)
from agentrun.engines.acp import AcpEngine
from agentrun.engines.claude import ClaudeEngine

pytestmark = pytest.mark.anyio

#: How much the test process may grow over a run (RSS, after a warm-up).
MEMORY_BOUND_MB = 64


@dataclass
class Kind:
    name: str
    #: Answer to a normal prompt, or None when the fake does not echo it.
    echo: str | None
    #: The prompt that keeps the agent busy until it is interrupted (None: no cancel cases).
    slow: str | None


KINDS = {
    "acp": Kind("acp", "echo: {}", "slow"),
    "toy": Kind("toy", "you said: {}", "slow"),
    "claude": Kind("claude", None, None),
}


def _engine(kind: str) -> Engine:
    if kind == "acp":
        return AcpEngine(
            [sys.executable, str(FAKES / "acp_agent.py")],
            close_stdin_timeout=2.0,
            terminate_timeout=2.0,
        )
    if kind == "claude":
        return ClaudeEngine(argv_prefix=[sys.executable, str(FAKES / "claude_fake.py"), "ok"])
    from engines.toy.toy_engine import ToyEngine

    return ToyEngine()


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


@dataclass
class Tally:
    turns: int = 0
    answered: int = 0
    cancelled: int = 0
    timed_out: int = 0


async def _session(kind: str, turns: int, rng: random.Random, home: Path, tally: Tally) -> None:
    spec = KINDS[kind]
    home.mkdir(parents=True, exist_ok=True)
    options = SessionOptions(cwd=str(home), env={"TOY_HOME": str(home)}, partial_messages=False)
    async with _engine(kind).start(options) as session:
        session.cancel_grace = 2.0
        # The toy agent keeps a conversation only after a finished turn: start with one.
        plan = ["answer"] + [
            rng.choice(["answer", "answer", "cancel", "timeout"]) if spec.slow else "answer"
            for _ in range(turns - 1)
        ]
        for index, action in enumerate(plan, start=1):
            tally.turns += 1
            seen: list[Message] = []
            if action == "answer":
                prompt = f"{kind} turn {index} {rng.randrange(10**9)}"
                summary = await run_turn(session, prompt, on_message=seen.append, timeout=60)
                if spec.echo is not None:
                    assert summary.text == spec.echo.format(prompt), (kind, index, summary.text)
                assert summary.has_result
                tally.answered += 1
            elif action == "cancel":
                assert spec.slow is not None
                with anyio.move_on_after(rng.uniform(0.05, 0.4)):
                    await run_turn(session, spec.slow, on_message=seen.append, timeout=60)
                tally.cancelled += 1
            else:
                assert spec.slow is not None
                with pytest.raises(TurnTimeoutError):
                    await run_turn(
                        session,
                        spec.slow,
                        on_message=seen.append,
                        timeout=rng.uniform(0.1, 0.5),
                    )
                tally.timed_out += 1
            assert {m.turn for m in seen} <= {index}, (kind, index)


async def _run(sessions: int, turns: int, limit: int, tmp_path: Path, seed: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    kinds = list(KINDS)
    gate = anyio.Semaphore(limit)

    async def one(index: int) -> None:
        async with gate:
            kind = kinds[index % len(kinds)]
            await _session(kind, turns, random.Random(rng.random()), tmp_path / str(index), tally)

    async with anyio.create_task_group() as tg:
        for index in range(sessions):
            tg.start_soon(one, index)
    return tally


async def _soak(sessions: int, turns: int, limit: int, tmp_path: Path) -> Tally:
    procs_before = descendants()
    await _run(3, 2, 3, tmp_path / "warm-up", seed=1)  # imports, caches, first spawns
    fds_before = _fds()
    rss_before = _rss_mb()
    tally = await _run(sessions, turns, limit, tmp_path / "run", seed=2)
    deadline = time.monotonic() + 10
    while descendants() - procs_before and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert descendants() - procs_before == set(), "processes outlived their sessions"
    assert _fds() - fds_before == set(), "file descriptors leaked"
    grown = _rss_mb() - rss_before
    assert grown < MEMORY_BOUND_MB, f"the test process grew by {grown:.0f} MB"
    assert tally.turns == sessions * turns
    print(f"soak: {tally}, the test process grew by {grown:.1f} MB")
    return tally


async def test_soak_small(tmp_path: Path) -> None:
    tally = await _soak(sessions=6, turns=8, limit=6, tmp_path=tmp_path)
    assert tally.cancelled + tally.timed_out > 0


@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_soak_many_turns(tmp_path: Path) -> None:
    turns = int(os.environ.get("SOAK_TURNS", "1000"))
    await _soak(sessions=6, turns=max(2, turns // 6), limit=6, tmp_path=tmp_path)


@pytest.mark.soak
@pytest.mark.timeout(3600)
async def test_soak_many_sessions(tmp_path: Path) -> None:
    sessions = int(os.environ.get("SOAK_SESSIONS", "200"))
    await _soak(sessions=sessions, turns=3, limit=sessions, tmp_path=tmp_path)
