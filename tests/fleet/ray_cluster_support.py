"""A two-node Ray cluster on one machine, and the fleet driver that runs on it.

:class:`RayCluster` starts a head (``ray start --head``) and extra nodes (``ray start --address``)
as ``--block`` processes, each in a process group of its own, so a test can kill one node's
raylet and stop everything it started without touching any other Ray on the machine. Every
process gets a private ``HOME`` and ``RAY_AUTH_MODE=disabled``: a ``~/.ray/auth_token`` left by
another Ray instance would otherwise turn token auth on for the driver only, and the cluster would
reject it (``InvalidAuthToken``).

Run as a script, this module is the fleet driver (the same code for both backends)::

    python ray_cluster_support.py SPEC.json

``SPEC.json``: ``{"backend": "local" | "ray", "address": "127.0.0.1:PORT" | null,
"tasks": [{"name", "server_url", "resources", "prompts"}], "directory": ..., "out": ...}``.
It runs the embedded ``claude`` of each task against its model server and writes
``out/results.jsonl`` (every turn record) and ``out/sessions.json`` (every session record).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RAY = Path(sys.executable).with_name("ray")


def cluster_env(home: Path) -> dict[str, str]:
    """The environment of every process of the cluster and of its driver."""
    env = dict(os.environ)
    home.mkdir(parents=True, exist_ok=True)
    paths = [str(ROOT), str(HERE), str(HERE.parent)]
    env.update(
        HOME=str(home),
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        PYTHONPATH=os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    env.pop("RAY_ADDRESS", None)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RayNode:
    """One ``ray start --block`` process and the process group it leads."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if "Ray runtime started" in text:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the Ray node did not start:\n{self.log.read_text(errors='replace')}")

    def group_pids(self) -> list[int]:
        pids: list[int] = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.process.pid:
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def raylet_pid(self) -> int:
        for pid in self.group_pids():
            try:
                argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if argv0.endswith(b"/raylet"):
                return pid
        raise RuntimeError("this node has no raylet")

    def kill_raylet(self) -> None:
        """What a node's sudden loss looks like to the cluster: its raylet dies (SIGKILL)."""
        os.kill(self.raylet_pid(), signal.SIGKILL)

    def stop(self) -> None:
        """End the node and every process of its group; bounded."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while self.group_pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self.group_pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=10)


class RayCluster:
    """A head and any number of nodes, all on loopback, all under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.env = cluster_env(directory / "home")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[RayNode] = []
        # Ray's session directory holds Unix sockets (at most 107 bytes a path): a short one.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ar-ray-", dir="/tmp"))

    def _common(self, resources: Mapping[str, float], num_cpus: int) -> list[str]:
        return [
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus}",
            f"--resources={json.dumps(dict(resources))}",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
        ]

    def start_head(self, resources: Mapping[str, float], num_cpus: int = 1) -> RayNode:
        argv = [str(RAY), "start", "--head", f"--port={self.port}"]
        argv += ["--include-dashboard=false", f"--temp-dir={self.temp_dir}"]
        return self._start(argv + self._common(resources, num_cpus))

    def add_node(self, resources: Mapping[str, float], num_cpus: int = 1) -> RayNode:
        """A node that joins the head. Its ``num_cpus`` is also how many worker processes
        (one per session) its raylet starts at once."""
        argv = [str(RAY), "start", f"--address={self.address}"]
        return self._start(argv + self._common(resources, num_cpus))

    def _start(self, argv: list[str]) -> RayNode:
        node = RayNode(argv, self.env, self.directory / f"node-{len(self.nodes)}.log")
        self.nodes.append(node)
        node.wait_started(120)
        return node

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        self.nodes.clear()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


# -- the driver -----------------------------------------------------------------------------------


def _wait_for_resources(ray: Any, needed: dict[str, float], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        have = ray.cluster_resources()
        if all(have.get(name, 0) >= amount for name, amount in needed.items()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the cluster never had {needed}: {ray.cluster_resources()}")


def main(spec_path: str) -> None:
    import anyio

    from agentrun import Engine, Fleet, FleetTask
    from agentrun.offline import embedded_engine

    spec = json.loads(Path(spec_path).read_text())
    directory = Path(spec["directory"])
    engines: dict[str, Engine] = {}
    tasks: list[FleetTask] = []
    needed: dict[str, float] = {}
    for entry in spec["tasks"]:
        name = entry["name"]
        workspace = directory / name / "work"
        workspace.mkdir(parents=True, exist_ok=True)
        engine, options = embedded_engine(
            "claude", entry["server_url"], directory / name / "agent", cwd=str(workspace)
        )
        engines[name] = engine
        resources = entry.get("resources") or {}
        for key, value in resources.items():
            needed[key] = needed.get(key, 0) + value
        tasks.append(
            FleetTask(
                engine="claude",
                name=name,
                prompts=tuple(entry["prompts"]),
                options=options,
                resources=resources if spec["backend"] == "ray" else {},
            )
        )
    if spec["backend"] == "ray":
        import ray

        ray.init(address=spec["address"], log_to_driver=False, namespace="agentrun-cluster")
        _wait_for_resources(ray, needed, 60)
    fleet = Fleet(
        backend=spec["backend"],
        limit=max(1, int(spec.get("limit", len(tasks)))),
        engine_factory=lambda task: engines[task.name or ""],
    )
    started = time.perf_counter()
    result = anyio.run(fleet.run, tasks)
    wall = time.perf_counter() - started
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.jsonl").write_text(result.to_jsonl())
    sessions = [s.model_dump(mode="json") for s in result.sessions]
    (out / "sessions.json").write_text(json.dumps({"sessions": sessions, "wall_s": wall}))


if __name__ == "__main__":
    main(sys.argv[1])
