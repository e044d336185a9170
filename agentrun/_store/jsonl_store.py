"""Session journals on disk: :class:`JsonlSessionStore`, the built-in
:class:`~agentrun.SessionStore`, and reading journal lines back (:func:`read_records`).

What a journal holds (its records) is described with the store's protocol in
:mod:`agentrun._vocabulary.session_store`. :class:`JsonlSessionStore` keeps one ``<id>.jsonl``
file per session in a directory (:func:`default_sessions_dir` by default), written line-buffered
and fsynced at each turn's end. A crash mid-write loses at most the last line; :func:`read_records`
skips a torn last line. A journal is private to its user (``0600``; a directory the store makes,
``0700``) and held by one session at a time: the store takes an exclusive ``flock`` on the file
while it writes it, which the system lets go when the file is closed or the process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

from .._vocabulary.errors import ConfigurationError, JournalError, JournalInUseError

__all__ = [
    "SESSIONS_DIR_ENV",
    "JsonlSessionStore",
    "default_sessions_dir",
    "new_journal_id",
    "read_records",
]

#: The environment variable naming the directory of the default journal store.
SESSIONS_DIR_ENV = "AGENTRUN_SESSIONS_DIR"

#: The most a journal file may hold to be read (about half a million message records).
MAX_JOURNAL_BYTES = 256 * 1024 * 1024
#: The most one record (one line) may hold, as an agent's line may.
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: How deep a record may nest: a message (cut at 100 levels when it was read) in its record.
MAX_RECORD_NESTING = 128

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


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


def _nested_deeper(value: object, limit: int) -> bool:
    """Whether ``value`` has containers nested deeper than ``limit`` (iterative)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = cast("dict[str, object]", item).values()
        elif isinstance(item, list):
            children = cast("list[object]", item)
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _no_constant(name: str) -> None:
    """``NaN`` and ``Infinity`` (which Python writes, and JSON has not) read as ``null``."""


def read_records(
    lines: Iterator[str] | list[str], *, source: str = "journal"
) -> list[dict[str, Any]]:
    """Parse journal lines. A last line that is not a whole JSON object (a write torn by a
    crash) is skipped; a damaged line before it is a :class:`ConfigurationError`, and so is a
    record larger than :data:`MAX_RECORD_BYTES` or nested deeper than
    :data:`MAX_RECORD_NESTING`. ``NaN`` and ``Infinity`` read as ``null``."""
    texts = [line for line in lines if line.strip()]
    records: list[dict[str, Any]] = []
    for index, text in enumerate(texts):
        last = index == len(texts) - 1
        record: object = None
        if len(text) <= MAX_RECORD_BYTES:
            try:
                record = json.loads(text, parse_constant=_no_constant)
            except (json.JSONDecodeError, RecursionError):
                record = None
        if not isinstance(record, dict) or _nested_deeper(
            cast("dict[str, Any]", record), MAX_RECORD_NESTING
        ):
            if last:
                break
            raise ConfigurationError(f"{source} is damaged at record {index + 1}", option="session")
        records.append(cast("dict[str, Any]", record))
    return records


