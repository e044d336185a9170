"""The ACP agent side: one engine of the library served over Agent Client Protocol v1.

Each ACP session hosts one library :class:`~agentrun.Session` in a task of the server's own
(as long as the ACP session is open) and each ``session/prompt`` is one turn of it. What the
turn says goes to the client as ``session/update`` notifications (:mod:`._updates`); the
engine's permission requests become ``session/request_permission`` requests to the client, and
its questions ``elicitation/create`` requests when the client takes form elicitations.

A new mode, model or effort is applied at the next prompt: the library session is reopened with
the same agent session (its resume id), so the conversation goes on under the new options.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import itertools
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc

from .._turns.engine import Engine
from .._turns.session import Session
from .._turns.turn import Turn
from .._version import VERSION
from .._vocabulary.errors import (
    AgentrunError,
    ConfigurationError,
    EngineUnavailableError,
    SessionNotFoundError,
    SessionTerminatedError,
)
from .._vocabulary.jsonvalues import as_dict, as_list, as_str
from .._vocabulary.messages import ToolCall
from .._vocabulary.options import SessionOptions
from .._vocabulary.permissions import PermissionDecision, PermissionOption, PermissionRequest
from .._vocabulary.questions import QuestionAnswer, QuestionRequest
from .._vocabulary.summary import TurnSummary
from .._wire.framing import iter_lines
from .._wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ConnectionClosedError,
    JsonRpcConnection,
    JsonRpcError,
    JsonRpcProblem,
)
from ..engines._registry import get_engine
from ._models import (
    InitializeParams,
    ListParams,
    LoadParams,
    NewParams,
    PromptParams,
    SessionParams,
    SetConfigParams,
    SetModeParams,
    parse,
    prompt_text,
)
from ._updates import UpdateMapper, tool_kind, tool_title

__all__ = ["PROTOCOL_VERSION", "AcpServer", "ServerConfig", "stop_reason"]

_log = logging.getLogger("agentrun.acp_server")

PROTOCOL_VERSION = 1
#: ACP's "resource not found" (an unknown session).
RESOURCE_NOT_FOUND = -32002
#: Seconds the server gives its sessions to close once its input ended.
CLOSE_BOUND = 20.0

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

_MODES: dict[str, tuple[str, str]] = {
    "default": ("Ask", "Tools that need permission are asked about (the agent's own rules)"),
    "bypass": ("Approve all", "Every tool use is approved without asking"),
    "plan": ("Plan", "The agent plans and changes nothing"),
}
_EFFORTS = ("default", "low", "medium", "high", "max")
_PERMISSION_KINDS = frozenset({"allow_once", "allow_always", "reject_once", "reject_always"})
_DEFAULT_OPTIONS = (
    PermissionOption(option_id="allow_once", kind="allow_once", name="Allow"),
    PermissionOption(option_id="allow_always", kind="allow_always", name="Always allow"),
    PermissionOption(option_id="reject_once", kind="reject_once", name="Reject"),
)


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


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class _AcpSession:
    """One ACP session: its options, its history, and the library session hosting it."""

    sid: str
    cwd: str
    engine: str
    mode: str = "default"
    model: str | None = None
    effort: str | None = None
    resume_id: str | None = None
    title: str | None = None
    updated_at: str = field(default_factory=_now)
    #: Every update sent for it, for ``session/load`` (the prompts as user chunks).
    history: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    mapper: UpdateMapper = field(default_factory=UpdateMapper)
    hosted: Session | None = None
    closing: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)
    turn: Turn | None = None
    busy: bool = False
    cancelled: bool = False
    #: Options changed since the library session opened: reopen it before the next prompt.
    dirty: bool = False
    #: The model the session shows (the agent's, once known).
    shown_model: str | None = None


def stop_reason(summary: TurnSummary | None, cancelled: bool) -> str:
    """The ACP ``stopReason`` of a turn that ended."""
    if cancelled:
        return "cancelled"
    reason = ((summary.stop_reason if summary is not None else None) or "").lower()
    if "cancel" in reason or "interrupt" in reason:
        return "cancelled"
    if "max_tokens" in reason or reason in ("length", "max_output_tokens"):
        return "max_tokens"
    if "refusal" in reason or "content_filter" in reason:
        return "refusal"
    if "max_turn" in reason:
        return "max_turn_requests"
    return "end_turn"


class AcpServer:
    """Serves one engine over ACP on a line transport; :meth:`serve` runs until input ends."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.sessions: dict[str, _AcpSession] = {}
        self._conn: JsonRpcConnection | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._send_line: Callable[[bytes], Awaitable[None]] | None = None
        self._elicitation = False
        self._server_url: str | None = None
        self._scratch: Path | None = None
        self._permission_ids = itertools.count(1)
        self._methods: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._new,
            "session/load": self._load,
            "session/resume": self._resume,
            "session/list": self._list,
            "session/close": self._close,
            "session/set_mode": self._set_mode,
            "session/set_config_option": self._set_config_option,
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

    async def _close_all(self) -> None:
        for session in list(self.sessions.values()):
            await self._shut(session)

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
            raise JsonRpcError(RESOURCE_NOT_FOUND, exc.message, _error_data(exc)) from None
        except ConfigurationError as exc:
            raise JsonRpcError(INVALID_PARAMS, exc.message, _error_data(exc)) from None
        except AgentrunError as exc:
            raise JsonRpcError(INTERNAL_ERROR, exc.message, _error_data(exc)) from None

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

    def _session(self, session_id: str) -> _AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise JsonRpcError(RESOURCE_NOT_FOUND, f"Resource not found: no session {session_id!r}")
        return session

    async def _send_update(self, session: _AcpSession, update: dict[str, Any]) -> None:
        session.history.append(update)
        if self._conn is None:
            return
        # A client that is gone misses it; the session closes with the server.
        with contextlib.suppress(ConnectionClosedError):
            await self._conn.notify("session/update", {"sessionId": session.sid, "update": update})

    # -- initialize -------------------------------------------------------------------------

    async def _initialize(self, params: Any) -> dict[str, Any]:
        request = parse(InitializeParams, params)
        elicitation = as_dict(request.client_capabilities.get("elicitation"))
        self._elicitation = elicitation is not None and as_dict(elicitation.get("form")) is not None
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
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
        session = _AcpSession(
            sid=f"sess_{uuid.uuid4().hex}", cwd=request.cwd, engine=self.config.engine,
            model=self.config.model, mapper=self._mapper(),
        )  # fmt: skip
        await self._open(session)
        self.sessions[session.sid] = session
        return {"sessionId": session.sid, **self._state(session)}

    async def _load(self, params: Any) -> dict[str, Any]:
        request = parse(LoadParams, params)
        self._note_mcp(request.mcp_servers)
        session = await self._reattach(request.session_id, request.cwd)
        # The history as the client saw it, before the answer.
        for update in list(session.history):
            if self._conn is not None:
                await self._conn.notify(
                    "session/update", {"sessionId": session.sid, "update": update}
                )
        return self._state(session)

    async def _resume(self, params: Any) -> dict[str, Any]:
        request = parse(LoadParams, params)
        session = await self._reattach(request.session_id, request.cwd)
        return self._state(session)

    async def _reattach(self, session_id: str, cwd: str) -> _AcpSession:
        """A known session (reopened when closed) or, for an id this server never issued, the
        engine's own resume id of an earlier session."""
        session = self.sessions.get(session_id)
        if session is None:
            session = _AcpSession(
                sid=session_id, cwd=cwd, engine=self.config.engine, model=self.config.model,
                resume_id=session_id, mapper=self._mapper(cost_usd=None),
            )  # fmt: skip
            await self._open(session)
            self.sessions[session_id] = session
        elif session.hosted is None:
            session.cwd = cwd
            session.closing = anyio.Event()
            session.closed = anyio.Event()
            await self._open(session)
        if session.mapper.context is not None:
            await self._send_usage(session)
        return session

    async def _send_usage(self, session: _AcpSession) -> None:
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
            SessionOptions(model=value)  # the library's own check of a model name
            if value != session.model:
                session.model = session.shown_model = value
                session.dirty = True
        elif (
            request.config_id == "effort"
            and isinstance(value, str)
            and self.config.engine in EFFORT_ENGINES
        ):
            if value not in _EFFORTS:
                raise JsonRpcError.invalid_params(f"effort {value!r} is not one of {_EFFORTS}")
            effort = None if value == "default" else value
            if effort != session.effort:
                session.effort = effort
                session.dirty = True
        else:
            raise JsonRpcError.invalid_params(
                f"no config option {request.config_id!r} takes {value!r}"
            )
        return {"configOptions": self._config_options(session)}

    def _apply_mode(self, session: _AcpSession, mode: str) -> None:
        if mode not in _MODES:
            raise JsonRpcError.invalid_params(f"mode {mode!r} is not one of {', '.join(_MODES)}")
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

    def _mapper(self, cost_usd: float | None = 0.0) -> UpdateMapper:
        return UpdateMapper(passthrough=self.config.engine in ACP_ENGINES, cost_usd=cost_usd)

    # -- state the client sees --------------------------------------------------------------

    def _state(self, session: _AcpSession) -> dict[str, Any]:
        return {
            "modes": {
                "currentModeId": session.mode,
                "availableModes": [
                    {"id": mode, "name": name, "description": text}
                    for mode, (name, text) in _MODES.items()
                ],
            },
            "configOptions": self._config_options(session),
        }

    def _config_options(self, session: _AcpSession) -> list[dict[str, Any]]:
        model = session.shown_model or session.model or "default"
        options: list[dict[str, Any]] = [
            {
                "id": "mode",
                "name": "Mode",
                "category": "mode",
                "type": "select",
                "currentValue": session.mode,
                "options": [{"value": m, "name": n} for m, (n, _) in _MODES.items()],
            },
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": model,
                "options": [{"value": model, "name": model}],
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
                    "options": [{"value": e, "name": e} for e in _EFFORTS],
                }
            )
        return options

    # -- hosting the library session --------------------------------------------------------

    def _engine_and_options(self, session: _AcpSession) -> tuple[Engine, SessionOptions]:
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
        engine_options: dict[str, str] = {}
        if engine_name == "opencode-acp" and session.mode != "bypass":
            engine_options["opencode.permission"] = OPENCODE_ASK
        if self.config.embedded:
            from ..offline import embedded_engine

            assert self._server_url is not None
            assert self._scratch is not None
            home = self._scratch / hashlib.sha256(session.sid.encode()).hexdigest()[:16]
            engine, options = embedded_engine(
                engine_name, self._server_url, home / "agent", cwd=session.cwd,
                model=session.model, binary=self.config.binary, resume_id=session.resume_id,
                options=engine_options, **extra,
            )  # fmt: skip
            return engine, options
        engine = get_engine(
            engine_name, **({"binary": self.config.binary} if self.config.binary else {})
        )
        engine.check()
        options = SessionOptions(
            cwd=session.cwd, model=session.model, resume_id=session.resume_id,
            options=engine_options, **extra,
        )  # fmt: skip
        return engine, options

    async def _open(self, session: _AcpSession) -> None:
        engine, options = self._engine_and_options(session)
        session.shown_model = session.shown_model or options.model
        assert self._task_group is not None
        session.hosted = await self._task_group.start(self._host, session, engine, options)
        session.dirty = False

    async def _host(
        self,
        session: _AcpSession,
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

    async def _shut(self, session: _AcpSession) -> None:
        hosted, session.hosted = session.hosted, None
        if hosted is None:
            return
        session.closing.set()
        with anyio.CancelScope(shield=True):
            await hosted.aclose()
            await session.closed.wait()

    async def _reopen(self, session: _AcpSession) -> None:
        """Apply new options: the same agent session, opened again with them."""
        if session.hosted is not None:
            session.resume_id = session.hosted.resume_id or session.resume_id
            await self._shut(session)
        session.closing = anyio.Event()
        session.closed = anyio.Event()
        await self._open(session)

    # -- prompts ----------------------------------------------------------------------------

    async def _prompt(self, params: Any) -> dict[str, Any]:
        request = parse(PromptParams, params)
        session = self._session(request.session_id)
        text = prompt_text(request.prompt)
        if session.busy:
            raise JsonRpcError(INVALID_REQUEST, "Invalid request: a prompt is already running")
        session.busy = True
        session.cancelled = False
        try:
            if session.dirty or session.hosted is None:
                await self._reopen(session)
            return await self._run_prompt(session, text)
        finally:
            session.busy = False
            session.turn = None

    async def _run_prompt(self, session: _AcpSession, text: str) -> dict[str, Any]:
        hosted = session.hosted
        assert hosted is not None
        session.history.append(
            {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}
        )
        if session.title is None:
            session.title = text.strip().splitlines()[0][:80]
        mapper = session.mapper
        mapper.begin_turn()
        failure: AgentrunError | None = None
        turn = hosted.turn(text)
        session.turn = turn
        try:
            async with turn:
                async for message in turn:
                    if message.init is not None and message.init.model:
                        await self._show_model(session, message.init.model)
                    for update in mapper.updates(message):
                        await self._send_update(session, update)
            summary: TurnSummary | None = turn.summary
        except AgentrunError as exc:
            failure = exc
            summary = exc.summary
        session.turn = None
        for update in mapper.end_turn(summary):
            await self._send_update(session, update)
        session.resume_id = hosted.resume_id or session.resume_id
        session.updated_at = _now()
        info = {"sessionUpdate": "session_info_update", "title": session.title,
                "updatedAt": session.updated_at}  # fmt: skip
        await self._send_update(session, info)
        if isinstance(failure, SessionTerminatedError):
            session.dirty = True  # the agent is gone: the next prompt reopens the session
        if session.cancelled:
            return {"stopReason": "cancelled"}
        if failure is not None:
            raise JsonRpcError(INTERNAL_ERROR, failure.message, _error_data(failure))
        reason = stop_reason(summary, False)
        if reason == "end_turn" and summary is not None and not summary.ok:
            errors = summary.errors
            message = errors[0].message if errors else "the turn failed"
            data: dict[str, Any] = {"errorCode": errors[0].code if errors else None}
            if errors and errors[0].data:
                data["data"] = errors[0].data
            raise JsonRpcError(INTERNAL_ERROR, message, data)
        return {"stopReason": reason}

    async def _show_model(self, session: _AcpSession, model: str) -> None:
        """The agent named its model: the client's model option shows it."""
        if model == (session.shown_model or session.model):
            return
        session.shown_model = model
        update = {
            "sessionUpdate": "config_option_update",
            "configOptions": self._config_options(session),
        }
        await self._send_update(session, update)

    # -- the agent asks ---------------------------------------------------------------------

    def _permission_handler(
        self, session: _AcpSession
    ) -> Callable[[PermissionRequest], Awaitable[PermissionDecision]]:
        async def ask(request: PermissionRequest) -> PermissionDecision:
            return await self._ask_permission(session, request)

        return ask

    async def _ask_permission(
        self, session: _AcpSession, request: PermissionRequest
    ) -> PermissionDecision:
        tool_id = request.tool_use_id or f"permission-{next(self._permission_ids)}"
        tool = ToolCall(
            id=tool_id, name=request.tool_name, input=request.input, title=request.title,
            kind=request.kind,
        )  # fmt: skip
        for update in session.mapper.announce(tool):
            await self._send_update(session, update)
        offered = tuple(o for o in request.options if o.kind in _PERMISSION_KINDS)
        options = offered or _DEFAULT_OPTIONS
        tool_call: dict[str, Any] = {
            "toolCallId": tool_id,
            "title": tool_title(tool),
            "kind": tool_kind(tool),
            "status": "pending",
        }
        if request.input is not None:
            tool_call["rawInput"] = request.input
        params = {
            "sessionId": session.sid,
            "toolCall": tool_call,
            "options": [
                {"optionId": o.option_id, "name": o.name or o.kind, "kind": o.kind} for o in options
            ],
        }
        if self._conn is None:
            return PermissionDecision.deny("no ACP client is connected")
        try:
            result = await self._conn.request("session/request_permission", params)
        except (JsonRpcError, ConnectionClosedError) as exc:
            return PermissionDecision.deny(f"the ACP client did not answer: {exc}")
        outcome = as_dict((as_dict(result) or {}).get("outcome")) or {}
        if outcome.get("outcome") != "selected":
            return PermissionDecision.deny("the ACP client cancelled the permission request")
        chosen = next((o for o in options if o.option_id == outcome.get("optionId")), None)
        if chosen is None:
            return PermissionDecision.deny(f"the ACP client chose an unknown option {outcome!r}")
        allow = chosen.kind.startswith("allow")
        reason = None if allow else f"rejected by the ACP client ({chosen.name or chosen.kind})"
        return PermissionDecision(
            allow=allow,
            always=chosen.kind.endswith("always"),
            reason=reason,
            option_id=chosen.option_id if offered else None,
        )

    def _question_handler(
        self, session: _AcpSession
    ) -> Callable[[QuestionRequest], Awaitable[QuestionAnswer]]:
        async def ask(request: QuestionRequest) -> QuestionAnswer:
            return await self._ask_questions(session, request)

        return ask

    async def _ask_questions(
        self, session: _AcpSession, request: QuestionRequest
    ) -> QuestionAnswer:
        if not self._elicitation or self._conn is None:
            return QuestionAnswer.refuse(
                "the ACP client takes no questions (it does not advertise elicitation forms)"
            )
        keys = {f"q{i}": q for i, q in enumerate(request.questions, 1)}
        properties: dict[str, Any] = {}
        for key, question in keys.items():
            labels = [o.label for o in question.options]
            prop: dict[str, Any] = {"title": question.header or question.text}
            if question.header:
                prop["description"] = question.text
            if question.multi_select and labels:
                prop |= {"type": "array", "items": {"type": "string", "enum": labels}}
            elif labels and not question.allow_other:
                prop |= {"type": "string", "enum": labels}
            else:
                prop["type"] = "string"
                if labels:
                    prop["description"] = f"{question.text} (e.g. {', '.join(labels)})"
            properties[key] = prop
        message = request.message or "; ".join(q.text for q in request.questions)
        params = {
            "sessionId": session.sid,
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": properties,
                                "required": list(properties)},
        }  # fmt: skip
        if request.tool_use_id is not None:
            params["toolCallId"] = request.tool_use_id
        try:
            result = await self._conn.request("elicitation/create", params)
        except (JsonRpcError, ConnectionClosedError) as exc:
            return QuestionAnswer.refuse(f"the ACP client did not answer: {exc}")
        answer = as_dict(result) or {}
        if answer.get("action") != "accept":
            return QuestionAnswer.refuse(f"the ACP client answered {answer.get('action')!r}")
        content = as_dict(answer.get("content")) or {}
        answers: dict[str, list[str]] = {}
        for key, question in keys.items():
            value: object = content.get(key)
            if isinstance(value, bool):
                answers[question.id] = ["true" if value else "false"]
            elif isinstance(value, list):
                answers[question.id] = [str(v) for v in as_list(cast(object, value))]
            elif value is not None:
                answers[question.id] = [str(value)]
        return QuestionAnswer.of(answers)


def _error_data(exc: AgentrunError) -> dict[str, Any]:
    data: dict[str, Any] = {"errorCode": exc.error_code}
    if isinstance(exc, EngineUnavailableError):
        data["unavailable"] = True
    return data
