"""Kept homes for the embedded default, so an offline session can be resumed by a later process.

Each ``agentrun run`` on the embedded default gets its own directory under
:func:`offline_homes_dir` (``<engine>/<id>/``, holding the agent's configuration and HOME in
``agent/`` and the default workspace in ``workspace/``), never shared by two new sessions at
once. When the session ends, its resume id is written to an index (``<engine>/index/<resume
id>``, naming the directory), so ``agentrun run --resume ID`` and ``agentrun sessions resume``
find the same home, where the agent keeps its transcript, and the same workspace (Claude Code
files sessions by their working directory). A resume id the index does not know gets a fresh
home, where the agent reports ``session_not_found`` as it would anyway.

The homes are pruned: a run holds a shared lock on its home's ``.lock`` file while it uses it
(and touches it when it starts and ends, so its time is the home's last use); :func:`prune_homes`
removes the homes not used for a given time whose lock it can take exclusively — never one in
use — with the index entries that name them. Making a new home prunes, at most once a day, the
homes not used for :data:`DEFAULT_MAX_AGE` (``$AGENTRUN_OFFLINE_HOMES_MAX_AGE``; ``off`` never).

Pruning removes only what provably is a home this library made: a real directory (no symlink is
followed below the homes' directory) named as :func:`_new_home` names them, directly in an
engine's directory, holding the marker file :func:`_new_home` writes into it before it gets its
name. Anything else — someone's project when the variable names one, a home made before homes
carried the marker — is never touched; :func:`unmarked_homes` lists the directories that look
like homes but carry no marker, for a person to decide.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from .._vocabulary.errors import ConfigurationError

__all__ = [
    "DEFAULT_MAX_AGE",
    "MAX_AGE_ENV",
    "OFFLINE_HOMES_ENV",
    "PrunedHome",
    "max_age",
    "offline_home",
    "offline_homes_dir",
    "parse_age",
    "prune_homes",
    "remember_home",
    "unmarked_homes",
]

#: The environment variable naming the directory of the kept offline homes.
OFFLINE_HOMES_ENV = "AGENTRUN_OFFLINE_HOMES"
#: The environment variable of how long an unused home is kept (``30d``, ``12h``; ``off``).
MAX_AGE_ENV = "AGENTRUN_OFFLINE_HOMES_MAX_AGE"
#: Seconds a home is kept after its last use when nothing says otherwise: 30 days.
DEFAULT_MAX_AGE = 30 * 86400.0
#: Seconds between two automatic prunings.
_PRUNE_EVERY = 86400.0

_LOCK = ".lock"
_STAMP = ".last-prune"
_GONE = ".gone-"
_PARTIAL = ".new-"
_INDEX = "index"
#: The file a home is made with, and what it says: pruning removes no directory without it.
_MARKER = ".agentrun-offline-home"
_MARKER_TEXT = b"a home agentrun made for an offline session; pruning may remove it\n"
#: A home's name (``_new_home``): its creation time and a random tag; ``.new-`` while it is made.
_HOME_NAME = re.compile(r"(?:\.new-)?\d{8}T\d{6}-[0-9a-f]{8}")
#: A home being removed (renamed out of its name first), left so by an interrupted pruning.
_GONE_NAME = re.compile(r"\.gone-(?:\.new-)?\d{8}T\d{6}-[0-9a-f]{8}-[0-9a-f]{8}")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "": 86400.0}


def offline_homes_dir() -> Path:
    """``$AGENTRUN_OFFLINE_HOMES``, else ``$XDG_CACHE_HOME/agentrun/offline`` (default
    ``~/.cache/agentrun/offline``)."""
    explicit = os.environ.get(OFFLINE_HOMES_ENV)
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache).expanduser() / "agentrun" / "offline"


def parse_age(text: str, *, what: str = "an age") -> float:
    """Seconds of ``text``: a number with a unit ``s``, ``m``, ``h``, ``d`` or ``w`` (a bare
    number is days), e.g. ``30d``, ``12h``, ``0``. :class:`ConfigurationError` otherwise."""
    match = _AGE.fullmatch(text)
    if match is None:
        raise ConfigurationError(
            f"{what}: {text!r} is not an age (a number with s, m, h, d or w, e.g. 30d)",
            option="age",
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def max_age() -> float | None:
    """How long an unused home is kept (``$AGENTRUN_OFFLINE_HOMES_MAX_AGE``), ``None``: for
    ever."""
    text = os.environ.get(MAX_AGE_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_AGE
    if text.lower() in ("off", "never"):
        return None
    return parse_age(text, what=MAX_AGE_ENV)


def _key(resume_id: str) -> str:
    # Resume ids are the agents' own (UUIDs, ``ses_...``): kept readable, anything else escaped.
    return _SAFE.sub(lambda m: f"%{ord(m.group()):02x}", resume_id)[:200] or "_"


def _lock(home: Path, mode: int) -> int | None:
    """An open descriptor of ``home``'s lock file, locked with ``mode`` (without waiting), or
    ``None`` when someone else holds a lock that excludes it or the home is gone."""
    try:
        fd = os.open(home / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _in_place(home: Path, fd: int) -> bool:
    """The locked file is still ``home``'s lock file (not removed by a pruner meanwhile)."""
    try:
        return os.stat(home / _LOCK).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def _touch(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.utime(fd)


def _release(fd: int) -> None:
    _touch(fd)
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _known_home(root: Path, resume_id: str) -> Path | None:
    try:
        name = (root / _INDEX / _key(resume_id)).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if name and "/" not in name and not name.startswith(".") and (root / name).is_dir():
        return root / name
    return None


def _new_home(root: Path) -> tuple[Path, int]:
    """A new home, locked and marked before it appears under its name (so no pruner sees it
    unlocked, and every home under its name carries the marker)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        name = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)
        partial = root / f"{_PARTIAL}{name}"
        partial.mkdir()
        fd = _lock(partial, fcntl.LOCK_SH)
        if fd is None:  # a lock on a directory only this process knows of cannot be refused
            raise OSError(f"cannot lock {partial}")
    except OSError as exc:
        raise _unusable(root, exc) from None
    try:
        marker = os.open(
            partial / _MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644
        )
        try:
            os.write(marker, _MARKER_TEXT)
        finally:
            os.close(marker)
        home = root / name
        partial.rename(home)
    except OSError as exc:
        _release(fd)
        shutil.rmtree(partial, ignore_errors=True)  # made a moment ago, by this process
        raise _unusable(root, exc) from None
    return home, fd


def _unusable(root: Path, exc: OSError) -> ConfigurationError:
    """The error for a homes' directory where no home can be made, naming it (and the
    variable, when it was set) and the reason."""
    why = exc.strerror or str(exc)
    if exc.filename is not None and str(exc.filename) != str(root):
        why = f"{exc.filename}: {why}"
    named = f" (${OFFLINE_HOMES_ENV})" if os.environ.get(OFFLINE_HOMES_ENV) else ""
    return ConfigurationError(
        f"cannot make an offline home in {root}{named}: {why}", option="offline_homes"
    )


@contextlib.contextmanager
def offline_home(engine: str, resume_id: str | None = None) -> Generator[Path, None, None]:
    """The home directory for a session of ``engine``, held in use (no pruning removes it)
    until the block ends: the one that ran ``resume_id`` when the index knows it, else a new
    one. Making a new one prunes the homes not used for ``$AGENTRUN_OFFLINE_HOMES_MAX_AGE``
    (default 30 days), at most once a day. A directory where no home can be made is a
    :class:`ConfigurationError` naming it, before anything starts."""
    root = offline_homes_dir() / _key(engine)
    keep_for = max_age()
    home: Path | None = None
    fd: int | None = None
    if resume_id is not None:
        home = _known_home(root, resume_id)
        fd = None if home is None else _lock(home, fcntl.LOCK_SH)
        if fd is not None and home is not None and not _in_place(home, fd):
            _release(fd)
            fd = None
    if fd is None or home is None:
        home, fd = _new_home(root)
        if keep_for is not None:
            _prune_now_and_then(keep_for)
    _touch(fd)
    try:
        yield home
    finally:
        _release(fd)


def remember_home(engine: str, resume_id: str | None, home: Path) -> None:
    """Index ``home`` under ``resume_id`` (written whole: a reader never sees half a name)."""
    if resume_id is None:
        return
    index = offline_homes_dir() / _key(engine) / _INDEX
    index.mkdir(parents=True, exist_ok=True)
    target = index / _key(resume_id)
    partial = index / f".{target.name}.{secrets.token_hex(4)}"
    partial.write_text(home.name + "\n", encoding="utf-8")
    partial.replace(target)


@dataclass(frozen=True)
class PrunedHome:
    """A home :func:`prune_homes` removed (or, on a dry run, would remove)."""

    engine: str
    path: Path
    #: Seconds since it was last used.
    idle: float


def _last_use(home: Path) -> float:
    """When ``home`` was last used: its lock file's time (a run touches it when it starts and
    ends), else the directory's."""
    for path in (home / _LOCK, home):
        with contextlib.suppress(OSError):
            return path.lstat().st_mtime
    return 0.0


