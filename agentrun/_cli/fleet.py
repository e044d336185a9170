"""``agentrun fleet TASKS.jsonl``: a :class:`~agentrun.Fleet` from the command line.

Every line of the tasks file is one JSON object (see :data:`TASK_KEYS`); the whole file is read
and checked before anything starts (a malformed line, an unknown key or engine, a script that
cannot be loaded, a check command that does not exist: one line naming the line number, exit 2,
nothing written). Each task runs in a private copy of its workspace with a model server of its
own (offline, the default), then its ``check`` runs in that copy and its exit status decides
pass or fail.

``--pool N`` runs the tasks of each engine on pooled agent processes (N tasks at most on one):
one engine object per engine, shared by its tasks; offline, its tasks also share one model
server and agent home (so they share one script, answered in the order the calls come), each
task still in its own workspace copy. Engines that cannot pool, and the options that would give
each task a process of its own anyway (``--proxy``'s key per task, ``--sandbox``), are refused
before anything starts.

Results are one JSON line per finished task, appended (one write each, flushed and synced) as
each task ends, so an interrupted fleet leaves a complete file; ``--resume RESULTS`` runs only
the tasks it does not name. Each task's journal and ATIF trajectory are written beside it.

Progress is a typed stream of :class:`FleetCommandEvent` (each carrying a
:class:`FleetProgress` snapshot) that any number of subscribers consume: a redrawn view on a
terminal, plain lines otherwise, JSON lines with ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TextIO

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._fleets.compare import (
    FilesChanged,
    WorkspaceSnapshot,
    copy_workspace,
    snapshot_workspace,
    workspace_changes,
)
from .._fleets.fleet import Fleet, FleetSessionRecord, FleetTask, FleetTurnRecord
from .._turns.engine import Engine
from .._vocabulary.errors import ConfigurationError
from .._vocabulary.options import SessionOptions
from ..engines._registry import engine_names
from ..offline._proxy import CredentialProxy
from .proxied import check_proxy_arguments, open_proxy, wants_proxy
from .render import clean
from .run import EXIT_INTERRUPTED, load_script, parse_options, sandbox_option

if TYPE_CHECKING:
    from ..offline import Script

__all__ = [
    "TASK_KEYS",
    "CheckResult",
    "EngineProgress",
    "FleetCommandEvent",
    "FleetProgress",
    "TaskResult",
    "fleet",
]

#: The keys a task line may have.
TASK_KEYS = (
    "name",
    "engine",
    "engines",
    "prompt",
    "prompts",
    "workspace",
    "check",
    "check_timeout",
    "script",
    "model",
    "options",
    "timeout",
    "idle_timeout",
    "max_cost_usd",
    "labels",
)
#: Seconds a check may run (a task's ``check_timeout`` changes it).
DEFAULT_CHECK_TIMEOUT = 600.0
#: How much of a check's output (its end) a result line keeps.
CHECK_OUTPUT_CHARS = 4000
#: The longest tasks file line read.
MAX_LINE_CHARS = 1_000_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
EXIT_FAILED = 1


# -- the tasks file -----------------------------------------------------------------------


class _TaskLine(BaseModel):
    """One line of the tasks file, as written (before ``engines`` is expanded)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid", strict=True)

    name: str
    engine: str | None = None
    engines: list[str] | None = None
    prompt: str | None = None
    prompts: list[str] | None = None
    workspace: str | None = None
    check: str | list[str] | None = None
    check_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    script: str | None = None
    model: str | None = None
    options: dict[str, str] = Field(default_factory=dict[str, str])
    timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    idle_timeout: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    labels: dict[str, str] = Field(default_factory=dict[str, str])


@dataclass
class PlannedTask:
    """A task of the file, checked: what runs, where, and what decides pass or fail."""

    line: int
    name: str
    engine: str
    prompts: tuple[str, ...]
    workspace: Path | None
    check: list[str] | None
    check_timeout: float
    script: Script | None
    model: str | None
    options: dict[str, str]
    timeout: float | None
    idle_timeout: float | None
    max_cost_usd: float | None
    labels: dict[str, str]


def _bad(path: Path, line: int, problem: str) -> ConfigurationError:
    return ConfigurationError(f"{path} line {line}: {problem}", option="tasks")


def _numbered_lines(path: Path, what: str, option: str) -> list[tuple[int, str]]:
    """The bounded, numbered lines of the JSON Lines file at ``path``; one that cannot be read
    or is not UTF-8 is a :class:`ConfigurationError` naming ``what`` it is."""
    try:
        with path.open(encoding="utf-8") as handle:
            return list(_bounded_lines(handle, path))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the {what} {path}: {exc.strerror or exc}", option=option
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"the {what} {path} is not UTF-8: {exc.reason}", option=option
        ) from None


