"""``agentrun replay``: a recorded transcript through its engine's translator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .._vocabulary.errors import ConfigurationError
from .._vocabulary.messages import MessageType
from .._vocabulary.summary import TurnSummary
from .render import Renderer

__all__ = ["REPLAY_MAX_BYTES", "replay"]

#: The largest transcript ``agentrun replay`` reads (a bound, so a device or a runaway file
#: cannot be read forever).
REPLAY_MAX_BYTES = 4 * 1024**3


def replay(args: argparse.Namespace) -> int:
    from ..engines._replay import replay_turns

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
    if not any(m.type is not MessageType.ERROR for turn in turns for m in turn):
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
                print(json.dumps(message.model_dump(mode="json")))
            else:
                renderer.message(message)
        if renderer is not None:
            renderer.summary(summary)
    return 0
