"""The state every part of the ACP server shares: what it serves (:class:`ServerConfig`), one
ACP session (:class:`AcpSession`), the engine facts the server acts on, and
:class:`ServerState` — the session table, sending updates to the client, and the modes and
config options the client sees.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import functools
import itertools
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from .._turns.session import Session
from .._turns.turn import Turn
from .._vocabulary.context import default_catalog
from .._wire.jsonrpc import ConnectionClosedError, JsonRpcConnection, JsonRpcError
from ._updates import UpdateMapper

#: ACP's "resource not found" (an unknown session).
RESOURCE_NOT_FOUND = -32002
#: Engines whose agent can ask before a tool runs (so the client can be asked).
ASKING_ENGINES = frozenset(
    {
        "claude",
        "codex-app-server",
        "opencode-acp",
        "claude-acp",
        "codex-acp",
        "qwen",
        "gemini",
        "acp",
    }
)
#: Engines that take an effort level.
EFFORT_ENGINES = frozenset({"claude", "codex", "codex-app-server"})
#: Engines that are ACP agents themselves: their own updates are passed through.
ACP_ENGINES = frozenset({"opencode-acp", "claude-acp", "codex-acp", "qwen", "gemini", "acp"})
#: What OpenCode asks about in the modes that ask (its own default asks about nothing).
OPENCODE_ASK = json.dumps({"bash": "ask", "edit": "ask"})

MODES: dict[str, tuple[str, str]] = {
    "default": ("Ask", "Tools that need permission are asked about (the agent's own rules)"),
    "bypass": ("Approve all", "Every tool use is approved without asking"),
    "plan": ("Plan", "The agent plans and changes nothing"),
}
EFFORTS = ("default", "low", "medium", "high", "max")
#: The model option's value for "the agent's own default" (no model asked for).
DEFAULT_MODEL = "default"
#: The model catalog's families each engine's agent runs (by the prefix of the catalog id).
ENGINE_MODEL_FAMILIES: dict[str, str] = {
    "claude": "claude-",
    "claude-acp": "claude-",
    "codex": "gpt-",
    "codex-app-server": "gpt-",
    "codex-acp": "gpt-",
}


@functools.cache
def catalog_models(engine: str) -> tuple[str, ...]:
    """The model ids and aliases of the library's catalog (``catalog.json``, extended by
    ``$AGENTRUN_MODEL_CATALOG``) that ``engine``'s agent runs, sorted; none for an engine whose
    models the catalog does not name (OpenCode's ``provider/model``, Gemini, Qwen)."""
    family = ENGINE_MODEL_FAMILIES.get(engine)
    if family is None:
        return ()
    catalog = default_catalog()
    return tuple(
        name
        for name in catalog.names()
        if (info := catalog.lookup(name)) is not None and info.id.startswith(family)
    )


#: Bytes of updates (compact JSON) a session keeps for ``session/load`` to replay.
HISTORY_BYTES = 8 * 1024 * 1024


class History:
    """The updates of one session that ``session/load`` replays, held as compact JSON (a
    dict per update cost several times its JSON) and bounded: at most ``limit`` bytes, the
    oldest dropped first. Turns are dropped whole (the replay starts at a prompt), except the
    newest, which keeps its latest updates when it alone is too large."""

    def __init__(self, limit: int = HISTORY_BYTES) -> None:
        self.limit = limit
        #: (turn number, encoded update), oldest first; turn 0 is before the first prompt.
        self._entries: collections.deque[tuple[int, bytes]] = collections.deque()
        self._turn = 0
        #: Bytes held now (never more than ``limit``).
        self.size = 0
        #: Updates dropped to stay within the bound.
        self.dropped = 0

    def begin_turn(self) -> None:
        """A prompt starts: what follows is a new turn."""
        self._turn += 1

    def append(self, update: dict[str, Any]) -> None:
        data = json.dumps(update, separators=(",", ":")).encode("utf-8")
        self._entries.append((self._turn, data))
        self.size += len(data)
        if self.size > self.limit:
            self._trim()

    def _trim(self) -> None:
        entries = self._entries
        cut = 0
        while self.size > self.limit and entries:
            cut = entries[0][0]
            self._drop()
        # No turn replayed from its middle, unless it is the newest.
        while entries and entries[0][0] == cut and cut != self._turn:
            self._drop()

    def _drop(self) -> None:
        _, data = self._entries.popleft()
        self.size -= len(data)
        self.dropped += 1

    def copy(self) -> History:
        """A history of its own holding the same updates (a forked session's start)."""
        twin = History(self.limit)
        twin._entries = collections.deque(self._entries)
        twin._turn, twin.size, twin.dropped = self._turn, self.size, self.dropped
        return twin

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The updates kept, oldest first (decoded one at a time; a snapshot of now)."""
        for _, data in list(self._entries):
            yield json.loads(data)


@dataclass(frozen=True)
class ServerConfig:
    """What the server runs: the engine, and where its agent's model comes from."""

    engine: str
    #: Run the agent against the embedded model server (``--embedded``).
    embedded: bool = False
    #: The model server's script file (``--script``; embedded only).
    script: str | None = None
    model: str | None = None
    binary: str | None = None
    #: Bytes of updates each session keeps for ``session/load`` (``--history-bytes``).
    history_bytes: int = HISTORY_BYTES
    #: Keep a journal of each session, named by its id, in the default store (``--journal``):
    #: a later process loads the session from it, its totals included.
    journal: bool = False


def now() -> str:
    """The time now, as ACP's ``updatedAt`` gives it (UTC, ISO 8601, seconds)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class AcpSession:
    """One ACP session: its options, its history, and the library session hosting it."""

    sid: str
    cwd: str
    engine: str
    mode: str = "default"
    model: str | None = None
    effort: str | None = None
    resume_id: str | None = None
    #: Open the agent session as a fork of ``resume_id`` (``session/fork``), until it has run
    #: a prompt (then ``resume_id`` is the fork's own).
    fork: bool = False
    #: Whose agent home it runs in, embedded (a fork shares its source's): its own id by default.
    home_key: str | None = None
    title: str | None = None
    updated_at: str = field(default_factory=now)
    #: The updates sent for it, for ``session/load`` (the prompts as user chunks), bounded.
    history: History = field(default_factory=History)
    mapper: UpdateMapper = field(default_factory=UpdateMapper)
    hosted: Session | None = None
    closing: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    turn: Turn | None = None
    busy: bool = False
    #: A prompt ran (the agent session has a conversation to resume).
    prompted: bool = False
    cancelled: bool = False
    #: Options changed since the library session opened: reopen it before the next prompt.
    dirty: bool = False
    #: The model the session shows (the agent's, once known).
    shown_model: str | None = None


class ServerState:
    """The session table and the connection to the client, which every part of the server uses."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.sessions: dict[str, AcpSession] = {}
        self._conn: JsonRpcConnection | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._send_line: Callable[[bytes], Awaitable[None]] | None = None
        self._elicitation = False
        #: The terminal output key the client declared (``_meta.terminal_output``, ...).
        self._terminal_output: str | None = None
        self._server_url: str | None = None
        self._scratch: Path | None = None
        self._permission_ids = itertools.count(1)

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"Resource not found: no session {session_id!r}")
        return session

    async def _send_update(self, session: AcpSession, update: dict[str, Any]) -> None:
        session.history.append(update)
        if self._conn is None:
            return
        # A client that is gone misses it; the session closes with the server.
        with contextlib.suppress(ConnectionClosedError):
            await self._conn.notify("session/update", {"sessionId": session.sid, "update": update})

    def _mapper(self, cwd: str, cost_usd: float | None = 0.0) -> UpdateMapper:
        return UpdateMapper(
            passthrough=self.config.engine in ACP_ENGINES,
            cost_usd=cost_usd,
            terminal_output=self._terminal_output,
            cwd=cwd,
        )

    # -- state the client sees --------------------------------------------------------------

    def _state(self, session: AcpSession) -> dict[str, Any]:
        return {
            "modes": {
                "currentModeId": session.mode,
                "availableModes": [
                    {"id": mode, "name": name, "description": text}
                    for mode, (name, text) in MODES.items()
                ],
            },
            "configOptions": self._config_options(session),
        }

    def _config_options(self, session: AcpSession) -> list[dict[str, Any]]:
        model = session.shown_model or session.model or DEFAULT_MODEL
        choices = dict.fromkeys((model, DEFAULT_MODEL, *catalog_models(self.config.engine)))
        options: list[dict[str, Any]] = [
            {
                "id": "mode",
                "name": "Mode",
                "category": "mode",
                "type": "select",
                "currentValue": session.mode,
                "options": [{"value": m, "name": n} for m, (n, _) in MODES.items()],
            },
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": model,
                "options": [{"value": m, "name": m} for m in choices],
            },
        ]
        if self.config.engine in EFFORT_ENGINES:
            options.append(
                {
                    "id": "effort",
                    "name": "Effort",
                    "category": "thought_level",
                    "type": "select",
                    "currentValue": session.effort or "default",
                    "options": [{"value": e, "name": e} for e in EFFORTS],
                }
            )
        return options