def _real_dirs(directory: Path) -> list[str]:
    """The names of the directories in ``directory``, symlinks left out."""
    try:
        with os.scandir(directory) as entries:
            return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _homes(root: Path) -> Iterator[tuple[str, Path]]:
    """Every directory laid out as a home, ``<root>/<engine>/<name>``: real directories (no
    symlink followed), named as :func:`_new_home` or an interrupted pruning names them. Whether
    it is one (carries the marker) is the caller's check."""
    for engine in _real_dirs(root):
        if engine.startswith("."):
            continue
        for name in _real_dirs(root / engine):
            if _HOME_NAME.fullmatch(name) or _GONE_NAME.fullmatch(name):
                yield engine, root / engine / name


def _open_dir(path: Path) -> int | None:
    """A descriptor of the directory ``path`` itself (``None`` when it is a symlink, not a
    directory, or gone)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None


def _marked_at(directory: int) -> bool:
    """The directory (an open descriptor) holds the marker :func:`_new_home` writes: a regular
    file (not a symlink) that says exactly what it wrote."""
    try:
        fd = os.open(_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.read(fd, len(_MARKER_TEXT) + 1) == _MARKER_TEXT
    except OSError:
        return False
    finally:
        os.close(fd)


def _is_marked(home: Path) -> bool:
    fd = _open_dir(home)
    if fd is None:
        return False
    try:
        return _marked_at(fd)
    finally:
        os.close(fd)


def _remove_marked(directory: Path) -> None:
    """Remove ``directory`` if it is a marked home, never following a symlink out of it; the
    marker goes last, so a removal cut short is finished by a later pruning."""
    fd = _open_dir(directory)
    if fd is None:
        return
    try:
        if not _marked_at(fd):
            return
        with os.scandir(fd) as entries:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for name, is_dir in children:
            if name == _MARKER:
                continue
            if is_dir:  # refuses a symlink, and follows none inside
                shutil.rmtree(directory / name, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
        with contextlib.suppress(OSError):
            os.unlink(_MARKER, dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        directory.rmdir()


def _drop_index_entries(engine_dir: Path, removed: set[str]) -> None:
    """Index entries that name a removed (or otherwise missing) home."""
    index = engine_dir / _INDEX
    if index.is_symlink():
        return
    try:
        entries = list(index.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        try:
            name = entry.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if name in removed or not (engine_dir / name).is_dir():
            with contextlib.suppress(OSError):
                entry.unlink()


def prune_homes(
    older_than: float, *, dry_run: bool = False, directory: str | os.PathLike[str] | None = None
) -> list[PrunedHome]:
    """Remove the kept homes not used for ``older_than`` seconds, and the index entries that
    name them; a home in use (its lock held by a run) is never removed, nor anything that is not
    a home this library made (see the module's docstring: :func:`unmarked_homes` lists what looks
    like a home but carries no marker). ``dry_run``: only say which; ``directory``: the homes'
    directory (default :func:`offline_homes_dir`). Returns the homes removed (or that would be),
    longest unused first."""
    root = offline_homes_dir() if directory is None else Path(directory)
    now = time.time()
    pruned: list[PrunedHome] = []
    removed: dict[Path, set[str]] = {}
    for engine, home in _homes(root):
        if _GONE_NAME.fullmatch(home.name):
            if not dry_run:  # what an interrupted pruning left
                _remove_marked(home)
            continue
        if not _is_marked(home):
            continue
        idle = now - _last_use(home)
        if idle < older_than:
            continue
        fd = _lock(home, fcntl.LOCK_EX)
        if fd is None:
            continue  # in use
        try:
            # Used since it was looked at (a run that just ended touched it): kept.
            idle = now - _last_use(home)
            if idle < older_than or not _in_place(home, fd):
                continue
            if not dry_run:
                # Out of its name first: a run resuming it from now on gets a fresh home.
                gone = home.with_name(f"{_GONE}{home.name}-{secrets.token_hex(4)}")
                try:
                    home.rename(gone)
                except OSError:
                    continue
                _remove_marked(gone)
                removed.setdefault(home.parent, set()).add(home.name)
            pruned.append(PrunedHome(engine=engine, path=home, idle=idle))
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
    if not dry_run:
        for engine_dir, names in removed.items():
            _drop_index_entries(engine_dir, names)
    pruned.sort(key=lambda p: -p.idle)
    return pruned


def unmarked_homes(
    older_than: float = 0.0, *, directory: str | os.PathLike[str] | None = None
) -> list[PrunedHome]:
    """The directories laid out and named as homes, not used for ``older_than`` seconds, that
    carry no marker — homes made before homes were marked, or someone else's: pruning never
    removes them (a person may). Longest unused first."""
    root = offline_homes_dir() if directory is None else Path(directory)
    now = time.time()
    kept = [
        PrunedHome(engine=engine, path=home, idle=now - _last_use(home))
        for engine, home in _homes(root)
        if _HOME_NAME.fullmatch(home.name)
        and not home.name.startswith(_PARTIAL)
        and not _is_marked(home)
    ]
    return sorted((k for k in kept if k.idle >= older_than), key=lambda k: -k.idle)


def _prune_now_and_then(max_age: float) -> None:
    """:func:`prune_homes` with ``max_age``, unless it ran in the last day (a stamp file's
    time says when); its failures never stop a run."""
    stamp = offline_homes_dir() / _STAMP
    try:
        if time.time() - stamp.stat().st_mtime < _PRUNE_EVERY:
            return
    except OSError:
        pass
    with contextlib.suppress(OSError):
        stamp.touch()
        os.utime(stamp)
        prune_homes(max_age)
