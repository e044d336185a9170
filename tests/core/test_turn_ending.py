"""Which failure ended a turn, decided in one place (``turn_ending``), case by case: nothing
here runs a turn, so each rule is seen on its own."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun import (
    AgentrunError,
    BudgetExceededError,
    ErrorInfo,
    NoResultError,
    NotAuthenticatedError,
    ProcessExitError,
    QuotaExceededError,
    SessionClosedError,
    TurnSummary,
    TurnTimeoutError,
)
from agentrun._turns.ending import TurnEnding, TurnOutcome, turn_ending
from agentrun._turns.turn_policy import PolicyStop

ANSWERED = TurnSummary(has_result=True, ok=True)
SILENT = TurnSummary()  # no result, nothing reported
NOT_LOGGED_IN = ErrorInfo(message="Invalid API key", status=401, fatal=True)
NO_CREDIT = ErrorInfo(message="credit balance is too low", status=402, fatal=True)

COMPLETED = TurnOutcome(completed=True)
CALLER_CANCELLED = TurnOutcome(cancelled_by_caller=True, scope_cancelled=True)
TIMED_OUT = TurnOutcome(scope_cancelled=True)
CLOSED = TurnOutcome(cancelled_by_caller=True, scope_cancelled=True, closed_by_session=True)


def _timeout() -> TurnTimeoutError:
    return TurnTimeoutError("claude turn 2 exceeded its timeout of 5s", kind="total", seconds=5)


def _no_timeout() -> AgentrunError:
    raise AssertionError("the clocks were asked for an error of a turn that did not time out")


def _ending(
    outcome: TurnOutcome,
    summary: TurnSummary = ANSWERED,
    stop: PolicyStop | None = None,
    **kwargs: Any,
) -> TurnEnding:
    return turn_ending(
        outcome,
        summary,
        stop,
        engine="claude",
        number=2,
        timeout_error=kwargs.get("timeout_error", _no_timeout),
    )


def test_a_turn_that_answered_ends_well() -> None:
    assert _ending(COMPLETED) == TurnEnding(failure=None, stop_reason=None)


def test_a_turn_that_ended_by_itself_without_a_result_is_no_result() -> None:
    ending = _ending(COMPLETED, SILENT)
    assert isinstance(ending.failure, NoResultError)
    assert ending.failure.message == "claude turn 2 ended without a result"
    assert ending.failure.engine == "claude"
    assert ending.stop_reason is None


def test_the_engines_own_error_is_the_turns() -> None:
    died = ProcessExitError("claude exited", exit_code=1)
    ending = _ending(TurnOutcome(raised=died), SILENT)
    assert ending.failure is died and ending.stop_reason is None


def test_a_turn_the_caller_cancelled_raises_nothing_and_says_cancelled() -> None:
    ending = _ending(CALLER_CANCELLED, SILENT)
    assert ending == TurnEnding(failure=None, stop_reason="cancelled")
    # Even when the agent's last word was an account error: the caller stopped it.
    assert _ending(CALLER_CANCELLED, TurnSummary(errors=[NOT_LOGGED_IN])).failure is None


def test_a_timeout_explains_what_the_cancellation_path_ran_into() -> None:
    timeout = _timeout()
    for raised in (None, ProcessExitError("claude exited", exit_code=-9)):
        outcome = TurnOutcome(raised=raised, scope_cancelled=True)
        ending = _ending(outcome, SILENT, timeout_error=lambda: timeout)
        assert ending == TurnEnding(failure=timeout, stop_reason="cancelled")


def test_a_turn_that_completed_as_its_scope_was_cancelled_did_not_time_out() -> None:
    # The result came first: the cancel found nothing to stop.
    assert _ending(TurnOutcome(completed=True, scope_cancelled=True)) == TurnEnding(None, None)


def test_closing_the_session_wins_over_everything_else() -> None:
    stop = PolicyStop(
        limit="cost", stop_reason="budget", error=BudgetExceededError("spent", limit="cost")
    )
    for outcome in (CLOSED, TurnOutcome(scope_cancelled=True, closed_by_session=True)):
        ending = _ending(outcome, TurnSummary(errors=[NOT_LOGGED_IN]), stop)
        assert isinstance(ending.failure, SessionClosedError)
        assert ending.failure.message == "the claude session was closed during turn 2"
        assert ending.stop_reason == "cancelled"  # not the policy's


def test_a_policy_stop_gives_its_reason_and_error() -> None:
    spent = BudgetExceededError("the session's budget is spent", limit="cost")
    stop = PolicyStop(limit="cost", stop_reason="budget", error=spent)
    # Stopped while running (the policy cancelled the turn) or after its result.
    for outcome in (TIMED_OUT, COMPLETED):
        ending = _ending(outcome, ANSWERED, stop, timeout_error=_timeout)
        assert ending == TurnEnding(failure=spent, stop_reason="budget")
    # A stop that raises nothing: the turn returns its (stopped) summary, whatever else failed.
    quiet = PolicyStop(limit="turns", stop_reason="budget", error=None)
    died = ProcessExitError("claude exited", exit_code=1)
    assert _ending(TurnOutcome(raised=died), SILENT, quiet) == TurnEnding(None, "budget")


@pytest.mark.parametrize(
    ("error", "kind"), [(NOT_LOGGED_IN, NotAuthenticatedError), (NO_CREDIT, QuotaExceededError)]
)
def test_a_turn_the_account_kept_from_running_raises_the_account_error(
    error: ErrorInfo, kind: type[AgentrunError]
) -> None:
    failed = TurnSummary(has_result=True, ok=False, errors=[error])
    # An empty failed summary, no result, or the agent's exit: the account is the cause.
    ending = _ending(COMPLETED, failed)
    assert isinstance(ending.failure, kind) and ending.failure.__cause__ is None
    ending = _ending(COMPLETED, TurnSummary(errors=[error]))
    assert isinstance(ending.failure, kind)
    assert isinstance(ending.failure.__cause__, NoResultError)
    died = ProcessExitError("claude exited", exit_code=1)
    ending = _ending(TurnOutcome(raised=died), TurnSummary(errors=[error]))
    assert isinstance(ending.failure, kind) and ending.failure.__cause__ is died
    assert ending.failure.message == error.message


def test_an_account_error_does_not_replace_a_timeout_or_a_non_fatal_error() -> None:
    timeout = _timeout()
    ending = _ending(TIMED_OUT, TurnSummary(errors=[NOT_LOGGED_IN]), timeout_error=lambda: timeout)
    assert ending.failure is timeout
    passing = NOT_LOGGED_IN.model_copy(update={"fatal": False})
    failed = TurnSummary(has_result=True, ok=False, errors=[passing])
    assert _ending(COMPLETED, failed) == TurnEnding(None, None)


def test_a_stopped_turn_is_a_failed_one_for_the_account_check() -> None:
    # The agent said ok, but the turn was stopped: its fatal account error is what ended it.
    quiet = PolicyStop(limit="turns", stop_reason="budget", error=None)
    answered = TurnSummary(has_result=True, ok=True, errors=[NOT_LOGGED_IN])
    ending = _ending(COMPLETED, answered, quiet)
    assert isinstance(ending.failure, NotAuthenticatedError)
    assert ending.stop_reason == "budget"
    assert _ending(COMPLETED, answered) == TurnEnding(None, None)
