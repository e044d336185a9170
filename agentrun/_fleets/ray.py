"""Sessions on a Ray cluster: each one a Ray actor that owns one agent process.

:class:`RayEngine` wraps any engine factory: its sessions, in the calling process, hold a
:class:`RayDriver` whose turns run in an actor, possibly on another node. The calling process's
``Turn`` does what it does for every engine — turn numbering, timeouts, the ``TurnSummary`` — on
the messages the actor streams back (a Ray streaming generator, one normalized message per
item), so a fleet, a compare or a plain ``run_turn`` works the same locally and on Ray.

Failure semantics (``docs/scale-out.md``):

* The actor is created with ``max_restarts=0`` and its calls with ``max_task_retries=0``: a turn
  is never repeated behind the caller's back (a tool's side effects could happen twice).
* When the actor or its node dies during a turn, the turn ends with :class:`SessionLostError`
  (a :class:`SessionTerminatedError`) carrying the partial summary, and the session is dead:
  later turns raise it at once.
* A typed error raised in the actor (``ProcessExitError``, ``TurnTimeoutError``, ...) reaches the
  driver as the same class with the same message and fields.
* Cancelling a turn in the driver cancels it in the actor (which interrupts the agent), bounded
  by ``cancel_timeout``; closing the session closes the agent in the actor, then ends the actor.

Ray is imported only when a session starts (``pip install "agentrun-py[ray]"``). Calls into Ray
run in worker threads, so the driver may use asyncio or trio.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from .._turns.driver import EngineDriver
from .._turns.engine import Engine
from .._turns.session import Session
from .._turns.turn import TurnContext
from .._vocabulary import errors as _errors  # pyright: ignore[reportPrivateUsage]
from .._vocabulary.errors import (
    AgentrunError,
    EngineUnavailableError,
    SessionLostError,
    SessionTerminatedError,
)
from .._vocabulary.messages import Message
from .._vocabulary.options import SessionOptions

__all__ = ["RayDriver", "RayEngine", "RaySession", "SessionLostError"]


def _import_ray() -> Any:
    try:
        import ray  # pyright: ignore[reportMissingImports]
    except ImportError as exc:
        raise EngineUnavailableError(
            'the Ray backend needs Ray: pip install "agentrun-py[ray]"', engine="ray"
        ) from exc
    return ray  # pyright: ignore[reportUnknownVariableType]


async def _call(limiter: anyio.CapacityLimiter, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking Ray call in a worker thread; cancelling abandons the wait, not the call.

    Each session has a limiter of its own, so many sessions never queue behind the default
    thread limit (a session waits on at most two calls at once: its turn and a cancel)."""
    return await anyio.to_thread.run_sync(
        functools.partial(fn, *args), abandon_on_cancel=True, limiter=limiter
    )


# -- errors across the wire ----------------------------------------------------------------------

_SIMPLE = (str, int, float, bool, type(None))


def _error_record(exc: AgentrunError) -> dict[str, Any]:
    fields = {k: v for k, v in vars(exc).items() if k != "summary" and isinstance(v, _SIMPLE)}
    return {"__agentrun_error__": type(exc).__name__, "message": str(exc), "fields": fields}


def _error_from_record(record: Mapping[str, Any]) -> AgentrunError:
    cls: Any = getattr(_errors, str(record.get("__agentrun_error__")), None)
    if not (isinstance(cls, type) and issubclass(cls, AgentrunError)):
        cls = AgentrunError
    error: AgentrunError = Exception.__new__(cls)  # pyright: ignore[reportUnknownVariableType]
    Exception.__init__(error, str(record.get("message", "")))
    error.engine = None
    fields = record.get("fields")
    if isinstance(fields, dict):
        for key, value in fields.items():  # pyright: ignore[reportUnknownVariableType]
            setattr(error, str(key), value)  # pyright: ignore[reportUnknownArgumentType]
    return error


# -- the actor -----------------------------------------------------------------------------------