def read_tasks(path: Path, *, live: bool) -> list[PlannedTask]:
    """Every task of the tasks file, checked; the first problem is a
    :class:`ConfigurationError` naming its line."""
    lines = _numbered_lines(path, "tasks file", "tasks")
    tasks: list[PlannedTask] = []
    names: dict[str, int] = {}
    for number, text in lines:
        if not text.strip():
            continue
        for task in _plan_line(path, number, text, live=live):
            if task.name in names:
                raise _bad(path, number, f"task {task.name!r} is also on line {names[task.name]}")
            names[task.name] = number
            tasks.append(task)
    if not tasks:
        raise ConfigurationError(f"the tasks file {path} has no tasks", option="tasks")
    return tasks


def _bounded_lines(handle: TextIO, path: Path) -> Iterator[tuple[int, str]]:
    for number, text in enumerate(iter(lambda: handle.readline(MAX_LINE_CHARS + 1), ""), 1):
        if len(text) > MAX_LINE_CHARS:
            raise _bad(path, number, f"longer than {MAX_LINE_CHARS} characters")
        yield number, text


def _plan_line(path: Path, number: int, text: str, *, live: bool) -> list[PlannedTask]:
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(path, number, f"not JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise _bad(path, number, "nested too deeply") from None
    if not isinstance(value, dict):
        raise _bad(path, number, "not a JSON object")
    fields: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    unknown = [key for key in fields if key not in TASK_KEYS]
    if unknown:
        raise _bad(
            path,
            number,
            f"unknown key {unknown[0]!r} (known: {', '.join(TASK_KEYS)})",
        )
    try:
        line = _TaskLine.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the task"
        raise _bad(path, number, f"{where}: {first['msg']}") from None
    if not _NAME.match(line.name):
        raise _bad(
            path,
            number,
            f"name {line.name!r}: letters, digits, '.', '_' and '-', at most 100 characters",
        )
    engines = _engines(path, number, line, live=live)
    prompts = _prompts(path, number, line)
    base = path.parent
    workspace = _workspace(path, number, base, line.workspace)
    script = None
    if line.script is not None:
        if live:
            raise _bad(path, number, "'script' is for the embedded model server, not --live")
        try:
            script = load_script(str(base / line.script))
        except ConfigurationError as exc:
            raise _bad(path, number, exc.message) from None
    check = _check(path, number, line.check, workspace or base)
    try:
        parse_options([f"{key}={value}" for key, value in line.options.items()])
    except ConfigurationError as exc:
        raise _bad(path, number, exc.message) from None
    planned: list[PlannedTask] = []
    for engine in engines:
        name = line.name if line.engines is None else f"{line.name}@{engine}"
        planned.append(
            PlannedTask(
                line=number,
                name=name,
                engine=engine,
                prompts=prompts,
                workspace=workspace,
                check=check,
                check_timeout=line.check_timeout or DEFAULT_CHECK_TIMEOUT,
                script=script,
                model=line.model,
                options=dict(line.options),
                timeout=line.timeout,
                idle_timeout=line.idle_timeout,
                max_cost_usd=line.max_cost_usd,
                labels=dict(line.labels),
            )
        )
    return planned


def _engines(path: Path, number: int, line: _TaskLine, *, live: bool) -> list[str]:
    from ..offline._embedded import EMBEDDED_ENGINES

    if (line.engine is None) == (line.engines is None):
        raise _bad(path, number, "give 'engine' or 'engines' (one of them)")
    engines = [line.engine] if line.engine is not None else list(line.engines or [])
    if not engines:
        raise _bad(path, number, "'engines' is empty")
    if len(set(engines)) != len(engines):
        raise _bad(path, number, "'engines' names an engine twice")
    known = engine_names()
    for engine in engines:
        if engine not in known:
            raise _bad(path, number, f"unknown engine {engine!r} (known: {', '.join(known)})")
        if not live and engine not in EMBEDDED_ENGINES:
            raise _bad(
                path,
                number,
                f"engine {engine!r} is not supported on the embedded model server "
                f"(supported: {', '.join(EMBEDDED_ENGINES)}); use --live",
            )
    return engines


def _prompts(path: Path, number: int, line: _TaskLine) -> tuple[str, ...]:
    if (line.prompt is None) == (line.prompts is None):
        raise _bad(path, number, "give 'prompt' or 'prompts' (one of them)")
    prompts = (line.prompt,) if line.prompt is not None else tuple(line.prompts or ())
    if not prompts:
        raise _bad(path, number, "'prompts' is empty")
    if any(not prompt.strip() for prompt in prompts):
        raise _bad(path, number, "a prompt is empty")
    return prompts


def _workspace(path: Path, number: int, base: Path, given: str | None) -> Path | None:
    if given is None:
        return None
    workspace = (base / Path(given).expanduser()).resolve()
    if not workspace.is_dir():
        raise _bad(path, number, f"workspace {given}: no such directory")
    return workspace


def _check(path: Path, number: int, given: str | list[str] | None, where: Path) -> list[str] | None:
    """The check as an argv: a list runs as given, a string through ``sh -c``. The program
    (a list's first item, a string's first word) must exist: a path is looked up relative to
    the task's workspace, a name on ``PATH`` (for a string, shell builtins too)."""
    if given is None:
        return None
    if isinstance(given, list):
        if not given or not given[0]:
            raise _bad(path, number, "'check' is an empty command")
        program = given[0]
        argv = list(given)
    else:
        if not given.strip():
            raise _bad(path, number, "'check' is an empty command")
        try:
            words = shlex.split(given)
        except ValueError as exc:
            raise _bad(path, number, f"check {given!r}: {exc}") from None
        program = next((w for w in words if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)), "")
        argv = ["sh", "-c", given]
        if shutil.which("sh") is None:
            raise _bad(path, number, "check: no 'sh' on PATH to run it")
        if not program:
            return argv
    if "/" in program:
        target = where / program
        if not (target.is_file() and os.access(target, os.X_OK)):
            raise _bad(path, number, f"check command {program!r}: no such executable file")
    elif isinstance(given, list):
        if shutil.which(program) is None:
            raise _bad(path, number, f"check command {program!r}: not found on PATH")
    elif not _shell_knows(program):
        raise _bad(path, number, f"check command {program!r}: not found on PATH")
    return argv


