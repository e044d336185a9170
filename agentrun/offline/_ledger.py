"""The model server's usage ledger: what it served, request by request, and what that cost.

The server knows exactly which tokens it reported in each answer, so the ledger is the reference
an engine's ``summary.usage`` can be checked against. Every request addressed to a model API
(Anthropic Messages, Responses, Chat Completions, Gemini) gets one :class:`LedgerEntry` once its
answer is written: the usage object in the API's own terms (``reported``) and the same figures
in the library's convention (``usage``: ``input_tokens`` without the cache, ``output_tokens``
with the thinking), whether it was a side request and which, the API, the model, the HTTP status
and the time. An answer that reports no usage (an HTTP error, a stream cut by an error before
its usage) is an entry with zero tokens. ``count_tokens`` calls, health checks and unknown
routes are not model calls and have no entry.

The server cannot know where a caller's turn begins, so the caller marks it:
``mark = server.ledger.mark()`` before the turn, ``server.ledger.since(mark)`` after it
(a :class:`LedgerSlice`: totals of the main and side requests, the cost at catalog prices).
The ledger may be read from any thread while the server runs in another.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from .._vocabulary.messages import Usage
from .._vocabulary.prices import PriceCatalog, default_prices
from ._requests import ApiKind

__all__ = ["ZERO_USAGE", "Ledger", "LedgerEntry", "LedgerSlice"]

#: The usage of an answer that reported none.
ZERO_USAGE = Usage(
    input_tokens=0, output_tokens=0, cache_read_tokens=0, cache_write_tokens=0, thinking_tokens=0
)


class _Frozen(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")


class LedgerEntry(_Frozen):
    """One model request the server answered, and the tokens its answer reported."""

    #: The request's ``RecordedRequest.seq`` (order of arrival, from 0).
    seq: int
    #: The API dialect that answered: ``anthropic``, ``responses``, ``chat`` or ``gemini``.
    api: ApiKind
    #: The model named in the request (the scripted ``ModelTurn.model`` when it overrides it);
    #: ``None`` for a body that is no JSON object.
    model: str | None
    #: The HTTP status of the answer.
    status: int
    #: The name of the :class:`~agentrun.offline.SideRequest` that answered it (a title, a
    #: prompt suggestion), or ``None`` for a call of the conversation.
    side_request: str | None = None
    #: Index into ``Script.turns`` of the scripted turn that answered, or ``None``.
    turn_index: int | None = None
    #: The script had no turns left (the fixed fallback text was sent).
    exhausted: bool = False
    #: The usage object of the answer exactly as the API states it (Anthropic's ``usage``,
    #: Chat Completions' ``usage``, Gemini's ``usageMetadata``...), or ``None`` when the answer
    #: carried none.
    reported: dict[str, Any] | None = None
    #: ``reported`` in the library's convention (see :class:`agentrun.Usage`); zeros when the
    #: answer carried no usage. A figure the API cannot carry is 0 (Chat Completions and Gemini
    #: have no cache-write figure: those tokens are input there).
    usage: Usage = ZERO_USAGE
    #: When the request had been read, and when its answer had been written (or abandoned).
    received_at: datetime
    answered_at: datetime
    #: The whole answer was written (``False``: the client went away, or the server stopped).
    complete: bool = True
    #: The metering proxy's client the request came with (one per session,
    #: :meth:`~agentrun.CredentialProxy.client`); ``None`` for the proxy's own ``client_key``
    #: and on the model server.
    client: str | None = None
    #: Why the metering proxy refused the call instead of forwarding it: ``budget`` (a budget
    #: was spent), ``no_key`` (no real key for its provider), ``upstream`` (the upstream could
    #: not be reached); ``None`` for a call forwarded, and on the model server.
    refusal: Literal["budget", "no_key", "upstream"] | None = None

    @property
    def is_side(self) -> bool:
        """A side request (session title, prompt suggestion), not a call of the conversation."""
        return self.side_request is not None


class LedgerSlice(_Frozen):
    """Some entries of the ledger, in order, with their totals."""

    entries: tuple[LedgerEntry, ...] = ()

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def main(self) -> LedgerSlice:
        """The calls of the conversation (no side requests)."""
        return LedgerSlice(entries=tuple(e for e in self.entries if not e.is_side))

    def of_client(self, client: str | None) -> LedgerSlice:
        """The entries of one metering-proxy client (``None``: the proxy's own key)."""
        return LedgerSlice(entries=tuple(e for e in self.entries if e.client == client))

    @property
    def side(self) -> LedgerSlice:
        """The side requests (session titles, prompt suggestions)."""
        return LedgerSlice(entries=tuple(e for e in self.entries if e.is_side))

    @property
    def usage(self) -> Usage:
        """The sum of the entries' normalized usage (zeros for no entry)."""
        return _total(e.usage for e in self.entries)

    def by_side_request(self) -> dict[str, Usage]:
        """The usage of the side requests, by side-request name."""
        names = dict.fromkeys(e.side_request for e in self.entries if e.side_request is not None)
        return {
            name: _total(e.usage for e in self.entries if e.side_request == name) for name in names
        }

    def cost(self, model: str | None = None, *, prices: PriceCatalog | None = None) -> float | None:
        """The US dollars these entries cost at the price catalog's prices (default: the
        library's, with ``$AGENTRUN_PRICE_CATALOG`` merged over it), priced as ``model`` or,
        when ``model`` is ``None``, each entry as its own model. ``None`` when a model with
        tokens has no price. The convention is the one of the library's estimates: cache
        reads at the cached-input price, cache writes at the cache-write price."""
        catalog = prices if prices is not None else default_prices()
        by_model: dict[str | None, list[Usage]] = {}
        for entry in self.entries:
            by_model.setdefault(model if model is not None else entry.model, []).append(entry.usage)
        total = 0.0
        for name, usages in by_model.items():
            usage = _total(usages)
            if usage == ZERO_USAGE:
                continue
            price = catalog.estimate(usage, name)
            if price is None:
                return None
            total += price
        return round(total, 10)


def _total(usages: Iterable[Usage]) -> Usage:
    total = ZERO_USAGE
    for usage in usages:
        total = total + usage
    return total


class Ledger:
    """The entries of every model request the server answered, in the order answered.

    ``mark()`` is the number of entries so far; ``since(mark)`` the entries answered after
    it. Safe to read from any thread while the server appends in its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[LedgerEntry] = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        """Every entry so far (a snapshot)."""
        with self._lock:
            return tuple(self._entries)

    def mark(self) -> int:
        """A mark of the present: pass it to :meth:`since` later."""
        return len(self)

    def since(self, mark: int) -> LedgerSlice:
        """The entries answered after ``mark`` (``since(0)``: all of them)."""
        with self._lock:
            return LedgerSlice(entries=tuple(self._entries[mark:]))

    def between(self, start: int, end: int) -> LedgerSlice:
        """The entries answered between two marks."""
        with self._lock:
            return LedgerSlice(entries=tuple(self._entries[start:end]))

    def append(self, entry: LedgerEntry) -> None:
        with self._lock:
            self._entries.append(entry)
