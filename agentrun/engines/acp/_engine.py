"""The ACP client engine: one long-lived agent process per session, spoken to over JSON-RPC.

:class:`AcpEngine` runs any Agent Client Protocol agent given its command line; the
:func:`opencode_acp` preset runs the pinned ``opencode acp``. See ``docs/engines/acp.md``.

Lifecycle (all in :meth:`AcpSession._start`): spawn the agent (own process group, stdin piped),
run the JSON-RPC reader as a background task, ``initialize``, then open the session:
``session/new`` (bounded by ``session_timeout``: agents can hang starting MCP servers), or for
``SessionOptions.resume_id`` ``session/load`` (the agent replays history, delivered with
``replayed=True`` at the start of the first turn and kept in :attr:`AcpSession.replayed`) or
``session/resume`` (no replay), or ``session/fork`` with ``SessionOptions.fork``; then the session
options (model, mode, config options) with ids the agent advertised. Each turn is one
``session/prompt``; its response ends the turn. Cancelling a turn sends ``session/cancel``, answers
pending permission requests with ``cancelled`` and waits (bounded, shielded) for the prompt's
``cancelled`` response; the session stays usable. Closing closes stdin; the subprocess manager
escalates to SIGTERM / SIGKILL of the process group within fixed limits.

Every line written and read goes through :class:`~._translate.AcpTranslator`, the same code
that replays recordings, so live runs and replays produce the same messages. Messages that
arrive while no turn runs (after a turn's result, before the next prompt) are dropped and
logged; those that arrive before the first turn (init, replayed history) are delivered at its
start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import anyio
from pydantic import BaseModel, ValidationError

from ..._bases.jsonrpc_session import JsonRpcSession, RequestHandlerTable
from ..._turns.engine import Engine
from ..._turns.session import CANCEL_GRACE
from ..._turns.turn import TurnContext
from ..._version import VERSION
from ..._vocabulary.context import Catalog
from ..._vocabulary.errors import (
    AgentrunError,
    ConfigurationError,
    EngineUnavailableError,
    ProtocolError,
    SessionNotFoundError,
)
from ..._vocabulary.jsonvalues import as_object
from ..._vocabulary.messages import Message, MessageType, ProcessMeta
from ..._vocabulary.options import SessionOptions
from ..._vocabulary.permissions import PermissionOption, PermissionRequest
from ..._vocabulary.questions import QuestionAnswer, QuestionRequest
from ..._wire.jsonrpc import (
    INVALID_PARAMS,
    ConnectionClosedError,
    JsonRpcConnection,
    JsonRpcError,
    RequestTimeoutError,
)
from ..._wire.programs import resolve_binary
from ._elicitation import elicitation_question, elicitation_value
from ._schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeRequest,
    Method,
    ReadTextFileRequest,
    RequestPermissionRequest,
    SessionConfigOption,
    WriteTextFileRequest,
)
from ._translate import AcpTranslator, config_values

__all__ = ["AcpEngine", "AcpSession", "AcpTimeoutError", "opencode_acp"]

#: ACP's "resource not found" error code.
RESOURCE_NOT_FOUND = -32002
#: ACP's "authentication required" error code.
AUTH_REQUIRED = -32000

CommandSpec = Sequence[str] | Callable[[SessionOptions], Sequence[str]]


class AcpTimeoutError(RequestTimeoutError):
    """The agent did not answer a start-up request in time (``initialize``, ``session/new``
    ...). The agent process was stopped."""


class AcpEngine(Engine):
    """Runs an ACP agent. ``command`` is its argv (``["codex-acp"]``) or a function of the
    session returning one; ``SessionOptions.binary`` replaces ``argv[0]`` of a plain list and
    ``SessionOptions.extra_args`` are appended.

    * ``env``: extra environment for the agent (``SessionOptions.env`` wins over it);
      ``session_env(session)`` adds per-session entries (presets use it).
    * ``fs_access``: advertise ``fs.readTextFile`` / ``fs.writeTextFile`` and serve them,
      confined to the session's working directory (symlinks and ``..`` resolved first).
    * ``mcp_servers``: MCP server descriptions (ACP wire objects or ``_schema`` models) passed
      to ``session/new`` / ``load`` / ``resume`` / ``fork``.
    * ``resume_with``: ``"load"`` (replay history; default) or ``"resume"`` (no replay) for
      ``SessionOptions.resume_id``, each falling back to the other when not advertised.
    * Timeouts (seconds): ``handshake_timeout`` for ``initialize``, ``session_timeout`` for
      opening the session, ``request_timeout`` for the option requests, ``cancel_grace`` for
      a cancelled turn to end (the ``cancelled`` answer to ``session/cancel``) before the agent
      is killed (:attr:`Session.cancel_grace`); the close timeouts bound shutdown.
    * ``default_mode``: the agent mode selected when the session asks for none (no
      ``acp.mode`` option, no ``agent_id``, no plan mode); presets use it to start in the mode
      that asks for permission. A mode the agent does not offer is reported, not fatal.
    """

    name: str = "acp"
    #: What the recorder captures: both directions of the JSON-RPC traffic.
    wire_format: ClassVar[Literal["stdout", "jsonrpc"]] = "jsonrpc"

    def __init__(
        self,
        command: CommandSpec | None = None,
        *,
        env: Mapping[str, str] | None = None,
        name: str = "acp",
        fs_access: bool = False,
        mcp_servers: Sequence[Mapping[str, Any] | BaseModel] = (),
        resume_with: Literal["load", "resume"] = "load",
        session_env: Callable[[SessionOptions], Mapping[str, str]] | None = None,
        handshake_timeout: float = 30.0,
        session_timeout: float = 60.0,
        request_timeout: float = 30.0,
        cancel_grace: float = CANCEL_GRACE,
        close_stdin_timeout: float = 5.0,
        terminate_timeout: float = 5.0,
        max_line_bytes: int | None = None,
        catalog: Catalog | None = None,
        default_mode: str | None = None,
    ) -> None:
        if resume_with not in ("load", "resume"):
            raise ConfigurationError("resume_with must be 'load' or 'resume'", option="resume_with")
        self.command: CommandSpec | None = (
            command if command is None or callable(command) else tuple(command)
        )
        self.env: dict[str, str] = dict(env or {})
        self.engine_name: str = name
        self.name = name
        self.fs_access = fs_access
        self.mcp_servers: list[dict[str, Any]] = [
            m.model_dump(mode="json", by_alias=True, exclude_none=True)
            if isinstance(m, BaseModel)
            else dict(m)
            for m in mcp_servers
        ]
        self.resume_with = resume_with
        self.session_env = session_env
        self.handshake_timeout = handshake_timeout
        self.session_timeout = session_timeout
        self.request_timeout = request_timeout
        self.cancel_grace = cancel_grace
        self.close_stdin_timeout = close_stdin_timeout
        self.terminate_timeout = terminate_timeout
        self.max_line_bytes = max_line_bytes
        self.catalog = catalog
        self.default_mode = default_mode

    def start(self, options: SessionOptions | None = None) -> AcpSession:
        return AcpSession(self, options)

    def check(self) -> None:
        self.command_for(SessionOptions())

    def command_for(self, session: SessionOptions) -> list[str]:
        """The argv this engine starts for ``session``."""
        command = self.command
        if command is None:
            raise EngineUnavailableError(
                f"the {self.engine_name} engine needs the agent's command line "
                "(AcpEngine(['my-agent', '--acp']) or a preset such as opencode_acp())",
                engine=self.engine_name,
            )
        if callable(command):
            argv = list(command(session))
        else:
            argv = list(command)
            if session.binary is not None:
                argv[0] = session.binary
        if not argv:
            raise ConfigurationError("the ACP command line is empty", option="command")
        return [*argv, *session.extra_args]


def _session_cwd(session: SessionOptions) -> str:
    return session.cwd if session.cwd is not None else os.getcwd()


def opencode_acp(binary: str | None = None, **options: Any) -> AcpEngine:
    """``opencode acp --cwd <session cwd>`` (the pinned OpenCode, else ``PATH``).

    ``binary`` (or ``SessionOptions.binary``) overrides the program. The session option
    ``opencode.permission`` (JSON, e.g. ``'{"bash": "ask"}'``) becomes ``OPENCODE_PERMISSION``,
    as for the ``opencode`` run engine. Other keyword arguments go to :class:`AcpEngine`.
    """

    def command(session: SessionOptions) -> list[str]:
        explicit = session.binary if session.binary is not None else binary
        exe = resolve_binary("opencode", explicit=explicit, engine="opencode-acp")
        return [exe, "acp", "--cwd", _session_cwd(session)]

    def session_env(session: SessionOptions) -> dict[str, str]:
        permission = session.option("opencode", "permission")
        return {} if permission is None else {"OPENCODE_PERMISSION": permission}

    options.setdefault("name", "opencode-acp")
    options.setdefault("session_env", session_env)
    return AcpEngine(command, **options)


class AcpSession(JsonRpcSession):
    """One ACP session (one agent process), on the long-lived JSON-RPC base."""

    engine_name: str = "acp"

    def __init__(self, engine: AcpEngine, options: SessionOptions | None) -> None:
        self.engine = engine
        self.engine_name: str = engine.engine_name
        super().__init__(
            options,
            handshake_timeout=None,  # each start-up request has its own bound
            cancel_grace=engine.cancel_grace,
            close_stdin_timeout=engine.close_stdin_timeout,
            terminate_timeout=engine.terminate_timeout,
            max_line_bytes=engine.max_line_bytes,
        )
        #: The ACP session id, once the session is open.
        self.session_id: str | None = None
        #: History the agent replayed on ``session/load`` / ``session/fork``.
        self.replayed: list[Message] = []
        self._cwd = _session_cwd(self.options)
        #: Engine notes for the first turn, delivered right after its ``init``.
        self._notes: list[Message] = []
        self._permission_scopes: set[anyio.CancelScope] = set()

    @property
    def acp_translator(self) -> AcpTranslator:
        translator = self.translator
        assert isinstance(translator, AcpTranslator)
        return translator

    @property
    def can_compact(self) -> bool:
        """The agent advertises a ``compact`` command (compaction is that command)."""
        return "compact" in self.acp_translator.state.commands

    @property
    def can_handoff(self) -> bool:
        """A new session of the same agent (``session/new``)."""
        return True

    async def _start_fresh(self) -> None:
        # The earlier session stays open in the agent (some agents end their process on
        # session/close); the next prompt goes to the new one.
        self._forget_resume()
        await self._open_session()
        await self._configure()

    @property
    def state(self) -> Any:
        """What the agent said about the session (capabilities, modes, config options...)."""
        return self.acp_translator.state

    # -- hooks of the JSON-RPC base ------------------------------------------------------------

    def _new_translator(self) -> AcpTranslator:
        options = self.options
        return AcpTranslator(
            engine=self.engine.engine_name,
            model=options.model,
            context_window_tokens=options.context_window_tokens,
            catalog=self.engine.catalog,
            deltas=options.partial_messages,
        )

    def _extra_env(self) -> dict[str, str]:
        extra = dict(self.engine.env)
        if self.engine.session_env is not None:
            extra.update(self.engine.session_env(self.options))
        extra.update(self.options.env)
        return extra

    def _argv(self) -> tuple[str, ...]:
        return tuple(self.engine.command_for(self.options))

    async def _handshake(self, conn: JsonRpcConnection) -> None:
        if self._proc is not None:
            self.acp_translator.state.process = ProcessMeta(pid=self._proc.pid, binary=self.argv[0])
        await self._initialize()
        await self._open_session()
        await self._configure()

    async def _send_prompt(self, ctx: TurnContext) -> None:
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": ctx.prompt}]}
        await self.connection.request(Method.SESSION_PROMPT, params)

    async def _prompt_rejected(self, ctx: TurnContext, error: JsonRpcError) -> None:
        if error.code == INVALID_PARAMS and "not found" in error.message.lower():
            raise SessionNotFoundError(
                f"{self.engine_name}: {error.message}",
                session_id=self.session_id,
                engine=self.engine_name,
            ) from error

    async def _interrupt(self) -> None:
        # Questions still open are answered ``cancelled``; the prompt then answers ``cancelled``.
        for scope in list(self._permission_scopes):
            scope.cancel()
        with anyio.move_on_after(1.0), contextlib.suppress(AgentrunError):
            await self.connection.notify(Method.SESSION_CANCEL, {"sessionId": self.session_id})

    @property
    def request_handlers(self) -> RequestHandlerTable:
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            Method.SESSION_REQUEST_PERMISSION: self._permission,
            Method.ELICITATION_CREATE: self._elicit,
        }
        if self.engine.fs_access:
            handlers[Method.FS_READ_TEXT_FILE] = self._fs_read
            handlers[Method.FS_WRITE_TEXT_FILE] = self._fs_write
        return handlers

    async def _observe(self, direction: str, msg: Any) -> None:
        await super()._observe(direction, msg)
        if self._notes and direction == "send" and self.acp_translator.prompt_pending:
            notes, self._notes = self._notes, []
            await self._route(notes)

    async def _route(self, messages: list[Message]) -> None:
        self.replayed.extend(m for m in messages if m.replayed)
        await super()._route(messages)

    async def _shutdown(self) -> None:
        for scope in list(self._permission_scopes):
            scope.cancel()
        caps = self.acp_translator.state.capabilities.session_capabilities
        conn = self.conn
        if caps.close is not None and self.session_id is not None and conn is not None:
            # Agents that ignore the end of their input (codex-acp) would otherwise take the whole
            # close_stdin_timeout; session/close lets them end at once.
            with anyio.move_on_after(1.0), contextlib.suppress(AgentrunError, OSError):
                await conn.request(Method.SESSION_CLOSE, {"sessionId": self.session_id})
        await super()._shutdown()

    async def _call(self, method: str, params: Any, timeout: float) -> Any:
        """A start-up request: timeouts and a dead agent become typed errors."""
        try:
            return await self.connection.request(method, params, timeout=timeout)
        except RequestTimeoutError:
            raise AcpTimeoutError(method, timeout, engine=self.engine_name) from None
        except ConnectionClosedError as exc:
            raise await self._exit_error(f"waiting for {method}") from exc

    # -- handshake and session ---------------------------------------------------------------

    async def _initialize(self) -> None:
        fs = self.engine.fs_access
        request = InitializeRequest(
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs),
                terminal=False,
                # Form elicitations reach the question callback; without one none are invited.
                elicitation={"form": {}} if self.options.question_handler is not None else None,
            ),
            client_info=Implementation(name="agentrun", version=VERSION),
        )
        try:
            await self._call(Method.INITIALIZE, request, self.engine.handshake_timeout)
        except JsonRpcError as exc:
            raise ProtocolError(
                f"{self.engine_name}: initialize failed: {exc.message}", engine=self.engine_name
            ) from exc

    def _session_params(self, session_id: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"cwd": self._cwd, "mcpServers": self.engine.mcp_servers}
        if session_id is not None:
            params = {"sessionId": session_id, **params}
        caps = self.acp_translator.state.capabilities.session_capabilities
        if self.options.add_dirs and caps.additional_directories is not None:
            params["additionalDirectories"] = list(self.options.add_dirs)
        return params

    async def _open_session(self) -> None:
        session = self.options
        state = self.acp_translator.state
        caps = state.capabilities
        resume_id = session.resume_id
        if resume_id is None and session.continue_last:
            resume_id = await self._latest_session()
        if resume_id is None:
            method = Method.SESSION_NEW
        elif session.fork:
            if caps.session_capabilities.fork is None:
                raise ConfigurationError(
                    f"{self.engine_name}: the agent cannot fork sessions (no session/fork)",
                    option="fork",
                    engine=self.engine_name,
                )
            method = Method.SESSION_FORK
        else:
            can_load = caps.load_session
            can_resume = caps.session_capabilities.resume is not None
            if not (can_load or can_resume):
                raise ConfigurationError(
                    f"{self.engine_name}: the agent cannot load or resume sessions",
                    option="resume_id",
                    engine=self.engine_name,
                )
            prefer_resume = self.engine.resume_with == "resume"
            use_resume = can_resume and (prefer_resume or not can_load)
            method = Method.SESSION_RESUME if use_resume else Method.SESSION_LOAD
        params = self._session_params(resume_id)
        try:
            result = await self._call(method, params, self.engine.session_timeout)
        except JsonRpcError as exc:
            if exc.code == AUTH_REQUIRED or "auth" in exc.message.lower():
                raise EngineUnavailableError(
                    f"{self.engine_name}: {method} failed: {exc.message} (the agent wants to be "
                    "logged in)",
                    engine=self.engine_name,
                ) from exc
            if resume_id is not None and (exc.code == INVALID_PARAMS or "not found" in exc.message):
                raise SessionNotFoundError(
                    f"{self.engine_name}: {method} failed: {exc.message}",
                    session_id=resume_id,
                    engine=self.engine_name,
                ) from exc
            raise ProtocolError(
                f"{self.engine_name}: {method} failed: {exc.message}", engine=self.engine_name
            ) from exc
        fields = cast("dict[str, Any]", result) if isinstance(result, dict) else {}
        sid = fields.get("sessionId")
        session_id = sid if isinstance(sid, str) else resume_id
        if not session_id:
            raise ProtocolError(
                f"{self.engine_name}: {method} returned no session id", engine=self.engine_name
            )
        self.session_id = session_id
        self.resume_id: str | None = session_id

    async def _latest_session(self) -> str | None:
        if self.acp_translator.state.capabilities.session_capabilities.list is None:
            return None
        try:
            result = await self._call(
                Method.SESSION_LIST, {"cwd": self._cwd}, self.engine.request_timeout
            )
        except JsonRpcError:
            return None
        fields = cast("dict[str, Any]", result) if isinstance(result, dict) else {}
        sessions = fields.get("sessions")
        best: tuple[str, str] | None = None
        for item in cast("list[Any]", sessions or []):
            if not isinstance(item, dict):
                continue
            entry = cast("dict[str, Any]", item)
            sid, updated = entry.get("sessionId"), entry.get("updatedAt") or ""
            if isinstance(sid, str) and (best is None or str(updated) > best[1]):
                best = (sid, str(updated))
        return None if best is None else best[0]

    # -- session options ---------------------------------------------------------------------

    def _option(self, category: str) -> SessionConfigOption | None:
        for option in self.acp_translator.state.config_options:
            if option.category == category or option.id == category:
                return option
        return None

    async def _set(self, method: str, params: dict[str, Any], option: str) -> None:
        try:
            await self._call(
                method, {"sessionId": self.session_id, **params}, self.engine.request_timeout
            )
        except JsonRpcError as exc:
            raise ConfigurationError(
                f"{self.engine_name}: {method} failed for {option}: {exc.message}",
                option=option,
                engine=self.engine_name,
            ) from exc

    def _not_offered(self, option: str, value: str, offered: Sequence[str]) -> ConfigurationError:
        listed = ", ".join(repr(v) for v in offered) or "none"
        return ConfigurationError(
            f"{self.engine_name}: {option} {value!r} is not offered by the agent (offered: "
            f"{listed})",
            option=option,
            engine=self.engine_name,
        )

    async def _select_model(self, model: str) -> None:
        state = self.acp_translator.state
        option = self._option("model")
        if option is not None:
            values = config_values(option)
            if model not in values:
                raise self._not_offered("model", model, values)
            if option.current_value != model:
                await self._set(
                    Method.SESSION_SET_CONFIG_OPTION,
                    {"configId": option.id, "value": model},
                    "model",
                )
            return
        if state.models is not None:
            ids = [m.model_id for m in state.models.available_models]
            if model not in ids:
                raise self._not_offered("model", model, ids)
            if state.models.current_model_id != model:
                await self._set(Method.SESSION_SET_MODEL, {"modelId": model}, "model")
            return
        raise ConfigurationError(
            f"{self.engine_name}: the agent offers no model selection (model {model!r})",
            option="model",
            engine=self.engine_name,
        )

    def _mode_ids(self) -> tuple[SessionConfigOption | None, list[str]]:
        option = self._option("mode")
        if option is not None:
            return option, config_values(option)
        modes = self.acp_translator.state.modes
        return None, [] if modes is None else [m.id for m in modes.available_modes]

    async def _select_mode(self, mode_id: str, option_name: str) -> None:
        option, ids = self._mode_ids()
        if mode_id not in ids:
            raise self._not_offered(option_name, mode_id, ids)
        if mode_id == self.acp_translator.state.mode:
            return
        if option is not None:
            await self._set(
                Method.SESSION_SET_CONFIG_OPTION,
                {"configId": option.id, "value": mode_id},
                option_name,
            )
        else:
            await self._set(Method.SESSION_SET_MODE, {"modeId": mode_id}, option_name)

    async def _configure(self) -> None:
        session = self.options
        unsupported: list[tuple[str, str]] = []
        if session.model is not None:
            await self._select_model(session.model)
        _, mode_ids = self._mode_ids()
        raw_mode = session.option("acp", "mode")
        if raw_mode is not None:
            await self._select_mode(raw_mode, "acp.mode")
        elif session.agent_id is not None:
            if session.agent_id in mode_ids:
                await self._select_mode(session.agent_id, "agent_id")
            else:
                unsupported.append(("agent_id", "the agent offers no mode with that id"))
        if raw_mode is None and session.mode == "plan" and session.agent_id is None:
            plan = next((m for m in mode_ids if m.lower() == "plan"), None)
            plan = plan or next((m for m in mode_ids if "plan" in m.lower()), None)
            if plan is None:
                raise self._not_offered("mode", "plan", mode_ids)
            await self._select_mode(plan, "mode")
        elif raw_mode is None and session.agent_id is None and self.engine.default_mode:
            if self.engine.default_mode in mode_ids:
                await self._select_mode(self.engine.default_mode, "default_mode")
            else:
                unsupported.append(("default_mode", "the agent offers no such mode"))
        for key, value in sorted(session.options.items()):
            if key.startswith("acp.config."):
                await self._set_config(key.removeprefix("acp.config."), value, key)
        if session.effort is not None:
            level = self._option("thought_level")
            wanted = {"max": ("max", "xhigh")}.get(session.effort, (session.effort,))
            value = next(
                (v for v in wanted if level is not None and v in config_values(level)), None
            )
            if level is not None and value is not None:
                await self._set_config(level.id, value, "effort")
            else:
                unsupported.append(("effort", "the agent offers no matching reasoning level"))
        unsupported.extend(self._unsupported())
        if unsupported:
            names = ", ".join(name for name, _ in unsupported)
            self._notes.append(
                Message(
                    type=MessageType.SYSTEM,
                    subtype="unsupported_option",
                    text=f"{self.engine_name} ignores: {names}",
                    data={"options": [{"option": n, "reason": r} for n, r in unsupported]},
                )
            )

    async def _set_config(self, config_id: str, value: str, option_name: str) -> None:
        option = next(
            (o for o in self.acp_translator.state.config_options if o.id == config_id), None
        )
        if option is None:
            offered = [o.id for o in self.acp_translator.state.config_options]
            raise self._not_offered(option_name, config_id, offered)
        if option.type == "boolean":
            flag = value.lower() in ("1", "true", "yes", "on")
            await self._set(
                Method.SESSION_SET_CONFIG_OPTION,
                {"configId": config_id, "value": flag, "type": "boolean"},
                option_name,
            )
            return
        values = config_values(option)
        if values and value not in values:
            raise self._not_offered(option_name, value, values)
        await self._set(
            Method.SESSION_SET_CONFIG_OPTION, {"configId": config_id, "value": value}, option_name
        )

    def _unsupported(self) -> list[tuple[str, str]]:
        s = self.options
        caps = self.acp_translator.state.capabilities.session_capabilities
        out: list[tuple[str, str]] = []
        if s.system_prompt is not None:
            out.append(("system_prompt", "ACP has no system prompt"))
        if s.append_system_prompt is not None:
            out.append(("append_system_prompt", "ACP has no system prompt"))
        if s.max_turns is not None:
            out.append(("max_turns", "ACP has no step limit"))
        if s.thinking_budget is not None:
            out.append(("thinking_budget", "ACP has no thinking budget"))
        if s.allowed_tools:
            out.append(("allowed_tools", "answer permission requests instead"))
        if s.add_dirs and caps.additional_directories is None:
            out.append(("add_dirs", "the agent does not take additional directories"))
        if (
            s.continue_last
            and s.resume_id is None
            and self.session_id is not None
            and (caps.list is None)
        ):
            out.append(("continue_last", "the agent cannot list sessions; a new one was started"))
        return out

    # -- agent -> client requests ------------------------------------------------------------

    async def _permission(self, params: Any) -> dict[str, Any]:
        try:
            request = RequestPermissionRequest.model_validate(params)
        except ValidationError as exc:
            raise JsonRpcError.invalid_params(f"{exc.error_count()} problems") from None
        cancelled: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
        if self._queue is None:
            return cancelled  # no turn is running: nobody can be asked
        options = tuple(
            PermissionOption(option_id=o.option_id, kind=str(o.kind), name=o.name)
            for o in request.options
        )
        call = request.tool_call
        known = self.acp_translator.state.tools.get(call.tool_call_id)
        tool_input = call.raw_input
        if known is not None and known.input not in (None, {}):
            tool_input = known.input
        ask = PermissionRequest(
            tool_name=(known.name if known is not None else None) or call.title,
            tool_use_id=call.tool_call_id,
            input=tool_input,
            title=call.title,
            kind=None if call.kind is None else str(call.kind),
            options=options,
            engine=self.engine_name,
            raw=params,
        )
        chosen: PermissionOption | None = None
        scope = anyio.CancelScope()
        self._permission_scopes.add(scope)
        try:
            with scope:
                chosen = await self._decide(ask, options)
        finally:
            self._permission_scopes.discard(scope)
        if chosen is None:
            return cancelled
        return {"outcome": {"outcome": "selected", "optionId": chosen.option_id}}

    async def _elicit(self, params: Any) -> dict[str, Any]:
        """A form elicitation: one question per field of the requested schema; the answers go
        back as the form's content, a refusal as ``decline``."""
        data = as_object(params) or {}
        schema = as_object(data.get("requestedSchema")) or {}
        fields = as_object(schema.get("properties")) or {}
        if self._queue is None or not fields:
            return {"action": "decline"}  # no turn is running, or no form: nothing to answer
        kinds = {name: str((as_object(f) or {}).get("type")) for name, f in fields.items()}
        request = QuestionRequest(
            questions=tuple(
                elicitation_question(name, as_object(field) or {}) for name, field in fields.items()
            ),
            tool_use_id=data.get("toolCallId") if isinstance(data.get("toolCallId"), str) else None,
            message=data.get("message") if isinstance(data.get("message"), str) else None,
            engine=self.engine_name,
            raw=params,
        )
        answer: QuestionAnswer | None = None
        scope = anyio.CancelScope()
        self._permission_scopes.add(scope)
        try:
            with scope:
                answer, notes = await self._ask_question(request)
                await self._route(notes)
        finally:
            self._permission_scopes.discard(scope)
        if answer is None:
            return {"action": "cancel"}
        if answer.refused:
            return {"action": "decline"}
        content = {
            name: elicitation_value(kinds.get(name, "string"), values)
            for name, values in answer.answers.items()
            if values
        }
        return {"action": "accept", "content": content}

    async def _decide(
        self, ask: PermissionRequest, options: tuple[PermissionOption, ...]
    ) -> PermissionOption | None:
        session = self.options
        if session.hitl is False:
            allows = [o for o in options if o.kind == "allow_once"]
            allows = allows or [o for o in options if o.kind == "allow_always"]
            return allows[0] if allows else None
        # Asked with a handler, or denied without one; the translator records a denial from the
        # answer on the wire, so the shared flow's own denial note is dropped.
        decision, notes = await self._ask_permission(ask, hitl=True)
        await self._route([n for n in notes if n.type is not MessageType.SYSTEM])
        chosen = decision.choose(options)
        if chosen is None and not decision.allow:
            chosen = next((o for o in options if o.kind.startswith("reject")), None)
        return chosen

    def _fs_path(self, path: str) -> Path:
        root = Path(self._cwd).resolve()
        target = Path(path)
        if not target.is_absolute():
            target = root / target
        resolved = target.resolve()
        if resolved != root and root not in resolved.parents:
            raise JsonRpcError(
                INVALID_PARAMS,
                f"Invalid params: {path} is outside the session's working directory",
                {"path": path},
            )
        return resolved

    async def _fs_read(self, params: Any) -> dict[str, Any]:
        try:
            request = ReadTextFileRequest.model_validate(params)
        except ValidationError as exc:
            raise JsonRpcError.invalid_params(f"{exc.error_count()} problems") from None
        path = self._fs_path(request.path)

        def read() -> str:
            text = path.read_text(encoding="utf-8")
            if request.line is None and request.limit is None:
                return text
            lines = text.splitlines(keepends=True)
            start = max((request.line or 1) - 1, 0)
            end = None if request.limit is None else start + max(request.limit, 0)
            return "".join(lines[start:end])

        try:
            content = await anyio.to_thread.run_sync(read)
        except FileNotFoundError:
            raise JsonRpcError(
                RESOURCE_NOT_FOUND, f"Resource not found: {request.path}", {"path": request.path}
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise JsonRpcError(-32603, f"Internal error: {type(exc).__name__}") from None
        return {"content": content}

    async def _fs_write(self, params: Any) -> None:
        try:
            request = WriteTextFileRequest.model_validate(params)
        except ValidationError as exc:
            raise JsonRpcError.invalid_params(f"{exc.error_count()} problems") from None
        path = self._fs_path(request.path)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(request.content, encoding="utf-8")

        try:
            await anyio.to_thread.run_sync(write)
        except OSError as exc:
            raise JsonRpcError(-32603, f"Internal error: {type(exc).__name__}") from None
