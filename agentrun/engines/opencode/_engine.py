"""The OpenCode ``run`` engine: one ``opencode run --format json`` process per turn.

Spawn-per-turn is invisible to callers: :meth:`OpenCodeEngine.start` starts nothing, every turn
(the first included) spawns ``opencode run`` with the prompt on stdin (see :mod:`._argv` for why
not on the command line), and the session id the events carry (``sessionID``) is passed back as
``--session`` to the next turn's process, so all turns continue one OpenCode session.

End of a turn: the process exits. Exit 0, or exit 1 after an ``error`` event, ends the turn with
the synthesized ``result`` (a failed one after an error); exit 1 with ``Session not found`` on
stderr raises :class:`SessionNotFoundError`; any other exit (a signal, another code) raises
:class:`ProcessExitError` with the stderr tail. A process that exits 0 without finishing a step
leaves the turn without a result (the core raises :class:`NoResultError`).

Cancellation (caller, timeout): SIGINT to the process group, a bounded wait, then the subprocess
manager's SIGTERM/SIGKILL escalation. The session id is kept, so the next turn continues it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, ClassVar, cast

import anyio
import anyio.abc

from ..._bases.first_start import StoreLock, opencode_database, store_lock
from ..._bases.spawn_per_turn import SpawnPerTurnDriver, TurnCommand
from ..._turns.driver import CANCEL_GRACE
from ..._turns.engine import ProgramEngine
from ..._turns.session import Session
from ..._turns.turn import TurnContext
from ..._vocabulary.context import Catalog, ContextTracker
from ..._vocabulary.errors import ConfigurationError
from ..._vocabulary.options import SessionOptions
from ..._wire.framing import LineTooLong
from ..._wire.process import AgentProcess
from ..._wire.programs import package_version
from ._argv import TurnArgs, build_argv
from ._translate import AGENT_NAME, OpenCodeTranslator

__all__ = ["OpenCodeDriver", "OpenCodeEngine"]

#: What ``opencode run`` prints on stderr (exit 1) for an unknown ``--session`` id.
SESSION_NOT_FOUND = "Session not found"

_log = logging.getLogger("agentrun.opencode")


class OpenCodeEngine(ProgramEngine):
    """``opencode run --format json``, one process per turn.

    ``binary``: the program (else ``SessionOptions.binary``, the pinned install, ``PATH``).
    ``context_window``: the model's context size when known from the OpenCode configuration
    (``limit.context``); ``SessionOptions.context_window_tokens`` wins over it. Without either, the
    ``limit.context`` of the model in the file named by ``OPENCODE_CONFIG`` is used when readable,
    else the model catalog. ``version``: the OpenCode version for ``init`` messages (else read
    from the npm package next to the binary when possible). ``cancel_grace``: seconds a
    cancelled turn's process may take to exit after SIGINT before its process group is killed
    (:attr:`Session.cancel_grace`).
    """

    name: str = "opencode"
    program = "opencode"

    def __init__(
        self,
        binary: str | None = None,
        context_window: int | None = None,
        *,
        version: str | None = None,
        cancel_grace: float = CANCEL_GRACE,
        catalog: Catalog | None = None,
    ) -> None:
        if context_window is not None and context_window <= 0:
            raise ConfigurationError(
                "context_window must be a positive number of tokens", option="context_window"
            )
        self.binary = binary
        self.context_window = context_window
        self.version = version
        self.cancel_grace = cancel_grace
        self.catalog = catalog

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(OpenCodeDriver(self, options))


def _configured(env: dict[str, str], model: str | None) -> tuple[str | None, int | None]:
    """The model and its ``limit.context`` from ``OPENCODE_CONFIG`` and
    ``OPENCODE_CONFIG_CONTENT`` (the latter wins)."""
    configs: list[dict[str, Any]] = []
    path = env.get("OPENCODE_CONFIG")
    texts: list[str] = []
    if path:
        with contextlib.suppress(OSError):
            texts.append(Path(path).read_text(encoding="utf-8"))
    content = env.get("OPENCODE_CONFIG_CONTENT")
    if content:
        texts.append(content)
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            configs.append(cast("dict[str, Any]", value))
    limit: int | None = None
    for config in configs:
        if model is None and isinstance(config.get("model"), str):
            model = cast(str, config["model"])
    if model is None or "/" not in model:
        return model, None
    provider_id, model_id = model.split("/", 1)
    for config in configs:
        try:
            entry = config["provider"][provider_id]["models"][model_id]["limit"]["context"]
        except (KeyError, TypeError):
            continue
        if isinstance(entry, int) and not isinstance(entry, bool) and entry > 0:
            limit = entry
    return model, limit


class OpenCodeDriver(SpawnPerTurnDriver):
    """An OpenCode session run as one ``opencode run`` process per turn."""

    engine_name: str = "opencode"
    not_found_markers: ClassVar[tuple[str, ...]] = (SESSION_NOT_FOUND,)
    agent_name = f"{AGENT_NAME} run"

    def __init__(self, engine: OpenCodeEngine, options: SessionOptions | None) -> None:
        super().__init__(options, cancel_grace=engine.cancel_grace)
        self.engine = engine
        model, configured = _configured(self.env, self.options.model)
        #: The model the turns use (``--model``, else the configuration's default).
        self.model = model
        override = self.options.context_window_tokens or engine.context_window
        self.tracker: ContextTracker = ContextTracker(
            model=model, override=override, catalog=engine.catalog
        )
        if override is None and configured is not None:
            # OpenCode's own configured limit for the model (what its ACP mode reports).
            self.tracker.report_size(configured)
        self.binary: str | None = None
        self.version = engine.version
        #: When the running turn's process was started (ms since the epoch, OpenCode's clock).
        self._turn_started_ms: int | None = None
        #: A turn was cancelled: what it left in the session (from this time on) is removed
        #: before the next turn continues the session.
        self._cancelled_since: int | None = None
        #: The lock of OpenCode's store while this session's process makes it
        #: (see _bases.first_start).
        self._store_lock: StoreLock | None = None

    @property
    def database(self) -> Path:
        """OpenCode's database (``$XDG_DATA_HOME/opencode/opencode.db``), where it keeps the
        sessions ``--session`` continues."""
        return opencode_database(self.env)

    async def run_turn(self, ctx: TurnContext) -> None:
        # On a home without a store, this turn's process makes it: other starts wait until it
        # has (its first line), see _bases.first_start.
        self._store_lock = await store_lock(self.database, engine=self.engine_name)
        try:
            await super().run_turn(ctx)
        finally:
            self._release_store()

    def tap_received(self, item: bytes | LineTooLong) -> None:
        self._release_store()  # a line: the process has opened its store
        super().tap_received(item)

    def _release_store(self) -> None:
        lock: StoreLock | None = self._store_lock
        if lock is not None:
            self._store_lock = None
            lock.release()

    async def _interrupt(self, proc: AgentProcess) -> None:
        if self._turn_started_ms is not None:
            self._cancelled_since = self._turn_started_ms
        await super()._interrupt(proc)

    def _forget_cancelled_turn(self) -> None:
        """Remove what a cancelled turn left in the OpenCode session: its prompt and whatever
        part of an answer OpenCode stored before it was stopped. ``opencode run --session``
        sends the whole stored conversation to the model, so the cancelled prompt would
        otherwise be answered as part of the next turn."""
        since, self._cancelled_since = self._cancelled_since, None
        session = self.resume_id
        if since is None or session is None or not self.database.is_file():
            return
        try:
            with contextlib.closing(sqlite3.connect(self.database, timeout=10)) as db, db:
                stale = "SELECT id FROM message WHERE session_id = ? AND time_created >= ?"
                db.execute(f"DELETE FROM part WHERE message_id IN ({stale})", (session, since))
                db.execute(
                    "DELETE FROM message WHERE session_id = ? AND time_created >= ?",
                    (session, since),
                )
        except sqlite3.Error:
            _log.warning("could not remove the cancelled turn from %s", session, exc_info=True)

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        # Fail at start, not at the first turn, when the program is missing.
        self.binary = self.engine.resolve_binary(self.options)
        if self.version is None:
            self.version = package_version(self.binary, "opencode")

    def turn_args(self) -> TurnArgs:
        """The command line the next turn will use."""
        assert self.binary is not None
        return build_argv(
            self.binary,
            self.options,
            resume_id=self.resume_id,
            first_turn=self.session_id is None,
        )

    def _command(self, ctx: TurnContext) -> TurnCommand:
        if self._cancelled_since is not None:
            self._forget_cancelled_turn()
        # OpenCode stamps what it stores with the wall clock, after this process starts.
        self._turn_started_ms = int(time.time() * 1000)
        args = self.turn_args()
        permission = self.options.option("opencode", "permission")
        env = None if permission is None else {**self.env, "OPENCODE_PERMISSION": permission}
        # The prompt goes through stdin so it reaches the model verbatim (see _argv).
        return TurnCommand(
            argv=args.argv,
            stdin=ctx.prompt.encode("utf-8"),
            unsupported=tuple(args.unsupported),
            env=env,
        )

    def _start_resume_id(self, command: TurnCommand) -> str | None:
        return None if "--fork" in command.argv else self.resume_id

    def _new_translator(self) -> OpenCodeTranslator:
        return OpenCodeTranslator(
            model=self.model,
            tracker=self.tracker,
            agent_version=self.version,
            cwd=self.options.cwd,
        )
