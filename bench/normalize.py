"""Normalization throughput per engine: exactly what ``agentrun replay --engine E FILE --summary``
does for every transcript of a corpus built from recorded ones — :func:`agentrun.replay` (framing,
decoding, a fresh translator with its context tracker, Codex's rollout beside the file, turn
numbering, the check that the transcript is the engine's, one ``TurnSummary`` per turn) and each
summary's line of JSON as the command makes it (``agentrun._cli.replay.summary_line``) — minus
the write to stdout.

Two rows per engine: from the files (as ``replay`` reads them), and in memory (the corpus's bytes
read once beforehand; per transcript the same framing, decoding, translation, turns and summary
JSON), so the file system's share is apart from the library's.

Baselines on the same data in the same process: ``json.loads`` of every line (the target is
1.5x of it in memory), and two limits: ``pydantic_core.from_json`` alone, and ``from_json`` plus
one ``Message.model_construct`` per line. Peers, when installed: ``claude_agent_sdk``'s message
parser on the Claude corpus.

    python bench/normalize.py [--engine claude] [--megabytes 10] [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import pydantic_core
from _common import CORPUS_DIRS, Row, build_corpus, interleaved, print_table, scratch

from agentrun import Message, MessageType, TurnSummary, get_translator
from agentrun._cli.replay import summary_line
from agentrun._vocabulary.messages import assemble
from agentrun.engines._replay import (
    _events_of_chunks,  # pyright: ignore[reportPrivateUsage]
    _split_turns,  # pyright: ignore[reportPrivateUsage]
    replay,
    translate_events,
)


def _inputs(files: list[Path]) -> list[Path]:
    """The transcripts and the files replay reads beside them (Codex's rollouts)."""
    out: list[Path] = []
    for path in files:
        out.append(path)
        sidecar = path.with_name(path.stem + ".rollout.jsonl")
        if sidecar.exists():
            out.append(sidecar)
    return out


def _per_line(files: list[Path], decode: Callable[[bytes], object]) -> Callable[[], object]:
    inputs = _inputs(files)

    def run() -> int:
        count = 0
        for path in inputs:
            for line in path.read_bytes().splitlines():
                if line:
                    decode(line)
                    count += 1
        return count

    return run


def baseline_json(files: list[Path]) -> Callable[[], object]:
    return _per_line(files, json.loads)


def limit_construct(files: list[Path]) -> Callable[[], object]:
    def construct(line: bytes) -> object:
        return Message.model_construct(type=MessageType.SYSTEM, raw=pydantic_core.from_json(line))

    return _per_line(files, construct)


def load(files: list[Path]) -> list[tuple[bytes, dict[str, list[bytes]]]]:
    """Each transcript's bytes and its sidecar files' lines, read once."""
    out: list[tuple[bytes, dict[str, list[bytes]]]] = []
    for path in files:
        sidecar = path.with_name(path.stem + ".rollout.jsonl")
        side = {"rollout.jsonl": sidecar.read_bytes().splitlines()} if sidecar.exists() else {}
        out.append((path.read_bytes(), side))
    return out


def _per_line_memory(
    corpus: list[tuple[bytes, dict[str, list[bytes]]]], decode: Callable[[bytes], object]
) -> Callable[[], object]:
    def run() -> int:
        count = 0
        for data, side in corpus:
            for line in data.splitlines():
                if line:
                    decode(line)
                    count += 1
            for lines in side.values():
                for line in lines:
                    if line:
                        decode(line)
                        count += 1
        return count

    return run


def agentrun_summary_memory(
    corpus: list[tuple[bytes, dict[str, list[bytes]]]], engine: str
) -> Callable[[], object]:
    """What ``replay --summary`` does per transcript, from bytes already in memory: ``replay``
    of the bytes; for a transcript with a sidecar (which ``replay`` takes as a path), the same
    steps by hand, its sidecar's lines already in memory."""

    def run() -> int:
        out = 0
        for data, side in corpus:
            if not side:
                for turn in replay(data, engine=engine):
                    out += len(summary_line(turn.summary))
                continue
            for turn in _turns_of(data, side, engine):
                out += len(summary_line(TurnSummary.from_messages(turn)))
        return out

    return run


def _turns_of(data: bytes, side: dict[str, list[bytes]], engine: str) -> list[list[Message]]:
    """A transcript's turns from its bytes: ``replay`` of them, or for a transcript with a
    sidecar (which ``replay`` takes as a path) the same steps by hand."""
    if not side:
        return [list(turn.messages) for turn in replay(data, engine=engine)]
    translator = get_translator(engine)
    events = list(_events_of_chunks((data,), engine=engine))
    translator.use_sidecars(side, events)
    return _split_turns(translate_events(events, translator))


def floor_memory(
    corpus: list[tuple[bytes, dict[str, list[bytes]]]], engine: str
) -> Callable[[], object]:
    """The least that gives what ``replay --summary`` gives, with no translation at all: per
    transcript, its lines read by the cheapest reading here (``BytesIO`` iteration: memchr) and
    each parsed by the cheapest parser here (``pydantic_core.from_json``), each of the messages
    replay makes built from its fields already at hand (``assemble``: no validation, nested
    values not built), each turn's summary folded from its messages and written as the
    command's line. No translator, no turn split, no context tracking: whatever a translator
    does, the ``agentrun`` workload cannot cost less than this one. Its fields and turns are
    prepared beforehand, not counted."""
    prepared: list[
        tuple[
            bytes, list[bytes], list[tuple[type[Message], dict[str, object]]], list[list[Message]]
        ]
    ] = []
    for data, side in corpus:
        turns = _turns_of(data, side, engine)
        fields = [
            (type(m), {name: getattr(m, name) for name in m.__pydantic_fields_set__})
            for turn in turns
            for m in turn
        ]
        side_lines = [line for lines in side.values() for line in lines if line]
        prepared.append((data, side_lines, fields, turns))
    from_json = pydantic_core.from_json

    def run() -> int:
        out = 0
        for data, side_lines, fields, turns in prepared:
            for line in BytesIO(data):  # memchr finds each newline; the parser takes it
                if line != b"\n":
                    from_json(line)
            for line in side_lines:
                from_json(line)
            for cls, given in fields:
                assemble(cls, given)
            for turn in turns:
                out += len(summary_line(TurnSummary.from_messages(turn)))
        return out

    return run


def agentrun_summary(files: list[Path], engine: str) -> Callable[[], object]:
    def run() -> int:
        out = 0
        for path in files:
            for turn in replay(path, engine=engine):
                out += len(summary_line(turn.summary))
        return out

    return run


def claude_sdk_parse(files: list[Path]) -> Callable[[], object] | None:
    try:
        from claude_agent_sdk._internal.message_parser import (  # type: ignore[import-not-found]
            parse_message,  # pyright: ignore
        )
    except ImportError:
        return None

    def run() -> int:
        count = 0
        for path in files:
            for line in path.read_bytes().splitlines():
                # The peer rejects events it does not know; that is its cost too.
                with contextlib.suppress(Exception):
                    parse_message(json.loads(line))  # pyright: ignore
                count += 1
        return count

    return run


def measure(engine: str, megabytes: float, runs: int) -> list[Row]:
    files = build_corpus(engine, megabytes, scratch())
    candidates: dict[str, Callable[[], object]] = {
        "json.loads": baseline_json(files),
        "limit": limit_construct(files),
        "agentrun": agentrun_summary(files, engine),
    }
    peer = claude_sdk_parse(files) if engine == "claude" else None
    if peer is not None:
        candidates["claude_agent_sdk"] = peer
    corpus = load(files)
    candidates.update(
        {
            "mem json.loads": _per_line_memory(corpus, json.loads),
            "mem from_json": _per_line_memory(corpus, pydantic_core.from_json),
            "mem limit": _per_line_memory(
                corpus,
                lambda line: Message.model_construct(
                    type=MessageType.SYSTEM, raw=pydantic_core.from_json(line)
                ),
            ),
            "mem agentrun": agentrun_summary_memory(corpus, engine),
        }
    )
    result = interleaved(runs, candidates)
    base = result["json.loads"][0]
    mem = result["mem json.loads"][0]
    size = sum(f.stat().st_size for f in _inputs(files)) / 1024 / 1024
    rows = [
        Row(
            f"normalize {engine}",
            f"replay --summary, {size:.0f} MB, {len(files)} transcripts",
            "json.loads",
            result["agentrun"][0] / base,
            result["agentrun"][0],
            result["agentrun"][1],
        ),
        Row(
            f"  limit {engine}",
            "from_json + model_construct",
            "json.loads",
            result["limit"][0] / base,
            result["limit"][0],
            result["limit"][1],
        ),
    ]
    rows.append(
        Row(
            f"normalize {engine} in memory",
            "replay --summary of bytes held in memory",
            "json.loads",
            result["mem agentrun"][0] / mem,
            result["mem agentrun"][0],
            result["mem agentrun"][1],
            "<= 1.5x",
        )
    )
    for key, what in (("mem from_json", "from_json"), ("mem limit", "from_json + model_construct")):
        rows.append(
            Row(
                f"  limit {engine} in memory",
                what,
                "json.loads",
                result[key][0] / mem,
                result[key][0],
                result[key][1],
            )
        )
    if peer is not None:
        rows.append(
            Row(
                "  claude_agent_sdk",
                "parse_message per line",
                "json.loads",
                result["claude_agent_sdk"][0] / base,
                result["claude_agent_sdk"][0],
                result["claude_agent_sdk"][1],
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", action="append", choices=sorted(CORPUS_DIRS))
    parser.add_argument("--megabytes", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows: list[Row] = []
    for engine in args.engine or sorted(CORPUS_DIRS):
        rows.extend(measure(engine, args.megabytes, args.runs))
    print_table(rows)


if __name__ == "__main__":
    main()
