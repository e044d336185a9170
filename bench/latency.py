"""Delivery latency: an agent writes timestamped lines at 1k, 10k and 50k lines/s; the delay from
its write to ``on_message`` (through the Claude engine: framing, decoding, translation, the turn)
against a bare anyio loop reading the same program's pipe and decoding each line, interleaved;
the percentiles are taken per run and the rows give their medians over the runs (and the spread
of agentrun's). Target: p99 within 1.2x of the bare loop's.

    python bench/latency.py [--seconds 2] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import anyio
from _common import Row, print_table

from agentrun import Message, MessageType, SessionOptions, run_turn
from agentrun.engines.claude import ClaudeEngine

AGENT = str(Path(__file__).with_name("_latency_agent.py"))


def _percentiles(delays: list[float]) -> tuple[float, float]:
    delays.sort()
    return statistics.median(delays), delays[min(len(delays) - 1, int(len(delays) * 0.99))]


async def _agentrun(rate: float, seconds: float) -> list[float]:
    delays: list[float] = []

    def seen(message: Message) -> None:
        if message.type is MessageType.TEXT and message.text and message.text.isdigit():
            delays.append((time.perf_counter_ns() - int(message.text)) / 1e9)

    engine = ClaudeEngine(argv_prefix=[sys.executable, AGENT, str(rate), str(seconds)])
    async with engine.start(SessionOptions(partial_messages=False)) as session:
        await run_turn(session, "go", on_message=seen, timeout=seconds * 10 + 30)
    return delays


async def _bare(rate: float, seconds: float) -> list[float]:
    delays: list[float] = []
    async with await anyio.open_process([sys.executable, AGENT, str(rate), str(seconds)]) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        await proc.stdin.send(b'{"type": "user"}\n')
        buffer = b""
        done = False
        while not done:
            buffer += await proc.stdout.receive()
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                event = json.loads(line)
                if event["type"] == "result":
                    done = True
                    break
                text = event["message"]["content"][0]["text"]
                delays.append((time.perf_counter_ns() - int(text)) / 1e9)
        await proc.stdin.aclose()
    return delays


def measure(seconds: float, runs: int = 5) -> list[Row]:
    rows: list[Row] = []
    for rate in (1_000, 10_000, 50_000):
        # Percentiles per run, interleaved; the rows give the medians over the runs and the
        # spread of agentrun's figure.
        ours: list[tuple[float, float]] = []
        bare: list[tuple[float, float]] = []
        for _ in range(runs):
            ours.append(_percentiles(anyio.run(_agentrun, rate, seconds)))
            bare.append(_percentiles(anyio.run(_bare, rate, seconds)))
        for index, name, target in ((1, "latency {}k lines/s p99", "<= 1.2x"),
                                    (0, "  p50 {}k lines/s", "")):  # fmt: skip
            mine = [run[index] for run in ours]
            base = statistics.median(run[index] for run in bare)
            median = statistics.median(mine)
            rows.append(
                Row(name.format(rate // 1000), "write -> on_message", "bare anyio loop",
                    median / base if base else float("inf"), median,
                    (max(mine) - min(mine)) / median if median else 0.0, target)
            )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print_table(measure(args.seconds, args.runs))


if __name__ == "__main__":
    main()
