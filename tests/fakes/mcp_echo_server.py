"""A tiny MCP server over stdio (newline-delimited JSON-RPC) with one tool, ``echo``.

Agents under test (Codex's ``[mcp_servers.demo]``) start it; it answers ``initialize``,
``tools/list`` and ``tools/call`` and nothing else.
"""

from __future__ import annotations

import json
import sys

TOOL = {
    "name": "echo",
    "description": "Echo the given text back.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}


def answer(request_id: object, result: object) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> int:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, request_id = msg.get("method"), msg.get("id")
        if request_id is None:
            continue  # notifications
        params = msg.get("params") or {}
        if method == "initialize":
            answer(request_id, {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "demo", "version": "1.0.0"},
            })  # fmt: skip
        elif method == "tools/list":
            answer(request_id, {"tools": [TOOL]})
        elif method == "tools/call":
            text = str((params.get("arguments") or {}).get("text", ""))
            answer(request_id, {"content": [{"type": "text", "text": f"echo: {text}"}]})
        else:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id,
                                         "error": {"code": -32601, "message": "not found"}}) + "\n")  # fmt: skip
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