class _SessionActor:
    """Runs in the Ray worker: one agentrun session, its turns as streaming generators."""

    def __init__(self, factory: Callable[[], Engine], options: SessionOptions) -> None:
        self._factory = factory
        self._options = options
        self._session: Session | None = None
        self._stack: Any = None
        self._turn: Any = None
        #: The driver's number of the turn running here (or the latest one).
        self._turn_key: int | None = None
        #: The number of a turn the driver cancelled before it was entered here: the cancel
        #: and the turn are separate calls, and the cancel may run first.
        self._cancelled_key: int | None = None

    async def open(self) -> dict[str, Any]:
        from contextlib import AsyncExitStack

        try:
            engine = self._factory()
            stack = AsyncExitStack()
            session = await stack.enter_async_context(engine.start(self._options))
        except AgentrunError as exc:
            return _error_record(exc)
        self._stack, self._session = stack, session
        import os

        return {"pid": os.getpid(), "engine": session.engine_name}

    async def turn(
        self,
        prompt: str,
        timeout: float | None,
        idle_timeout: float | None,
        key: int | None = None,
    ) -> Any:  # an async generator of message dicts
        session = self._session
        if session is None:
            yield _error_record(SessionTerminatedError("the remote session is not open"))
            return
        self._turn_key = key
        try:
            async with session.turn(prompt, timeout=timeout, idle_timeout=idle_timeout) as turn:
                self._turn = turn
                if key is not None and self._cancelled_key == key:
                    turn.cancel()  # cancelled before it got here: it ends as a cancelled turn
                async for message in turn:
                    yield message.model_dump(mode="json", exclude_none=True)
            yield {"__agentrun_resume_id__": session.resume_id}
        except AgentrunError as exc:
            yield {"__agentrun_resume_id__": session.resume_id}
            yield _error_record(exc)
        finally:
            self._turn = None

    async def cancel_turn(self, key: int | None = None) -> bool:
        """Cancel turn ``key`` (the driver's turn number): the running one, or, when it has not
        been entered yet, as soon as it is. Whether a running turn was cancelled."""
        if key is not None:
            self._cancelled_key = key
        turn = self._turn
        if turn is None or (key is not None and key != self._turn_key):
            return False
        turn.cancel()
        return True

    async def close(self) -> None:
        stack, self._stack, self._session = self._stack, None, None
        if stack is not None:
            await stack.aclose()


# -- the driver side -------------------------------------------------------------------------------


class RayEngine(Engine):
    """Runs the sessions of another engine in Ray actors.

    ``factory()`` makes the engine inside the actor (it is sent with cloudpickle: a registry
    name is the simplest, ``RayEngine("claude")``). ``actor_options`` go to ``ray.remote``
    (``num_cpus``, ``resources={"claude": 1}`` to place sessions on nodes that have the agent,
    ``label_selector``, ``runtime_env``...). ``ray.init`` is the caller's business; without it
    Ray starts a local instance on first use.
    """

    name: str = "ray"

    def __init__(
        self,
        factory: str | Callable[[], Engine],
        *,
        actor_options: Mapping[str, Any] | None = None,
        cancel_timeout: float = 30.0,
        close_timeout: float = 30.0,
        infeasible_timeout: float | None = 5.0,
    ) -> None:
        if isinstance(factory, str):
            factory = functools.partial(_registry_engine, factory)
        self.factory: Callable[[], Engine] = factory
        self.actor_options: dict[str, Any] = dict(actor_options or {})
        self.cancel_timeout = cancel_timeout
        self.close_timeout = close_timeout
        #: Seconds a session's actor may stay infeasible (Ray reports that no node of the
        #: cluster has the resources it asks for) before the start fails; ``None`` waits for
        #: as long as it takes (an autoscaling cluster that will add such a node).
        self.infeasible_timeout = infeasible_timeout

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(RayDriver(self, options))

    def check(self) -> None:
        _import_ray()


def _registry_engine(name: str) -> Engine:
    from ..engines._registry import get_engine

    return get_engine(name)


