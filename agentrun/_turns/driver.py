"""The engine driver: the one interface an engine implements.

A :class:`~.session.Session` is what callers hold; it *holds* an :class:`EngineDriver`, which
runs the agent. A driver implements one coroutine, :meth:`EngineDriver.run_turn`: send
``ctx.prompt``, translate what the agent says into :class:`Message` objects passed to
:meth:`TurnContext.emit`, and return once the turn's ``result`` message has been emitted.
Around it, optionally: :meth:`~EngineDriver.start` and :meth:`~EngineDriver.shutdown` (what
runs for the whole session), :meth:`~EngineDriver.force_stop` (a cancel overran
:attr:`~EngineDriver.cancel_grace`), :meth:`~EngineDriver.steer` and
:meth:`~EngineDriver.start_fresh` with the ``can_*`` properties that announce them.

Timeouts and the caller's cancel cancel ``run_turn``, which a driver treats as "cancel the turn
in the agent": call :meth:`TurnContext.begin_cancel`, interrupt inside
``anyio.CancelScope(shield=True)`` with a bound, re-raise.

What a driver asks of its session goes through :class:`DriverHost` (the wire tap, the
caller's permission and question callbacks, the observers' environment): the driver never sees
the session's own state. Imports the vocabulary, the wire's framing types and :mod:`.turn`
(for :class:`TurnContext`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar, Protocol

import anyio.abc

from .._vocabulary.errors import (
    CompactionNotSupportedError,
    SteeringNotSupportedError,
    UsageError,
)
from .._vocabulary.messages import Message
from .._vocabulary.options import SessionOptions
from .._vocabulary.permissions import PermissionDecision, PermissionRequest
from .._vocabulary.questions import QuestionAnswer, QuestionRequest
from .._wire.framing import LineTooLong
from .turn import TurnContext

__all__ = ["CANCEL_GRACE", "DriverHost", "EngineDriver"]

#: Default of :attr:`EngineDriver.cancel_grace`.
CANCEL_GRACE = 3.0


class DriverHost(Protocol):
    """What a driver calls back into: the session that holds it."""

    @property
    def tapping(self) -> bool:
        """Whether a wire tap is set (skip building what only the tap needs)."""
        ...

    def tap(self, direction: str, line: bytes) -> None:
        """Show one raw line to the caller's wire tap (``"recv"``, ``"send"``, ``"stderr"``)."""
        ...

    def spawn_env(self, env: Mapping[str, str]) -> Mapping[str, str]:
        """``env`` with what the observers add for a program the driver spawns now."""
        ...

    async def ask_permission(
        self, request: PermissionRequest, *, hitl: bool | None
    ) -> tuple[PermissionDecision, list[Message]]:
        """The caller's permission flow, the running turn's quiet clocks paused meanwhile."""
        ...

    async def ask_question(self, request: QuestionRequest) -> tuple[QuestionAnswer, list[Message]]:
        """The caller's question flow, the running turn's quiet clocks paused meanwhile."""
        ...


class _Unattached:
    """The host of a driver no session holds yet: no tap, no observers, no caller."""

    tapping = False

    def tap(self, direction: str, line: bytes) -> None:
        return None

    def spawn_env(self, env: Mapping[str, str]) -> Mapping[str, str]:
        return env

    async def ask_permission(
        self, request: PermissionRequest, *, hitl: bool | None
    ) -> tuple[PermissionDecision, list[Message]]:
        raise UsageError("a driver asks for permission only inside a session")

    async def ask_question(self, request: QuestionRequest) -> tuple[QuestionAnswer, list[Message]]:
        raise UsageError("a driver asks a question only inside a session")


