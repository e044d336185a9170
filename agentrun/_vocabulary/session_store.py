"""Session journals: durable, append-only records of sessions, so that they outlive the process.

A journal is a sequence of JSON records, one per line, that a :class:`SessionStore` keeps under
a journal id. The library writes (see :mod:`agentrun._turns.journaling`): a ``session`` record
(engine, start time, options with environment values masked), a ``turn`` record with each
prompt, a ``message`` record for every normalized message as it arrives, a ``summary`` record
at each turn's end (the store is synced then), and a ``closed`` record. Any record may carry the
agent's latest ``resume_id``.

This module is the store's protocol; the built-in store, which keeps each journal in a JSONL
file, is :class:`agentrun._store.jsonl_store.JsonlSessionStore`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["SessionStore"]


@runtime_checkable
class SessionStore(Protocol):
    """Where session journals are kept. Implement these four methods to keep them elsewhere."""

    def append(self, journal_id: str, record: dict[str, Any]) -> None:
        """Add one record to the journal ``journal_id`` (created by its first record)."""
        ...

    def sync(self, journal_id: str) -> None:
        """Make what was appended to ``journal_id`` durable (called at each turn's end)."""
        ...

    def records(self, journal_id: str) -> list[dict[str, Any]]:
        """The records of ``journal_id`` in order; :class:`ConfigurationError` if unknown."""
        ...

    def ids(self) -> list[str]:
        """Every journal id in the store, oldest first."""
        ...