class RayDriver(EngineDriver):
    """Drives a session whose agent runs in a Ray actor. ``actor`` is its handle once
    started."""

    engine_name: str = "ray"

    def __init__(self, engine: RayEngine, options: SessionOptions | None) -> None:
        super().__init__(options)
        self.engine = engine
        self.actor: Any = None
        #: The worker process id of the actor and the engine it runs, once open.
        self.worker_pid: int | None = None
        self._lost: SessionLostError | None = None
        self._waiters: anyio.CapacityLimiter | None = None
        self._fetch: _Fetch | None = None
        self._opened = False

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._waiters is None:
            self._waiters = anyio.CapacityLimiter(4)
        return await _call(self._waiters, fn, *args)

    def _lost_error(self, exc: BaseException, doing: str) -> SessionLostError:
        detail = " ".join(str(exc).split())[:500]
        self._lost = SessionLostError(
            f"the Ray worker of this session died while {doing}: {type(exc).__name__}: {detail}",
            engine=self.engine_name,
        )
        return self._lost

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        ray = _import_ray()
        options = dict(self.engine.actor_options)
        options.update(max_restarts=0, max_task_retries=0)
        options.setdefault("num_cpus", 0)
        remote = ray.remote(**options)(_SessionActor)
        self.actor = remote.remote(self.engine.factory, self.options)
        opened = self.actor.open.remote()
        shape = _request_shape(options)
        infeasible_since: float | None = None
        try:
            while True:
                ready = await self._call(_wait_ready, ray, opened)
                if ready:
                    break
                limit = self.engine.infeasible_timeout
                if limit is None:
                    continue
                if not await self._call(_infeasible, ray, shape):
                    infeasible_since = None
                    continue
                now = anyio.current_time()
                infeasible_since = now if infeasible_since is None else infeasible_since
                if now - infeasible_since >= limit:
                    raise EngineUnavailableError(
                        f"no node of the Ray cluster has the resources this session's actor "
                        f"asks for ({_shape_text(shape)}); Ray reports the request infeasible",
                        engine=self.engine_name,
                    )
            info = await self._call(ray.get, opened)
        except ray.exceptions.RayError as exc:
            raise self._lost_error(exc, "starting") from exc
        if "__agentrun_error__" in info:
            await self._call(ray.kill, self.actor)
            raise _error_from_record(info)
        self._opened = True
        self.worker_pid = info.get("pid")
        self.engine_name: str = f"ray:{info.get('engine')}"

    async def run_turn(self, ctx: TurnContext) -> None:
        if self._lost is not None:
            raise self._lost
        ray = _import_ray()
        # The driver's Turn owns the timeouts; it cancels this coroutine when one fires.
        generator = self.actor.turn.options(num_returns="streaming").remote(
            ctx.prompt, None, None, ctx.number
        )
        try:
            await self._pump(ray, generator, ctx)
        except anyio.get_cancelled_exc_class():
            ctx.begin_cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.engine.cancel_timeout):
                try:
                    await self._call(ray.get, self.actor.cancel_turn.remote(ctx.number))
                    await self._pump(ray, generator, ctx)
                except (AgentrunError, ray.exceptions.RayError):
                    pass
            raise

    async def _pump(self, ray: Any, generator: Any, ctx: TurnContext) -> None:
        while True:
            # A wait abandoned by a cancel left its fetch running in a thread: take its item
            # rather than ask the generator for the next one (the cancelled turn's result would
            # be lost in the abandoned thread).
            fetch = self._fetch
            if fetch is None or fetch.generator is not generator:
                fetch = self._fetch = _Fetch(ray, generator)
            try:
                item = await self._call(fetch.get)
            except ray.exceptions.RayError as exc:
                self._fetch = None
                raise self._lost_error(exc, f"running turn {ctx.number}") from exc
            self._fetch = None
            if item is None:
                return
            if "__agentrun_error__" in item:
                raise _error_from_record(item)
            if "__agentrun_resume_id__" in item:
                resume_id = item["__agentrun_resume_id__"]
                if isinstance(resume_id, str):
                    self.resume_id: str | None = resume_id
                continue
            await ctx.emit(Message.model_validate(item))

    async def shutdown(self) -> None:
        if self.actor is None:
            return
        ray = _import_ray()
        if not self._opened:
            # The actor never opened its session (still placing, or infeasible): nothing to
            # close in it, and a close call would wait for a placement that may never come.
            await self._call(ray.kill, self.actor)
            return
        with anyio.move_on_after(self.engine.close_timeout):
            with contextlib.suppress(ray.exceptions.RayError):
                await self._call(ray.get, self.actor.close.remote())
        await self._call(ray.kill, self.actor)


def _wait_ready(ray: Any, ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0.5)
    return bool(ready)


def _request_shape(options: Mapping[str, Any]) -> dict[str, float]:
    """The resources an actor with these options asks Ray for, as Ray's scheduler names them."""
    shape = {str(k): float(v) for k, v in dict(options.get("resources") or {}).items() if v}
    for option, name in (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory", "memory")):
        value = options.get(option)
        if value:
            shape[name] = float(value)
    return shape


def _shape_text(shape: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(shape.items())) or "no resources"


def _infeasible(ray: Any, shape: Mapping[str, float]) -> bool:
    """Whether Ray's raylets report requests of exactly this shape as infeasible: no node of
    the cluster could ever hold them (what the autoscaler reads as infeasible demand)."""
    try:
        gcs = ray._private.worker.global_worker.gcs_client
        reply = gcs.get_all_resource_usage(timeout=10)
        demands = reply.resource_usage_data.resource_load_by_shape.resource_demands
    except Exception:  # another Ray version, or the GCS did not answer: assume feasible
        return False
    return any(
        demand.num_infeasible_requests_queued > 0
        and {k: float(v) for k, v in dict(demand.shape).items()} == dict(shape)
        for demand in demands
    )


class _Fetch:
    """The next item of a turn's streaming generator, fetched once in a worker thread: a
    second waiter (after the first was abandoned by a cancel) gets the same item."""

    def __init__(self, ray: Any, generator: Any) -> None:
        self.ray = ray
        self.generator = generator
        self._lock = threading.Lock()
        self._started = False
        self._done = threading.Event()
        self._item: Any = None
        self._error: BaseException | None = None

    def get(self) -> Any:
        with self._lock:
            fetch, self._started = not self._started, True
        if fetch:
            try:
                ref = next(self.generator)
                self._item = self.ray.get(ref)
            except StopIteration:
                self._item = None
            except BaseException as exc:
                self._error = exc
            finally:
                self._done.set()
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._item


#: The name of :class:`RayDriver` from before sessions held their engine as a driver.
RaySession = RayDriver
