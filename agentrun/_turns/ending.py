"""Which failure ended a turn: one decision, made once the engine's side of the turn is over.

:func:`turn_ending` reads what is known then — did the engine's ``_run_turn`` return, what it
raised, who cancelled the turn, whether the session was closed or a policy stopped it, what the
agent reported — and says which error the turn raises (``None``: it returns its summary) and
whether its summary is marked stopped. It changes nothing: the turn (:mod:`.turn`) applies it.

In order of precedence:

1. closing the session ends the turn with :class:`SessionClosedError`, whatever else happened;
2. a policy that stopped the turn gives its own stop reason and error;
3. a timeout (the turn's clocks cancelled it, not the caller) explains whatever the engine's
   cancellation path ran into: the clocks' :class:`TurnTimeoutError`;
4. the engine's own error, if it raised one;
5. a turn that ended by itself without a result is a :class:`NoResultError`;
6. a failed turn whose fatal error was the agent's account (not logged in, no credit) raises
   the typed account error instead of ending as an empty summary or a bare exit, that cause
   kept as ``__cause__`` (unless the stop explains it: the metering proxy's spent budget).

A turn cancelled by anything (the caller, a timeout, a policy, the close) says
``stop_reason == "cancelled"`` unless a policy names its own. Imports the vocabulary and
:mod:`.turn_policy` (for typing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._vocabulary.errors import (
    AgentrunError,
    NoResultError,
    ProcessExitError,
    SessionClosedError,
    account_error,
)

if TYPE_CHECKING:
    from .._vocabulary.summary import TurnSummary
    from .turn_policy import PolicyStop

__all__ = ["TurnEnding", "TurnOutcome", "turn_ending"]


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How the engine's side of a turn came to its end."""

    #: The engine's ``_run_turn`` returned (it did not raise and was not cancelled).
    completed: bool = False
    #: What ``_run_turn`` raised (an engine bug already wrapped in :class:`AgentrunError`).
    raised: AgentrunError | None = None
    #: The caller cancelled the turn (or its consumer left): ``Turn.cancelling``.
    cancelled_by_caller: bool = False
    #: The turn's cancel scope was cancelled: by the caller, a clock, a policy or the close.
    scope_cancelled: bool = False
    #: The session was closed while the turn ran.
    closed_by_session: bool = False

    @property
    def timed_out(self) -> bool:
        """The turn's clocks (or a policy's wall limit) cancelled it before it completed."""
        return self.scope_cancelled and not self.cancelled_by_caller and not self.completed

    @property
    def cancelled(self) -> bool:
        """The turn did not complete because something cancelled it."""
        return not self.completed and (self.cancelled_by_caller or self.scope_cancelled)


@dataclass(frozen=True, slots=True)
class TurnEnding:
    """What :func:`turn_ending` decided."""

    #: The error the turn raises; ``None``: it returns its summary.
    failure: AgentrunError | None
    #: The summary's ``stop_reason`` (and ``ok`` false) when the turn was stopped; ``None``: the
    #: agent's own stands.
    stop_reason: str | None


def turn_ending(
    outcome: TurnOutcome,
    summary: TurnSummary,
    stop: PolicyStop | None,
    *,
    engine: str,
    number: int,
    timeout_error: Callable[[], AgentrunError],
) -> TurnEnding:
    """Which failure ended turn ``number`` (see the module docstring for the order).

    ``summary`` is what the turn produced (read, never changed); ``stop`` what the session's
    policy stopped it for, if it did; ``timeout_error`` gives the clocks' error, and is called
    only for a turn that timed out."""
    stop_reason = "cancelled" if outcome.cancelled else None
    failure = outcome.raised
    if outcome.closed_by_session:
        failure = SessionClosedError(
            f"the {engine} session was closed during turn {number}", engine=engine
        )
    elif stop is not None:
        stop_reason = stop.stop_reason
        failure = stop.error
    elif outcome.timed_out:
        failure = timeout_error()
    elif failure is None and not summary.has_result and not outcome.cancelled_by_caller:
        failure = NoResultError(f"{engine} turn {number} ended without a result", engine=engine)
    ok = summary.ok and stop_reason is None
    if (
        (failure is None or isinstance(failure, NoResultError | ProcessExitError))
        and not ok
        and not outcome.cancelled_by_caller
        and not (stop is not None and stop.explains_account_error)
    ):
        account = account_error(summary.errors, engine)
        if account is not None:
            account.__cause__ = failure
            failure = account
    return TurnEnding(failure, stop_reason)
