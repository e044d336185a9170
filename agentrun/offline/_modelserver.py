"""A scripted model server for offline tests of real agent programs.

:class:`ModelServer` listens on ``127.0.0.1`` (a random free port by default) and speaks the
four model APIs the pinned agents use, streaming a :class:`~agentrun.offline.Script`:

* ``POST /v1/messages`` - Anthropic Messages (SSE), Claude Code (``?beta=true``);
* ``POST /v1/messages/count_tokens`` - ``{"input_tokens": N}``, Claude Code's context report;
* ``POST /v1/responses`` - OpenAI Responses (SSE), Codex;
* ``POST /v1/chat/completions`` - OpenAI Chat Completions (SSE), OpenCode and Qwen Code;
* ``POST /v1beta/models/<m>:streamGenerateContent?alt=sse`` / ``:generateContent`` - the Gemini
  API, Gemini CLI (``:countTokens`` answers ``{"totalTokens": N}``).

Every model request consumes the next scripted turn, except ``count_tokens`` calls (about four
request bytes per token) and *side requests*: calls an agent makes beside the conversation
(session titles, prompt suggestions), recognised by the :class:`SideRequest` matchers the server
is given (:data:`DEFAULT_SIDE_REQUESTS`: OpenCode's, claude-agent-acp's and codex-acp's title
requests) and answered aside, in the API's own shape. When the turns run out the server
answers with :data:`~agentrun.offline.EXHAUSTED_TEXT` instead of hanging.

Every request is recorded in :attr:`ModelServer.requests` (:class:`RecordedRequest`).

The HTTP layer is a small HTTP/1.1 implementation on anyio sockets: request line, headers,
``Content-Length`` or chunked bodies (bounded), ``Expect: 100-continue``, keep-alive, one task
per connection. Anthropic and Responses streams use chunked transfer encoding on a keep-alive
connection; Chat Completions streams are close-delimited (``Connection: close``), the shape
OpenCode was recorded with.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal, cast

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from .._turns.boundary import single_error
from .._vocabulary.errors import AgentrunError, UsageError
from ._script import (
    HttpError,
    Script,
    Text,
    Thinking,
    ToolCall,
    Turn,
    Usage,
    default_script,
)

__all__ = ["ApiKind", "ModelServer", "RecordedRequest"]

ApiKind = Literal["anthropic", "count_tokens", "responses", "chat", "gemini", "other"]

TITLE_PROMPT_PREFIX = "You are a title generator"

#: Gemini API ``error.status`` by HTTP status.
_GEMINI_ERROR_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

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

_STREAM_ERRORS = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.DelimiterNotFound,
    ConnectionError,
)


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the server received."""

    #: Order of arrival, from 0.
    seq: int
    method: str
    #: The path without the query string.
    path: str
    #: The raw query string (``"beta=true"``) or ``""``.
    query: str
    #: Header names in lower case (a repeated header keeps its last value).
    headers: Mapping[str, str]
    #: The (decoded) request body.
    body: bytes
    #: The body parsed as JSON, or ``None``.
    json: Any
    api: ApiKind
    #: True for OpenCode's title-generator side request (no turn consumed).
    title_request: bool = False
    #: The name of the :class:`SideRequest` that answered it (no turn consumed), or ``None``.
    side_request: str | None = None
    #: Index into ``Script.turns`` of the turn that answered, or ``None``.
    turn_index: int | None = None
    #: True when the script had no turns left and the fallback text was sent.
    exhausted: bool = False
    #: The HTTP status answered.
    status: int = 200

    @property
    def model(self) -> str | None:
        body = self.json
        if isinstance(body, dict):
            value = cast(dict[str, Any], body).get("model")
            return value if isinstance(value, str) else None
        return None

    @property
    def is_model_call(self) -> bool:
        """A request that consumed (or tried to consume) a scripted turn."""
        return self.api in ("anthropic", "responses", "chat") and self.side_request is None