class EngineDriver(ABC):
    """Runs one agent session for a :class:`~.session.Session`. See the module docstring."""

    #: The engine name, for messages and errors.
    engine_name: str = "engine"
    #: Seconds the driver may take to end a cancelled turn (a timeout, the caller's cancel)
    #: once its cancellation path began; then :meth:`force_stop` is called and the session may
    #: be over. ``run_turn``'s wall time is at most about ``timeout + cancel_grace``.
    cancel_grace: float = CANCEL_GRACE
    #: True when the driver gives a turn's output schema (``output=``) to the agent its own way
    #: (``TurnContext.output_schema``); otherwise the schema goes with the prompt.
    native_output: ClassVar[bool] = False
    #: The prompt that asks the agent to compact (drivers that compact by command).
    compact_prompt: ClassVar[str] = "/compact"

    def __init__(self, options: SessionOptions | None = None) -> None:
        #: What the session runs with (model, cwd, permissions, ...), validated and immutable.
        self.options: SessionOptions = options if options is not None else SessionOptions()
        #: The latest id that resumes this session (``SessionOptions(resume_id=...)``), once
        #: known; the driver sets it.
        self.resume_id: str | None = self.options.resume_id
        self.host: DriverHost = _Unattached()

    # -- the interface -----------------------------------------------------------------------

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start what must run for the whole session (long-lived agents). Background tasks go
        into ``task_group``, which is cancelled after :meth:`shutdown`."""

    @abstractmethod
    async def run_turn(self, ctx: TurnContext) -> None:
        """Run one turn: send ``ctx.prompt``, emit its messages, return after its result."""

    async def shutdown(self) -> None:
        """Stop the session's program(s). Called shielded; must bound its own waits."""

    def force_stop(self) -> None:
        """Stop the agent at once, without waiting: a cancelled turn overran
        :attr:`cancel_grace`. Its cancellation path must then end promptly (it sees the exit)."""

    @property
    def can_steer(self) -> bool:
        """Whether a running turn takes more input from the user (:meth:`steer`)."""
        return False

    async def steer(self, ctx: TurnContext, text: str) -> None:
        """Add ``text`` as a user message to the running turn ``ctx`` in the agent."""
        raise SteeringNotSupportedError(
            f"{self.engine_name} takes no input while a turn runs", engine=self.engine_name
        )

    @property
    def can_compact(self) -> bool:
        """Whether the agent offers a way to compact its context (detected from the agent,
        never guessed); a compaction is a turn whose ``ctx.compacting`` is true."""
        return False

    @property
    def can_handoff(self) -> bool:
        """Whether the agent can go on in a fresh agent-side session (:meth:`start_fresh`)."""
        return False

    async def start_fresh(self) -> None:
        """From the next turn on, run a new agent session (no history)."""
        raise CompactionNotSupportedError(
            f"{self.engine_name} cannot start a fresh session", engine=self.engine_name
        )

    # -- helpers for drivers -----------------------------------------------------------------

    def forget_resume(self) -> None:
        """From now on the options start a new agent session (for :meth:`start_fresh`)."""
        fresh = {"resume_id": None, "continue_last": False, "fork": False}
        self.options = self.options.model_copy(update=fresh)

    def tap(self, direction: str, line: bytes) -> None:
        """Show one raw line the driver read (``"recv"``) or wrote (``"send"``) to the tap."""
        if self.host.tapping:
            self.host.tap(direction, line)

    def tap_received(self, item: bytes | LineTooLong) -> None:
        """Tap one framed stdout line (an oversized one by the head that was kept)."""
        if self.host.tapping:
            self.host.tap("recv", item.head if isinstance(item, LineTooLong) else item)

    def tap_stderr(self, line: str) -> None:
        """Tap one line of the agent's stderr (use as ``ProcessSpec.on_stderr``)."""
        if self.host.tapping:
            self.host.tap("stderr", line.encode("utf-8", "replace"))

    async def ask_permission(
        self, request: PermissionRequest, *, hitl: bool | None
    ) -> tuple[PermissionDecision, list[Message]]:
        """Ask the caller (:func:`agentrun.abc.ask_permission`), the turn's clocks paused."""
        return await self.host.ask_permission(request, hitl=hitl)

    async def ask_question(self, request: QuestionRequest) -> tuple[QuestionAnswer, list[Message]]:
        """Ask the caller a question, the turn's clocks paused."""
        return await self.host.ask_question(request)
