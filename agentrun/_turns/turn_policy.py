"""The session's policies behind one hook: what a turn asks of them, and nothing else.

A turn knows a :class:`TurnPolicy` only: before it starts (:meth:`~TurnPolicy.admit`, and a
wall limit), on every message it delivers (:meth:`~TurnPolicy.on_delivery`: notes to deliver
after it, and whether the turn must stop), and when it ends (:meth:`~TurnPolicy.settle`: the
:class:`PolicyStop` that explains a stopped turn). Two policies implement it — the context
thresholds (:class:`ContextThresholds`, ``SessionOptions.context_policy``) and the budget
(:class:`BudgetGuard`, ``SessionOptions.budget``) — and :func:`session_policy` chains the
ones a session has; the turn cannot tell them apart.

Imports only the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .._vocabulary.errors import AgentrunError, BudgetExceededError
from .._vocabulary.messages import Message, MessageType
from .._vocabulary.options import SessionOptions
from .._vocabulary.policy_settings import (
    Budget,
    BudgetLimit,
    ContextGauge,
    ContextPolicy,
    tokens_of,
)
from .._vocabulary.prices import estimate_cost
from .._vocabulary.summary import TurnSummary

__all__ = ["BudgetGuard", "ContextThresholds", "PolicyStop", "TurnPolicy", "session_policy"]


@dataclass(frozen=True)
class PolicyStop:
    """Why a policy stopped a turn: the limit, the summary's ``stop_reason``, and the error the
    turn raises (``None``: the turn returns its summary)."""

    limit: str
    stop_reason: str
    error: AgentrunError | None
    #: The agent's account error (no quota left) was this stop's doing, so the turn does not
    #: raise it as its own (the metering proxy refused a call for its budget).
    explains_account_error: bool = False


class TurnPolicy(Protocol):
    """What a turn calls; see the module docstring."""

    #: The most notes one delivered message can set off (a delivery waits for room for them).
    @property
    def max_notes(self) -> int: ...

    #: True once a delivered message asked to stop the running turn.
    @property
    def stopping(self) -> bool: ...

    def admit(self, engine: str) -> None:
        """Before a turn starts: raise when the session may start no more turns."""
        ...

    def wall_limit(self) -> float | None:
        """The most seconds the turn starting now may take, if limited."""
        ...

    def on_delivery(self, message: Message) -> list[Message]:
        """A message of the running turn was delivered: the notes it sets off."""
        ...

    def settle(
        self, summary: TurnSummary, *, engine: str, number: int, ran_out_of_wall: bool
    ) -> PolicyStop | None:
        """The turn ended: account for it; the stop that ended it, if a policy did."""
        ...


class ContextThresholds:
    """``context_threshold`` notes when a main-thread reading crosses a threshold."""

    def __init__(self, policy: ContextPolicy) -> None:
        self.gauge = ContextGauge(policy)
        self.max_notes = len(policy.thresholds)
        self.stopping = False

    def admit(self, engine: str) -> None:
        return

    def wall_limit(self) -> float | None:
        return None

    def on_delivery(self, message: Message) -> list[Message]:
        if (
            message.type is not MessageType.CONTEXT_WINDOW
            or message.parent_tool_use_id is not None
            or message.context is None
        ):
            return []
        return self.gauge.observe(message.context)

    def settle(
        self, summary: TurnSummary, *, engine: str, number: int, ran_out_of_wall: bool
    ) -> PolicyStop | None:
        return None


class BudgetGuard:
    """The session's budget: refuses turns past ``max_turns``, limits a turn's wall time to
    what is left, stops a turn whose reported usage crosses the cost or token limit, and
    charges every turn (its result's usage, else what was reported on the way).

    Usage reported on the way with tokens but no cost (Claude Code's per-call output) is priced
    from the price catalog for the session's model (``SessionOptions.model``, else the model the
    agent announces in its ``init``); a model the catalog does not know adds no cost."""

    max_notes = 0

    def __init__(self, budget: Budget, model: str | None = None) -> None:
        self.budget = budget
        self._model = model
        self._limit: BudgetLimit | None = None
        self._cost = 0.0
        self._tokens = 0

    @property
    def stopping(self) -> bool:
        return self._limit is not None

    def admit(self, engine: str) -> None:
        limit = self.budget.start_turn()
        if limit is not None:
            raise BudgetExceededError(
                f"the session's budget allows no more turns ({limit} limit reached)",
                limit=limit,
                engine=engine,
            )
        self._limit = None
        self._cost = 0.0
        self._tokens = 0

    def wall_limit(self) -> float | None:
        return self.budget.remaining_wall_s()

    def on_delivery(self, message: Message) -> list[Message]:
        if message.init is not None and message.init.model:
            self._model = message.init.model
        usage = message.usage
        kind = message.type
        if usage is None or kind is MessageType.RESULT or kind is MessageType.CONTEXT_WINDOW:
            return []
        # Per-call usage reported during the turn: the turn's spending so far (its cost
        # estimated where the agent gives tokens only).
        tokens = tokens_of(usage)
        cost = usage.cost_usd
        if cost is None and tokens:
            cost = estimate_cost(usage, self._model)
        self._cost += cost or 0.0
        self._tokens += tokens
        limit = self.budget.limit_reached(self._cost, self._tokens)
        if limit in ("cost", "tokens") and self._limit is None:
            self._limit = limit
        return []

    def settle(
        self, summary: TurnSummary, *, engine: str, number: int, ran_out_of_wall: bool
    ) -> PolicyStop | None:
        usage = summary.usage
        if usage is not None and summary.has_result:
            self.budget.spend(usage)
        else:
            self.budget.spend_partial(self._cost, self._tokens)
        limit = self._limit or ("wall" if ran_out_of_wall else None)
        if limit is None:
            return None
        error = None
        if self.budget.raise_on_exceed:
            error = BudgetExceededError(
                f"{engine} turn {number} reached the session budget's {limit} limit "
                "and was stopped",
                limit=limit,
                engine=engine,
            )
        return PolicyStop(limit=limit, stop_reason="budget", error=error)


class _Chain:
    """Several policies as one."""

    def __init__(self, policies: Sequence[TurnPolicy]) -> None:
        self.policies = tuple(policies)
        self.max_notes = sum(p.max_notes for p in self.policies)

    @property
    def stopping(self) -> bool:
        return any(p.stopping for p in self.policies)

    def admit(self, engine: str) -> None:
        for policy in self.policies:
            policy.admit(engine)

    def wall_limit(self) -> float | None:
        limits = [w for p in self.policies if (w := p.wall_limit()) is not None]
        return min(limits) if limits else None

    def on_delivery(self, message: Message) -> list[Message]:
        notes: list[Message] = []
        for policy in self.policies:
            notes += policy.on_delivery(message)
        return notes

    def settle(
        self, summary: TurnSummary, *, engine: str, number: int, ran_out_of_wall: bool
    ) -> PolicyStop | None:
        stop = None
        for policy in self.policies:
            found = policy.settle(
                summary, engine=engine, number=number, ran_out_of_wall=ran_out_of_wall
            )
            stop = stop or found
        return stop


def session_policy(options: SessionOptions) -> TurnPolicy | None:
    """The policy a session's turns answer to, or ``None`` when it has none."""
    policies: list[TurnPolicy] = []
    if options.context_policy is not None:
        policies.append(ContextThresholds(options.context_policy))
    if options.budget is not None:
        policies.append(BudgetGuard(options.budget, options.model))
    if not policies:
        return None
    return policies[0] if len(policies) == 1 else _Chain(policies)
