"""Hosting the library session of each ACP session: the engine and options it opens with,
the task that holds it open, and closing or reopening it (a new mode, model or effort is
applied by reopening the same agent session).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import anyio
import anyio.abc

from .._store.jsonl_store import JsonlSessionStore, check_journal_id
from .._turns.engine import Engine
from .._turns.session import Session
from .._vocabulary.errors import AgentrunError, ConfigurationError
from .._vocabulary.options import SessionOptions
from ..engines._registry import get_engine
from ._asking import AskingServer
from ._sessions import ASKING_ENGINES, OPENCODE_ASK, AcpSession

_log = logging.getLogger("agentrun.acp_server")


class HostingServer(AskingServer):
    """Opens, holds, closes and reopens the library session behind each ACP session."""

    def _engine_and_options(self, session: AcpSession) -> tuple[Engine, SessionOptions]:
        engine_name = self.config.engine
        asks = engine_name in ASKING_ENGINES
        extra: dict[str, Any] = {
            "question_handler": self._question_handler(session),
            "mode": "plan" if session.mode == "plan" else None,
            "effort": session.effort,
        }
        if session.mode == "bypass":
            extra["hitl"] = False
        elif asks:
            extra["hitl"] = True
            extra["permission_handler"] = self._permission_handler(session)
        journal = self._journal(session.sid)
        if journal is not None:
            extra["journal"] = journal
        engine_options: dict[str, str] = {}
        if engine_name == "opencode-acp" and session.mode != "bypass":
            engine_options["opencode.permission"] = OPENCODE_ASK
        if self.config.embedded:
            from ..offline import embedded_engine

            assert self._server_url is not None
            assert self._scratch is not None
            key = session.home_key or session.sid
            home = self._scratch / hashlib.sha256(key.encode()).hexdigest()[:16]
            engine, options = embedded_engine(
                engine_name, self._server_url, home / "agent", cwd=session.cwd,
                model=session.model, binary=self.config.binary, resume_id=session.resume_id,
                fork=session.fork, options=engine_options, **extra,
            )  # fmt: skip
            return engine, options
        engine = get_engine(
            engine_name, **({"binary": self.config.binary} if self.config.binary else {})
        )
        engine.check()
        options = SessionOptions(
            cwd=session.cwd, model=session.model, resume_id=session.resume_id,
            fork=session.fork, options=engine_options, **extra,
        )  # fmt: skip
        return engine, options

    def _journal(self, session_id: str) -> JsonlSessionStore | None:
        """The store of a session's journal (``--journal``), the journal named by the session's
        id: the library session goes on with it (and with its totals) each time it opens, in
        this process or a later one. An id no journal can be named by keeps none."""
        if not self.config.journal:
            return None
        try:
            return JsonlSessionStore(journal_id=check_journal_id(session_id))
        except ConfigurationError:
            return None

    async def _open(
        self, session: AcpSession, prepared: tuple[Engine, SessionOptions] | None = None
    ) -> None:
        engine, options = prepared or self._engine_and_options(session)
        session.shown_model = session.shown_model or options.model
        assert self._task_group is not None
        session.hosted = await self._task_group.start(self._host, session, engine, options)
        session.dirty = False

    async def _host(
        self,
        session: AcpSession,
        engine: Engine,
        options: SessionOptions,
        *,
        task_status: anyio.abc.TaskStatus[Session],
    ) -> None:
        started = False
        try:
            async with engine.start(options) as hosted:
                started = True
                task_status.started(hosted)
                await session.closing.wait()
        except AgentrunError as exc:
            if not started:
                raise
            _log.warning("acp server: the %s session ended with an error: %s", engine.name, exc)
        finally:
            session.closed.set()

    async def _shut(self, session: AcpSession) -> None:
        hosted, session.hosted = session.hosted, None
        if hosted is None:
            return
        session.closing.set()
        with anyio.CancelScope(shield=True):
            await hosted.aclose()
            await session.closed.wait()

    async def _reopen(self, session: AcpSession) -> None:
        """Apply new options: the same agent session, opened again with them (before the first
        prompt there is no conversation to go on with: a fresh one opens)."""
        if session.hosted is not None:
            if session.prompted:
                # Codex app-server names its thread at once but keeps nothing of it before a
                # turn: resuming that thread would fail.
                session.resume_id = session.hosted.resume_id or session.resume_id
            await self._shut(session)
        session.closing = anyio.Event()
        session.closed = anyio.Event()
        await self._open(session)

    async def _close_all(self) -> None:
        for session in list(self.sessions.values()):
            await self._shut(session)
