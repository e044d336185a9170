"""One JSON-RPC 2.0 connection over newline-delimited JSON: :class:`JsonRpcConnection`, which
sends requests and notifications, keeps the table of requests waiting for their responses, and
reads and dispatches what the peer sends.

The connection is transport-agnostic.  It writes through an async ``send_line`` callable and
reads from an async iterator of framed lines (``bytes`` or
:class:`~agentrun._wire.framing.LineTooLong`, as produced by
:func:`agentrun._wire.framing.iter_lines`).
It is shared by every JSON-RPC speaking engine (the ACP agents and the Codex app-server).

Writing
    Every message is encoded as compact UTF-8 JSON **with its trailing** ``b"\\n"``
    (:func:`~.codec.encode_line`) and handed to ``send_line`` in one call, so a transport can
    write it with a single ``send``.  Writes are serialized with a lock: one whole line at a
    time, in the order callers acquired it.  Pydantic models inside params or results are
    dumped with ``by_alias=True, exclude_none=True`` (the wire form of
    :mod:`agentrun.engines.acp._schema`).

Reading (:meth:`JsonRpcConnection.run`)
    * Notifications are delivered to ``on_notification(method, params)`` **inline and in
      order**.  The reader awaits the callback before it reads the next line, so every
      notification that arrived before a response has been delivered (the callback has
      returned) before that response resolves its :meth:`~JsonRpcConnection.request`.
      A slow callback therefore applies back-pressure to the peer.
    * Requests from the peer are answered by ``on_request(method, params)``, each in its own
      task, so a slow handler (a permission prompt) never blocks reading.  The peer's ids
      live in their own id space (``int`` or ``str``; they may equal ours).  The handler's
      return value is sent as the result; a raised :class:`JsonRpcError` is sent as the
      error; any other exception is reported to ``on_problem`` and answered with ``-32603``
      ``"Internal error"`` (the exception text is not sent to the peer).  With no handler,
      or when the handler raises :meth:`JsonRpcError.method_not_found`, the answer is
      ``-32601``.  The order in which handler tasks start relative to later notifications
      is not defined.
    * Responses resolve the matching pending request.
    * Anything else (an oversized line, invalid UTF-8 or JSON, JSON that is not a JSON-RPC
      message, a response to an id we never used) is reported to ``on_problem`` as a
      :class:`JsonRpcProblem` and reading continues.  Problems are never fatal.  An oversized
      line whose head shows it is the response to one of our requests fails that request with
      :class:`~agentrun.LineTooLongError`; one whose head shows a request of the peer (its id
      and method first, as agents write them) is answered with ``-32600`` so that the peer does
      not wait for an answer that cannot come.

Ending
    At end of input, on :meth:`~JsonRpcConnection.close`, or when :meth:`run` itself fails,
    every pending request raises :class:`ConnectionClosedError` (never hangs), handler tasks
    still running are cancelled (their peer is gone), and later calls to
    :meth:`~JsonRpcConnection.request` / :meth:`~JsonRpcConnection.notify` raise
    :class:`ConnectionClosedError` at once.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, cast

import anyio
import anyio.abc

from ..._vocabulary.errors import LineTooLongError, UsageError
from ..framing import JsonProblem, LineTooLong, decode_json_line
from .codec import RequestId, encode_line, error_line, request_in_head, response_id_in_head
from .errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    JsonRpcError,
    JsonRpcProblem,
    RequestTimeoutError,
)

__all__ = [
    "JsonRpcConnection",
    "LineTaker",
    "MessageObserver",
    "NotificationHandler",
    "ProblemHandler",
    "RequestHandler",
    "SendLine",
]

logger = logging.getLogger("agentrun.jsonrpc")

#: Writes one complete line (the bytes end with ``b"\n"``).
SendLine = Callable[[bytes], Awaitable[None]]
#: ``on_request(method, params) -> result``; raise :class:`JsonRpcError` to answer an error.
RequestHandler = Callable[[str, Any], Awaitable[Any]]
#: ``on_notification(method, params)``; plain functions and coroutine functions both work.
NotificationHandler = Callable[[str, Any], "Awaitable[None] | None"]
#: ``on_problem(problem)``; plain functions and coroutine functions both work.
ProblemHandler = Callable[["JsonRpcProblem"], "Awaitable[None] | None"]
#: ``on_message(decoded)``: every decoded incoming line, before it is dispatched (a transcript,
#: a translator that mirrors the session). Exceptions propagate out of :meth:`run`.
MessageObserver = Callable[[Any], "Awaitable[None] | None"]
#: ``on_line(line) -> taken``: every incoming line's bytes, before they are decoded. ``True``
#: when the observer took the line whole: a notification it read itself that needs nothing of
#: the connection (no ``on_notification`` for its method, not the cancel method); the line is
#: then neither decoded nor dispatched, nor shown to ``on_message``. ``False``: as usual.
LineTaker = Callable[[bytes], "Awaitable[bool] | bool"]

# A late response to a request we gave up on (timeout, cancellation) is expected and
# dropped quietly; remember that many abandoned ids at most.
_MAX_ABANDONED = 1024


class _Pending:
    __slots__ = ("error", "event", "method", "result")

    def __init__(self, method: str) -> None:
        self.method = method
        self.event = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class JsonRpcConnection:
    """A JSON-RPC 2.0 peer over newline-delimited JSON; see the module docstring.

    Typical use::

        conn = JsonRpcConnection(stdin.send, on_notification=..., on_request=...)
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.run, iter_lines(stdout))
            result = await conn.request("initialize", {...}, timeout=30)

    ``cancel_method`` (ACP: ``"$/cancel_request"``) enables request cancellation in both
    directions: when a :meth:`request` is cancelled or times out, the connection sends
    ``cancel_method`` with ``{"requestId": id}``; when the peer sends it for one of its
    requests, that handler is cancelled and answered with ``-32800``.
    """

    def __init__(
        self,
        send_line: SendLine,
        *,
        on_notification: NotificationHandler | None = None,
        on_request: RequestHandler | None = None,
        on_problem: ProblemHandler | None = None,
        cancel_method: str | None = None,
        engine: str | None = None,
        on_message: MessageObserver | None = None,
        on_line: LineTaker | None = None,
    ) -> None:
        self._send_line = send_line
        self._on_message = on_message
        self._take_line = on_line
        self._on_notification = on_notification
        self._on_request = on_request
        self._on_problem = on_problem
        self._cancel_method = cancel_method
        self._engine = engine
        # Taken without a trip through the event loop when free: the write itself yields once.
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._next_id = 1
        self._pending: dict[int, _Pending] = {}
        self._abandoned: dict[int, None] = {}
        self._incoming: dict[RequestId, anyio.CancelScope] = {}
        self._closed = False
        self._close_reason = "closed"
        self._running = False
        self._reader_scope: anyio.CancelScope | None = None
        self._task_group: anyio.abc.TaskGroup | None = None

    # -- state ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the connection has ended; requests then fail at once."""
        return self._closed

    @property
    def pending_requests(self) -> int:
        """How many of our requests are waiting for a response."""
        return len(self._pending)

    # -- sending ----------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        """Send a request and return the peer's ``result``.

        Our ids are ints counting from 1.  Any number of requests may be in flight at once.
        Raises :class:`JsonRpcError` for an error response, :class:`RequestTimeoutError`
        when ``timeout`` seconds (write included) pass without a response, and
        :class:`ConnectionClosedError` when the connection is or becomes closed first.
        ``TypeError`` / ``ValueError`` if ``params`` cannot be encoded (nothing is sent).
        """
        if self._closed:
            raise ConnectionClosedError(self._close_reason, method=method, engine=self._engine)
        request_id = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        data = encode_line(message)
        pending = _Pending(method)
        self._pending[request_id] = pending
        try:
            with anyio.move_on_after(timeout):
                try:
                    await self._write(data, method)
                except BaseException:
                    # Not (completely) sent: no response will come.
                    self._pending.pop(request_id, None)
                    raise
                await pending.event.wait()
        except BaseException:
            if self._abandon(request_id):
                await self._send_cancel(request_id)
            raise
        if not pending.event.is_set():
            if self._abandon(request_id):
                await self._send_cancel(request_id)
            raise RequestTimeoutError(method, timeout or 0.0, engine=self._engine)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no response expected)."""
        if self._closed:
            raise ConnectionClosedError(self._close_reason, method=method, engine=self._engine)
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._write(encode_line(message), method)

    async def _write(self, data: bytes, method: str | None = None) -> None:
        async with self._write_lock:
            try:
                await self._send_line(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                reason = f"write failed: {type(exc).__name__}"
                raise ConnectionClosedError(reason, method=method, engine=self._engine) from exc

    def _abandon(self, request_id: int) -> bool:
        """Forget a request we stop waiting for; True if it had not been answered yet."""
        if self._pending.pop(request_id, None) is None:
            return False
        self._abandoned[request_id] = None
        if len(self._abandoned) > _MAX_ABANDONED:
            del self._abandoned[next(iter(self._abandoned))]
        return True

    async def _send_cancel(self, request_id: int) -> None:
        if self._cancel_method is None or self._closed:
            return
        message = {
            "jsonrpc": "2.0",
            "method": self._cancel_method,
            "params": {"requestId": request_id},
        }
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(1.0),
            contextlib.suppress(ConnectionClosedError),
        ):
            await self._write(encode_line(message))

    # -- closing ----------------------------------------------------------------------

    def close(self, reason: str = "closed") -> None:
        """End the connection: stop :meth:`run` and fail every pending request.

        Idempotent; callable from any task of the event loop.  Does not close the
        transport: that belongs to whoever created it.
        """
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        self._fail_pending(reason)

    def _fail_pending(self, reason: str) -> None:
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            entry.error = ConnectionClosedError(reason, method=entry.method, engine=self._engine)
            entry.event.set()

    # -- reading ----------------------------------------------------------------------

    async def run(self, incoming: AsyncIterable[bytes | LineTooLong]) -> None:
        """Read and dispatch messages until ``incoming`` ends or :meth:`close` is called.

        Returns normally at end of input and after :meth:`close`; exceptions raised by
        ``incoming`` itself or by ``on_problem`` propagate.  Either way the connection is
        closed afterwards.  Can be run once.
        """
        if self._running:
            raise UsageError("JsonRpcConnection.run() can only be called once")
        self._running = True
        reason = "end of input"
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                with anyio.CancelScope() as scope:
                    self._reader_scope = scope
                    if self._closed:
                        scope.cancel()
                    on_line = self._on_line
                    async for item in incoming:
                        if isinstance(item, LineTooLong):
                            await self._on_too_long(item)
                        else:
                            await on_line(item)
                # The peer is gone (or we closed): nobody will read handler answers.
                tg.cancel_scope.cancel()
        except BaseException as exc:
            reason = f"reader stopped: {type(exc).__name__}"
            raise
        finally:
            self._task_group = None
            self._reader_scope = None
            if not self._closed:
                self._closed = True
                self._close_reason = reason
            self._fail_pending(self._close_reason)

    async def _on_line(self, line: bytes) -> None:
        if not line:
            return
        take = self._take_line
        if take is not None:
            taken = take(line)
            if not isinstance(taken, bool):
                taken = await taken
            if taken:
                return
        decoded = decode_json_line(line)
        observer = self._on_message
        if observer is not None and not isinstance(decoded, JsonProblem):
            seen = observer(decoded)
            if seen is not None and inspect.isawaitable(seen):
                await seen
        if type(decoded) is not dict:
            if isinstance(decoded, JsonProblem):
                await self._problem(JsonRpcProblem(decoded.code, decoded.detail, decoded.raw))
            else:
                detail = "not a JSON-RPC message (not an object)"
                await self._problem(JsonRpcProblem("protocol", detail, line, decoded))
            return
        msg = cast("dict[str, Any]", decoded)
        method = msg.get("method")
        if method is not None:
            if type(method) is not str:
                await self._problem(
                    JsonRpcProblem("protocol", "'method' is not a string", line, msg)
                )
            elif "id" in msg:
                await self._on_peer_request(msg, method, line)
            else:
                await self._on_peer_notification(method, msg.get("params"), line, msg)
            return
        if "id" in msg and ("result" in msg or "error" in msg):
            await self._on_response(msg, line)
            return
        await self._problem(
            JsonRpcProblem(
                "protocol", "neither a request, a notification nor a response", line, msg
            )
        )

    async def _on_peer_notification(
        self, method: str, params: Any, line: bytes, msg: dict[str, Any]
    ) -> None:
        if method == self._cancel_method and self._cancel_method is not None:
            request_id = (
                cast("dict[str, Any]", params).get("requestId")
                if isinstance(params, dict)
                else None
            )
            if isinstance(request_id, (int, str)) and not isinstance(request_id, bool):
                scope = self._incoming.get(request_id)
                if scope is not None:
                    scope.cancel()
            return
        callback = self._on_notification
        if callback is None:
            return
        try:
            result = callback(method, params)
            if result is not None and inspect.isawaitable(result):
                await result
        except Exception as exc:
            await self._problem(
                JsonRpcProblem(
                    "callback_error",
                    f"notification callback failed for {method}: {type(exc).__name__}: {exc}",
                    line,
                    msg,
                    exc,
                )
            )

    async def _on_response(self, msg: dict[str, Any], line: bytes) -> None:
        response_id = msg["id"]
        pending = None
        if type(response_id) is int:
            pending = self._pending.pop(response_id, None)
            if pending is None and response_id in self._abandoned:
                del self._abandoned[response_id]  # a late answer to a request we gave up on
                return
        if pending is None:
            error = msg.get("error")
            if response_id is None and isinstance(error, dict):
                text = cast("dict[str, Any]", error).get("message")
                detail = f"peer reported an error without an id: {text!r}"
            else:
                detail = f"response to unknown request id {response_id!r}"
            await self._problem(JsonRpcProblem("protocol", detail, line, msg))
            return
        error = msg.get("error")
        if error is not None:
            pending.error = self._make_error(error, pending.method)
        else:
            pending.result = msg.get("result")
        pending.event.set()

    def _make_error(self, error: Any, method: str) -> JsonRpcError:
        if isinstance(error, dict):
            fields = cast("dict[str, Any]", error)
            code = fields.get("code")
            message = fields.get("message")
            return JsonRpcError(
                code if type(code) is int else INTERNAL_ERROR,
                message if isinstance(message, str) else repr(message),
                fields.get("data"),
                method=method,
                engine=self._engine,
            )
        return JsonRpcError(INTERNAL_ERROR, repr(error), method=method, engine=self._engine)

    async def _on_peer_request(self, msg: dict[str, Any], method: str, line: bytes) -> None:
        request_id = msg["id"]
        if type(request_id) is not int and type(request_id) is not str:
            await self._problem(
                JsonRpcProblem("protocol", f"request {method} has an invalid id", line, msg)
            )
            return
        if request_id in self._incoming:
            await self._problem(
                JsonRpcProblem(
                    "protocol",
                    f"duplicate request id {request_id!r} ({method}); ignored",
                    line,
                    msg,
                )
            )
            return
        task_group = self._task_group
        if task_group is None:  # pragma: no cover - only reachable outside run()
            return
        scope = anyio.CancelScope()
        self._incoming[request_id] = scope
        task_group.start_soon(self._serve, request_id, method, msg.get("params"), scope, line)

    async def _serve(
        self,
        request_id: RequestId,
        method: str,
        params: Any,
        scope: anyio.CancelScope,
        line: bytes,
    ) -> None:
        data: bytes | None = None
        try:
            with scope:
                try:
                    if self._on_request is None:
                        raise JsonRpcError.method_not_found(method)
                    result = await self._on_request(method, params)
                    data = encode_line({"jsonrpc": "2.0", "id": request_id, "result": result})
                except JsonRpcError as exc:
                    data = error_line(request_id, exc.to_json())
                except Exception as exc:
                    await self._problem(
                        JsonRpcProblem(
                            "handler_error",
                            f"request handler failed for {method}: {type(exc).__name__}: {exc}",
                            line,
                            None,
                            exc,
                        )
                    )
                    data = error_line(
                        request_id, {"code": INTERNAL_ERROR, "message": "Internal error"}
                    )
            if data is None:  # cancelled by the peer's cancel notification
                data = error_line(
                    request_id, {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
                )
        finally:
            self._incoming.pop(request_id, None)
        try:
            await self._write(data, method)
        except ConnectionClosedError as exc:
            await self._problem(
                JsonRpcProblem(
                    "write_error", f"could not answer {method}: {exc.reason}", None, None, exc
                )
            )

    async def _on_too_long(self, item: LineTooLong) -> None:
        detail = f"line of {item.size} bytes exceeds the limit of {item.limit} bytes"
        await self._problem(JsonRpcProblem("line_too_long", detail, item.head))
        # If the line was clearly the response to one of our requests, fail that request
        # instead of leaving it waiting forever.
        response_id = response_id_in_head(item.head)
        if response_id is not None:
            pending = self._pending.pop(response_id, None)
            if pending is not None:
                pending.error = LineTooLongError(item.size, item.limit, engine=self._engine)
                pending.event.set()
            return
        # A request of the peer that was too long: answer it with an error, so that the peer
        # does not wait for ever for an answer.
        request = request_in_head(item.head)
        if request is not None:
            request_id, method = request
            error = {
                "code": INVALID_REQUEST,
                "message": (
                    f"Invalid Request: the message of {item.size} bytes exceeds the client's "
                    f"limit of {item.limit} bytes"
                ),
                "data": {"size": item.size, "limit": item.limit},
            }
            try:
                await self._write(error_line(request_id, error), method)
            except ConnectionClosedError as exc:
                await self._problem(
                    JsonRpcProblem(
                        "write_error", f"could not answer {method}: {exc.reason}", None, None, exc
                    )
                )

    async def _problem(self, problem: JsonRpcProblem) -> None:
        callback = self._on_problem
        if callback is None:
            logger.warning("JSON-RPC %s: %s", problem.code, problem.detail)
            return
        result = callback(problem)
        if result is not None and inspect.isawaitable(result):
            await result