def _shell_knows(word: str) -> bool:
    """``sh``'s ``command -v`` finds ``word`` (a program on PATH, a builtin or keyword): it is
    looked up, never run."""
    try:
        done = subprocess.run(
            ["sh", "-c", 'command -v -- "$1" >/dev/null', "sh", word],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


# -- results and progress -----------------------------------------------------------------


class CheckResult(BaseModel):
    """How a task's check ended."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    command: list[str]
    ok: bool
    #: The check's exit status (``None`` when it timed out or could not start).
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    #: The end of what it printed (stdout and stderr together).
    output: str = ""


class TaskResult(BaseModel):
    """One line of the results file: a task that ran to its end (and its check)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    task: str
    engine: str
    #: The task's line in the tasks file.
    line: int
    #: The session ended ok and the check (if any) passed.
    ok: bool
    session: FleetSessionRecord
    turns: list[FleetTurnRecord] = Field(default_factory=list[FleetTurnRecord])
    #: What the agent changed in its copy of the workspace (measured before the check).
    changes: FilesChanged | None = None
    check: CheckResult | None = None
    #: The session's journal (``agentrun sessions --dir JOURNALS show ID``).
    journal_id: str | None = None
    journals: str | None = None
    trajectory: str | None = None


class EngineProgress(BaseModel):
    """The counts of one engine (or of the whole fleet)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    tasks: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


class FleetProgress(BaseModel):
    """Where a fleet stands: totals, and the same per engine."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    total: EngineProgress = Field(default_factory=EngineProgress)
    engines: dict[str, EngineProgress] = Field(default_factory=dict[str, EngineProgress])
    #: Tasks the results file already had (``--resume``), not run again.
    skipped: int = 0


FleetCommandEventKind = Literal[
    "fleet_started",
    "task_started",
    "turn_finished",
    "check_started",
    "task_finished",
    "fleet_finished",
    "interrupted",
]


class FleetCommandEvent(BaseModel):
    """One step of ``agentrun fleet``, with where the fleet stands after it."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    kind: FleetCommandEventKind
    task: str | None = None
    engine: str | None = None
    #: ``turn_finished``: the turn's record.
    turn: FleetTurnRecord | None = None
    #: ``task_finished``: the result line written.
    result: TaskResult | None = None
    progress: FleetProgress
    #: ``fleet_finished`` / ``interrupted``: the results file; ``interrupted``: how to resume.
    results: str | None = None
    resume: str | None = None


Subscriber = Callable[[FleetCommandEvent], None]


class _Counter:
    """The progress counts, updated as events happen."""

    def __init__(self, tasks: list[PlannedTask], skipped: int) -> None:
        self.progress = FleetProgress(skipped=skipped)
        for task in tasks:
            self._both(task.engine, lambda p: setattr(p, "tasks", p.tasks + 1))

    def _both(self, engine: str, change: Callable[[EngineProgress], None]) -> None:
        change(self.progress.total)
        change(self.progress.engines.setdefault(engine, EngineProgress()))

    def started(self, engine: str) -> None:
        self._both(engine, lambda p: setattr(p, "running", p.running + 1))

    def turn(self, record: FleetTurnRecord) -> None:
        usage = record.usage
        tokens = 0
        if usage is not None:
            tokens = (usage.prompt_tokens or 0) + (usage.output_tokens or 0)
        cost = record.cost_usd or 0.0

        def add(p: EngineProgress) -> None:
            p.tokens += tokens
            p.cost_usd = round(p.cost_usd + cost, 6)

        self._both(record.engine, add)

    def finished(self, engine: str, ok: bool) -> None:
        def end(p: EngineProgress) -> None:
            p.running -= 1
            p.done += 1
            p.failed += 0 if ok else 1

        self._both(engine, end)

    def snapshot(self) -> FleetProgress:
        return self.progress.model_copy(deep=True)


def _progress_line(label: str, p: EngineProgress) -> str:
    cost = f" · ${p.cost_usd:.4f}" if p.cost_usd else ""
    return (
        f"{label}: {p.done}/{p.tasks} done · {p.running} running · {p.failed} failed · "
        f"{p.tokens} tokens{cost}"
    )


class TerminalView:
    """The fleet's counts, per engine, redrawn in place on a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.drawn = 0

    def __call__(self, event: FleetCommandEvent) -> None:
        lines: list[str] = []
        if event.kind == "task_finished" and event.result is not None:
            lines.append(_finished_line(event.result))
        self._erase()
        for line in lines:
            self.out.write(line + "\n")  # kept above the redrawn counts
        if event.kind in ("fleet_finished", "interrupted"):
            self.out.flush()
            return
        view = [_progress_line("fleet", event.progress.total)]
        view += [_progress_line(f"  {clean(n)}", p) for n, p in event.progress.engines.items()]
        self.out.write("\n".join(view) + "\n")
        self.out.flush()
        self.drawn = len(view)

    def _erase(self) -> None:
        if self.drawn:
            self.out.write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0


def _finished_line(result: TaskResult) -> str:
    state = "passed" if result.ok else "failed"
    why = ""
    if not result.ok:
        if result.session.error is not None:
            why = f": {result.session.error.code}: {result.session.error.message}"
        elif not result.session.ok:
            why = ": the session did not end ok"
        elif result.check is not None:
            ended = "timed out" if result.check.timed_out else f"exited {result.check.exit_code}"
            why = f": check {ended}"
    return clean(f"{state} {result.task} ({result.engine}){why}")


class PlainLines:
    """One plain line per task started and finished (standard error not a terminal)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, event: FleetCommandEvent) -> None:
        line: str | None = None
        if event.kind == "task_started":
            line = clean(f"started {event.task} ({event.engine})")
        elif event.kind == "task_finished" and event.result is not None:
            line = (
                f"{_finished_line(event.result)} [{_progress_line('fleet', event.progress.total)}]"
            )
        elif event.kind == "fleet_started" and event.progress.skipped:
            line = f"resuming: {event.progress.skipped} tasks already done are skipped"
        if line is not None:
            self.out.write(line + "\n")
            self.out.flush()


class JsonEvents:
    """Every event as one JSON line (``--json``)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, event: FleetCommandEvent) -> None:
        self.out.write(event.model_dump_json(exclude_none=True) + "\n")
        self.out.flush()


