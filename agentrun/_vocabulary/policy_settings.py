"""What a session does as it runs, on every engine alike: context thresholds and a budget.

Both work on the normalized stream, so they behave the same whatever agent runs.

* :class:`ContextPolicy` — a ``context_threshold`` message the first time the session's context
  fill crosses each configured fraction (default 0.75, 0.90, 0.95), with the reading and its
  provenance; a threshold is armed again once the fill drops below it (after a compaction).
  With ``action="compact"`` the session also compacts after a turn that leaves it past
  ``compact_at``, on engines that can. ``SessionOptions(context_policy=None)`` turns it off.
* :class:`Budget` — limits on cost, tokens, turns and wall time, for one session or shared by
  several. A turn that would start beyond a limit is refused with :class:`BudgetExceededError`
  before anything is sent; a turn that crosses the cost or token limit while it runs is
  interrupted through the engine's cancellation path, its summary's ``stop_reason`` is
  ``"budget"``, and :class:`BudgetExceededError` is raised (or, with ``raise_on_exceed=False``,
  the summary is returned); the wall-time limit bounds each turn like a timeout.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import configuration_error
from .messages import ContextWindow, Message, MessageType, Usage

__all__ = ["Budget", "BudgetLimit", "ContextPolicy"]

#: Which limit of a :class:`Budget` was reached.
BudgetLimit = Literal["cost", "tokens", "turns", "wall"]


class ContextPolicy(BaseModel):
    """When to tell the caller that the session's context is filling up."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    #: Fractions of the context window, each announced once per crossing.
    thresholds: tuple[float, ...] = (0.75, 0.90, 0.95)
    #: What happens at a crossing: ``"notify"`` (a ``context_threshold`` message only);
    #: ``"compact"``: also, when a turn ends with the fill at ``compact_at`` or above,
    #: :func:`~agentrun.run_turn` compacts the context before it returns where the agent can
    #: (``Session.can_compact``), else hands off (``Session.can_handoff``), else stays at
    #: notify; ``"handoff"``: hands off there, else compacts, else notifies.
    action: Literal["notify", "compact", "handoff"] = "notify"
    #: The fill from which ``action="compact"`` compacts.
    compact_at: float = Field(default=0.9, gt=0, le=1)
    #: Seconds a compaction may take.
    compact_timeout: float = Field(default=600.0, gt=0)

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as exc:
            raise configuration_error(exc, "context policy") from None

    @field_validator("thresholds")
    @classmethod
    def _fractions(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < t <= 1 for t in value):
            raise ValueError("thresholds are fractions of the window, above 0 and at most 1")
        return tuple(sorted(set(value)))


class ContextGauge:
    """One session's threshold state: which thresholds are armed."""

    def __init__(self, policy: ContextPolicy) -> None:
        self.policy = policy
        self._crossed: set[float] = set()

    def observe(self, reading: ContextWindow) -> list[Message]:
        """The ``context_threshold`` messages a new reading sets off (usually none)."""
        fraction = reading.fraction
        if fraction is None:
            return []
        out: list[Message] = []
        for threshold in self.policy.thresholds:
            if fraction >= threshold and threshold not in self._crossed:
                self._crossed.add(threshold)
                out.append(
                    Message(
                        type=MessageType.CONTEXT_THRESHOLD,
                        context=reading,
                        text=f"context {fraction:.0%} full (crossed {threshold:.0%})",
                        data={"threshold": threshold, "fraction": round(fraction, 6)},
                    )
                )
            elif fraction < threshold:
                self._crossed.discard(threshold)  # armed again (the fill dropped)
        return out


class Budget(BaseModel):
    """Limits for one session, or for several sharing this object (it counts what they spend).

    ``max_tokens`` counts every token a turn's model calls processed: input, cache reads and
    writes, and output. Cost and tokens are taken from the turn's usage (the figures the agent
    reports, or the library derives from its running totals); during a turn, from the per-call
    usage the engine reports as it goes, where it does (Claude Code).
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid", validate_assignment=False)

    max_cost_usd: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    max_turns: int | None = Field(default=None, gt=0)
    max_wall_s: float | None = Field(default=None, gt=0)
    #: ``False``: a turn stopped by the budget returns its summary (``stop_reason="budget"``)
    #: instead of raising :class:`BudgetExceededError`.
    raise_on_exceed: bool = True

    #: What the sessions spent so far (finished turns).
    spent_cost_usd: float = 0.0
    spent_tokens: int = 0
    turns: int = 0
    #: ``time.monotonic()`` when the first turn started.
    started_at: float | None = None

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as exc:
            raise configuration_error(exc, "budget") from None

    def remaining_wall_s(self) -> float | None:
        if self.max_wall_s is None:
            return None
        if self.started_at is None:
            return self.max_wall_s
        return self.max_wall_s - (time.monotonic() - self.started_at)

    def limit_reached(self, cost_usd: float = 0.0, tokens: int = 0) -> BudgetLimit | None:
        """The first limit that spending ``cost_usd`` and ``tokens`` more would reach."""
        if self.max_cost_usd is not None and self.spent_cost_usd + cost_usd >= self.max_cost_usd:
            return "cost"
        if self.max_tokens is not None and self.spent_tokens + tokens >= self.max_tokens:
            return "tokens"
        remaining = self.remaining_wall_s()
        if remaining is not None and remaining <= 0:
            return "wall"
        return None

    def start_turn(self) -> BudgetLimit | None:
        """Count a turn that is about to start; the limit that forbids it, if one does."""
        if self.max_turns is not None and self.turns >= self.max_turns:
            return "turns"
        reached = self.limit_reached()
        if reached is not None:
            return reached
        if self.started_at is None:
            self.started_at = time.monotonic()
        self.turns += 1
        return None

    def spend(self, usage: Usage | None) -> None:
        """Add a finished turn's usage."""
        if usage is None:
            return
        self.spend_partial(usage.cost_usd or 0.0, tokens_of(usage))

    def spend_partial(self, cost_usd: float, tokens: int) -> None:
        """Add what a turn without a final usage figure spent as far as it was reported."""
        self.spent_cost_usd += cost_usd
        self.spent_tokens += tokens


def tokens_of(usage: Usage) -> int:
    """Every token of a usage figure: input, cache reads and writes, output (and the output
    reported without its thinking)."""
    return (usage.prompt_tokens or 0) + (usage.output_tokens or 0) + (usage.answer_tokens or 0)
