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
