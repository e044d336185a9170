"""Shared test configuration: every async test runs on asyncio and on trio."""

from __future__ import annotations

import os

import pytest
from repo_paths import FAKES

# The toy engine of docs/engines/writing-an-engine.md finds its agent's script here.
os.environ.setdefault("TOY_AGENT", str(FAKES / "toy_agent.py"))


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
