"""``agentrun replay``: a recorded transcript through its engine's translator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .._vocabulary.errors import ConfigurationError
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.summary import TurnSummary
from .render import Renderer
from .run import json_line

__all__ = ["REPLAY_MAX_BYTES", "replay"]

#: The largest transcript ``agentrun replay`` reads (a bound, so a device or a runaway file
#: cannot be read forever).
REPLAY_MAX_BYTES = 4 * 1024**3

#: How many events of a transcript are read to decide whether it is the engine's.
RECOGNITION_SAMPLE = 256

#: Fields a passed-through event sets: an event the translator did not know.
_PASSTHROUGH_FIELDS = frozenset({"type", "subtype", "data", "raw", "turn"})
#: Error codes of lines that could not be read as events at all.
_UNREADABLE = frozenset({"protocol", "invalid_json", "invalid_utf8", "line_too_long"})


def _known(message: Message) -> bool:
    """Whether the translator made something of its own of an event: not a pass-through of an
    unknown kind, not an unreadable line, not the ``init`` every translator opens with."""
    if not isinstance(message.type, MessageType) or message.type is MessageType.INIT:
        return False
    if message.model_fields_set <= _PASSTHROUGH_FIELDS:
        return False
    if message.type is MessageType.ERROR:
        return message.error is not None and message.error.code not in _UNREADABLE
    return True


def recognised(path: Path, engine: str) -> bool:
    """Whether ``path`` is a transcript of ``engine``: of its first events, at least one and
    at least as many as fell to the translator's pass-through (or were unreadable) were
    recognised. A Claude transcript replayed as Codex is all pass-through; a Codex one replayed
    as OpenCode has one event in five that both know (``error``)."""
    from ..engines._registry import get_translator
    from ..engines._replay import read_events

    translator = get_translator(engine)
    known = foreign = 0
    for seen, event in enumerate(read_events(path, engine=engine)):
        if seen >= RECOGNITION_SAMPLE:
            break
        if isinstance(event, Message):
            foreign += 1
            continue
        try:
            out = translator.feed(event)
        except Exception:  # a translator that chokes on a foreign event does not know it
            foreign += 1
            continue
        if any(_known(m) for m in out):
            known += 1
        elif out and not all(m.type is MessageType.INIT for m in out):
            foreign += 1
    return known > 0 and known >= foreign


def replay(args: argparse.Namespace) -> int:
    from ..engines._registry import translator_names
    from ..engines._replay import replay_turns

    known = translator_names()
    if args.engine not in known:
        raise ConfigurationError(
            f"no translator for engine {args.engine!r} (known: {', '.join(known)})",
            option="engine",
        )
    path = Path(args.file)
    if not path.exists():
        raise ConfigurationError(f"no such transcript: {args.file}", option="file")
    if path.is_dir():
        raise ConfigurationError(f"{args.file} is a directory, not a transcript", option="file")
    if not path.is_file():
        raise ConfigurationError(
            f"{args.file} is not a regular file (a device or a pipe cannot be replayed)",
            option="file",
        )
    if path.stat().st_size > REPLAY_MAX_BYTES:
        raise ConfigurationError(
            f"{args.file} is larger than {REPLAY_MAX_BYTES // 1024**3} GiB", option="file"
        )
    try:
        turns = replay_turns(path, engine=args.engine)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read {args.file}: {exc.strerror}", option="file"
        ) from None
    if not any(m.type is not MessageType.ERROR for turn in turns for m in turn) or not (
        recognised(path, args.engine)
    ):
        raise ConfigurationError(
            f"{args.file} holds no {args.engine} events (empty, or not a transcript of it)",
            option="file",
        )
    renderer = None if (args.json or args.summary) else Renderer()
    for messages in turns:
        summary = TurnSummary.from_messages(messages)
        if args.summary:
            print(json.dumps(summary.model_dump(mode="json")))
            continue
        for message in messages:
            if renderer is None:
                print(json_line(message))
            else:
                renderer.message(message)
        if renderer is not None:
            renderer.summary(summary)
    return 0
