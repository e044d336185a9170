"""A stand-in agent for bench/latency.py: speaks just enough Claude Code stream-json.

``python _latency_agent.py RATE SECONDS [flags...]``: for each user line on stdin it writes
RATE assistant text lines per second for SECONDS, each text the ``time.perf_counter_ns()`` at
which it was written (CLOCK_MONOTONIC, comparable across processes on Linux), then a result.
"""

import json
import sys
import time

rate = float(sys.argv[1])
seconds = float(sys.argv[2])
out = sys.stdout
for turn, _ in enumerate(sys.stdin, start=1):
    count = int(rate * seconds)
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        while time.perf_counter() < due:
            pass
        event = {
            "type": "assistant",
            "message": {
                "id": f"m{turn}-{i}",
                "role": "assistant",
                "model": "bench",
                "content": [{"type": "text", "text": str(time.perf_counter_ns())}],
            },
            "parent_tool_use_id": None,
            "session_id": "bench",
        }
        out.write(json.dumps(event) + "\n")
        out.flush()
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "done",
        "session_id": "bench",
        "num_turns": 1,
        "total_cost_usd": 0.0,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    out.write(json.dumps(result) + "\n")
    out.flush()
