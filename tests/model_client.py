"""A raw HTTP client for tests of the embedded model server: requests written byte by byte, so
a test controls keep-alive, chunking and headers, and replies parsed as they came (SSE events,
chunked bodies) without an HTTP library in between.

Import from test modules (``tests/`` is on ``sys.path``)::

    from model_client import post, Reply
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from agentrun.offline import ModelServer

__all__ = ["Reply", "exchange", "parse_reply", "post", "raw_request"]


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def sse(self) -> list[tuple[str | None, str]]:
        """(event, data) pairs."""
        out: list[tuple[str | None, str]] = []
        for block in self.body.decode().split("\n\n"):
            if not block.strip():
                continue
            event: str | None = None
            data: list[str] = []
            for line in block.split("\n"):
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
            out.append((event, "\n".join(data)))
        return out

    def sse_json(self) -> list[dict[str, Any]]:
        return [json.loads(d) for _, d in self.sse() if d != "[DONE]"]


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while True:
        line, _, rest = data.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        data = rest[size + 2 :]


def parse_reply(raw: bytes) -> tuple[Reply, bytes]:
    """Parse one response from ``raw``; return it and the bytes after it (keep-alive)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    if 100 <= status < 200:
        return Reply(status, headers, b""), rest
    if headers.get("transfer-encoding") == "chunked":
        return Reply(status, headers, _dechunk(rest)), rest[_chunked_length(rest) :]
    if "content-length" in headers:
        n = int(headers["content-length"])
        return Reply(status, headers, rest[:n]), rest[n:]
    return Reply(status, headers, rest), b""


def _chunked_length(data: bytes) -> int:
    pos = 0
    while True:
        end = data.index(b"\r\n", pos)
        size = int(data[pos:end].split(b";")[0], 16)
        pos = end + 2
        if size == 0:
            return pos + 2
        pos += size + 2


async def exchange(server: ModelServer | int, raw_requests: list[bytes]) -> list[Reply]:
    """Send raw requests on one connection to a server (or a port on 127.0.0.1); the last
    should say Connection: close."""
    port = server if isinstance(server, int) else server.port
    async with await anyio.connect_tcp("127.0.0.1", port) as conn:
        for req in raw_requests:
            await conn.send(req)
        data = b""
        while True:
            try:
                data += await conn.receive()
            except anyio.EndOfStream:
                break
    replies: list[Reply] = []
    while data:
        reply, data = parse_reply(data)
        if reply.status == 100:
            continue
        replies.append(reply)
    return replies


def raw_request(
    path: str, body: Any, *, close: bool = True, headers: dict[str, str] | None = None
) -> bytes:
    payload = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
    ]
    if close:
        lines.append("Connection: close")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def post(server: ModelServer, path: str, body: Any) -> Reply:
    (reply,) = await exchange(server, [raw_request(path, body)])
    return reply
