"""``agentrun record``: a real agent's raw output against the model server (fixtures)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .run import DEFAULT_PROMPT

__all__ = ["record"]


async def record(args: argparse.Namespace) -> int:
    from ..offline import Script, default_script
    from ..offline._recorder import record

    script = Script.from_file(args.script) if args.script else default_script()
    prompts = args.prompt or [DEFAULT_PROMPT]
    meta: Any = await record(args.engine, prompts=prompts, script=script, out=Path(args.out))
    print(json.dumps(meta, indent=2, default=str))
    return 0
