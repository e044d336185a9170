"""Kept homes for the embedded default, so an offline session can be resumed by a later process.

Each ``agentrun run`` on the embedded default gets its own directory under
:func:`offline_homes_dir` (``<engine>/<id>/``, holding the agent's configuration and HOME in
``agent/`` and the default workspace in ``workspace/``), never shared by two new sessions at
once. When the session ends, its resume id is written to an index (``<engine>/index/<resume
id>``, naming the directory), so ``agentrun run --resume ID`` and ``agentrun sessions resume``
find the same home, where the agent keeps its transcript, and the same workspace (Claude Code
files sessions by their working directory). A resume id the index does not know gets a fresh
home, where the agent reports ``session_not_found`` as it would anyway.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

__all__ = ["OFFLINE_HOMES_ENV", "offline_home", "offline_homes_dir", "remember_home"]

#: The environment variable naming the directory of the kept offline homes.
OFFLINE_HOMES_ENV = "AGENTRUN_OFFLINE_HOMES"

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def offline_homes_dir() -> Path:
    """``$AGENTRUN_OFFLINE_HOMES``, else ``$XDG_CACHE_HOME/agentrun/offline`` (default
    ``~/.cache/agentrun/offline``)."""
    explicit = os.environ.get(OFFLINE_HOMES_ENV)
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(cache).expanduser() / "agentrun" / "offline"


def _key(resume_id: str) -> str:
    # Resume ids are the agents' own (UUIDs, ``ses_...``): kept readable, anything else escaped.
    return _SAFE.sub(lambda m: f"%{ord(m.group()):02x}", resume_id)[:200] or "_"


def offline_home(engine: str, resume_id: str | None = None) -> Path:
    """The home directory for a session of ``engine``: the one that ran ``resume_id`` when the
    index knows it, else a new one (created)."""
    root = offline_homes_dir() / _key(engine)
    if resume_id is not None:
        try:
            name = (root / "index" / _key(resume_id)).read_text(encoding="utf-8").strip()
        except OSError:
            name = ""
        if name and "/" not in name and (root / name).is_dir():
            return root / name
    name = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)
    home = root / name
    home.mkdir(parents=True)
    return home


def remember_home(engine: str, resume_id: str | None, home: Path) -> None:
    """Index ``home`` under ``resume_id`` (written whole: a reader never sees half a name)."""
    if resume_id is None:
        return
    index = offline_homes_dir() / _key(engine) / "index"
    index.mkdir(parents=True, exist_ok=True)
    target = index / _key(resume_id)
    partial = index / f".{target.name}.{secrets.token_hex(4)}"
    partial.write_text(home.name + "\n", encoding="utf-8")
    partial.replace(target)
