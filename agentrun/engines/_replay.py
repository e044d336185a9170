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

from .._bases.translator import Translator, frame_problem_message
from .._turns.engine import Engine
from .._turns.session import Session
from .._turns.turn import TurnContext
from .._vocabulary.errors import SendNotSupportedError
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.options import SessionOptions
from .._wire.framing import (
    DEFAULT_MAX_LINE_BYTES,
    JsonProblem,
    LineFramer,
    LineTooLong,
    decode_json_line,
)
from ._registry import get_translator

__all__ = [
    "ReplayEngine",
    "read_events",
    "read_sidecars",
    "replay_turns",
    "sidecar_path",
    "translate_events",
]


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


def translate_events(events: Iterable[Any | Message], translator: Translator) -> Iterator[Message]:
    """Every message a translator makes of ``events``, then of the end of the stream."""
    for event in events:
        if isinstance(event, Message):
            yield event
        else:
            yield from translator.feed(event)
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
    events: Iterable[Any | Message] = read_events(path, engine=engine)
    sidecars = read_sidecars(path, translator.sidecars)
    if sidecars:
        events = list(events)
        translator.use_sidecars(sidecars, events)
    turns: list[list[Message]] = []
    current: list[Message] = []
    number = 1
    result = MessageType.RESULT
    for message in translate_events(events, translator):
        current.append(message.in_turn(number))
        if message.type is result:
            turns.append(current)
            current = []
            number += 1
    if current:
        turns.append(current)
    return turns


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
