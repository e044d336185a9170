"""Memory of the agent processes for K sessions: pooled on shared processes against one each.

K sessions of a real pinned agent (against the embedded model server) each run one turn and
stay open; then the memory of every agent process and its descendants is summed from
``/proc/<pid>/smaps_rollup``: RSS, and PSS (each shared page divided among the processes
sharing it: what the machine really gives them), split into anonymous PSS (the process's own
heap: never shared between independently started agents) and file-backed PSS (the program's
code and data files: shared by every copy of the same program). Once with ``pool=K`` (one
process for all), once without (one process per session). Reported: MB per session each way
and the ratio (the issue's target: >= 10x less at 50 sessions).

``--batch B`` measures the one-process-each side B sessions at a time (each batch opened, run,
measured, closed) when K processes would not fit in memory at once. Independently started
processes share no anonymous page, so the anonymous PSS of K processes at once is the sum of
the batches'; their file-backed pages are shared, so that part is at least the largest batch's
and at most the sum. The K-at-once PSS therefore lies in
[sum(anon) + max(file), sum(anon + file)]; the ratio is given against the lower end.

``--steps 1,10,50`` measures one pooled process as sessions are added to it: the memory after
each step, and the growth per added session between steps.

``--kinds`` lists the agent processes by program, to see which processes a session costs.

    python -m agentrun.offline netns -- python bench/pool_memory.py [--sessions 10]
        [--engine claude-acp] [--engine opencode-acp] [--only pooled] [--batch 10]
        [--steps 1,10,50] [--kinds]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from agentrun import Engine, Session, SessionOptions, TurnSummary, run_turn
from agentrun.offline import ModelServer, Script, embedded_engine

_FIELDS = {
    "Rss:": "rss",
    "Pss:": "pss",
    "Pss_Anon:": "anon",
    "Pss_File:": "file",
    "Pss_Shmem:": "shmem",
}


@dataclass
class Reading:
    """Summed memory (kB) of a set of agent processes, and which programs they are."""

    rss: int = 0
    pss: int = 0
    anon: int = 0
    file: int = 0
    shmem: int = 0
    kinds: Counter[str] = field(default_factory=Counter[str])
    kinds_pss: Counter[str] = field(default_factory=Counter[str])

    @property
    def processes(self) -> int:
        return sum(self.kinds.values())

    def __add__(self, other: Reading) -> Reading:
        return Reading(
            self.rss + other.rss,
            self.pss + other.pss,
            self.anon + other.anon,
            self.file + other.file,
            self.shmem + other.shmem,
            self.kinds + other.kinds,
            self.kinds_pss + other.kinds_pss,
        )


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _tree(root: int, tree: dict[int, list[int]]) -> list[int]:
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def _kind(pid: int) -> str:
    """The program a process runs: its executable, or the script a runtime (node, bun) runs."""
    with contextlib.suppress(OSError):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        names = [os.path.basename(a.decode(errors="replace")) for a in argv if a]
        if not names:
            return "?"
        if names[0] in ("node", "bun", "python", "python3") and len(names) > 1:
            script = next((n for n in names[1:] if not n.startswith("-")), names[1])
            return f"{names[0]} {script}"
        return names[0]
    return "?"


def _reading(pid: int) -> Reading:
    """The memory of one process (nothing for one that is gone)."""
    values = dict.fromkeys(_FIELDS.values(), 0)
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return Reading()
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        if key in _FIELDS:
            values[_FIELDS[key]] = int(rest.split()[0])
    kind = _kind(pid)
    return Reading(**values, kinds=Counter([kind]), kinds_pss=Counter({kind: values["pss"]}))


def agents_memory(roots: set[int]) -> Reading:
    """The summed memory of the processes ``roots`` and their descendants."""
    tree = _children()
    pids = {pid for root in roots for pid in _tree(root, tree)}
    total = Reading()
    for pid in pids:
        total = total + _reading(pid)
    return total


def _roots(sessions: list[Session]) -> set[int]:
    pids = {getattr(s.driver, "pid", None) for s in sessions}
    return {pid for pid in pids if isinstance(pid, int)}


async def _turns(name: str, sessions: list[Session]) -> None:
    summaries: list[TurnSummary] = []

    async def turn(session: Session) -> None:
        summaries.append(await run_turn(session, "say done", timeout=300))

    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(turn, session)
    failed = [s.errors for s in summaries if not s.ok]
    if failed:
        raise SystemExit(f"{name}: {len(failed)} turns failed: {failed[0]}")


@contextlib.asynccontextmanager
async def _engine(name: str, pool: int | None) -> AsyncIterator[tuple[Engine, SessionOptions]]:
    with tempfile.TemporaryDirectory(prefix="pool-memory-") as scratch:
        workspace = Path(scratch) / "workspace"
        workspace.mkdir()
        async with ModelServer(Script(turns=[], exhausted_text="done")) as server:
            engine, options = embedded_engine(
                name, server.url, Path(scratch) / "agent", cwd=str(workspace), pool=pool
            )
            yield engine, options


async def measure(name: str, count: int, pool: int | None) -> Reading:
    """K sessions open at once, each after one turn."""
    async with _engine(name, pool) as (engine, options), contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(engine.start(options)) for _ in range(count)]
        await _turns(name, sessions)
        await anyio.sleep(1.0)  # let start-up garbage settle
        return agents_memory(_roots(sessions))


async def measure_batches(name: str, count: int, batch: int) -> tuple[Reading, int, list[Reading]]:
    """K sessions of a process each, ``batch`` at a time: the sum, the largest batch's
    file-backed PSS (kB) and every batch's reading."""
    readings: list[Reading] = []
    left = count
    while left > 0:
        readings.append(await measure(name, min(batch, left), None))
        left -= batch
    total = Reading()
    for reading in readings:
        total = total + reading
    return total, max(r.file + r.shmem for r in readings), readings


