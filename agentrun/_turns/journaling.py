"""The journal observer: what a session with ``SessionOptions(journal=...)`` writes to its store.

It is an :class:`~.observe.Observer` of that one session (not a registered global one), so a
session without a journal pays one check per message. Records are described in
:mod:`agentrun._vocabulary.session_store`.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from .._store.jsonl_store import JsonlSessionStore, new_journal_id
from .._vocabulary.errors import JournalError
from .._vocabulary.messages import ErrorInfo
from .._vocabulary.session_store import SessionStore
from .._vocabulary.summary import SessionTotals

if TYPE_CHECKING:
    from .._vocabulary.errors import AgentrunError
    from .._vocabulary.messages import Message
    from .session import Session
    from .turn import Turn

__all__ = ["JournalObserver", "journal_observer"]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class JournalObserver:
    """Writes one session's journal to ``store`` under :attr:`journal_id`.

    The store is opened (for the built-in one: locked) when the session starts; a store that
    fails then is a :class:`JournalError` and the session does not start. A store that fails
    later ends the journal there: the turn goes on and its summary's ``errors`` has an entry
    with code ``journal``; :attr:`error` keeps the failure, which the session's close raises."""

    def __init__(self, store: SessionStore, journal_id: str | None = None) -> None:
        self.store: SessionStore = store
        #: The journal goes on from an earlier process (the store named it).
        self.continuing: bool = journal_id is not None
        self.journal_id: str = journal_id or new_journal_id()
        #: The totals of the turns the journal held when the session started (read then).
        self.earlier_totals: SessionTotals = SessionTotals()
        self._resume_id: str | None = None
        #: True while records are written: from the session's start until it closes or the
        #: store fails.
        self.writing: bool = False
        self._opened = False
        #: Why the journal ended early (the store failed), if it did.
        self.error: JournalError | None = None
        self._raised = False

    def _append(self, kind: str, **fields: Any) -> None:
        self.store.append(self.journal_id, {"kind": kind, "at": _now(), **fields})

    def _failure(self, exc: Exception) -> JournalError:
        if isinstance(exc, JournalError):
            return exc
        return JournalError(
            f"cannot write session journal {self.journal_id}: {exc}", journal_id=self.journal_id
        )

    def _broke(self, exc: Exception, turn: Turn | None) -> None:
        """The store failed during the session: no more records; the turn is told."""
        self.writing = False
        error = self._failure(exc)
        if error.__cause__ is None and error is not exc:
            error.__cause__ = exc
        if self.error is None:
            self.error = error
        if turn is not None:
            turn.summary.errors.append(ErrorInfo(message=error.message, code=error.error_code))

    def take_error(self) -> JournalError | None:
        """:attr:`error`, the first time it is asked for (the session raises it once)."""
        if self._raised or self.error is None:
            return None
        self._raised = True
        return self.error

    def _resume(self, current: str | None) -> dict[str, Any]:
        """``resume_id`` for a record, when it changed since the journal last said it."""
        if current is None or current == self._resume_id:
            return {}
        self._resume_id = current
        return {"resume_id": current}

    def session_started(self, session: Session) -> None:
        self._resume_id = session.resume_id
        opener = getattr(self.store, "open", None)
        try:
            if callable(opener):
                opener(self.journal_id)
            self._opened = True
            if self.continuing and self.journal_id in self.store.ids():
                self.earlier_totals = SessionTotals.from_journal(
                    self.store.records(self.journal_id)
                )
            self._append(
                "session",
                id=self.journal_id,
                engine=session.engine_name,
                options=session.options.masked_dump(),
                resume_id=session.resume_id,
            )
        except Exception as exc:
            error = self._failure(exc)
            if self._opened:
                self._opened = False
                with contextlib.suppress(Exception):
                    self._let_go()
            if error is exc:
                raise
            raise error from exc
        self.writing = True

    def _let_go(self) -> None:
        close = getattr(self.store, "close", None)
        if callable(close):
            close(self.journal_id)
        else:
            self.store.sync(self.journal_id)

    def session_closed(self, session: Session) -> None:
        if not self._opened:
            return
        self._opened = False
        try:
            if self.writing:
                self.writing = False
                self._append("closed", turns=session.turns, totals=_dump(session.totals))
            self._let_go()
        except Exception as exc:
            self._broke(exc, None)

    def turn_started(self, turn: Turn) -> None:
        if not self.writing:
            return
        try:
            self._append("turn", turn=turn.number, prompt=turn.prompt)
        except Exception as exc:
            self._broke(exc, turn)

    def message(self, turn: Turn, message: Message) -> None:
        if not self.writing:
            return
        record: dict[str, Any] = {"message": message.model_dump(mode="json", exclude_none=True)}
        if message.resume_id is not None and message.resume_id != self._resume_id:
            self._resume_id = message.resume_id
            record["resume_id"] = message.resume_id
        try:
            self._append("message", **record)
        except Exception as exc:
            self._broke(exc, turn)

    def turn_ended(self, turn: Turn, error: AgentrunError | None) -> None:
        if not self.writing:
            return
        try:
            self._append(
                "summary",
                turn=turn.number,
                summary=turn.summary.model_dump(mode="json", exclude_none=True),
                text=turn.summary.text,
                error=None if error is None else error.error_code,
                totals=_dump(turn.session.totals),
                **self._resume(turn.summary.resume_id),
            )
            self.store.sync(self.journal_id)
        except Exception as exc:
            self._broke(exc, turn)

    def spawn_env(self, session: Session) -> dict[str, str]:
        return {}


def _dump(totals: SessionTotals) -> dict[str, Any]:
    # An unknown cost is written as null: left out, it would read back as the default, 0.
    return {**totals.model_dump(mode="json", exclude_none=True), "cost_usd": totals.cost_usd}


def journal_observer(journal: SessionStore | bool | None) -> JournalObserver | None:
    """The observer for ``SessionOptions.journal`` (``None`` when no journal is asked for)."""
    if journal is None or journal is False:
        return None
    store: SessionStore = JsonlSessionStore() if journal is True else journal
    # A store with a ``journal_id`` of its own goes on with that journal (a resumed session).
    fixed = getattr(store, "journal_id", None)
    return JournalObserver(store, fixed if isinstance(fixed, str) else None)
