"""What ``import agentrun`` loads: the trajectory models wait for their first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from repo_paths import REPO

ATIF_MODULES = {
    "agentrun._store.trajectory.atif",
    "agentrun._store.trajectory.load",
    "agentrun._store.trajectory.export",
    "agentrun._store.trajectory.import_",
    "agentrun._store.trajectory.digest",
}


def _loaded_after(program: str) -> set[str]:
    """The agentrun modules a fresh interpreter has loaded after ``program``."""
    code = f"{program}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    names: list[str] = json.loads(done.stdout.splitlines()[-1])
    return {n for n in names if n.startswith("agentrun")}


def test_import_agentrun_leaves_the_trajectory_models_for_later() -> None:
    loaded = _loaded_after("import agentrun")
    assert "agentrun._vocabulary.messages" in loaded  # the vocabulary is there
    assert loaded.isdisjoint(ATIF_MODULES), sorted(loaded & ATIF_MODULES)


def test_replay_does_not_load_the_trajectory_models() -> None:
    loaded = _loaded_after("import agentrun\nagentrun.replay")
    assert "agentrun.engines._replay" in loaded
    assert loaded.isdisjoint(ATIF_MODULES), sorted(loaded & ATIF_MODULES)


def test_the_trajectory_names_load_on_first_use() -> None:
    program = (
        "import agentrun\n"
        "from agentrun._store.trajectory.atif import Trajectory\n"
        "from agentrun._store.trajectory.export import to_atif\n"
        "from agentrun._store.trajectory.import_ import from_atif\n"
        "from agentrun._store.trajectory.turns import ReplayedTurn\n"
        "assert agentrun.Trajectory is Trajectory and agentrun.to_atif is to_atif\n"
        "assert agentrun.from_atif is from_atif and agentrun.ReplayedTurn is ReplayedTurn\n"
        "import agentrun.trajectory"
    )
    assert _loaded_after(program) >= ATIF_MODULES
