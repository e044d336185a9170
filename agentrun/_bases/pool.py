"""Pooled agent processes: several sessions on one JSON-RPC agent process.

An agent whose protocol holds several sessions on one connection (any ACP agent: one
``session/new`` per session) can serve many sessions from one process. A :class:`ProcessPool`
(one per engine made with ``pool=N``) keeps such processes, each a :class:`SharedProcess`
holding at most N sessions; a pooled :class:`~.jsonrpc_session.JsonRpcDriver` joins one when
it starts and leaves it when it shuts down. Per session:

* its translator sees its own traffic only: what it sent, the answers to its requests, and
  what the agent sends naming its session id. The process-level exchange (``initialize``),
  made by the session that started the process, is replayed to each later session's
  translator;
* a cancel or timeout interrupts its own turn; a turn that does not end within the grace ends
  that session (:class:`~agentrun.SessionTerminatedError`), not the process;
* the end of the process (a crash, a kill) ends every session on it with the process's typed
  error (:class:`~agentrun.ProcessExitError`), and the pool forgets the process: the next
  session starts a fresh one;
* the last session to leave ends the process (stdin closed, then SIGTERM and SIGKILL of its
  group, each bounded) and waits for it.

Sessions share a process only when they would start the same one (the driver's
:meth:`~.jsonrpc_session.JsonRpcDriver.pool_key`: argv, working directory, environment,
sandbox...); others get a process of their own.

A shared process is held by a task of its own, outside every session's task group (the
session that started it may close while others go on): an asyncio task, or a Trio system task.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any, cast

import anyio

from .._vocabulary.errors import ConfigurationError, SessionTerminatedError
from .._wire.jsonrpc import (
    INVALID_PARAMS,
    ConnectionClosedError,
    JsonRpcConnection,
    JsonRpcError,
    JsonRpcProblem,
)
from .._wire.process import AgentProcess, ProcessHost, ProcessSpec

if TYPE_CHECKING:
    from .jsonrpc_session import JsonRpcDriver

__all__ = ["MemberConnection", "ProcessPool", "SessionKey", "SharedProcess", "check_pool_size"]

_log = logging.getLogger("agentrun.session")

#: The session id a message's params name (``None``: none, or not a message of one session).
SessionKey = Callable[[Any], "str | None"]
#: The session id the answer to a request opens (``session/new`` answers with it).
AnsweredSession = Callable[[str, Any], "str | None"]

#: The pooled session whose line the current task writes (set by :class:`MemberConnection`, and
#: by the shared process around a session's answer to an agent request).
_SENDER: contextvars.ContextVar[JsonRpcDriver | None] = contextvars.ContextVar(
    "agentrun_pool_sender", default=None
)
#: Detached asyncio tasks, kept referenced until they end.
_DETACHED: set[Any] = set()


def check_pool_size(pool: object, *, engine: str) -> int | None:
    """``pool`` as given to an engine: ``None`` (no pooling) or an int of at least 1."""
    if pool is None:
        return None
    if isinstance(pool, bool) or not isinstance(pool, int):
        raise ConfigurationError(
            f"pool must be a whole number of sessions per agent process, not {pool!r}",
            option="pool",
            engine=engine,
        )
    if pool < 1:
        raise ConfigurationError(
            f"pool must be at least 1 session per agent process, not {pool}",
            option="pool",
            engine=engine,
        )
    return pool


def _start_detached(run: Callable[[], Awaitable[None]], name: str) -> None:
    """Run ``run()`` in a task of its own that no caller's task group holds."""
    trio_module = sys.modules.get("trio")
    if trio_module is not None:
        import trio

        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass  # trio is imported, but this is not a trio run
        else:
            trio.lowlevel.spawn_system_task(run, name=name)
            return
    import asyncio

    # Made in a fresh context: nothing of the caller's task (its sender) goes along.
    loop = asyncio.get_running_loop()
    task: asyncio.Task[None] = contextvars.Context().run(
        loop.create_task, cast("Coroutine[Any, Any, None]", run()), name=name
    )
    _DETACHED.add(task)
    task.add_done_callback(_DETACHED.discard)


