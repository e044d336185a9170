"""Per-turn figures from an agent's running totals.

Some agents report usage as a running total: Codex ``exec`` prints the thread's cumulative token
counts at the end of every process (and a resumed thread's total includes the turns earlier
processes ran); ACP agents report a session's cumulative cost. A turn's own figure is the
difference from the previous total of the same thread. :class:`RunningTotals` keeps that
previous total and says how much it knows:

* ``"derived"``: the difference from a total seen earlier (or primed from the agent's records);
* ``"cumulative"``: no earlier total is known (a thread resumed by a new library process), so
  the figure returned is the running total itself, and callers must say so;
* a total that went *down* (the agent reset its counters, a new thread under the same key) is
  taken as the turn's own figure, never as a negative one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

__all__ = ["Figures", "RunningTotals", "TotalsScope"]

Figures = Mapping[str, int | float]
TotalsScope = Literal["derived", "cumulative"]


class RunningTotals:
    """The last running total of one thread; :meth:`advance` returns a turn's own figures."""

    __slots__ = ("_last",)

    def __init__(self, last: Figures | None = None) -> None:
        self._last: dict[str, int | float] | None = dict(last) if last is not None else None

    @property
    def known(self) -> bool:
        """Whether an earlier total is known (the next :meth:`advance` can difference)."""
        return self._last is not None

    def prime(self, total: Figures) -> None:
        """Remember ``total`` as the thread's latest running total (e.g. read from the agent's
        own records before the next turn)."""
        self._last = dict(total)

    def advance(self, total: Figures) -> tuple[dict[str, int | float], TotalsScope]:
        """The figures of the turn that brought the running total to ``total``."""
        last, self._last = self._last, dict(total)
        if last is None:
            return dict(total), "cumulative"
        if any(value < last.get(key, 0) for key, value in total.items()):
            # The counters went back: they restarted, so this total is the turn's own.
            return dict(total), "derived"
        return {key: value - last.get(key, 0) for key, value in total.items()}, "derived"
