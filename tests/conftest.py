"""Shared test configuration: every async test runs on asyncio and on trio."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
from repo_paths import FAKES

# The toy engine of docs/engines/writing-an-engine.md finds its agent's script here.
os.environ.setdefault("TOY_AGENT", str(FAKES / "toy_agent.py"))

# Offline runs keep their agents' homes and journals in per-user directories; the test run's
# own go to a scratch directory of the run, never into the user's cache or data folders.
_SCRATCH = tempfile.mkdtemp(prefix="agentrun-tests-")
atexit.register(shutil.rmtree, _SCRATCH, True)
os.environ.setdefault("AGENTRUN_OFFLINE_HOMES", os.path.join(_SCRATCH, "offline"))
os.environ.setdefault("AGENTRUN_SESSIONS_DIR", os.path.join(_SCRATCH, "sessions"))


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``@pytest.mark.asyncio_only_for(value, reason=...)``: the test's trio variants whose
    parameters include ``value`` are deselected (reported as such): for waits that are the
    agent's wall clock, the same on either backend, where the library's own trio path is
    covered by the other parameters of the same test."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("asyncio_only_for")
        callspec = getattr(item, "callspec", None)
        if marker is not None and callspec is not None:
            params = callspec.params
            values = {value for value in params.values() if isinstance(value, str)}
            if params.get("anyio_backend") == "trio" and set(marker.args) & values:
                dropped.append(item)
                continue
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
