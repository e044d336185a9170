"""Normalization throughput: a recorded agent stream through the whole pipeline (framer, JSON
decoding, the engine's translator, message models) against plain ``json.loads`` of the same
lines. Reported as a ratio measured in one run, never asserted in tests.

    python bench/normalize.py [--engine claude] [--file TRANSCRIPT] [--megabytes 20]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from pathlib import Path

from agentrun import get_translator
from agentrun._framing import LineFramer
from agentrun._translate import decode_line

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = {
    "claude": ROOT / "fixtures/claude/wire-samples/c4_tool_use_bash_partial.jsonl",
    "opencode": ROOT / "fixtures/opencode/wire-samples/run_tool_then_text.jsonl",
}


def _corpus(path: Path, megabytes: float) -> bytes:
    one = path.read_bytes()
    if not one.endswith(b"\n"):
        one += b"\n"
    copies = max(1, int(megabytes * 1024 * 1024 / len(one)))
    return one * copies


def _baseline(data: bytes) -> tuple[float, int]:
    start = time.perf_counter()
    count = 0
    for line in data.splitlines():
        if line:
            json.loads(line)
            count += 1
    return time.perf_counter() - start, count


def _pipeline(data: bytes, engine: str) -> tuple[float, int]:
    start = time.perf_counter()
    framer = LineFramer()
    translator = get_translator(engine)
    messages = 0
    chunk = 64 * 1024
    for offset in range(0, len(data), chunk):
        for item in framer.feed(data[offset : offset + chunk]):
            event, problem = decode_line(item, engine=engine)
            messages += 1 if problem is not None else len(translator.feed(event))
    messages += len(translator.finish())
    return time.perf_counter() - start, messages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="claude", choices=sorted(DEFAULTS))
    parser.add_argument("--file", type=Path)
    parser.add_argument("--megabytes", type=float, default=20.0)
    args = parser.parse_args()
    path = args.file or DEFAULTS[args.engine]
    data = _corpus(path, args.megabytes)
    size_mb = len(data) / 1024 / 1024
    base_s, lines = _baseline(data)
    tracemalloc.start()
    pipe_s, messages = _pipeline(data, args.engine)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # Time the pipeline again without tracemalloc's overhead.
    pipe_s, messages = _pipeline(data, args.engine)
    copies = len(data) // max(1, path.stat().st_size)
    print(f"input: {path.name} x{copies}, {size_mb:.1f} MiB, {lines} lines")
    print(f"json.loads only : {base_s:.3f}s  ({size_mb / base_s:.1f} MiB/s)")
    print(f"agentrun        : {pipe_s:.3f}s  ({size_mb / pipe_s:.1f} MiB/s), {messages} messages")
    print(f"ratio (agentrun / json.loads time): {pipe_s / base_s:.2f}x")
    print(f"peak traced memory during normalization: {peak / 1024 / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
