"""Many sessions and large lines, measured in a child interpreter each so that peaks are its own.

* **Many sessions**: N concurrent sessions of the scripted ACP agent (tests/fakes), a few turns
  each. Reported: the caller's memory per session beyond an idle interpreter (target <= 1 MB),
  and the event loop's lag p99 measured by a 10 ms ticker while they run their turns (target
  <= 50 ms): with the caller on a CPU of its own and the agents on the others (the library's
  own loop; median of three runs), and with everything sharing the CPUs (the machine).
* **Large lines**: a program prints one 100 MB JSON line within the limit; the caller's peak RSS
  growth against the line's size (target <= 3x). Then a line beyond a 16 MB limit: the peak
  growth stays near the limit (reported against the limit).

    python bench/sessions.py [--sessions 200]
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
