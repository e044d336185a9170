"""``agentrun catalog``: what the model catalog knows of some models."""

from __future__ import annotations

import argparse

from .._vocabulary.context import default_catalog

__all__ = ["catalog"]


def catalog(args: argparse.Namespace) -> int:
    known = default_catalog()
    status = 0
    for model in args.models:
        info = known.lookup(model)
        if info is None:
            print(f"{model}: unknown")
            status = 1
            continue
        print(
            f"{model}: context window {info.context_window}, max output "
            f"{info.max_output_tokens} ({info.matched_by} match on {info.id}; {info.source})"
        )
    return status
