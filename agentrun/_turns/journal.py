"""The journal observer: what a session with ``SessionOptions(journal=...)`` writes to its store.

It is an :class:`~.observe.Observer` of that one session (not a registered global one), so a
session without a journal pays one check per message. Records are described in
:mod:`agentrun._vocabulary.journal`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._vocabulary.journal import JsonlSessionStore, SessionStore, new_journal_id

if TYPE_CHECKING:
    from .._vocabulary.errors import AgentrunError
    from .._vocabulary.messages import Message
    from .session import Session
    from .turn import Turn

__all__ = ["JournalObserver", "journal_observer"]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class JournalObserver:
    """Writes one session's journal to ``store`` under :attr:`journal_id`."""

    def __init__(self, store: SessionStore, journal_id: str | None = None) -> None:
        self.store: SessionStore = store
        self.journal_id: str = journal_id or new_journal_id()
        self._resume_id: str | None = None

    def _append(self, kind: str, **fields: Any) -> None:
        self.store.append(self.journal_id, {"kind": kind, "at": _now(), **fields})

    def _resume(self, current: str | None) -> dict[str, Any]:
        """``resume_id`` for a record, when it changed since the journal last said it."""
        if current is None or current == self._resume_id:
            return {}
        self._resume_id = current
        return {"resume_id": current}

    def session_started(self, session: Session) -> None:
        self._resume_id = session.resume_id
        self._append(
            "session",
            id=self.journal_id,
            engine=session.engine_name,
            options=session.options.masked_dump(),
            resume_id=session.resume_id,
        )

    def session_closed(self, session: Session) -> None:
        self._append("closed", turns=session.turns)
        close = getattr(self.store, "close", None)
        if callable(close):
            close(self.journal_id)
        else:
            self.store.sync(self.journal_id)

    def turn_started(self, turn: Turn) -> None:
        self._append("turn", turn=turn.number, prompt=turn.prompt)

    def message(self, turn: Turn, message: Message) -> None:
        record: dict[str, Any] = {"message": message.model_dump(mode="json", exclude_none=True)}
        if message.resume_id is not None and message.resume_id != self._resume_id:
            self._resume_id = message.resume_id
            record["resume_id"] = message.resume_id
        self._append("message", **record)

    def turn_ended(self, turn: Turn, error: AgentrunError | None) -> None:
        self._append(
            "summary",
            turn=turn.number,
            summary=turn.summary.model_dump(mode="json", exclude_none=True),
            text=turn.summary.text,
            error=None if error is None else error.error_code,
            **self._resume(turn.summary.resume_id),
        )
        self.store.sync(self.journal_id)

    def spawn_env(self, session: Session) -> dict[str, str]:
        return {}


def journal_observer(journal: SessionStore | bool | None) -> JournalObserver | None:
    """The observer for ``SessionOptions.journal`` (``None`` when no journal is asked for)."""
    if journal is None or journal is False:
        return None
    store: SessionStore = JsonlSessionStore() if journal is True else journal
    # A store with a ``journal_id`` of its own goes on with that journal (a resumed session).
    fixed = getattr(store, "journal_id", None)
    return JournalObserver(store, fixed if isinstance(fixed, str) else None)
