"""Session journals: durable, append-only records of sessions, so that they outlive the process.

A journal is a sequence of JSON records, one per line, that a :class:`SessionStore` keeps under
a journal id. The library writes (see :mod:`agentrun._turns.journal`): a ``session`` record
(engine, start time, options with environment values masked), a ``turn`` record with each
prompt, a ``message`` record for every normalized message as it arrives, a ``summary`` record
at each turn's end (the store is synced then), and a ``closed`` record. Any record may carry the
agent's latest ``resume_id``.

:class:`JsonlSessionStore` is the built-in store: one ``<id>.jsonl`` file per session in a
directory (:func:`default_sessions_dir` by default), written line-buffered and fsynced at each
turn's end. A crash mid-write loses at most the last line; :func:`read_records` skips a torn
last line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from .errors import ConfigurationError

__all__ = [
    "SESSIONS_DIR_ENV",
    "JsonlSessionStore",
    "SessionStore",
    "default_sessions_dir",
    "new_journal_id",
    "read_records",
]

#: The environment variable naming the directory of the default journal store.
SESSIONS_DIR_ENV = "AGENTRUN_SESSIONS_DIR"

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


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


def default_sessions_dir() -> Path:
    """``$AGENTRUN_SESSIONS_DIR``, else ``$XDG_DATA_HOME/agentrun/sessions`` (default
    ``~/.local/share/agentrun/sessions``)."""
    explicit = os.environ.get(SESSIONS_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path("~/.local/share").expanduser())
    return Path(data).expanduser() / "agentrun" / "sessions"


def new_journal_id() -> str:
    """A fresh journal id that sorts by creation time: ``20260125T101530-3f9a1c``."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def check_journal_id(journal_id: str) -> str:
    """``journal_id`` if it can name a journal (letters, digits, ``_.-``), else a
    :class:`ConfigurationError`."""
    if not isinstance(journal_id, str) or not _ID.fullmatch(journal_id):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigurationError(f"{journal_id!r} is not a session id", option="session")
    return journal_id


def read_records(
    lines: Iterator[str] | list[str], *, source: str = "journal"
) -> list[dict[str, Any]]:
    """Parse journal lines. A last line that is not a whole JSON object (a write torn by a
    crash) is skipped; a damaged line before it is a :class:`ConfigurationError`."""
    texts = [line for line in lines if line.strip()]
    records: list[dict[str, Any]] = []
    for index, text in enumerate(texts):
        last = index == len(texts) - 1
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            if last:
                break
            raise ConfigurationError(
                f"{source} is damaged at record {index + 1}", option="session"
            ) from None
        if not isinstance(record, dict):
            if last:
                break
            raise ConfigurationError(f"{source} is damaged at record {index + 1}", option="session")
        records.append(record)  # pyright: ignore[reportUnknownArgumentType]
    return records


class JsonlSessionStore:
    """Journals as ``<directory>/<id>.jsonl`` files (``directory`` defaults to
    :func:`default_sessions_dir`). Appends are line-buffered; :meth:`sync` fsyncs."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory: Path = Path(directory) if directory is not None else default_sessions_dir()
        self._files: dict[str, IO[str]] = {}

    def __repr__(self) -> str:
        return f"JsonlSessionStore({str(self.directory)!r})"

    def path(self, journal_id: str) -> Path:
        return self.directory / f"{check_journal_id(journal_id)}.jsonl"

    def append(self, journal_id: str, record: dict[str, Any]) -> None:
        handle = self._files.get(journal_id)
        if handle is None:
            path = self.path(journal_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = path.open("a", encoding="utf-8", buffering=1)
            self._files[journal_id] = handle
        handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")

    def sync(self, journal_id: str) -> None:
        handle = self._files.get(journal_id)
        if handle is not None:
            handle.flush()
            os.fsync(handle.fileno())

    def close(self, journal_id: str) -> None:
        """Sync and close the file of ``journal_id`` (appending again reopens it)."""
        handle = self._files.pop(journal_id, None)
        if handle is not None:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()

    def records(self, journal_id: str) -> list[dict[str, Any]]:
        path = self.path(journal_id)
        try:
            with path.open(encoding="utf-8", errors="replace") as handle:
                return read_records(list(handle), source=f"session {journal_id}")
        except FileNotFoundError:
            raise ConfigurationError(
                f"no session {journal_id!r} in {self.directory}", option="session"
            ) from None
        except OSError as exc:  # the directory is a file, the journal a directory, unreadable
            raise ConfigurationError(
                f"cannot read session {journal_id!r} in {self.directory}: {exc.strerror or exc}",
                option="session",
            ) from None

    def ids(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.jsonl") if _ID.fullmatch(p.stem))