# -- running ------------------------------------------------------------------------------


@dataclass
class _Interrupt:
    scope: anyio.CancelScope
    count: int = 0


@dataclass
class _Run:
    """Everything one ``agentrun fleet`` run writes to, and its subscribers."""

    tasks_path: Path
    results: Path
    out: Path
    subscribers: list[Subscriber]
    counter: _Counter
    written: list[str] = field(default_factory=list[str])
    #: Each running task's turn records so far.
    turns: dict[str, list[FleetTurnRecord]] = field(
        default_factory=dict[str, list[FleetTurnRecord]]
    )
    #: ``--live --upstream URL`` / ``--proxy`` / ``--live --sandbox``: the metering proxy every
    #: task's agent goes through, each with a client of its own, under one budget.
    proxy: CredentialProxy | None = None

    def emit(self, kind: FleetCommandEventKind, **fields: Any) -> None:
        event = FleetCommandEvent(kind=kind, progress=self.counter.snapshot(), **fields)
        for subscriber in self.subscribers:
            subscriber(event)

    def append(self, result: TaskResult) -> None:
        """One result line, written whole (one ``O_APPEND`` write), then synced."""
        data = (result.model_dump_json() + "\n").encode("utf-8")
        fd = os.open(self.results, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        self.written.append(result.task)


def read_results(path: Path) -> set[str]:
    """The tasks a results file names (each line a :class:`TaskResult`); a line that is not
    one is a :class:`ConfigurationError` naming it."""
    lines = _numbered_lines(path, "results file", "resume")
    done: set[str] = set()
    for number, text in lines:
        if not text.strip():
            continue
        try:
            done.add(TaskResult.model_validate_json(text).task)
        except ValidationError:
            raise ConfigurationError(
                f"{path} line {number}: not a result line of 'agentrun fleet'", option="resume"
            ) from None
    return done


def _per_engine(pairs: list[str]) -> dict[str, int]:
    limits: dict[str, int] = {}
    known = engine_names()
    for pair in pairs:
        name, sep, count = pair.partition("=")
        if not sep or not count.isdigit() or int(count) < 1:
            raise ConfigurationError(
                f"--per-engine {pair!r} is not ENGINE=N (N at least 1)", option="per_engine"
            )
        if name not in known:
            raise ConfigurationError(
                f"--per-engine: unknown engine {name!r} (known: {', '.join(known)})",
                option="per_engine",
            )
        limits[name] = int(count)
    return limits


def _check_pool(args: argparse.Namespace, tasks: list[PlannedTask], *, proxied: bool) -> None:
    """``--pool N`` makes sense for these tasks, before anything starts."""
    pool: int | None = getattr(args, "pool", None)
    if pool is None:
        return
    if proxied:
        raise ConfigurationError(
            "--pool with the proxy: each task reaches it with a key of its own, in its agent's "
            "environment, so no two tasks could share an agent process",
            option="pool",
        )
    if getattr(args, "sandbox", False):
        raise ConfigurationError(
            "--pool with --sandbox: a sandbox is made for one task's workspace, so no two "
            "tasks could share an agent process",
            option="pool",
        )
    from ..engines._registry import get_engine

    cannot: list[str] = []
    for name in sorted({task.engine for task in tasks}):
        try:
            get_engine(name, pool=pool)
        except ConfigurationError as exc:
            if exc.option != "pool":
                raise
            cannot.append(name)
    if cannot:
        raise ConfigurationError(
            f"--pool: {', '.join(cannot)} cannot share an agent process between tasks (the ACP "
            "engines and codex-app-server can); run those tasks in a fleet without --pool",
            option="pool",
        )
    if args.live:
        return
    scripts: dict[str, PlannedTask] = {}
    for task in tasks:
        first = scripts.setdefault(task.engine, task)
        if task.script != first.script:
            raise ConfigurationError(
                f"--pool: the {task.engine} tasks {first.name!r} and {task.name!r} give "
                "different scripts; pooled tasks of one engine share one model server, which "
                "answers their calls from one script",
                option="pool",
            )


def _resume_command(args: argparse.Namespace, results: Path) -> str:
    words = ["agentrun", "fleet", str(args.tasks), "--resume", str(results), "-j", str(args.jobs)]
    for pair in args.per_engine:
        words += ["--per-engine", pair]
    if args.max_cost is not None:
        words += ["--max-cost", f"{args.max_cost:g}"]
    if getattr(args, "pool", None) is not None:
        words += ["--pool", str(args.pool)]
    for flag in ("live", "keep", "json", "view", "sandbox", "proxy"):
        if getattr(args, flag, False):
            words.append(f"--{flag}")
    if getattr(args, "upstream", None) is not None:
        words += ["--upstream", args.upstream]
    # A resumed fleet's proxy starts a ledger of its own: its budget is counted afresh.
    if getattr(args, "proxy_max_tokens", None) is not None:
        words += ["--proxy-max-tokens", str(args.proxy_max_tokens)]
    if getattr(args, "proxy_max_cost", None) is not None:
        words += ["--proxy-max-cost", f"{args.proxy_max_cost:g}"]
    if getattr(args, "view", False) and getattr(args, "view_port", 0):
        words += ["--view-port", str(args.view_port)]
    return " ".join(shlex.quote(w) for w in words)


async def fleet(args: argparse.Namespace) -> int:
    tasks_path = Path(args.tasks)
    per_engine = _per_engine(args.per_engine)
    if args.resume is not None and args.out is not None:
        raise ConfigurationError(
            "--resume continues in its own directory; drop --out", option="out"
        )
    tasks = read_tasks(tasks_path, live=args.live)
    proxied = args.live and wants_proxy(args)
    check_proxy_arguments(args, sorted({task.engine for task in tasks}))
    _check_pool(args, tasks, proxied=proxied)
    if args.resume is not None:
        results = Path(args.resume)
        done = read_results(results)
        out = results.parent
    else:
        out = Path(args.out or "fleet-results")
        results = out / "results.jsonl"
        if results.exists():
            raise ConfigurationError(
                f"{results} exists; continue it with --resume {results}, or choose --out",
                option="out",
            )
        if out.exists() and not out.is_dir():
            raise ConfigurationError(f"--out {out}: not a directory", option="out")
        done: set[str] = set()
    todo = [task for task in tasks if task.name not in done]
    from ..engines._registry import get_engine

    for name in sorted({task.engine for task in todo}):
        get_engine(name).check()  # EngineUnavailableError: exit 2, nothing started
    skipped = len(tasks) - len(todo)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot make the directory {out}: {exc.strerror or exc}", option="out"
        ) from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigurationError(f"cannot write in {out}", option="out")
    subscribers: list[Subscriber] = []
    if args.json:
        subscribers.append(JsonEvents(sys.stdout))
    elif _terminal(sys.stderr):
        subscribers.append(TerminalView(sys.stderr))
    else:
        subscribers.append(PlainLines(sys.stderr))
    run = _Run(tasks_path, results, out, subscribers, _Counter(todo, skipped))
    if not proxied or not todo:
        return await _view_and_drive(run, args, tasks, todo, per_engine)
    # One proxy for the fleet, reached (keys and upstreams checked) before anything starts;
    # sandboxed, on a Unix socket bound into every task's sandbox.
    with tempfile.TemporaryDirectory(prefix="agentrun-proxy-") as sockets:
        socket_path = Path(sockets) / "proxy.sock" if args.sandbox else None
        engines = sorted({task.engine for task in todo})
        async with open_proxy(args, socket_path=socket_path, engines=engines) as proxy:
            run.proxy = proxy
            return await _view_and_drive(run, args, tasks, todo, per_engine)


