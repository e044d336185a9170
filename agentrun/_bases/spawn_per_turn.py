"""The spawn-per-turn base: one agent process per turn, one session to the caller.

Agents such as ``opencode run`` and ``codex exec`` run exactly one turn per process and continue
a conversation by an id the previous process printed. :class:`SpawnPerTurnDriver` makes that
invisible: ``engine.start()`` starts nothing, every turn (the first included) spawns the agent,
and the id the translator captured is handed to the next turn's command line. An engine written
on it says only:

* :meth:`~SpawnPerTurnDriver._command` — the argv (and optional stdin bytes) of this turn;
* :meth:`~SpawnPerTurnDriver._new_translator` — a fresh translator for the turn's output;
* optionally :meth:`~SpawnPerTurnDriver._conclude` — how the exit status ends the turn, and
  :meth:`~SpawnPerTurnDriver._before_finish` — what to read once the process has exited.

The base owns the rest: spawning in its own process group with the session's environment,
writing stdin in the background (a large prompt never blocks reading), framing stdout and
reading each line in one pass where the translator has a wire schema (else decoding it), tapping
every line, turn numbering through :class:`~agentrun.Turn`, capturing the resume id, and
cancellation: ``interrupt_signal`` to the process group, ``cancel_grace`` seconds to
exit, then SIGKILL to the group — the thread stays resumable and
nothing of the cancelled turn can reach the next one (its process is gone before the turn ends).
"""

from __future__ import annotations

import re
import signal
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import anyio
import anyio.abc

from .._turns.driver import CANCEL_GRACE, EngineDriver
from .._turns.turn import TurnContext
from .._vocabulary.errors import ProcessExitError, SessionNotFoundError, SessionTerminatedError
from .._vocabulary.messages import Message, MessageType, ProcessMeta
from .._vocabulary.options import SessionOptions
from .._wire.process import AgentProcess, ProcessSpec, merge_env, open_process
from .translator import Translator, line_feed

_SIGKILL = getattr(signal, "SIGKILL", signal.SIGTERM)

__all__ = ["PerTurnTranslator", "SpawnPerTurnDriver", "TurnCommand", "unsupported_message"]


class PerTurnTranslator(Translator, Protocol):
    """What the base needs of a spawn-per-turn translator (one per turn): a
    :class:`~agentrun.abc.Translator` that also makes the turn's ``init``, says the resume id
    it saw and whether the turn had an outcome, and finishes a cancelled turn."""

    def start(
        self,
        *,
        process: ProcessMeta | None = None,
        resume_id: str | None = None,
        permission_mode: str | None = None,
    ) -> list[Message]:
        """Messages before any output (the turn's ``init``, if the translator makes it)."""
        ...

    def finish(self, *, cancelled: bool = False) -> list[Message]:
        """The end of the turn's output: its ``result`` when there is an outcome."""
        ...

    @property
    def resume_id(self) -> str | None:
        """The id the next turn continues (seen in this turn's output)."""
        ...

    @property
    def has_outcome(self) -> bool:
        """Whether :meth:`finish` will make a ``result`` (the turn completed or failed)."""
        ...


@dataclass(frozen=True)
class TurnCommand:
    """How to run one turn: the argv, optional bytes for stdin (then closed), and the session
    options this agent cannot honour (``(option, reason)``), reported once per turn."""

    argv: tuple[str, ...]
    stdin: bytes | None = None
    unsupported: tuple[tuple[str, str], ...] = ()
    env: Mapping[str, str] | None = None


def unsupported_message(agent: str, unsupported: Sequence[tuple[str, str]]) -> Message:
    """The ``system`` message that says which session options the agent ignores."""
    options = [{"option": name, "reason": reason} for name, reason in unsupported]
    names = ", ".join(name for name, _ in unsupported)
    return Message(
        type=MessageType.SYSTEM,
        subtype="unsupported_option",
        text=f"{agent} ignores: {names}",
        data={"options": options},
    )


