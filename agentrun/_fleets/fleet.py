"""Fleets: many sessions under concurrency limits, typed progress, results as data.

A :class:`Fleet` runs :class:`FleetTask` objects (an engine name, session options and the
prompts of its turns) through the same ``run_turn`` every caller uses, at most ``limit`` sessions
at once (and at most ``per_engine[name]`` of one engine)::

    fleet = Fleet(limit=8, per_engine={"claude": 4}, max_cost_usd=20.0)
    result = await fleet.run(tasks, on_event=print)
    print(result.table())
    Path("runs.jsonl").write_text(result.to_jsonl())

or, for progress as an async iterator::

    async with fleet.stream(tasks) as events:
        async for event in events:
            ...
    result = events.result

Semantics:

* A task's turns run in order in one session; tasks run concurrently up to the limits, started
  in the order given.
* A failure is data, not an exception: an error that ends a session (the agent died, a turn
  timed out, the program is missing) becomes a ``session_failed`` event and a
  :class:`FleetSessionRecord` with the error; the other sessions go on.
* Budgets: ``FleetTask.max_cost_usd`` stops a session's further turns once its turns cost that
  much; ``Fleet.max_cost_usd`` stops the fleet: no new session or turn starts and the running
  turns are cancelled in their agents, each still a turn record with the cost its agent reported.
  Stopped sessions end with the error code ``budget``. Costs are those the engines report
  (``Usage.cost_usd``, a failed turn's too); a turn with no cost counts as 0.
* Leaving ``stream`` early, or cancelling the caller, cancels every running turn and closes every
  session: no agent process is left behind.
* ``pool=N`` runs the tasks of each engine on pooled agent processes, N sessions at most on
  one: the run builds one ``get_engine(name, pool=N)`` per engine name, shared by that
  engine's tasks, and closes it (``aclose()``) when the run ends. Only engines that can pool
  (the ACP ones, ``codex-app-server``) are accepted; the others are named in one
  ``ConfigurationError`` before anything starts.

``backend="local"`` runs the sessions as tasks of the caller's event loop. ``backend="ray"``
runs each session in a Ray actor that owns its agent process, on whichever node Ray places it
(``ray_actor_options``, ``FleetTask.resources``); the engine factory is sent to the actor and
called there. Progress, records and budgets are the same; see ``docs/scale-out.md``.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Annotated, Any, ClassVar, Literal

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .._turns.boundary import failure_code, single_error
from .._turns.engine import Engine
from .._turns.run import run_turn
from .._turns.session import Session
from .._turns.turn import Turn
from .._vocabulary.errors import AgentrunError, ConfigurationError, UsageError, configuration_error
from .._vocabulary.limits import TurnLimits
from .._vocabulary.messages import ErrorInfo, Message, MessageType, Usage
from .._vocabulary.metering import MeteredUsage
from .._vocabulary.options import SessionOptions
from .._vocabulary.session_store import SessionStore
from .._vocabulary.summary import TurnSummary, WindDown, WoundDown
from ..offline._proxy import CredentialProxy, ProxyClient

__all__ = [
    "EngineFactory",
    "Fleet",
    "FleetEvent",
    "FleetEventKind",
    "FleetResult",
    "FleetRun",
    "FleetSessionRecord",
    "FleetTask",
    "FleetTurnRecord",
]

FleetEventKind = Literal["session_started", "turn_finished", "session_failed", "session_finished"]


class FleetTask(BaseModel):
    """One session of a fleet: which engine, with which options, and the prompts of its turns."""

    model_config: ClassVar[ConfigDict] = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True
    )

    #: The registry name of the engine (``"claude"``, ``"opencode"``, ...).
    engine: str
    #: One turn per prompt, in order, in one session.
    prompts: tuple[str, ...] = Field(min_length=1)
    options: SessionOptions = Field(default_factory=SessionOptions)
    #: A name for records and events (default: ``"<engine>-<index>"``).
    name: str | None = None
    #: Seconds for each turn / of silence allowed (see ``run_turn``).
    timeout: float | None = Field(default=None, gt=0)
    idle_timeout: float | None = Field(default=None, gt=0)
    #: Steer each turn to wrap up this many seconds before its ``timeout`` (seconds or a
    #: :class:`~agentrun.WindDown`; see ``run_turn``).
    wind_down: float | WindDown | None = None
    #: Stop this session's further turns once its turns cost this much (USD).
    max_cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    #: Free-form labels copied into every record (a model variant, a dataset row, ...).
    labels: dict[str, str] = Field(default_factory=dict[str, str])
    #: Ray backend: custom resources the session's node must have (``{"claude": 1}``).
    resources: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        default_factory=dict[str, float]
    )

    def __init__(self, **fields: Any) -> None:
        # Rejected arguments surface as ConfigurationError naming the field, never the values
        # (a pydantic error would print the options, environment values included).
        try:
            super().__init__(**fields)
        except ValidationError as exc:
            raise configuration_error(exc, "fleet task") from None

    @field_validator("prompts")
    @classmethod
    def _prompts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for prompt in value:
            if not prompt.strip():
                raise ValueError("a prompt is empty")
        return value

    @model_validator(mode="after")
    def _limits(self) -> FleetTask:
        try:
            self.limits  # noqa: B018 - checked here, where a bad task is refused
        except ConfigurationError as exc:
            raise ValueError(exc.message) from None
        return self

    @property
    def limits(self) -> TurnLimits:
        """The limits of each of the task's turns (``timeout``, ``idle_timeout``,
        ``wind_down``) as one :class:`~agentrun.TurnLimits`."""
        return TurnLimits(
            timeout=self.timeout, idle_timeout=self.idle_timeout, wind_down=self.wind_down
        )


class FleetTurnRecord(BaseModel):
    """One turn of a fleet session, as data (one JSON line in :meth:`FleetResult.to_jsonl`)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    task: str
    engine: str
    model: str | None = None
    turn: int
    ok: bool
    duration_s: float | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    #: The fullest context reading seen during the turn (fraction of the window, 0.0-1.0+).
    context_peak: float | None = None
    context_peak_tokens: int | None = None
    context_size_tokens: int | None = None
    tool_calls: int = 0
    stop_reason: str | None = None
    errors: list[ErrorInfo] = Field(default_factory=list[ErrorInfo])
    text: str = ""
    labels: dict[str, str] = Field(default_factory=dict[str, str])
    #: How the turn was wound down (a task with ``wind_down``); left out of the JSON when not.
    wound_down: WoundDown | None = Field(default=None, exclude_if=lambda value: value is None)
    #: What the metering proxy counted for the turn, beside ``usage`` (a task whose options
    #: have a ``meter``); left out of the JSON when not.
    metered: MeteredUsage | None = Field(default=None, exclude_if=lambda value: value is None)