class _HttpProblem(AgentrunError):
    """A request the server answers with an HTTP error status (never leaves the server)."""

    error_code: ClassVar[str] = "http_problem"

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        value: str | None = None
        for key, val in self.headers:
            if key == name:
                value = val
        return value

    @property
    def keep_alive(self) -> bool:
        conn = (self.header("connection") or "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


@dataclass
class _Served:
    turn: Turn
    turn_index: int | None
    exhausted: bool
    seq: int
    usage: Usage = field(default_factory=Usage)
    #: The tool names the request offered (for :func:`map_tool_call`).
    offered: frozenset[str] = frozenset()


class _Responder:
    """Writes one HTTP response: fixed length, chunked, or close-delimited."""

    def __init__(self, stream: anyio.abc.ByteSendStream, version: str) -> None:
        self._stream = stream
        self._version = version if version in ("HTTP/1.0", "HTTP/1.1") else "HTTP/1.1"
        self._chunked = False

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


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _pieces(text: str, size: int) -> list[str]:
    if not text:
        return []
    return [text[i : i + size] for i in range(0, len(text), size)]


def _json_pieces(text: str) -> list[str]:
    """Split a JSON text into three roughly equal pieces (as real servers stream arguments)."""
    if len(text) < 6:
        return [text]
    step = math.ceil(len(text) / 3)
    return _pieces(text, step)


def _text_of(content: Any) -> str:
    """The text of a chat message ``content`` (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in cast(list[Any], content):
            if isinstance(part, dict):
                text = cast(dict[str, Any], part).get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return ""


def _is_title_request(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    payload = cast(dict[str, Any], body)
    messages = payload.get("messages")
    if isinstance(messages, list):
        for msg in cast(list[Any], messages):
            if isinstance(msg, dict):
                m = cast(dict[str, Any], msg)
                if m.get("role") == "system" and _text_of(m.get("content")).lstrip().startswith(
                    TITLE_PROMPT_PREFIX
                ):
                    return True
    system = payload.get("system")
    return _text_of(system).lstrip().startswith(TITLE_PROMPT_PREFIX)


def _last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last message or input item of a request (any of the three APIs)."""
    items = body.get("messages")
    if not isinstance(items, list):
        items = body.get("input")
    if isinstance(items, str):
        return items
    if not isinstance(items, list) or not items:
        return ""
    last = cast(list[Any], items)[-1]
    if not isinstance(last, dict):
        return ""
    return _text_of(cast(dict[str, Any], last).get("content"))


@dataclass(frozen=True)
class SideRequest:
    """A model request that an agent makes beside the conversation (a session title, a prompt
    suggestion): ``match(api, body)`` recognises it and it is answered with ``answer`` (a
    function of the script, so a script can choose the title) without consuming a turn."""

    name: str
    match: Callable[[ApiKind, Mapping[str, Any]], bool]
    answer: Callable[[Script], str] = lambda script: script.title


def _opencode_title(api: ApiKind, body: Mapping[str, Any]) -> bool:
    return api == "chat" and _is_title_request(body)


def _claude_session_title(api: ApiKind, body: Mapping[str, Any]) -> bool:
    # Claude Code (as the Agent SDK runs it) names the session after a turn.
    text = _last_user_text(body)
    return api == "anthropic" and text.startswith("<session>") and "Write the title" in text


def _prompt_suggestion(api: ApiKind, body: Mapping[str, Any]) -> bool:
    # Claude Code (under the Agent SDK) and Qwen Code ask after a turn what the user might
    # type next.
    return "Reply with ONLY the suggestion" in _last_user_text(body)


def _codex_acp_title(api: ApiKind, body: Mapping[str, Any]) -> bool:
    return api == "responses" and "focus only on creating a title" in _last_user_text(body)


#: The side requests of the pinned agents: OpenCode's title generator, the session title
#: Claude Code asks for under claude-agent-acp, the prompt suggestion (answered with nothing)
#: of Claude Code and Qwen Code, and codex-acp's title (JSON ``{"title"}``).
DEFAULT_SIDE_REQUESTS: tuple[SideRequest, ...] = (
    SideRequest("opencode-title", _opencode_title),
    SideRequest("claude-session-title", _claude_session_title),
    SideRequest("prompt-suggestion", _prompt_suggestion, lambda script: ""),
    SideRequest(
        "codex-acp-title", _codex_acp_title, lambda script: json.dumps({"title": script.title})
    ),
)


def _classify(method: str, path: str) -> ApiKind:
    if method != "POST":
        return "other"
    p = path.rstrip("/")
    if p.endswith("/messages/count_tokens"):
        return "count_tokens"
    if p.endswith("/messages"):
        return "anthropic"
    if p.endswith("/responses"):
        return "responses"
    if p.endswith("/chat/completions"):
        return "chat"
    if "/models/" in p and p.endswith((":streamGenerateContent", ":generateContent")):
        return "gemini"
    if "/models/" in p and p.endswith(":countTokens"):
        return "count_tokens"
    return "other"


def _shell_command(call: ToolCall) -> str:
    value = call.arguments.get("command", call.arguments.get("cmd", ""))
    if isinstance(value, list):
        return " ".join(str(v) for v in cast(list[Any], value))
    return str(value)


def _tool_names(body: Mapping[str, Any]) -> frozenset[str]:
    """The names of the tools a request offers (Chat Completions, Anthropic and Responses)."""
    tools = body.get("tools")
    names: set[str] = set()
    if isinstance(tools, list):
        for tool in cast(list[Any], tools):
            if not isinstance(tool, dict):
                continue
            entry = cast(dict[str, Any], tool)
            function = entry.get("function")
            name = (
                cast(dict[str, Any], function).get("name")
                if isinstance(function, dict)
                else entry.get("name")
            )
            if isinstance(name, str):
                names.add(name)
    return frozenset(names)


def map_tool_call(
    api: ApiKind, call: ToolCall, offered: Collection[str] = ()
) -> tuple[str, dict[str, Any]]:
    """The tool name and arguments ``call`` becomes in ``api``'s shape; ``offered`` (the tool
    names of the request) tells agents of one API apart (Qwen Code's ``run_shell_command``
    beside OpenCode's ``bash``)."""
    if call.tool != "shell":
        return call.tool, dict(call.arguments)
    extra = {k: v for k, v in call.arguments.items() if k not in ("command", "cmd")}
    command = _shell_command(call)
    if api == "anthropic":
        return "Bash", {"command": command, **extra}
    if api == "gemini" or (
        api == "chat" and "run_shell_command" in offered and "bash" not in offered
    ):
        return "run_shell_command", {"command": command, **extra}
    if api == "chat":
        extra.setdefault("description", "Run a shell command")
        return "bash", {"command": command, **extra}
    extra.pop("description", None)
    extra.setdefault("yield_time_ms", 1000)
    return "exec_command", {"cmd": command, **extra}


def _estimate_usage(turn: Turn, body_len: int, first_call: bool) -> Usage:
    prompt = max(1, body_len // 4)
    cached = 0 if first_call else prompt * 9 // 10
    written = prompt * 9 // 10 if first_call else 0
    out_chars = 0
    thinking_chars = 0
    for block in turn.content:
        if isinstance(block, Text):
            out_chars += len(block.text)
        elif isinstance(block, Thinking):
            thinking_chars += len(block.text)
        else:
            out_chars += len(_dumps(block.arguments)) + 40
    reasoning = thinking_chars // 4
    return Usage(
        input_tokens=prompt - cached - written,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        output_tokens=out_chars // 4 + reasoning + 1,
        reasoning_tokens=reasoning,
    )


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}

_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


class ModelServer:
    """The scripted model server. Use it as an async context manager::

        async with ModelServer(script) as server:
            env = claude_offline(server.url, tmp_path).env
            ...
            assert server.requests[0].api == "anthropic"

    ``script`` defaults to :func:`~agentrun.offline.default_script`. ``port=0`` picks a free
    port. ``on_request`` is called with every :class:`RecordedRequest` once it is answered.
    ``side_requests`` recognise the calls answered aside (default:
    :data:`DEFAULT_SIDE_REQUESTS`; pass ``()`` to let every call consume the script);
    :attr:`side_requests_served` lists those answered.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        port: int = 0,
        max_header_bytes: int = 64 * 1024,
        max_body_bytes: int = 64 * 1024 * 1024,
        on_request: Callable[[RecordedRequest], None] | None = None,
        side_requests: Sequence[SideRequest] = DEFAULT_SIDE_REQUESTS,
    ) -> None:
        self.script: Script = script if script is not None else default_script()
        self.side_requests: tuple[SideRequest, ...] = tuple(side_requests)
        self._queue = self.script.expanded()
        self._next = 0
        self._port = port
        self._max_header = max_header_bytes
        self._max_body = max_body_bytes
        self._on_request = on_request
        self._listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._seq = 0
        self._model_calls = 0
        #: Every request received, in order of arrival.
        self.requests: list[RecordedRequest] = []
        #: Unexpected exceptions raised while handling a connection (should stay empty).
        self.errors: list[Exception] = []

    # ------------------------------------------------------------------ lifecycle

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        if self._listener is None:
            raise UsageError("the model server is not running")
        return int(self._listener.extra(anyio.abc.SocketAttribute.local_port))

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (no trailing slash, no ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def side_requests_served(self) -> list[RecordedRequest]:
        """The side requests answered aside (titles, suggestions), in order."""
        return [r for r in self.requests if r.side_request is not None]

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """The requests that consumed a scripted turn (or got the exhausted fallback)."""
        return [r for r in self.requests if r.is_model_call]

    @property
    def remaining_turns(self) -> int:
        """Requests the script can still answer (``repeat`` counted)."""
        return len(self._queue) - self._next

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Listen and serve inside ``task_group`` (cancel the group to stop)."""
        self._listener = await anyio.create_tcp_listener(
            local_host="127.0.0.1", local_port=self._port
        )
        task_group.start_soon(self._accept_loop, self._listener, task_group)

    async def __aenter__(self) -> ModelServer:
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self.start(tg)
        except BaseException:
            self._tg = None
            await tg.__aexit__(*sys.exc_info())
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
            # The server's tasks are cancelled: the group sees nothing of the caller's exception,
            # so that propagates as itself, never wrapped in an exception group.
            await tg.__aexit__(None, None, None)
        except BaseException as group:
            raise single_error(group) from None
        finally:
            if self._listener is not None:
                with anyio.CancelScope(shield=True):
                    await self._listener.aclose()
        return None

    async def serve_forever(self) -> None:
        """Serve until cancelled."""
        async with self:
            await anyio.sleep_forever()

    # ------------------------------------------------------------------ connections

    async def _accept_loop(
        self, listener: anyio.abc.Listener[anyio.abc.SocketStream], tg: anyio.abc.TaskGroup
    ) -> None:
        try:
            await listener.serve(self._connection, tg)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return

    async def _connection(self, conn: anyio.abc.SocketStream) -> None:
        async with conn:
            reader = BufferedByteReceiveStream(conn)
            try:
                while True:
                    try:
                        req = await self._read_request(reader, conn)
                    except _HttpProblem as problem:
                        await self._plain_error(conn, problem.status, problem.message)
                        return
                    if req is None:
                        return
                    if not await self._dispatch(req, conn):
                        return
            except _STREAM_ERRORS:
                return
            except Exception as exc:  # keep serving other connections
                print(f"agentrun model server: {exc!r}", file=sys.stderr)
                self.errors.append(exc)

    async def _read_line(self, reader: BufferedByteReceiveStream, limit: int) -> bytes:
        try:
            return await reader.receive_until(b"\r\n", limit)
        except anyio.DelimiterNotFound:
            raise _HttpProblem(431, "request line or header too long") from None

    async def _read_request(
        self, reader: BufferedByteReceiveStream, conn: anyio.abc.SocketStream
    ) -> _Request | None:
        line = b""
        for _ in range(8):  # tolerate stray CRLFs between requests
            try:
                line = await self._read_line(reader, 16 * 1024)
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
            hline = await self._read_line(reader, self._max_header)
            if not hline:
                break
            total += len(hline) + 2
            if total > self._max_header or len(headers) >= 200:
                raise _HttpProblem(431, "request headers too large")
            name, sep, value = hline.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise _HttpProblem(400, "malformed header line")
            headers.append((name.lower(), value.strip()))
        req = _Request(method=method.upper(), target=target, version=version, headers=headers)

        te = (req.header("transfer-encoding") or "").lower()
        length_text = req.header("content-length")
        if "100-continue" in (req.header("expect") or "").lower() and (te or length_text):
            await conn.send(f"{version} 100 Continue\r\n\r\n".encode("latin-1"))
        if "chunked" in te:
            req.body = await self._read_chunked(reader)
        elif length_text is not None:
            try:
                length = int(length_text)
            except ValueError:
                raise _HttpProblem(400, "bad content-length") from None
            if length < 0:
                raise _HttpProblem(400, "bad content-length")
            if length > self._max_body:
                raise _HttpProblem(413, "request body too large")
            req.body = await reader.receive_exactly(length) if length else b""
        encoding = (req.header("content-encoding") or "").lower()
        if encoding in ("gzip", "x-gzip"):
            req.body = gzip.decompress(req.body)
        elif encoding == "deflate":
            req.body = zlib.decompress(req.body)
        return req

    async def _read_chunked(self, reader: BufferedByteReceiveStream) -> bytes:
        body = bytearray()
        while True:
            size_line = await self._read_line(reader, 1024)
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _HttpProblem(400, "bad chunk size") from None
            if size == 0:
                while await self._read_line(reader, self._max_header):
                    pass  # trailers
                return bytes(body)
            if len(body) + size > self._max_body:
                raise _HttpProblem(413, "request body too large")
            body += await reader.receive_exactly(size)
            if await reader.receive_exactly(2) != b"\r\n":
                raise _HttpProblem(400, "bad chunk terminator")

    async def _plain_error(self, conn: anyio.abc.SocketStream, status: int, message: str) -> None:
        payload = _dumps({"error": {"message": message, "type": "invalid_request_error"}})
        data = payload.encode()
        with anyio.move_on_after(2):
            responder = _Responder(conn, "HTTP/1.1")
            await responder.start(
                status,
                [("content-type", "application/json")],
                length=len(data),
                keep_alive=False,
            )
            await responder.write(data)

    # ------------------------------------------------------------------ dispatch

    def _record(self, req: _Request, api: ApiKind, parsed: Any, **kw: Any) -> RecordedRequest:
        path, _, query = req.target.partition("?")
        rec = RecordedRequest(
            seq=self._seq,
            method=req.method,
            path=path,
            query=query,
            headers=dict(req.headers),
            body=req.body,
            json=parsed,
            api=api,
            **kw,
        )
        self._seq += 1
        return rec

    def _finish(self, rec: RecordedRequest) -> None:
        self.requests.append(rec)
        if self._on_request is not None:
            self._on_request(rec)

    def _take_turn(self, body_len: int) -> _Served:
        first = self._model_calls == 0
        self._model_calls += 1
        if self._next < len(self._queue):
            index, turn = self._queue[self._next]
            self._next += 1
            exhausted = False
        else:
            index, turn, exhausted = None, Turn.text(self.script.exhausted_text), True
        usage = turn.usage if turn.usage is not None else _estimate_usage(turn, body_len, first)
        return _Served(turn=turn, turn_index=index, exhausted=exhausted, seq=self._seq, usage=usage)

    async def _dispatch(self, req: _Request, conn: anyio.abc.SocketStream) -> bool:
        path = req.target.partition("?")[0]
        api = _classify(req.method, path)
        parsed: Any = None
        if req.body:
            try:
                parsed = json.loads(req.body)
            except (ValueError, UnicodeDecodeError):
                parsed = None
        keep = req.keep_alive
        out = _Responder(conn, req.version)

        if api == "other":
            if req.method in ("GET", "HEAD") and path in ("/", "/health", "/healthz"):
                rec = self._record(req, api, parsed, status=200)
                await self._send_json(out, 200, {"status": "ok"}, keep, head=req.method == "HEAD")
            else:
                rec = self._record(req, api, parsed, status=404)
                body = {
                    "error": {"message": f"no route for {req.method} {path}", "type": "not_found"}
                }
                await self._send_json(out, 404, body, keep)
            self._finish(rec)
            return keep

        if not isinstance(parsed, dict):
            rec = self._record(req, api, parsed, status=400)
            body = {
                "error": {
                    "message": "request body is not a JSON object",
                    "type": "invalid_request_error",
                }
            }
            await self._send_json(out, 400, body, keep)
            self._finish(rec)
            return keep
        payload = cast(dict[str, Any], parsed)

        if api == "count_tokens":
            rec = self._record(req, api, parsed)
            tokens = max(1, len(req.body) // 4)
            answer = {"totalTokens": tokens} if ":" in path else {"input_tokens": tokens}
            await self._send_json(out, 200, answer, keep)
            self._finish(rec)
            return keep

        model = payload.get("model")
        model_name = model if isinstance(model, str) else "fake-model"
        stream = payload.get("stream") is True
        if api == "gemini":
            model_name = path.rsplit("/", 1)[-1].split(":", 1)[0]
            stream = path.endswith(":streamGenerateContent")

        side = next((r for r in self.side_requests if r.match(api, payload)), None)
        if side is not None:
            rec = self._record(
                req,
                api,
                parsed,
                side_request=side.name,
                title_request=side.name == "opencode-title",
            )
            served = _Served(
                turn=Turn.text(side.answer(self.script)),
                turn_index=None,
                exhausted=False,
                seq=rec.seq,
                usage=Usage(input_tokens=max(1, len(req.body) // 4), output_tokens=6),
            )
            if api == "anthropic":
                keep = await self._serve_anthropic(out, served, model_name, stream, keep)
            elif api == "gemini":
                keep = await self._serve_gemini(out, served, model_name, stream, keep)
            elif api == "responses":
                keep = await self._serve_responses(out, served, model_name, stream, keep)
            else:
                keep = await self._serve_chat(out, served, model_name, stream, keep)
            self._finish(rec)
            return keep

        served = self._take_turn(len(req.body))
        served.offered = _tool_names(payload)
        turn = served.turn
        err = turn.http_error
        rec = self._record(
            req,
            api,
            parsed,
            turn_index=served.turn_index,
            exhausted=served.exhausted,
            status=err.status if err is not None else 200,
        )
        self._finish(rec)
        if turn.delay_before:
            await anyio.sleep(turn.delay_before)
        if turn.model is not None:
            model_name = turn.model
        if err is not None:
            await self._send_http_error(out, api, err, served, keep)
            return keep
        if api == "anthropic":
            return await self._serve_anthropic(out, served, model_name, stream, keep)
        if api == "responses":
            return await self._serve_responses(out, served, model_name, stream, keep)
        if api == "gemini":
            return await self._serve_gemini(out, served, model_name, stream, keep)
        return await self._serve_chat(out, served, model_name, stream, keep)

    async def _send_json(
        self,
        out: _Responder,
        status: int,
        body: Any,
        keep: bool,
        *,
        head: bool = False,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        data = _dumps(body).encode()
        await out.start(
            status,
            [("content-type", "application/json"), *headers],
            length=len(data),
            keep_alive=keep,
        )
        if not head:
            await out.write(data)

    async def _send_http_error(
        self, out: _Responder, api: ApiKind, err: HttpError, served: _Served, keep: bool
    ) -> None:
        headers = dict(err.headers)
        lower = {k.lower() for k in headers}
        request_id = f"req_offline_{served.seq:06d}"
        body: dict[str, Any]
        if api == "anthropic":
            etype = err.error_type or _ANTHROPIC_ERROR_TYPES.get(err.status, "api_error")
            body = {
                "type": "error",
                "error": {"type": etype, "message": err.message},
                "request_id": request_id,
            }
            headers.setdefault("request-id", request_id)
        elif api == "gemini":
            body = {
                "error": {
                    "code": err.status,
                    "message": err.message,
                    "status": err.error_type or _GEMINI_ERROR_STATUS.get(err.status, "INTERNAL"),
                }
            }
        else:
            etype = err.error_type or _OPENAI_ERROR_TYPES.get(err.status, "server_error")
            body = {
                "error": {
                    "message": err.message,
                    "type": etype,
                    "param": None,
                    "code": err.code if err.code is not None else str(err.status),
                }
            }
            if api == "chat" and not lower & {"retry-after", "retry-after-ms"}:
                headers["retry-after-ms"] = "50"
        await self._send_json(out, err.status, body, keep, headers=list(headers.items()))

    # ------------------------------------------------------------------ Gemini

    async def _serve_gemini(
        self, out: _Responder, served: _Served, model: str, stream: bool, keep: bool
    ) -> bool:
        """Gemini API: ``GenerateContentResponse`` objects, one per SSE event when streamed
        (``:streamGenerateContent?alt=sse``); function calls are sent whole."""
        turn, usage = served.turn, served.usage
        finish = {"end_turn": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS"}[
            turn.resolved_stop_reason()
        ]
        metadata = {
            "promptTokenCount": usage.prompt_tokens,
            "candidatesTokenCount": max(0, usage.output_tokens - usage.reasoning_tokens),
            "totalTokenCount": usage.prompt_tokens + usage.output_tokens,
            "cachedContentTokenCount": usage.cache_read_tokens,
            "thoughtsTokenCount": usage.reasoning_tokens,
        }
        response_id = f"offline-{served.seq:06d}"

        def response(parts: list[dict[str, Any]], last: bool = False) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            body: dict[str, Any] = {
                "candidates": [candidate],
                "modelVersion": model,
                "responseId": response_id,
            }
            if last:
                candidate["finishReason"] = finish
                body["usageMetadata"] = metadata
            return body

        def call_part(block: ToolCall, index: int) -> dict[str, Any]:
            name, args = map_tool_call("gemini", block, served.offered)
            call = {"name": name, "args": args, "id": self._tool_id("gemini", block, served, index)}
            return {"functionCall": call, "thoughtSignature": "b2ZmbGluZQ=="}

        if not stream:
            parts: list[dict[str, Any]] = []
            for i, block in enumerate(turn.content):
                if isinstance(block, Thinking):
                    parts.append({"text": block.text, "thought": True})
                elif isinstance(block, Text):
                    parts.append({"text": block.text})
                else:
                    parts.append(call_part(block, i))
            await self._send_json(out, 200, response(parts, last=True), keep)
            return keep

        await self._sse_start(out, served, chunked=True, keep=keep)
        for i, block in enumerate(turn.content):
            if isinstance(block, Thinking):
                for p in _pieces(block.text, turn.chunk_chars):
                    await self._emit(out, turn, _dumps(response([{"text": p, "thought": True}])))
            elif isinstance(block, Text):
                for p in _pieces(block.text, turn.chunk_chars):
                    await self._emit(out, turn, _dumps(response([{"text": p}])))
            else:
                await self._emit(out, turn, _dumps(response([call_part(block, i)])))
        serr = turn.stream_error
        if serr is not None:
            error = {"error": {"code": 500, "message": serr.message, "status": "INTERNAL"}}
            await self._emit(out, turn, _dumps(error))
            await out.finish()
            return False
        await self._emit(out, turn, _dumps(response([], last=True)))
        await out.finish()
        return keep

    # ------------------------------------------------------------------ SSE plumbing

    async def _sse_start(
        self,
        out: _Responder,
        served: _Served,
        *,
        chunked: bool,
        keep: bool,
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        await out.start(
            200,
            [
                ("content-type", "text/event-stream; charset=utf-8"),
                ("cache-control", "no-cache"),
                *extra,
            ],
            chunked=chunked,
            keep_alive=keep,
        )

    async def _emit(self, out: _Responder, turn: Turn, data: str, event: str | None = None) -> None:
        text = f"event: {event}\ndata: {data}\n\n" if event else f"data: {data}\n\n"
        await out.write(text.encode())
        if turn.chunk_delay:
            await anyio.sleep(turn.chunk_delay)

    # ------------------------------------------------------------------ Anthropic

    def _tool_id(self, api: ApiKind, call: ToolCall, served: _Served, index: int) -> str:
        if call.id is not None:
            return call.id
        prefix = "toolu" if api == "anthropic" else "call"
        return f"{prefix}_offline_{served.seq:04d}_{index:02d}"

    async def _serve_anthropic(
        self, out: _Responder, served: _Served, model: str, stream: bool, keep: bool
    ) -> bool:
        turn, usage = served.turn, served.usage
        msg_id = f"msg_offline_{served.seq:06d}"
        request_id = f"req_offline_{served.seq:06d}"
        stop = turn.resolved_stop_reason()
        start_usage = {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": usage.cache_write_tokens,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": 1,
            "service_tier": "standard",
        }
        final_usage = {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"thinking_tokens": usage.reasoning_tokens},
        }
        if not stream:
            content: list[dict[str, Any]] = []
            for i, block in enumerate(turn.content):
                if isinstance(block, Text):
                    content.append({"type": "text", "text": block.text})
                elif isinstance(block, Thinking):
                    content.append(
                        {"type": "thinking", "thinking": block.text, "signature": block.signature}
                    )
                else:
                    name, args = map_tool_call("anthropic", block)
                    tid = self._tool_id("anthropic", block, served, i)
                    content.append({"type": "tool_use", "id": tid, "name": name, "input": args})
            message = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {**final_usage, "cache_creation": start_usage["cache_creation"]},
            }
            await self._send_json(out, 200, message, keep, headers=[("request-id", request_id)])
            return keep

        await self._sse_start(
            out, served, chunked=True, keep=keep, extra=[("request-id", request_id)]
        )
        message_start: dict[str, Any] = {
            "type": "message_start",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        }
        await self._emit(out, turn, _dumps(message_start), "message_start")
        await self._emit(out, turn, _dumps({"type": "ping"}), "ping")
        for i, block in enumerate(turn.content):
            if isinstance(block, Text):
                start_block: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [
                    {"type": "text_delta", "text": p} for p in _pieces(block.text, turn.chunk_chars)
                ]
            elif isinstance(block, Thinking):
                start_block = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": p}
                    for p in _pieces(block.text, turn.chunk_chars)
                ]
                deltas.append({"type": "signature_delta", "signature": block.signature})
            else:
                name, args = map_tool_call("anthropic", block)
                tid = self._tool_id("anthropic", block, served, i)
                start_block = {"type": "tool_use", "id": tid, "name": name, "input": {}}
                deltas = [
                    {"type": "input_json_delta", "partial_json": p}
                    for p in _json_pieces(_dumps(args))
                ]
            await self._emit(
                out,
                turn,
                _dumps({"type": "content_block_start", "index": i, "content_block": start_block}),
                "content_block_start",
            )
            for delta in deltas:
                await self._emit(
                    out,
                    turn,
                    _dumps({"type": "content_block_delta", "index": i, "delta": delta}),
                    "content_block_delta",
                )
            await self._emit(
                out, turn, _dumps({"type": "content_block_stop", "index": i}), "content_block_stop"
            )
        serr = turn.stream_error
        if serr is not None:
            error = {"type": "error", "error": {"type": serr.error_type, "message": serr.message}}
            await self._emit(out, turn, _dumps(error), "error")
            await out.finish()
            return keep
        message_delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": final_usage,
        }
        await self._emit(out, turn, _dumps(message_delta), "message_delta")
        await self._emit(out, turn, _dumps({"type": "message_stop"}), "message_stop")
        await out.finish()
        return keep

    # ------------------------------------------------------------------ Chat Completions

    async def _serve_chat(
        self, out: _Responder, served: _Served, model: str, stream: bool, keep: bool
    ) -> bool:
        turn, usage = served.turn, served.usage
        stop = turn.resolved_stop_reason()
        finish = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}[stop]
        chat_id = f"chatcmpl-offline-{served.seq:06d}"
        usage_obj = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        }
        calls: list[tuple[str, str, str]] = []
        for i, block in enumerate(turn.content):
            if isinstance(block, ToolCall):
                name, args = map_tool_call("chat", block, served.offered)
                calls.append((self._tool_id("chat", block, served, i), name, _dumps(args)))
        if not stream:
            text = "".join(b.text for b in turn.content if isinstance(b, Text))
            reasoning = "".join(b.text for b in turn.content if isinstance(b, Thinking))
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = [
                    {"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
                    for cid, n, a in calls
                ]
            completion = {
                "id": chat_id,
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage_obj,
            }
            await self._send_json(out, 200, completion, keep)
            return keep

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            return _dumps(
                {
                    "id": chat_id,
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                }
            )

        await self._sse_start(out, served, chunked=False, keep=False)
        await self._emit(out, turn, chunk({"role": "assistant", "content": ""}))
        call_index = 0
        for i, block in enumerate(turn.content):
            if isinstance(block, Thinking):
                for p in _pieces(block.text, turn.chunk_chars):
                    await self._emit(out, turn, chunk({"reasoning_content": p}))
            elif isinstance(block, Text):
                for p in _pieces(block.text, turn.chunk_chars):
                    await self._emit(out, turn, chunk({"content": p}))
            else:
                name, args = map_tool_call("chat", block, served.offered)
                cid = self._tool_id("chat", block, served, i)
                head = {
                    "index": call_index,
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                await self._emit(out, turn, chunk({"tool_calls": [head]}))
                for p in _json_pieces(_dumps(args)):
                    piece = {"index": call_index, "function": {"arguments": p}}
                    await self._emit(out, turn, chunk({"tool_calls": [piece]}))
                call_index += 1
        serr = turn.stream_error
        if serr is not None:
            error = {"error": {"message": serr.message, "type": serr.error_type, "code": "500"}}
            await self._emit(out, turn, _dumps(error))
            return False
        await self._emit(out, turn, chunk({}, finish))
        final: dict[str, Any] = {
            "id": chat_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": usage_obj,
        }
        await self._emit(out, turn, _dumps(final))
        await self._emit(out, turn, "[DONE]")
        return False

    # ------------------------------------------------------------------ Responses

    def _responses_tool_item(self, block: ToolCall, served: _Served, i: int) -> dict[str, Any]:
        """A tool call as a Responses output item. Besides function calls: ``web_search``
        (a ``web_search_call`` item, ``arguments["query"]``), ``apply_patch`` (a custom tool
        call whose input is ``arguments["input"]``) and ``mcp__<server>__<tool>`` (a function
        call in the ``mcp__<server>`` namespace, as Codex offers MCP tools)."""
        call_id = self._tool_id("responses", block, served, i)
        item_id = f"fc_offline_{served.seq:04d}_{i:02d}"
        if block.tool == "web_search":
            query = str(block.arguments.get("query", ""))
            return {
                "id": f"ws_offline_{served.seq:04d}_{i:02d}",
                "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": query},
            }
        if block.tool == "apply_patch":
            return {
                "id": item_id,
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": call_id,
                "name": "apply_patch",
                "input": str(block.arguments.get("input", "")),
            }
        name, args = map_tool_call("responses", block)
        item: dict[str, Any] = {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "call_id": call_id,
            "name": name,
            "arguments": _dumps(args),
        }
        if name.startswith("mcp__") and name.count("__") >= 2:
            namespace, _, tool = name.rpartition("__")
            item.update(namespace=namespace, name=tool)
        return item

    async def _serve_responses(
        self, out: _Responder, served: _Served, model: str, stream: bool, keep: bool
    ) -> bool:
        turn, usage = served.turn, served.usage
        resp_id = f"resp_offline_{served.seq:06d}"
        usage_obj = {
            "input_tokens": usage.prompt_tokens,
            "input_tokens_details": {
                "cached_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
            },
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
        }
        items: list[dict[str, Any]] = []
        for i, block in enumerate(turn.content):
            if isinstance(block, Text):
                items.append(
                    {
                        "id": f"msg_offline_{served.seq:04d}_{i:02d}",
                        "type": "message",
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                    }
                )
            elif isinstance(block, Thinking):
                items.append(
                    {
                        "id": f"rs_offline_{served.seq:04d}_{i:02d}",
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": block.text}],
                        "encrypted_content": block.signature,
                    }
                )
            else:
                items.append(self._responses_tool_item(block, served, i))
        serr = turn.stream_error
        if serr is not None:
            status, terminal = "failed", "response.failed"
        elif turn.resolved_stop_reason() == "max_tokens":
            status, terminal = "incomplete", "response.incomplete"
        else:
            status, terminal = "completed", "response.completed"

        def response_obj(state: str, output: list[dict[str, Any]]) -> dict[str, Any]:
            obj: dict[str, Any] = {
                "id": resp_id,
                "object": "response",
                "created_at": 0,
                "status": state,
                "model": model,
                "output": output,
            }
            if state in ("completed", "incomplete", "failed"):
                obj["usage"] = usage_obj
            if state == "incomplete":
                obj["incomplete_details"] = {"reason": "max_output_tokens"}
            if state == "failed" and serr is not None:
                obj["error"] = {"code": serr.error_type, "message": serr.message}
            return obj

        if not stream:
            await self._send_json(out, 200, response_obj(status, items), keep)
            return keep

        seq = 0

        async def emit(event: str, payload: dict[str, Any]) -> None:
            nonlocal seq
            body = {"type": event, "sequence_number": seq, **payload}
            seq += 1
            await self._emit(out, turn, _dumps(body), event)

        await self._sse_start(out, served, chunked=True, keep=keep)
        await emit("response.created", {"response": response_obj("in_progress", [])})
        await emit("response.in_progress", {"response": response_obj("in_progress", [])})
        for idx, item in enumerate(items):
            item_id = item["id"]
            kind = item["type"]
            common = {"output_index": idx, "item_id": item_id}
            if kind == "message":
                text = item["content"][0]["text"]
                added: dict[str, Any] = {**item, "status": "in_progress", "content": []}
                await emit("response.output_item.added", {"output_index": idx, "item": added})
                empty_part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
                await emit(
                    "response.content_part.added",
                    {**common, "content_index": 0, "part": empty_part},
                )
                for p in _pieces(text, turn.chunk_chars):
                    await emit(
                        "response.output_text.delta", {**common, "content_index": 0, "delta": p}
                    )
                await emit(
                    "response.output_text.done", {**common, "content_index": 0, "text": text}
                )
                await emit(
                    "response.content_part.done",
                    {**common, "content_index": 0, "part": item["content"][0]},
                )
            elif kind == "reasoning":
                text = item["summary"][0]["text"]
                added = {**item, "summary": list[Any]()}
                await emit("response.output_item.added", {"output_index": idx, "item": added})
                await emit(
                    "response.reasoning_summary_part.added",
                    {**common, "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
                )
                for p in _pieces(text, turn.chunk_chars):
                    await emit(
                        "response.reasoning_summary_text.delta",
                        {**common, "summary_index": 0, "delta": p},
                    )
                await emit(
                    "response.reasoning_summary_text.done",
                    {**common, "summary_index": 0, "text": text},
                )
                await emit(
                    "response.reasoning_summary_part.done",
                    {**common, "summary_index": 0, "part": {"type": "summary_text", "text": text}},
                )
            elif kind == "web_search_call":
                added = {**item, "status": "in_progress"}
                await emit("response.output_item.added", {"output_index": idx, "item": added})
            elif kind == "custom_tool_call":
                added = {**item, "status": "in_progress", "input": ""}
                await emit("response.output_item.added", {"output_index": idx, "item": added})
                for p in _pieces(item["input"], turn.chunk_chars):
                    await emit("response.custom_tool_call_input.delta", {**common, "delta": p})
                await emit(
                    "response.custom_tool_call_input.done", {**common, "input": item["input"]}
                )
            else:
                added = {**item, "status": "in_progress", "arguments": ""}
                await emit("response.output_item.added", {"output_index": idx, "item": added})
                for p in _json_pieces(item["arguments"]):
                    await emit("response.function_call_arguments.delta", {**common, "delta": p})
                await emit(
                    "response.function_call_arguments.done",
                    {**common, "arguments": item["arguments"]},
                )
            await emit("response.output_item.done", {"output_index": idx, "item": item})
        await emit(terminal, {"response": response_obj(status, items)})
        await out.finish()
        return keep
