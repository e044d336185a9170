"""Engines, sessions and turns: the one turn model every engine plugs into.

An :class:`Engine` makes :class:`Session` objects from :class:`SessionOptions`; a session is an
async context manager that owns
whatever runs the agent (a long-lived program, a JSON-RPC connection, or nothing until the first
turn for spawn-per-turn agents). Every prompt, the first included, goes through a turn::

    async with engine.start(SessionOptions(cwd=".")) as session:
        summary = await run_turn(session, "fix the failing test")
        async with session.turn("now explain it") as turn:
            async for message in turn:
                ...
            print(turn.summary.text)

Writing an engine means implementing one coroutine, :meth:`Session._run_turn`: send the prompt,
translate what the agent says into :class:`Message` objects passed to :meth:`TurnContext.emit`,
and return once the turn's ``result`` message has been emitted. Everything else is done here:

* turns run one at a time and every message is tagged with its turn number; nothing a cancelled
  or timed-out turn emits late reaches the next turn;
* ``timeout`` bounds the whole turn and ``idle_timeout`` the silence between messages; both
  cancel the backend turn (the engine's cancellation path interrupts the agent) and raise
  :class:`TurnTimeoutError`;
* a cancel is bounded too: an engine that has not ended a cancelled turn
  :attr:`Session.cancel_grace` seconds after its cancellation path began gets its agent stopped
  by force (:meth:`Session._force_stop`), so ``run_turn(..., timeout=T)`` returns within about
  ``T + cancel_grace`` whatever the agent or an async ``on_message`` callback does;
* caller cancellation cancels the backend turn the same way, then propagates;
* a turn that ends without a result raises :class:`NoResultError`; an engine raises
  :class:`ProcessExitError` when its program dies. Each carries the partial summary.

Engines must treat cancellation of ``_run_turn`` as "cancel the turn in the agent": do the
interrupt inside ``anyio.CancelScope(shield=True)`` with a bound (``move_on_after``) and then
re-raise. While cancelling, :meth:`TurnContext.emit` never blocks (late messages are dropped
if the caller stopped listening).
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator
from contextlib import AsyncExitStack, contextmanager, suppress
from types import TracebackType
from typing import Any, ClassVar, cast, final

import anyio
import anyio.abc

from .._vocabulary.errors import (
    AgentrunError,
    BudgetExceededError,
    CompactionNotSupportedError,
    ConfigurationError,
    NoResultError,
    SessionClosedError,
    SessionLostError,
    SessionTerminatedError,
    TurnInProgressError,
    TurnTimeoutError,
)
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.options import SessionOptions
from .._vocabulary.permissions import PermissionDecision, PermissionRequest, ask_permission
from .._vocabulary.policy import BudgetLimit, ContextGauge, tokens_of
from .._vocabulary.questions import QuestionAnswer, QuestionRequest, ask_question
from .._vocabulary.summary import TurnSummary
from .._vocabulary.trajectory import TrajectorySource, load_trajectory, trajectory_digest
from .._wire.framing import LineTooLong
from .channel import Receiver, Sender, channel, receive_soon, send_soon
from .observe import OBSERVERS

__all__ = [
    "Engine",
    "MessageCallback",
    "ProgramEngine",
    "Session",
    "Turn",
    "TurnContext",
    "WireTap",
    "run_turn",
]

MessageCallback = Callable[[Message], "Awaitable[None] | None"]

#: ``tap(direction, line)``: every raw line an engine reads (``"recv"``), writes (``"send"``) or
#: sees on the agent's stderr (``"stderr"``), without the trailing newline.
WireTap = Callable[[str, bytes], None]

#: Messages buffered between an engine and a slow consumer before the engine waits.
_BUFFER = 256
#: What :meth:`Session.handoff` asks the agent for.
HANDOFF_PROMPT = (
    "Write a hand-off summary of this session for a colleague who will continue the work in a "
    "fresh session with none of this history: the goal, what was done and decided, the files "
    "involved, and what is left to do. Reply with the summary only."
)
#: What the first prompt after a hand-off starts with, before the summary.
HANDOFF_PREAMBLE = (
    "You are continuing work begun in an earlier session. Its hand-off summary follows; the "
    "request comes after the line."
)
#: How often the stall reporter looks again while no report can be due.
_QUIET_POLL = 0.5
#: Seconds ``Session.aclose()`` lets a running turn interrupt its agent before stopping it.
CLOSE_TURN_GRACE = 10.0
#: Default of :attr:`Session.cancel_grace`.
CANCEL_GRACE = 3.0


class Engine(ABC):
    """Makes sessions for one kind of agent. Cheap to create; starts nothing by itself."""

    #: The engine's registry name (``"claude"``, ``"opencode"``, ``"acp"``, ...): what
    #: ``get_engine(name)`` takes, so ``get_engine(n).name == n``. Presets set it per instance.
    name: str = "engine"

    @abstractmethod
    def start(self, options: SessionOptions | None = None) -> Session:
        """A session run with ``options``, to be entered with ``async with``. Takes no prompt."""

    def check(self) -> None:
        """Raise :class:`EngineUnavailableError` when the agent program cannot be run."""


class ProgramEngine(Engine):
    """An engine that runs one named agent program (``program``): found from
    ``SessionOptions.binary``, the engine's own ``binary``, the pinned install, then ``PATH``."""

    #: The program's name as installed (``"codex"``, ``"opencode"``).
    program: ClassVar[str] = ""
    #: An explicit path of the program, for every session of this engine.
    binary: str | None = None

    def resolve_binary(self, options: SessionOptions | None = None) -> str:
        from .._wire.programs import resolve_binary

        explicit = options.binary if options is not None and options.binary else self.binary
        return resolve_binary(self.program, explicit=explicit, engine=self.name)

    def check(self) -> None:
        self.resolve_binary()


