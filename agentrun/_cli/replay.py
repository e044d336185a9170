"""``agentrun replay``: a recorded transcript through its engine's translator."""

from __future__ import annotations

import argparse
import json

from .._vocabulary.errors import ConfigurationError
from .._vocabulary.summary import TurnSummary
from .render import Renderer
from .run import json_line

__all__ = ["replay", "summary_line"]


#: ``json.dumps`` as it is called without arguments, less the check for containers that hold
#: themselves: a dumped summary is made of new dicts and lists, none held twice.
_encode = json.JSONEncoder(check_circular=False).encode
#: ``model_dump(mode="json")`` without the method's own arguments to pass on.
_to_python = TurnSummary.__pydantic_serializer__.to_python


def summary_line(summary: TurnSummary) -> str:
    """A turn's summary as ``--summary`` prints it: one line of JSON, ASCII only (every
    terminal can show it). The same text as ``json.dumps(summary.model_dump(mode="json"))``."""
    return _encode(_to_python(summary, mode="json"))


def replay(args: argparse.Namespace) -> int:
    from ..engines._registry import translator_names
    from ..engines._replay import replay as replay_transcript

    known = translator_names()
    if args.engine not in known:
        raise ConfigurationError(
            f"no translator for engine {args.engine!r} (known: {', '.join(known)})",
            option="engine",
        )
    turns = replay_transcript(args.file, engine=args.engine)
    if getattr(args, "atif", False):
        from .._store.trajectory import to_atif

        print(to_atif(turns).model_dump_json(exclude_none=True, indent=2))
        return 0
    renderer = None if (args.json or args.summary) else Renderer()
    for turn in turns:
        if args.summary:
            print(summary_line(turn.summary))
            continue
        for message in turn.messages:
            if renderer is None:
                print(json_line(message))
            else:
                renderer.message(message)
        if renderer is not None:
            renderer.summary(turn.summary)
    return 0
