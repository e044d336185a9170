"""Reducer scaling: folding one turn of 1k, 10k and 100k messages of each kind into a
``TurnSummary`` (and reading its text once at the end). The cost per message at 100k against the
cost at 1k must stay within 1.5x: the summary accumulates and joins once.

The input messages are built first and moved out of the garbage collector's generations
(``gc.freeze``): otherwise every full collection the fold triggers walks the 111k messages the
benchmark holds, a cost of the caller's heap, not of the fold (the tool-call row read 2.2-2.9x
so, 1.4x with them frozen, 1.2x with the collector off).

    python bench/reducers.py [--runs 5]
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable

from _common import Row, interleaved, print_table

from agentrun import Message, MessageType, ToolCall, TurnSummary

SIZES = (1_000, 10_000, 100_000)


def _messages(kind: str, count: int) -> list[Message]:
    if kind == "text deltas":
        return [Message(type=MessageType.TEXT_DELTA, text="word ") for _ in range(count)]
    if kind == "text blocks":
        return [Message(type=MessageType.TEXT, text=f"block {i}") for i in range(count)]
    if kind == "thinking blocks":
        return [Message(type=MessageType.THINKING, text=f"thought {i}") for i in range(count)]
    out: list[Message] = []
    for i in range(count // 2):
        out.append(Message(type=MessageType.TOOL_USE, tool=ToolCall(id=f"t{i}", name="bash")))
        out.append(Message(type=MessageType.TOOL_RESULT, tool=ToolCall(id=f"t{i}", output="ok")))
    return out


def _fold(messages: list[Message]) -> Callable[[], object]:
    def run() -> int:
        summary = TurnSummary.from_messages(messages)
        return len(summary.text) + len(summary.thinking) + len(summary.tool_calls)

    return run


def measure(runs: int) -> list[Row]:
    rows: list[Row] = []
    for kind in ("text deltas", "text blocks", "thinking blocks", "tool calls"):
        batches = {size: _messages(kind, size) for size in SIZES}
        gc.collect()
        gc.freeze()
        try:
            result = interleaved(runs, {str(size): _fold(batches[size]) for size in SIZES})
        finally:
            gc.unfreeze()
        per_small = result[str(SIZES[0])][0] / len(batches[SIZES[0]])
        per_large = result[str(SIZES[-1])][0] / len(batches[SIZES[-1]])
        rows.append(
            Row(
                f"reducer {kind}",
                "per message at 100k",
                "per message at 1k",
                per_large / per_small,
                result[str(SIZES[-1])][0],
                result[str(SIZES[-1])][1],
                "<= 1.5x",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    print_table(measure(parser.parse_args().runs))


if __name__ == "__main__":
    main()
