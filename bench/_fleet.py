"""A fleet of N sessions on the minimal ACP agent, the library against a plain asyncio loop.

``python _fleet.py SESSIONS TURNS ROUNDS [POOL [KINDS]]``: in this one process, ROUNDS
interleaved rounds of fleets of SESSIONS agents each (``_minimal_acp_agent.py``): one driven
through agentrun (``AcpEngine`` and ``run_turn``), one by a hand-written loop on asyncio's
subprocess streams (the same argv, handshake and prompts; each line decoded with
``json.loads``). With POOL, three more, POOL sessions on each agent process: the library's
(``AcpEngine(..., pool=POOL)``), the hand-written loop's (``plain pooled``: one reader per
process routing each line to its session), and that loop doing the work no library that returns
typed messages and a summary can skip (``floor pooled``: ``PlainPool``). KINDS (comma-separated
names: ``library,plain,pooled,plain pooled,floor pooled``) runs only those.
Every session runs one turn to warm up, then TURNS turns back to back while a 10 ms ticker
measures the event loop's lag. Printed as one JSON object, per fleet the medians over the rounds of:

* ``lag_p99_ms`` / ``lag_p50_ms``: the ticker's lateness (wall clock: noisy on a shared machine);
* ``cpu_per_turn_ms``: this process's CPU time over the turns, per turn (the agents are other
  processes, so this is the caller's own work; noisy with the machine's load);
* ``callbacks_per_turn``: event-loop callbacks run per turn (how often a turn passes through
  the loop: independent of the load);
* ``full_gcs_per_1000_turns`` and ``gc_pause_ms``: the cyclic garbage collector's full
  collections during the turns, and the longest one (a pause of the whole loop, of the order
  of the heap: the stall that grows with the number of sessions);
* ``gc_walked_per_turn``: objects those full collections walked, per turn (their CPU cost,
  independent of the load);
* ``tracked_per_session``: objects the collector tracks per open session (what a full
  collection walks);
* ``agents`` and ``agent_pss_mb``: the agent processes this one started, and their memory
  (PSS: each shared page divided among its sharers), once every session is open.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import functools
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import pydantic_core

from agentrun import Message, SessionOptions, TurnSummary, run_turn
from agentrun._vocabulary.messages import assemble
from agentrun.engines.acp import AcpEngine

AGENT = str(Path(__file__).with_name("_minimal_acp_agent.py"))
ARGV = (sys.executable, AGENT)
TICK = 0.01

_callbacks = [0]
_original_run = asyncio.events.Handle._run  # pyright: ignore[reportPrivateUsage]


def _counting_run(self: asyncio.events.Handle) -> None:
    _callbacks[0] += 1
    _original_run(self)


asyncio.events.Handle._run = _counting_run  # type: ignore[method-assign]

_gc_started = [0.0]
_gc_pauses: list[float] = []
#: Objects the full collections walked (the survivors and the collected), and the CPU time
#: spent counting them (taken out of the reading).
_gc_walked = [0]
_gc_counting = [0.0]


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_started[0] = time.perf_counter()
    elif info["generation"] == 2:
        _gc_pauses.append(time.perf_counter() - _gc_started[0])
        counting = time.process_time()
        _gc_walked[0] += len(gc.get_objects(2)) + info["collected"]
        _gc_counting[0] += time.process_time() - counting


gc.callbacks.append(_on_gc)


class Gate:
    """Opens once ``count`` sessions arrived."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.open = anyio.Event()

    def arrive(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.open.set()


Session = Callable[[int, anyio.Event, anyio.Event, Gate, Gate, int], Coroutine[Any, Any, None]]
#: One fleet of (sessions, turns): its readings.
FleetRun = Callable[[int, int], Coroutine[Any, Any, dict[str, float]]]


async def library_session(
    i: int,
    go: anyio.Event,
    close: anyio.Event,
    ready: Gate,
    done: Gate,
    turns: int,
    engine: AcpEngine | None = None,
) -> None:
    engine = engine if engine is not None else AcpEngine(list(ARGV))
    async with engine.start(SessionOptions(cwd="/tmp")) as session:
        await run_turn(session, f"warm {i}", timeout=600)
        ready.arrive()
        await go.wait()
        for turn in range(turns):
            summary = await run_turn(session, f"turn {turn} of {i}", timeout=600)
            assert summary.text == f"turn {turn} of {i}", summary.text
        done.arrive()
        await close.wait()


async def plain_agent() -> asyncio.subprocess.Process:
    """The agent as the hand-written loops start it: asyncio's subprocess streams."""
    return await asyncio.create_subprocess_exec(
        *ARGV,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd="/tmp",
        limit=1 << 20,
    )


async def plain_session(
    i: int, go: anyio.Event, close: anyio.Event, ready: Gate, done: Gate, turns: int
) -> None:
    proc = await plain_agent()
    assert proc.stdin is not None
    assert proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    next_id = [0]

    async def call(method: str, params: dict[str, Any]) -> tuple[Any, str]:
        next_id[0] += 1
        ident = next_id[0]
        request = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        stdin.write(json.dumps(request).encode() + b"\n")
        await stdin.drain()
        text = ""
        while True:
            message = json.loads(await stdout.readline())
            if message.get("id") == ident:
                return message["result"], text
            update = message.get("params", {}).get("update", {})
            if update.get("sessionUpdate") == "agent_message_chunk":
                text += update["content"]["text"]

    async def prompt(words: str) -> str:
        body = {"sessionId": sid, "prompt": [{"type": "text", "text": words}]}
        result, text = await call("session/prompt", body)
        assert result["stopReason"] == "end_turn"
        return text

    try:
        await call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        sid = (await call("session/new", {"cwd": "/tmp", "mcpServers": []}))[0]["sessionId"]
        await prompt(f"warm {i}")
        ready.arrive()
        await go.wait()
        for turn in range(turns):
            text = await prompt(f"turn {turn} of {i}")
            assert text == f"turn {turn} of {i}", text
        done.arrive()
        await close.wait()
    finally:
        stdin.close()
        await proc.wait()


class PlainPool:
    """The least a caller can write with ``pool`` sessions on each agent process: per process
    one reader task that routes each line by its request id (answers) or its ``sessionId``
    (updates) to the session waiting for it. With ``typed``, each turn also does the work no
    library that returns typed messages and a summary can skip (the floor of
    ``bench/normalize.py``, applied to a live turn): every line parsed by
    ``pydantic_core.from_json``, the messages the library makes of this agent's turn built from
    fields at hand (``assemble``: no validation) and folded into a ``TurnSummary``."""

    def __init__(self, pool: int, typed: bool) -> None:
        self.pool, self.typed = pool, typed
        self.procs: list[asyncio.subprocess.Process] = []
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        #: Each session's text so far, by (agent process, session id): an agent numbers its own.
        self.texts: dict[tuple[int, str], list[str]] = {}
        self.next_id = 0
        self.template: list[tuple[type[Message], dict[str, object]]] = []
        self.readers: list[asyncio.Task[None]] = []

    async def learn_template(self) -> None:
        """The messages the library makes of one turn of this agent, as (type, fields)."""
        seen: list[Message] = []
        async with AcpEngine(list(ARGV)).start(SessionOptions(cwd="/tmp")) as session:
            await run_turn(session, "template", on_message=seen.append, timeout=600)
        self.template = [
            (type(m), {name: getattr(m, name) for name in m.__pydantic_fields_set__}) for m in seen
        ]

    async def process_for(self, i: int) -> int:
        index = i // self.pool
        while len(self.procs) <= index:
            proc = await plain_agent()
            self.procs.append(proc)
            reader = self.read(len(self.procs) - 1, proc)
            self.readers.append(asyncio.get_running_loop().create_task(reader))
            await self.call(len(self.procs) - 1, "initialize", {"protocolVersion": 1})
        return index

    async def read(self, index: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        parse = pydantic_core.from_json if self.typed else json.loads
        while line := await proc.stdout.readline():
            message = parse(line)
            ident = message.get("id")
            if ident is not None:
                self.waiting.pop(ident).set_result(message["result"])
                continue
            params = message.get("params", {})
            update = params.get("update", {})
            if update.get("sessionUpdate") == "agent_message_chunk":
                self.texts[index, params["sessionId"]].append(update["content"]["text"])

    async def call(self, index: int, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        ident = self.next_id
        future = asyncio.get_running_loop().create_future()
        self.waiting[ident] = future
        stdin = self.procs[index].stdin
        assert stdin is not None
        request = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        stdin.write(json.dumps(request).encode() + b"\n")
        await stdin.drain()
        return await future

    async def prompt(self, index: int, sid: str, words: str) -> str:
        body = {"sessionId": sid, "prompt": [{"type": "text", "text": words}]}
        result = await self.call(index, "session/prompt", body)
        assert result["stopReason"] == "end_turn"
        parts = self.texts[index, sid]
        text = "".join(parts)
        parts.clear()
        if self.typed:
            TurnSummary.from_messages([assemble(cls, given) for cls, given in self.template])
        return text

    async def session(
        self, i: int, go: anyio.Event, close: anyio.Event, ready: Gate, done: Gate, turns: int
    ) -> None:
        index = await self.process_for(i)
        new = {"cwd": "/tmp", "mcpServers": []}
        sid = (await self.call(index, "session/new", new))["sessionId"]
        self.texts[index, sid] = []
        await self.prompt(index, sid, f"warm {i}")
        ready.arrive()
        await go.wait()
        for turn in range(turns):
            text = await self.prompt(index, sid, f"turn {turn} of {i}")
            assert text == f"turn {turn} of {i}", text
        done.arrive()
        await close.wait()

    async def aclose(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs:
            await proc.wait()
        for reader in self.readers:
            await reader


async def plain_pooled_fleet(pool: int, typed: bool, sessions: int, turns: int) -> dict[str, float]:
    """The hand-written loop's fleet on ``pool`` sessions per agent process."""
    agents = PlainPool(pool, typed)
    if typed:
        await agents.learn_template()
    try:
        return await fleet(agents.session, sessions, turns)
    finally:
        await agents.aclose()


def agents() -> tuple[int, float]:
    """The agent processes this process started, and their PSS in MB."""
    me = str(os.getpid())
    count, pss_kb = 0, 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
            if stat[stat.rindex(")") + 2 :].split()[1] != me:
                continue
            with open(f"/proc/{entry}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        pss_kb += int(line.split()[1])
                        count += 1
                        break
        except (OSError, ValueError):
            continue
    return count, pss_kb / 1024


def tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


async def fleet(session: Session, sessions: int, turns: int) -> dict[str, float]:
    go, close, stop = anyio.Event(), anyio.Event(), anyio.Event()
    ready, done = Gate(sessions), Gate(sessions)
    lags: list[float] = []

    async def ticker() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await anyio.sleep(TICK)
            lags.append(time.perf_counter() - start - TICK)

    before = tracked()
    result: dict[str, float] = {}
    async with anyio.create_task_group() as group:
        for i in range(sessions):
            group.start_soon(session, i, go, close, ready, done, turns)
        await ready.open.wait()
        per_session = (tracked() - before) / sessions
        agent_count, agent_pss = agents()
        gcs = gc.get_stats()[2]["collections"]
        del _gc_pauses[:]
        _gc_walked[0] = 0
        _gc_counting[0] = 0.0
        callbacks, cpu = _callbacks[0], time.process_time()
        async with anyio.create_task_group() as ticking:
            ticking.start_soon(ticker)
            go.set()
            await done.open.wait()
            stop.set()
        cpu, callbacks = time.process_time() - cpu - _gc_counting[0], _callbacks[0] - callbacks
        full_gcs = gc.get_stats()[2]["collections"] - gcs
        lags.sort()
        count = sessions * turns
        result = {
            "lag_p99_ms": lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000,
            "lag_p50_ms": statistics.median(lags) * 1000,
            "cpu_per_turn_ms": cpu / count * 1000,
            "callbacks_per_turn": callbacks / count,
            "full_gcs_per_1000_turns": full_gcs / count * 1000,
            "gc_pause_ms": max(_gc_pauses, default=0.0) * 1000,
            "gc_walked_per_turn": _gc_walked[0] / count,
            "tracked_per_session": per_session,
            "agents": agent_count,
            "agent_pss_mb": agent_pss,
        }
        close.set()
    return result


async def pooled_fleet(pool: int, sessions: int, turns: int) -> dict[str, float]:
    """The library's fleet on ``pool`` sessions per agent process (one engine shared)."""
    engine = AcpEngine(list(ARGV), pool=pool)
    try:
        return await fleet(functools.partial(library_session, engine=engine), sessions, turns)
    finally:
        await engine.aclose()


async def main() -> None:
    sessions, turns, rounds = (int(arg) for arg in sys.argv[1:4])
    pool = int(sys.argv[4]) if len(sys.argv) > 4 else None
    only = set(sys.argv[5].split(",")) if len(sys.argv) > 5 else None
    kinds: dict[str, FleetRun] = {
        "library": functools.partial(fleet, library_session),
        "plain": functools.partial(fleet, plain_session),
    }
    if pool is not None:
        kinds["pooled"] = functools.partial(pooled_fleet, pool)
        kinds["plain pooled"] = functools.partial(plain_pooled_fleet, pool, False)
        kinds["floor pooled"] = functools.partial(plain_pooled_fleet, pool, True)
    if only is not None:
        kinds = {name: run for name, run in kinds.items() if name in only}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in kinds}
    for round_ in range(rounds):
        order = list(kinds) if round_ % 2 == 0 else list(reversed(kinds))
        for name in order:
            results[name].append(await kinds[name](sessions, turns))
    print(
        json.dumps(
            {
                name: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                for name, runs in results.items()
            }
        )
    )


if __name__ == "__main__":
    anyio.run(main)
