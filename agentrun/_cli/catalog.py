"""``agentrun catalog``: what the model catalog knows of some models."""

from __future__ import annotations

import argparse
import difflib

from .._vocabulary.context import default_catalog

__all__ = ["catalog"]


def catalog(args: argparse.Namespace) -> int:
    known = default_catalog()
    status = 0
    models: list[str] = args.models
    for model in models:
        info = known.lookup(model)
        if info is None:
            close = difflib.get_close_matches(model.lower(), known.names(), n=3, cutoff=0.5)
            hint = f" (closest: {', '.join(close)})" if close else ""
            print(f"{model}: unknown{hint}")
            status = 1
            continue
        print(
            f"{model}: context window {info.context_window}, max output "
            f"{info.max_output_tokens} ({info.matched_by} match on {info.id}; {info.source})"
        )
    return status
