"""``agentrun mcp``: agentrun as a Model Context Protocol server (``agentrun-py[mcp]``).

An agent in one tool (Claude Code, an IDE assistant, any MCP client) delegates work to another
agent through six tools: ``list_engines``, ``start_session``, ``run_turn`` (the
:class:`~agentrun.TurnSummary` as structured content, with progress notifications carrying the
context fill while it runs), ``cancel_turn``, ``get_context`` and ``close_session``.

Each session runs in a task of the server's own, so it is closed when the server stops: for the
stdio transport, when the client disconnects. ``max_sessions`` bounds how many run at once and
working directories must lie under one of ``roots`` (default: the server's working directory).
With ``embedded=True`` the real agents run against the embedded scripted model server, offline
(``agentrun mcp --embedded``, as ``agentrun acp --embedded``).

::

    server = build_server(roots=["/work"], max_sessions=4)
    server.run()                          # stdio
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import os
import tempfile
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from mcp.types import CallToolResult, InputRequiredResult
    from pydantic import ValidationError
except ImportError as _missing:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "agentrun mcp needs the MCP SDK: pip install 'agentrun-py[mcp]'"
    ) from _missing

from ._turns.engine import Engine
from ._turns.output import output_spec
from ._turns.session import Session
from ._turns.turn import Turn
from ._version import VERSION
from ._vocabulary.errors import AgentrunError, ConfigurationError
from ._vocabulary.messages import Message, MessageType
from ._vocabulary.options import SessionOptions
from ._vocabulary.summary import ContextSummary, TurnSummary
from .engines._registry import engine_names, get_engine

if TYPE_CHECKING:
    from .offline import Script

__all__ = ["build_server", "serve"]

_logger = logging.getLogger("agentrun.mcp")

EngineFactory = Callable[[], Engine]
_Mode = Literal["plan", "act"]


class _Hosted:
    """One session and the task that holds it open."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.closing = anyio.Event()
        self.closed = anyio.Event()
        self.turn: Turn | None = None
        self.context: ContextSummary | None = None


#: Registered engines that are test doubles, not agents: never offered by name.
_TEST_DOUBLES = frozenset({"scripted"})


