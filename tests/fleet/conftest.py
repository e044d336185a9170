"""A local Ray instance for the fleet tests that run on the Ray backend (started once, on first
use; loopback only inside the tests' network namespace)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    ray: Any = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Unset, a new local instance turns token auth on and reads (or writes) ~/.ray/auth_token
    # in the user's home; a token left there makes a later `ray start` cluster reject its driver.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Workers import what the tests' engine factories refer to (this folder, tests/, the repo).
    path = os.pathsep.join(str(p) for p in (HERE, HERE.parent, HERE.parent.parent))
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        namespace="agentrun-tests",
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> str:
    """Run a fleet test on each backend."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return str(request.param)
