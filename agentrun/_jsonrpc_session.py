"""The long-lived JSON-RPC base: one agent process per session, spoken to over JSON-RPC.

Agents such as ``codex app-server`` (and ACP agents) keep one process for the whole session and
exchange JSON-RPC messages over stdio. :class:`JsonRpcSession` owns the machinery; an engine on
it says only:

* :meth:`~JsonRpcSession._argv` — the command line;
* :meth:`~JsonRpcSession._new_translator` — one translator for the session, fed every wire
  message in both directions as ``{"dir": "send"|"recv", "msg": {...}}``: the same events
  ``agentrun replay`` feeds it from a recording, so live runs and replays agree;
* :meth:`~JsonRpcSession._handshake` — the requests that open the session;
* :meth:`~JsonRpcSession._send_prompt` — the request that starts a turn (run in a task of its
  own, so it may wait for the whole turn, as ACP's ``session/prompt`` does);
* :meth:`~JsonRpcSession._prompt_rejected` — what an error answer to it means beyond the failed
  result the translator makes of it (optional);
* :meth:`~JsonRpcSession._interrupt` — how to interrupt one (the cancellation hook);
* :attr:`~JsonRpcSession.request_handlers` — the agent's requests it answers (approvals, fs...),
  one table.

A turn ends when the translator emits its ``result`` — on the response to the prompt (ACP) or on
a notification (Codex ``turn/completed``): the base does not care which. The agent's exit is seen
from the process (not only from the end of its output, which a leftover descendant can hold
open). Peers that omit
``"jsonrpc"`` are accepted, and :attr:`~JsonRpcSession.jsonrpc_field` leaves it out of what is
sent. Messages the translator makes before the first turn (the ``init``) are delivered at its
start; messages that arrive while no turn runs are dropped, so nothing of a finished or
cancelled turn reaches the next one. Cancelling a turn calls the interrupt hook and waits (bounded
by ``cancel_timeout``) for the turn's end; an agent that does not end it is killed and the session
is over (:class:`SessionTerminatedError`), rather than mixing two turns.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, ClassVar, Protocol

import anyio
import anyio.abc

from ._errors import AgentrunError, SessionTerminatedError
from ._framing import LineTooLong
from ._jsonrpc import ConnectionClosedError, JsonRpcConnection, JsonRpcError, JsonRpcProblem
from ._messages import Message, MessageType
from ._options import SessionOptions
from ._session import Session, TurnContext
from ._subprocess import AgentProcess, ProcessHost, ProcessSpec, merge_env

__all__ = ["JsonRpcSession", "RequestHandlerTable", "WireTranslator"]

_log = logging.getLogger("agentrun.jsonrpc")

RequestHandlerTable = Mapping[str, Callable[[Any], Awaitable[Any]]]


class WireTranslator(Protocol):
    """A translator fed both directions of a JSON-RPC session."""

    def feed(self, event: Any) -> list[Message]: ...

    def finish(self) -> list[Message]: ...


class _Ended:
    """Queued when the agent's output ended, or (with ``error``) the session cannot go on."""

    def __init__(self, error: AgentrunError | None = None) -> None:
        self.error = error


