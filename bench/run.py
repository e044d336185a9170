"""Every benchmark, one table: ``make bench`` (``--quick`` for small corpora and few runs).

Ratios only, each against a baseline measured in the same process on the same data; see
docs/performance.md for what each row measures and the latest results.
"""

from __future__ import annotations

import argparse
import os
import platform

import first_turn
import latency
import normalize
import proxy
import ray_fleet
import reducers
import sessions
import startup
import turn_overhead
from _common import Row, print_table

from agentrun import EngineUnavailableError


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small corpora, 3 runs")
    args = parser.parse_args()
    runs = 3 if args.quick else 5
    megabytes = 2.0 if args.quick else 10.0
    rows: list[Row] = []
    for engine in sorted(normalize.CORPUS_DIRS):
        rows.extend(normalize.measure(engine, megabytes, runs))
    rows.extend(reducers.measure(runs))
    rows.extend(latency.measure(1.0 if args.quick else 2.0, 3 if args.quick else 5))
    rows.extend(sessions.measure(20 if args.quick else 200))
    rows.extend(startup.measure(5 if args.quick else 15))
    rows.extend(proxy.measure(50 if args.quick else 200))
    try:
        rows.extend(turn_overhead.measure(6 if args.quick else 15))
    except EngineUnavailableError as exc:  # the pinned claude is not installed
        print(f"# turn overhead skipped: {exc}")
    rows.extend(first_turn.measure(2 if args.quick else 5))
    try:
        rows.extend(ray_fleet.measure(10 if args.quick else 50, runs=1 if args.quick else 3))
    except EngineUnavailableError as exc:  # Ray or the pinned claude is not installed
        print(f"# ray fleet skipped: {exc}")
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print_table(rows)


if __name__ == "__main__":
    main()
