"""The long-lived base: one agent process for the whole session, prompts over its stdin.

Claude Code (stream-json lines) and every JSON-RPC agent (ACP, Codex ``app-server``) keep one
process per session. :class:`LongLivedDriver` owns what they share; an engine on it says only:

* :meth:`~LongLivedDriver._argv` — the command line (and :meth:`_extra_env` for its
  environment);
* :meth:`~LongLivedDriver._new_translator` — one translator for the session;
* :meth:`~LongLivedDriver.start` — start the process with :meth:`_spawn` and a reader task
  that feeds the translator and hands what it makes to :meth:`_route`; call
  :meth:`_output_ended` when the agent's output ends;
* :meth:`~LongLivedDriver._send_prompt` — what starts a turn (run in a task of its own, so it
  may wait for the whole turn);
* :meth:`~LongLivedDriver._interrupt` — how to interrupt a turn (the cancellation hook).

The turn ends when the translator emits its ``result``; the base does not care what on the wire
caused it. Messages made before the first turn (the ``init``, replayed history) are delivered at
its start; messages that arrive while no turn runs are dropped (and logged), so nothing of a
finished or cancelled turn reaches the next one. Cancelling a turn calls the interrupt hook and
consumes the turn's end, bounded by ``cancel_grace``; an agent that does not end it is killed
and the session is over (:class:`SessionTerminatedError`) rather than mixing two turns. The
agent's exit is seen from the process, not only from the end of its output (which a detached
descendant can hold open).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import signal
from abc import abstractmethod
from typing import Any, ClassVar

import anyio
import anyio.abc

from .._turns.channel import Receiver, Sender, channel, send_soon
from .._turns.driver import CANCEL_GRACE, EngineDriver
from .._turns.turn import TurnContext
from .._vocabulary.errors import AgentrunError, SessionTerminatedError
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.options import SessionOptions
from .._wire.process import AgentProcess, ProcessHost, ProcessSpec, merge_env
from .translator import Translator

__all__ = ["LongLivedDriver"]

_log = logging.getLogger("agentrun.session")

_SIGKILL = getattr(signal, "SIGKILL", signal.SIGTERM)
#: Seconds a turn whose result arrived waits for the answer to its prompt request.
PROMPT_ANSWER_WAIT = 5.0
#: Seconds the prompt's line may take to be written (the agent reads it) before the agent is
#: considered stuck.
PROMPT_WRITE_LIMIT = 60.0
#: The session whose prompt the current task is sending (see ``LongLivedDriver._prompt_line``).
_SENDING_PROMPT: contextvars.ContextVar[tuple[LongLivedDriver, anyio.CancelScope] | None] = (
    contextvars.ContextVar("agentrun_sending_prompt", default=None)
)


class _PromptWithdrawn(Exception):
    """The turn was cancelled before its prompt was written: it is not written at all."""


class _Ended:
    """Queued when the agent's output ended, or (with ``error``) the session cannot go on."""

    def __init__(self, error: AgentrunError | None = None) -> None:
        self.error = error


