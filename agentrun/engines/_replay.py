"""Replay: recorded transcripts through an engine's translator, with no subprocess.

A transcript is the agent's raw output, one JSON value per line (for JSON-RPC engines, a
bidirectional log of ``{"dir": "send"|"recv", "msg": {...}}`` lines). Replay feeds it through the
same translator the live engine uses and splits the stream into turns at each ``result``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

from .._bases.translator import Translator, frame_problem_message
from .._turns.session import Engine, Session, TurnContext
from .._vocabulary.errors import ConfigurationError, SendNotSupportedError
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.options import SessionOptions
from .._vocabulary.summary import TurnSummary
from .._vocabulary.trajectory import ReplayedTurn
from .._wire.framing import (
    DEFAULT_MAX_LINE_BYTES,
    JsonProblem,
    LineFramer,
    LineTooLong,
    decode_json_line,
)
from ._registry import get_translator

__all__ = [
    "REPLAY_MAX_BYTES",
    "ReplayEngine",
    "read_events",
    "replay",
    "replay_turns",
    "translate_events",
]

#: The largest transcript :func:`replay` reads (a bound, so a device or a runaway file cannot be
#: read forever).
REPLAY_MAX_BYTES = 4 * 1024**3

#: What :func:`replay` reads: the path of a transcript, its bytes, or its lines.
TranscriptSource = str | os.PathLike[str] | bytes | bytearray | Iterable[str | bytes]


def read_events(
    path: str | os.PathLike[str], *, engine: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[Any | Message]:
    """Decoded events of a transcript; undecodable lines become ``error`` messages."""
    framer = LineFramer(max_line_bytes)
    # Unbuffered: the framer takes chunks of any size, and a transcript is read in one or two.
    # Framing and decoding in this one frame: no layer of generators or calls per line.
    with open(path, "rb", buffering=0) as fh:
        while True:
            chunk = fh.read(1 << 20)
            for item in framer.feed(chunk) if chunk else framer.flush():
                if isinstance(item, LineTooLong):
                    yield frame_problem_message(item, engine=engine)
                    continue
                event = decode_json_line(item)
                yield (
                    frame_problem_message(event, engine=engine)
                    if isinstance(event, JsonProblem)
                    else event
                )
            if not chunk:
                return


def _events_of_chunks(
    chunks: Iterable[bytes], *, engine: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[Any | Message]:
    """:func:`read_events` for a transcript already in memory (its bytes, or its lines)."""
    framer = LineFramer(max_line_bytes)

    def framed() -> Iterator[Any]:
        for chunk in chunks:
            yield from framer.feed(chunk)
        yield from framer.flush()

    for item in framed():
        if isinstance(item, LineTooLong):
            yield frame_problem_message(item, engine=engine)
            continue
        event = decode_json_line(item)
        yield (
            frame_problem_message(event, engine=engine) if isinstance(event, JsonProblem) else event
        )


def _line_chunks(lines: Iterable[str | bytes]) -> Iterator[bytes]:
    for line in lines:
        chunk = line.encode("utf-8", "surrogateescape") if isinstance(line, str) else bytes(line)
        yield chunk if chunk.endswith(b"\n") else chunk + b"\n"


def translate_events(events: Iterable[Any | Message], translator: Translator) -> Iterator[Message]:
    """Every message a translator makes of ``events``, then of the end of the stream."""
    for event in events:
        if isinstance(event, Message):
            yield event
        else:
            yield from translator.feed(event)
    yield from translator.finish()


def replay_turns(path: str | os.PathLike[str], *, engine: str) -> list[list[Message]]:
    """The transcript's messages grouped into turns (numbered from 1). A turn ends with its
    ``result``; messages after the last result form a final, unfinished turn."""
    translator = get_translator(engine)
    load_sidecars = getattr(translator, "load_sidecars", None)
    if callable(load_sidecars):
        # Files recorded beside the transcript (Codex's rollout) complete what stdout says.
        load_sidecars(path)
    return _split_turns(translate_events(read_events(path, engine=engine), translator))


def _split_turns(messages: Iterable[Message]) -> list[list[Message]]:
    turns: list[list[Message]] = []
    current: list[Message] = []
    number = 1
    result = MessageType.RESULT
    for message in messages:
        current.append(message.in_turn(number))
        if message.type is result:
            turns.append(current)
            current = []
            number += 1
    if current:
        turns.append(current)
    return turns


def _check_path(path: Path, max_bytes: int) -> None:
    shown = str(path)
    if not path.exists():
        raise ConfigurationError(f"no such transcript: {shown}", option="file")
    if path.is_dir():
        raise ConfigurationError(f"{shown} is a directory, not a transcript", option="file")
    if not path.is_file():
        raise ConfigurationError(
            f"{shown} is not a regular file (a device or a pipe cannot be replayed)",
            option="file",
        )
    if path.stat().st_size > max_bytes:
        raise ConfigurationError(f"{shown} is larger than {max_bytes} bytes", option="file")


def replay(
    source: TranscriptSource,
    *,
    engine: str,
    sidecar: str | os.PathLike[str] | None = None,
    max_bytes: int = REPLAY_MAX_BYTES,
) -> list[ReplayedTurn]:
    """The turns of a recorded transcript, each with its messages and its :class:`TurnSummary`,
    as ``agentrun replay`` shows them.

    ``source`` is the transcript's path (a ``str`` is a path), its bytes, or an iterable of its
    lines (``str`` or ``bytes``). Files an engine reads beside a transcript (Codex's
    ``<name>.rollout.jsonl``) are found beside a path, or given as ``sidecar``. No subprocess
    runs. Raises :class:`ConfigurationError` for an unknown engine, a missing or unreadable
    file, and a source that holds no events of ``engine`` (empty, or not its transcript: one
    where events of kinds the engine does not know are as many as those it does)."""
    translator = get_translator(engine)
    path: Path | None = None
    data: bytes | None = None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        _check_path(path, max_bytes)
    elif isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    if sidecar is not None and not Path(sidecar).is_file():
        raise ConfigurationError(f"no such sidecar file: {sidecar}", option="sidecar")
    load_sidecars = getattr(translator, "load_sidecars", None)
    if callable(load_sidecars):
        if data is None and path is None:
            # Lines read once: kept, so the engine may look at them before they are replayed.
            data = b"".join(_line_chunks(cast("Iterable[str | bytes]", source)))
        if sidecar is not None or path is not None:
            load_sidecars(path if data is None else data, sidecar=sidecar)
    elif sidecar is not None:
        raise ConfigurationError(f"{engine} reads no sidecar files", option="sidecar")
    try:
        if path is not None:
            events = read_events(path, engine=engine)
        elif data is not None:
            events = _events_of_chunks((data,), engine=engine)
        else:
            events = _events_of_chunks(
                _line_chunks(cast("Iterable[str | bytes]", source)), engine=engine
            )
        turns = _split_turns(translate_events(events, translator))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {path}: {exc.strerror or exc}", option="file"
        ) from None
    known = unknown = 0
    for turn in turns:
        for message in turn:
            if not isinstance(message.type, MessageType):
                unknown += 1
            elif message.type is not MessageType.ERROR:
                known += 1
    # Events of kinds the translator does not know pass through; a transcript where they are
    # as many as the rest is another agent's.
    if known == 0 or unknown >= known:
        shown = path if path is not None else "the transcript"
        raise ConfigurationError(
            f"{shown} holds no {engine} events (empty, or not a transcript of it)", option="file"
        )
    return [
        ReplayedTurn(number=i, messages=tuple(t), summary=TurnSummary.from_messages(t))
        for i, t in enumerate(turns, start=1)
    ]


class ReplayEngine(Engine):
    """Plays a recorded transcript back as a session: each turn yields the next recorded turn,
    whatever the prompt. Useful to test orchestrators against recorded agent behaviour."""

    name: str = "replay"

    def __init__(self, path: str | os.PathLike[str], *, engine: str) -> None:
        self.path = Path(path)
        self.engine = engine

    def start(self, options: SessionOptions | None = None) -> Session:
        return _ReplaySession(replay_turns(self.path, engine=self.engine), options)


class _ReplaySession(Session):
    engine_name: str = "replay"

    def __init__(self, turns: list[list[Message]], options: SessionOptions | None) -> None:
        super().__init__(options)
        self._recorded = turns

    async def _run_turn(self, ctx: TurnContext) -> None:
        if ctx.number > len(self._recorded):
            raise SendNotSupportedError(
                f"the transcript has only {len(self._recorded)} turn(s)", engine=self.engine_name
            )
        for message in self._recorded[ctx.number - 1]:
            await ctx.emit(message)
            if message.resume_id:
                self.resume_id = message.resume_id