async def measure_steps(name: str, steps: list[int]) -> list[Reading]:
    """One pooled process, measured after each step of sessions added to it."""
    readings: list[Reading] = []
    async with _engine(name, max(steps)) as (engine, options), contextlib.AsyncExitStack() as stack:
        sessions: list[Session] = []
        for step in steps:
            added = [
                await stack.enter_async_context(engine.start(options))
                for _ in range(step - len(sessions))
            ]
            await _turns(name, added)
            sessions += added
            await anyio.sleep(1.0)
            readings.append(agents_memory(_roots(sessions)))
    return readings


def _mb(kb: float) -> str:
    return f"{kb / 1024:,.0f}"


def _print(*cells: object) -> None:
    print("| " + " | ".join(str(c) for c in cells) + " |")


def _row(name: str, label: str, per: int, r: Reading, kinds: bool, last: str = "") -> None:
    """One reading; ``per``: the sessions its PSS is divided among (0: no per-session figure)."""
    each = f"{r.pss / 1024 / per:,.1f}" if per else last
    _print(
        name, label, r.processes, _mb(r.rss), _mb(r.pss), _mb(r.anon), _mb(r.file + r.shmem), each
    )
    if kinds:
        programs = ", ".join(
            f"{kind} x{n} ({_mb(r.kinds_pss[kind])} MB)" for kind, n in r.kinds.most_common()
        )
        _print("", programs, "", "", "", "", "", "")


def _ratio(over: float, under: float) -> str:
    return f"{over / max(under, 1):.1f}x"


async def _report(name: str, args: argparse.Namespace) -> None:
    count: int = args.sessions
    pooled: Reading | None = None
    if args.only in (None, "pooled"):
        pooled = await measure(name, count, count)
        _row(name, f"pooled, {count}", count, pooled, args.kinds)
    if args.only == "pooled":
        return
    if not args.batch:
        alone = await measure(name, count, None)
        _row(name, f"one each, {count}", count, alone, args.kinds)
        if pooled is not None:
            cells = (_ratio(alone.rss, pooled.rss), _ratio(alone.pss, pooled.pss))
            _print(name, "less (RSS, PSS)", "", *cells, _ratio(alone.anon, pooled.anon), "", "")
        return
    total, largest_file, batches = await measure_batches(name, count, args.batch)
    for index, reading in enumerate(batches):
        size = min(args.batch, count - index * args.batch)
        _row(name, f"one each, batch {index + 1}", size, reading, args.kinds)
    _row(name, f"one each, {count} in batches of {args.batch}: sum", count, total, False)
    lower = total.anon + largest_file
    _print(name, f"one each, {count} at once: PSS at least", "", "", _mb(lower), "", "", "")
    if pooled is not None:
        pss = f"{_ratio(lower, pooled.pss)} to {_ratio(total.pss, pooled.pss)}"
        cells = (_ratio(total.rss, pooled.rss), pss, _ratio(total.anon, pooled.anon))
        _print(name, "less (RSS, PSS, anon)", "", *cells, "", "")


async def _report_steps(name: str, steps: list[int], kinds: bool) -> None:
    readings = await measure_steps(name, steps)
    previous: tuple[int, Reading] | None = None
    for step, reading in zip(steps, readings, strict=True):
        growth = ""
        if previous is not None:
            growth = f"{(reading.pss - previous[1].pss) / 1024 / (step - previous[0]):,.2f}"
        _row(name, f"pooled, {step}", 0, reading, kinds, growth)
        previous = (step, reading)


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--engine", action="append", default=None)
    parser.add_argument(
        "--only", choices=["pooled", "one process each"], default=None, help="measure one way"
    )
    parser.add_argument("--batch", type=int, default=0, help="one-each side, B sessions at a time")
    parser.add_argument("--steps", default="", help="pooled growth, e.g. 1,10,50")
    parser.add_argument("--kinds", action="store_true", help="list the processes by program")
    args = parser.parse_args()
    engines: list[str] = args.engine or ["claude-acp", "opencode-acp"]
    last = "PSS MB / added session" if args.steps else "PSS MB / session"
    _print(
        "engine", "sessions", "processes", "RSS MB", "PSS MB", "anon PSS MB", "file PSS MB", last
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in engines:
        if args.steps:
            await _report_steps(name, sorted({int(s) for s in args.steps.split(",")}), args.kinds)
        else:
            await _report(name, args)


if __name__ == "__main__":
    anyio.run(main)