class Session(ABC):
    """One agent session. Use as an async context manager; see the module docstring."""

    #: The engine name, for messages and errors.
    engine_name: str = "engine"
    #: Seconds an engine may take to end a cancelled turn (a timeout, the caller's cancel) once
    #: its cancellation path began; then the agent is stopped by force and the session may be
    #: over. ``run_turn``'s wall time is at most about ``timeout + cancel_grace``.
    cancel_grace: float = CANCEL_GRACE

    def __init__(self, options: SessionOptions | None = None) -> None:
        #: What this session runs with (model, cwd, permissions, ...), validated and immutable.
        self.options: SessionOptions = options if options is not None else SessionOptions()
        #: The latest id that resumes this session (``SessionOptions(resume_id=...)``), once known.
        self.resume_id: str | None = self.options.resume_id
        self._turns = 0
        self._active: Turn | None = None
        self._closed = False
        self._entered = False
        self._stack: AsyncExitStack | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        #: Set before entering to see every raw line (the recorder uses this).
        self.wire_tap: WireTap | None = None
        self._caller_error: Exception | None = None
        #: (agent session id before, id after) of every hand-off (:meth:`handoff`).
        self.handoffs: list[tuple[str | None, str | None]] = []
        #: The next turn's seed: hand-off summary, previous id, fill before.
        self._handoff: tuple[str, str | None, int | None] | None = None
        policy = self.options.context_policy
        self._context_gauge: ContextGauge | None = None if policy is None else ContextGauge(policy)

    def _tap(self, direction: str, line: bytes) -> None:
        """Engines call this for every raw line they read or write.

        A tap that raises is the caller's error, not the engine's: it is not called again, the
        running turn is cancelled in the agent, and the turn raises that exception itself."""
        tap = self.wire_tap
        if tap is None:
            return
        try:
            tap(direction, line)
        except Exception as exc:
            self.wire_tap = None
            if self._caller_error is None:
                self._caller_error = exc
            if self._active is not None:
                self._active.cancel()

    def _tap_received(self, item: bytes | LineTooLong) -> None:
        """Tap one framed stdout line (an oversized one by the head that was kept)."""
        if self.wire_tap is not None:
            self._tap("recv", item.head if isinstance(item, LineTooLong) else item)

    def _tap_stderr(self, line: str) -> None:
        """Tap one line of the agent's stderr (use as ``ProcessSpec.on_stderr``)."""
        if self.wire_tap is not None:
            self._tap("stderr", line.encode("utf-8", "replace"))

    # -- engine hooks ------------------------------------------------------------------------

    async def _start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start what must run for the whole session (long-lived engines). Background tasks go
        into ``task_group``, which is cancelled after :meth:`_shutdown`."""

    @abstractmethod
    async def _run_turn(self, ctx: TurnContext) -> None:
        """Run one turn: send ``ctx.prompt``, emit its messages, return after its result."""

    async def _shutdown(self) -> None:
        """Stop the session's program(s). Called shielded; must bound its own waits."""

    def _force_stop(self) -> None:
        """Stop the agent at once, without waiting: a cancelled turn overran
        :attr:`cancel_grace`. Its cancellation path must then end promptly (it sees the exit)."""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def turns(self) -> int:
        """How many turns were started."""
        return self._turns

    async def __aenter__(self) -> Session:
        if self._entered:
            raise RuntimeError("a Session can be entered only once")
        self._entered = True
        stack = AsyncExitStack()
        await stack.__aenter__()
        if OBSERVERS:
            for observer in OBSERVERS:
                observer.session_started(self)
        try:
            self._task_group = await stack.enter_async_context(anyio.create_task_group())
            await self._start(self._task_group)
        except BaseException as exc:
            self._closed = True
            with anyio.CancelScope(shield=True):
                await self._shutdown()
            self._observed_close()
            if self._task_group is not None:
                self._task_group.cancel_scope.cancel()
            try:
                await stack.__aexit__(None, None, None)
            except BaseException as group:
                raise single_error(group) from None
            raise single_error(exc) from None
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        stack, self._stack = self._stack, None
        if stack is None:
            return None
        if self._task_group is not None:
            # The block is over: what is still running in the background is cancelled (this
            # scope encloses the block, so it is never cancelled while the caller's code runs).
            self._task_group.cancel_scope.cancel()
        try:
            return await stack.__aexit__(exc_type, exc, tb)
        except BaseException as group:
            # The session's task group wraps whatever left the block (the caller's own error, or
            # a background task's) in an exception group: the caller gets the one error itself.
            single = single_error(group)
            if single is exc:
                return False  # the caller's own exception propagates unchanged
            raise single from None

    async def aclose(self) -> None:
        """End the session: stop the agent program (bounded).

        Idempotent, and callable from any task, the one iterating a turn included: a running
        turn is cancelled in the agent first (bounded by ``CLOSE_TURN_GRACE``) and ends with
        :class:`SessionClosedError`. The caller's code after ``aclose()`` runs normally: the
        session's background tasks end with the program, and whatever is left is cancelled
        when the ``async with`` block exits."""
        if self._closed:
            return
        self._closed = True
        active = self._active
        with anyio.CancelScope(shield=True):
            if active is not None and not active.done:
                active.closed_by_session = True
                active.cancel()
                with anyio.move_on_after(CLOSE_TURN_GRACE):
                    await active.wait_done()
            await self._shutdown()
        self._observed_close()

    def _observed_close(self) -> None:
        if OBSERVERS:
            for observer in OBSERVERS:
                observer.session_closed(self)

    def turn(
        self,
        prompt: str,
        *,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        tool_timeout: float | None = None,
        stall_after: float | None = None,
    ) -> Turn:
        """A turn for ``prompt``: ``async with session.turn(p) as t: async for m in t: ...``.
        See :func:`run_turn` for the arguments."""
        return Turn(
            self,
            prompt,
            timeout=timeout,
            idle_timeout=idle_timeout,
            tool_timeout=tool_timeout,
            stall_after=stall_after,
        )

    @property
    def can_compact(self) -> bool:
        """Whether the agent offers a way to compact its context (detected from the agent,
        never guessed): Claude Code's ``/compact``, Codex app-server's ``thread/compact/start``,
        an ACP agent that advertises a ``compact`` command."""
        return False

    #: The prompt that asks the agent to compact (engines that compact by command).
    _compact_prompt: ClassVar[str] = "/compact"

    async def compact(
        self,
        *,
        timeout: float | None = None,
        on_message: MessageCallback | None = None,
    ) -> TurnSummary:
        """Compact the agent's context now, as a turn of its own; returns its summary.

        The stream has a ``compaction`` message (the fill before and after) and the context
        gauge drops. Raises :class:`CompactionNotSupportedError` when :attr:`can_compact` is
        false; otherwise the same errors as :func:`run_turn`.
        """
        if not self.can_compact:
            raise CompactionNotSupportedError(
                f"{self.engine_name} offers no way to compact its context",
                engine=self.engine_name,
            )
        check_turn_arguments(self._compact_prompt, timeout=timeout, on_message=on_message)
        turn = Turn(self, self._compact_prompt, timeout=timeout)
        turn.compacting = turn.housekeeping = True
        return await _consume(self, turn, on_message, timeout)

    @property
    def can_handoff(self) -> bool:
        """Whether the session can continue in a fresh agent-side session (a new thread or
        session of the same agent) seeded with a summary: :meth:`handoff`."""
        return False

    def _forget_resume(self) -> None:
        """From now on the options start a new agent session (for :meth:`_start_fresh`)."""
        fresh = {"resume_id": None, "continue_last": False, "fork": False}
        self.options = self.options.model_copy(update=fresh)

    async def _start_fresh(self) -> None:
        """Engine hook for :meth:`handoff`: from the next turn on, the agent runs a new session
        of its own (no history)."""
        raise CompactionNotSupportedError(
            f"{self.engine_name} cannot start a fresh session", engine=self.engine_name
        )

    async def handoff(
        self,
        *,
        prompt: str = HANDOFF_PROMPT,
        timeout: float | None = None,
        on_message: MessageCallback | None = None,
    ) -> TurnSummary:
        """Hand the work over to a fresh session of the agent: ask for a hand-off summary (a
        turn of its own, returned), start a new agent-side session, and begin the next prompt
        with that summary. This :class:`Session` stays the one logical session; the next turn
        shows a ``compaction`` message with ``trigger="handoff"`` linking the previous agent
        session id to the new one (also in :attr:`handoffs`).

        Raises :class:`CompactionNotSupportedError` when :attr:`can_handoff` is false, and the
        turn's errors when the summary cannot be had (the session then goes on unchanged).
        """
        if not self.can_handoff:
            raise CompactionNotSupportedError(
                f"{self.engine_name} cannot hand off to a fresh session", engine=self.engine_name
            )
        check_turn_arguments(prompt, timeout=timeout, on_message=on_message)
        turn = Turn(self, prompt, timeout=timeout)
        turn.housekeeping = True
        summary = await _consume(self, turn, on_message, timeout)
        if not summary.ok or not summary.text.strip():
            raise NoResultError(
                f"{self.engine_name} gave no hand-off summary; the session goes on unchanged",
                engine=self.engine_name,
            )
        before = summary.context.used if summary.context is not None else None
        previous = self.resume_id
        await self._start_fresh()
        self._handoff = (summary.text, previous, before)
        return summary

    def continue_trajectory(
        self, trajectory: TrajectorySource, *, digest: str | None = None
    ) -> str:
        """Continue work recorded as an ATIF trajectory (by this agent or any other): the next
        turn's prompt begins with a digest of it (:func:`agentrun.trajectory.trajectory_digest`
        unless ``digest`` is given) — the task, what was done, the files touched, what is open —
        as after :meth:`handoff`, and that turn shows a ``compaction`` message with
        ``trigger="handoff"`` whose ``previous_session_id`` is the trajectory's session. Returns
        the digest. Raises :class:`ConfigurationError` when ``trajectory`` is not an ATIF
        document, and :class:`TurnInProgressError` while a turn runs."""
        if self._active is not None:
            raise TurnInProgressError(
                f"turn {self._active.number} of this {self.engine_name} session is still running",
                engine=self.engine_name,
            )
        loaded = load_trajectory(trajectory)
        text = digest if digest is not None else trajectory_digest(loaded)
        self._handoff = (text, loaded.session_id, None)
        return text

    @contextmanager
    def _waiting_on_caller(self) -> Generator[None, None, None]:
        """While the running turn waits for the caller (a permission callback), no clock of the
        agent's quiet runs: the idle timeout and stall reports pause."""
        turn = self._active
        if turn is None:
            yield
            return
        turn._caller_waits += 1  # pyright: ignore[reportPrivateUsage]
        turn._refresh_deadline()  # pyright: ignore[reportPrivateUsage]
        try:
            yield
        finally:
            turn._caller_waits -= 1  # pyright: ignore[reportPrivateUsage]
            turn._quiet_since = anyio.current_time()  # pyright: ignore[reportPrivateUsage]
            turn._refresh_deadline()  # pyright: ignore[reportPrivateUsage]

    async def _ask_question(self, request: QuestionRequest) -> tuple[QuestionAnswer, list[Message]]:
        """The shared question flow (:func:`ask_question`) with the turn's quiet clocks paused
        while the caller answers."""
        with self._waiting_on_caller():
            return await ask_question(
                self.options.question_handler, request, engine=self.engine_name
            )

    async def _ask_permission(
        self, request: PermissionRequest, *, hitl: bool | None
    ) -> tuple[PermissionDecision, list[Message]]:
        """The shared permission flow (:func:`ask_permission`) with the turn's quiet clocks
        paused while the caller decides."""
        with self._waiting_on_caller():
            return await ask_permission(
                self.options.permission_handler, hitl, request, engine=self.engine_name
            )

    def _begin_turn(self, turn: Turn) -> int:
        if self._closed or not self._entered:
            state = "closed" if self._closed else "not started (use 'async with')"
            raise SessionTerminatedError(
                f"{self.engine_name} session is {state}", engine=self.engine_name
            )
        if self._active is not None:
            raise TurnInProgressError(
                f"turn {self._active.number} of this {self.engine_name} session is still running",
                engine=self.engine_name,
            )
        budget = self.options.budget
        if budget is not None:
            limit = budget.start_turn()
            if limit is not None:
                raise BudgetExceededError(
                    f"the session's budget allows no more turns ({limit} limit reached)",
                    limit=limit,
                    engine=self.engine_name,
                )
        self._turns += 1
        self._active = turn
        return self._turns

    def _end_turn(self, turn: Turn) -> None:
        if self._active is turn:
            self._active = None


