"""``agentrun record``: a real agent's raw output against the model server (fixtures).

The transcript goes to ``OUT.jsonl`` and what was recorded (argv, prompts, the script, each
turn's outcome) to ``OUT.meta.json``; standard output only says where they are.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, cast

from .._vocabulary.errors import ConfigurationError
from ..engines._registry import engine_names
from .run import DEFAULT_PROMPT, load_script

__all__ = ["record"]


async def record(args: argparse.Namespace) -> int:
    from ..offline import default_script
    from ..offline._embedded import EMBEDDED_ENGINES
    from ..offline._recorder import record

    if args.engine not in EMBEDDED_ENGINES:
        what = (
            f"engine {args.engine!r} has no offline configuration"
            if args.engine in engine_names()
            else f"unknown engine {args.engine!r}"
        )
        raise ConfigurationError(
            f"{what}: recording drives a pinned agent against the embedded model server, so "
            f"the engine needs an offline configuration (engines that have one: "
            f"{', '.join(EMBEDDED_ENGINES)}); for another agent, record its output with your "
            "own configuration and replay it with 'agentrun replay'",
            option="engine",
        )
    for prompt in args.prompt:
        if not prompt.strip():
            raise ConfigurationError("a --prompt is empty", option="prompt")
    out = Path(args.out)
    if out.parent != Path() and not out.parent.is_dir():
        raise ConfigurationError(f"--out {args.out}: no such directory", option="out")
    script = load_script(args.script) or default_script()
    prompts = args.prompt or [DEFAULT_PROMPT]
    meta = await record(args.engine, prompts=prompts, script=script, out=out)
    turns = cast("list[dict[str, Any]]", meta.get("turns", []))
    failed = sum(1 for t in turns if not t.get("ok", False))
    # Recording a failing turn is a recording too (error fixtures): the count says so.
    note = f" ({failed} did not end ok)" if failed else ""
    print(
        f"recorded {len(turns)} turn(s) of {args.engine}{note} to {out.with_suffix('.jsonl')}; "
        f"metadata in {out.with_suffix('.meta.json')}"
    )
    return 0