async def _view_and_drive(
    run: _Run,
    args: argparse.Namespace,
    tasks: list[PlannedTask],
    todo: list[PlannedTask],
    per_engine: dict[str, int],
) -> int:
    """Run the fleet, with ``--view`` serving the view over its output meanwhile."""
    out = run.out
    if not getattr(args, "view", False):
        return await _drive(run, args, tasks, todo, per_engine)
    status = EXIT_INTERRUPTED
    refused: ConfigurationError | None = None
    async with anyio.create_task_group() as viewing:
        try:
            url = await viewing.start(_serve_view, out, args.view_port)
        except ConfigurationError as exc:  # the port: nothing has started
            refused = exc
        else:
            print(f"agentrun view: {url}", file=sys.stderr, flush=True)
            status = await _drive(run, args, tasks, todo, per_engine)
            if status != EXIT_INTERRUPTED and not args.json:
                print(
                    f"agentrun: the fleet is done; the view stays at {url} until Ctrl-C",
                    file=sys.stderr,
                    flush=True,
                )
                await _next_interrupt()
        viewing.cancel_scope.cancel()
    if refused is not None:
        raise refused
    return status


async def _serve_view(
    out: Path, port: int, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED
) -> None:
    """``agentrun view`` over the fleet's output directory (its results, and the journals
    growing turn by turn), until cancelled."""
    from .view import serve_view

    try:
        await serve_view([out], port=port, on_ready=task_status.started)
    except OSError as exc:
        raise ConfigurationError(
            f"--view-port {port}: cannot listen: {exc.strerror or exc}", option="view_port"
        ) from None


