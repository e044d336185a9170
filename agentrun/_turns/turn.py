"""A turn: one prompt and everything the agent does until its result.

:class:`Turn` runs the engine driver's ``run_turn`` in a task of its own (``_drive``) and
delivers what it emits, tagged with the turn's number, to the one consumer (the ``async for``);
its :class:`~agentrun.TurnSummary` is kept up to date on the way. Around that task it keeps:

* the deadline and the quiet clocks (:class:`~.quiet.TurnClocks`): a timeout cancels the
  task, which cancels the turn in the agent;
* the cancel bound: once the engine's cancellation path began (:meth:`TurnContext.begin_cancel`)
  it has :attr:`Session.cancel_grace` seconds to end the turn, then the agent is stopped by
  force (:meth:`TurnHost.force_stop`);
* the session's policy (:class:`~.policies.TurnPolicy`), told of every delivered message;
* the hand-off note of the first turn after a hand-off;
* the wind-down (``wind_down``): that many seconds before the deadline the agent is steered
  with a wrap-up instruction (a ``system`` ``wind_down`` message says so, or says that the
  engine takes no input during a turn), recorded in ``summary.wound_down``.

When the driver is done, :func:`~.ending.turn_ending` decides which failure ended the turn.

:class:`TurnContext` is what an engine's driver sees of it; :class:`TurnHost` is what it asks of
its session (public names only; the session implements it). Imports the vocabulary, the wire's
framing types, and the sibling modules :mod:`.boundary`, :mod:`.channel`, :mod:`.ending`,
:mod:`.handoff`, :mod:`.observe`, :mod:`.turn_policy` and :mod:`.quiet`; never the session.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, final

import anyio
import anyio.abc

from .._vocabulary.errors import (
    AgentAccountError,
    AgentrunError,
    OutputValidationError,
    UsageError,
    account_failure,
)
from .._vocabulary.limits import NO_LIMITS, TurnLimits
from .._vocabulary.messages import ErrorInfo, Message, MessageType
from .._vocabulary.metering import mismatch_error
from .._vocabulary.options import SessionOptions
from .._vocabulary.summary import SessionTotals, SteeredInput, TurnSummary, WoundDown
from .boundary import check_turn_arguments, failure_code
from .channel import Receiver, Sender, channel, receive_soon, send_soon
from .ending import TurnOutcome, turn_ending
from .handoff import HandoffSeed
from .observe import OBSERVERS, Observer
from .quiet import TurnClocks
from .turn_policy import PolicyStop, TurnPolicy

if TYPE_CHECKING:
    from .output import OutputSpec

__all__ = ["MessageCallback", "Turn", "TurnContext", "TurnHost"]

MessageCallback = Callable[[Message], "Awaitable[None] | None"]

#: Messages buffered between an engine and a slow consumer before the engine waits.
BUFFER = 256


def _unchanged() -> None:
    """What the clocks of an ended turn tell when their deadline moves: nobody listens."""


class TurnHost(Protocol):
    """What a :class:`Turn` asks of its session (:class:`~.session.Session` implements it)."""

    @property
    def engine_name(self) -> str: ...

    @property
    def options(self) -> SessionOptions: ...

    @property
    def resume_id(self) -> str | None: ...

    @property
    def cancel_grace(self) -> float: ...

    @property
    def native_output(self) -> bool: ...

    @property
    def can_steer(self) -> bool: ...

    @property
    def totals(self) -> SessionTotals: ...

    @property
    def observers(self) -> tuple[Observer, ...]: ...

    @property
    def handoffs(self) -> list[tuple[str | None, str | None]]: ...

    @property
    def turn_policy(self) -> TurnPolicy | None:
        """The context thresholds and the budget (``None``: none)."""
        ...

    def begin_turn(self, turn: Turn) -> int:
        """Admit ``turn`` as the running one (raise when it may not run); its number."""
        ...

    def end_turn(self, turn: Turn) -> None:
        """``turn`` is over (its ``async with`` block was left)."""
        ...

    def take_handoff_seed(self) -> HandoffSeed | None:
        """The summary the next turn begins with after a hand-off (once)."""
        ...

    def take_caller_error(self) -> Exception | None:
        """The exception a caller's callback (the wire tap) raised during the turn (once)."""
        ...

    def account_turn(self, number: int, summary: TurnSummary) -> None:
        """Add an ended turn's usage to the session's totals (once per turn)."""
        ...

    async def run_turn(self, ctx: TurnContext) -> None:
        """Run the turn in the agent (the engine driver's ``run_turn``)."""
        ...

    async def steer(self, ctx: TurnContext, text: str) -> None:
        """Add ``text`` to the running turn in the agent (the driver's ``steer``)."""
        ...

    def force_stop(self) -> None:
        """Stop the agent at once: a cancel overran :attr:`cancel_grace`."""
        ...


