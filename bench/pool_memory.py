"""Memory of the agent processes for K sessions: pooled on shared processes against one each.

K sessions of a real pinned ACP agent (against the embedded model server) each run one turn and
stay open; then the memory of every agent process and its descendants is summed: RSS, and PSS
(each shared page divided among the processes sharing it: what the machine really gives them).
Once with ``pool=K`` (one process for all), once without (one process per session). Reported:
MB per session each way and the ratio (the issue's target: >= 10x less at 50 sessions).

    python -m agentrun.offline netns -- python bench/pool_memory.py [--sessions 10]
        [--engine claude-acp] [--engine opencode-acp] [--only pooled]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from agentrun import Session, TurnSummary, run_turn
from agentrun.offline import ModelServer, Script, embedded_engine


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


def _memory_kb(pid: int) -> tuple[int, int]:
    """RSS and PSS of one process, in kB (0 for one that is gone)."""
    rss = pss = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    return rss, pss


def agents_memory_mb(roots: set[int]) -> tuple[float, float, int]:
    """Summed RSS and PSS (MB) of the processes ``roots`` and their descendants, and how many."""
    tree = _children()
    pids = {pid for root in roots for pid in _tree(root, tree)}
    rss = pss = 0
    for pid in pids:
        r, p = _memory_kb(pid)
        rss, pss = rss + r, pss + p
    return rss / 1024, pss / 1024, len(pids)


@contextlib.asynccontextmanager
async def _sessions(
    name: str, url: str, home: Path, count: int, pool: int | None
) -> AsyncIterator[list[Session]]:
    workspace = home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    engine, options = embedded_engine(name, url, home / "agent", cwd=str(workspace), pool=pool)
    async with contextlib.AsyncExitStack() as stack:
        sessions: list[Session] = []
        for _ in range(count):
            sessions.append(await stack.enter_async_context(engine.start(options)))
        yield sessions


async def measure(name: str, count: int, pool: int | None) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory(prefix="pool-memory-") as scratch:
        async with (
            ModelServer(Script(turns=[], exhausted_text="done")) as server,
            _sessions(name, server.url, Path(scratch), count, pool) as sessions,
        ):
            summaries: list[TurnSummary] = []

            async def turn(session: Session) -> None:
                summaries.append(await run_turn(session, "say done", timeout=300))

            async with anyio.create_task_group() as tg:
                for session in sessions:
                    tg.start_soon(turn, session)
            failed = [s.errors for s in summaries if not s.ok]
            if failed:
                raise SystemExit(f"{name}: {len(failed)} turns failed: {failed[0]}")
            await anyio.sleep(1.0)  # let start-up garbage settle
            roots = {getattr(s.driver, "pid", None) for s in sessions}
            return agents_memory_mb({pid for pid in roots if isinstance(pid, int)})


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--engine", action="append", default=None)
    parser.add_argument(
        "--only", choices=["pooled", "one process each"], default=None, help="measure one way"
    )
    args = parser.parse_args()
    count: int = args.sessions
    print(f"| engine | {count} sessions | agent processes | RSS MB | PSS MB | PSS MB / session |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.engine or ["claude-acp", "opencode-acp"]:
        figures: dict[str, float] = {}
        for label, pool in (("pooled", count), ("one process each", None)):
            if args.only not in (None, label):
                continue
            rss, pss, processes = await measure(name, count, pool)
            figures[label] = pss
            print(
                f"| {name} | {label} | {processes} | {rss:,.0f} | {pss:,.0f} | {pss / count:,.1f} |"
            )
        if len(figures) == 2:
            ratio = figures["one process each"] / max(figures["pooled"], 1e-9)
            print(f"| {name} | ratio (PSS, one each / pooled) | | | | {ratio:.1f}x |")


if __name__ == "__main__":
    anyio.run(main)
