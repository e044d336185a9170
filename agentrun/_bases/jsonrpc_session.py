"""The long-lived JSON-RPC base: one agent process per session, spoken to over JSON-RPC.

Agents such as ACP agents and ``codex app-server`` keep one process for the whole session and
exchange JSON-RPC messages over stdio. :class:`JsonRpcDriver` adds the connection to the
long-lived base (:class:`~agentrun._bases.long_lived.LongLivedDriver`: turns, the fence
between them,
bounded cancellation). An engine on it says only:

* :meth:`~LongLivedDriver._argv` — the command line;
* :meth:`~LongLivedDriver._new_translator` — one translator for the session, fed every wire
  message in both directions as ``{"dir": "send"|"recv", "msg": {...}}``: the same events
  ``agentrun replay`` feeds it from a recording, so live runs and replays agree;
* :meth:`~JsonRpcDriver._handshake` — the requests that open the session;
* :meth:`~LongLivedDriver._send_prompt` — the request that starts a turn (it may wait for the
  whole turn, as ACP's ``session/prompt`` does);
* :meth:`~JsonRpcDriver._prompt_rejected` — what an error answer to it means beyond the failed
  result the translator makes of it (optional);
* :meth:`~LongLivedDriver._interrupt` — how to interrupt a turn (the cancellation hook);
* :attr:`~JsonRpcDriver.request_handlers` — the agent's requests it answers (approvals, fs...),
  one table.

A turn ends when the translator emits its ``result`` — on the response to the prompt (ACP) or on
a notification (Codex ``turn/completed``): the base does not care which. Peers that omit
``"jsonrpc"`` are accepted, and :attr:`~JsonRpcDriver.jsonrpc_field` leaves it out of what is
sent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from abc import abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Hashable, Mapping
from typing import Any, ClassVar

import anyio
import anyio.abc

from .._turns.driver import CANCEL_GRACE
from .._turns.turn import TurnContext
from .._vocabulary.errors import LineTooLongError, SessionTerminatedError
from .._vocabulary.messages import Message
from .._vocabulary.options import SessionOptions
from .._wire.framing import LineTooLong
from .._wire.jsonrpc import ConnectionClosedError, JsonRpcConnection, JsonRpcError, JsonRpcProblem
from .._wire.process import AgentProcess
from .long_lived import LongLivedDriver
from .pool import MemberConnection, ProcessPool, SharedProcess
from .translator import JsonRpcTranslator

__all__ = ["JsonRpcDriver", "RequestHandlerTable"]

RequestHandlerTable = Mapping[str, Callable[[Any], Awaitable[Any]]]


class JsonRpcDriver(LongLivedDriver):
    """A session with one long-lived JSON-RPC agent process. See the module docstring."""

    #: Whether sent messages carry ``"jsonrpc": "2.0"`` (Codex app-server omits it).
    jsonrpc_field: ClassVar[bool] = True

    def __init__(
        self,
        options: SessionOptions | None,
        *,
        handshake_timeout: float | None = 60.0,
        cancel_grace: float = CANCEL_GRACE,
        close_stdin_timeout: float = 5.0,
        terminate_timeout: float = 5.0,
        max_line_bytes: int | None = None,
        pool: ProcessPool | None = None,
    ) -> None:
        super().__init__(
            options,
            cancel_grace=cancel_grace,
            close_stdin_timeout=close_stdin_timeout,
            terminate_timeout=terminate_timeout,
            max_line_bytes=max_line_bytes,
        )
        #: Bounds the whole :meth:`_handshake` (``None``: the engine bounds its own requests).
        self.handshake_timeout: float | None = handshake_timeout
        self.conn: JsonRpcConnection | None = None
        self._prompt_failure: JsonRpcError | None = None
        #: The pool this session's agent process comes from (``None``: a process of its own).
        self.pool: ProcessPool | None = pool
        #: The pooled process this session runs on, once started.
        self.shared: SharedProcess | None = None

    # -- hooks -------------------------------------------------------------------------------

    @abstractmethod
    async def _handshake(self, conn: JsonRpcConnection) -> None:
        """Open the session (``initialize``, a thread or session ...)."""

    async def _open_process(self, conn: JsonRpcConnection) -> None:
        """The process-level part of :meth:`_handshake` (``initialize``), run once per pooled
        process. Engines that can pool implement it and :meth:`_open_session_on`."""
        raise NotImplementedError

    async def _open_session_on(self, conn: JsonRpcConnection) -> None:
        """The session-level part of :meth:`_handshake`, run by every pooled session."""
        raise NotImplementedError

    def pool_key(self) -> Hashable:
        """What must be equal for two sessions to share a process: the command line, working
        directory, environment (before the observers' additions: the process gets those of
        the session that started it) and sandbox; engines add what their process-level
        exchange depends on."""
        sandbox = self.options.sandbox
        return (
            self._argv(),
            self._pooled_cwd(),
            tuple(sorted(self.env.items())),
            None if sandbox is None else sandbox.model_dump_json(),
        )

    def _pooled_cwd(self) -> str | None:
        """The working directory as part of :meth:`pool_key`: the process's own. A protocol
        that gives each session its working directory returns ``None`` where the process's
        does not matter."""
        return self.options.cwd

    async def _prompt_rejected(self, ctx: TurnContext, error: JsonRpcError) -> None:
        """The agent answered the prompt request with ``error``; the translator has already
        ended the turn with it. Raise to say more (an unknown session, say)."""

    @property
    def request_handlers(self) -> RequestHandlerTable:
        """The agent's requests this session answers, by method."""
        return {}

    @property
    def connection(self) -> JsonRpcConnection:
        """The open connection (raises once the session is not running)."""
        if self.conn is None:
            raise SessionTerminatedError(
                f"{self.engine_name} is not running", engine=self.engine_name
            )
        return self.conn

    # -- wire --------------------------------------------------------------------------------

    async def _observe(self, direction: str, msg: Any) -> None:
        event = {"dir": direction, "msg": msg}
        # A received message is what the connection's decoder made of a line (its nesting
        # already cut, so it is not walked again); a sent one is the library's own value.
        if direction == "recv":
            await self._route(self.translator.feed_decoded(event))
        else:
            await self._route(self.translator.feed(event))

    async def _observe_received(self, msg: Any) -> None:
        await self._observe("recv", msg)

    def _line_taker(
        self, feed: Callable[[bytes], list[Message] | None]
    ) -> Callable[[bytes], Awaitable[bool] | bool]:
        """The connection's ``on_line`` for a :class:`JsonRpcTranslator`'s ``feed_received``: a
        received line it reads from its bytes in one pass (a notification its wire schema
        takes, read as ``{"dir": "recv", "msg": <the line decoded>}`` would be), its messages
        routed, the line not decoded nor dispatched; ``None`` from it for any other line."""

        def take(line: bytes) -> Awaitable[bool] | bool:
            out = feed(line)
            return False if out is None else self._routed(out)

        return take

    async def _routed(self, messages: list[Message]) -> bool:
        await self._route(messages)
        return True

    async def _send_line(self, data: bytes) -> None:
        if self._proc is None:
            raise SessionTerminatedError(
                f"{self.engine_name} is not running", engine=self.engine_name
            )
        prompt = self._prompt_line()  # before anything sees it: a withdrawn prompt is not sent
        decoded = json.loads(data)
        if self.shared is not None:
            self.shared.sent(self, decoded)
        if not self.jsonrpc_field:
            decoded.pop("jsonrpc", None)
            data = (json.dumps(decoded, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        self.tap("send", data.rstrip(b"\n"))
        await self._observe("send", decoded)
        await self._write_line(data, prompt=prompt)

    async def _on_request(self, method: str, params: Any) -> Any:
        handler = self.request_handlers.get(method)
        if handler is None:
            raise JsonRpcError.method_not_found(method)
        return await handler(params)

    async def _on_problem(self, problem: JsonRpcProblem) -> None:
        code = (
            problem.code
            if problem.code in ("line_too_long", "invalid_json", "invalid_utf8")
            else "protocol"
        )
        data: dict[str, Any] = {"problem": problem.code}
        if problem.raw is not None:
            data["raw"] = problem.raw[:4096].decode("utf-8", "backslashreplace")
        await self._route(
            [Message.error_message(f"{self.engine_name}: {problem.detail}", code=code, data=data)]
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        if self.pool is not None:
            await self._start_pooled(self.pool, task_group)
            return
        proc = await self._spawn(task_group)
        translator = self.translator
        conn = JsonRpcConnection(
            self._send_line,
            on_request=self._on_request,
            on_problem=self._on_problem,
            engine=self.engine_name,
            on_message=self._observe_received,
            on_line=self._line_taker(translator.feed_received)
            if isinstance(translator, JsonRpcTranslator)
            else None,
        )
        self.conn = conn
        # Until the session is open, the agent has nothing to finish, and one still loading may
        # not see the end of its input: stopped now (cancelled, closed, a failed start), it gets
        # SIGTERM at once, however its close comes (this task or the process's own).
        proc.skip_stdin_grace()
        task_group.start_soon(self._read, conn, proc)
        async with self._opening():
            await self._handshake(conn)
        proc.skip_stdin_grace(False)

    async def _start_pooled(self, pool: ProcessPool, task_group: anyio.abc.TaskGroup) -> None:
        """Join a pooled process (started when none has room), then open this session on it."""
        self._task_group = task_group
        # The shared process's stderr is nobody's own: it stays in its tail, for errors.
        spec = dataclasses.replace(self._process_spec(), on_stderr=None)
        shared, first = await pool.join(self, self.pool_key(), spec)
        self.shared = shared
        self._proc = shared.proc
        assert shared.conn is not None
        conn = MemberConnection(shared.conn, self)
        self.conn = conn
        async with self._opening():
            if first:
                shared.begin_opening(self)
                try:
                    await self._open_process(conn)
                except BaseException as exc:
                    shared.end_opening(f"opening it failed: {exc!r}")
                    raise
                shared.end_opening(None)
            else:
                for event in shared.opening:
                    await self._observe(event["dir"], event["msg"])
            await self._open_session_on(conn)

    @contextlib.asynccontextmanager
    async def _opening(self) -> AsyncGenerator[None]:
        """Opening the session, bounded by :attr:`handshake_timeout`: running out of it, or the
        agent's output ending meanwhile, is the session's typed error."""
        try:
            with anyio.fail_after(self.handshake_timeout):
                yield
        except TimeoutError:
            raise SessionTerminatedError(
                f"{self.engine_name} did not open a session within {self.handshake_timeout:g}s",
                engine=self.engine_name,
            ) from None
        except ConnectionClosedError:
            raise await self._exit_error("opening the session") from None

    # -- what a pooled process hands its sessions --------------------------------------------

    async def pool_received(self, msg: Any) -> None:
        """A message of the agent for this session (an answer to it, its session's message)."""
        if self.host.tapping:
            self.tap("recv", json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode())
        await self._observe("recv", msg)

    async def pool_request(self, method: str, params: Any) -> Any:
        """The agent's request for this session: its answer."""
        return await self._on_request(method, params)

    async def pool_problem(self, problem: JsonRpcProblem) -> None:
        """A line of the agent naming this session that could not be read."""
        await self._on_problem(problem)

    async def pool_send_line(self, data: bytes) -> None:
        """Write one line of this session to the shared process."""
        await self._send_line(data)

    async def pool_output_ended(self) -> None:
        """The shared process's output ended: this session is over."""
        await self._output_ended()

    def _stop_agent_now(self) -> bool:
        if self.shared is None:
            return super()._stop_agent_now()
        # The process serves other sessions: only this one ends. Nothing more of the agent
        # reaches it, and a turn still waiting sees the end.
        self.shared.drop(self)
        self._end_turn_now(
            SessionTerminatedError(self._terminated or self._overran(), engine=self.engine_name)
        )
        return False

    async def _read(self, conn: JsonRpcConnection, proc: AgentProcess) -> None:
        async def lines() -> AsyncIterator[bytes | LineTooLong]:
            async for item in proc.lines():
                self.tap_received(item)
                yield item

        try:
            await conn.run(lines())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            conn.close("the agent's output ended")
            await self._output_ended()

    async def shutdown(self) -> None:
        await super().shutdown()
        if self.conn is not None:
            self.conn.close("the session was closed")
        if self.shared is not None:
            await self.shared.leave(self)

    # -- turns -------------------------------------------------------------------------------

    async def run_turn(self, ctx: TurnContext) -> None:
        self._prompt_failure = None
        await super().run_turn(ctx)

    async def _answer_too_long(self, ctx: TurnContext, error: LineTooLongError) -> bool:
        """The answer to the prompt request was a line over the limit (reported to the turn as an
        ``error`` message): True when the turn still ends, by a ``result`` the engine delivers
        here or by the agent's own messages. By default the session cannot go on."""
        return False

    async def _prompt_error(self, ctx: TurnContext, error: Exception) -> bool:
        if isinstance(error, JsonRpcError):
            self._prompt_failure = error  # the translator saw the answer and ends the turn
            return True
        if isinstance(error, LineTooLongError):
            return await self._answer_too_long(ctx, error)
        return isinstance(error, ConnectionClosedError)  # the end of output follows

    async def _turn_ended(self, ctx: TurnContext) -> None:
        if self._prompt_failure is not None:
            await self._prompt_rejected(ctx, self._prompt_failure)