class FleetSessionRecord(BaseModel):
    """One fleet session: how it ended and what it cost."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    task: str
    engine: str
    model: str | None = None
    #: True when every turn ran and was ok.
    ok: bool
    turns: int = 0
    duration_s: float = 0.0
    cost_usd: float | None = None
    resume_id: str | None = None
    #: What ended the session early (code ``budget`` when a budget stopped it).
    error: ErrorInfo | None = None
    labels: dict[str, str] = Field(default_factory=dict[str, str])


class FleetEvent(BaseModel):
    """Progress of a fleet: a session started, a turn finished, a session failed or finished."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    kind: FleetEventKind
    task: str
    engine: str
    #: ``turn_finished``: the turn's number and record (its full summary in ``summary``).
    turn: int | None = None
    record: FleetTurnRecord | None = None
    summary: TurnSummary | None = None
    #: ``session_failed`` / ``session_finished``: the session's record.
    session: FleetSessionRecord | None = None
    error: ErrorInfo | None = None


class FleetResult(BaseModel):
    """Every session and turn record of a fleet run, in the order the tasks were given."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    sessions: list[FleetSessionRecord] = Field(default_factory=list[FleetSessionRecord])
    turns: list[FleetTurnRecord] = Field(default_factory=list[FleetTurnRecord])

    @property
    def ok(self) -> bool:
        return bool(self.sessions) and all(s.ok for s in self.sessions)

    @property
    def cost_usd(self) -> float:
        return sum(t.cost_usd or 0.0 for t in self.turns)

    def to_jsonl(self) -> str:
        """One JSON object per turn record, one per line."""
        return "".join(t.model_dump_json() + "\n" for t in self.turns)

    def table(self) -> str:
        """A plain-text table, one row per session."""
        header = ("task", "engine", "model", "ok", "turns", "tools", "in", "out", "cost", "wall")
        rows: list[tuple[str, ...]] = [header]
        by_task: dict[str, list[FleetTurnRecord]] = {}
        for record in self.turns:
            by_task.setdefault(record.task, []).append(record)
        for s in self.sessions:
            turns = by_task.get(s.task, [])
            rows.append(
                (
                    s.task,
                    s.engine,
                    s.model or "-",
                    "yes" if s.ok else f"no ({s.error.code})" if s.error else "no",
                    str(s.turns),
                    str(sum(t.tool_calls for t in turns)),
                    _tokens(sum((t.usage.prompt_tokens or 0) for t in turns if t.usage)),
                    _tokens(sum((t.usage.output_tokens or 0) for t in turns if t.usage)),
                    "-" if s.cost_usd is None else f"${s.cost_usd:.4f}",
                    f"{s.duration_s:.1f}s",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        return "".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            + "\n"
            for row in rows
        )


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else str(n)


#: Makes the engine of a task (default: ``get_engine(task.engine)``).
EngineFactory = Callable[[FleetTask], Engine]
EventCallback = Callable[[FleetEvent], "Awaitable[None] | None"]


def _default_factory(task: FleetTask) -> Engine:
    from ..engines._registry import get_engine

    return get_engine(task.engine)


def _check_fleet_pool(pool: object, *, engine_factory: EngineFactory | None, backend: str) -> None:
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
        raise ConfigurationError(
            f"pool must be a whole number of sessions per agent process, at least 1, not {pool!r}",
            option="pool",
        )
    if backend == "ray":
        raise ConfigurationError(
            "pool shares agent processes of this machine: not with backend='ray' "
            "(each Ray actor owns its own agent process)",
            option="pool",
        )
    if engine_factory is not None:
        raise ConfigurationError(
            "pool builds the fleet's engines with get_engine(name, pool=N); an engine_factory "
            "makes its own: have it return one pooled engine per engine name "
            "(get_engine(name, pool=N), embedded_engine(..., pool=N)) and aclose() it after "
            "the run",
            option="pool",
        )


def _pooled_engines(names: Iterable[str], pool: int) -> dict[str, Engine | ConfigurationError]:
    """One pooled engine per engine name, shared by that engine's tasks. An engine that cannot
    pool is refused here, all of them in one error, before anything starts; any other
    construction error is the failure of each of that engine's sessions, as without pool."""
    from ..engines._registry import get_engine

    engines: dict[str, Engine | ConfigurationError] = {}
    cannot: list[str] = []
    for name in sorted(set(names)):
        try:
            engines[name] = get_engine(name, pool=pool)
        except ConfigurationError as exc:
            if exc.option == "pool":
                cannot.append(name)
            else:
                engines[name] = exc
    if cannot:
        raise ConfigurationError(
            f"pool: {', '.join(repr(name) for name in cannot)} cannot share an agent process "
            "between sessions (the ACP engines and codex-app-server can); run "
            f"{'it' if len(cannot) == 1 else 'them'} without pool, in a fleet of "
            f"{'its' if len(cannot) == 1 else 'their'} own",
            option="pool",
        )
    return engines


