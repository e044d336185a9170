"""The Ray backend on a cluster the test starts: a head and a second node (``ray start``), one
machine, loopback only, with a private ``HOME`` (no ``~/.ray`` of the user's is read).

The fleet driver is ``ray_cluster_support.py`` run as a script: the same code runs the same
tasks on the local backend and on the cluster. Tasks go to nodes by custom resources: those
asking for ``agents`` to the second node, those asking for ``head`` to the head.
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from agents_support import require_engine
from ray_cluster_support import RayCluster, cluster_env

from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage

pytest.importorskip("ray")

DRIVER = Path(__file__).resolve().parent / "ray_cluster_support.py"

# The driver is a process of its own with its own event loop: one backend is enough here
# (tests/fleet/test_fleet_ray.py runs the Ray session itself on asyncio and trio).
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.agent,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
    # Three `ray start`s and two fleets of real agents: about 80 s on a loaded 2-CPU machine,
    # beyond the suite's 120 s default when it shares the CPUs; the guards inside bound it.
    pytest.mark.timeout(600),
]

#: Explicit usage, so that the records do not depend on the size of a request (which names the
#: task's working directory).
USAGE = ScriptUsage(input_tokens=1200, output_tokens=9)


def _answers() -> Script:
    return Script(turns=[ModelTurn.text(f"answer {n}", usage=USAGE) for n in (1, 2)])


def _stall() -> Script:
    """A model call that does not answer within the test: the turn is mid-flight until the
    agent's node dies (the test's guard, not this delay, bounds the test)."""
    turn = ModelTurn.text("never sent", usage=USAGE).model_copy(update={"delay_before": 900})
    return Script(turns=[turn])


async def _run_driver(
    spec: dict[str, Any], directory: Path, env: dict[str, str]
) -> anyio.abc.Process:
    directory.mkdir(parents=True, exist_ok=True)
    spec = {**spec, "directory": str(directory), "out": str(directory / "out")}
    path = directory / "spec.json"
    path.write_text(json.dumps(spec))
    with (directory / "driver.log").open("wb") as log:  # the driver keeps its own copy
        return await anyio.open_process(
            [sys.executable, str(DRIVER), str(path)], env=env, stdout=log, stderr=log
        )


def _outputs(directory: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    out = directory / "out"
    turns = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    sessions = json.loads((out / "sessions.json").read_text())["sessions"]
    return turns, {s["task"]: s for s in sessions}


def _comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A turn record without what differs between any two runs (wall times)."""
    return {k: v for k, v in record.items() if k != "duration_s"}


def _log(directory: Path) -> str:
    path = directory / "driver.log"
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


async def test_a_lost_node_ends_its_sessions_and_the_rest_of_the_fleet_completes(
    tmp_path: Path,
) -> None:
    """The second node's raylet is killed while its sessions' turns wait on the model: those
    sessions end with ``session_lost`` (the typed ``SessionLostError``), the sessions on the
    head complete with the same records the local backend writes, the results file holds a
    record of every turn, and no lost turn runs again — not even once a replacement node with
    the same resources has joined (Ray's restarts and retries are off: ``max_restarts=0``,
    ``max_task_retries=0``)."""
    require_engine("claude")
    cluster = RayCluster(tmp_path / "cluster")
    head_tasks = ["head-a", "head-b"]
    node_tasks = ["node-a", "node-b"]
    try:
        await anyio.to_thread.run_sync(cluster.start_head, {"head": 4})
        node = await anyio.to_thread.run_sync(cluster.add_node, {"agents": 4})
        async with AsyncExitStack() as stack:
            servers = {
                name: await stack.enter_async_context(ModelServer(_answers()))
                for name in head_tasks
            }
            stalled = {
                name: await stack.enter_async_context(ModelServer(_stall())) for name in node_tasks
            }
            tasks = [
                {"name": name, "server_url": servers[name].url, "resources": {"head": 1},
                 "prompts": ["one", "two"]}
                for name in head_tasks
            ] + [
                {"name": name, "server_url": stalled[name].url, "resources": {"agents": 1},
                 "prompts": ["go", "never"]}
                for name in node_tasks
            ]  # fmt: skip
            spec = {"backend": "ray", "address": cluster.address, "tasks": tasks}
            run_dir = tmp_path / "cluster-run"
            with anyio.fail_after(180):  # a guard against a hang, not a measurement
                process = await _run_driver(spec, run_dir, cluster.env)
                async with process:
                    while not all(server.model_requests for server in stalled.values()):
                        assert process.returncode is None, _log(run_dir)
                        await anyio.sleep(0.1)
                    node.kill_raylet()
                    # Somewhere a restarted actor could go (it must not).
                    await anyio.to_thread.run_sync(cluster.add_node, {"agents": 4})
                    assert await process.wait() == 0, _log(run_dir)
            turns, sessions = _outputs(run_dir)
            for name in node_tasks:
                assert len(stalled[name].model_requests) == 1  # the lost turn did not run again
    finally:
        await anyio.to_thread.run_sync(cluster.stop)

    assert list(sessions) == head_tasks + node_tasks
    for name in head_tasks:
        assert sessions[name]["ok"] and sessions[name]["turns"] == 2, sessions[name]
    for name in node_tasks:
        session = sessions[name]
        assert not session["ok"] and session["error"]["code"] == "session_lost", session
        assert session["turns"] == 1  # the lost turn's record; the second turn never started
    # The results file: every turn that ran, in task order, the lost ones as failed records.
    assert [(t["task"], t["turn"]) for t in turns] == [
        ("head-a", 1), ("head-a", 2), ("head-b", 1), ("head-b", 2), ("node-a", 1), ("node-b", 1)
    ]  # fmt: skip
    assert all(not t["ok"] for t in turns if t["task"] in node_tasks)

    # The same driver and tasks on the local backend write the same records.
    async with AsyncExitStack() as stack:
        servers = {
            name: await stack.enter_async_context(ModelServer(_answers())) for name in head_tasks
        }
        tasks = [
            {"name": name, "server_url": servers[name].url, "prompts": ["one", "two"]}
            for name in head_tasks
        ]
        local_dir = tmp_path / "local-run"
        with anyio.fail_after(120):
            process = await _run_driver(
                {"backend": "local", "address": None, "tasks": tasks},
                local_dir,
                cluster_env(tmp_path / "local-home"),
            )
            async with process:
                assert await process.wait() == 0, _log(local_dir)
    local_turns, local_sessions = _outputs(local_dir)
    assert [_comparable(t) for t in local_turns] == [
        _comparable(t) for t in turns if t["task"] in head_tasks
    ]
    assert [t["text"] for t in local_turns] == ["answer 1", "answer 2"] * 2
    assert all(s["ok"] for s in local_sessions.values())
