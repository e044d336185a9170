"""The ACP agent side: one engine of the library served over Agent Client Protocol v1.

Each ACP session hosts one library :class:`~agentrun.Session` in a task of the server's own
(as long as the ACP session is open) and each ``session/prompt`` is one turn of it. What the
turn says goes to the client as ``session/update`` notifications (:mod:`._updates`); the
engine's permission requests become ``session/request_permission`` requests to the client, and
its questions ``elicitation/create`` requests when the client takes form elicitations.

A new mode, model or effort is applied at the next prompt: the library session is reopened with
the same agent session (its resume id), so the conversation goes on under the new options.

The server's parts, one module each: the shared state and session table (:mod:`._sessions`),
the agent's requests to the client (:mod:`._asking`), hosting the library sessions
(:mod:`._hosting`), the prompt turn (:mod:`._prompting`), each a base class of the next;
:class:`AcpServer`, here, adds the transport and the JSON-RPC method handlers.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from .._store.jsonl_store import JsonlSessionStore
from .._version import VERSION
from .._vocabulary.errors import (
    AgentrunError,
    ConfigurationError,
    ForkNotSupportedError,
    SessionNotFoundError,
)
from .._vocabulary.jsonvalues import as_dict, as_str
from .._vocabulary.options import SessionOptions
from .._wire.framing import iter_lines
from .._wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    JsonRpcConnection,
    JsonRpcError,
    JsonRpcProblem,
)
from ._known import ISSUED_ID, agent_knows, new_session_id
from ._models import (
    ForkParams,
    InitializeParams,
    ListParams,
    LoadParams,
    NewParams,
    SessionParams,
    SetConfigParams,
    SetModelParams,
    SetModeParams,
    parse,
)
from ._prompting import PromptingServer, error_data, stop_reason
from ._sessions import (
    DEFAULT_MODEL,
    EFFORT_ENGINES,
    EFFORTS,
    MODES,
    RESOURCE_NOT_FOUND,
    AcpSession,
    History,
    ServerConfig,
)
from ._updates import TERMINAL_OUTPUT_KEYS

__all__ = ["PROTOCOL_VERSION", "AcpServer", "ServerConfig", "stop_reason"]

_log = logging.getLogger("agentrun.acp_server")

PROTOCOL_VERSION = 1
#: Seconds the server gives its sessions to close once its input ended.
CLOSE_BOUND = 20.0


def _journal_records(store: JsonlSessionStore, journal_id: str) -> list[dict[str, Any]] | None:
    """The records of a journal, ``None`` when there is none by that id."""
    if journal_id not in store.ids():
        return None
    return store.records(journal_id)


def _forget_journal(store: JsonlSessionStore, journal_id: str) -> None:
    """Remove a session's journal (written by this server, named by the session's id)."""
    if journal_id in store.ids():
        store.path(journal_id).unlink(missing_ok=True)


class AcpServer(PromptingServer):
    """Serves one engine over ACP on a line transport; :meth:`serve` runs until input ends."""

    def __init__(self, config: ServerConfig) -> None:
        super().__init__(config)
        self._methods: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._new,
            "session/load": self._load,
            "session/resume": self._resume,
            "session/list": self._list,
            "session/close": self._close,
            "session/delete": self._delete,
            "session/fork": self._fork,
            "session/set_mode": self._set_mode,
            "session/set_config_option": self._set_config_option,
            "session/set_model": self._set_model,
            "session/prompt": self._prompt,
        }

    # -- running ----------------------------------------------------------------------------

    async def serve(
        self,
        incoming: anyio.abc.ByteReceiveStream,
        send_line: Callable[[bytes], Awaitable[None]],
    ) -> None:
        """Answer requests until ``incoming`` ends (or :meth:`stop`); then close every session
        (bounded) and return."""
        import tempfile

        self._send_line = send_line
        with tempfile.TemporaryDirectory(prefix="agentrun-acp-") as scratch:
            self._scratch = Path(scratch)
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                if self.config.embedded:
                    await self._serve_embedded(incoming, send_line)
                else:
                    await self._serve_connection(incoming, send_line)
                tg.cancel_scope.cancel()

    async def _serve_embedded(
        self,
        incoming: anyio.abc.ByteReceiveStream,
        send_line: Callable[[bytes], Awaitable[None]],
    ) -> None:
        from ..offline import ModelServer, Script

        script = Script.from_file(self.config.script) if self.config.script else None
        async with ModelServer(script) as server:
            self._server_url = server.url
            await self._serve_connection(incoming, send_line)

    async def _serve_connection(
        self,
        incoming: anyio.abc.ByteReceiveStream,
        send_line: Callable[[bytes], Awaitable[None]],
    ) -> None:
        conn = JsonRpcConnection(
            send_line,
            on_notification=self._notification,
            on_request=self._request,
            on_problem=self._problem,
            cancel_method="$/cancel_request",
            engine="acp-server",
        )
        self._conn = conn
        try:
            await conn.run(iter_lines(incoming))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_BOUND):
                await self._close_all()

    def stop(self) -> None:
        """End the connection as if the input had ended (a signal)."""
        if self._conn is not None:
            self._conn.close("stopped")

    # -- dispatch ---------------------------------------------------------------------------

    async def _request(self, method: str, params: Any) -> Any:
        handler = self._methods.get(method)
        if handler is None:
            raise JsonRpcError.method_not_found(method)
        try:
            return await handler(params)
        except JsonRpcError:
            raise
        except SessionNotFoundError as exc:
            raise JsonRpcError(RESOURCE_NOT_FOUND, exc.message, error_data(exc)) from None
        except ConfigurationError as exc:
            raise JsonRpcError(INVALID_PARAMS, exc.message, error_data(exc)) from None
        except ForkNotSupportedError as exc:
            # ACP's "method not found": the method "does not exist or is not available".
            raise JsonRpcError(METHOD_NOT_FOUND, exc.message, error_data(exc)) from None
        except AgentrunError as exc:
            raise JsonRpcError(INTERNAL_ERROR, exc.message, error_data(exc)) from None

    async def _notification(self, method: str, params: Any) -> None:
        if method != "session/cancel":
            return  # notifications need no answer; unknown ones are ignored
        session_id = as_str((as_dict(params) or {}).get("sessionId"))
        session = self.sessions.get(session_id or "")
        if session is None:
            return
        session.cancelled = session.busy
        if session.turn is not None:
            session.turn.cancel()

    async def _problem(self, problem: JsonRpcProblem) -> None:
        """A line that is no usable request: answered with the JSON-RPC error it deserves
        when the client could be waiting for one; the server goes on either way."""
        _log.warning("acp server: %s: %s", problem.code, problem.detail)
        if problem.code in ("handler_error", "callback_error", "write_error"):
            return
        if problem.code in ("invalid_json", "invalid_utf8"):
            error = {"code": PARSE_ERROR, "message": f"Parse error: {problem.detail}"}
            await self._send_error(None, error)
            return
        message = as_dict(problem.message)
        request_id: Any = None
        if message is not None:
            candidate = message.get("id")
            if isinstance(candidate, (int, str)) and not isinstance(candidate, bool):
                request_id = candidate
            if "method" not in message and ("result" in message or "error" in message):
                return  # a response to nothing we asked: nobody waits for an answer
        error = {"code": INVALID_REQUEST, "message": f"Invalid request: {problem.detail}"}
        await self._send_error(request_id, error)

    async def _send_error(self, request_id: Any, error: dict[str, Any]) -> None:
        if self._send_line is None:
            return
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}) + "\n"
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._send_line(line.encode("utf-8"))

    # -- initialize -------------------------------------------------------------------------

    async def _initialize(self, params: Any) -> dict[str, Any]:
        request = parse(InitializeParams, params)
        elicitation = as_dict(request.client_capabilities.get("elicitation"))
        self._elicitation = elicitation is not None and as_dict(elicitation.get("form")) is not None
        meta = as_dict(request.client_capabilities.get("_meta")) or {}
        self._terminal_output = next(
            (key for key in TERMINAL_OUTPUT_KEYS if meta.get(key) is True), None
        )
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {
                    "list": {},
                    "resume": {},
                    "close": {},
                    "delete": {},
                    "fork": {},
                },
            },
            "authMethods": [],
            "agentInfo": {
                "name": "agentrun",
                "title": f"agentrun ({self.config.engine})",
                "version": VERSION,
            },
        }

    async def _authenticate(self, params: Any) -> dict[str, Any]:
        raise JsonRpcError(INVALID_PARAMS, "Invalid params: this agent offers no auth methods")

    # -- sessions ---------------------------------------------------------------------------

    async def _new(self, params: Any) -> dict[str, Any]:
        request = parse(NewParams, params)
        self._note_mcp(request.mcp_servers)
        session = AcpSession(
            sid=new_session_id(), cwd=request.cwd, engine=self.config.engine,
            model=self.config.model, mapper=self._mapper(request.cwd),
            history=History(self.config.history_bytes),
        )  # fmt: skip
        await self._open(session)
        self.sessions[session.sid] = session
        return {"sessionId": session.sid, **self._state(session)}

    async def _load(self, params: Any) -> dict[str, Any]:
        request = parse(LoadParams, params)
        self._note_mcp(request.mcp_servers)
        session = await self._reattach(request.session_id, request.cwd)
        # The history as the client saw it, before the answer.
        for update in session.history:
            if self._conn is not None:
                await self._conn.notify(
                    "session/update", {"sessionId": session.sid, "update": update}
                )
        return self._state(session)

    async def _resume(self, params: Any) -> dict[str, Any]:
        request = parse(LoadParams, params)
        session = await self._reattach(request.session_id, request.cwd)
        return self._state(session)

    async def _reattach(self, session_id: str, cwd: str) -> AcpSession:
        """A known session (reopened when closed) or, for an id this server never issued, the
        engine's own resume id of an earlier session, once the agent is seen to know it: an id
        of the server's own shape from an earlier process, or one the agent does not know, is
        "resource not found" before anything runs (:mod:`._known`)."""
        session = self.sessions.get(session_id)
        if session is None:
            journaled = await self._journaled(session_id)
            resume_id: str | None = session_id
            if ISSUED_ID.fullmatch(session_id):
                if journaled is None:
                    raise JsonRpcError(
                        RESOURCE_NOT_FOUND,
                        f"Resource not found: no session {session_id!r} (sessions are kept for "
                        "the lifetime of the agentrun acp process that issued them, or in its "
                        "journal with --journal)",
                        {"errorCode": "session_not_found"},
                    )
                # A session of an earlier process that kept its journal: the agent's own id
                # is the one the journal last named (none before a prompt ran).
                resume_id = journaled
            session = AcpSession(
                sid=session_id, cwd=cwd, engine=self.config.engine, model=self.config.model,
                resume_id=resume_id or None, mapper=self._mapper(cwd, cost_usd=None),
                history=History(self.config.history_bytes),
            )  # fmt: skip
            engine, options = self._engine_and_options(session)
            if resume_id:
                known = await anyio.to_thread.run_sync(
                    agent_knows, self.config.engine, options, resume_id
                )
                if known is False:
                    raise SessionNotFoundError(
                        f"Resource not found: the {self.config.engine} agent has no session "
                        f"{resume_id!r}",
                        session_id=session_id,
                        engine=self.config.engine,
                    )
            await self._open(session, (engine, options))
            if journaled is not None and session.hosted is not None:
                # Its cost so far is what the journal's turns cost (the ACP usage RFD's
                # cumulative session cost), not what this process has seen.
                session.mapper.go_on_from(session.hosted.totals)
            self.sessions[session_id] = session
        elif session.hosted is None:
            session.cwd = session.mapper.cwd = cwd
            session.closing = anyio.Event()
            session.closed = anyio.Event()
            await self._open(session)
        if session.mapper.context is not None:
            await self._send_usage(session)
        return session

    async def _journaled(self, session_id: str) -> str | None:
        """With ``--journal``, for a session an earlier process kept a journal of (this
        engine's): the agent's resume id it last named (``""`` if none), else ``None``."""
        journal = self._journal(session_id)
        if journal is None or journal.journal_id is None:
            return None
        records = await anyio.to_thread.run_sync(_journal_records, journal, journal.journal_id)
        if records is None:
            return None
        engines = {r.get("engine") for r in records if r.get("kind") == "session"}
        if engines != {self.config.engine}:
            return None  # another engine's session, or not a session's journal
        named = [r["resume_id"] for r in records if isinstance(r.get("resume_id"), str)]
        return named[-1] if named else ""

    async def _send_usage(self, session: AcpSession) -> None:
        """The last context reading of a restored session (the usage RFD asks for one)."""
        used, size = session.mapper.context or (0, 0)
        update: dict[str, Any] = {"sessionUpdate": "usage_update", "used": used, "size": size}
        if session.mapper.cost_usd is not None:
            update["cost"] = {"amount": session.mapper.cost_usd, "currency": "USD"}
        if self._conn is not None:
            await self._conn.notify("session/update", {"sessionId": session.sid, "update": update})

    async def _list(self, params: Any) -> dict[str, Any]:
        request = parse(ListParams, params if params is not None else {})
        sessions = sorted(self.sessions.values(), key=lambda s: s.updated_at, reverse=True)
        return {
            "sessions": [
                {"sessionId": s.sid, "cwd": s.cwd, "title": s.title, "updatedAt": s.updated_at}
                for s in sessions
                if request.cwd is None or s.cwd == request.cwd
            ]
        }

    async def _close(self, params: Any) -> dict[str, Any]:
        request = parse(SessionParams, params)
        session = self._session(request.session_id)
        if session.turn is not None:
            session.cancelled = True
            session.turn.cancel()
        await self._shut(session)
        return {}

    async def _delete(self, params: Any) -> dict[str, Any]:
        """``session/delete``: the session is closed (a running prompt cancelled) and forgotten
        with its history; it leaves ``session/list`` and its id is "resource not found" from
        then on, in a later process too: its journal (``--journal``), which the server wrote, is
        removed. The agent's own transcript of it stays: the server did not create it."""
        request = parse(SessionParams, params)
        session = self._session(request.session_id)
        await self._close(params)
        if self.sessions.get(session.sid) is session:
            del self.sessions[session.sid]
        journal = self._journal(session.sid)
        if journal is not None and journal.journal_id is not None:
            await anyio.to_thread.run_sync(_forget_journal, journal, journal.journal_id)
        return {}

    async def _fork(self, params: Any) -> dict[str, Any]:
        """``session/fork`` (unstable ACP): a new session that goes on from a copy of the
        conversation, through the engine's own fork (``SessionOptions(fork=True)``); an engine
        whose agent cannot fork answers "method not found" (``fork_not_supported``). The fork
        takes the source's mode, model, effort and history; before the source ran a prompt
        there is nothing to copy and the fork starts fresh."""
        request = parse(ForkParams, params)
        self._note_mcp(request.mcp_servers)
        source = self._session(request.session_id)
        sid = new_session_id()
        fork = AcpSession(
            sid=sid, cwd=request.cwd, engine=self.config.engine, mode=source.mode,
            model=source.model, effort=source.effort, resume_id=source.resume_id,
            fork=source.resume_id is not None, home_key=source.home_key or source.sid,
            title=source.title, mapper=self._mapper(request.cwd),
            history=source.history.copy(),
        )  # fmt: skip
        fork.shown_model = source.shown_model
        await self._open(fork)
        self.sessions[sid] = fork
        return {"sessionId": sid, **self._state(fork)}

    async def _set_mode(self, params: Any) -> dict[str, Any]:
        request = parse(SetModeParams, params)
        session = self._session(request.session_id)
        self._apply_mode(session, request.mode_id)
        return {}

    async def _set_config_option(self, params: Any) -> dict[str, Any]:
        request = parse(SetConfigParams, params)
        session = self._session(request.session_id)
        value = request.value
        if request.config_id == "mode" and isinstance(value, str):
            self._apply_mode(session, value)
        elif request.config_id == "model" and isinstance(value, str) and value.strip():
            self._apply_model(session, value)
        elif (
            request.config_id == "effort"
            and isinstance(value, str)
            and self.config.engine in EFFORT_ENGINES
        ):
            if value not in EFFORTS:
                raise JsonRpcError.invalid_params(f"effort {value!r} is not one of {EFFORTS}")
            effort = None if value == "default" else value
            if effort != session.effort:
                session.effort = effort
                session.dirty = True
        else:
            raise JsonRpcError.invalid_params(
                f"no config option {request.config_id!r} takes {value!r}"
            )
        return {"configOptions": self._config_options(session)}

    async def _set_model(self, params: Any) -> dict[str, Any]:
        """``session/set_model`` (unstable ACP): the same as the model config option."""
        request = parse(SetModelParams, params)
        self._apply_model(self._session(request.session_id), request.model_id)
        return {}

    def _apply_model(self, session: AcpSession, value: str) -> None:
        """A model for the next prompt: one the option lists or any name the library takes
        (the catalog does not name every model); ``default`` is the agent's own default."""
        model = None if value == DEFAULT_MODEL else value
        if model is not None:
            SessionOptions(model=model)  # the library's own check of a model name
        if model != session.model:
            session.model = session.shown_model = model
            session.dirty = True

    def _apply_mode(self, session: AcpSession, mode: str) -> None:
        if mode not in MODES:
            raise JsonRpcError.invalid_params(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if mode != session.mode:
            session.mode = mode
            session.dirty = True

    def _note_mcp(self, servers: list[Any]) -> None:
        if servers:
            _log.warning(
                "acp server: %d MCP server(s) from the client are not passed to the agent "
                "(not supported)",
                len(servers),
            )
