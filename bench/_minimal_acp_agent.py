"""The smallest ACP agent bench/sessions.py needs: initialize, session/new, session/prompt.

A prompt is answered with one ``agent_message_chunk`` echoing its text and ``end_turn``, after
``SECONDS`` (the first argument, default 0) as a model would take. Each ``session/new`` opens a
session of its own id, so that pooled sessions share one agent. No threads and nothing
imported beyond the standard library's ``json``, ``sys`` and ``time``, so that hundreds fit in
memory.
"""

import json
import sys
import time

delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
out = sys.stdout
opened = 0
for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    ident = message.get("id")
    if method == "initialize":
        result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
    elif method == "session/new":
        opened += 1
        result = {"sessionId": f"s{opened}"}
    elif method == "session/prompt":
        words = "".join(block.get("text", "") for block in message["params"]["prompt"])
        chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": words}}
        update = {"sessionId": message["params"]["sessionId"], "update": chunk}
        if delay:
            time.sleep(delay)
        out.write(json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": update}))
        out.write("\n")
        result = {"stopReason": "end_turn"}
    elif ident is not None:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        out.write(json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}) + "\n")
        out.flush()
        continue
    else:
        continue
    out.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
    out.flush()