async def _next_interrupt() -> None:
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            return


async def _drive(
    run: _Run,
    args: argparse.Namespace,
    tasks: list[PlannedTask],
    todo: list[PlannedTask],
    per_engine: dict[str, int],
) -> int:
    """Run the tasks to their end or to Ctrl-C; the exit status."""
    results = run.results
    skipped = run.counter.progress.skipped
    results.touch()  # a complete (empty) results file from the start

    everything = anyio.CancelScope()
    interrupt = _Interrupt(scope=everything)
    with everything:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_interrupts, interrupt)
            try:
                await _run_fleet(run, todo, args, per_engine)
            finally:
                tg.cancel_scope.cancel()
    if interrupt.count:
        resume = _resume_command(args, results)
        run.emit("interrupted", results=str(results), resume=resume)
        remaining = len(todo) - len(run.written)
        print(
            f"agentrun: interrupted; {len(run.written) + skipped} of {len(tasks)} tasks are in "
            f"{results}, {remaining} left; resume with: {resume}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
    run.emit("fleet_finished", results=str(results))
    passed = _all_passed(results)
    if not args.json:
        print(
            f"{len(tasks)} tasks, {sum(passed.values())} passed, "
            f"{len(passed) - sum(passed.values())} failed; results in {results}",
            flush=True,
        )
    return 0 if all(passed.values()) else EXIT_FAILED


def _all_passed(results: Path) -> dict[str, bool]:
    passed: dict[str, bool] = {}
    with results.open(encoding="utf-8") as handle:
        for _, text in _bounded_lines(handle, results):
            if text.strip():
                result = TaskResult.model_validate_json(text)
                passed[result.task] = result.ok
    return passed


def _terminal(stream: TextIO) -> bool:
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


async def _watch_interrupts(interrupt: _Interrupt) -> None:
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            interrupt.count += 1
            interrupt.scope.cancel()  # every session is cancelled and its agent closed


@dataclass
class _Prepared:
    task: PlannedTask
    fleet_task: FleetTask
    engine: Engine
    cwd: Path
    journals: Path
    #: The copy before the agent started (what ``changes`` is measured against).
    before: WorkspaceSnapshot


async def _run_fleet(
    run: _Run, todo: list[PlannedTask], args: argparse.Namespace, per_engine: dict[str, int]
) -> None:
    run.emit("fleet_started", results=str(run.results))
    if not todo:
        return
    from .._store.jsonl_store import JsonlSessionStore

    scratch = Path(tempfile.mkdtemp(prefix="work-", dir=run.out))
    async with AsyncExitStack() as stack:
        if not args.keep:
            stack.callback(shutil.rmtree, scratch, True)
        prepared: dict[str, _Prepared] = {}
        contents: dict[str, bytes] = {}  # the tasks' snapshots share what is the same
        pools = _Pools(scratch, getattr(args, "pool", None))
        for index, task in enumerate(todo):
            run_dir = scratch / str(index)
            copied = await anyio.to_thread.run_sync(
                copy_workspace, task.workspace, run_dir / "workspace"
            )
            journals = run.out / "journals" / task.name
            journals.mkdir(parents=True, exist_ok=True)
            store = JsonlSessionStore(journals)
            engine, options = await _engine(
                stack, task, args, run_dir, copied.cwd, store, run.proxy, pools
            )
            fleet_task = FleetTask(
                engine=task.engine,
                prompts=task.prompts,
                options=options,
                name=task.name,
                timeout=task.timeout,
                idle_timeout=task.idle_timeout,
                max_cost_usd=task.max_cost_usd,
                labels=task.labels,
            )
            before = await anyio.to_thread.run_sync(snapshot_workspace, copied.root, contents)
            prepared[task.name] = _Prepared(task, fleet_task, engine, copied.cwd, journals, before)
        fleet_ = Fleet(
            limit=args.jobs,
            per_engine=per_engine,
            max_cost_usd=args.max_cost,
            engine_factory=lambda t: prepared[t.name or ""].engine,
            proxy=run.proxy,
        )
        checks = anyio.CapacityLimiter(args.jobs)
        async with (
            anyio.create_task_group() as tg,
            fleet_.stream([p.fleet_task for p in prepared.values()]) as events,
        ):
            async for event in events:
                if event.kind == "session_started":
                    run.counter.started(event.engine)
                    run.emit("task_started", task=event.task, engine=event.engine)
                elif event.kind == "turn_finished" and event.record is not None:
                    run.counter.turn(event.record)
                    run.turns.setdefault(event.task, []).append(event.record)
                    run.emit(
                        "turn_finished", task=event.task, engine=event.engine, turn=event.record
                    )
                elif event.session is not None:
                    tg.start_soon(_finish, run, prepared[event.task], event.session, checks)
        # Sessions the fleet's budget stopped before they started are not results: a resume
        # runs them.


class _Pools:
    """``--pool N``: one pooled engine per engine name, shared by its tasks (offline, with the
    model server and agent home they share), each closed when the fleet ends."""

    def __init__(self, scratch: Path, size: int | None) -> None:
        self.scratch = scratch
        self.size = size
        self.engines: dict[str, Engine] = {}
        self.servers: dict[str, str] = {}

    def shared(self, engine: Engine, name: str, stack: AsyncExitStack) -> Engine:
        """The engine every task of ``name`` runs on: the first one made for it."""
        first = self.engines.get(name)
        if first is not None:
            return first
        self.engines[name] = engine
        stack.push_async_callback(_close_pooled, engine)  # before its model server stops
        return engine


async def _close_pooled(engine: Engine) -> None:
    """End the engine's pooled processes still running (each also ends with its last task)."""
    with anyio.CancelScope(shield=True):
        await engine.aclose()


async def _engine(
    stack: AsyncExitStack,
    task: PlannedTask,
    args: argparse.Namespace,
    run_dir: Path,
    cwd: Path,
    store: Any,
    proxy: CredentialProxy | None = None,
    pools: _Pools | None = None,
) -> tuple[Engine, SessionOptions]:
    if pools is not None and pools.size is not None and proxy is None:
        return await _pooled_engine(stack, task, args, cwd, store, pools)
    engine_options: dict[str, Any] = {"options": task.options} if task.options else {}
    if proxy is not None:
        # The agent in its offline configuration, pointed at the proxy with its own client's
        # key: the task's calls are its client's in the ledger, checked on every turn.
        from ..offline import embedded_engine

        client = proxy.client(task.name)
        url, sandbox = proxy.route(sandbox_option(args))
        return embedded_engine(
            task.engine,
            url,
            run_dir / "agent",
            cwd=str(cwd),
            model=task.model,
            hitl=False,
            journal=store,
            sandbox=sandbox,
            api_key=client.key,
            meter=client,
            **engine_options,
        )
    if args.live:
        from ..engines._registry import get_engine

        engine = get_engine(task.engine)
        engine.check()
        session = SessionOptions(
            cwd=str(cwd),
            model=task.model,
            hitl=False,
            journal=store,
            **engine_options,
        )
        return engine, session
    from ..offline import ModelServer, embedded_engine

    server = await stack.enter_async_context(ModelServer(task.script))
    return embedded_engine(
        task.engine,
        server.url,
        run_dir / "agent",
        cwd=str(cwd),
        model=task.model,
        hitl=False,
        journal=store,
        sandbox=bool(getattr(args, "sandbox", False)),
        **engine_options,
    )


async def _pooled_engine(
    stack: AsyncExitStack,
    task: PlannedTask,
    args: argparse.Namespace,
    cwd: Path,
    store: Any,
    pools: _Pools,
) -> tuple[Engine, SessionOptions]:
    """``--pool``: the task's options on the engine it shares with the other tasks of its
    engine. Offline, those share one model server (their one script) and one agent home, so
    their sessions start the same process; each keeps its own workspace (ACP gives each
    session its working directory)."""
    engine_options: dict[str, Any] = {"options": task.options} if task.options else {}
    if args.live:
        from ..engines._registry import get_engine

        engine = pools.engines.get(task.engine) or get_engine(task.engine, pool=pools.size)
        session = SessionOptions(
            cwd=str(cwd), model=task.model, hitl=False, journal=store, **engine_options
        )
        return pools.shared(engine, task.engine, stack), session
    from ..offline import ModelServer, embedded_engine

    url = pools.servers.get(task.engine)
    if url is None:
        server = await stack.enter_async_context(ModelServer(task.script))
        url = pools.servers[task.engine] = server.url
    engine, session = embedded_engine(
        task.engine,
        url,
        pools.scratch / f"agent-{task.engine}",
        cwd=str(cwd),
        model=task.model,
        hitl=False,
        journal=store,
        pool=pools.size,
        **engine_options,
    )
    return pools.shared(engine, task.engine, stack), session


async def _finish(
    run: _Run,
    prepared: _Prepared,
    session: FleetSessionRecord,
    checks: anyio.CapacityLimiter,
) -> None:
    task = prepared.task
    if session.turns == 0 and session.error is not None and session.error.code == "budget":
        return  # the fleet's budget stopped it before it started: a resume runs it
    # Measured before the check, so what the check writes (caches, reports) is not the agent's.
    changes = await anyio.to_thread.run_sync(workspace_changes, prepared.before)
    check: CheckResult | None = None
    if task.check is not None and session.ok:
        run.emit("check_started", task=task.name, engine=task.engine)
        async with checks:
            check = await _run_check(task.check, prepared.cwd, task.check_timeout)
    journal_id, trajectory = await anyio.to_thread.run_sync(
        _trajectory, prepared.journals, run.out, task.name
    )
    turns = run.turns.pop(task.name, [])
    ok = session.ok and (check is None or check.ok)
    if task.check is not None and check is None:
        ok = False
    result = TaskResult(
        task=task.name,
        engine=task.engine,
        line=task.line,
        ok=ok,
        session=session,
        turns=turns,
        changes=changes,
        check=check,
        journal_id=journal_id,
        journals=str(prepared.journals),
        trajectory=trajectory,
    )
    run.append(result)  # no await: a cancel cannot cut the line short
    run.counter.finished(task.engine, ok=ok)
    run.emit("task_finished", task=task.name, engine=task.engine, result=result)


async def _run_check(argv: list[str], cwd: Path, timeout: float) -> CheckResult:
    """Run a task's check in its workspace copy, for at most ``timeout`` seconds. It runs in a
    session of its own: Ctrl-C on the terminal reaches agentrun alone, which ends the check by
    cancelling it (an interrupted check is never a result). A check that times out or is
    cancelled is killed with everything it started in its process group."""
    started = anyio.current_time()
    tail = bytearray()
    exit_code: int | None = None
    try:
        process = await anyio.open_process(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return CheckResult(
            command=argv, ok=False, output=f"cannot run the check: {exc.strerror or exc}"
        )
    try:
        with anyio.move_on_after(timeout) as scope:
            if process.stdout is not None:
                async for chunk in process.stdout:
                    tail += chunk
                    del tail[: -CHECK_OUTPUT_CHARS * 4]
            exit_code = await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            if exit_code is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            await process.aclose()
    return CheckResult(
        command=argv,
        ok=exit_code == 0,
        exit_code=exit_code,
        timed_out=scope.cancelled_caught,
        duration_s=round(anyio.current_time() - started, 3),
        output=tail.decode("utf-8", errors="replace")[-CHECK_OUTPUT_CHARS:],
    )


def _trajectory(journals: Path, out: Path, name: str) -> tuple[str | None, str | None]:
    """The task's newest journal, and its ATIF trajectory written under ``out/trajectories``."""
    from .._store.jsonl_store import JsonlSessionStore
    from .._store.trajectory import to_atif
    from .sessions import _turn_messages  # pyright: ignore[reportPrivateUsage]

    store = JsonlSessionStore(journals)
    ids = sorted(store.ids(), key=lambda i: store.path(i).stat().st_mtime_ns)
    if not ids:
        return None, None
    journal_id = ids[-1]
    try:
        turns, prompts = _turn_messages(journal_id, store.records(journal_id))
    except ConfigurationError:
        return journal_id, None
    if not turns:
        return journal_id, None
    path = out / "trajectories" / f"{name}.json"
    with contextlib.suppress(OSError):
        path.parent.mkdir(exist_ok=True)
        trajectory = to_atif(turns, prompts=prompts)
        path.write_text(trajectory.model_dump_json(exclude_none=True, indent=2) + "\n")
        return journal_id, str(path)
    return journal_id, None