class SpawnPerTurnDriver(EngineDriver):
    """A session whose agent runs one process per turn. See the module docstring."""

    #: The signal that asks the agent to stop its turn.
    interrupt_signal: ClassVar[int] = signal.SIGINT
    #: The agent's name in ``unsupported_option`` messages and errors.
    agent_name: ClassVar[str] = "agent"
    #: Exit statuses with which a turn that reported its outcome ended normally (agents exit 1
    #: after reporting a failed turn).
    outcome_exit_codes: ClassVar[frozenset[int]] = frozenset({0, 1})
    #: What the agent prints on stderr when it does not know the id it was asked to resume.
    not_found_markers: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self, options: SessionOptions | None, *, cancel_grace: float = CANCEL_GRACE
    ) -> None:
        super().__init__(options)
        #: Seconds a signalled agent may take to exit before its group is killed.
        self.cancel_grace = cancel_grace
        #: The complete environment of the agent processes (session env over the caller's).
        self.env: dict[str, str] = merge_env(
            self.options.env, inherit=self.options.inherit_env and self.options.sandbox is None
        )
        #: The agent's session (thread) id captured from this session's own turns.
        self.session_id: str | None = None
        #: The process of the running turn, if any.
        self.current: AgentProcess | None = None
        #: The argv, pid, exit status and stderr tail of the latest turn's process.
        self.argv: tuple[str, ...] = ()
        self.pid: int | None = None
        self.returncode: int | None = None
        self._stderr_tail = ""

    @property
    def can_handoff(self) -> bool:
        """Every turn is a process: the next one can just as well start a new session."""
        return True

    async def start_fresh(self) -> None:
        self.forget_resume()
        self.session_id = None
        self.resume_id = None

    # -- hooks -------------------------------------------------------------------------------

    @abstractmethod
    def _command(self, ctx: TurnContext) -> TurnCommand:
        """The command line of this turn (``self.session_id`` is ``None`` on the first)."""

    @abstractmethod
    def _new_translator(self) -> PerTurnTranslator:
        """A translator for this turn's output."""

    def _permission_mode(self) -> str | None:
        """What the ``init`` message reports as the permission mode."""
        hitl = self.options.hitl
        return None if hitl is None else ("ask" if hitl else "auto")

    def _start_resume_id(self, command: TurnCommand) -> str | None:
        """The id the ``init`` message reports before the agent printed one."""
        return self.resume_id

    async def _before_finish(self, proc: AgentProcess, translator: PerTurnTranslator) -> None:
        """Called after the process exited, before the translator finishes (read side files)."""

    async def _conclude(
        self,
        ctx: TurnContext,
        proc: AgentProcess,
        translator: PerTurnTranslator,
        code: int,
    ) -> None:
        """End the turn from the exit status: emit the translator's result, or raise
        :class:`SessionNotFoundError` (a resumed id the agent does not know) or
        :class:`ProcessExitError` (anything else), after delivering what the process printed."""
        if code == 0 or (code in self.outcome_exit_codes and translator.has_outcome):
            await self._emit_finish(ctx, translator)
            return
        said = _not_found_line(proc.stderr_tail(), self.not_found_markers)
        if said is not None:
            # Whenever it happens: a resume id of the caller's, one the session captured, or
            # one that reached the agent another way (``extra_args``).
            resumed = self.resume_id
            known = repr(resumed) if resumed is not None else f"the session it was given ({said})"
            raise SessionNotFoundError(
                f"{self.agent_name} does not know {known}",
                session_id=resumed,
                engine=self.engine_name,
            )
        # Whatever the process printed before it ended is delivered; no result is made up.
        for message in translator.finish():
            if message.type is not MessageType.RESULT:
                await ctx.emit(message)
        raise proc.exit_error(f"{self.engine_name} exited during turn {ctx.number}")

    def _process_spec(self, command: TurnCommand) -> ProcessSpec:
        return ProcessSpec(
            argv=command.argv,
            cwd=self.options.cwd,
            env=self.host.spawn_env(command.env if command.env is not None else self.env),
            stdin="pipe" if command.stdin is not None else "devnull",
            engine=self.engine_name,
            on_stderr=self.tap_stderr,
            sandbox=self.options.sandbox,
            close_stdin_timeout=1.0,
            terminate_timeout=3.0,
            kill_timeout=5.0,
        )

    # -- the turn ----------------------------------------------------------------------------

    def stderr_tail(self) -> str:
        """The stderr tail of the latest turn's process."""
        if self.current is not None:
            return self.current.stderr_tail()
        return self._stderr_tail

    async def _emit_finish(self, ctx: TurnContext, translator: PerTurnTranslator) -> None:
        for message in translator.finish():
            await ctx.emit(message)

    async def run_turn(self, ctx: TurnContext) -> None:
        command = self._command(ctx)
        translator = self._new_translator()
        code = -1
        async with open_process(self._process_spec(command)) as proc:
            self.current = proc
            self.argv = command.argv
            self.pid = proc.pid
            self.returncode = None
            try:
                meta = ProcessMeta(pid=proc.pid, binary=command.argv[0])
                for message in translator.start(
                    process=meta,
                    resume_id=self._start_resume_id(command),
                    permission_mode=self._permission_mode(),
                ):
                    await ctx.emit(message)
                if command.unsupported:
                    await ctx.emit(unsupported_message(self.agent_name, command.unsupported))
                code = await self._stream(ctx, proc, translator, command.stdin)
            except anyio.get_cancelled_exc_class():
                ctx.begin_cancel()
                with anyio.CancelScope(shield=True):
                    await self._interrupt(proc)
                    self._capture(translator)
                    for message in translator.finish(cancelled=True):
                        await ctx.emit(message)
                raise
            finally:
                self.returncode = proc.returncode
                self._stderr_tail = proc.stderr_tail()
                self.current = None
            await self._before_finish(proc, translator)
            await self._conclude(ctx, proc, translator, code)

    async def _stream(
        self,
        ctx: TurnContext,
        proc: AgentProcess,
        translator: PerTurnTranslator,
        stdin: bytes | None,
    ) -> int:
        code = -1
        async with anyio.create_task_group() as tg:
            if stdin is not None:
                # In the background: input larger than the pipe buffer must not block reading
                # stdout, and a program that died early must not hang the write.
                tg.start_soon(self._send_stdin, proc, stdin)
            # Each line goes to the translator's feed_line; one too long to hold is its problem's
            # error.
            feed = line_feed(translator, engine=self.engine_name)
            async for item in proc.lines():
                self.tap_received(item)
                messages = feed(item)
                self._capture(translator)
                for message in messages:
                    await ctx.emit(message)
            code = await proc.wait()
            tg.cancel_scope.cancel()
        return code

    async def _send_stdin(self, proc: AgentProcess, data: bytes) -> None:
        self.tap("send", data)
        try:
            await proc.write(data)
        except (SessionTerminatedError, ProcessExitError):
            return  # the program exited first; its exit status explains why
        finally:
            await proc.close_stdin()

    def _capture(self, translator: PerTurnTranslator) -> None:
        captured = translator.resume_id
        if captured is not None and captured != self.session_id:
            self.session_id = captured
            self.resume_id: str | None = captured

    async def _interrupt(self, proc: AgentProcess) -> None:
        """Signal the group and give it :attr:`cancel_grace` seconds to exit, then kill it."""
        if proc.returncode is not None:
            return
        proc.send_signal_group(self.interrupt_signal)
        with anyio.move_on_after(self.cancel_grace):
            await proc.wait()
        if proc.returncode is None:
            proc.send_signal_group(_SIGKILL)

    def force_stop(self) -> None:
        # The turn's process only: the next turn starts a new one and resumes the thread.
        current = self.current
        if current is not None and current.returncode is None:
            current.send_signal_group(_SIGKILL)

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Nothing runs between turns; subclasses check here that the program exists."""


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _not_found_line(tail: str, markers: tuple[str, ...]) -> str | None:
    """The line of ``tail`` in which the agent says it does not know the session, without its
    terminal colours, or ``None``."""
    for line in tail.splitlines():
        plain = _ANSI_ESCAPE.sub("", line).strip()
        if any(marker in plain for marker in markers):
            return plain[:300]
    return None