class LongLivedDriver(EngineDriver):
    """A session with one long-lived agent process. See the module docstring."""

    #: Whether sending the prompt may wait while the agent answers (a JSON-RPC request whose
    #: response comes after the turn's notifications): then it runs in a task of its own, so the
    #: turn's messages keep flowing. ``False`` for a prompt that is only written (Claude Code).
    prompt_waits: ClassVar[bool] = True

    def __init__(
        self,
        options: SessionOptions | None,
        *,
        cancel_grace: float = CANCEL_GRACE,
        close_stdin_timeout: float = 5.0,
        terminate_timeout: float = 5.0,
        max_line_bytes: int | None = None,
    ) -> None:
        super().__init__(options)
        #: How long a cancelled turn may take to end before the agent is killed.
        self.cancel_grace = cancel_grace
        self.close_stdin_timeout: float = close_stdin_timeout
        self.terminate_timeout: float = terminate_timeout
        self.max_line_bytes: int | None = max_line_bytes
        self.env: dict[str, str] = merge_env(
            self._extra_env(), inherit=self.options.inherit_env and self.options.sandbox is None
        )
        #: Names of the environment variables the agent gets (values are never kept).
        self.env_names: list[str] = sorted(self.env)
        self.argv: tuple[str, ...] = ()
        self.translator: Translator = self._new_translator()
        self._proc: AgentProcess | None = None
        #: The session's task group (given to ``start``), for the prompt's own task.
        self._task_group: anyio.abc.TaskGroup | None = None
        self._host: ProcessHost | None = None
        self._queue: Sender[Message | _Ended] | None = None
        #: The running turn (set with ``_queue``).
        self._ctx: TurnContext | None = None
        #: True while the turn's pump waits for the queue: the reader may then deliver a
        #: message itself, in order, instead of waking the pump for it.
        self._pump_idle = False
        self._early: list[Message] = []
        self._turn_started = False
        self._ended = False
        self._terminated: str | None = None
        #: The running turn's prompt: ``"pending"`` until its line is written, then ``"sent"``;
        #: ``"withdrawn"`` when the turn was cancelled before (nothing reached the agent).
        self._prompt_state: str = "none"
        self._prompt_scope: anyio.CancelScope | None = None
        #: Set once the agent said something of the running turn.
        self._turn_began = anyio.Event()

    # -- hooks -------------------------------------------------------------------------------

    @abstractmethod
    def _argv(self) -> tuple[str, ...]:
        """The agent's command line (raise ConfigurationError / EngineUnavailableError)."""

    @abstractmethod
    def _new_translator(self) -> Translator:
        """The session's translator (called once, in ``__init__``)."""

    @abstractmethod
    async def _send_prompt(self, ctx: TurnContext) -> None:
        """Send what starts the turn. Raise only for a session that cannot go on (see
        :meth:`_prompt_error` for errors the agent's own messages already explain)."""

    async def _prompt_error(self, ctx: TurnContext, error: Exception) -> bool:
        """``_send_prompt`` raised ``error``: True when the turn still ends by the agent's own
        messages (an error answer the translator reports, the end of output that follows)."""
        return False

    async def _turn_ended(self, ctx: TurnContext) -> None:
        """Called after the turn's result was delivered: raise to say more (an unknown
        session, say)."""

    @abstractmethod
    async def _interrupt(self) -> None:
        """Ask the agent to stop the running turn (it still ends it with its usual message)."""

    #: Whether an interrupt is heard only once the agent began the turn (said something of
    #: it): a turn cancelled just after its prompt was sent is then interrupted once it began.
    interrupt_needs_start: ClassVar[bool] = False

    def _extra_env(self) -> dict[str, str]:
        """Environment entries on top of the inherited one (default: ``SessionOptions.env``)."""
        return dict(self.options.env)

    # -- properties --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    def stderr_tail(self) -> str:
        return "" if self._proc is None else self._proc.stderr_tail()

    # -- the process -------------------------------------------------------------------------

    def _process_spec(self) -> ProcessSpec:
        """How the agent is started (sets :attr:`argv`)."""
        self.argv = self._argv()
        limits: dict[str, Any] = {}
        if self.max_line_bytes is not None:
            limits["max_line_bytes"] = self.max_line_bytes
        return ProcessSpec(
            argv=self.argv,
            cwd=self.options.cwd,
            env=self.host.spawn_env(self.env),
            stdin="pipe",
            engine=self.engine_name,
            on_stderr=self.tap_stderr,
            sandbox=self.options.sandbox,
            close_stdin_timeout=self.close_stdin_timeout,
            terminate_timeout=self.terminate_timeout,
            **limits,
        )

    async def _spawn(self, task_group: anyio.abc.TaskGroup) -> AgentProcess:
        """Start the agent (stdin piped), kept open by a task of its own in ``task_group``."""
        spec = self._process_spec()
        self._task_group = task_group
        # A managed process is entered and left by one task: shutdown runs in another.
        self._host = ProcessHost(spec)
        self._proc = await self._host.start(task_group)
        return self._proc

    def _prompt_line(self) -> bool:
        """Call before writing a line to the agent: True for the line that carries the running
        turn's prompt (the first one written while :meth:`_send_prompt` runs), which must then
        be written whole with :meth:`_write_line`. A turn cancelled before its prompt was
        written has withdrawn it: nothing is written (the sending task ends)."""
        sending = _SENDING_PROMPT.get()
        if sending is None or sending[0] is not self:
            return False
        if sending[1] is not self._prompt_scope or self._prompt_state == "withdrawn":
            raise _PromptWithdrawn  # this prompt's turn is over
        if self._prompt_state != "pending":
            return False
        self._prompt_state = "sent"
        return True

    async def _write_line(self, data: bytes, *, prompt: bool = False) -> None:
        """Write ``data`` (one line, with its newline) to the agent's stdin. The prompt's line
        is written whole even when the turn is cancelled meanwhile: from the moment it was
        claimed (:meth:`_prompt_line`) the agent may have the turn, and the cancel interrupts
        it rather than cut the line."""
        proc = self._proc
        if proc is None:
            raise SessionTerminatedError(
                f"{self.engine_name} is not running", engine=self.engine_name
            )
        if not prompt:
            await proc.write(data)
            return
        # Bounded: an agent that stops reading its stdin is stopped by the turn's cancel bound
        # (the write then fails), or here when no cancel comes.
        limit = anyio.move_on_after(PROMPT_WRITE_LIMIT, shield=True)
        with limit:
            await proc.write(data)
        if limit.cancelled_caught:
            self._terminated = (
                f"{self.engine_name} did not read its prompt within {PROMPT_WRITE_LIMIT:g}s "
                "and was killed"
            )
            proc.send_signal_group(_SIGKILL)
            raise SessionTerminatedError(self._terminated, engine=self.engine_name)

    async def _output_ended(self) -> None:
        """The reader calls this when the agent's output ended."""
        self._ended = True
        queue = self._queue
        if queue is not None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await queue.send(_Ended())

    async def shutdown(self) -> None:
        if self._host is not None:
            # End of input asks the agent to exit; the process manager escalates.
            await self._host.aclose()

    def force_stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._terminated = self._terminated or self._overran()
            self._stop_agent_now()

    def _stop_agent_now(self) -> bool:
        """End the session's agent at once (SIGKILL to its process group); True when its exit
        is then worth waiting for. A pooled session ends only itself."""
        if self._proc is None:
            return False
        self._proc.send_signal_group(_SIGKILL)
        return True

    def _end_turn_now(self, error: AgentrunError) -> None:
        """The session is over: the running turn (if any) ends with ``error`` at once."""
        self._ended = True
        queue = self._queue
        if queue is not None:
            with contextlib.suppress(
                anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError
            ):
                queue.send_nowait(_Ended(error))

    def _overran(self) -> str:
        return (
            f"{self.engine_name} did not end an interrupted turn within "
            f"{self.cancel_grace:g}s and was killed"
        )

    async def _exit_error(self, doing: str) -> AgentrunError:
        """The error for an agent that went away while ``doing``."""
        proc = self._proc
        if proc is None:
            return SessionTerminatedError(
                f"{self.engine_name} is not running", engine=self.engine_name
            )
        with anyio.move_on_after(5.0):
            await proc.wait()
        if proc.returncode is None:
            return SessionTerminatedError(
                f"{self.engine_name}: the connection to the agent ended while {doing}",
                engine=self.engine_name,
            )
        return proc.exit_error(f"{self.engine_name} exited while {doing}")

    def _check_alive(self) -> None:
        """Raise the typed error of a session that cannot run a turn any more."""
        if self._terminated is not None:
            raise SessionTerminatedError(self._terminated, engine=self.engine_name)
        if self._ended and self._proc is not None:
            raise self._proc.exit_error(f"{self.engine_name} is no longer running")

    # -- routing -----------------------------------------------------------------------------

    async def _route(self, messages: list[Message]) -> None:
        """Hand messages to the running turn; before the first turn they wait for it, between
        turns they are dropped."""
        queue = self._queue
        for message in messages:
            if queue is not None:
                self._turn_began.set()
                ctx = self._ctx
                if (
                    self._pump_idle
                    and ctx is not None
                    and not queue.buffered
                    and ctx.emit_nowait(message)
                ):
                    continue
                try:
                    await send_soon(queue, message)
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

    # -- turns -------------------------------------------------------------------------------

    async def run_turn(self, ctx: TurnContext) -> None:
        if self._terminated is not None:
            raise SessionTerminatedError(self._terminated, engine=self.engine_name)
        if self._proc is None or self._ended:
            raise await self._exit_error(f"starting turn {ctx.number}")
        send, recv = channel[Message | _Ended](1024)
        early, self._early = self._early, []
        self._turn_started = True
        # The stream starts with the init, whatever the agent said before its session was ready.
        early.sort(key=lambda m: m.type is not MessageType.INIT)
        for message in early:
            await ctx.emit(message)
        self._queue = send
        self._ctx = ctx
        prompt_done = anyio.Event()
        self._prompt_state = "pending"
        self._prompt_scope = anyio.CancelScope()
        self._turn_began = anyio.Event()
        try:
            # A turn cancelled before it could begin withdraws its prompt (see _cancel).
            await anyio.lowlevel.checkpoint_if_cancelled()
            if self.prompt_waits:
                assert self._task_group is not None
                self._task_group.start_soon(self._prompt, ctx, prompt_done)
            else:
                await self._prompt(ctx, prompt_done)
            await self._pump(ctx, recv)
            # What answers the prompt (when it is what ends the turn) arrives with the result.
            # (Waiting on a set event would still pass through the event loop once.)
            if not prompt_done.is_set():
                with anyio.move_on_after(PROMPT_ANSWER_WAIT):
                    await prompt_done.wait()
            await self._turn_ended(ctx)
        except anyio.get_cancelled_exc_class():
            ctx.begin_cancel()
            with anyio.CancelScope(shield=True):
                await self._cancel(ctx, recv)
            raise
        finally:
            self._queue = None
            self._ctx = None
            send.close()
            recv.close()

    async def _prompt(self, ctx: TurnContext, done: anyio.Event) -> None:
        scope = self._prompt_scope
        assert scope is not None
        sending = _SENDING_PROMPT.set((self, scope))
        try:
            with scope:
                await self._send_prompt(ctx)
        except _PromptWithdrawn:
            pass  # the turn was cancelled first: the agent never saw it
        except Exception as exc:
            if not await self._prompt_error(ctx, exc):
                # The session cannot go on: the turn ends with the reason.
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
            _SENDING_PROMPT.reset(sending)
            done.set()

    async def _pump(self, ctx: TurnContext, recv: Receiver[Message | _Ended]) -> None:
        while True:
            # Idle only while it waits: a buffered item is taken without passing the event loop.
            # (Not waiting inside an ``except WouldBlock``, which would hold the exception,
            # its traceback and frames for the whole wait.)
            self._pump_idle = True
            try:
                item = await recv.receive()
            except anyio.EndOfStream:
                return
            finally:
                self._pump_idle = False
            if isinstance(item, _Ended):
                if item.error is not None:
                    raise item.error
                for message in self.translator.finish():
                    await ctx.emit(message)
                error = await self._exit_error(f"running turn {ctx.number}")
                reason = error.message.splitlines()[0]
                self._terminated = f"{self.engine_name}: the agent is gone ({reason})"
                raise error
            await ctx.emit(item)
            if item.type is MessageType.RESULT:
                return

    async def _cancel(self, ctx: TurnContext, recv: Receiver[Message | _Ended]) -> None:
        """Interrupt the turn in the agent and consume its end, bounded; kill if it never ends.
        A turn whose prompt was not written yet is not interrupted: the prompt is withdrawn
        and the turn ends at once (the agent never had it)."""
        if self._prompt_state == "pending":
            self._prompt_state = "withdrawn"
            if self._prompt_scope is not None:
                self._prompt_scope.cancel()
            return
        if self._queue is None or self._ended:
            return
        finished = False
        with anyio.move_on_after(self.cancel_grace):
            try:
                if self.interrupt_needs_start:
                    await self._turn_began.wait()
                await self._interrupt()
                await self._pump(ctx, recv)
                finished = True
            except AgentrunError:
                finished = True
        if not finished:
            self._terminated = self._terminated or self._overran()
            if self._stop_agent_now() and self._proc is not None:
                with anyio.move_on_after(self.terminate_timeout):
                    await self._proc.wait()