class ProcessPool:
    """The shared processes of one engine; see the module docstring."""

    def __init__(
        self,
        capacity: int,
        *,
        engine: str,
        session_key: SessionKey,
        answered_session: AnsweredSession,
    ) -> None:
        #: Sessions at most per process.
        self.capacity: int = capacity
        self.engine: str = engine
        self.session_key: SessionKey = session_key
        self.answered_session: AnsweredSession = answered_session
        self._processes: dict[Hashable, list[SharedProcess]] = {}

    @property
    def processes(self) -> list[SharedProcess]:
        """The processes that run (or start) now."""
        return [shared for group in self._processes.values() for shared in group]

    def forget(self, shared: SharedProcess) -> None:
        """No new session joins ``shared`` (it is ending or ended)."""
        group = self._processes.get(shared.key)
        if group is not None and shared in group:
            group.remove(shared)
            if not group:
                del self._processes[shared.key]

    async def join(
        self, member: JsonRpcDriver, key: Hashable, spec: ProcessSpec
    ) -> tuple[SharedProcess, bool]:
        """A process for ``member`` with room for it, started when none has room; ``True`` with
        it when ``member`` started it (it then opens it: :meth:`SharedProcess.begin_opening`)."""
        shared: SharedProcess | None = None
        for candidate in self._processes.get(key, ()):
            if candidate.accepting and len(candidate.members) < self.capacity:
                shared = candidate
                break
        first = shared is None
        if shared is None:
            shared = SharedProcess(self, key)
            self._processes.setdefault(key, []).append(shared)
        shared.members.add(member)  # the place is taken before anything waits
        try:
            if first:
                await shared.launch(spec)
            else:
                await shared.wait_opened()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await shared.leave(member)
            raise
        return shared, first

    async def aclose(self) -> None:
        """End every process of the pool; their sessions end with a typed error."""
        with anyio.CancelScope(shield=True):
            for shared in self.processes:
                await shared.stop()