class JsonRpcSession(Session):
    """A session with one long-lived JSON-RPC agent process. See the module docstring."""

    #: Whether sent messages carry ``"jsonrpc": "2.0"`` (Codex app-server omits it).
    jsonrpc_field: ClassVar[bool] = True

    def __init__(
        self,
        options: SessionOptions | None,
        *,
        handshake_timeout: float | None = 60.0,
        cancel_timeout: float = 10.0,
        close_stdin_timeout: float = 5.0,
        terminate_timeout: float = 5.0,
        max_line_bytes: int | None = None,
    ) -> None:
        super().__init__(options)
        #: Bounds the whole :meth:`_handshake` (``None``: the engine bounds its own requests).
        self.handshake_timeout = handshake_timeout
        self.cancel_timeout = cancel_timeout
        self.close_stdin_timeout = close_stdin_timeout
        self.terminate_timeout = terminate_timeout
        self.max_line_bytes = max_line_bytes
        self.env: dict[str, str] = merge_env(self._extra_env(), inherit=self.options.inherit_env)
        #: Names of the environment variables the agent gets (values are never kept).
        self.env_names: list[str] = sorted(self.env)
        self.argv: tuple[str, ...] = ()
        self.translator: WireTranslator = self._new_translator()
        self.conn: JsonRpcConnection | None = None
        self._proc: AgentProcess | None = None
        self._host: ProcessHost | None = None
        self._queue: anyio.abc.ObjectSendStream[Message | _Ended] | None = None
        self._early: list[Message] = []
        self._turn_started = False
        self._ended = False
        self._terminated: str | None = None
        self._prompt_error: JsonRpcError | None = None

    # -- hooks -------------------------------------------------------------------------------

    @abstractmethod
    def _argv(self) -> tuple[str, ...]:
        """The agent's command line (raise ConfigurationError / EngineUnavailableError)."""

    @abstractmethod
    def _new_translator(self) -> WireTranslator:
        """The session's translator (called once, in ``__init__``)."""

    @abstractmethod
    async def _handshake(self, conn: JsonRpcConnection) -> None:
        """Open the session (``initialize``, a thread or session ...)."""

    @abstractmethod
    async def _send_prompt(self, conn: JsonRpcConnection, ctx: TurnContext) -> None:
        """Send the request that starts the turn. Its error response is the translator's to
        report (it ends the turn); raise only for a session that cannot go on."""

    async def _prompt_rejected(self, ctx: TurnContext, error: JsonRpcError) -> None:
        """The agent answered the prompt request with ``error``; the translator has already
        ended the turn with it. Raise to say more (an unknown session, say)."""

    @abstractmethod
    async def _interrupt(self, conn: JsonRpcConnection) -> None:
        """Ask the agent to stop the running turn (it still ends it with its usual message)."""

    def _extra_env(self) -> dict[str, str]:
        """Environment entries on top of the inherited one (default: ``SessionOptions.env``)."""
        return dict(self.options.env)

    @property
    def request_handlers(self) -> RequestHandlerTable:
        """The agent's requests this session answers, by method."""
        return {}

    # -- properties --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    def stderr_tail(self) -> str:
        return "" if self._proc is None else self._proc.stderr_tail()

    # -- wire --------------------------------------------------------------------------------

    async def _observe(self, direction: str, msg: Any) -> None:
        await self._route(self.translator.feed({"dir": direction, "msg": msg}))

    async def _observe_received(self, msg: Any) -> None:
        await self._observe("recv", msg)

    async def _route(self, messages: list[Message]) -> None:
        queue = self._queue
        for message in messages:
            if queue is not None:
                try:
                    await queue.send(message)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self._queue = queue = None  # the turn is over; the late tail is dropped
                    continue
                if message.type is MessageType.RESULT:
                    self._queue = queue = None
            elif not self._turn_started:
                self._early.append(message)  # init and the like: the first turn's start
            else:
                _log.info(
                    "%s: dropped a %s message that arrived while no turn was running",
                    self.engine_name,
                    message.type,
                )

    async def _send_line(self, data: bytes) -> None:
        proc = self._proc
        if proc is None:
            raise SessionTerminatedError(
                f"{self.engine_name} is not running", engine=self.engine_name
            )
        if not self.jsonrpc_field:
            decoded = json.loads(data)
            decoded.pop("jsonrpc", None)
            data = (json.dumps(decoded, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        else:
            decoded = json.loads(data)
        line = data.rstrip(b"\n")
        self._tap("send", line)
        await self._observe("send", decoded)
        await proc.write(data)

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

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        self.argv = self._argv()
        limits: dict[str, Any] = {}
        if self.max_line_bytes is not None:
            limits["max_line_bytes"] = self.max_line_bytes
        spec = ProcessSpec(
            argv=self.argv,
            cwd=self.options.cwd,
            env=self.env,
            stdin="pipe",
            engine=self.engine_name,
            on_stderr=self._tap_stderr,
            close_stdin_timeout=self.close_stdin_timeout,
            terminate_timeout=self.terminate_timeout,
            **limits,
        )
        # Kept open by a task of its own: _shutdown runs in another task.
        self._host = ProcessHost(spec)
        proc = await self._host.start(task_group)
        self._proc = proc
        conn = JsonRpcConnection(
            self._send_line,
            on_request=self._on_request,
            on_problem=self._on_problem,
            engine=self.engine_name,
            on_message=self._observe_received,
        )
        self.conn = conn
        task_group.start_soon(self._read, conn, proc)
        try:
            with anyio.fail_after(self.handshake_timeout):
                await self._handshake(conn)
        except TimeoutError:
            raise SessionTerminatedError(
                f"{self.engine_name} did not open a session within {self.handshake_timeout:g}s",
                engine=self.engine_name,
            ) from None
        except ConnectionClosedError:
            raise await self._exit_error("opening the session") from None

    async def _read(self, conn: JsonRpcConnection, proc: AgentProcess) -> None:
        async def lines() -> AsyncIterator[bytes | LineTooLong]:
            async for item in proc.lines():
                self._tap_received(item)
                yield item

        try:
            await conn.run(lines())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            conn.close("the agent's output ended")
            self._ended = True
            queue = self._queue
            if queue is not None:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await queue.send(_Ended())

    async def _shutdown(self) -> None:
        if self._host is not None:
            # End of input asks the agent to exit; the process manager escalates.
            await self._host.aclose()
        if self.conn is not None:
            self.conn.close("the session was closed")

    async def _exit_error(self, doing: str) -> AgentrunError:
        proc = self._proc
        if proc is None:
            return SessionTerminatedError(
                f"{self.engine_name} is not running", engine=self.engine_name
            )
        with anyio.move_on_after(5.0):
            await proc.wait()
        if proc.returncode is None:
            return SessionTerminatedError(
                f"{self.engine_name}: the connection ended while {doing}", engine=self.engine_name
            )
        return proc.exit_error(f"{self.engine_name} exited while {doing}")

    # -- turns -------------------------------------------------------------------------------

    async def _run_turn(self, ctx: TurnContext) -> None:
        if self._terminated is not None:
            raise SessionTerminatedError(self._terminated, engine=self.engine_name)
        conn = self.conn
        if conn is None or self._ended:
            raise await self._exit_error(f"starting turn {ctx.number}")
        send, recv = anyio.create_memory_object_stream[Message | _Ended](1024)
        early, self._early = self._early, []
        self._turn_started = True
        for message in early:
            await ctx.emit(message)
        self._queue = send
        self._prompt_error = None
        prompt_done = anyio.Event()
        assert self._task_group is not None
        self._task_group.start_soon(self._prompt, conn, ctx, prompt_done)
        try:
            await self._pump(ctx, recv)
            # The answer to the prompt (if it ends the turn) arrives with the result.
            with anyio.move_on_after(self.cancel_timeout):
                await prompt_done.wait()
            if self._prompt_error is not None:
                await self._prompt_rejected(ctx, self._prompt_error)
        except anyio.get_cancelled_exc_class():
            ctx.begin_cancel()
            with anyio.CancelScope(shield=True):
                await self._cancel(conn, ctx, recv)
            raise
        finally:
            self._queue = None
            send.close()
            recv.close()

    async def _prompt(self, conn: JsonRpcConnection, ctx: TurnContext, done: anyio.Event) -> None:
        try:
            await self._send_prompt(conn, ctx)
        except JsonRpcError as exc:
            self._prompt_error = exc  # the translator saw the error answer and ends the turn
        except ConnectionClosedError:
            pass  # the end of output is in the queue
        except Exception as exc:  # the session cannot go on: end the turn with the reason
            error = (
                exc
                if isinstance(exc, AgentrunError)
                else AgentrunError(
                    f"{self.engine_name}: sending the prompt failed: {exc!r}",
                    engine=self.engine_name,
                )
            )
            self._terminated = error.message
            queue = self._queue
            if queue is not None:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await queue.send(_Ended(error))
        finally:
            done.set()

    async def _pump(
        self, ctx: TurnContext, recv: anyio.abc.ObjectReceiveStream[Message | _Ended]
    ) -> None:
        async for item in recv:
            if isinstance(item, _Ended):
                if item.error is not None:
                    raise item.error
                for message in self.translator.finish():
                    await ctx.emit(message)
                error = await self._exit_error(f"turn {ctx.number}")
                reason = error.message.splitlines()[0]
                self._terminated = f"{self.engine_name}: the agent is gone ({reason})"
                raise error
            await ctx.emit(item)
            if item.type is MessageType.RESULT:
                return

    async def _cancel(
        self,
        conn: JsonRpcConnection,
        ctx: TurnContext,
        recv: anyio.abc.ObjectReceiveStream[Message | _Ended],
    ) -> None:
        """Interrupt the turn in the agent and consume its end, bounded; kill if it never ends."""
        if self._queue is None or self._ended:
            return
        finished = False
        with anyio.move_on_after(self.cancel_timeout):
            try:
                await self._interrupt(conn)
                await self._pump(ctx, recv)
                finished = True
            except AgentrunError:
                finished = True
        if not finished:
            self._terminated = (
                f"{self.engine_name} did not end an interrupted turn within "
                f"{self.cancel_timeout:g}s and was killed"
            )
            if self._proc is not None:
                self._proc.send_signal_group(getattr(signal, "SIGKILL", signal.SIGTERM))
                with anyio.move_on_after(self.terminate_timeout):
                    await self._proc.wait()
