"""Structured output schemas and answers whose check could not end, on a real agent: a schema
with a ``$ref`` loop is refused before the agent gets a prompt, and an answer nested too deep is
repaired like any invalid answer, never a ``RecursionError`` out of ``run_turn``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import ConfigurationError, OutputValidationError, run_turn
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

LOOP: dict[str, Any] = {
    "$ref": "#/$defs/a",
    "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}},
}
LINKED: dict[str, Any] = {
    "$ref": "#/$defs/n",
    "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
}


async def test_a_looping_schema_is_refused_before_the_agent_gets_the_prompt(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    async with ModelServer(Script(turns=[ModelTurn.text("Fine.")])) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            with pytest.raises(ConfigurationError) as caught:
                await run_turn(session, "answer", output=LOOP, timeout=120)
            assert caught.value.option == "output"
            assert session.turns == 0
            assert not [r for r in server.requests if r.turn_index is not None]
            # The session is untouched: the next turn runs.
            summary = await run_turn(session, "answer", timeout=120)
    assert summary.ok and summary.text == "Fine."


async def test_an_answer_nested_too_deep_to_check_is_repaired(tmp_path: Path) -> None:
    require_engine("claude")
    deep = '{"next": ' * 900 + "{}" + "}" * 900
    fixed = {"next": {}}
    script = Script(turns=[ModelTurn.text(deep), ModelTurn.text(json.dumps(fixed))])
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            summary = await run_turn(session, "answer", output=LINKED, timeout=120)
        repair = [r for r in server.requests if r.turn_index is not None][-1].body
    assert summary.output == fixed and summary.output_repairs == 1
    assert b"nested too deep to check" in repair


async def test_an_answer_too_deep_twice_is_an_output_validation_error(tmp_path: Path) -> None:
    require_engine("claude")
    deep = "[" * 50_000 + "]" * 50_000
    script = Script(turns=[ModelTurn.text(deep), ModelTurn.text(deep)])
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            with pytest.raises(OutputValidationError) as caught:
                await run_turn(session, "answer", output={"type": "array"}, timeout=120)
    assert caught.value.errors == ["not JSON: nested too deep to read"]
