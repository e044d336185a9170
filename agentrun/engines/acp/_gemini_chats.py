"""Loading a Gemini CLI session without erasing it.

Gemini CLI 0.61 keeps each session in ``~/.gemini/tmp/<project>/chats/`` as
``session-<UTC minute>-<first 8 of the id>.jsonl``. Its ``session/load`` first starts a fresh
chat recording under the loaded id, in a file named after the *current* minute, and only then
reads the session back. Loaded in the minute the session began, that fresh file is the session's
own: the recording appends a record that resets its messages, and the load finds nothing to
resume ("No previous sessions found for this project"): the history is gone. Loaded in a later
minute, the fresh file is another one and the load works.

So before the agent starts to load a session, the library waits, when the session's file is
named after the present minute, until that minute is over (at most a minute, and only for a
session resumed in the minute it began).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path

import anyio

from ._engine import StartGuard

__all__ = ["loads_in_a_later_minute", "minute_of_its_file"]

#: At most this many project folders are looked through (bounded work on a user's home).
MAX_PROJECTS = 4096
_SAFE = re.compile(r"[^a-zA-Z0-9_-]")


def _minute(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H-%M")


def minute_of_its_file(env: Mapping[str, str], session_id: str, now: datetime) -> bool:
    """Whether Gemini CLI, loading ``session_id`` at ``now`` with environment ``env``, would
    name its fresh chat file as the session's own file is named (its ``GEMINI_CLI_HOME``, else
    ``HOME``)."""
    home = env.get("GEMINI_CLI_HOME") or env.get("HOME")
    if not home:
        return False
    name = f"session-{_minute(now)}-{_SAFE.sub('_', session_id)[:8]}.jsonl"
    projects = Path(home) / ".gemini" / "tmp"
    try:
        for count, project in enumerate(projects.iterdir()):
            if count >= MAX_PROJECTS:
                break
            if (project / "chats" / name).is_file():
                return True
    except OSError:  # no such folder, or not readable: nothing of this session's there
        return False
    return False


def loads_in_a_later_minute(session_id: str, then: StartGuard | None) -> StartGuard:
    """A start guard that holds the agent back until loading ``session_id`` is safe, then runs
    ``then`` (the engine's own guard, if any)."""

    async def guard(env: Mapping[str, str]) -> Callable[[], None] | None:
        while minute_of_its_file(env, session_id, datetime.now(timezone.utc)):
            second = datetime.now(timezone.utc)
            await anyio.sleep(60.05 - second.second - second.microsecond / 1_000_000)
        return None if then is None else await then(env)

    return guard
