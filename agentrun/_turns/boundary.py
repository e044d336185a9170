"""What the turn model checks and raises at the public boundary.

:func:`check_turn_arguments` refuses bad turn arguments with a :class:`ConfigurationError`
naming the argument, before anything reaches an agent; :func:`single_error` is the one error a
public context manager raises instead of an exception group of one; :func:`failure_code` is
the ``code`` of the fatal ``error`` message that precedes an error ending a turn.

Imports only the vocabulary.
"""

from __future__ import annotations

from typing import cast

from .._vocabulary.errors import (
    AgentrunError,
    ConfigurationError,
    NoResultError,
    SessionClosedError,
    SessionLostError,
    SessionTerminatedError,
    TurnTimeoutError,
)
from .._vocabulary.limits import check_seconds, wind_down_spec

__all__ = ["check_turn_arguments", "failure_code", "single_error", "wind_down_spec"]


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
    check_seconds("timeout", timeout)
    check_seconds("idle_timeout", idle_timeout)
    check_seconds("tool_timeout", tool_timeout)
    check_seconds("stall_after", stall_after)
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
    """The ``code`` of the fatal ``error`` message delivered before ``failure`` is raised."""
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
