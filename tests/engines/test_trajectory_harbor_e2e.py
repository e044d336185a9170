"""A live session's ATIF trajectory on every engine of the embedded default, validated by
Harbor's own validator (skipped, saying so, where Harbor is not installed: see
``tests/harbor_support.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harbor_support import harbor_errors, harbor_python

from agentrun import EngineUnavailableError, Message, get_engine, run_turn
from agentrun.offline import EMBEDDED_ENGINES, ModelServer, ModelTurn, Script, embedded_engine
from agentrun.trajectory import from_atif, to_atif

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


@pytest.mark.parametrize("name", sorted(EMBEDDED_ENGINES))
async def test_harbor_validates_a_live_sessions_trajectory(name: str, tmp_path: Path) -> None:
    python = harbor_python()
    try:
        get_engine(name).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    script = Script(turns=[ModelTurn.shell("echo hi", say="Running it."), ModelTurn.text("It printed hi."),
                           ModelTurn.text("Nothing else.")])  # fmt: skip
    prompts = ["run echo hi", "anything else?"]
    turns: list[list[Message]] = []
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent", cwd=str(workspace))
        async with engine.start(options) as session:
            for prompt in prompts:
                seen: list[Message] = []
                summary = await run_turn(session, prompt, on_message=seen.append, timeout=120)
                assert summary.ok, summary.errors
                turns.append(seen)
    exported = to_atif(turns, prompts=prompts).model_dump(mode="json", exclude_none=True)
    again = to_atif(from_atif(exported).turns).model_dump(mode="json", exclude_none=True)
    assert exported["schema_version"] == "ATIF-v1.8"
    assert harbor_errors(python, [exported, again]) == [[], []]