class TurnContext:
    """What an engine's ``_run_turn`` gets: the prompt, the session, and ``emit``."""

    def __init__(self, turn: Turn) -> None:
        self._turn = turn

    @property
    def number(self) -> int:
        return self._turn.number

    @property
    def prompt(self) -> str:
        return self._turn.prompt

    @property
    def options(self) -> SessionOptions:
        return self._turn.session.options

    @property
    def compacting(self) -> bool:
        """True when this turn compacts the context (``Session.compact``) rather than
        prompts; engines that compact by command just send :attr:`prompt`."""
        return self._turn.compacting

    @property
    def cancelling(self) -> bool:
        """True once the turn is being cancelled by the caller or its consumer left."""
        return self._turn.cancelling

    def begin_cancel(self) -> None:
        """Call first thing on the engine's cancellation path: from then on :meth:`emit` never
        blocks (the consumer may be gone), dropping messages nobody waits for. The turn then
        has :attr:`Session.cancel_grace` seconds to end before the agent is stopped by force."""
        self._turn.nonblocking = True
        self._turn._start_watchdog()  # pyright: ignore[reportPrivateUsage]

    @property
    def has_result(self) -> bool:
        return self._turn.summary.has_result

    async def emit(self, message: Message) -> None:
        """Deliver one message of this turn (tagged with its number) to the consumer."""
        await self._turn.deliver(message)

    def emit_nowait(self, message: Message) -> bool:
        """Deliver ``message`` at once if that needs no waiting and nothing beyond handing it
        over (no policy, hand-off or observer work); False, and nothing done, otherwise: then
        :meth:`emit` it. Lets an engine's reader deliver without a task switch."""
        return self._turn.deliver_nowait(message)


