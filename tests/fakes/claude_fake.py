"""A fake ``claude`` for fault tests: speaks a little stream-json, then misbehaves.

Run as ``python claude_fake.py MODE [claude flags...]`` (the engine appends its flags). For each
user line on stdin it prints ``system/init`` and an assistant text, then, by MODE:

ok          a result (the control case)
crash       exits 3 mid-turn (stderr says why)
hang        goes silent and ignores interrupts
term        ignores SIGTERM and stdin EOF, and hangs
grandchild  starts a ``sleep`` grandchild (pid on stderr and in $FAKE_PIDFILE), then crashes
detached    starts a ``sleep`` in a session of its own that keeps stdout open (pid in
            $FAKE_PIDFILE), then crashes
nonewline   a result without a trailing newline, then exits 0
huge        a 100 MB line, then a result
garbage     undecodable bytes and a non-JSON line, then a result
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

MODE = sys.argv[1]


def out(obj: object, end: str = "\n") -> None:
    sys.stdout.write(json.dumps(obj) + end)
    sys.stdout.flush()


def result(turn: int) -> dict[str, object]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": f"answer {turn}",
        "session_id": "fake-session",
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
        "total_cost_usd": 0.001 * turn,
    }


def main() -> None:
    if MODE == "term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    turn = 0
    for raw in sys.stdin:
        msg = json.loads(raw)
        if msg.get("type") != "user":
            continue  # control requests (interrupt) are ignored
        turn += 1
        out({"type": "system", "subtype": "init", "session_id": "fake-session", "model": "fake"})
        out(
            {
                "type": "assistant",
                "message": {
                    "id": f"msg_{turn}",
                    "model": "fake",
                    "content": [{"type": "text", "text": f"before the fault {turn}"}],
                    "usage": {"input_tokens": 5, "cache_read_input_tokens": 10},
                },
                "parent_tool_use_id": None,
            }
        )
        if MODE == "ok":
            out(result(turn))
        elif MODE == "crash":
            sys.stderr.write("fake claude: simulated crash\n")
            sys.exit(3)
        elif MODE in ("hang", "term"):
            while True:
                time.sleep(1)
        elif MODE == "grandchild":
            child = subprocess.Popen(["sleep", "300"])
            pidfile = os.environ.get("FAKE_PIDFILE")
            if pidfile:
                with open(pidfile, "w") as fh:
                    fh.write(str(child.pid))
            sys.stderr.write(f"fake claude: left grandchild {child.pid}\n")
            sys.exit(4)
        elif MODE == "detached":
            child = subprocess.Popen(["sleep", "300"], start_new_session=True)
            pidfile = os.environ.get("FAKE_PIDFILE")
            if pidfile:
                with open(pidfile, "w") as fh:
                    fh.write(str(child.pid))
            sys.stderr.write("fake claude: left a detached child holding stdout\n")
            sys.exit(4)
        elif MODE == "nonewline":
            out(result(turn), end="")
            sys.exit(0)
        elif MODE == "huge":
            sys.stdout.write(
                '{"type":"system","subtype":"big","blob":"' + "x" * (100 << 20) + '"}\n'
            )
            out(result(turn))
        elif MODE == "garbage":
            sys.stdout.buffer.write(b"\xff\xfe\x00garbage\n")
            sys.stdout.write("this is not json\n")
            out(result(turn))
    if MODE == "term":
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
