"""Delivery latency: an agent writes timestamped lines at 1k, 10k and 50k lines/s; the delay from
its write to ``on_message`` (through the Claude engine: framing, decoding, translation, the turn)
against a bare anyio loop reading the same program's pipe and decoding each line. Target: p99
within 1.2x of the bare loop's.

    python bench/latency.py [--seconds 2]
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


def measure(seconds: float) -> list[Row]:
    rows: list[Row] = []
    for rate in (1_000, 10_000, 50_000):
        ours, bare = [], []
        for _ in range(3):  # interleaved
            ours += anyio.run(_agentrun, rate, seconds)
            bare += anyio.run(_bare, rate, seconds)
        (p50, p99), (b50, b99) = _percentiles(ours), _percentiles(bare)
        rows.append(
            Row(f"latency {rate // 1000}k lines/s p99", "write -> on_message", "bare anyio loop",
                p99 / b99 if b99 else float("inf"), p99, 0.0, "<= 1.2x")
        )  # fmt: skip
        rows.append(
            Row(f"  p50 {rate // 1000}k lines/s", "write -> on_message", "bare anyio loop",
                p50 / b50 if b50 else float("inf"), p50, 0.0)
        )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    print_table(measure(parser.parse_args().seconds))


if __name__ == "__main__":
    main()
