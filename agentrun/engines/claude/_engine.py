"""The Claude Code engine: one long-lived ``claude -p`` process per session.

The process runs in streaming input mode (``--input-format stream-json``); stdin stays open for
the whole session (the CLI exits when it closes). A background reader owns stdout: it answers
the CLI's control requests (``can_use_tool`` permission prompts), resolves our own control
requests (``interrupt``, ``get_context_usage``) and queues everything else for the running turn.

Control protocol facts (verified on the pinned 2.1.329): no ``initialize`` handshake is needed
before user messages or control requests (the CLI answers ``initialize`` if sent, with its
commands, but nothing depends on it); ``interrupt`` is answered with
``{"subtype":"success","response":{"still_queued":[]}}`` and the turn then ends with a
``result/error_during_execution`` (``terminal_reason:"aborted_streaming"``); with
``--permission-prompt-tool stdio`` each tool that needs approval arrives as a
``control_request`` ``can_use_tool`` (``tool_name``, ``input``, ``tool_use_id``,
``permission_suggestions``, ``description``) and waits for our ``control_response``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, cast

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..._binaries import resolve_binary
from ..._errors import (
    AgentrunError,
    ProcessExitError,
    ProtocolError,
    SessionNotFoundError,
    SessionTerminatedError,
)
from ..._messages import Message, MessageType, ProcessMeta
from ..._options import SessionOptions
from ..._permissions import PermissionRequest, ask_permission
from ..._session import Engine, Session, TurnContext
from ..._subprocess import AgentProcess, ProcessHost, ProcessSpec, merge_env
from ..._translate import decode_line
from ._argv import build_argv, needs_sandbox_env
from ._translate import ClaudeTranslator

__all__ = ["ClaudeEngine", "ClaudeSession"]

_ENGINE = "claude"


class _Eof:
    """Queued by the reader when stdout ended."""


_EOF = _Eof()
_QueueItem = dict[str, Any] | Message | _Eof


class ClaudeEngine(Engine):
    """Runs the Claude Code CLI.

    ``binary`` is the ``claude`` program (default: the pinned install, then ``PATH``);
    ``argv_prefix`` replaces it with an arbitrary command (tests run fake programs this way).
    ``interrupt_timeout`` bounds how long a cancelled turn waits for the CLI to confirm the
    interrupt with a result before the process is killed; the close timeouts bound shutdown.
    """

    name: str = _ENGINE
    #: What the recorder captures: the raw stdout lines.
    wire_format: ClassVar[Literal["stdout", "jsonrpc"]] = "stdout"

    def __init__(
        self,
        binary: str | None = None,
        *,
        argv_prefix: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        interrupt_timeout: float = 10.0,
        control_timeout: float = 30.0,
        close_stdin_timeout: float = 5.0,
        terminate_timeout: float = 5.0,
        max_line_bytes: int | None = None,
    ) -> None:
        self.binary = binary
        self.argv_prefix: tuple[str, ...] | None = (
            tuple(argv_prefix) if argv_prefix is not None else None
        )
        self.env: dict[str, str] | None = dict(env) if env is not None else None
        self.interrupt_timeout = interrupt_timeout
        self.control_timeout = control_timeout
        self.close_stdin_timeout = close_stdin_timeout
        self.terminate_timeout = terminate_timeout
        self.max_line_bytes = max_line_bytes

    def start(self, options: SessionOptions | None = None) -> ClaudeSession:
        return ClaudeSession(self, options)

    def check(self) -> None:
        if self.argv_prefix is None:
            resolve_binary("claude", explicit=self.binary, engine=_ENGINE)

    def command(self, session: SessionOptions) -> list[str]:
        """The argv this engine starts for ``session``."""
        if self.argv_prefix is not None:
            return build_argv(session, self.argv_prefix)
        explicit = session.binary if session.binary is not None else self.binary
        return build_argv(session, resolve_binary("claude", explicit=explicit, engine=_ENGINE))


class ClaudeSession(Session):
    """One Claude Code session (one CLI process)."""

    engine_name: str = _ENGINE

    def __init__(self, engine: ClaudeEngine, options: SessionOptions | None) -> None:
        super().__init__(options)
        self.engine = engine
        self.argv: list[str] = []
        #: Names of the environment variables the child got (values are never kept).
        self.env_names: list[str] = []
        self._proc: AgentProcess | None = None
        s = self.options
        self.translator: ClaudeTranslator = ClaudeTranslator(
            model=s.model,
            context_window_tokens=s.context_window_tokens,
            resumed=s.resume_id is not None or s.continue_last,
        )
        send, recv = anyio.create_memory_object_stream[_QueueItem](4096)
        self._queue_send: MemoryObjectSendStream[_QueueItem] = send
        self._queue_recv: MemoryObjectReceiveStream[_QueueItem] = recv
        self._pending: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._ids = itertools.count(1)
        self._eof = False
        self._terminated: str | None = None
        self._host: ProcessHost | None = None

    # -- properties --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    def stderr_tail(self) -> str:
        return "" if self._proc is None else self._proc.stderr_tail()

    # -- lifecycle ---------------------------------------------------------------------------

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        session = self.options
        engine = self.engine
        self.argv = engine.command(session)
        extra = dict(engine.env or {})
        extra.update(session.env)
        if needs_sandbox_env(session):
            # The CLI refuses bypass mode as root unless told it runs in a sandbox.
            extra["IS_SANDBOX"] = "1"
        env = merge_env(extra, inherit=session.inherit_env)
        self.env_names = sorted(env)
        kwargs: dict[str, Any] = {}
        if engine.max_line_bytes is not None:
            kwargs["max_line_bytes"] = engine.max_line_bytes
        spec = ProcessSpec(
            argv=tuple(self.argv),
            cwd=session.cwd,
            env=env,
            stdin="pipe",
            engine=_ENGINE,
            on_stderr=self._tap_stderr,
            close_stdin_timeout=engine.close_stdin_timeout,
            terminate_timeout=engine.terminate_timeout,
            **kwargs,
        )
        # The managed process is entered and left by one task of its own (its task group
        # must be exited where it was entered, not under the caller's shutdown scope).
        proc = await self._host_for(spec).start(task_group)
        self._proc = proc
        binary = self.argv[0]
        self.translator.process = ProcessMeta(pid=proc.pid, binary=binary)
        task_group.start_soon(self._read_stdout)

    def _host_for(self, spec: ProcessSpec) -> ProcessHost:
        self._host = ProcessHost(spec)
        return self._host

    async def _shutdown(self) -> None:
        proc = self._proc
        try:
            if proc is not None and self._host is not None:
                # stdin first: the CLI ends on end of input; the bounded escalation (SIGTERM,
                # SIGKILL of the whole group) is the process manager's.
                await self._host.aclose()
        finally:
            self._queue_send.close()
            self._queue_recv.close()

    # -- the reader --------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        proc = self._proc
        assert proc is not None
        try:
            async for item in proc.lines():
                self._tap_received(item)
                event, problem = decode_line(item, engine=_ENGINE)
                if problem is not None:
                    await self._queue_send.send(problem)
                    continue
                if isinstance(event, dict):
                    ev = cast(dict[str, Any], event)
                    if await self._control(ev):
                        continue
                    await self._queue_send.send(ev)
                else:
                    await self._queue_send.send(
                        Message.error_message(
                            "claude: a stream-json line was not a JSON object",
                            code="protocol",
                            data={"value": event},
                        )
                    )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            self._eof = True
            for done, _ in self._pending.values():
                done.set()
            # Blocks while the queue is full (a turn will drain it); when the session is
            # closing, the cancellation ends this and nobody needs the marker.
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._queue_send.send(_EOF)

    async def _control(self, ev: dict[str, Any]) -> bool:
        """Handle control traffic; True when ``ev`` was consumed here."""
        kind = ev.get("type")
        if kind == "control_response":
            response = ev.get("response")
            if isinstance(response, dict):
                r = cast(dict[str, Any], response)
                request_id = r.get("request_id")
                pending = self._pending.get(request_id) if isinstance(request_id, str) else None
                if pending is not None:
                    pending[1].append(r)
                    pending[0].set()
                    return True
            return False
        if kind == "control_request":
            request_id = ev.get("request_id")
            request = ev.get("request")
            if not isinstance(request_id, str) or not isinstance(request, dict):
                return False
            req = cast(dict[str, Any], request)
            if req.get("subtype") == "can_use_tool" and self._task_group is not None:
                self._task_group.start_soon(self._answer_permission, request_id, req)
                return True
            await self._respond(
                request_id, error=f"agentrun does not handle control request {req.get('subtype')!r}"
            )
            await self._queue_send.send(
                Message(type=MessageType.SYSTEM, subtype="control_request", data=req, raw=ev)
            )
            return True
        return False

    async def _write_json(self, obj: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None:
            raise SessionTerminatedError("claude session is not started", engine=_ENGINE)
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        self._tap("send", line)
        await proc.write(line + b"\n")

    async def _respond(
        self, request_id: str, response: dict[str, Any] | None = None, *, error: str | None = None
    ) -> None:
        body: dict[str, Any] = {"request_id": request_id}
        if error is not None:
            body.update(subtype="error", error=error)
        else:
            body.update(subtype="success", response=response or {})
        with contextlib.suppress(AgentrunError):
            await self._write_json({"type": "control_response", "response": body})

    async def _answer_permission(self, request_id: str, req: dict[str, Any]) -> None:
        session = self.options
        tool_input = req.get("input")
        request = PermissionRequest(
            tool_name=req.get("tool_name") if isinstance(req.get("tool_name"), str) else None,
            tool_use_id=req.get("tool_use_id") if isinstance(req.get("tool_use_id"), str) else None,
            input=tool_input,
            title=req.get("description") if isinstance(req.get("description"), str) else None,
            engine=_ENGINE,
            raw=req,
        )
        decision, notes = await ask_permission(
            session.permission_handler, session.hitl, request, engine=_ENGINE
        )
        if decision.allow:
            updated = decision.updated_input
            if updated is None:
                updated = cast(dict[str, Any], tool_input) if isinstance(tool_input, dict) else {}
            response: dict[str, Any] = {"behavior": "allow", "updatedInput": updated}
        else:
            reason = decision.reason or "denied by the permission callback"
            response = {"behavior": "deny", "message": reason}
        # Queue the notes first: the CLI goes on only after it has our answer.
        for note in notes:
            try:
                await self._queue_send.send(note)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                break
        await self._respond(request_id, response)

    # -- control requests ----------------------------------------------------------------------

    async def control(
        self, request: dict[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send a control request and return the CLI's ``response`` object.

        Raises :class:`ProtocolError` when the CLI answers with an error, and
        :class:`SessionTerminatedError` when it does not answer within ``timeout``."""
        request_id = f"agentrun_{next(self._ids)}"
        done = anyio.Event()
        box: list[dict[str, Any]] = []
        self._pending[request_id] = (done, box)
        try:
            await self._write_json(
                {"type": "control_request", "request_id": request_id, "request": request}
            )
            with anyio.move_on_after(
                timeout if timeout is not None else self.engine.control_timeout
            ):
                await done.wait()
        finally:
            self._pending.pop(request_id, None)
        if not box:
            if self._eof and self._proc is not None:
                raise self._proc.exit_error("claude exited before answering a control request")
            raise SessionTerminatedError(
                f"claude did not answer the {request.get('subtype')!r} control request",
                engine=_ENGINE,
            )
        answer = box[0]
        if answer.get("subtype") != "success":
            raise ProtocolError(
                f"claude refused the {request.get('subtype')!r} control request: "
                f"{answer.get('error')}",
                engine=_ENGINE,
            )
        response = answer.get("response")
        return cast(dict[str, Any], response) if isinstance(response, dict) else {}

    async def get_context_usage(
        self, *, detail: str | None = "summary", timeout: float | None = None
    ) -> dict[str, Any]:
        """Ask the CLI how full its context is (``totalTokens``, ``maxTokens``,
        ``percentage``, ``categories``, ``apiUsage``...). ``detail="summary"`` makes no extra
        model API call; ``detail=None`` lets the CLI count tokens through the API."""
        self._check_alive()
        request: dict[str, Any] = {"subtype": "get_context_usage"}
        if detail is not None:
            request["detail"] = detail
        return await self.control(request, timeout=timeout)

    async def interrupt(self) -> None:
        """Send an ``interrupt`` control request (the running turn ends with a result)."""
        await self._write_json(
            {
                "type": "control_request",
                "request_id": f"agentrun_{next(self._ids)}",
                "request": {"subtype": "interrupt"},
            }
        )

    # -- turns -------------------------------------------------------------------------------

    def _check_alive(self) -> None:
        if self._terminated is not None:
            raise SessionTerminatedError(self._terminated, engine=_ENGINE)
        if self._eof and self._proc is not None:
            raise self._proc.exit_error("claude is no longer running")

    def _drain_stale(self) -> list[_QueueItem]:
        """Items that arrived between turns (nothing of an earlier turn may leak)."""
        stale: list[_QueueItem] = []
        while True:
            try:
                item = self._queue_recv.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return stale
            if isinstance(item, _Eof):
                # Keep the end-of-stream marker for the turn that will meet it.
                self._queue_send.send_nowait(item)
                return stale
            stale.append(item)

    async def _run_turn(self, ctx: TurnContext) -> None:
        if self._terminated is not None:
            raise SessionTerminatedError(self._terminated, engine=_ENGINE)
        self._drain_stale()
        user = {
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": ctx.prompt}]},
            "parent_tool_use_id": None,
            "session_id": self.translator.session_id or "",
        }
        if not self._eof:
            # If it already exited, what it printed before is read below.
            with contextlib.suppress(ProcessExitError):
                await self._write_json(user)
        state = _TurnState()
        try:
            await self._pump(ctx, state)
        except anyio.get_cancelled_exc_class():
            ctx.begin_cancel()
            with anyio.CancelScope(shield=True):
                await self._cancel_turn(ctx, state)
            raise

    async def _pump(self, ctx: TurnContext, state: _TurnState) -> None:
        translator = self.translator
        while True:
            item = await self._queue_recv.receive()
            if isinstance(item, _Eof):
                await self._process_ended(ctx)
                return
            if isinstance(item, Message):
                await ctx.emit(item)
                continue
            messages = translator.feed(item)
            if any(m.type is MessageType.RESULT for m in messages):
                state.result_seen = True
            for message in messages:
                await ctx.emit(message)
            if state.result_seen:
                if translator.session_not_found is not None:
                    raise SessionNotFoundError(
                        f"claude: {translator.session_not_found}",
                        session_id=self.options.resume_id,
                        engine=_ENGINE,
                    )
                return

    async def _process_ended(self, ctx: TurnContext) -> None:
        proc = self._proc
        assert proc is not None
        with anyio.move_on_after(5):
            await proc.wait()
        for message in self.translator.finish():
            await ctx.emit(message)
        self._terminated = "the claude process has exited"
        if self.translator.session_not_found is not None:
            raise SessionNotFoundError(
                f"claude: {self.translator.session_not_found}",
                session_id=self.options.resume_id,
                engine=_ENGINE,
            )
        raise proc.exit_error(f"claude exited during turn {ctx.number}")

    async def _cancel_turn(self, ctx: TurnContext, state: _TurnState) -> None:
        """Interrupt the turn in the CLI and consume its result (bounded)."""
        if state.result_seen:
            return
        if self._eof or self._proc is None:
            return
        finished = False
        with anyio.move_on_after(self.engine.interrupt_timeout):
            try:
                await self.interrupt()
                await self._pump(ctx, state)
                finished = True
            except AgentrunError:
                finished = True
        if not finished:
            # The CLI did not confirm the interrupt in time: the session cannot be trusted.
            self._terminated = (
                f"claude did not answer an interrupt within {self.engine.interrupt_timeout:g}s "
                "and was killed"
            )
            self._proc.send_signal_group(getattr(signal, "SIGKILL", signal.SIGTERM))


class _TurnState:
    __slots__ = ("result_seen",)

    def __init__(self) -> None:
        self.result_seen = False
