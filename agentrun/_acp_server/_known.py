"""Whether a session id the server did not issue is one the agent behind it can resume.

``session/load`` and ``session/resume`` of an id of the server's own shape that it never issued
(a session of an earlier ``agentrun acp`` process: ACP clients such as ``acpx`` keep the ids
they were given) are answered "resource not found" at once, and so is any other id the agent
does not know, before anything runs: the client then opens a new session. The ACP agents and
Codex app-server say so themselves when the session opens (the engines raise
:class:`~agentrun.SessionNotFoundError`); the spawn-per-turn agents would only say so at the
first prompt, so their own stores are looked up here (:func:`agent_knows`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import uuid
from pathlib import Path

from .._vocabulary.env import merge_env
from .._vocabulary.options import SessionOptions
from ..engines.codex._rollout import find_rollout, find_thread_named

__all__ = ["ISSUED_ID", "agent_knows", "new_session_id"]

#: The ids this server issues: ``sess_`` and 32 hex digits.
ISSUED_ID = re.compile(r"sess_[0-9a-f]{32}")


def new_session_id() -> str:
    """A fresh id of the server's own shape (:data:`ISSUED_ID`)."""
    return f"sess_{uuid.uuid4().hex}"


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def agent_knows(engine: str, options: SessionOptions, resume_id: str) -> bool | None:
    """Whether ``engine``'s agent, run with ``options``, has a session ``resume_id``
    (``None``: the engine's own start says, or the store could not be read).

    * ``claude``: a transcript ``<config>/projects/*/<id>.jsonl`` (``$CLAUDE_CONFIG_DIR``, else
      ``~/.claude``); an id that is not a UUID (a session title to Claude Code) is not known.
    * ``codex``: the thread's rollout file, or a thread of that name in Codex's name index.
    * ``opencode``: a row of the ``session`` table of ``$XDG_DATA_HOME/opencode/opencode.db``,
      read only.
    """
    env = merge_env(options.env, inherit=options.inherit_env)
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    if engine == "claude":
        if not _is_uuid(resume_id):
            return False
        config = Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
        try:
            return any((config / "projects").glob(f"*/{resume_id}.jsonl"))
        except OSError:
            return None
    if engine == "codex":
        codex_home = Path(env.get("CODEX_HOME") or home / ".codex")
        if _is_uuid(resume_id):
            return find_rollout(codex_home, resume_id) is not None
        return find_thread_named(codex_home, resume_id) is not None
    if engine == "opencode":
        data = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
        database = data / "opencode" / "opencode.db"
        if not database.is_file():
            return False
        try:
            uri = database.absolute().as_uri() + "?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as db:
                row = db.execute("SELECT 1 FROM session WHERE id = ?", (resume_id,)).fetchone()
        except sqlite3.Error:
            return None
        return row is not None
    return None
