"""The ACP client engine: one long-lived agent process per session, spoken to over JSON-RPC.

:class:`AcpEngine` runs any Agent Client Protocol agent given its command line; the
:func:`opencode_acp` preset runs the pinned ``opencode acp``. See ``docs/engines/acp.md``.
An :class:`AcpDriver` (:mod:`._session_core`: the process, the handshake, turns, closing) holds
the session options (:mod:`._session_options`) and the answers to the agent's requests
(:mod:`._client_requests`) as collaborators.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from ..._bases.first_start import opencode_database, store_lock
from ..._bases.pool import ProcessPool, check_pool_size
from ..._turns.driver import CANCEL_GRACE
from ..._turns.engine import Engine
from ..._turns.session import Session
from ..._vocabulary.context import Catalog
from ..._vocabulary.errors import ConfigurationError, EngineUnavailableError
from ..._vocabulary.options import SessionOptions
from ..._wire.programs import resolve_binary
from ._session_core import (
    AcpDriver,
    AcpTimeoutError,
    acp_answered_session,
    acp_session_key,
    session_cwd,
)

__all__ = ["AcpDriver", "AcpEngine", "AcpTimeoutError", "opencode_acp"]

CommandSpec = Sequence[str] | Callable[[SessionOptions], Sequence[str]]
#: Awaited with the agent's environment before it starts; returns what ends the guard, if any.
StartGuard = Callable[[Mapping[str, str]], Awaitable[Callable[[], None] | None]]


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
    * ``start_guard(env)``: awaited before the agent starts, with its environment; what it
      returns (a function, or ``None``) is called once the session is open or the start
      failed (``opencode_acp`` serialises first starts on one OpenCode store with it).
    * ``pool``: N sessions at most share one agent process (``session/new`` on one
      connection), a process started when none has room; sessions that would start different
      processes (argv, working directory, environment, sandbox) never share one. ``None``
      (default): a process per session. See ``docs/sessions.md``.
    """

    name: str = "acp"
    #: What the recorder captures: both directions of the JSON-RPC traffic.
    wire_format: ClassVar[Literal["stdout", "jsonrpc"]] = "jsonrpc"
    #: Whether the agent can tell how full its context is (``usage_update``); where it cannot,
    #: a ``context_policy`` is reported ignored (``unsupported_option``).
    reports_context_fill: bool = True

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
        start_guard: StartGuard | None = None,
        pool: int | None = None,
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
        self.start_guard = start_guard
        size = check_pool_size(pool, engine=name)
        #: The shared agent processes (``pool=N``: N sessions at most on one process), or
        #: ``None``: each session runs a process of its own.
        self.pool: ProcessPool | None = (
            None
            if size is None
            else ProcessPool(
                size,
                engine=name,
                session_key=acp_session_key,
                answered_session=acp_answered_session,
            )
        )

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(AcpDriver(self, options))

    async def aclose(self) -> None:
        """End the pooled agent processes (their sessions end with a typed error); nothing
        without ``pool``. Each process also ends when its last session closes."""
        if self.pool is not None:
            await self.pool.aclose()

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


def opencode_acp(binary: str | None = None, **options: Any) -> AcpEngine:
    """``opencode acp --cwd <session cwd>`` (the pinned OpenCode, else ``PATH``).

    ``binary`` (or ``SessionOptions.binary``) overrides the program. The session option
    ``opencode.permission`` (JSON, e.g. ``'{"bash": "ask"}'``) becomes ``OPENCODE_PERMISSION``,
    as for the ``opencode`` run engine. Other keyword arguments go to :class:`AcpEngine`.
    """

    def command(session: SessionOptions) -> list[str]:
        explicit = session.binary if session.binary is not None else binary
        exe = resolve_binary("opencode", explicit=explicit, engine="opencode-acp")
        return [exe, "acp", "--cwd", session_cwd(session)]

    def session_env(session: SessionOptions) -> dict[str, str]:
        permission = session.option("opencode", "permission")
        return {} if permission is None else {"OPENCODE_PERMISSION": permission}

    async def start_guard(env: Mapping[str, str]) -> Callable[[], None] | None:
        lock = await store_lock(opencode_database(env), engine="opencode-acp")
        return None if lock is None else lock.release

    options.setdefault("name", "opencode-acp")
    options.setdefault("session_env", session_env)
    options.setdefault("start_guard", start_guard)
    return AcpEngine(command, **options)