class TurnContext:
    """What an engine driver's ``run_turn`` gets: the prompt, the options, and ``emit``."""

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
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON Schema the turn's final answer must follow (``output=``), for engines that
        give it to the agent their own way (``Session.native_output``); ``None``: no schema."""
        spec = self._turn.output_spec
        return None if spec is None else spec.schema

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
        self._turn.start_watchdog()

    @property
    def has_result(self) -> bool:
        return self._turn.summary.has_result

    @property
    def done(self) -> bool:
        """True once the turn ended (its result or failure is known)."""
        return self._turn.done

    async def emit(self, message: Message) -> None:
        """Deliver one message of this turn (tagged with its number) to the consumer."""
        await self._turn.deliver(message)

    def emit_nowait(self, message: Message) -> bool:
        """Deliver ``message`` at once if that needs no waiting and nothing beyond handing it
        over (no hand-off or observer work); False, and nothing done, otherwise: then
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
        session: TurnHost,
        prompt: str,
        *,
        limits: TurnLimits = NO_LIMITS,
        output: OutputSpec | None = None,
    ) -> None:
        check_turn_arguments(prompt)
        #: The turn's limits (``timeout``, ``idle_timeout``, ... ``wind_down``), checked.
        self.limits: TurnLimits = limits
        #: The session the turn runs in, as the turn sees it.
        self.session: TurnHost = session
        #: The schema of the final answer (structured output), if any.
        self.output_spec: OutputSpec | None = output
        if output is not None and not session.native_output:
            prompt = output.prompt(prompt)  # the agent has no mechanism: the prompt says it
        self.prompt: str = prompt
        #: True when an answer that fails ``output_spec`` is left to the caller (``run_turn``
        #: repairs it) instead of raised by the iterator; then :attr:`output_errors` says why.
        self.output_repairable: bool = False
        #: What was wrong with the final answer (empty when it validated or was not checked).
        self.output_errors: list[str] = []
        #: The deadline and the quiet clocks.
        self.clocks: TurnClocks = TurnClocks(limits)
        self.clocks.on_change = self._refresh_deadline
        self._quiet_watch: anyio.CancelScope | None = None
        self._wind_down_watch: anyio.CancelScope | None = None
        #: Set on the first turn after a hand-off.
        self._handoff_from: HandoffSeed | None = None
        #: The session's policy (``None``: it has none).
        self._policy: TurnPolicy | None = session.turn_policy
        #: Who is told of the turn and its messages (set when the turn starts; empty: nobody).
        self._observers: tuple[Observer, ...] = ()
        #: The turn's number in its session (1, 2, ...), set when the turn starts.
        self.number: int = 0
        #: What the turn produced so far; complete once the iteration ended.
        self.summary: TurnSummary = TurnSummary.from_messages(())  # not validated: empty
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
        #: What a policy stopped this turn for, if one did.
        self.stopped_by_policy: PolicyStop | None = None
        #: The session's meter's mark when the turn started (``None``: no meter).
        self._meter_mark: int | None = None
        self._finished = anyio.Event()
        self._failure: AgentrunError | None = None
        self._done = False
        self._scope: anyio.CancelScope | None = None
        self._send: Sender[Message] | None = None
        self._recv: Receiver[Message] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None

    @property
    def done(self) -> bool:
        return self._done

    async def wait_done(self) -> None:
        """Wait until the turn's engine side has finished (its result or failure is known)."""
        await self._finished.wait()

    # -- context manager ---------------------------------------------------------------------

    @property
    def context(self) -> TurnContext:
        """What the engine driver sees of this turn. A new view each time (it holds no state
        of its own): a turn that kept one would point at itself through it, and only the
        cyclic collector could free it."""
        return TurnContext(self)

    async def __aenter__(self) -> Turn:
        session = self.session
        self.number = session.begin_turn(self)
        self.summary.turn = self.number
        seed = session.take_handoff_seed()
        if seed is not None:
            self._handoff_from = seed
            self.prompt = seed.prompt(self.prompt)
        now = anyio.current_time()
        own = session.observers
        if OBSERVERS or own:
            self._observers = (*OBSERVERS, *own)
            for observer in self._observers:
                observer.turn_started(self)
        policy = self._policy
        meter = session.options.meter
        if meter is not None:
            self._meter_mark = meter.mark()
        self.clocks.start(now, None if policy is None else policy.wall_limit())
        self._send, self._recv = channel[Message](BUFFER)
        self._scope = anyio.CancelScope()
        self._refresh_deadline()
        stack = AsyncExitStack()
        task_group = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        self._task_group = task_group
        task_group.start_soon(self._drive)
        if self.clocks.watching:
            self._quiet_watch = anyio.CancelScope()
            task_group.start_soon(self._watch_quiet, self._quiet_watch)
        limits = self.limits
        if limits.wind_down is not None and limits.timeout is not None:
            self._wind_down_watch = anyio.CancelScope()
            acts_at = now + limits.timeout - limits.wind_down.seconds
            task_group.start_soon(self._wind_down_at, acts_at, self._wind_down_watch)
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
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                # The driver never raises (it stores its failure for the iterator), so the
                # caller's own exception, if any, propagates as itself rather than wrapped in
                # an exception group. The task group stays open to the cancel bound's
                # watchdog until the driver has ended.
                await stack.aclose()
            return None
        finally:
            self._task_group = None
            # The clocks point back at the turn: cut the cycle so that the turn, its summary
            # and scopes are freed when the caller lets go of them, not by the cyclic collector.
            self.clocks.on_change = _unchanged
            self.session.end_turn(self)

    def cancel(self) -> None:
        """Cancel the turn in the agent (the engine interrupts it) without raising here."""
        self.cancelling = True
        if self._scope is not None:
            self._scope.cancel()

    async def steer(self, text: str) -> None:
        """Add ``text`` as a user message to this running turn: the agent sees it at its next
        step (Codex app-server's ``turn/steer``; Claude Code reads it from its input while the
        turn runs). Recorded in ``summary.steered`` with the time since the turn started.

        Raises :class:`SteeringNotSupportedError` at once for engines whose agent takes no
        input while a turn runs, :class:`UsageError` when the turn is not running, and
        :class:`ConfigurationError` for text that is no prompt.
        """
        check_turn_arguments(text)
        session = self.session
        if not session.can_steer:
            await session.steer(self.context, text)
        if self._task_group is None or self._done or self.cancelling:
            raise UsageError(
                "steer a turn while it runs (inside 'async with session.turn(...)', before its "
                "result)",
                engine=session.engine_name,
            )
        at = round(anyio.current_time() - self.clocks.started_at, 6)
        await session.steer(self.context, text)
        self.summary.steered.append(SteeredInput(text=text, at_s=at))

    async def _wind_down_at(self, when: float, scope: anyio.CancelScope) -> None:
        """At ``when`` (``wind_down`` seconds before the deadline), if the turn still runs:
        steer the agent with the wrap-up text where the engine takes input during a turn, and
        say what happened in a ``system`` ``wind_down`` message either way (never an error: the
        turn goes on, and its deadline still holds)."""
        spec = self.limits.wind_down
        assert spec is not None
        session = self.session
        engine = session.engine_name
        with scope:
            await anyio.sleep_until(when)
            if self._done or self.cancelling:
                return
            at = round(anyio.current_time() - self.clocks.started_at, 6)
            # Recorded first: if the turn ends during the steer, the driver still marks it.
            wound = WoundDown(at_s=at, steered=False)
            self.summary.wound_down = wound
            why: str | None = None
            if not session.can_steer:
                why = f"{engine} takes no input while a turn runs"
            else:
                # Shielded (a steer half written would corrupt the agent's input) and bounded.
                with anyio.CancelScope(shield=True) as bound:
                    bound.deadline = anyio.current_time() + session.cancel_grace
                    try:
                        await self.steer(spec.text)
                        wound.steered = True
                    except AgentrunError as exc:
                        why = exc.message
                if bound.cancelled_caught:
                    why = f"the steer did not reach {engine} in time"
            if self._done or scope.cancel_called:
                return  # the turn ended meanwhile: no notice
            steered = wound.steered
            if steered:
                note = (
                    f"winding down: {spec.seconds:g} s before the deadline, {engine} was told "
                    "to wrap up"
                )
            else:
                note = (
                    f"not wound down: {why}; the turn runs on, its deadline {spec.seconds:g} s away"
                )
            data: dict[str, object] = {
                "steered": steered,
                "at_s": at,
                "seconds_left": spec.seconds,
            }
            if not steered:
                data["reason"] = why
            await self.deliver(
                Message(type=MessageType.SYSTEM, subtype="wind_down", text=note, data=data)
            )

    # -- iteration ---------------------------------------------------------------------------

    def __aiter__(self) -> Turn:
        return self

    async def __anext__(self) -> Message:
        if self._recv is None:
            raise RuntimeError("use 'async with session.turn(...)' before iterating")
        try:
            message = await receive_soon(self._recv)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            caller_error = self.session.take_caller_error()
            if caller_error is not None:
                # The caller's own callback failed: that exception, as itself.
                self._failure = None
                raise caller_error from None
            if self._failure is not None:
                failure, self._failure = self._failure, None
                failure.__suppress_context__ = True  # keep __cause__, hide the EndOfStream
                raise failure  # noqa: B904
            self._check_output()
            raise StopAsyncIteration from None
        return message

    def _check_output(self) -> None:
        """At the end of a turn run with ``output=``: validate the final answer into
        ``summary.output``, or raise :class:`OutputValidationError` (unless
        :attr:`output_repairable`, which leaves it in :attr:`output_errors`)."""
        spec = self.output_spec
        if spec is None or self.summary.output is not None or self.output_errors:
            return
        value, errors = spec.check(self.summary.text)
        if not errors:
            self.summary.output = value
            return
        self.output_errors = errors
        if not self.output_repairable:
            engine = self.session.engine_name
            raise OutputValidationError(
                f"the {engine} answer of turn {self.number} does not match the output schema: "
                + "; ".join(errors[:5]),
                raw=self.summary.text,
                errors=errors,
                summary=self.summary,
                engine=engine,
            ) from None

    async def run_to_end(self, on_message: MessageCallback | None) -> TurnSummary:
        """Enter, iterate to the end feeding ``on_message``, and return the summary (or raise
        the turn's error). A slow async callback cannot stretch the call past ``timeout +
        cancel_grace`` either."""
        session = self.session
        timeout = self.limits.timeout
        async with self:
            with anyio.CancelScope() as bound:
                if timeout is not None:
                    bound.deadline = anyio.current_time() + timeout + session.cancel_grace
                async for message in self:
                    if on_message is not None:
                        outcome = on_message(message)
                        if outcome is not None and inspect.isawaitable(outcome):
                            await outcome
            if bound.cancelled_caught:
                self.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(session.cancel_grace):
                    await self.wait_done()
                failure = self._take_failure() or self._timeout_error()
                failure.summary = self.summary
                raise failure
            return self.summary

    # -- the clocks --------------------------------------------------------------------------

    def _refresh_deadline(self) -> None:
        scope = self._scope
        if scope is None:
            return
        deadline = self.clocks.next_deadline()
        if deadline != scope.deadline:
            # Setting a deadline re-arms the scope's timer even when it did not move: once per
            # message without an idle limit, for nothing.
            scope.deadline = deadline

    async def _watch_quiet(self, scope: anyio.CancelScope) -> None:
        with scope:
            await self.clocks.watch(self.session.engine_name, self.deliver, self._finished)

    def _timeout_error(self) -> AgentrunError:
        return self.clocks.timeout_error(self.session.engine_name, self.number)

    # -- delivery ----------------------------------------------------------------------------

    async def _deliver_handoff_note(self, new_id: str | None) -> None:
        """The first turn after a hand-off says so once, after its ``init`` (or first)."""
        seed, self._handoff_from = self._handoff_from, None
        assert seed is not None
        if new_id is None and self.session.resume_id != seed.previous:
            new_id = self.session.resume_id
        self.session.handoffs.append((seed.previous, new_id))
        await self.deliver(seed.note(new_id))

    def deliver_nowait(self, message: Message) -> bool:
        """:meth:`deliver` for a message that needs nothing but handing over, when the consumer
        has room (see :meth:`TurnContext.emit_nowait`), the policy's notes included; a hand-off
        note or an observer needs :meth:`deliver`."""
        send = self._send
        kind = message.type
        if (
            send is None
            or self._observers
            or self.cancelling
            or self.nonblocking
            or self._handoff_from is not None
            or kind is MessageType.RESULT
            or kind is MessageType.STALL
            or send.buffered >= BUFFER
        ):
            return False
        policy = self._policy
        if policy is not None and send.buffered + policy.max_notes >= BUFFER:
            return False  # no room for the notes it may set off
        self._pass_to_consumer(send, message)
        if policy is not None:
            self._apply_policy(policy, message, send)
        return True

    def _pass_to_consumer(self, send: Sender[Message], message: Message) -> None:
        message = message.in_turn(self.number)
        self.summary.add(message)
        if self.nonblocking:
            return
        try:
            send.send_nowait(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.nonblocking = True  # the consumer is gone
            return
        self.clocks.heard(message)

    def _apply_policy(
        self, policy: TurnPolicy, message: Message, send: Sender[Message] | None
    ) -> list[Message]:
        """Tell the policy of a delivered message; hand over its notes when ``send`` is given
        (else return them); stop the turn when it asks to."""
        notes = policy.on_delivery(message)
        if send is not None:
            for note in notes:
                self._pass_to_consumer(send, note)
            notes = []
        if policy.stopping and not self._done and self._scope is not None:
            self._scope.cancel()  # the engine interrupts the agent
        return notes

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
        if self._observers:
            for observer in self._observers:
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
            self.clocks.heard(message)
        if message.type is MessageType.INIT and self._handoff_from is not None:
            new_id = message.resume_id or (message.init.session_id if message.init else None)
            if new_id is not None:
                await self._deliver_handoff_note(new_id)
        policy = self._policy
        if policy is not None and message.type is not MessageType.STALL:
            for note in self._apply_policy(policy, message, None):
                await self.deliver(note)

    # -- the cancel bound --------------------------------------------------------------------

    def start_watchdog(self) -> None:
        """The engine's cancellation path began: start the watchdog that bounds it (once).

        Shielded: whatever cancels the turn — its timeout, the caller's cancel scope or task
        group, the consumer leaving — the same bound holds (the caller's cancel also cancels
        the turn's task group, which would otherwise end the watchdog before it acts)."""
        if self._watchdog is None and self._task_group is not None and not self._done:
            self._watchdog = anyio.CancelScope(shield=True)
            self._task_group.start_soon(self._watch_cancel, self._watchdog)

    async def _watch_cancel(self, scope: anyio.CancelScope) -> None:
        """Give the engine ``cancel_grace`` seconds to end the cancelled turn, then stop the
        agent."""
        with scope:
            with anyio.move_on_after(self.session.cancel_grace):
                await self._finished.wait()
            if not self._done:
                self.stopped_by_force = True
                self.session.force_stop()

    # -- the driver --------------------------------------------------------------------------

    async def _drive(self) -> None:
        assert self._scope is not None
        assert self._send is not None
        session = self.session
        engine = session.engine_name
        ctx = self.context
        failure: AgentrunError | None = None
        completed = False
        try:
            with self._scope:
                try:
                    await session.run_turn(ctx)
                    completed = True
                except AgentrunError as exc:
                    failure = exc
                except Exception as exc:
                    # An engine bug: surface it typed, from the iterator, not as a task-group
                    # ExceptionGroup.
                    failure = AgentrunError(f"{engine} engine failed: {exc!r}", engine=engine)
                    failure.__cause__ = exc
            outcome = TurnOutcome(
                completed=completed,
                raised=failure,
                cancelled_by_caller=self.cancelling,
                scope_cancelled=self._scope.cancel_called,
                closed_by_session=self.closed_by_session,
            )
            if self._wind_down_watch is not None:
                self._wind_down_watch.cancel()
            wound = self.summary.wound_down
            if wound is not None:
                wound.ended_by_itself = completed and self.summary.has_result
            metered_stop = await self._meter()
            policy = self._policy
            if policy is not None:
                ran_out = (
                    outcome.timed_out
                    and self.clocks.deadline_from_policy
                    and self.clocks.ran_out(anyio.current_time())
                )
                self.stopped_by_policy = policy.settle(
                    self.summary, engine=engine, number=self.number, ran_out_of_wall=ran_out
                )
            self.stopped_by_policy = self.stopped_by_policy or metered_stop
            ending = turn_ending(
                outcome,
                self.summary,
                self.stopped_by_policy,
                engine=engine,
                number=self.number,
                timeout_error=self._timeout_error,
            )
            if ending.stop_reason is not None:
                self.summary.stop_reason = ending.stop_reason
                self.summary.ok = False
            failure = ending.failure
            if failure is not None:
                code = failure_code(failure)
                errors = self.summary.errors
                source = (
                    _account_error_index(errors) if isinstance(failure, AgentAccountError) else None
                )
                with anyio.CancelScope(shield=True):
                    await self.deliver(
                        Message.error_message(failure.message, code=code, fatal=True)
                    )
                if source is not None and len(errors) > source + 1:
                    # The typed error restates the agent's own: the summary keeps one record of
                    # the failure, the agent's, under the typed code.
                    typed = errors.pop()
                    errors[source] = _recoded(errors[source], typed.code)
                failure.summary = self.summary
                self._failure = failure
        finally:
            if self._handoff_from is not None:
                # The turn ended without a result: the link is still kept.
                previous = self._handoff_from.previous
                current = session.resume_id
                session.handoffs.append((previous, current if current != previous else None))
                self._handoff_from = None
            self.summary.duration_s = round(anyio.current_time() - self.clocks.started_at, 6)
            session.account_turn(self.number, self.summary)
            if self._observers:
                for observer in self._observers:
                    observer.turn_ended(self, self._failure)
            self._done = True
            self._finished.set()
            self._send.close()
            if self._watchdog is not None:
                self._watchdog.cancel()
            if self._quiet_watch is not None:
                self._quiet_watch.cancel()
            if self._wind_down_watch is not None:
                self._wind_down_watch.cancel()

    async def _meter(self) -> PolicyStop | None:
        """Set what the session's meter counted for the turn beside its usage: a disagreement
        becomes a summary error, and a call refused for the proxy's budget stops the turn with
        ``budget`` (the quota error the agent got is that stop, not an account failure)."""
        meter = self.session.options.meter
        mark = self._meter_mark
        if meter is None or mark is None:
            return None
        metered = None
        with anyio.CancelScope(shield=True):  # bounded: the meter waits a few seconds at most
            metered = await meter.metered_since(mark, self.summary)
        if metered is None:
            return None
        self.summary.metered = metered
        error = mismatch_error(metered)
        if error is not None:
            self.summary.errors.append(error)
        if not metered.refused:
            return None
        return PolicyStop(
            limit="proxy", stop_reason="budget", error=None, explains_account_error=True
        )

    def _take_failure(self) -> AgentrunError | None:
        """The error that ended the turn, if not raised yet (the iterator will not raise it)."""
        failure, self._failure = self._failure, None
        return failure


def _account_error_index(errors: list[ErrorInfo]) -> int | None:
    """Where the agent's fatal error an account error is read from is (the one
    :func:`account_error` picks), if any."""
    for index in range(len(errors) - 1, -1, -1):
        error = errors[index]
        if error.fatal and account_failure(error) is not None:
            return index
    return None


def _recoded(error: ErrorInfo, code: str | None) -> ErrorInfo:
    """``error`` under ``code``, the agent's own code kept in ``data["agent_code"]``."""
    data = error.data
    if error.code not in (None, code):
        data = {**(data or {}), "agent_code": error.code}
    return error.model_copy(update={"code": code, "data": data})
