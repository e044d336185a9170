"""The core of an ACP session: one long-lived agent process, spoken to over JSON-RPC.

Lifecycle (all in :meth:`AcpDriver.start`): spawn the agent (own process group, stdin piped),
run the JSON-RPC reader as a background task, ``initialize``, then open the session:
``session/new`` (bounded by ``session_timeout``: agents can hang starting MCP servers), or for
``SessionOptions.resume_id`` ``session/load`` (the agent replays history, delivered with
``replayed=True`` at the start of the first turn and kept in :attr:`AcpDriver.replayed`) or
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

The driver holds two collaborators, each behind a small protocol of what it uses of the driver:
the session options (model, mode, config options) are applied by
:class:`~._session_options.SessionSettings`, the agent's requests to the client (permissions,
elicitations, files) are answered by :class:`~._client_requests.ClientRequests`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, cast

import anyio

from ..._bases.jsonrpc_session import JsonRpcDriver, RequestHandlerTable
from ..._turns.turn import TurnContext
from ..._version import VERSION
from ..._vocabulary.errors import (
    AgentrunError,
    ConfigurationError,
    EngineUnavailableError,
    ForkNotSupportedError,
    LineTooLongError,
    ProtocolError,
    SessionNotFoundError,
)
from ..._vocabulary.messages import Message, ProcessMeta
from ..._vocabulary.options import SessionOptions
from ..._wire.jsonrpc import (
    INVALID_PARAMS,
    ConnectionClosedError,
    JsonRpcConnection,
    JsonRpcError,
    RequestTimeoutError,
)
from ._client_requests import ClientRequests
from ._fs import WorkspaceFiles
from ._schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeRequest,
    Method,
)
from ._session_options import SessionSettings
from ._translate import AcpTranslator

if TYPE_CHECKING:
    from ._engine import AcpEngine

__all__ = [
    "AUTH_REQUIRED",
    "AcpDriver",
    "AcpTimeoutError",
    "acp_answered_session",
    "acp_session_key",
    "session_cwd",
]

#: How long a loaded session's history stream must have been quiet before the first prompt
#: (agents that stream it after the load's answer), and the longest wait for that (seconds).
HISTORY_QUIET = 0.5
HISTORY_WAIT = 10.0

#: ACP's "authentication required" error code.
AUTH_REQUIRED = -32000
#: ACP's "resource not found" error code.
RESOURCE_NOT_FOUND = -32002
#: Pages of ``session/list`` read to tell whether the agent has a session (OpenCode lists 100 a
#: page: 5,000 sessions of a directory).
LIST_PAGES = 50
#: How the pinned agents say, in an error's message or ``data.details``, that they do not know
#: a session id they were asked to load (a malformed id included).
UNKNOWN_SESSION_WORDS = (
    "not found",  # claude-agent-acp and most agents
    "no rollout found",  # codex-acp (Codex)
    "invalid session id",  # codex-acp: not a UUID
    "does not match any session",  # claude-agent-acp: not a UUID nor a title
    "no previous sessions found",  # Gemini CLI
)


def _details(error: JsonRpcError) -> str:
    """The ``data.details`` text of an agent's error ("" when it has none)."""
    data: Any = error.data
    details = cast("dict[str, Any]", data).get("details") if isinstance(data, dict) else None
    return details if isinstance(details, str) else ""


class AcpTimeoutError(RequestTimeoutError):
    """The agent did not answer a start-up request in time (``initialize``, ``session/new``
    ...). The agent process was stopped."""


def session_cwd(session: SessionOptions) -> str:
    """The working directory of the session (the caller's when none is set), absolute: ACP
    requires it so, and agents refuse a relative one (claude-agent-acp: "`cwd` must be an
    absolute path")."""
    return os.path.abspath(session.cwd) if session.cwd is not None else os.getcwd()