async def _close_engines(engines: Iterable[Engine | ConfigurationError]) -> None:
    """End the pooled processes still running (each also ends with its last session)."""
    with anyio.CancelScope(shield=True):
        for engine in engines:
            if isinstance(engine, Engine):
                await engine.aclose()


def _error_info(exc: BaseException) -> ErrorInfo:
    code = failure_code(exc) if isinstance(exc, AgentrunError) else "error"
    return ErrorInfo(message=str(exc) or type(exc).__name__, code=code, fatal=True)


class Fleet:
    """Runs many sessions under limits. See the module docstring."""

    def __init__(
        self,
        *,
        limit: int = 8,
        per_engine: Mapping[str, int] | None = None,
        max_cost_usd: float | None = None,
        engine_factory: EngineFactory | None = None,
        backend: Literal["local", "ray"] = "local",
        ray_actor_options: Mapping[str, Any] | None = None,
        journal: SessionStore | bool | None = None,
        proxy: CredentialProxy | None = None,
        pool: int | None = None,
    ) -> None:
        if pool is not None:
            _check_fleet_pool(pool, engine_factory=engine_factory, backend=backend)
        if proxy is not None and not isinstance(proxy, CredentialProxy):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"proxy must be a CredentialProxy, got {type(proxy).__name__}", option="proxy"
            )
        if proxy is not None and backend == "ray":
            raise ConfigurationError(
                "a fleet's proxy meters sessions of this process: not with backend='ray'",
                option="proxy",
            )
        if journal is not None:
            SessionOptions(journal=journal)  # a ConfigurationError for what is not a store
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                f"limit must be a positive integer, got {limit!r}", option="limit"
            )
        for name, value in (per_engine or {}).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigurationError(
                    f"per_engine[{name!r}] must be a positive integer, got {value!r}",
                    option="per_engine",
                )
        if max_cost_usd is not None and not (max_cost_usd >= 0 and math.isfinite(max_cost_usd)):
            raise ConfigurationError(
                "max_cost_usd must be a non-negative number", option="max_cost_usd"
            )
        if backend not in ("local", "ray"):
            raise ConfigurationError(
                f"backend must be 'local' or 'ray', got {backend!r}", option="backend"
            )
        self.limit = limit
        self.per_engine: dict[str, int] = dict(per_engine or {})
        self.max_cost_usd = max_cost_usd
        self.engine_factory: EngineFactory = engine_factory or _default_factory
        self.backend = backend
        self.ray_actor_options: dict[str, Any] = dict(ray_actor_options or {})
        #: Keep a journal of every session (``SessionOptions.journal`` of each task that sets
        #: none): ``True`` in the default store, or a :class:`SessionStore`.
        self.journal: SessionStore | bool | None = journal
        #: The metering proxy every task's model calls go through, and its budget the fleet's
        #: (each task's ``options.meter`` one of its clients).
        self.proxy: CredentialProxy | None = proxy
        #: Sessions at most per agent process (``None``: a process per session); see the
        #: module docstring.
        self.pool: int | None = pool

    def _options(self, task: FleetTask) -> SessionOptions:
        if self.journal is None or task.options.journal is not None:
            return task.options
        return task.options.model_copy(update={"journal": self.journal})

    def _engine(
        self, task: FleetTask, pooled: Mapping[str, Engine | ConfigurationError] | None = None
    ) -> Engine:
        if pooled is not None:
            engine = pooled[task.engine]
            if isinstance(engine, ConfigurationError):
                raise engine
            return engine
        if self.backend == "local":
            return self.engine_factory(task)
        import functools

        from .ray import RayEngine

        options = dict(self.ray_actor_options)
        if task.resources:
            options["resources"] = {**options.get("resources", {}), **task.resources}
        return RayEngine(functools.partial(self.engine_factory, task), actor_options=options)

    async def run(
        self, tasks: Iterable[FleetTask], *, on_event: EventCallback | None = None
    ) -> FleetResult:
        """Run every task and return the records. ``on_event`` sees the progress events."""
        async with self.stream(tasks) as events:
            async for event in events:
                if on_event is not None:
                    outcome = on_event(event)
                    if inspect.isawaitable(outcome):
                        await outcome
        return events.result

    def stream(self, tasks: Iterable[FleetTask]) -> FleetRun:
        """The progress events as an async iterator (use with ``async with``)."""
        return FleetRun(self, list(tasks))


