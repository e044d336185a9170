"""The model server's HTTP/1.1 layer, on anyio sockets.

What it reads: a request line, headers, a ``Content-Length`` or chunked body (bounded, gzip or
deflate decoded), ``Expect: 100-continue``; requests follow each other on a keep-alive
connection. What it writes: a response with a fixed length, chunked, or delimited by closing
the connection, and Server-Sent Events on such a response. It knows nothing of model APIs:
:func:`serve_connection` hands every request to a handler and keeps the connection open while
the handler says so.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from .._turns.boundary import single_error
from .._vocabulary.errors import AgentrunError

__all__ = ["BackgroundServer", "HttpRequest", "Responder", "dumps", "serve_connection"]

_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
    529: "Overloaded",
}

#: A peer that went away: the connection ends quietly.
_STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.DelimiterNotFound,
    ConnectionError,
)


def dumps(obj: Any) -> str:
    """Compact JSON, as the model APIs send it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _HttpProblem(AgentrunError):
    """A request the server cannot read: answered with ``status`` and the connection closed
    (never leaves the server)."""

    error_code: ClassVar[str] = "http_problem"

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class HttpRequest:
    """One request as read from the connection (header names in lower case)."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The last value of header ``name``, or ``None``."""
        value: str | None = None
        for key, val in self.headers:
            if key == name:
                value = val
        return value

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]

    @property
    def keep_alive(self) -> bool:
        conn = (self.header("connection") or "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


class Responder:
    """Writes one HTTP response: fixed length, chunked, or close-delimited; and SSE events."""

    def __init__(self, stream: anyio.abc.ByteSendStream, version: str) -> None:
        self._stream = stream
        self._version = version if version in ("HTTP/1.0", "HTTP/1.1") else "HTTP/1.1"
        self._chunked = False
        self._event_delay = 0.0

    async def start(
        self,
        status: int,
        headers: Sequence[tuple[str, str]],
        *,
        length: int | None = None,
        chunked: bool = False,
        keep_alive: bool = True,
    ) -> None:
        reason = _REASONS.get(status, "Status")
        lines = [f"{self._version} {status} {reason}"]
        lines.extend(f"{k}: {v}" for k, v in headers)
        self._chunked = chunked and self._version == "HTTP/1.1"
        if length is not None:
            lines.append(f"content-length: {length}")
        elif self._chunked:
            lines.append("transfer-encoding: chunked")
        lines.append(f"connection: {'keep-alive' if keep_alive else 'close'}")
        await self._stream.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def write(self, data: bytes) -> None:
        if not data:
            return
        if self._chunked:
            data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
        await self._stream.send(data)

    async def finish(self) -> None:
        if self._chunked:
            await self._stream.send(b"0\r\n\r\n")

    async def send_json(
        self,
        status: int,
        body: Any,
        keep_alive: bool,
        *,
        head: bool = False,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """A whole JSON response (``head``: the headers only)."""
        data = dumps(body).encode()
        await self.start(
            status,
            [("content-type", "application/json"), *headers],
            length=len(data),
            keep_alive=keep_alive,
        )
        if not head:
            await self.write(data)

    async def start_events(
        self,
        *,
        chunked: bool,
        keep_alive: bool,
        delay: float = 0.0,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Start an event stream; :meth:`event` then waits ``delay`` seconds after each event."""
        self._event_delay = delay
        await self.start(
            200,
            [
                ("content-type", "text/event-stream; charset=utf-8"),
                ("cache-control", "no-cache"),
                *headers,
            ],
            chunked=chunked,
            keep_alive=keep_alive,
        )

    async def event(self, data: str, name: str | None = None) -> None:
        """One Server-Sent Event (``event: name`` when given, then ``data: ...``)."""
        text = f"event: {name}\ndata: {data}\n\n" if name else f"data: {data}\n\n"
        await self.write(text.encode())
        if self._event_delay:
            await anyio.sleep(self._event_delay)


#: Handles one request; returns whether the connection stays open.
Handler = Callable[[HttpRequest, Responder], Awaitable[bool]]


@dataclass(frozen=True)
class Limits:
    """Bounds on what a request may hold."""

    max_header_bytes: int = 64 * 1024
    max_body_bytes: int = 64 * 1024 * 1024


async def serve_connection(
    conn: anyio.abc.SocketStream,
    handler: Handler,
    limits: Limits,
    errors: list[Exception],
) -> None:
    """Serve requests on ``conn`` until the peer or the handler closes it. A request that cannot
    be read gets a plain JSON error; an unexpected exception is appended to ``errors``."""
    async with conn:
        reader = BufferedByteReceiveStream(conn)
        try:
            while True:
                try:
                    req = await _read_request(reader, conn, limits)
                except _HttpProblem as problem:
                    await _plain_error(conn, problem.status, problem.message)
                    return
                if req is None:
                    return
                if not await handler(req, Responder(conn, req.version)):
                    return
        except _STREAM_ERRORS:
            return
        except Exception as exc:  # keep serving other connections
            print(f"agentrun model server: {exc!r}", file=sys.stderr)
            errors.append(exc)


async def _read_line(reader: BufferedByteReceiveStream, limit: int) -> bytes:
    try:
        return await reader.receive_until(b"\r\n", limit)
    except anyio.DelimiterNotFound:
        raise _HttpProblem(431, "request line or header too long") from None


async def _read_request(
    reader: BufferedByteReceiveStream, conn: anyio.abc.SocketStream, limits: Limits
) -> HttpRequest | None:
    line = b""
    for _ in range(8):  # tolerate stray CRLFs between requests
        try:
            line = await _read_line(reader, 16 * 1024)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            return None
        if line:
            break
    if not line:
        return None
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _HttpProblem(400, "malformed request line")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    total = len(line)
    while True:
        hline = await _read_line(reader, limits.max_header_bytes)
        if not hline:
            break
        total += len(hline) + 2
        if total > limits.max_header_bytes or len(headers) >= 200:
            raise _HttpProblem(431, "request headers too large")
        name, sep, value = hline.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():
            raise _HttpProblem(400, "malformed header line")
        headers.append((name.lower(), value.strip()))
    req = HttpRequest(method=method.upper(), target=target, version=version, headers=headers)

    te = (req.header("transfer-encoding") or "").lower()
    length_text = req.header("content-length")
    if "100-continue" in (req.header("expect") or "").lower() and (te or length_text):
        await conn.send(f"{version} 100 Continue\r\n\r\n".encode("latin-1"))
    if "chunked" in te:
        req.body = await _read_chunked(reader, limits)
    elif length_text is not None:
        try:
            length = int(length_text)
        except ValueError:
            raise _HttpProblem(400, "bad content-length") from None
        if length < 0:
            raise _HttpProblem(400, "bad content-length")
        if length > limits.max_body_bytes:
            raise _HttpProblem(413, "request body too large")
        req.body = await reader.receive_exactly(length) if length else b""
    encoding = (req.header("content-encoding") or "").lower()
    if encoding in ("gzip", "x-gzip"):
        req.body = gzip.decompress(req.body)
    elif encoding == "deflate":
        req.body = zlib.decompress(req.body)
    return req


async def _read_chunked(reader: BufferedByteReceiveStream, limits: Limits) -> bytes:
    body = bytearray()
    while True:
        size_line = await _read_line(reader, 1024)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _HttpProblem(400, "bad chunk size") from None
        if size == 0:
            while await _read_line(reader, limits.max_header_bytes):
                pass  # trailers
            return bytes(body)
        if len(body) + size > limits.max_body_bytes:
            raise _HttpProblem(413, "request body too large")
        body += await reader.receive_exactly(size)
        if await reader.receive_exactly(2) != b"\r\n":
            raise _HttpProblem(400, "bad chunk terminator")


async def _plain_error(conn: anyio.abc.SocketStream, status: int, message: str) -> None:
    with anyio.move_on_after(2):
        body = {"error": {"message": message, "type": "invalid_request_error"}}
        await Responder(conn, "HTTP/1.1").send_json(status, body, keep_alive=False)


_Server = TypeVar("_Server", bound="BackgroundServer")


class BackgroundServer:
    """A loopback server whose tasks run in a task group of its own. ``async with`` starts it
    (:meth:`start`, which opens ``_listener``); leaving the block cancels its tasks, closes the
    listener (shielded) and raises the one error a task left, never an exception group. The
    caller's own exception propagates as itself: the group never sees it."""

    _listener: anyio.abc.Listener[Any] | None = None
    _tg: anyio.abc.TaskGroup | None = None

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Listen, and serve in ``task_group`` (which the caller owns)."""
        raise NotImplementedError

    def _closed(self) -> None:
        """What is left to undo once the listener is closed (nothing by default)."""

    async def __aenter__(self: _Server) -> _Server:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self.start(tg)
        except BaseException:
            self._tg = None
            tg.cancel_scope.cancel()
            try:
                await tg.__aexit__(None, None, None)
            except BaseException as group:
                raise single_error(group) from None
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, self._tg = self._tg, None
        if tg is None:
            return None
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
        except BaseException as group:
            raise single_error(group) from None
        finally:
            if self._listener is not None:
                with anyio.CancelScope(shield=True):
                    await self._listener.aclose()
                self._closed()
        return None
