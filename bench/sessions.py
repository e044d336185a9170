"""Many sessions and large lines, measured in a child interpreter each so that peaks are its own.

* **Many sessions**: N concurrent sessions of the scripted ACP agent (tests/fakes), a few turns
  each. Reported: the caller's memory per session beyond an idle interpreter (target <= 1 MB),
  and the event loop's lag p99 measured by a 10 ms ticker while they run their turns (target
  <= 50 ms): with the caller on a CPU of its own and the agents on the others (the library's
  own loop; median of three runs), and with everything sharing the CPUs (the machine).
* **A fleet on a minimal agent** (``_fleet.py``): N sessions of ``_minimal_acp_agent.py`` (small
  enough that 500 fit in memory), driven by the library and by a hand-written asyncio loop in the
  same process, interleaved rounds, medians. Reported: the loop's lag p99 of each (targets 20 ms
  at 200 sessions, 50 ms at 500), the library's CPU per turn against the plain loop's, and its CPU
  per turn at the larger fleet against one session (target <= 1.2x). The same fleet pooled
  (``AcpEngine(..., pool=50)``: 50 sessions on each agent process) against it: the agents'
  memory (PSS) and the caller's loop lag p99, as ratios. Printed beside the table:
  the counts that do not depend on the machine's load (event-loop callbacks per turn, full
  garbage collections per 1000 turns, objects the collector tracks per session).
* **Large lines**: a program prints one 100 MB JSON line within the limit; the caller's peak RSS
  growth against the line's size (target <= 3x). Then a line beyond a 16 MB limit: the peak
  growth stays near the limit (reported against the limit).

    python bench/sessions.py [--sessions 200]   # and a fleet of 500 (5/2 of it)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

from _common import ROOT, Row, print_table

MANY = textwrap.dedent(
    """
    import json, os, statistics, sys, time, anyio
    from agentrun import SessionOptions, run_turn
    from agentrun.engines.acp import AcpEngine

    FAKE = sys.argv[1]
    N = int(sys.argv[2])
    # "pinned": the agents run on one CPU and, once they started, the caller on the other, so
    # the lag is the caller's own loop and not 200 agents competing with it for the CPUs.
    PINNED = sys.argv[3] == "pinned"
    CPUS = sorted(os.sched_getaffinity(0))
    if PINNED:
        os.sched_setaffinity(0, CPUS[1:])  # inherited by every agent this process starts
    lags = []

    def rss_mb():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    async def ticker(stop):
        while not stop.is_set():
            t = time.perf_counter()
            await anyio.sleep(0.01)
            lags.append(time.perf_counter() - t - 0.01)

    async def one(i, ready, go, finished, close):
        engine = AcpEngine([sys.executable, FAKE])
        async with engine.start(SessionOptions(cwd="/tmp")) as session:
            await run_turn(session, f"hello {i}", timeout=120)
            ready.append(i)
            await go.wait()
            for turn in range(3):
                summary = await run_turn(session, f"turn {turn} of {i}", timeout=120)
                assert summary.text == f"echo: turn {turn} of {i}", summary.text
            finished.append(i)
            await close.wait()

    async def main():
        go, stop, close = anyio.Event(), anyio.Event(), anyio.Event()
        ready, finished = [], []
        before = rss_mb()
        async with anyio.create_task_group() as sessions:
            for i in range(N):
                sessions.start_soon(one, i, ready, go, finished, close)
            while len(ready) < N:
                await anyio.sleep(0.05)
            held = rss_mb()
            if PINNED:
                os.sched_setaffinity(0, CPUS[:1])
            # The lag is measured while every session runs its turns: not while they start,
            # nor while they close (200 agents exiting at once, on the same CPUs).
            async with anyio.create_task_group() as ticking:
                ticking.start_soon(ticker, stop)
                go.set()
                while len(finished) < N:
                    await anyio.sleep(0.005)
                stop.set()
            close.set()
        lags.sort()
        print(json.dumps({"per_session_mb": (held - before) / N,
                          "lag_p99_ms": lags[int(len(lags) * 0.99)] * 1000,
                          "lag_p50_ms": statistics.median(lags) * 1000}))

    anyio.run(main)
    """
)

BIG = textwrap.dedent(
    """
    import json, sys, anyio
    from agentrun._wire.process import ProcessSpec, open_process
    from agentrun._bases.translator import decode_line

    SIZE = int(sys.argv[1])
    LIMIT = int(sys.argv[2])
    PRINTER = sys.argv[3]

    def peak_mb():
        # VmHWM, not ru_maxrss: the latter can carry the parent's peak across fork and exec.
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    async def main():
        before = peak_mb()
        spec = ProcessSpec(argv=(sys.executable, PRINTER, str(SIZE)), max_line_bytes=LIMIT)
        async with open_process(spec) as proc:
            async for item in proc.lines():
                event, problem = decode_line(item, engine="bench")
                del event, problem, item
        print(json.dumps({"growth_mb": peak_mb() - before}))

    anyio.run(main)
    """
)


def _child(code: str, *args: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _script(name: str, *args: str) -> dict[str, dict[str, float]]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


#: Sessions on each agent process in the pooled fleet.
POOL = 50


def fleet_rows(sessions: int, rounds: int = 3) -> list[Row]:
    """The minimal-agent fleet at ``sessions`` and at 5/2 of it (each also pooled), and one
    session alone."""
    larger = sessions * 5 // 2
    alone = _script("_fleet.py", "1", "300", str(rounds))
    fleets = {
        n: _script("_fleet.py", str(n), "10", str(rounds), str(POOL)) for n in (sessions, larger)
    }
    rows: list[Row] = []
    for n, fleet in fleets.items():
        library, plain = fleet["library"], fleet["plain"]
        target = 20 if n <= 200 else 50
        rows += [
            Row(f"{n} sessions loop lag p99, minimal agent", "10 ms ticker, the library's fleet",
                f"{target} ms", library["lag_p99_ms"] / target, library["lag_p99_ms"] / 1000, 0.0,
                "<= 1.0x"),
            Row("  same, plain asyncio loop", "10 ms ticker, a hand-written fleet", f"{target} ms",
                plain["lag_p99_ms"] / target, plain["lag_p99_ms"] / 1000, 0.0),
            Row(f"{n} sessions caller CPU per turn", "the library's fleet", "a plain asyncio loop",
                library["cpu_per_turn_ms"] / plain["cpu_per_turn_ms"],
                library["cpu_per_turn_ms"] / 1000, 0.0),
        ]  # fmt: skip
        pooled, floor = fleet["pooled"], fleet["floor pooled"]
        rows += [
            Row(f"{n} sessions pooled ({POOL} a process): agents' memory",
                f"PSS of {pooled['agents']:.0f} agents, pooled",
                f"{library['agents']:.0f} agents, one each", pooled["agent_pss_mb"]
                / library["agent_pss_mb"], 0.0, 0.0),
            Row("  same, caller loop lag p99", "10 ms ticker, the pooled fleet",
                "the fleet unpooled", pooled["lag_p99_ms"] / library["lag_p99_ms"],
                pooled["lag_p99_ms"] / 1000, 0.0),
            Row(f"{n} sessions pooled loop lag p99", "10 ms ticker, the pooled fleet",
                f"{target} ms", pooled["lag_p99_ms"] / target, pooled["lag_p99_ms"] / 1000, 0.0,
                "<= 1.0x"),
            Row("  same, the floor pooled", "hand-written pooled loop + typed work",
                f"{target} ms", floor["lag_p99_ms"] / target, floor["lag_p99_ms"] / 1000, 0.0),
            Row(f"{n} sessions pooled caller CPU per turn", "the pooled fleet",
                "the floor pooled", pooled["cpu_per_turn_ms"] / floor["cpu_per_turn_ms"],
                pooled["cpu_per_turn_ms"] / 1000, 0.0),
        ]  # fmt: skip
        print(
            f"# {n} sessions, per turn: event-loop callbacks {library['callbacks_per_turn']:.1f} "
            f"(plain {plain['callbacks_per_turn']:.1f}); full collections per 1000 turns "
            f"{library['full_gcs_per_1000_turns']:.1f} (plain "
            f"{plain['full_gcs_per_1000_turns']:.1f}), longest {library['gc_pause_ms']:.0f} ms, "
            f"objects they walked per turn {library['gc_walked_per_turn']:.0f} "
            f"(plain {plain['gc_walked_per_turn']:.0f}); "
            f"tracked objects per session {library['tracked_per_session']:.0f} "
            f"(plain {plain['tracked_per_session']:.0f})"
        )
    one = alone["library"]["cpu_per_turn_ms"]
    many = fleets[larger]["library"]["cpu_per_turn_ms"]
    plain_growth = fleets[larger]["plain"]["cpu_per_turn_ms"] / alone["plain"]["cpu_per_turn_ms"]
    what = f"the library (plain loop {plain_growth:.2f}x)"
    pooled_many = fleets[larger]["pooled"]["cpu_per_turn_ms"]
    rows += [
        Row(f"caller CPU per turn, {larger} sessions", what, "the library, 1 session",
            many / one, many / 1000, 0.0, "<= 1.2x"),
        Row(f"  same, {larger} sessions pooled", "the pooled fleet", "the library, 1 session",
            pooled_many / one, pooled_many / 1000, 0.0, "<= 1.2x"),
    ]  # fmt: skip
    return rows


def measure(sessions: int) -> list[Row]:
    fake = str(ROOT / "tests" / "fakes" / "acp_agent.py")
    many = _child(MANY, fake, str(sessions), "shared")
    # The caller's own loop: only where it can have a CPU the agents do not use.
    pinned = None
    if len(os.sched_getaffinity(0)) > 1:
        # Its lag moves a lot between runs on a shared machine: the median of three.
        runs = sorted(
            (_child(MANY, fake, str(sessions), "pinned") for _ in range(3)),
            key=lambda run: run["lag_p99_ms"],
        )
        pinned = runs[1]
    mb = 1024 * 1024
    printer = str(ROOT / "bench" / "_print_line.py")
    within = _child(BIG, str(100 * mb), str(128 * mb), printer)
    beyond = _child(BIG, str(100 * mb), str(16 * mb), printer)
    return [
        Row(f"{sessions} sessions memory", "caller MB per session", "1 MB",
            many["per_session_mb"], 0.0, 0.0, "<= 1.0x"),
        Row(f"{sessions} sessions loop lag p99", "10 ms ticker, caller on its own CPU", "50 ms",
            (pinned or many)["lag_p99_ms"] / 50, (pinned or many)["lag_p99_ms"] / 1000, 0.0,
            "<= 1.0x"),
        Row("  same, all on shared CPUs", "10 ms ticker, agents beside the caller", "50 ms",
            many["lag_p99_ms"] / 50, many["lag_p99_ms"] / 1000, 0.0),
        *fleet_rows(sessions),
        Row("large line within limit", "peak RSS growth, 100 MB line", "the line's size",
            within["growth_mb"] / 100, 0.0, 0.0, "<= 3x"),
        Row("large line beyond limit", "peak RSS growth, 100 MB line", "the 16 MB limit",
            beyond["growth_mb"] / 16, 0.0, 0.0, "<= 2x"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    print_table(measure(parser.parse_args().sessions))


if __name__ == "__main__":
    main()
