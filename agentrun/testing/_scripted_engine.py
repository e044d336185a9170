"""A scripted in-process engine: test code that uses agentrun without running any agent.

Each turn plays a list of steps: messages to emit, pauses, a hang, a failure. The process records
what happened to each turn (``process.log``), including whether the backend turn was cancelled, so
tests can check cancellation reached the "agent" and not just the reader::

    engine = ScriptedEngine([
        [text("hello"), result()],
        [Sleep(10), result()],
    ])
    async with engine.start() as process:
        summary = await run_turn(process, "hi")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._turns.driver import EngineDriver
from .._turns.engine import Engine
from .._turns.session import Session
from .._turns.turn import TurnContext
from .._vocabulary.errors import AgentrunError
from .._vocabulary.messages import Message, MessageType, ToolCall, Usage
from .._vocabulary.options import SessionOptions
from .._vocabulary.permissions import PermissionDecision, PermissionRequest

__all__ = [
    "Ask",
    "Fail",
    "Hang",
    "ScriptedDriver",
    "ScriptedEngine",
    "Sleep",
    "Step",
    "TurnRecord",
    "result",
    "text",
    "tool_result",
    "tool_use",
]


@dataclass(frozen=True)
class Sleep:
    """Pause this long before the next step."""

    seconds: float


@dataclass(frozen=True)
class Hang:
    """Wait until the turn is cancelled."""


@dataclass(frozen=True)
class Fail:
    """Raise this error from the backend turn (e.g. a ProcessExitError)."""

    error: AgentrunError


@dataclass(frozen=True)
class Ask:
    """Ask the session's permission callback, as an agent asks before a tool runs; the
    decision is recorded in the turn's ``decisions``."""

    request: PermissionRequest


Step = Message | Sleep | Hang | Fail | Ask
Script = Sequence[Sequence[Step]] | Callable[[str, int], Sequence[Step]]


@dataclass
class TurnRecord:
    """What the scripted backend saw of one turn."""

    number: int
    prompt: str
    emitted: int = 0
    cancelled: bool = False
    finished: bool = False
    late: list[Message] = field(default_factory=list[Message])
    decisions: list[PermissionDecision] = field(default_factory=list[PermissionDecision])


def text(value: str, **extra: Any) -> Message:
    return Message(type=MessageType.TEXT, text=value, **extra)


def tool_use(tool_id: str, name: str, input: Any = None) -> Message:
    return Message(type=MessageType.TOOL_USE, tool=ToolCall(id=tool_id, name=name, input=input))


def tool_result(tool_id: str, output: Any, *, is_error: bool = False) -> Message:
    return Message(
        type=MessageType.TOOL_RESULT, tool=ToolCall(id=tool_id, output=output, is_error=is_error)
    )


def result(
    text_value: str | None = None,
    *,
    stop_reason: str = "end_turn",
    usage: Usage | None = None,
    **extra: Any,
) -> Message:
    return Message(
        type=MessageType.RESULT, text=text_value, stop_reason=stop_reason, usage=usage, **extra
    )


class ScriptedEngine(Engine):
    """An engine that plays scripted turns. ``script`` is a list of turns (each a list of
    steps) or a function ``(prompt, turn_number) -> steps``."""

    name: str = "scripted"

    def __init__(
        self,
        script: Script | None = None,
        *,
        cancel_delay: float = 0.0,
        compacts: bool = False,
        hands_off: bool = False,
    ) -> None:
        self.script: Script = script if script is not None else _echo
        #: How long the backend takes to acknowledge a cancellation.
        self.cancel_delay = cancel_delay
        #: Whether sessions say they can compact (the script plays ``/compact`` like a prompt).
        self.compacts = compacts
        #: Whether sessions can start afresh (``Session.handoff``); each fresh session gets the
        #: id ``scripted-<n>``.
        self.hands_off = hands_off

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(ScriptedDriver(self, options))


def _echo(prompt: str, number: int) -> Sequence[Step]:
    return [text(f"echo: {prompt}"), result(f"echo: {prompt}")]


class ScriptedDriver(EngineDriver):
    """Plays its engine's script; the session's ``driver`` (``log``, ``shutdowns``, ...)."""

    engine_name: str = "scripted"

    def __init__(self, engine: ScriptedEngine, options: SessionOptions | None) -> None:
        super().__init__(options)
        self.engine = engine
        self.log: list[TurnRecord] = []
        self.shutdowns: int = 0
        self.fresh_starts: int = 0
        self._contexts: list[TurnContext] = []

    @property
    def can_compact(self) -> bool:
        return self.engine.compacts

    @property
    def can_handoff(self) -> bool:
        return self.engine.hands_off

    async def start_fresh(self) -> None:
        self.fresh_starts += 1
        self.resume_id: str | None = f"scripted-{self.fresh_starts}"

    def _steps(self, prompt: str, number: int) -> Sequence[Step]:
        script = self.engine.script
        if callable(script):
            return script(prompt, number)
        if number > len(script):
            raise AgentrunError(f"the script has no turn {number}", engine=self.engine_name)
        return script[number - 1]

    async def run_turn(self, ctx: TurnContext) -> None:
        record = TurnRecord(ctx.number, ctx.prompt)
        self.log.append(record)
        self._contexts.append(ctx)
        try:
            for step in self._steps(ctx.prompt, ctx.number):
                if isinstance(step, Sleep):
                    await anyio.sleep(step.seconds)
                elif isinstance(step, Hang):
                    await anyio.sleep_forever()
                elif isinstance(step, Fail):
                    raise step.error
                elif isinstance(step, Ask):
                    decision, notes = await self.ask_permission(step.request, hitl=ctx.options.hitl)
                    record.decisions.append(decision)
                    for note in notes:
                        await ctx.emit(note)
                else:
                    await ctx.emit(step)
                    record.emitted += 1
            record.finished = True
        except anyio.get_cancelled_exc_class():
            ctx.begin_cancel()
            record.cancelled = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await anyio.sleep(self.engine.cancel_delay)
                await ctx.emit(result(stop_reason="cancelled"))
            raise

    async def emit_late(self, turn_number: int, message: Message) -> None:
        """Emit ``message`` through the context of an earlier turn (a misbehaving backend)."""
        ctx = self._contexts[turn_number - 1]
        self.log[turn_number - 1].late.append(message)
        await ctx.emit(message)

    async def shutdown(self) -> None:
        self.shutdowns += 1


def scripted(session: Session) -> ScriptedDriver:
    """The :class:`ScriptedDriver` a session of a :class:`ScriptedEngine` holds (its ``log``)."""
    driver = session.driver
    if not isinstance(driver, ScriptedDriver):
        raise TypeError(f"{session.engine_name} session holds no scripted driver")
    return driver


#: The name of :class:`ScriptedDriver` from before sessions held their engine as a driver.
ScriptedSession = ScriptedDriver