@final
class Turn:
    """One prompt and everything the agent does until its result.

    An async context manager and an async iterator of :class:`Message`. ``summary`` is kept up to
    date as messages are consumed. Leaving the ``async with`` block before the turn finished
    cancels the turn in the agent.
    """

    def __init__(
        self,
        session: Session,
        prompt: str,
        *,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        tool_timeout: float | None = None,
        stall_after: float | None = None,
    ) -> None:
        check_turn_arguments(
            prompt,
            timeout=timeout,
            idle_timeout=idle_timeout,
            tool_timeout=tool_timeout,
            stall_after=stall_after,
        )
        self.session: Session = session
        self.prompt: str = prompt
        self.timeout: float | None = timeout
        self.idle_timeout: float | None = idle_timeout
        self.tool_timeout: float | None = tool_timeout
        self.stall_after: float | None = stall_after
        # What the agent's quiet means: the tool calls it has open, the caller's pending
        # answers, a retry delay it announced, what it said last and when.
        self._open_tools: dict[str, str | None] = {}
        self._caller_waits = 0
        self._quiet_since = 0.0
        self._quiet_extra = 0.0
        self._last_seen: Message | None = None
        self._stall_reported = False
        self._quiet_watch: anyio.CancelScope | None = None
        #: Whether anything reads the quiet clocks (an idle or tool timeout, stall reports):
        #: without, a message needs no note of when it came or what it was.
        #: (Decided when the turn starts.)
        self._watches_quiet = False
        #: Set on the first turn after a hand-off: (summary, previous id, fill before).
        self._handoff_from: tuple[str, str | None, int | None] | None = None
        #: The turn's number in its session (1, 2, ...), set when the turn starts.
        self.number: int = 0
        #: What the turn produced so far; complete once the iteration ended.
        self.summary: TurnSummary = TurnSummary()
        #: True once the turn is being cancelled (caller, timeout or close).
        self.cancelling: bool = False
        #: True once delivering must never block (the consumer may be gone).
        self.nonblocking: bool = False
        #: True when the session was closed while this turn ran.
        self.closed_by_session: bool = False
        #: True for a compaction (``Session.compact``) rather than a prompt.
        self.compacting: bool = False
        #: True for a turn the library runs to look after the context (a compaction, a
        #: hand-off summary): the context policy never acts on it.
        self.housekeeping: bool = False
        #: True when the cancel overran the grace and the agent was stopped by force.
        self.stopped_by_force: bool = False
        self._watchdog: anyio.CancelScope | None = None
        #: The budget limit that stopped this turn, if one did.
        self.stopped_by_budget: BudgetLimit | None = None
        self._deadline_from_budget = False
        self._spent_cost = 0.0
        self._spent_tokens = 0
        self._finished = anyio.Event()
        self._failure: AgentrunError | None = None
        self._done = False
        self._started_at = 0.0
        self._deadline = math.inf
        self._scope: anyio.CancelScope | None = None
        self._send: Sender[Message] | None = None
        self._recv: Receiver[Message] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None

    @property
    def done(self) -> bool:
        return self._done

    async def wait_done(self) -> None:
        """Wait until the turn's engine side has finished (its result or failure is known)."""
        await self._finished.wait()

    # -- context manager ---------------------------------------------------------------------

    async def __aenter__(self) -> Turn:
        self.number = self.session._begin_turn(self)  # pyright: ignore[reportPrivateUsage]
        self.summary.turn = self.number
        seed = self.session._handoff  # pyright: ignore[reportPrivateUsage]
        if seed is not None:
            self.session._handoff = None  # pyright: ignore[reportPrivateUsage]
            self._handoff_from = seed
            self.prompt = f"{HANDOFF_PREAMBLE}\n\n{seed[0]}\n\n---\n\n{self.prompt}"
        self._started_at = self._quiet_since = anyio.current_time()
        if OBSERVERS:
            for observer in OBSERVERS:
                observer.turn_started(self)
        if self.timeout is not None:
            self._deadline = self._started_at + self.timeout
        budget = self.session.options.budget
        remaining = None if budget is None else budget.remaining_wall_s()
        if remaining is not None and self._started_at + remaining < self._deadline:
            self._deadline = self._started_at + remaining
            self._deadline_from_budget = True
        self._send, self._recv = channel[Message](_BUFFER)
        self._scope = anyio.CancelScope()
        self._watches_quiet = (
            self.stall_after is not None
            or self.idle_timeout is not None
            or self.tool_timeout is not None
        )
        self._refresh_deadline()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        task_group.start_soon(self._drive)
        if self._watches_quiet:
            self._quiet_watch = anyio.CancelScope()
            task_group.start_soon(self._watch_quiet, self._quiet_watch)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if not self._done:
            self.nonblocking = True
            self.cancel()
        if self._recv is not None:
            self._recv.close()
        task_group, self._task_group = self._task_group, None
        try:
            if task_group is not None:
                # The driver never raises (it stores its failure for the iterator), so the
                # caller's own exception, if any, propagates as itself rather than wrapped in
                # an exception group.
                await task_group.__aexit__(None, None, None)
            return None
        finally:
            self.session._end_turn(self)  # pyright: ignore[reportPrivateUsage]

    def cancel(self) -> None:
        """Cancel the turn in the agent (the engine interrupts it) without raising here."""
        self.cancelling = True
        if self._scope is not None:
            self._scope.cancel()

    # -- iteration ---------------------------------------------------------------------------

    def __aiter__(self) -> Turn:
        return self

    async def __anext__(self) -> Message:
        if self._recv is None:
            raise RuntimeError("use 'async with session.turn(...)' before iterating")
        try:
            message = await receive_soon(self._recv)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            caller_error = self.session._caller_error  # pyright: ignore[reportPrivateUsage]
            if caller_error is not None:
                # The caller's own callback failed: that exception, as itself.
                self.session._caller_error = None  # pyright: ignore[reportPrivateUsage]
                self._failure = None
                raise caller_error from None
            if self._failure is not None:
                failure, self._failure = self._failure, None
                failure.__suppress_context__ = True  # keep __cause__, hide the EndOfStream
                raise failure  # noqa: B904
            raise StopAsyncIteration from None
        return message

    # -- the driver --------------------------------------------------------------------------

    async def _deliver_handoff_note(self, new_id: str | None) -> None:
        """The first turn after a hand-off says so once, after its ``init`` (or first)."""
        seed, self._handoff_from = self._handoff_from, None
        assert seed is not None
        _, previous, before = seed
        if new_id is None and self.session.resume_id != previous:
            new_id = self.session.resume_id
        self.session.handoffs.append((previous, new_id))
        note = Message.compaction(trigger="handoff", before_tokens=before, after=None)
        data = {**(note.data or {}), "previous_session_id": previous, "session_id": new_id}
        await self.deliver(note.model_copy(update={"data": data}))

    def _idle_limit(self) -> float | None:
        """How long the agent may now be quiet: no limit while the caller is deciding,
        ``tool_timeout`` while a tool call is open (when set), else ``idle_timeout``."""
        if self._caller_waits:
            return None
        if self._open_tools and self.tool_timeout is not None:
            return self.tool_timeout
        return self.idle_timeout

    def _refresh_deadline(self) -> None:
        scope = self._scope
        if scope is None:
            return
        deadline = self._deadline
        limit = self._idle_limit()
        if limit is not None:
            deadline = min(deadline, self._quiet_since + self._quiet_extra + limit)
        if deadline != scope.deadline:
            # Setting a deadline re-arms the scope's timer even when it did not move: once per
            # message without an idle limit, for nothing.
            scope.deadline = deadline

    def _heard(self, message: Message) -> None:
        """The agent said something: the quiet clocks restart, and what it said is noted."""
        if not self._watches_quiet:
            return
        kind = message.type
        if kind is MessageType.TOOL_USE or kind is MessageType.TOOL_RESULT:
            tool = message.tool
            if tool is not None and tool.id is not None:
                if kind is MessageType.TOOL_USE:
                    self._open_tools[tool.id] = tool.name
                else:
                    self._open_tools.pop(tool.id, None)
        self._last_seen = message
        self._quiet_since = anyio.current_time()
        self._stall_reported = False
        delay = (message.data or {}).get("delay_s") if kind is MessageType.RETRY else None
        # The agent announced how long it will wait before retrying: quiet that long is no stall.
        self._quiet_extra = float(delay) if isinstance(delay, (int, float)) else 0.0
        self._refresh_deadline()

    def _stall_delay(self) -> float | None:
        if self._caller_waits:
            return None
        if self.stall_after is not None:
            return self.stall_after
        limit = self._idle_limit()
        return None if limit is None else limit / 2

    async def _watch_quiet(self, scope: anyio.CancelScope) -> None:
        """Report a ``stall`` once per quiet spell, before the idle timeout acts."""
        with scope:
            while not self._done:
                delay = self._stall_delay()
                if delay is None or self._stall_reported:
                    await anyio.sleep(_QUIET_POLL)
                    continue
                due = self._quiet_since + self._quiet_extra + delay
                now = anyio.current_time()
                if now < due:
                    await anyio.sleep(due - now)
                    continue
                self._stall_reported = True
                await self.deliver(self._stall_message(now))

    def _stall_message(self, now: float) -> Message:
        limit = self._idle_limit()
        open_tools = [{"id": k, "name": v} for k, v in self._open_tools.items()]
        if open_tools:
            waiting_for = "tool"
        elif self._quiet_extra:
            waiting_for = "retry"
        else:
            waiting_for = "agent"
        data: dict[str, Any] = {
            "quiet_s": round(now - self._quiet_since, 3),
            "waiting_for": waiting_for,
            "open_tools": open_tools,
        }
        if limit is not None:
            acts_at = min(self._deadline, self._quiet_since + self._quiet_extra + limit)
            data["acts_in_s"] = round(max(acts_at - now, 0.0), 3)
        last = self._last_seen
        if last is not None:
            seen: dict[str, Any] = {"type": str(last.type)}
            if last.subtype:
                seen["subtype"] = last.subtype
            if last.tool is not None and last.tool.name:
                seen["tool"] = last.tool.name
            data["last_seen"] = seen
        quiet = f"{data['quiet_s']:g}s"
        names = ", ".join(str(t["name"] or t["id"]) for t in open_tools)
        what = f"while {names} runs" if open_tools else f"waiting for the {waiting_for}"
        return Message(
            type=MessageType.STALL,
            text=f"{self.session.engine_name} has been quiet for {quiet} ({what})",
            data=data,
        )

    def deliver_nowait(self, message: Message) -> bool:
        """:meth:`deliver` for a message that needs nothing but handing over, when the consumer
        has room (see :meth:`TurnContext.emit_nowait`). A reading's context thresholds are
        applied here too; a budget, a hand-off note or an observer needs :meth:`deliver`."""
        send = self._send
        kind = message.type
        if (
            send is None
            or OBSERVERS
            or self.cancelling
            or self.nonblocking
            or self._handoff_from is not None
            or kind is MessageType.RESULT
            or kind is MessageType.STALL
            or send.buffered >= _BUFFER
        ):
            return False
        notes: list[Message] = []
        if kind is MessageType.CONTEXT_WINDOW or message.usage is not None:
            session = self.session
            if session.options.budget is not None:
                return False  # the budget may stop the turn
            gauge = session._context_gauge  # pyright: ignore[reportPrivateUsage]
            if gauge is not None and kind is MessageType.CONTEXT_WINDOW:
                if send.buffered + len(gauge.policy.thresholds) >= _BUFFER:
                    return False  # no room for the notes it may set off
                notes = self._threshold_notes(message)
        self._hand_over(send, message)
        for note in notes:
            self._hand_over(send, note)
        return True

    def _hand_over(self, send: Sender[Message], message: Message) -> None:
        message = message.in_turn(self.number)
        self.summary.add(message)
        if self.nonblocking:
            return
        try:
            send.send_nowait(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.nonblocking = True  # the consumer is gone
            return
        self._heard(message)

    def _threshold_notes(self, message: Message) -> list[Message]:
        """The ``context_threshold`` messages a main-thread reading sets off."""
        gauge = self.session._context_gauge  # pyright: ignore[reportPrivateUsage]
        if gauge is None or message.parent_tool_use_id is not None or message.context is None:
            return []
        return gauge.observe(message.context)

    async def deliver(self, message: Message) -> None:
        # The first turn after a hand-off says so once the new agent session's id is known,
        # and before its result at the latest.
        if (
            self._handoff_from is not None
            and message.type is not MessageType.INIT
            and (message.resume_id is not None or message.type is MessageType.RESULT)
        ):
            await self._deliver_handoff_note(message.resume_id)
        message = message.in_turn(self.number)
        self.summary.add(message)
        if OBSERVERS:
            for observer in OBSERVERS:
                observer.message(self, message)
        send = self._send
        if send is None:
            return
        if self.cancelling or self.nonblocking:
            # Never block while cancelling: the consumer may be gone.
            with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.send_nowait(message)
            return
        try:
            await send_soon(send, message)  # waits only when the consumer is behind
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.nonblocking = True  # the consumer is gone
            return
        if message.type is not MessageType.STALL:
            self._heard(message)
        if message.type is MessageType.INIT and self._handoff_from is not None:
            new_id = message.resume_id or (message.init.session_id if message.init else None)
            if new_id is not None:
                await self._deliver_handoff_note(new_id)
        if (message.type is MessageType.CONTEXT_WINDOW or message.usage is not None) and (
            self._has_policies()
        ):
            await self._apply_policies(message)

    def _has_policies(self) -> bool:
        """A context policy or a budget looks at readings and usage."""
        session = self.session
        return (
            session._context_gauge is not None  # pyright: ignore[reportPrivateUsage]
            or session.options.budget is not None
        )

    async def _apply_policies(self, message: Message) -> None:
        """Context thresholds and the budget, on a message that carries usage or a reading."""
        if message.type is MessageType.CONTEXT_WINDOW:
            for note in self._threshold_notes(message):
                await self.deliver(note)
            return
        budget = self.session.options.budget
        usage = message.usage
        if budget is None or usage is None or message.type is MessageType.RESULT:
            return
        # Per-call usage reported during the turn: the turn's spending so far.
        self._spent_cost += usage.cost_usd or 0.0
        self._spent_tokens += tokens_of(usage)
        limit = budget.limit_reached(self._spent_cost, self._spent_tokens)
        if limit in ("cost", "tokens") and self.stopped_by_budget is None and not self._done:
            self.stopped_by_budget = limit
            if self._scope is not None:
                self._scope.cancel()  # the engine interrupts the agent

    def _start_watchdog(self) -> None:
        """The engine's cancellation path began: start the watchdog that bounds it (once)."""
        if self._watchdog is None and self._task_group is not None and not self._done:
            self._watchdog = anyio.CancelScope()
            self._task_group.start_soon(self._watch_cancel, self._watchdog)

    async def _watch_cancel(self, scope: anyio.CancelScope) -> None:
        """Give the engine ``cancel_grace`` seconds to end the cancelled turn, then stop the
        agent."""
        with scope:
            with anyio.move_on_after(self.session.cancel_grace):
                await self._finished.wait()
            if not self._done:
                self.stopped_by_force = True
                self.session._force_stop()  # pyright: ignore[reportPrivateUsage]

    async def _drive(self) -> None:
        assert self._scope is not None
        assert self._send is not None
        session = self.session
        ctx = TurnContext(self)
        failure: AgentrunError | None = None
        completed = False
        try:
            with self._scope:
                try:
                    await session._run_turn(ctx)  # pyright: ignore[reportPrivateUsage]
                    completed = True
                except AgentrunError as exc:
                    failure = exc
                except Exception as exc:
                    # An engine bug: surface it typed, from the iterator, not as a task-group
                    # ExceptionGroup.
                    failure = AgentrunError(
                        f"{session.engine_name} engine failed: {exc!r}", engine=session.engine_name
                    )
                    failure.__cause__ = exc
            timed_out = self._scope.cancel_called and not self.cancelling and not completed
            budget = session.options.budget
            if budget is not None:
                usage = self.summary.usage
                if usage is not None and self.summary.has_result:
                    budget.spend(usage)
                else:
                    budget.spend_partial(self._spent_cost, self._spent_tokens)
                wall_spent = anyio.current_time() >= self._deadline - 1e-3
                if timed_out and self._deadline_from_budget and wall_spent:
                    self.stopped_by_budget = self.stopped_by_budget or "wall"
            if self.stopped_by_budget is not None and not self.closed_by_session:
                self.summary.stop_reason = "budget"
                self.summary.ok = False
                failure = None
                assert budget is not None
                if budget.raise_on_exceed:
                    failure = BudgetExceededError(
                        f"{session.engine_name} turn {self.number} reached the session budget's "
                        f"{self.stopped_by_budget} limit and was stopped",
                        limit=self.stopped_by_budget,
                        engine=session.engine_name,
                    )
            elif self.closed_by_session:
                failure = SessionClosedError(
                    f"the {session.engine_name} session was closed during turn {self.number}",
                    engine=session.engine_name,
                )
            elif timed_out:
                # A timeout explains whatever the engine's cancellation path ran into.
                failure = self._timeout_error()
            elif failure is None and not self.summary.has_result and not self.cancelling:
                failure = NoResultError(
                    f"{session.engine_name} turn {self.number} ended without a result",
                    engine=session.engine_name,
                )
            if failure is not None:
                code = failure_code(failure)
                with anyio.CancelScope(shield=True):
                    await self.deliver(
                        Message.error_message(failure.message, code=code, fatal=True)
                    )
                failure.summary = self.summary
                self._failure = failure
        finally:
            if self._handoff_from is not None:
                # The turn ended without a result: the link is still kept.
                previous = self._handoff_from[1]
                current = session.resume_id
                session.handoffs.append((previous, current if current != previous else None))
                self._handoff_from = None
            self.summary.duration_s = round(anyio.current_time() - self._started_at, 6)
            if OBSERVERS:
                for observer in OBSERVERS:
                    observer.turn_ended(self, self._failure)
            self._done = True
            self._finished.set()
            self._send.close()
            if self._watchdog is not None:
                self._watchdog.cancel()
            if self._quiet_watch is not None:
                self._quiet_watch.cancel()

    def _take_failure(self) -> AgentrunError | None:
        """The error that ended the turn, if not raised yet (the iterator will not raise it)."""
        failure, self._failure = self._failure, None
        return failure

    def _timeout_error(self) -> TurnTimeoutError:
        now = anyio.current_time()
        engine = self.session.engine_name
        if self.timeout is not None and now >= self._deadline - 1e-3:
            return TurnTimeoutError(
                f"{engine} turn {self.number} exceeded its timeout of {self.timeout:g}s "
                "and was cancelled",
                kind="total",
                seconds=self.timeout,
                engine=engine,
            )
        limit = self._idle_limit()
        seconds = limit if limit is not None else math.nan
        if self._open_tools and self.tool_timeout is not None:
            names = ", ".join(str(n or i) for i, n in self._open_tools.items())
            why = f"tool timeout, while {names} ran"
        else:
            why = "idle timeout"
        return TurnTimeoutError(
            f"{engine} turn {self.number} was silent for {seconds:g}s ({why}) and was cancelled",
            kind="idle",
            seconds=seconds,
            engine=engine,
        )


def check_turn_arguments(
    prompt: object,
    *,
    timeout: object = None,
    idle_timeout: object = None,
    tool_timeout: object = None,
    stall_after: object = None,
    on_message: object = None,
) -> None:
    """Validate a turn's arguments at the API boundary: a clear :class:`ConfigurationError`
    naming the argument, never an internal ``TypeError`` from deep inside an engine."""
    if not isinstance(prompt, str):
        raise ConfigurationError(
            f"prompt must be a str, got {type(prompt).__name__}", option="prompt"
        )
    if not prompt.strip():
        raise ConfigurationError("prompt is empty", option="prompt")
    if "\0" in prompt:
        raise ConfigurationError("prompt contains a NUL character", option="prompt")
    for name, value in (
        ("timeout", timeout),
        ("idle_timeout", idle_timeout),
        ("tool_timeout", tool_timeout),
        ("stall_after", stall_after),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigurationError(
                f"{name} must be a number of seconds, got {type(value).__name__}", option=name
            )
        if not (value > 0 and math.isfinite(value)):
            raise ConfigurationError(
                f"{name} must be a positive number of seconds, got {value!r}", option=name
            )
    if on_message is not None and not callable(on_message):
        raise ConfigurationError("on_message must be callable", option="on_message")


def single_error(exc: BaseException) -> BaseException:
    """The one exception inside nested exception groups of one, else ``exc`` itself: what a
    public context manager raises, so ``except ProcessExitError`` works as documented (a real
    multi-error group stays a group)."""
    while True:
        members: object = getattr(exc, "exceptions", None)
        if not isinstance(members, tuple):
            return exc
        group = cast("tuple[object, ...]", members)
        if len(group) != 1 or not isinstance(group[0], BaseException):
            return exc
        exc = group[0]


def failure_code(failure: AgentrunError) -> str:
    if isinstance(failure, TurnTimeoutError):
        return "timeout" if failure.kind == "total" else "idle_timeout"
    if isinstance(failure, NoResultError):
        return "no_result"
    if isinstance(failure, SessionLostError):
        return "session_lost"
    if isinstance(failure, SessionClosedError):
        return "session_closed"
    if isinstance(failure, SessionTerminatedError):
        return "process_exit"
    return failure.error_code


async def run_turn(
    session: Session,
    prompt: str,
    *,
    on_message: MessageCallback | None = None,
    timeout: float | None = None,
    idle_timeout: float | None = None,
    tool_timeout: float | None = None,
    stall_after: float | None = None,
) -> TurnSummary:
    """Run one turn to its end and return its :class:`TurnSummary`.

    Works the same for every engine and for the first and every later turn. Bad arguments raise
    :class:`ConfigurationError` before anything is sent.

    ``timeout`` bounds the whole turn. ``idle_timeout`` bounds how long the agent may be quiet;
    while one of its tool calls is open ``tool_timeout`` applies instead (when given), while the
    permission callback decides no quiet clock runs, and a retry delay the agent announces is
    added. A ``stall`` message reports a quiet spell (once) after ``stall_after`` seconds,
    by default halfway to the idle limit in force. ``on_message``
    (sync or async) sees every message as it arrives; if it raises, the turn is cancelled in the
    agent and the exception propagates. Failures that end the turn raise (see
    :class:`TurnError`, :class:`ProcessExitError`) with the partial summary attached.
    """
    if not isinstance(session, Session):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigurationError(
            f"session must be a Session (from engine.start(...)), got {type(session).__name__}",
            option="session",
        )
    check_turn_arguments(
        prompt,
        timeout=timeout,
        idle_timeout=idle_timeout,
        tool_timeout=tool_timeout,
        stall_after=stall_after,
        on_message=on_message,
    )
    turn = session.turn(
        prompt,
        timeout=timeout,
        idle_timeout=idle_timeout,
        tool_timeout=tool_timeout,
        stall_after=stall_after,
    )
    return await _consume(session, turn, on_message, timeout)


async def _consume(
    session: Session, turn: Turn, on_message: MessageCallback | None, timeout: float | None
) -> TurnSummary:
    """Run ``turn`` to its end, feeding ``on_message``; its summary, or its error. A prompt
    turn that leaves the context past the policy's ``compact_at`` is followed by a compaction
    when the policy says so."""
    summary = await _consume_one(session, turn, on_message, timeout)
    policy = session.options.context_policy
    context = summary.context
    if (
        policy is None
        or policy.action == "notify"
        or turn.housekeeping
        or not summary.ok
        or context is None
        or context.fraction is None
        or context.fraction < policy.compact_at
    ):
        return summary
    order = ("compact", "handoff") if policy.action == "compact" else ("handoff", "compact")
    for action in order:
        if action == "compact" and session.can_compact:
            act = session.compact
        elif action == "handoff" and session.can_handoff:
            act = session.handoff
        else:
            continue
        try:
            await act(timeout=policy.compact_timeout, on_message=on_message)
        except AgentrunError as exc:
            # The turn's own result stands; the failed action is recorded with it.
            note = Message.error_message(
                f"automatic {action} failed: {exc.message}", code="compaction"
            ).in_turn(summary.turn or 0)
            summary.add(note)
            if on_message is not None:
                outcome = on_message(note)
                if inspect.isawaitable(outcome):
                    await outcome
        break
    return summary


async def _consume_one(
    session: Session, turn: Turn, on_message: MessageCallback | None, timeout: float | None
) -> TurnSummary:
    async with turn:
        # A slow async callback cannot stretch the call past ``timeout + cancel_grace`` either.
        with anyio.CancelScope() as bound:
            if timeout is not None:
                bound.deadline = anyio.current_time() + timeout + session.cancel_grace
            async for message in turn:
                if on_message is not None:
                    outcome = on_message(message)
                    if outcome is not None and inspect.isawaitable(outcome):
                        await outcome
        if bound.cancelled_caught:
            turn.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(session.cancel_grace):
                await turn.wait_done()
            failure = (
                turn._take_failure()  # pyright: ignore[reportPrivateUsage]
                or turn._timeout_error()  # pyright: ignore[reportPrivateUsage]
            )
            failure.summary = turn.summary
            raise failure
        return turn.summary
