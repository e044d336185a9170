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

Every request is recorded in :attr:`ModelServer.requests` (:class:`RecordedRequest`), and every
model request answered in :attr:`ModelServer.ledger` with the tokens it reported
(:class:`~agentrun.offline.LedgerEntry`).

This module holds the server itself: its life cycle, the script it consumes, and the routing of
each request to an API dialect (``_dialects/``: how a turn looks in each API). The HTTP/1.1
layer is ``_http.py``; what a request is (its API, a side request, its record) is
``_requests.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, cast

import anyio
import anyio.abc

from .._vocabulary.errors import UsageError
from ._dialects import DIALECTS, Dialect, Served
from ._http import BackgroundServer, HttpRequest, Limits, Responder, dumps, serve_connection
from ._ledger import ZERO_USAGE, Ledger, LedgerEntry
from ._requests import (
    DEFAULT_SIDE_REQUESTS,
    ApiKind,
    RecordedRequest,
    SideRequest,
    classify,
    offered_tools,
)
from ._script import Script, Text, Thinking, Turn, Usage, default_script

__all__ = ["ModelServer"]


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
            out_chars += len(dumps(block.arguments)) + 40
    reasoning = thinking_chars // 4
    return Usage(
        input_tokens=prompt - cached - written,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        output_tokens=out_chars // 4 + reasoning + 1,
        reasoning_tokens=reasoning,
    )


class ModelServer(BackgroundServer):
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
        self._limits = Limits(max_header_bytes, max_body_bytes)
        self._on_request = on_request
        self._listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._seq = 0
        self._model_calls = 0
        #: Every request received, in order of arrival.
        self.requests: list[RecordedRequest] = []
        #: The tokens of every model request answered (see :class:`~agentrun.offline.Ledger`).
        self.ledger: Ledger = Ledger()
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
        await serve_connection(conn, self._handle, self._limits, self.errors)

    # ------------------------------------------------------------------ dispatch

    def _record(self, req: HttpRequest, api: ApiKind, parsed: Any, **kw: Any) -> RecordedRequest:
        rec = RecordedRequest(
            seq=self._seq,
            method=req.method,
            path=req.path,
            query=req.query,
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

    def _account(
        self,
        rec: RecordedRequest,
        received_at: datetime,
        *,
        model: str | None,
        dialect: Dialect | None = None,
        reported: dict[str, Any] | None = None,
        complete: bool = True,
    ) -> None:
        """The ledger entry of a model request whose answer has been written (or abandoned)."""
        usage = ZERO_USAGE if dialect is None or reported is None else dialect.normalized(reported)
        entry = LedgerEntry(
            seq=rec.seq,
            api=rec.api,
            model=model,
            status=rec.status,
            side_request=rec.side_request,
            turn_index=rec.turn_index,
            exhausted=rec.exhausted,
            reported=reported,
            usage=usage,
            received_at=received_at,
            answered_at=datetime.now(timezone.utc),
            complete=complete,
        )
        self.ledger.append(entry)

    async def _answer(
        self,
        out: Responder,
        rec: RecordedRequest,
        received_at: datetime,
        dialect: Dialect,
        served: Served,
        keep: bool,
    ) -> bool:
        """Serve ``served`` and enter it in the ledger, complete or not."""
        reported = dialect.reported_usage(served)
        complete = False
        try:
            keep = await dialect.serve(out, served, keep)
            complete = True
        finally:
            self._account(
                rec,
                received_at,
                model=served.model,
                dialect=dialect,
                reported=reported,
                complete=complete,
            )
        return keep

    def _take_turn(self, body_len: int) -> tuple[int | None, Turn, Usage]:
        """The next scripted turn (its index, ``None`` once exhausted) and the usage it reports."""
        first = self._model_calls == 0
        self._model_calls += 1
        if self._next < len(self._queue):
            index, turn = self._queue[self._next]
            self._next += 1
        else:
            index, turn = None, Turn.text(self.script.exhausted_text)
        usage = turn.usage if turn.usage is not None else _estimate_usage(turn, body_len, first)
        return index, turn, usage

    async def _handle(self, req: HttpRequest, out: Responder) -> bool:
        received_at = datetime.now(timezone.utc)
        path, keep = req.path, req.keep_alive
        api = classify(req.method, path)
        parsed: Any = None
        if req.body:
            try:
                parsed = json.loads(req.body)
            except (ValueError, UnicodeDecodeError):
                parsed = None

        if api == "other":
            if req.method in ("GET", "HEAD") and path in ("/", "/health", "/healthz"):
                rec = self._record(req, api, parsed, status=200)
                await out.send_json(200, {"status": "ok"}, keep, head=req.method == "HEAD")
            else:
                rec = self._record(req, api, parsed, status=404)
                message = f"no route for {req.method} {path}"
                await out.send_json(404, {"error": {"message": message, "type": "not_found"}}, keep)
            self._finish(rec)
            return keep

        if not isinstance(parsed, dict):
            rec = self._record(req, api, parsed, status=400)
            message = "request body is not a JSON object"
            body = {"error": {"message": message, "type": "invalid_request_error"}}
            await out.send_json(400, body, keep)
            self._finish(rec)
            if api in DIALECTS:
                self._account(rec, received_at, model=None)
            return keep
        payload = cast(dict[str, Any], parsed)

        if api == "count_tokens":
            rec = self._record(req, api, parsed)
            tokens = max(1, len(req.body) // 4)
            answer = {"totalTokens": tokens} if ":" in path else {"input_tokens": tokens}
            await out.send_json(200, answer, keep)
            self._finish(rec)
            return keep

        dialect = DIALECTS[api]
        model = dialect.model_of(path, payload)
        stream = dialect.streams(path, payload)

        side = next((r for r in self.side_requests if r.match(api, payload)), None)
        if side is not None:
            title = side.name == "opencode-title"
            rec = self._record(req, api, parsed, side_request=side.name, title_request=title)
            served = Served(
                turn=Turn.text(side.answer(self.script)),
                seq=rec.seq,
                model=model,
                stream=stream,
                usage=Usage(input_tokens=max(1, len(req.body) // 4), output_tokens=6),
            )
            keep = await self._answer(out, rec, received_at, dialect, served, keep)
            self._finish(rec)
            return keep

        index, turn, usage = self._take_turn(len(req.body))
        err = turn.http_error
        rec = self._record(
            req,
            api,
            parsed,
            turn_index=index,
            exhausted=index is None,
            status=err.status if err is not None else 200,
        )
        self._finish(rec)
        if turn.delay_before:
            await anyio.sleep(turn.delay_before)
        if turn.model is not None:
            model = turn.model
        if err is not None:
            body, headers = dialect.error_answer(err, f"req_offline_{rec.seq:06d}")
            complete = False
            try:
                await out.send_json(err.status, body, keep, headers=list(headers.items()))
                complete = True
            finally:
                self._account(rec, received_at, model=model, complete=complete)
            return keep
        served = Served(
            turn=turn,
            seq=rec.seq,
            model=model,
            stream=stream,
            usage=usage,
            offered=offered_tools(payload),
        )
        return await self._answer(out, rec, received_at, dialect, served, keep)
