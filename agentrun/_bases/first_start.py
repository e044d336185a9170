"""A program's store on first start: one creator per store (OpenCode's, for ``opencode`` and
``opencode-acp``).

OpenCode keeps its sessions in one SQLite database per home
(``$XDG_DATA_HOME/opencode/opencode.db``) and creates and migrates it when a process first starts
on that home. Processes that start together on a home without one each run the migration: the
losers exit with "database is locked" or a failed ``CREATE TABLE`` (measured: 1 to 3 of 8
``opencode`` / ``opencode acp`` starts on a fresh home; none on a home whose store exists).

So every start of either engine first takes a lock of that store (``flock`` on a file of the
library's own in the temporary directory, named after the store's path): with a store present it
lets go at once; without one the start holds it until its agent has made the store (the first
line of ``opencode run``, the opened session of ``opencode acp``), and the starts waiting behind it
then find the store made. The wait is bounded; past it the start fails with a typed error rather
than racing the migration. Starts of other programs on the same home (an OpenCode the library
did not start) are not covered.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import anyio

from .._vocabulary.errors import SessionTerminatedError

__all__ = ["STORE_WAIT", "StoreLock", "opencode_database", "store_lock"]

#: How long a start waits for another start on the same home to make the store (seconds).
STORE_WAIT = 120.0
#: How often a waiting start tries the lock again (seconds).
_POLL = 0.05


def opencode_database(env: Mapping[str, str]) -> Path:
    """OpenCode's database for a process with environment ``env``
    (``$XDG_DATA_HOME/opencode/opencode.db``, ``~/.local/share`` by default)."""
    data = env.get("XDG_DATA_HOME")
    if not data:
        home = env.get("HOME") or os.path.expanduser("~")
        data = str(Path(home) / ".local" / "share")
    return Path(data) / "opencode" / "opencode.db"


def _lock_path(database: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(os.path.abspath(database))).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"agentrun-opencode-store-{digest}.lock"


def _made(database: Path) -> bool:
    """Whether the store exists (one stat: not worth a worker thread)."""
    return database.exists()


class StoreLock:
    """A held lock of one OpenCode store: :meth:`release` lets the next start go (idempotent)."""

    def __init__(self, fd: int, database: Path) -> None:
        self._fd: int | None = fd
        self.database = database

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


async def store_lock(database: Path, *, engine: str, wait: float = STORE_WAIT) -> StoreLock | None:
    """Wait (at most ``wait`` seconds) until no other start is making ``database``; the lock,
    still held, when the store does not exist yet (the caller's agent makes it and the caller
    releases the lock once it has), else ``None``. Past ``wait``:
    :class:`~agentrun.SessionTerminatedError`."""
    fd = os.open(_lock_path(database), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        with anyio.fail_after(wait):
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await anyio.sleep(_POLL)
    except TimeoutError:
        os.close(fd)
        raise SessionTerminatedError(
            f"{engine}: another start has been making OpenCode's store {database} for over "
            f"{wait:g}s; not starting beside it (concurrent first starts fail with "
            '"database is locked")',
            engine=engine,
        ) from None
    except BaseException:
        os.close(fd)
        raise
    lock = StoreLock(fd, database)
    if _made(database):
        lock.release()
        return None
    return lock
