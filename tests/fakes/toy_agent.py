"""A toy coding agent for the engine-writing guide: one process per turn, JSON lines out.

    python toy_agent.py [--resume ID] -- PROMPT

It prints ``{"event": "start", "conversation": ID}``, then ``{"event": "say", "text": ...}``
(and ``{"event": "tool", ...}`` for prompts starting with ``run ``), then
``{"event": "done", "total_tokens": N}`` where N counts every word of the conversation so far
(a running total, like real agents report). State lives in ``$TOY_HOME/<id>.json``.
``env NAME`` answers ``NAME=<value>`` from its environment. Prompts ``slow`` (sleeps until signalled), ``stubborn`` (ignores SIGINT and SIGTERM), ``crash`` (exits 3 mid-turn) and ``garbage`` (a line
that is not JSON) exercise the engine's failure paths.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path


def say(event: dict[str, object]) -> None:
    print(json.dumps(event), flush=True)


def main(argv: list[str]) -> int:
    resume = argv[argv.index("--resume") + 1] if "--resume" in argv else None
    prompt = argv[argv.index("--") + 1]
    home = Path(os.environ.get("TOY_HOME", "."))
    conversation = resume or uuid.uuid4().hex[:12]
    state_file = home / f"{conversation}.json"
    if resume and not state_file.exists():
        print(f"unknown conversation {resume}", file=sys.stderr)
        return 2
    total = json.loads(state_file.read_text())["total"] if resume else 0
    say({"event": "start", "conversation": conversation})
    if prompt == "slow":
        say({"event": "say", "text": "thinking hard"})
        time.sleep(60)
    if prompt == "stubborn":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say({"event": "say", "text": "not listening"})
        time.sleep(60)
    if prompt == "crash":
        say({"event": "say", "text": "about to fall over"})
        print("toy agent: simulated crash", file=sys.stderr)
        return 3
    if prompt == "garbage":
        print("this is not json", flush=True)
    if prompt.startswith("run "):
        say({"event": "tool", "id": "t1", "command": prompt[4:], "output": prompt[4:].upper()})
    if prompt.startswith("env "):
        # Reports one variable of its environment (trace-context tests).
        answer = f"{prompt[4:]}={os.environ.get(prompt[4:], '')}"
    else:
        answer = f"you said: {prompt}"
    say({"event": "say", "text": answer})
    total += len(prompt.split()) + len(answer.split())
    state_file.write_text(json.dumps({"total": total}))
    say({"event": "done", "total_tokens": total})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