class _Sessions:
    """The server's sessions, each held open by a task in the server's task group."""

    def __init__(
        self,
        roots: Sequence[Path],
        max_sessions: int,
        engines: dict[str, EngineFactory] | None,
        embedded: bool = False,
        sandbox: bool = False,
    ) -> None:
        self.roots = roots
        self.sandbox = sandbox
        self.max_sessions = max_sessions
        self.engines = engines
        self.embedded = embedded
        self.hosted: dict[str, _Hosted] = {}
        self.starting = 0
        self.numbers = itertools.count(1)
        self.task_group: anyio.abc.TaskGroup | None = None
        #: With ``embedded``: the model server's address and a directory for agents' homes.
        self.server_url: str | None = None
        self.scratch: Path | None = None

    def names(self) -> list[str]:
        if self.engines is not None:
            return sorted(self.engines)
        if self.embedded:
            from .offline import EMBEDDED_ENGINES

            return sorted(EMBEDDED_ENGINES)
        return [name for name in engine_names() if name not in _TEST_DOUBLES]

    def engine(self, name: str) -> Engine:
        if self.engines is not None:
            factory = self.engines.get(name)
            if factory is None:
                raise ToolError(f"unknown engine {name!r} (known: {', '.join(self.names())})")
            try:
                return factory()
            except AgentrunError as exc:
                raise ToolError(f"engine {name!r} cannot be used: {exc.message}") from None
            except Exception as exc:
                raise ToolError(f"engine {name!r} cannot be used: {_describe(exc)}") from None
        if name in _TEST_DOUBLES or (self.embedded and name not in self.names()):
            raise ToolError(f"unknown engine {name!r} (known: {', '.join(self.names())})")
        try:
            return get_engine(name)
        except AgentrunError as exc:
            raise ToolError(exc.message) from None

    def setup(
        self, name: str, cwd: str, model: str | None, mode: _Mode | None
    ) -> tuple[Engine, SessionOptions]:
        """The engine ``name`` and the options a session of it starts with."""
        if not self.embedded or self.engines is not None:
            engine = self.engine(name)
            try:
                return engine, SessionOptions(cwd=cwd, model=model, mode=mode)
            except ConfigurationError as exc:
                raise ToolError(exc.message) from None
        from .offline import embedded_engine

        self.engine(name)  # an unknown name is refused as it is without --embedded
        assert self.server_url is not None
        assert self.scratch is not None
        home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.scratch))
        try:
            return embedded_engine(
                name,
                self.server_url,
                home / "agent",
                cwd=cwd,
                model=model,
                mode=mode,
                sandbox=self.sandbox,
            )
        except AgentrunError as exc:
            raise ToolError(f"engine {name!r} cannot be used: {exc.message}") from None

    def cwd(self, cwd: str | None) -> str:
        if cwd is not None and "\0" in cwd:
            raise ToolError("cwd contains a NUL character")
        try:
            target = Path(cwd).expanduser() if cwd else self.roots[0]
            resolved = target.resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, an unknown ~user
            raise ToolError(f"cwd {cwd!r} cannot be resolved: {_describe(exc)}") from None
        for root in self.roots:
            if resolved == root or root in resolved.parents:
                if not resolved.is_dir():
                    raise ToolError(f"cwd {str(resolved)!r} is not a directory")
                return str(resolved)
        allowed = ", ".join(str(r) for r in self.roots)
        raise ToolError(f"cwd {str(resolved)!r} is outside the allowed roots ({allowed})")

    def get(self, session_id: str) -> _Hosted:
        hosted = self.hosted.get(session_id)
        if hosted is None:
            raise ToolError(f"no session {session_id!r} (start one with start_session)")
        return hosted

    async def start(
        self, engine_name: str, cwd: str, model: str | None, mode: _Mode | None
    ) -> tuple[str, SessionOptions]:
        if len(self.hosted) + self.starting >= self.max_sessions:
            raise ToolError(f"{self.max_sessions} sessions are open: close one first")
        engine, options = self.setup(engine_name, cwd, model, mode)
        assert self.task_group is not None
        session_id = f"{engine_name}-{next(self.numbers)}"
        self.starting += 1
        try:
            hosted = await self.task_group.start(self._host, engine_name, engine, options)
        except AgentrunError as exc:
            raise ToolError(f"{engine_name} did not start: {exc.message}") from None
        except Exception as exc:  # an engine's own bug: still a reason, and the server goes on
            _logger.exception("session of %s failed to start", engine_name)
            raise ToolError(f"{engine_name} did not start: {_describe(exc)}") from None
        finally:
            self.starting -= 1
        self.hosted[session_id] = hosted
        return session_id, options

    async def _host(
        self,
        engine_name: str,
        engine: Engine,
        options: SessionOptions,
        *,
        task_status: anyio.abc.TaskStatus[_Hosted],
    ) -> None:
        hosted: _Hosted | None = None
        try:
            async with engine.start(options) as session:
                hosted = _Hosted(session)
                task_status.started(hosted)
                await hosted.closing.wait()
        except Exception as exc:
            if hosted is None:
                raise
            # The session ended badly (its agent crashed on close, say): the server goes on.
            _logger.warning("session of %s ended with an error: %s", engine_name, _describe(exc))
        finally:
            if hosted is not None:
                hosted.closed.set()

    async def close(self, session_id: str) -> None:
        hosted = self.hosted.pop(session_id, None)
        if hosted is None:
            raise ToolError(f"no session {session_id!r}")
        hosted.closing.set()
        try:
            await hosted.session.aclose()
        except Exception as exc:  # the agent ended badly on close: it is closed all the same
            _logger.warning("closing %s: %s", session_id, _describe(exc))
        await hosted.closed.wait()

    async def close_all(self) -> None:
        for session_id in list(self.hosted):
            await self.close(session_id)


