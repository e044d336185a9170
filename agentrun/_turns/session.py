"""Sessions: the one turn model every engine plugs into.

A :class:`Session` is an async context manager that holds the engine's driver
(:class:`~.driver.EngineDriver`), which runs the agent (a long-lived program, a JSON-RPC
connection, or nothing until the first turn for spawn-per-turn agents). Every prompt, the first
included, goes through a turn::

    async with engine.start(SessionOptions(cwd=".")) as session:
        summary = await run_turn(session, "fix the failing test")
        async with session.turn("now explain it") as turn:
            async for message in turn:
                ...
            print(turn.summary.text)

Writing an engine means writing a driver (:mod:`.driver`): one coroutine,
:meth:`EngineDriver.run_turn`. Everything else is done by the session and the turn
(:mod:`.turn`): turns run one at a time, every message is tagged with its turn number and
nothing a cancelled turn emits late reaches the next; a cancel is bounded by
:attr:`Session.cancel_grace`, after which the agent is stopped by force
(:meth:`EngineDriver.force_stop`). The session is the driver's :class:`~.driver.DriverHost`
and the turn's :class:`~.turn.TurnHost`.

Imports the vocabulary, the wire's sandbox check, and the sibling modules :mod:`.boundary`,
:mod:`.driver`, :mod:`.handoff`, :mod:`.journaling`, :mod:`.observe`, :mod:`.turn_policy` and
:mod:`.turn`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from contextlib import AsyncExitStack, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, final

import anyio
import anyio.abc

from .._vocabulary.errors import (
    CompactionNotSupportedError,
    JournalError,
    NoResultError,
    SessionTerminatedError,
    TurnInProgressError,
)
from .._vocabulary.limits import TurnLimits, merged_limits
from .._vocabulary.messages import Message, Usage
from .._vocabulary.options import SessionOptions
from .._vocabulary.permissions import PermissionDecision, PermissionRequest, ask_permission
from .._vocabulary.questions import QuestionAnswer, QuestionRequest, ask_question
from .._vocabulary.summary import SessionTotals, TurnSummary, WindDown
from .._wire.sandbox import check_sandbox
from .boundary import check_turn_arguments, single_error
from .driver import CANCEL_GRACE, EngineDriver
from .handoff import HANDOFF_PROMPT, HandoffSeed
from .journaling import JournalObserver, journal_observer
from .observe import OBSERVERS, Observer, spawn_env
from .turn import MessageCallback, Turn, TurnContext
from .turn_policy import TurnPolicy, session_policy

if TYPE_CHECKING:
    from .._store.trajectory.load import TrajectorySource
    from .output import OutputSpec, OutputType

__all__ = ["CANCEL_GRACE", "CLOSE_TURN_GRACE", "Session", "WireTap"]

#: ``tap(direction, line)``: every raw line an engine reads (``"recv"``), writes (``"send"``) or
#: sees on the agent's stderr (``"stderr"``), without the trailing newline.
WireTap = Callable[[str, bytes], None]

#: Seconds ``Session.aclose()`` lets a running turn interrupt its agent before stopping it.
CLOSE_TURN_GRACE = 10.0


@final
class Session:
    """One agent session. Use as an async context manager; see the module docstring.

    Made by an engine (``engine.start(options)``) around the engine's driver."""

    def __init__(self, driver: EngineDriver) -> None:
        self._driver = driver
        driver.host = self
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
        #: The next turn's seed after a hand-off.
        self._handoff: HandoffSeed | None = None
        #: The context thresholds and the budget, behind one hook the turns call.
        self._turn_policy: TurnPolicy | None = session_policy(self.options)
        #: The session's journal (``SessionOptions.journal``), or ``None``.
        self.journal: JournalObserver | None = journal_observer(self.options.journal)
        #: This session's own observers (its journal), told after the registered ones.
        self.observers: tuple[Observer, ...] = () if self.journal is None else (self.journal,)
        self._usage: Usage | None = None
        self._side_usage: Usage | None = None
        #: Runs of consecutive unaccounted turn numbers: flat for a session every turn of
        #: which is unaccounted (an agent that reports only its last call).
        self._unaccounted: list[range] = []
        self._totals = SessionTotals()

    # -- the driver and what it runs with ----------------------------------------------------

    @property
    def driver(self) -> EngineDriver:
        """The engine's driver, which runs the agent (its engine-specific extras live there)."""
        return self._driver

    @property
    def engine_name(self) -> str:
        """The engine name, for messages and errors."""
        return self._driver.engine_name

    @property
    def options(self) -> SessionOptions:
        """What this session runs with (model, cwd, permissions, ...), validated and
        immutable."""
        return self._driver.options

    @property
    def resume_id(self) -> str | None:
        """The latest id that resumes this session (``SessionOptions(resume_id=...)``), once
        known."""
        return self._driver.resume_id

    @property
    def cancel_grace(self) -> float:
        """Seconds the engine may take to end a cancelled turn (a timeout, the caller's cancel)
        once its cancellation path began; then the agent is stopped by force and the session
        may be over. ``run_turn``'s wall time is at most about ``timeout + cancel_grace``."""
        return self._driver.cancel_grace

    @cancel_grace.setter
    def cancel_grace(self, seconds: float) -> None:
        self._driver.cancel_grace = seconds

    @property
    def native_output(self) -> bool:
        """True when the engine gives a turn's output schema (``output=``) to the agent its own
        way; otherwise the schema goes with the prompt."""
        return self._driver.native_output

    @property
    def active_turn(self) -> Turn | None:
        """The running turn, if any."""
        return self._active

    # -- the driver's host (DriverHost) ------------------------------------------------------

    @property
    def tapping(self) -> bool:
        """Whether a wire tap is set."""
        return self.wire_tap is not None

    def tap(self, direction: str, line: bytes) -> None:
        """The driver shows every raw line it reads or writes here.

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

    def spawn_env(self, env: Mapping[str, str]) -> Mapping[str, str]:
        """``env`` with what the observers add for a program the driver spawns now."""
        return spawn_env(self, env)

    # -- what a turn asks of its session (TurnHost) ------------------------------------------

    @property
    def turn_policy(self) -> TurnPolicy | None:
        """The context thresholds and the budget, behind one hook the turns call."""
        return self._turn_policy

    def take_handoff_seed(self) -> HandoffSeed | None:
        """The summary the next turn begins with after a hand-off (once)."""
        seed, self._handoff = self._handoff, None
        return seed

    def take_caller_error(self) -> Exception | None:
        """The exception the caller's wire tap raised, if any (once)."""
        error, self._caller_error = self._caller_error, None
        return error

    async def run_turn(self, ctx: TurnContext) -> None:
        """Run ``ctx``'s turn in the agent (the driver's ``run_turn``)."""
        await self._driver.run_turn(ctx)

    async def steer(self, ctx: TurnContext, text: str) -> None:
        """Add ``text`` to the running turn in the agent (:meth:`Turn.steer` calls this)."""
        await self._driver.steer(ctx, text)

    def force_stop(self) -> None:
        """Stop the agent at once: a cancelled turn overran :attr:`cancel_grace`."""
        self._driver.force_stop()

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def journal_id(self) -> str | None:
        """The id of this session's journal (``agentrun sessions show ID``), when it keeps one
        (``SessionOptions(journal=...)``)."""
        return None if self.journal is None else self.journal.journal_id

    @property
    def turns(self) -> int:
        """How many turns were started."""
        return self._turns

    @property
    def usage(self) -> Usage | None:
        """What this session's turns used so far: the sum of every ended turn's
        ``TurnSummary.usage`` (tokens and cost; the turns the library runs to compact or hand
        off included), its sources the weakest of the parts', its context fields the latest
        reading. ``None`` until a turn reported usage. A turn whose tokens nobody knows (a
        cancelled turn the agent reported nothing for, ``usage_source`` ``unavailable``) adds
        nothing, and one that reported only its last model call (``last_call``) adds that
        call: both are in :attr:`unaccounted_turns`. Calls beside the turns' main loops are
        :attr:`side_usage`, never in here."""
        return self._usage

    @property
    def side_usage(self) -> Usage | None:
        """The sum of the turns' ``TurnSummary.side_usage`` (session titles, prompt
        suggestions, subagents), where the agent reports them; ``None`` otherwise."""
        return self._side_usage

    @property
    def unaccounted_turns(self) -> tuple[int, ...]:
        """The numbers of the ended turns whose tokens :attr:`usage` does not hold in full:
        no usage reported, ``usage_source`` ``unavailable`` or ``last_call``, or only figures
        without their split (Gemini CLI's ``whole_prompt_tokens`` and ``answer_tokens``)."""
        return tuple(number for run in self._unaccounted for number in run)

    @property
    def totals(self) -> SessionTotals:
        """What the whole session used and cost: its turns in this process (:attr:`usage`,
        :attr:`side_usage`) and, when it goes on with a journal (``agentrun sessions resume``,
        a store with a ``journal_id``), the turns journaled by the processes before. Its
        ``cost_usd`` is ``None`` once a turn's cost is not known. See :class:`SessionTotals`."""
        return self._totals

    def account_turn(self, number: int, summary: TurnSummary) -> None:
        """Add an ended turn's usage to the session's totals (once per turn)."""
        usage = summary.usage
        source = None if usage is None else usage.usage_source
        known = usage is not None and (
            usage.input_tokens is not None or usage.output_tokens is not None
        )
        if not known or source in ("unavailable", "last_call"):
            runs = self._unaccounted
            if runs and runs[-1].stop == number:
                runs[-1] = range(runs[-1].start, number + 1)
            else:
                runs.append(range(number, number + 1))
        self._totals = self._totals.with_turn(usage, summary.side_usage)
        if usage is not None:
            self._usage = usage if self._usage is None else self._usage + usage
        side = summary.side_usage
        if side is not None:
            self._side_usage = side if self._side_usage is None else self._side_usage + side

    async def __aenter__(self) -> Session:
        if self._entered:
            raise RuntimeError("a Session can be entered only once")
        self._entered = True
        stack = AsyncExitStack()
        if OBSERVERS or self.observers:
            try:
                for observer in (*OBSERVERS, *self.observers):
                    observer.session_started(self)
                if self.journal is not None:
                    # A session that goes on with its journal goes on with its totals.
                    self._totals = self.journal.earlier_totals
            except BaseException:
                # The journal cannot be written (or is in use): nothing started; the observers
                # told of the start are told of the end.
                self._closed = True
                self._observed_close()
                raise
        try:
            self._task_group = await stack.enter_async_context(anyio.create_task_group())
            if self.options.sandbox is not None:
                # At start on every engine, also those that start their program per turn.
                await check_sandbox(
                    self.options.sandbox,
                    self.options.cwd,
                    self.options.env,
                    engine=self.engine_name,
                )
            await self._driver.start(self._task_group)
        except BaseException as exc:
            self._closed = True
            with anyio.CancelScope(shield=True):
                await self._driver.shutdown()
            self._observed_close()
            if self._task_group is not None:
                self._task_group.cancel_scope.cancel()
            try:
                await stack.aclose()
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
        journal_failure: JournalError | None = None
        try:
            await self.aclose()
        except JournalError as failure:
            # Raised once the session is over, and only when no other exception is on its way.
            journal_failure = failure
        stack, self._stack = self._stack, None
        if stack is None:
            if journal_failure is not None and exc is None:
                raise journal_failure
            return None
        if self._task_group is not None:
            # The block is over: what is still running in the background is cancelled (this
            # scope encloses the block, so it is never cancelled while the caller's code runs).
            self._task_group.cancel_scope.cancel()
        try:
            # The caller's own exception is not handed to the task group: it propagates
            # unchanged once the background tasks have ended.
            await stack.aclose()
        except BaseException as group:
            # A background task's error leaves the task group in an exception group: the
            # caller gets the one error itself.
            raise single_error(group) from None
        if journal_failure is not None and exc is None:
            raise journal_failure
        return None

    async def aclose(self) -> None:
        """End the session: stop the agent program (bounded).

        Idempotent, and callable from any task, the one iterating a turn included: a running
        turn is cancelled in the agent first (bounded by ``CLOSE_TURN_GRACE``) and ends with
        :class:`SessionClosedError`. The caller's code after ``aclose()`` runs normally: the
        session's background tasks end with the program, and whatever is left is cancelled
        when the ``async with`` block exits. A journal that ended early (its store failed) is
        a :class:`JournalError` here, once the session is over."""
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
            await self._driver.shutdown()
        self._observed_close()
        journal = self.journal
        if journal is not None:
            # The journal ended early (its store failed): the turns went on, the close says so.
            failure = journal.take_error()
            if failure is not None:
                raise failure

    def _observed_close(self) -> None:
        if OBSERVERS or self.observers:
            for observer in (*OBSERVERS, *self.observers):
                observer.session_closed(self)

    # -- turns -------------------------------------------------------------------------------

    def turn(
        self,
        prompt: str,
        *,
        timeout: float | None = None,
        idle_timeout: float | None = None,
        tool_timeout: float | None = None,
        stall_after: float | None = None,
        output: OutputType | OutputSpec | None = None,
        wind_down: float | WindDown | None = None,
        limits: TurnLimits | None = None,
    ) -> Turn:
        """A turn for ``prompt``: ``async with session.turn(p) as t: async for m in t: ...``.
        See :func:`run_turn` for the arguments (``limits=`` or the same names as keywords).
        With ``output=``, ``turn.summary.output`` holds the validated answer once the iteration
        ended, or the iteration's end raises :class:`OutputValidationError` (the streaming form
        makes no repair turn). With ``wind_down=``, ``wind_down`` seconds before ``timeout``
        the agent is told to wrap up."""
        limits = merged_limits(
            limits,
            timeout=timeout,
            idle_timeout=idle_timeout,
            tool_timeout=tool_timeout,
            stall_after=stall_after,
            wind_down=wind_down,
        )
        spec = None
        if output is not None:
            from .output import output_spec  # structured output loads on first use

            spec = output_spec(output)
        return Turn(self, prompt, limits=limits, output=spec)

    def _housekeeping_turn(self, prompt: str, *, timeout: float | None, compacting: bool) -> Turn:
        """A turn the library runs to look after the context (the context policy never acts
        on it): a compaction, or a hand-off summary."""
        turn = Turn(self, prompt, limits=merged_limits(None, timeout=timeout))
        turn.housekeeping = True
        turn.compacting = compacting
        return turn

    def begin_turn(self, turn: Turn) -> int:
        """Admit ``turn`` as the running one (raise when it may not run); its number."""
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
        if self._turn_policy is not None:
            self._turn_policy.admit(self.engine_name)
        self._turns += 1
        self._active = turn
        return self._turns

    def end_turn(self, turn: Turn) -> None:
        """``turn`` is over (its ``async with`` block was left)."""
        if self._active is turn:
            self._active = None

    # -- steering ----------------------------------------------------------------------------

    @property
    def can_steer(self) -> bool:
        """Whether a running turn takes more input from the user (:meth:`Turn.steer`)."""
        return self._driver.can_steer

    # -- compaction and hand-off -------------------------------------------------------------

    @property
    def can_compact(self) -> bool:
        """Whether the agent offers a way to compact its context (detected from the agent,
        never guessed): Claude Code's ``/compact``, Codex app-server's ``thread/compact/start``,
        an ACP agent that advertises a ``compact`` command."""
        return self._driver.can_compact

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
        prompt = self._driver.compact_prompt
        check_turn_arguments(prompt, timeout=timeout, on_message=on_message)
        turn = self._housekeeping_turn(prompt, timeout=timeout, compacting=True)
        return await turn.run_to_end(on_message)

    @property
    def can_handoff(self) -> bool:
        """Whether the session can continue in a fresh agent-side session (a new thread or
        session of the same agent) seeded with a summary: :meth:`handoff`."""
        return self._driver.can_handoff

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
        engine = self.engine_name
        if not self.can_handoff:
            raise CompactionNotSupportedError(
                f"{engine} cannot hand off to a fresh session", engine=engine
            )
        check_turn_arguments(prompt, timeout=timeout, on_message=on_message)
        turn = self._housekeeping_turn(prompt, timeout=timeout, compacting=False)
        summary = await turn.run_to_end(on_message)
        if not summary.ok or not summary.text.strip():
            raise NoResultError(
                f"{engine} gave no hand-off summary; the session goes on unchanged", engine=engine
            )
        before = summary.context.used if summary.context is not None else None
        previous = self.resume_id
        await self._driver.start_fresh()
        self._handoff = HandoffSeed(summary.text, previous, before)
        return summary

    # -- the caller's answers ----------------------------------------------------------------

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
        # The ATIF models load here, on first use: a program that only drives agents never
        # pays for them.
        from .._store.trajectory.digest import trajectory_digest
        from .._store.trajectory.load import load_trajectory

        loaded = load_trajectory(trajectory)
        text = digest if digest is not None else trajectory_digest(loaded)
        self._handoff = HandoffSeed(text, loaded.session_id, None)
        return text

    @contextmanager
    def _waiting_on_caller(self) -> Generator[None, None, None]:
        """While the running turn waits for the caller (a permission callback), no clock of the
        agent's quiet runs: the idle timeout and stall reports pause."""
        turn = self._active
        if turn is None:
            yield
            return
        with turn.clocks.caller_deciding():
            yield

    async def ask_question(self, request: QuestionRequest) -> tuple[QuestionAnswer, list[Message]]:
        """The shared question flow (:func:`ask_question`) with the turn's quiet clocks paused
        while the caller answers."""
        with self._waiting_on_caller():
            return await ask_question(
                self.options.question_handler, request, engine=self.engine_name
            )

    async def ask_permission(
        self, request: PermissionRequest, *, hitl: bool | None
    ) -> tuple[PermissionDecision, list[Message]]:
        """The shared permission flow (:func:`ask_permission`) with the turn's quiet clocks
        paused while the caller decides."""
        with self._waiting_on_caller():
            return await ask_permission(
                self.options.permission_handler, hitl, request, engine=self.engine_name
            )
