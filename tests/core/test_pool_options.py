"""``pool=`` is checked where it is given: a whole number of sessions per agent process, at
least 1, and only on an engine that can share a process between sessions; each refusal a
:class:`~agentrun.ConfigurationError` naming the option, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun import ConfigurationError, get_engine
from agentrun.engines.acp import AcpEngine
from agentrun.offline import embedded_engine


@pytest.mark.parametrize("pool", [0, -1, "2", 2.0, True])
@pytest.mark.parametrize(
    "name", ["claude-acp", "opencode-acp", "codex-acp", "gemini", "qwen", "codex-app-server"]
)
def test_a_bad_pool_size_is_refused(name: str, pool: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        get_engine(name, pool=pool)
    assert caught.value.option == "pool"


def test_the_generic_acp_engine_takes_a_pool() -> None:
    engine = AcpEngine(["my-agent"], pool=4)
    assert engine.pool is not None and engine.pool.capacity == 4
    assert AcpEngine(["my-agent"]).pool is None
    with pytest.raises(ConfigurationError):
        AcpEngine(["my-agent"], pool=0)


@pytest.mark.parametrize("name", ["claude", "codex", "opencode"])
def test_an_engine_that_cannot_pool_says_so(name: str) -> None:
    with pytest.raises(ConfigurationError, match="cannot share an agent process") as caught:
        get_engine(name, pool=2)
    assert caught.value.option == "pool"


def test_embedded_engine_checks_the_pool_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as caught:
        embedded_engine("opencode-acp", "http://127.0.0.1:9", tmp_path, pool=0)
    assert caught.value.option == "pool"
