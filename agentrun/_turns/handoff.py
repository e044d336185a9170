"""Compaction and hand-off: the turns the library runs to look after an agent's context.

* :meth:`Session.compact` — the agent compacts its context now, as a turn of its own;
* :meth:`Session.handoff` — the agent writes a hand-off summary (a turn of its own), a fresh
  agent-side session starts, and the next prompt begins with that summary
  (:class:`HandoffSeed`; the next turn shows a ``compaction`` message with
  ``trigger="handoff"``);
* :func:`follow_context_policy` — after a prompt turn that left the context past the policy's
  ``compact_at``: compact or hand off, as ``SessionOptions.context_policy`` says.

Imports the vocabulary only; the session is reached through the :class:`ContextKeeper` passed
in, never imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from .._vocabulary.errors import AgentrunError
from .._vocabulary.messages import Message
from .._vocabulary.options import SessionOptions
from .._vocabulary.summary import TurnSummary

__all__ = [
    "HANDOFF_PREAMBLE",
    "HANDOFF_PROMPT",
    "ContextKeeper",
    "HandoffSeed",
    "follow_context_policy",
]

MessageCallback = Callable[[Message], "Awaitable[None] | None"]


class ContextKeeper(Protocol):
    """What :func:`follow_context_policy` uses of a session."""

    @property
    def options(self) -> SessionOptions: ...

    @property
    def can_compact(self) -> bool: ...

    @property
    def can_handoff(self) -> bool: ...

    async def compact(
        self, *, timeout: float | None = ..., on_message: MessageCallback | None = ...
    ) -> TurnSummary: ...

    async def handoff(
        self,
        *,
        prompt: str = ...,
        timeout: float | None = ...,
        on_message: MessageCallback | None = ...,
    ) -> TurnSummary: ...


class _EndedTurn(Protocol):
    @property
    def housekeeping(self) -> bool: ...


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


@dataclass(frozen=True)
class HandoffSeed:
    """What the first turn after a hand-off starts from."""

    #: The hand-off summary the agent wrote.
    summary: str
    #: The agent session id before the hand-off.
    previous: str | None
    #: The context fill before the hand-off, when known.
    before: int | None

    def prompt(self, prompt: str) -> str:
        """The first prompt of the fresh session: the summary, then the request."""
        return f"{HANDOFF_PREAMBLE}\n\n{self.summary}\n\n---\n\n{prompt}"

    def note(self, new_id: str | None) -> Message:
        """The ``compaction`` message that links the previous agent session to the new one."""
        note = Message.compaction(trigger="handoff", before_tokens=self.before, after=None)
        data = {**(note.data or {}), "previous_session_id": self.previous, "session_id": new_id}
        return note.model_copy(update={"data": data})


async def follow_context_policy(
    session: ContextKeeper,
    turn: _EndedTurn,
    summary: TurnSummary,
    on_message: MessageCallback | None,
) -> TurnSummary:
    """A prompt turn that left the context past the policy's ``compact_at`` is followed by a
    compaction or a hand-off when the policy says so; a failed one is recorded as an
    ``error`` message of the turn, whose own result stands."""
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
