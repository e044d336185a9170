"""Replay: recorded transcripts through an engine's translator, with no subprocess.

A transcript is the agent's raw output, one JSON value per line (for JSON-RPC engines, a
bidirectional log of ``{"dir": "send"|"recv", "msg": {...}}`` lines). Replay feeds it through the
same translator the live engine uses and splits the stream into turns at each ``result``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .._bases.translator import Translator, frame_problem_message, line_feed
from .._store.trajectory.turns import ReplayedTurn, replayed_turn
from .._turns.driver import EngineDriver
from .._turns.engine import Engine
from .._turns.session import Session
from .._turns.turn import TurnContext
from .._vocabulary.errors import ConfigurationError, SendNotSupportedError
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.options import SessionOptions
from .._vocabulary.summary import TurnSummary
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
    "read_sidecars",
    "recognised",
    "replay",
    "replay_turns",
    "sidecar_path",
    "translate_events",
    "translate_lines",
]

_RESULT = MessageType.RESULT
_INIT = MessageType.INIT
_ERROR = MessageType.ERROR

#: The largest transcript :func:`replay` reads (a bound, so a device or a runaway file cannot be
#: read forever).
REPLAY_MAX_BYTES = 4 * 1024**3

#: What :func:`replay` reads: the path of a transcript, its bytes, or its lines.
TranscriptSource = str | os.PathLike[str] | bytes | bytearray | Iterable[str | bytes]


def _framed_file(
    path: str | os.PathLike[str], max_line_bytes: int
) -> Iterator[bytes | LineTooLong]:
    framer = LineFramer(max_line_bytes)
    # Unbuffered: the framer takes chunks of any size, and a transcript is read in one or two.
    with open(path, "rb", buffering=0) as fh:
        while True:
            chunk = fh.read(1 << 20)
            yield from framer.feed(chunk) if chunk else framer.flush()
            if not chunk:
                return


def _framed_chunks(chunks: Iterable[bytes], max_line_bytes: int) -> list[bytes | LineTooLong]:
    """The lines of a transcript held in memory (the framer returns each chunk's lines as a
    list: a generator over them would only add a step per line)."""
    framer = LineFramer(max_line_bytes)
    lines: list[bytes | LineTooLong] = []
    for chunk in chunks:
        lines += framer.feed(chunk)
    lines += framer.flush()
    return lines


def _decoded(items: Iterable[bytes | LineTooLong], engine: str) -> Iterator[Any | Message]:
    for item in items:
        if isinstance(item, LineTooLong):
            yield frame_problem_message(item, engine=engine)
            continue
        event = decode_json_line(item)
        yield (
            frame_problem_message(event, engine=engine) if isinstance(event, JsonProblem) else event
        )


def read_events(
    path: str | os.PathLike[str], *, engine: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[Any | Message]:
    """Decoded events of a transcript; undecodable lines become ``error`` messages."""
    return _decoded(_framed_file(path, max_line_bytes), engine)


def _events_of_chunks(
    chunks: Iterable[bytes], *, engine: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[Any | Message]:
    """:func:`read_events` for a transcript already in memory (its bytes, or its lines)."""
    return _decoded(_framed_chunks(chunks, max_line_bytes), engine)


class _Recognition:
    """:func:`recognised` counted along the translation itself: of the first
    :data:`RECOGNITION_SAMPLE` lines, how many made a message of the engine's own (``known``)
    and how many only pass-throughs or unreadable lines (``foreign``)."""

    __slots__ = ("foreign", "known")

    def __init__(self, known: int, foreign: int) -> None:
        self.known = known
        self.foreign = foreign

    @property
    def recognised(self) -> bool:
        return self.known > 0 and self.known >= self.foreign


def translate_lines(
    items: Iterable[bytes | LineTooLong], translator: Translator, *, engine: str
) -> Iterator[Message]:
    """Every message a translator makes of a transcript's framed lines (each given to its
    ``feed_line``: :func:`line_feed`), then of the end of the stream."""
    feed = line_feed(translator, engine=engine)
    for item in items:
        yield from feed(item)
    yield from translator.finish()


def _line_chunks(lines: Iterable[str | bytes]) -> Iterator[bytes]:
    for line in lines:
        chunk = line.encode("utf-8", "surrogateescape") if isinstance(line, str) else bytes(line)
        yield chunk if chunk.endswith(b"\n") else chunk + b"\n"


def translate_events(events: Iterable[Any | Message], translator: Translator) -> Iterator[Message]:
    """Every message a translator makes of ``events`` (as the line decoder made them), then of
    the end of the stream."""
    feed = translator.feed_decoded
    for event in events:
        if isinstance(event, Message):
            yield event
        else:
            yield from feed(event)
    yield from translator.finish()


def sidecar_path(transcript: str | os.PathLike[str], suffix: str) -> Path:
    """Where a recording keeps the sidecar ``suffix`` of ``<name>.jsonl``: ``<name>.<suffix>``."""
    path = Path(transcript)
    return path.with_name(f"{path.name.removesuffix('.jsonl')}.{suffix}")


def read_sidecars(
    transcript: str | os.PathLike[str], suffixes: Iterable[str]
) -> dict[str, list[bytes]]:
    """The lines of each sidecar file of ``suffixes`` that exists beside the transcript."""
    found: dict[str, list[bytes]] = {}
    for suffix in suffixes:
        try:
            found[suffix] = sidecar_path(transcript, suffix).read_bytes().splitlines()
        except OSError:
            continue
    return found


def replay_turns(path: str | os.PathLike[str], *, engine: str) -> list[list[Message]]:
    """The transcript's messages grouped into turns (numbered from 1). A turn ends with its
    ``result``; messages after the last result form a final, unfinished turn. Sidecar files
    recorded beside the transcript (Codex's rollout) are read here and handed to the
    translator, which reads no file itself."""
    translator = get_translator(engine)
    sidecars = read_sidecars(path, translator.sidecars)
    if sidecars:
        events = list(read_events(path, engine=engine))
        translator.use_sidecars(sidecars, events)
        return _split_turns(translate_events(events, translator))
    items = _framed_file(path, DEFAULT_MAX_LINE_BYTES)
    return _split_turns(translate_lines(items, translator, engine=engine))


def _split_turns(messages: Iterable[Message]) -> list[list[Message]]:
    turns = _Turns()
    turns.add(messages)
    return turns.done()


class _Turns:
    """A transcript's messages split into turns as they come: each tagged with its turn's
    number, a turn ending with its ``result``; the messages after the last result form a final,
    unfinished turn."""

    __slots__ = ("current", "number", "turns")

    def __init__(self) -> None:
        self.turns: list[list[Message]] = []
        self.current: list[Message] = []
        self.number = 1

    def add(self, messages: Iterable[Message]) -> None:
        current = self.current
        number = self.number
        for message in messages:
            message = message.in_turn(number)
            current.append(message)
            if message.type is _RESULT:
                self.turns.append(current)
                current = self.current = []
                number = self.number = number + 1

    def done(self) -> list[list[Message]]:
        if self.current:
            self.turns.append(self.current)
            self.current = []
        return self.turns


def _replay_lines(
    items: Iterable[bytes | LineTooLong], translator: Translator, *, engine: str
) -> tuple[list[list[Message]], _Recognition]:
    """:func:`translate_lines` with the recognition count, split into turns as by
    :func:`_split_turns`, in one loop (no generator between the translator and the turns)."""
    feed = line_feed(translator, engine=engine)
    turns = _Turns()
    add = turns.add
    sample = RECOGNITION_SAMPLE
    known = foreign = 0
    for item in items:
        out = feed(item)
        if sample:  # the first lines: what the translator made of them (see :func:`recognised`)
            sample -= 1
            seen = _line_recognition(out)
            if seen > 0:
                known += 1
            elif seen:
                foreign += 1
        add(out)
    add(translator.finish())
    return turns.done(), _Recognition(known, foreign)


def _only_errors(turns: list[list[Message]]) -> bool:
    """Whether every message of ``turns`` (none at all included) is an ``error``."""
    for turn in turns:
        for message in turn:
            if message.type is not _ERROR:
                return False
    return True


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


#: How many events of a transcript are read to decide whether it is the engine's.
RECOGNITION_SAMPLE = 256

#: Fields a passed-through event sets: an event the translator did not know.
_PASSTHROUGH_FIELDS = frozenset({"type", "subtype", "data", "raw", "turn"})
#: Error codes of lines that could not be read as events at all.
_UNREADABLE = frozenset({"protocol", "invalid_json", "invalid_utf8", "line_too_long"})


def _line_recognition(out: list[Message]) -> int:
    """What the messages a translator made of one event say of it: ``1`` when the translator
    made something of its own of it (a message that is not a pass-through of an unknown kind,
    not an unreadable line, not the ``init`` every translator opens with), else ``-1`` when one
    of them passed an event of an unknown kind through under its own type or reports a line that
    could not be read, else ``0``. A ``system`` message of an unknown subtype is neither known
    nor foreign: agents add subtypes of events their engine knows. One pass, no call per message:
    replay asks it of every one of the first lines."""
    foreign = 0
    for message in out:
        kind = message.type
        if not isinstance(kind, MessageType):
            foreign = -1
        elif kind is _ERROR:
            error = message.error
            if error is None or error.code in _UNREADABLE:
                foreign = -1
            elif not message.__pydantic_fields_set__ <= _PASSTHROUGH_FIELDS:
                return 1
        elif kind is not _INIT and not message.__pydantic_fields_set__ <= _PASSTHROUGH_FIELDS:
            return 1
    return foreign


def recognised(events: Iterable[Any | Message], engine: str) -> bool:
    """Whether ``events`` are a transcript of ``engine``: of the first ones, at least one and at
    least as many as fell to a fresh translator's pass-through (or were unreadable) were
    recognised. A Claude transcript replayed as Codex is all pass-through; a Codex one replayed
    as OpenCode has one event in five that both know (``error``)."""
    translator = get_translator(engine)
    feed = translator.feed_decoded
    known = foreign = 0
    for seen, event in enumerate(events):
        if seen >= RECOGNITION_SAMPLE:
            break
        if isinstance(event, Message):
            foreign += 1
            continue
        try:
            out = feed(event)
        except Exception:  # a translator that chokes on a foreign event does not know it
            foreign += 1
            continue
        seen = _line_recognition(out)
        if seen > 0:
            known += 1
        elif seen:
            foreign += 1
    return known > 0 and known >= foreign


def _sidecars(
    translator: Translator,
    engine: str,
    path: Path | None,
    sidecar: str | os.PathLike[str] | None,
) -> dict[str, list[bytes]]:
    """The sidecar files the translator takes: ``sidecar`` when given (for a translator that
    takes one kind), else those recorded beside ``path``."""
    if sidecar is None:
        return read_sidecars(path, translator.sidecars) if path is not None else {}
    if not Path(sidecar).is_file():
        raise ConfigurationError(f"no such sidecar file: {sidecar}", option="sidecar")
    if len(translator.sidecars) != 1:
        raise ConfigurationError(f"{engine} reads no sidecar file", option="sidecar")
    try:
        return {translator.sidecars[0]: Path(sidecar).read_bytes().splitlines()}
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the sidecar {sidecar}: {exc.strerror or exc}", option="sidecar"
        ) from None


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
    file, and a source that holds no events of ``engine`` (empty, or not its transcript: see
    :func:`recognised`)."""
    translator = get_translator(engine)
    path: Path | None = None
    chunks: Iterable[bytes] | None = None
    if type(source) is bytes:  # the common case first: a bytes object is no path
        chunks = (source,)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        _check_path(path, max_bytes)
    elif isinstance(source, (bytes, bytearray)):
        chunks = (bytes(source),)
    else:
        chunks = list(_line_chunks(source))
    sidecars = _sidecars(translator, engine, path, sidecar)
    # One pass over the lines: the turns, and whether the first lines are the engine's. With
    # sidecar files the translator is given every decoded event first, so a fresh translator
    # reads the sample again, as it would without them.
    recognition: _Recognition | None = None
    try:
        items = (
            _framed_file(path, DEFAULT_MAX_LINE_BYTES)
            if path is not None
            else _framed_chunks(chunks or (), DEFAULT_MAX_LINE_BYTES)
        )
        if sidecars:
            events = list(_decoded(items, engine))
            translator.use_sidecars(sidecars, events)
            turns = _split_turns(translate_events(events, translator))
        else:
            turns, recognition = _replay_lines(items, translator, engine=engine)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {path}: {exc.strerror or exc}", option="file"
        ) from None
    if _only_errors(turns) or not (
        recognition.recognised
        if recognition is not None
        else recognised(
            read_events(path, engine=engine)
            if path is not None
            else _events_of_chunks(chunks or (), engine=engine),
            engine,
        )
    ):
        shown = path if path is not None else "the transcript"
        raise ConfigurationError(
            f"{shown} holds no {engine} events (empty, or not a transcript of it)", option="file"
        )
    return [
        replayed_turn(i, tuple(t), TurnSummary.from_messages(t))
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
        return Session(_ReplayDriver(replay_turns(self.path, engine=self.engine), options))


class _ReplayDriver(EngineDriver):
    engine_name: str = "replay"

    def __init__(self, turns: list[list[Message]], options: SessionOptions | None) -> None:
        super().__init__(options)
        self._recorded = turns

    async def run_turn(self, ctx: TurnContext) -> None:
        if ctx.number > len(self._recorded):
            raise SendNotSupportedError(
                f"the transcript has only {len(self._recorded)} turn(s)", engine=self.engine_name
            )
        for message in self._recorded[ctx.number - 1]:
            await ctx.emit(message)
            if message.resume_id:
                self.resume_id = message.resume_id
