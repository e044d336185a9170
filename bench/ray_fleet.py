"""The Ray cluster backend against the local one: the wall time of one fleet of N offline tasks
(the pinned ``claude``, one turn each, against the embedded model server), run by the same
driver (``tests/fleet/ray_cluster_support.py``) with ``backend="local"`` and with
``backend="ray"`` on a two-node cluster on this machine (a head, and a node holding the
``agents`` resource every task asks for). The cluster is started once, untimed; the time is the
driver's ``Fleet.run`` alone (not its interpreter start nor ``ray.init``), median of
interleaved runs. Target: the cluster at most 1.3x the local wall.

    python bench/ray_fleet.py [--tasks 50] [--runs 3] [--limit 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from _common import ROOT, Row, print_table

from agentrun import EngineUnavailableError
from agentrun.offline import ModelServer, Script

#: The cluster helper and fleet driver the tests use (tests/fleet is not a package).
DRIVER = ROOT / "tests" / "fleet" / "ray_cluster_support.py"


def _support() -> Any:
    spec = importlib.util.spec_from_file_location("ray_cluster_support", DRIVER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fleet_wall(spec: dict[str, Any], directory: Path, env: dict[str, str]) -> float:
    """Run the driver once against a fresh model server; the fleet's wall time."""

    directory.mkdir(parents=True)
    path = directory / "spec.json"
    out = directory / "out"
    log = directory / "driver.log"

    async def run() -> int:
        # No scripted turns: every model call gets the same short answer.
        async with ModelServer(Script()) as server:
            tasks = [{**task, "server_url": server.url} for task in spec["tasks"]]
            full = {**spec, "tasks": tasks, "directory": str(directory), "out": str(out)}
            await anyio.Path(path).write_text(json.dumps(full))
            command = [sys.executable, str(DRIVER), str(path)]
            with open(log, "wb") as sink:  # noqa: ASYNC230  # the driver keeps its own copy
                result = await anyio.run_process(
                    command, env=env, stdout=sink, stderr=sink, check=False
                )
            return result.returncode

    if anyio.run(run) != 0:
        raise SystemExit(f"the fleet driver failed; see {log}")
    sessions = json.loads((out / "sessions.json").read_text())
    if not all(s["ok"] for s in sessions["sessions"]):
        raise SystemExit(f"a session failed: {out / 'sessions.json'}")
    return float(sessions["wall_s"])


def measure(tasks: int, runs: int = 3, limit: int = 8) -> list[Row]:
    try:
        import ray  # noqa: F401  # pyright: ignore[reportMissingImports, reportUnusedImport]
    except ImportError as exc:
        raise EngineUnavailableError("the Ray benchmark needs Ray", engine="ray") from exc
    from agentrun._wire.programs import resolve_binary

    resolve_binary("claude")  # EngineUnavailableError when the pinned claude is missing
    scratch = Path(tempfile.mkdtemp(prefix="agentrun-bench-ray-"))
    cluster = _support().RayCluster(scratch / "cluster")
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    try:
        cluster.start_head({"head": 1})
        # The node's CPUs as `ray start` counts them by default: its raylet starts that many
        # worker processes (one per session) at a time.
        cluster.add_node({"agents": tasks}, num_cpus=os.cpu_count() or 1)
        specs = {
            backend: {
                "backend": backend,
                "address": cluster.address,
                "limit": limit,
                "tasks": [
                    {"name": f"task-{i}", "resources": {"agents": 1}, "prompts": ["hello"]}
                    for i in range(tasks)
                ],
            }
            for backend in walls
        }
        for run in range(runs + 1):  # the first round warms caches and is not counted
            for backend, spec in specs.items():
                wall = _fleet_wall(spec, scratch / f"{backend}-{run}", cluster.env)
                if run:
                    walls[backend].append(wall)
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    local, remote = (statistics.median(walls[b]) for b in ("local", "ray"))
    spread = (max(walls["ray"]) - min(walls["ray"])) / remote if remote else 0.0
    per_task_ms = (remote - local) / tasks * 1000
    return [
        Row(f"ray fleet {tasks} tasks", f"cluster, +{per_task_ms:.0f} ms/task",
            f"local backend ({local:.1f} s)", remote / local, remote, spread, "<= 1.3x"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=8)
    args = parser.parse_args()
    print_table(measure(args.tasks, args.runs, args.limit))


if __name__ == "__main__":
    main()