class SharedProcess:
    """One agent process and its JSON-RPC connection, shared by the sessions of a pool."""

    def __init__(self, pool: ProcessPool, key: Hashable) -> None:
        self.pool: ProcessPool = pool
        self.key: Hashable = key
        #: The sessions on this process (each holds a place until it leaves).
        self.members: set[JsonRpcDriver] = set()
        self.proc: AgentProcess | None = None
        self.conn: JsonRpcConnection | None = None
        #: The process-level exchange (``initialize``), replayed to each later session.
        self.opening: list[dict[str, Any]] = []
        #: Whether a new session may join.
        self.accepting: bool = True
        self._sessions: dict[str, JsonRpcDriver] = {}
        self._requests: dict[int, tuple[JsonRpcDriver, str]] = {}
        self._opener: JsonRpcDriver | None = None
        self._start_error: BaseException | None = None
        self._failure: str | None = None
        self._running = anyio.Event()
        self._opened = anyio.Event()
        self._release = anyio.Event()
        self._done = anyio.Event()

    # -- the process -------------------------------------------------------------------------

    async def launch(self, spec: ProcessSpec) -> None:
        """Start the process in a task of its own; return once it runs."""
        _start_detached(lambda: self._hold(spec), f"agentrun pooled {self.pool.engine}")
        await self._running.wait()
        if self._start_error is not None:
            raise self._start_error
        if self.proc is None:
            raise SessionTerminatedError(
                f"{self.pool.engine}: the pooled agent process ended while starting",
                engine=self.pool.engine,
            )

    async def _hold(self, spec: ProcessSpec) -> None:
        try:
            async with anyio.create_task_group() as tg:
                host = ProcessHost(spec)
                try:
                    proc = await host.start(tg)
                except Exception as exc:
                    self._start_error = exc
                    return
                finally:
                    self._running.set()
                self.proc = proc
                # Until a session opened it, the agent has nothing to finish.
                proc.skip_stdin_grace()
                conn = JsonRpcConnection(
                    self._send_line,
                    on_request=self._on_request,
                    on_problem=self._on_problem,
                    engine=self.pool.engine,
                    on_message=self._received,
                )
                self.conn = conn
                tg.start_soon(self._read, conn, proc)
                await self._release.wait()
                await host.aclose()
                conn.close("the pooled agent process was closed")
                tg.cancel_scope.cancel()
        except Exception:  # a detached task has nobody to raise to
            _log.exception("%s: the pooled agent process failed", self.pool.engine)
        finally:
            self.accepting = False
            self.pool.forget(self)
            self._failure = self._failure or "the pooled agent process ended"
            self._running.set()
            self._opened.set()
            self._done.set()

    async def _read(self, conn: JsonRpcConnection, proc: AgentProcess) -> None:
        try:
            await conn.run(proc.lines())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            conn.close("the agent's output ended")
            self.accepting = False
            self.pool.forget(self)
            self._failure = self._failure or "the agent's output ended"
            self._opened.set()
            for member in list(self.members):
                await member.pool_output_ended()
            self._release.set()

    async def stop(self) -> None:
        """End the process now (its sessions end with the process's error) and wait for it."""
        self.accepting = False
        self.pool.forget(self)
        self._release.set()
        await self._done.wait()

    # -- opening -----------------------------------------------------------------------------

    def begin_opening(self, member: JsonRpcDriver) -> None:
        """``member`` runs the process-level exchange now: it is recorded for later sessions."""
        self._opener = member

    def end_opening(self, failure: str | None) -> None:
        """The process-level exchange is over (``failure``: why the process cannot serve)."""
        self._opener = None
        if failure is not None:
            self._failure = failure
            self.accepting = False
            self.pool.forget(self)
        elif self.proc is not None:
            self.proc.skip_stdin_grace(False)
        self._opened.set()

    async def wait_opened(self) -> None:
        """Return once the process is open for sessions; raise when it never will be."""
        await self._opened.wait()
        if self._failure is not None or self.conn is None:
            raise SessionTerminatedError(
                f"{self.pool.engine}: the shared agent process cannot take sessions "
                f"({self._failure or 'not running'})",
                engine=self.pool.engine,
            )

    # -- sessions ----------------------------------------------------------------------------

    def sent(self, member: JsonRpcDriver, msg: Any) -> None:
        """``member`` writes ``msg``: answers to it and its session's messages go back to it."""
        if type(msg) is not dict:
            return
        fields = cast("dict[str, Any]", msg)
        method = fields.get("method")
        if not isinstance(method, str):
            return
        session = self.pool.session_key(fields.get("params"))
        if session is not None:
            holder = self._sessions.get(session)
            if holder is not None and holder is not member:
                raise ConfigurationError(
                    f"{self.pool.engine}: session {session} is open in another pooled "
                    "session of the same agent process",
                    option="resume_id",
                    engine=self.pool.engine,
                )
            self._sessions[session] = member
        request_id = fields.get("id")
        if type(request_id) is int:
            self._requests[request_id] = (member, method)
        if member is self._opener:
            self.opening.append({"dir": "send", "msg": msg})

    def drop(self, member: JsonRpcDriver) -> None:
        """Nothing more of the agent reaches ``member`` (its session is over; it keeps its
        place until it leaves)."""
        for session in [s for s, m in self._sessions.items() if m is member]:
            del self._sessions[session]
        for request_id in [r for r, (m, _) in self._requests.items() if m is member]:
            del self._requests[request_id]
        if self._opener is member:
            self._opener = None

    async def leave(self, member: JsonRpcDriver) -> None:
        """``member`` is closed; the last one to leave ends the process and waits for it."""
        self.drop(member)
        self.members.discard(member)
        if self.members:
            return
        self.accepting = False
        self.pool.forget(self)
        self._release.set()
        if self.proc is not None or not self._running.is_set():
            await self._done.wait()

    # -- routing -----------------------------------------------------------------------------

    def _member_of(self, msg: Any) -> JsonRpcDriver | None:
        if type(msg) is not dict:
            return self._opener
        fields = cast("dict[str, Any]", msg)
        if "method" in fields:
            session = self.pool.session_key(fields.get("params"))
            return self._opener if session is None else self._sessions.get(session)
        request_id = fields.get("id")
        if type(request_id) is not int:
            return self._opener
        sender = self._requests.pop(request_id, None)
        if sender is None:
            return None
        member, method = sender
        if "result" in fields:
            session = self.pool.answered_session(method, fields["result"])
            if session is not None and session not in self._sessions:
                self._sessions[session] = member
        return member

    async def _received(self, msg: Any) -> None:
        member = self._member_of(msg)
        if member is None:
            _log.info("%s: a message for no pooled session was dropped", self.pool.engine)
            return
        if member is self._opener:
            self.opening.append({"dir": "recv", "msg": msg})
        await member.pool_received(msg)

    async def _on_request(self, method: str, params: Any) -> Any:
        session = self.pool.session_key(params)
        member = self._opener if session is None else self._sessions.get(session)
        if member is None:
            raise JsonRpcError(INVALID_PARAMS, f"no open session {session!r} for {method}")
        # The answer is written by this task: it is the member's line.
        _SENDER.set(member)
        return await member.pool_request(method, params)

    async def _on_problem(self, problem: JsonRpcProblem) -> None:
        raw = problem.raw or b""
        for session, member in list(self._sessions.items()):
            if session.encode() in raw:
                await member.pool_problem(problem)
                return
        _log.warning("%s (pooled): %s", self.pool.engine, problem.detail)

    async def _send_line(self, data: bytes) -> None:
        member = _SENDER.get()
        if member is not None and member in self.members:
            await member.pool_send_line(data)
            return
        if self.proc is None:
            raise ConnectionClosedError("the pooled agent process is not running")
        await self.proc.write(data)


class MemberConnection(JsonRpcConnection):
    """One pooled session's side of the shared connection: what it sends is its own, and
    closing it leaves the shared connection open."""

    def __init__(self, shared: JsonRpcConnection, member: JsonRpcDriver) -> None:
        super().__init__(_refuse_line, engine=member.engine_name)
        self._shared = shared
        self._member = member

    @property
    def closed(self) -> bool:
        return super().closed or self._shared.closed

    async def request(
        self, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Any:
        if super().closed:
            raise ConnectionClosedError("the session was closed", method=method)
        token = _SENDER.set(self._member)
        try:
            return await self._shared.request(method, params, timeout=timeout)
        finally:
            _SENDER.reset(token)

    async def notify(self, method: str, params: Any = None) -> None:
        if super().closed:
            raise ConnectionClosedError("the session was closed", method=method)
        token = _SENDER.set(self._member)
        try:
            await self._shared.notify(method, params)
        finally:
            _SENDER.reset(token)


async def _refuse_line(data: bytes) -> None:
    raise ConnectionClosedError("a pooled session writes through its shared connection")
