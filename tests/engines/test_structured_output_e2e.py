"""Structured output on the real pinned agents, offline: ``run_turn(..., output=Model)`` gives
the validated answer in ``summary.output``. Codex (exec and app-server) gets the schema its own
way (``--output-schema``, ``outputSchema``), which reaches the model request; every other agent
gets it with the prompt. An invalid answer is repaired once in the same session; invalid twice
raises :class:`OutputValidationError` with the raw text and what was wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents_support import live_engine, require_engine
from pydantic import BaseModel

from agentrun import EngineUnavailableError, OutputValidationError, Turn, run_turn
from agentrun.offline import ModelServer, ModelTurn, RecordedRequest, Script, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: Engines whose agent is given the schema by its own mechanism (seen in the model request's
#: response format, not in the prompt).
NATIVE = {"codex", "codex-app-server"}
ENGINES = [
    "claude",
    "codex",
    "codex-app-server",
    "opencode",
    "opencode-acp",
    "claude-acp",
    "codex-acp",
    "qwen",
    "gemini",
    "acp",
]


class Verdict(BaseModel):
    verdict_code: str
    confidence_level: int


def _program(name: str) -> str:
    return {"codex-app-server": "codex", "opencode-acp": "opencode"}.get(name, name)


def _engine(name: str, url: str, home: Path) -> tuple[Any, Any]:
    """The embedded engine ``name``; skipped when its pinned agent is not installed."""
    if name in {"claude", "codex", "codex-app-server", "opencode", "opencode-acp"}:
        require_engine(_program(name))
    try:
        return live_engine(name, url, home)
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))


def _turn_requests(server: ModelServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.turn_index is not None]


def _native_format(request: RecordedRequest) -> Any:
    """The JSON Schema of the response format a Responses API request asks for."""
    body = request.json
    assert isinstance(body, dict)
    text: Any = body.get("text") or {}  # pyright: ignore[reportUnknownMemberType]
    return text.get("format")


async def _drain(turn: Turn) -> None:
    async with turn:
        async for _ in turn:
            pass


@pytest.mark.parametrize("name", ENGINES)
async def test_the_answer_is_validated_into_the_model(name: str, tmp_path: Path) -> None:
    answer = json.dumps({"verdict_code": "green", "confidence_level": 7})
    async with ModelServer(Script(turns=[ModelTurn.text(answer)])) as server:
        engine, options = _engine(name, server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            summary = await run_turn(session, "judge it", output=Verdict, timeout=120)
        requests = _turn_requests(server)
    assert summary.output == Verdict(verdict_code="green", confidence_level=7)
    assert summary.output_repairs == 0
    assert len(requests) == 1
    if name in NATIVE:
        fmt = _native_format(requests[0])
        assert fmt is not None and fmt["type"] == "json_schema", fmt
        assert "confidence_level" in json.dumps(fmt["schema"]), fmt
        assert b"Give your final answer as one JSON value" not in requests[0].body
    else:
        # The schema went with the prompt.
        assert b"confidence_level" in requests[0].body
        assert b"Give your final answer as one JSON value" in requests[0].body


@pytest.mark.parametrize("name", ["claude", "codex-app-server"])
async def test_an_invalid_answer_is_repaired_once_in_the_same_session(
    name: str, tmp_path: Path
) -> None:
    require_engine(_program(name))
    fixed = {"verdict_code": "red", "confidence_level": 2}
    script = Script(
        turns=[
            ModelTurn.text("I think it is red, fairly unsure."),
            ModelTurn.text("```json\n" + json.dumps(fixed) + "\n```"),
        ]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            summary = await run_turn(session, "judge it", output=Verdict, timeout=120)
            assert session.turns == 2
        requests = _turn_requests(server)
    assert summary.output == Verdict(**fixed)
    assert summary.output_repairs == 1
    assert len(requests) == 2
    # The repair turn continues the conversation: it sees the first answer and what was wrong.
    assert b"I think it is red" in requests[1].body
    assert b"did not match the required JSON Schema" in requests[1].body


@pytest.mark.parametrize("name", ["claude", "codex"])
async def test_invalid_twice_is_an_output_validation_error(name: str, tmp_path: Path) -> None:
    require_engine(_program(name))
    script = Script(
        turns=[ModelTurn.text('{"verdict_code": 5}'), ModelTurn.text("Still no JSON here.")]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            with pytest.raises(OutputValidationError) as caught:
                await run_turn(session, "judge it", output=Verdict, timeout=120)
    error = caught.value
    assert error.error_code == "output_validation"
    assert error.raw == "Still no JSON here."
    assert len(error.errors) == 1 and error.errors[0].startswith("not JSON"), error.errors
    assert error.summary is not None and error.summary.output_repairs == 1
    assert error.summary.output is None
    # The repair prompt named what was wrong with the first answer.
    repair = _turn_requests(server)[1].body
    assert b"confidence_level: Field required" in repair
    assert b"verdict_code: Input should be a valid string" in repair


async def test_the_streaming_turn_takes_a_schema_dict(tmp_path: Path) -> None:
    require_engine("claude")
    schema = {
        "type": "object",
        "properties": {"files": {"type": "array", "items": {"type": "string"}}},
        "required": ["files"],
    }
    script = Script(turns=[ModelTurn.text('{"files": ["a.py", "b.py"]}'), ModelTurn.text("{}")])
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            async with session.turn("list them", output=schema) as turn:
                async for _ in turn:
                    pass
            assert turn.summary.output == {"files": ["a.py", "b.py"]}
            # The streaming form makes no repair turn: an invalid answer raises at the end.
            with pytest.raises(OutputValidationError) as caught:
                await _drain(session.turn("again", output=schema))
    assert caught.value.errors == ["(root).files: field required"]
    assert caught.value.raw == "{}"