class FleetRun:
    """One run of a fleet: an async context manager and an async iterator of events.

    ``result`` holds the records once the iteration ended (or, after an early exit, whatever
    finished before it).
    """

    def __init__(self, fleet: Fleet, tasks: list[FleetTask]) -> None:
        for index, task in enumerate(tasks):
            if not isinstance(task, FleetTask):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigurationError(
                    f"tasks[{index}] is a {type(task).__name__}, not a FleetTask", option="tasks"
                )
        self.fleet = fleet
        self.tasks = tasks
        self.names: list[str] = _names(tasks)
        if fleet.proxy is not None:
            for name, task in zip(self.names, tasks, strict=True):
                meter = task.options.meter
                if not isinstance(meter, ProxyClient) or meter.proxy is not fleet.proxy:
                    raise ConfigurationError(
                        f"fleet task {name!r} is not metered by the fleet's proxy: give it "
                        "options with meter=proxy.client(...) (and that client's key)",
                        option="proxy",
                    )
        self.result: FleetResult = FleetResult()
        self._sessions: dict[int, FleetSessionRecord] = {}
        self._turns: dict[int, list[FleetTurnRecord]] = {}
        self._spent = 0.0
        self._stopped = False
        self._limit = anyio.CapacityLimiter(fleet.limit)
        self._engine_limits = {
            name: anyio.CapacityLimiter(n) for name, n in fleet.per_engine.items()
        }
        self._live: set[_Live] = set()
        self._send: MemoryObjectSendStream[FleetEvent] | None = None
        self._recv: MemoryObjectReceiveStream[FleetEvent] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._driver_done = False
        #: The run's pooled engines by engine name (``Fleet.pool``), closed when it ends.
        self._pooled: dict[str, Engine | ConfigurationError] | None = (
            None if fleet.pool is None else _pooled_engines((t.engine for t in tasks), fleet.pool)
        )

    async def __aenter__(self) -> FleetRun:
        self._send, self._recv = anyio.create_memory_object_stream[FleetEvent](64)
        self._stack = contextlib.AsyncExitStack()
        if self._pooled is not None:
            # Registered first, so it runs last: after every session has closed.
            self._stack.push_async_callback(_close_engines, list(self._pooled.values()))
        task_group = await self._stack.enter_async_context(anyio.create_task_group())
        self._task_group = task_group
        task_group.start_soon(self._drive)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group, self._task_group = self._task_group, None
        if task_group is None:
            return None
        if not self._driver_done:
            # Left early: cancel every session (each closes its agent under a shield).
            task_group.cancel_scope.cancel()
        if self._recv is not None:
            self._recv.close()
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        self._collect()
        return None

    def __aiter__(self) -> AsyncIterator[FleetEvent]:
        return self

    async def __anext__(self) -> FleetEvent:
        if self._recv is None:
            raise UsageError("use 'async with fleet.stream(...)' before iterating")
        try:
            return await self._recv.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._collect()
            raise StopAsyncIteration from None

    # -- running ---------------------------------------------------------------------------

    def _collect(self) -> None:
        order = range(len(self.tasks))
        self.result: FleetResult = FleetResult(
            sessions=[self._sessions[i] for i in order if i in self._sessions],
            turns=[t for i in order for t in self._turns.get(i, [])],
        )

    async def _emit(self, event: FleetEvent) -> None:
        send = self._send
        if send is None:
            return
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await send.send(event)

    async def _drive(self) -> None:
        assert self._send is not None
        try:
            async with anyio.create_task_group() as tg:
                for index in range(len(self.tasks)):
                    await self._limit.acquire_on_behalf_of(index)
                    if self._stopped:
                        self._limit.release_on_behalf_of(index)
                        self._stopped_before_start(index)
                        continue
                    tg.start_soon(self._session, index)
        finally:
            self._driver_done = True
            self._send.close()

    def _stopped_before_start(self, index: int) -> None:
        task = self.tasks[index]
        self._sessions[index] = FleetSessionRecord(
            task=self.names[index],
            engine=task.engine,
            model=task.options.model,
            ok=False,
            error=ErrorInfo(message="the fleet budget was spent before it started", code="budget"),
            labels=task.labels,
        )

    async def _session(self, index: int) -> None:
        task = self.tasks[index]
        name = self.names[index]
        engine_limit = self._engine_limits.get(task.engine)
        try:
            if engine_limit is not None:
                async with engine_limit:
                    await self._run_session(index, task, name)
            else:
                await self._run_session(index, task, name)
        finally:
            self._limit.release_on_behalf_of(index)

    async def _run_session(self, index: int, task: FleetTask, name: str) -> None:
        if self._stopped:
            self._stopped_before_start(index)
            return
        started = anyio.current_time()
        records: list[FleetTurnRecord] = []
        self._turns[index] = records
        error: ErrorInfo | None = None
        resume_id: str | None = None
        cost: float | None = None
        await self._emit(FleetEvent(kind="session_started", task=name, engine=task.engine))
        live = _Live()
        self._live.add(live)
        try:
            with live.scope:
                engine = self.fleet._engine(task, self._pooled)  # pyright: ignore[reportPrivateUsage]
                options = self.fleet._options(task)  # pyright: ignore[reportPrivateUsage]
                async with engine.start(options) as session:
                    live.session = session
                    for prompt in task.prompts:
                        stop = self._budget_spent(task, cost)
                        if stop is not None:
                            error = ErrorInfo(message=stop, code="budget")
                            break
                        record, summary = await self._turn(task, name, session, prompt)
                        records.append(record)
                        refused = self._refused_for_budget(summary)
                        resume_id = summary.resume_id or resume_id
                        if record.cost_usd is not None:
                            cost = (cost or 0.0) + record.cost_usd
                            self._spend(record.cost_usd, live)
                        await self._emit(
                            FleetEvent(
                                kind="turn_finished",
                                task=name,
                                engine=task.engine,
                                turn=record.turn,
                                record=record,
                                summary=summary,
                            )
                        )
                        if refused is not None:
                            error = ErrorInfo(message=refused, code="budget")
                            break
            if live.scope.cancelled_caught or live.turn_cancelled:
                error = ErrorInfo(
                    message="the fleet budget was spent; the turn was cancelled", code="budget"
                )
        except Exception as exc:  # a typed session error, or an engine factory that failed
            failure = single_error(exc)
            error = _error_info(failure)
            if isinstance(failure, AgentrunError) and failure.summary is not None:
                records.append(_record(task, name, failure.summary, None))
                failed_cost = records[-1].cost_usd
                if failed_cost is not None:
                    cost = (cost or 0.0) + failed_cost
                    self._spend(failed_cost, live)
        finally:
            self._live.discard(live)
        ok = error is None and all(r.ok for r in records) and len(records) == len(task.prompts)
        session_record = FleetSessionRecord(
            task=name,
            engine=task.engine,
            model=next((r.model for r in records if r.model), task.options.model),
            ok=ok,
            turns=len(records),
            duration_s=round(anyio.current_time() - started, 3),
            cost_usd=cost,
            resume_id=resume_id,
            error=error,
            labels=task.labels,
        )
        self._sessions[index] = session_record
        kind: FleetEventKind = "session_failed" if error is not None else "session_finished"
        await self._emit(
            FleetEvent(
                kind=kind, task=name, engine=task.engine, session=session_record, error=error
            )
        )

    async def _turn(
        self, task: FleetTask, name: str, session: Any, prompt: str
    ) -> tuple[FleetTurnRecord, TurnSummary]:
        peak = _Peak()
        summary = await run_turn(
            session,
            prompt,
            on_message=peak.see,
            limits=task.limits,
        )
        return _record(task, name, summary, peak), summary

    def _budget_spent(self, task: FleetTask, cost: float | None) -> str | None:
        """Why no further turn may start, or ``None``."""
        if self._stopped:
            return "the fleet budget is spent"
        if task.max_cost_usd is not None and cost is not None and cost >= task.max_cost_usd:
            return f"the session's budget of ${task.max_cost_usd:g} is spent"
        meter = task.options.meter
        if isinstance(meter, ProxyClient) and (why := meter.budget_spent) is not None:
            if meter.proxy is self.fleet.proxy and meter.proxy.budget_spent is not None:
                self._stopped = True  # the fleet's budget: no session starts any more
            return f"the proxy's budget is spent ({why})"
        return None

    def _refused_for_budget(self, summary: TurnSummary) -> str | None:
        """Why the session goes no further: the proxy refused a call of its turn for a budget
        (the turn stopped with ``budget``). The fleet's proxy spent stops the fleet: no session
        starts any more, and the running ones are refused their next call by the proxy."""
        metered = summary.metered
        if metered is None or not metered.refused:
            return None
        proxy = self.fleet.proxy
        if proxy is not None and proxy.budget_spent is not None:
            self._stopped = True
        return f"the proxy refused a call: the budget is spent ({metered.budget_spent})"

    def _spend(self, cost: float, own: _Live) -> None:
        """Count a turn's cost; once the fleet budget is spent, stop every other running
        session: a turn in progress is cancelled in its agent (it ends as a record with what it
        cost), a session still starting is cancelled; the spending session's own turn has
        already ended."""
        self._spent += cost
        limit = self.fleet.max_cost_usd
        if limit is not None and self._spent >= limit and not self._stopped:
            self._stopped = True
            for live in list(self._live):
                if live is not own:
                    live.stop()