class JsonlSessionStore:
    """Journals as ``<directory>/<id>.jsonl`` files (``directory`` defaults to
    :func:`default_sessions_dir`). Appends are line-buffered; :meth:`sync` fsyncs."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, journal_id: str | None = None
    ) -> None:
        self.directory: Path = Path(directory) if directory is not None else default_sessions_dir()
        #: The journal a session with this store goes on with (its earlier turns and totals
        #: included), for a session that resumes a journaled one; ``None``: each session
        #: begins a new journal.
        self.journal_id: str | None = None if journal_id is None else check_journal_id(journal_id)
        self._files: dict[str, IO[str]] = {}

    def __repr__(self) -> str:
        if self.journal_id is not None:
            return f"JsonlSessionStore({str(self.directory)!r}, journal_id={self.journal_id!r})"
        return f"JsonlSessionStore({str(self.directory)!r})"

    def path(self, journal_id: str) -> Path:
        return self.directory / f"{check_journal_id(journal_id)}.jsonl"

    def open(self, journal_id: str) -> None:
        """Take the journal ``journal_id`` for one session: create it if new (``0600``, in a
        ``0700`` directory when the store makes it) and lock it. :class:`JournalInUseError` if
        a session holds it (in this process or another), :class:`JournalError` if it cannot be
        written. Closed (and let go) by :meth:`close`."""
        if journal_id in self._files:
            raise JournalInUseError(
                f"session {journal_id} is in use by another session of this process",
                journal_id=journal_id,
            )
        self._files[journal_id] = self._locked(journal_id)

    def _locked(self, journal_id: str) -> IO[str]:
        path = self.path(journal_id)
        where = f"session journal {journal_id} in {self.directory}"
        try:
            if not self.directory.is_dir():
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Not waiting for a reader of a FIFO by that name: it is refused below.
            fd = os.open(
                path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o600
            )
        except OSError as exc:
            raise JournalError(
                f"cannot write {where}: {exc.strerror or exc}", journal_id=journal_id
            ) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise JournalError(f"{path} is not a file", journal_id=journal_id)
            os.set_blocking(fd, True)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JournalInUseError(
                    f"session {journal_id} is in use (another session is writing its journal)",
                    journal_id=journal_id,
                ) from None
            return open(fd, "a", encoding="utf-8", buffering=1)
        except BaseException:
            os.close(fd)
            raise

    def append(self, journal_id: str, record: dict[str, Any]) -> None:
        handle = self._files.get(journal_id)
        if handle is None:
            self.open(journal_id)
            handle = self._files[journal_id]
        try:
            handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        except OSError as exc:
            raise self._write_error(journal_id, exc) from exc

    def _write_error(self, journal_id: str, exc: OSError) -> JournalError:
        return JournalError(
            f"cannot write session journal {journal_id} in {self.directory}: {exc.strerror or exc}",
            journal_id=journal_id,
        )

    def sync(self, journal_id: str) -> None:
        handle = self._files.get(journal_id)
        if handle is not None:
            try:
                handle.flush()
                os.fsync(handle.fileno())
            except OSError as exc:
                raise self._write_error(journal_id, exc) from exc

    def close(self, journal_id: str) -> None:
        """Sync and close the file of ``journal_id``, letting it go (appending again reopens
        it). The file is closed even when the sync fails (:class:`JournalError`)."""
        handle = self._files.pop(journal_id, None)
        if handle is None:
            return
        try:
            handle.flush()
            os.fsync(handle.fileno())
        except OSError as exc:
            raise self._write_error(journal_id, exc) from exc
        finally:
            with contextlib.suppress(OSError):  # the descriptor is closed all the same
                handle.close()

    def records(self, journal_id: str) -> list[dict[str, Any]]:
        path = self.path(journal_id)
        try:
            # Not waiting for a writer of a FIFO by that name: only a file is read.
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ConfigurationError(
                f"no session {journal_id!r} in {self.directory}", option="session"
            ) from None
        except OSError as exc:  # the directory is a file, unreadable
            raise self._unreadable(journal_id, exc.strerror or str(exc)) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # a directory, a FIFO, a device
                raise self._unreadable(journal_id, "not a file")
            if info.st_size > MAX_JOURNAL_BYTES:
                raise self._too_large(journal_id)
            with open(fd, "rb", closefd=False) as handle:
                data = handle.read(MAX_JOURNAL_BYTES + 1)
        except OSError as exc:
            raise self._unreadable(journal_id, exc.strerror or str(exc)) from None
        finally:
            os.close(fd)
        if len(data) > MAX_JOURNAL_BYTES:
            raise self._too_large(journal_id)
        text = data.decode("utf-8", errors="replace")
        return read_records(text.split("\n"), source=f"session {journal_id}")

    def _too_large(self, journal_id: str) -> ConfigurationError:
        return self._unreadable(journal_id, f"larger than {MAX_JOURNAL_BYTES} bytes")

    def _unreadable(self, journal_id: str, why: str) -> ConfigurationError:
        return ConfigurationError(
            f"cannot read session {journal_id!r} in {self.directory}: {why}", option="session"
        )

    def ids(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.jsonl") if _ID.fullmatch(p.stem))