class _Server(MCPServer[Any]):
    """The SDK's server, whose tools answer arguments of the wrong shape in words."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(_arguments_problem(name, cause)) from cause


def _arguments_problem(tool: str, error: ValidationError) -> str:
    """What is wrong with a tool's arguments, naming each argument (not pydantic's report)."""
    problems: list[str] = []
    for item in error.errors(include_url=False, include_input=False):
        argument = ".".join(str(part) for part in item["loc"]) or "arguments"
        if item["type"] == "missing":
            problems.append(f"the argument {argument!r} is missing")
        else:
            problems.append(f"the argument {argument!r} is invalid: {item['msg']}")
    return f"{tool}: {'; '.join(problems)}"


def build_server(
    *,
    roots: Sequence[str | os.PathLike[str]] | None = None,
    max_sessions: int = 8,
    engines: dict[str, EngineFactory] | None = None,
    embedded: bool = False,
    script: Script | None = None,
    sandbox: bool | None = None,
) -> MCPServer[Any]:
    """The MCP server. ``roots``: the directories sessions may work in (default: the current
    directory); ``engines``: engine factories by name (default: every registered engine that is
    an agent). ``embedded``: run the engines' pinned agents against the embedded scripted model
    server (``script``; default: its default script), offline.

    ``sandbox``: run each embedded session's agent in a sandbox (``docs/sandbox.md``). The
    default (``None``) is *sandboxed wherever a sandbox can be had*: an MCP client is usually a
    model acting unattended, and an embedded agent needs nothing of the caller's. ``True``
    insists (a session that cannot be sandboxed fails to start); ``False`` never sandboxes.
    Sessions of the caller's own agents (not ``embedded``) are not sandboxed: they use the
    caller's own login and configuration, which a sandbox hides; asking for it is a
    :class:`ConfigurationError` (``agentrun run --sandbox --live`` runs a live agent sandboxed,
    through the metering proxy)."""
    if max_sessions < 1:
        raise ConfigurationError("max_sessions must be at least 1", option="max_sessions")
    if script is not None and not embedded:
        raise ConfigurationError("a script needs embedded=True", option="script")
    if sandbox and not (embedded and engines is None):
        raise ConfigurationError(
            "sandboxed MCP sessions run on the embedded model server (embedded=True): the "
            "caller's own agents use the caller's login and configuration, which a sandbox hides",
            option="sandbox",
        )
    if sandbox is None:
        from ._wire.sandbox import sandbox_unavailable

        sandbox = embedded and engines is None and sandbox_unavailable() is None
    root_paths = [Path(r).expanduser().resolve() for r in (roots or [os.getcwd()])]
    sessions = _Sessions(root_paths, max_sessions, engines, embedded, sandbox)

    @asynccontextmanager
    async def lifespan(server: MCPServer[Any]) -> AsyncGenerator[None, None]:
        async with AsyncExitStack() as stack:
            if embedded:
                from .offline import ModelServer

                model_server = await stack.enter_async_context(ModelServer(script))
                scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="agentrun-mcp-"))
                sessions.server_url, sessions.scratch = model_server.url, Path(scratch)
            async with anyio.create_task_group() as tg:
                sessions.task_group = tg
                try:
                    yield
                finally:
                    with anyio.CancelScope(shield=True):
                        await sessions.close_all()
                    sessions.task_group = None

    server: MCPServer[Any] = _Server(
        name="agentrun",
        version=VERSION,
        instructions=(
            "Run other coding agents (Claude Code, Codex, OpenCode, ACP agents): start_session, "
            "then run_turn with a prompt; the result is the turn's summary (final text, tool "
            "calls, usage and cost, context fill, errors). Close sessions you no longer need."
        ),
        lifespan=lifespan,
    )

    @server.tool()
    async def list_engines() -> dict[str, Any]:
        """The engines this server can run, and whether each one's agent program is installed."""
        out: list[dict[str, Any]] = []
        for name in sessions.names():
            try:
                sessions.engine(name).check()
                available, problem = True, None
            except (AgentrunError, ToolError) as exc:
                available, problem = False, str(exc)
            except Exception as exc:  # a factory or check with a bug of its own
                available, problem = False, _describe(exc)
            entry: dict[str, Any] = {"name": name, "available": available}
            if problem is not None:
                entry["problem"] = problem
            out.append(entry)
        return {"engines": out, "sandboxed": sessions.sandbox}

    @server.tool()
    async def start_session(
        engine: str,
        cwd: str | None = None,
        model: str | None = None,
        mode: Literal["plan", "act"] | None = None,
    ) -> dict[str, Any]:
        """Start a session of an agent in a working directory (under the server's roots).
        Returns the session id the other tools take."""
        session_id, options = await sessions.start(engine, sessions.cwd(cwd), model, mode)
        return {
            "session_id": session_id,
            "engine": engine,
            "cwd": options.cwd,
            "sandboxed": options.sandbox is not None,
        }

    @server.tool()
    async def run_turn(
        session_id: str,
        prompt: str,
        timeout: float | None = None,
        output_schema: dict[str, Any] | None = None,
        ctx: Context = None,  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Send a prompt and wait for the agent to finish the turn; returns the turn's summary.
        Progress notifications report the context window's fill while it runs.

        With ``output_schema`` (a JSON Schema object) the agent is asked for a final answer of
        that shape: ``output`` in the summary is the validated JSON value. An answer that does
        not match gets one repair turn in the same session; if that one does not match either,
        ``output`` is null and ``output_errors`` says what was wrong."""
        hosted = sessions.get(session_id)
        if hosted.turn is not None and not hosted.turn.done:
            raise ToolError(f"session {session_id} is running a turn; cancel it or wait")
        try:
            spec = output_spec(output_schema)
        except ConfigurationError as exc:
            raise ToolError(exc.message.replace("output schema", "output_schema", 1)) from None
        output_errors: list[str] = []
        progress = _Progress(ctx)
        try:
            turn = hosted.session.turn(prompt, timeout=timeout, output=spec)
            turn.output_repairable = True
            summary = await _drive(hosted, turn, progress)
            if spec is not None and turn.output_errors and not turn.cancelling:
                # The answer did not match: one repair turn, as run_turn makes.
                repair = hosted.session.turn(
                    spec.repair_prompt(turn.output_errors), timeout=timeout, output=spec
                )
                repair.output_repairable = True
                repair.summary.output_repairs = 1
                summary = await _drive(hosted, repair, progress)
                output_errors = repair.output_errors
            elif turn.output_errors:
                output_errors = turn.output_errors
        except AgentrunError as exc:
            if exc.summary is None:
                raise ToolError(exc.message) from None
            summary = exc.summary
        except Exception as exc:  # an engine's own bug: a reason, not a bare error
            _logger.exception("turn of %s failed", session_id)
            raise ToolError(f"the turn failed: {_describe(exc)}") from None
        finally:
            hosted.turn = None
        if summary.context is not None:
            hosted.context = summary.context
        data = summary.model_dump(mode="json")
        if output_errors:
            data["output_errors"] = output_errors
        return data

    @server.tool()
    async def cancel_turn(session_id: str) -> dict[str, Any]:
        """Cancel the turn a session is running (the agent is interrupted; the session stays)."""
        hosted = sessions.get(session_id)
        turn = hosted.turn
        if turn is None or turn.done:
            return {"cancelled": False}
        turn.cancel()
        return {"cancelled": True}

    @server.tool()
    async def get_context(session_id: str) -> dict[str, Any]:
        """How full the session's context window is (tokens used, window size, fraction, and
        where each number came from), as of its latest turn."""
        hosted = sessions.get(session_id)
        turn = hosted.turn
        context = turn.summary.context if turn is not None else None
        context = context or hosted.context
        return {"context": None if context is None else context.model_dump(mode="json")}

    @server.tool()
    async def close_session(session_id: str) -> dict[str, Any]:
        """Close a session: its agent program stops."""
        await sessions.close(session_id)
        return {"closed": True}

    return server


async def _drive(hosted: _Hosted, turn: Turn, progress: _Progress) -> TurnSummary:
    """Run ``turn`` to its end as the session's cancellable turn, reporting progress."""
    async with turn:
        hosted.turn = turn
        async for message in turn:
            await progress.seen(message)
    return turn.summary


