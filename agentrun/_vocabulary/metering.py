"""Metering: a turn's usage as the model calls' other end counted it, set beside the agent's.

A session whose model calls go through a metering credential proxy
(:class:`~agentrun.CredentialProxy`) can be given the proxy's meter for it
(``SessionOptions(meter=proxy.client(...))``). The turn then asks the meter, when it ends,
what the proxy metered for it (:class:`MeteredUsage`, on ``TurnSummary.metered``): a
disagreement with the agent's own figures becomes a summary error with code
``usage_mismatch``, and a turn during which the proxy refused a call for its budget stops with
``budget``. :class:`UsageMeter` is what a turn asks of a meter; the proxy's is the one the
library provides.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .messages import ErrorInfo, Usage

if TYPE_CHECKING:
    from .summary import TurnSummary

__all__ = ["USAGE_MISMATCH", "MeteredUsage", "UsageMeter", "mismatch_error"]

#: The code of the summary error that says the agent's usage is not the proxy's.
USAGE_MISMATCH = "usage_mismatch"


class MeteredUsage(BaseModel):
    """What the proxy metered for one turn of one session (its client), beside the summary's
    own ``usage``."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    #: The proxy client (one per session) the calls came with.
    client: str | None = None
    #: The turn's calls of the conversation: their usage summed, and how many.
    usage: Usage
    calls: int = 0
    #: The side calls (session titles, prompt suggestions) metered during the turn.
    side_usage: Usage | None = None
    side_calls: int = 0
    #: Every metered call of the turn at the price catalog's prices (``None``: a model unpriced).
    cost_usd: float | None = None
    #: The turn's calls the proxy refused because a budget was spent.
    refused: int = Field(default=0, ge=0)
    #: Whether every figure the agent reported is the proxy's; if not, which are not.
    agrees: bool = True
    disagreement: str | None = None
    #: Why the proxy refuses further calls of this session (its own budget or the proxy's),
    #: ``None`` while the budgets last.
    budget_spent: str | None = None


def mismatch_error(metered: MeteredUsage) -> ErrorInfo | None:
    """The summary error a disagreement becomes (``None`` when the figures agree)."""
    if metered.disagreement is None:
        return None
    return ErrorInfo(
        message=f"the usage differs from the proxy's metering: {metered.disagreement}",
        code=USAGE_MISMATCH,
    )


class UsageMeter(ABC):
    """What a turn asks of the meter of its session (``SessionOptions.meter``): a mark when it
    starts, and when it ends what was metered since that mark for this session."""

    @abstractmethod
    def mark(self) -> int:
        """A mark of the present, taken when a turn starts."""

    @abstractmethod
    async def metered_since(self, mark: int, summary: TurnSummary) -> MeteredUsage:
        """What was metered for this session since ``mark``, compared with ``summary`` (the
        turn's, complete but for this). Waits (bounded) for the answers still being written."""
