"""Observers: what instrumentation (``agentrun.otel``) sees of every session and turn.

A small seam, not a public plug-in API: observers registered here are told when a session starts
and closes, when a turn starts, of every message it delivers, and when it ends; they may add
environment variables to the agent programs a session spawns (trace context). With no observer
registered each hook costs one truthiness check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .._vocabulary.errors import AgentrunError
    from .._vocabulary.messages import Message
    from .session import Session, Turn

__all__ = ["OBSERVERS", "Observer", "spawn_env"]


class Observer(Protocol):
    def session_started(self, session: Session) -> None: ...

    def session_closed(self, session: Session) -> None: ...

    def turn_started(self, turn: Turn) -> None: ...

    def message(self, turn: Turn, message: Message) -> None: ...

    def turn_ended(self, turn: Turn, error: AgentrunError | None) -> None: ...

    def spawn_env(self, session: Session) -> dict[str, str]: ...


#: The registered observers (``agentrun.otel.instrument()`` adds one).
OBSERVERS: list[Observer] = []


def spawn_env(session: Session, env: Mapping[str, str]) -> Mapping[str, str]:
    """``env`` with what the observers add for a program ``session`` spawns now."""
    if not OBSERVERS:
        return env
    extra: dict[str, str] = {}
    for observer in OBSERVERS:
        extra.update(observer.spawn_env(session))
    return {**env, **extra} if extra else env