class _Progress:
    """A ``run_turn`` call's progress notifications. MCP wants each notification's progress
    greater than the one before, and a context fill can repeat or fall (compaction, a repair
    turn), so progress counts the messages seen so far and the message carries the fill."""

    def __init__(self, ctx: Context | None) -> None:
        self.ctx = ctx
        self.messages = 0

    async def seen(self, message: Message) -> None:
        self.messages += 1
        if self.ctx is None or message.type is not MessageType.CONTEXT_WINDOW:
            return
        reading = message.context
        if reading is None or reading.fraction is None:
            return
        await self.ctx.report_progress(self.messages, None, f"context {reading.fraction:.0%} full")


def serve(
    *,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    roots: Sequence[str] | None = None,
    max_sessions: int = 8,
    embedded: bool = False,
    script: Script | None = None,
    sandbox: bool | None = None,
) -> None:
    """Run the server until its client disconnects (stdio) or it is stopped (HTTP)."""
    # Refused whatever the transport: a --host meant for HTTP must never be taken quietly.
    if not _is_loopback(host):
        raise ConfigurationError(
            f"agentrun mcp listens on loopback only, not {host!r}", option="host"
        )
    if transport not in ("stdio", "http"):
        raise ConfigurationError(
            f"transport must be 'stdio' or 'http', got {transport!r}", option="transport"
        )
    server = build_server(
        roots=roots, max_sessions=max_sessions, embedded=embedded, script=script, sandbox=sandbox
    )
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)


def _describe(exc: BaseException) -> str:
    """An unexpected exception as a reason a client can read."""
    detail = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