class _Live:
    """A running fleet session: the scope it runs in, and its session once started."""

    __slots__ = ("scope", "session", "turn_cancelled")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.session: Session | None = None
        self.turn_cancelled = False

    def stop(self) -> None:
        """Stop for the fleet's budget. A turn in progress is cancelled the way a caller
        cancels one (the agent is interrupted and the turn ends with its summary); a session
        between turns sees the spent budget before its next turn."""
        session = self.session
        if session is None:
            self.scope.cancel()
            return
        turn = session.active_turn
        if isinstance(turn, Turn) and not turn.done:
            self.turn_cancelled = True
            turn.cancel()


class _Peak:
    """The fullest context reading of a turn."""

    __slots__ = ("fraction", "size", "used")

    def __init__(self) -> None:
        self.fraction: float | None = None
        self.used: int | None = None
        self.size: int | None = None

    def see(self, message: Message) -> None:
        reading = message.context
        if message.type is not MessageType.CONTEXT_WINDOW or reading is None:
            return
        if reading.used_tokens is not None and (
            self.used is None or reading.used_tokens > self.used
        ):
            self.used = reading.used_tokens
            self.size = reading.size_tokens
            self.fraction = reading.fraction
        elif self.size is None:
            self.size = reading.size_tokens


def _record(
    task: FleetTask, name: str, summary: TurnSummary, peak: _Peak | None
) -> FleetTurnRecord:
    usage = summary.usage
    context = summary.context
    peak_fraction = peak.fraction if peak is not None else None
    peak_used = peak.used if peak is not None else None
    if peak_fraction is None and context is not None:
        peak_fraction, peak_used = context.fraction, context.used
    size = (peak.size if peak is not None else None) or (context.size if context else None)
    return FleetTurnRecord(
        task=name,
        engine=task.engine,
        model=summary.model or task.options.model,
        turn=summary.turn or 0,
        ok=summary.ok,
        duration_s=summary.duration_s,
        usage=usage,
        cost_usd=usage.cost_usd if usage is not None else None,
        context_peak=None if peak_fraction is None else round(peak_fraction, 4),
        context_peak_tokens=peak_used,
        context_size_tokens=size,
        tool_calls=len(summary.tool_calls),
        stop_reason=summary.stop_reason,
        errors=list(summary.errors),
        text=summary.text,
        labels=task.labels,
        wound_down=summary.wound_down,
        metered=summary.metered,
    )


def _names(tasks: list[FleetTask]) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        name = task.name or f"{task.engine}-{index}"
        if name in seen:
            raise ConfigurationError(f"two fleet tasks are named {name!r}", option="name")
        seen.add(name)
        names.append(name)
    return names
