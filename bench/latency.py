"""Delivery latency: an agent writes timestamped lines at 1k, 10k and 50k lines/s; the delay from
its write to ``on_message`` (through the Claude engine: framing, decoding, translation, the turn)
against a bare anyio loop reading the same program's pipe and decoding each line, and against
the floor (the bare loop plus the line decoded as the library does, the typed message and the
summary's fold: what no library that delivers typed messages can skip), interleaved;
the percentiles are taken per run and the rows give their medians over the runs (and the spread
of agentrun's). Target: p99 within 1.2x of the bare loop's.

    python bench/latency.py [--seconds 2] [--runs 5] [--rate 50000]
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import statistics
import sys
import time
from pathlib import Path
from typing import Any, cast

import anyio
from _common import Row, callgrind_dumps, print_table

from agentrun import Message, MessageType, SessionOptions, TurnSummary, run_turn
from agentrun._vocabulary.messages import assemble
from agentrun._wire.framing import decode_json_line
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


async def _floor(rate: float, seconds: float) -> list[float]:
    """The bare loop plus the work no library that delivers typed messages and keeps a
    :class:`TurnSummary` can skip, per line: the line decoded as the library decodes it
    (``decode_json_line``), the Claude engine's text message built from the fields at hand
    (``assemble``: no validation) and folded into the summary by the library's reducer. No
    translator, turn, task or channel: the delay is taken when the message is folded, where
    ``on_message`` would see it."""
    delays: list[float] = []
    summary = TurnSummary.from_messages(())
    add = summary.add
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
                event = cast(dict[str, Any], decode_json_line(line))
                if event["type"] == "result":
                    done = True
                    break
                body = event["message"]
                text = body["content"][0]["text"]
                fields = {
                    "type": MessageType.TEXT,
                    "message_id": body["id"],
                    "text": text,
                    "parent_tool_use_id": event["parent_tool_use_id"],
                    "raw": event,
                }
                add(assemble(Message, fields))
                delays.append((time.perf_counter_ns() - int(text)) / 1e9)
        await proc.stdin.aclose()
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


def measure(
    seconds: float, runs: int = 5, rates: tuple[int, ...] = (1_000, 10_000, 50_000)
) -> list[Row]:
    rows: list[Row] = []
    for rate in rates:
        # Percentiles per run, interleaved; the rows give the medians over the runs and the
        # spread of agentrun's figure.
        ours: list[tuple[float, float]] = []
        bare: list[tuple[float, float]] = []
        floor: list[tuple[float, float]] = []
        for _ in range(runs):
            ours.append(_percentiles(anyio.run(_agentrun, rate, seconds)))
            bare.append(_percentiles(anyio.run(_bare, rate, seconds)))
            floor.append(_percentiles(anyio.run(_floor, rate, seconds)))
        for index, name, target in ((1, "latency {}k lines/s p99", "<= 1.2x"),
                                    (0, "  p50 {}k lines/s", "")):  # fmt: skip
            base = statistics.median(run[index] for run in bare)
            for side, runs_of_side, against, what in (
                ("", ours, "bare anyio loop", "write -> on_message"),
                (", floor", floor, "bare anyio loop", "write -> floor's fold"),
                (", against floor", ours, "floor", "write -> on_message"),
            ):
                mine = [run[index] for run in runs_of_side]
                reference = (
                    base if against != "floor" else statistics.median(run[index] for run in floor)
                )
                median = statistics.median(mine)
                rows.append(
                    Row(name.format(rate // 1000) + side, what, against,
                        median / reference if reference else float("inf"), median,
                        (max(mine) - min(mine)) / median if median else 0.0,
                        target if not side else "")
                )  # fmt: skip
    return rows


_SIDES = {"bare": _bare, "floor": _floor, "agentrun": _agentrun}


def _marker() -> None:
    """Where callgrind dumps its counts (``--dump-before=functools_reduce``)."""
    functools.reduce(operator.add, (0, 0))


def _callgrind_child(lines: int) -> None:
    for side in _SIDES.values():  # warm-up, not counted
        anyio.run(side, 1e9, 1000 / 1e9)
    for side in _SIDES.values():
        for count in (lines, 2 * lines):
            _marker()
            anyio.run(side, 1e9, count / 1e9)
            _marker()


def count_instructions(lines: int) -> dict[str, float]:
    """Instructions per line of each side at saturation (the agent writes ``lines`` lines as
    fast as it can), in the caller alone (callgrind; the agent is not traced): what the path
    costs a line once it is behind, the deterministic reading of what the tails depend on.
    Each side runs ``lines`` and ``2 * lines`` lines: the difference is the lines' own cost,
    without the process start and the loop's."""
    counts = callgrind_dumps(
        [__file__, "--callgrind-child", str(lines)], "--dump-before=functools_reduce"
    )
    if len(counts) != 4 * len(_SIDES):
        raise SystemExit(f"expected {4 * len(_SIDES)} dumps, got {len(counts)}")
    return {side: (counts[3 + 4 * i] - counts[1 + 4 * i]) / lines for i, side in enumerate(_SIDES)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rate", type=int, action="append", help="lines/s (default: 1k, 10k, 50k)")
    parser.add_argument(
        "--instructions",
        type=int,
        metavar="LINES",
        help="count each side's instructions per line at saturation under callgrind instead",
    )
    parser.add_argument("--callgrind-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind_child:
        _callgrind_child(args.callgrind_child)
        return
    if args.instructions:
        per_line = count_instructions(args.instructions)
        for side, count in per_line.items():
            print(
                f"{side:9} {count / 1e3:.1f}K instructions a line | "
                f"{count / per_line['bare']:.2f}x bare | {count / per_line['floor']:.2f}x floor"
            )
        return
    rates = tuple(args.rate) if args.rate else (1_000, 10_000, 50_000)
    print_table(measure(args.seconds, args.runs, rates))


if __name__ == "__main__":
    main()