class AcpDriver(JsonRpcDriver):
    """One ACP session (one agent process), on the long-lived JSON-RPC base: its lifecycle,
    with two collaborators it holds: :class:`SessionSettings` (the session options) and
    :class:`ClientRequests` (the answers to the agent's requests)."""

    engine_name: str = "acp"

    def __init__(self, engine: AcpEngine, options: SessionOptions | None) -> None:
        self.engine = engine
        self.engine_name: str = engine.engine_name
        super().__init__(
            options,
            pool=engine.pool,
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
        self._cwd = session_cwd(self.options)
        #: Engine notes for the first turn, delivered right after its ``init``.
        self._notes: list[Message] = []
        #: The session options, told to the agent once its session is open.
        self.settings: SessionSettings = SessionSettings(self)
        #: The answers to the agent's requests (permissions, forms, files).
        self.requests: ClientRequests = ClientRequests(
            self, files=WorkspaceFiles(self._cwd) if engine.fs_access else None
        )

    @property
    def request_handlers(self) -> RequestHandlerTable:
        return self.requests.table()

    @property
    def turn_running(self) -> bool:
        """Whether a turn runs (an agent's request can then be put to the caller)."""
        return self._queue is not None

    async def deliver(self, messages: list[Message]) -> None:
        """Hand messages to the running turn, in order with the agent's own."""
        await self._route(messages)

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

    async def start_fresh(self) -> None:
        # The earlier session stays open in the agent (some agents end their process on
        # session/close); the next prompt goes to the new one.
        self.forget_resume()
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

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        guard = self.engine.start_guard
        done = None if guard is None else await guard(self.env)
        try:
            await super().start(task_group)
        finally:
            if done is not None:
                done()

    def _extra_env(self) -> dict[str, str]:
        extra = dict(self.engine.env)
        if self.engine.session_env is not None:
            extra.update(self.engine.session_env(self.options))
        extra.update(self.options.env)
        return extra

    def _argv(self) -> tuple[str, ...]:
        return tuple(self.engine.command_for(self.options))

    async def _handshake(self, conn: JsonRpcConnection) -> None:
        await self._open_process(conn)
        await self._open_session_on(conn)

    async def _open_process(self, conn: JsonRpcConnection) -> None:
        self._note_process()
        await self._initialize()

    async def _open_session_on(self, conn: JsonRpcConnection) -> None:
        self._note_process()
        await self._open_session()
        await self._configure()

    def _note_process(self) -> None:
        if self._proc is not None:
            self.acp_translator.state.process = ProcessMeta(pid=self._proc.pid, binary=self.argv[0])

    def _pooled_cwd(self) -> str | None:
        # ``session/new`` gives each session its own working directory, so sessions of other
        # directories share a process (an agent whose command line names the directory, as
        # ``opencode acp --cwd``, is kept apart by its argv). A sandbox is made for one
        # workspace: sandboxed sessions share only with sessions of the same directory.
        return self.options.cwd if self.options.sandbox is not None else None

    def pool_key(self) -> Hashable:
        # ``initialize`` invites form elicitations only for a session with a question handler.
        return (super().pool_key(), self.options.question_handler is not None)

    async def _send_prompt(self, ctx: TurnContext) -> None:
        state = self.acp_translator.state
        if state.history_after_load:
            await self._history_streamed()
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": ctx.prompt}]}
        await self.connection.request(Method.SESSION_PROMPT, params)

    async def _history_streamed(self) -> None:
        """Wait until an agent that streams a loaded session's history after answering the load
        (Gemini CLI, which starts that stream without awaiting it) has been quiet for
        ``HISTORY_QUIET`` seconds, ``HISTORY_WAIT`` at most: the prompt ends the replay, and
        history read after it would be taken for the new turn's answer."""
        state = self.acp_translator.state
        with anyio.move_on_after(HISTORY_WAIT):
            # Silence has no event to wait for: the clock is read again after each sleep.
            while (quiet := time.monotonic() - state.last_update_at) < HISTORY_QUIET:  # noqa: ASYNC110
                await anyio.sleep(HISTORY_QUIET - quiet)
        state.history_after_load = False

    async def _prompt_rejected(self, ctx: TurnContext, error: JsonRpcError) -> None:
        if error.code == INVALID_PARAMS and "not found" in error.message.lower():
            raise SessionNotFoundError(
                f"{self.engine_name}: {error.message}",
                session_id=self.session_id,
                engine=self.engine_name,
            ) from error

    async def _answer_too_long(self, ctx: TurnContext, error: LineTooLongError) -> bool:
        # The agent answered, so its turn is over: the turn ends with a failed result and the
        # session goes on.
        await self._route(self.acp_translator.prompt_answer_lost(error.size, error.limit))
        return True

    async def _interrupt(self) -> None:
        # Questions still open are answered ``cancelled``; the prompt then answers ``cancelled``.
        self.requests.cancel_waiting()
        with anyio.move_on_after(1.0), contextlib.suppress(AgentrunError):
            await self.connection.notify(Method.SESSION_CANCEL, {"sessionId": self.session_id})

    async def _observe(self, direction: str, msg: Any) -> None:
        await super()._observe(direction, msg)
        if self._notes and direction == "send" and self.acp_translator.prompt_pending:
            notes, self._notes = self._notes, []
            await self._route(notes)

    async def _route(self, messages: list[Message]) -> None:
        self.replayed.extend(m for m in messages if m.replayed)
        await super()._route(messages)

    async def shutdown(self) -> None:
        self.requests.cancel_waiting()
        caps = self.acp_translator.state.capabilities.session_capabilities
        conn = self.conn
        if caps.close is not None and self.session_id is not None and conn is not None:
            # Agents that ignore the end of their input (codex-acp) would otherwise take the whole
            # close_stdin_timeout; session/close lets them end at once.
            with anyio.move_on_after(1.0), contextlib.suppress(AgentrunError, OSError):
                await conn.request(Method.SESSION_CLOSE, {"sessionId": self.session_id})
        await super().shutdown()

    async def call(self, method: str, params: Any, timeout: float) -> Any:
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
            await self.call(Method.INITIALIZE, request, self.engine.handshake_timeout)
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
                raise ForkNotSupportedError(
                    f"{self.engine_name}: the agent cannot fork sessions (no session/fork)",
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
            result = await self.call(method, params, self.engine.session_timeout)
        except JsonRpcError as exc:
            if exc.code == AUTH_REQUIRED or "auth" in exc.message.lower():
                raise EngineUnavailableError(
                    f"{self.engine_name}: {method} failed: {exc.message} (the agent wants to be "
                    "logged in)",
                    engine=self.engine_name,
                ) from exc
            if resume_id is not None and await self._unknown_session(resume_id, exc):
                details = _details(exc)
                raise SessionNotFoundError(
                    f"{self.engine_name}: {method} failed: {exc.message}"
                    + (f" ({details})" if details else ""),
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

    async def _unknown_session(self, session_id: str, error: JsonRpcError) -> bool:
        """Whether the agent's refusal to load, resume or fork ``session_id`` means it does not
        know it: "invalid params" or "resource not found", words saying so in the message or
        its ``data.details`` (the agents send most refusals as an internal error), or, for any
        other refusal, a ``session/list`` of the agent's sessions without it."""
        if error.code in (INVALID_PARAMS, RESOURCE_NOT_FOUND):
            return True
        said = f"{error.message} {_details(error)}".lower()
        if any(words in said for words in UNKNOWN_SESSION_WORDS):
            return True
        return await self._listed(session_id) is False

    async def _session_list(self, cursor: str | None = None) -> dict[str, Any] | None:
        """The agent's answer to ``session/list`` for this directory, from ``cursor`` on
        (``None``: it offers none, or refused; a non-object answer is an empty one)."""
        if self.acp_translator.state.capabilities.session_capabilities.list is None:
            return None
        params: dict[str, Any] = {"cwd": self._cwd}
        if cursor is not None:
            params["cursor"] = cursor
        try:
            result = await self.call(Method.SESSION_LIST, params, self.engine.request_timeout)
        except JsonRpcError:
            return None
        return cast("dict[str, Any]", result) if isinstance(result, dict) else {}

    async def _listed(self, session_id: str) -> bool | None:
        """Whether ``session/list`` names ``session_id``, its pages followed up to
        :data:`LIST_PAGES` (``None``: the agent cannot say)."""
        cursor: str | None = None
        cursors: set[str] = set()
        for _ in range(LIST_PAGES):
            fields = await self._session_list(cursor)
            if fields is None:
                return None
            sessions = fields.get("sessions")
            if not isinstance(sessions, list):
                return None
            for item in cast("list[Any]", sessions):
                if (
                    isinstance(item, dict)
                    and cast("dict[str, Any]", item).get("sessionId") == session_id
                ):
                    return True
            following = fields.get("nextCursor")
            if not following:
                return False
            if not isinstance(following, str) or following in cursors:
                return None  # a cursor that leads nowhere new
            cursors.add(following)
            cursor = following
        return None

    async def _latest_session(self) -> str | None:
        fields = await self._session_list()
        if fields is None:
            return None
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

    async def _configure(self) -> None:
        """Apply the session options once the session is open (:mod:`._session_options`)."""
        self._notes.extend(await self.settings.configure())


def acp_session_key(params: Any) -> str | None:
    """The ACP session a message's params name (``sessionId``)."""
    if isinstance(params, dict):
        session = cast("dict[str, Any]", params).get("sessionId")
        if isinstance(session, str):
            return session
    return None


def acp_answered_session(method: str, result: Any) -> str | None:
    """The session the answer to ``method`` opened (``session/new``, ``session/fork``)."""
    if method in (Method.SESSION_NEW, Method.SESSION_FORK):
        return acp_session_key(result)
    return None
