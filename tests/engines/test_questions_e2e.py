"""Questions from the agent on the real pinned agents, offline: the scripted model asks through
the agent's own question tool; the session's question callback answers (or nobody does, and the
agent hears so at once); the answer reaches the model and the turn's summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import (
    Message,
    MessageType,
    QuestionAnswer,
    QuestionRequest,
    approve_all,
    run_turn,
)
from agentrun.offline import ModelServer, ModelTurn, Script, ToolCallBlock, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

COLOR = "Which color should the button be?"
ASK = {
    "questions": [
        {
            "question": COLOR,
            "header": "Color",
            "options": [
                {"label": "Red", "description": "warm"},
                {"label": "Blue", "description": "cool"},
            ],
            "multiSelect": False,
        }
    ]
}


def _script() -> Script:
    return Script(
        turns=[
            ModelTurn(blocks=[ToolCallBlock(tool="AskUserQuestion", arguments=ASK)]),
            ModelTurn.text("Blue it is."),
        ]
    )


def _tool_output(seen: list[Message]) -> str:
    results = [m for m in seen if m.type is MessageType.TOOL_RESULT and m.tool is not None]
    assert results, [m.type for m in seen]
    return str(results[0].tool.output)  # type: ignore[union-attr]


@pytest.mark.parametrize("hitl", [True, False], ids=["hitl", "no-hitl"])
async def test_claude_asks_and_the_question_callback_answers(hitl: bool, tmp_path: Path) -> None:
    require_engine("claude")
    asked: list[QuestionRequest] = []

    async def answer(request: QuestionRequest) -> QuestionAnswer:
        asked.append(request)
        return QuestionAnswer.of({request.questions[0].id: "Blue"})

    async with ModelServer(_script()) as server:
        extra: dict[str, Any] = {"permission_handler": approve_all} if hitl else {}
        engine, options = embedded_engine(
            "claude", server.url, tmp_path / "agent", hitl=hitl, question_handler=answer, **extra
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            summary = await run_turn(session, "pick a color", on_message=seen.append, timeout=120)
        second_call = str(server.requests[-1].body)
    (request,) = asked
    (question,) = request.questions
    assert (question.id, question.text, question.header) == (COLOR, COLOR, "Color")
    assert [o.label for o in question.options] == ["Red", "Blue"]
    assert request.tool_use_id is not None and request.engine == "claude"
    # The answer went back in Claude Code's own format and reached the model.
    assert "Blue" in _tool_output(seen) and "Blue" in second_call
    assert summary.ok and summary.text == "Blue it is."
    (record,) = summary.questions
    assert record.answers == {COLOR: ("Blue",)} and not record.refused
    assert record.tool_use_id == request.tool_use_id
    notes = [m for m in seen if m.type is MessageType.QUESTION]
    assert len(notes) == 1 and notes[0].text == COLOR


async def test_without_a_question_callback_claude_hears_no_at_once(tmp_path: Path) -> None:
    require_engine("claude")
    async with ModelServer(_script()) as server:
        engine, options = embedded_engine(
            "claude", server.url, tmp_path / "agent", hitl=True, permission_handler=approve_all
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            # An unanswered question would wait forever; the idle timeout proves it does not.
            summary = await run_turn(
                session, "pick a color", on_message=seen.append, timeout=120, idle_timeout=30
            )
    assert "nobody can answer" in _tool_output(seen)
    (record,) = summary.questions
    assert record.refused and record.answers == {}
    assert summary.ok and summary.text == "Blue it is."


CODEX_ASK = {
    "questions": [
        {
            "id": "color",
            "header": "Color",
            "question": COLOR,
            "options": [
                {"label": "Red", "description": "warm"},
                {"label": "Blue", "description": "cool"},
            ],
        }
    ]
}


@pytest.mark.parametrize("answering", [True, False], ids=["answered", "refused"])
async def test_codex_app_server_asks_in_plan_mode(answering: bool, tmp_path: Path) -> None:
    require_engine("codex")
    asked: list[QuestionRequest] = []

    async def answer(request: QuestionRequest) -> QuestionAnswer:
        asked.append(request)
        return QuestionAnswer.of({"color": "Blue"})

    script = Script(
        turns=[
            ModelTurn(blocks=[ToolCallBlock(tool="request_user_input", arguments=CODEX_ASK)]),
            ModelTurn.text("Blue it is."),
        ]
    )
    async with ModelServer(script) as server:
        extra: dict[str, Any] = {"question_handler": answer} if answering else {}
        engine, options = embedded_engine(
            "codex-app-server", server.url, tmp_path / "agent", mode="plan", **extra
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            summary = await run_turn(session, "pick a color", on_message=seen.append, timeout=120)
        second_call = json.loads(server.requests[-1].body)
    outputs = [i["output"] for i in second_call["input"] if i.get("type") == "function_call_output"]
    (record,) = summary.questions
    assert [q.id for q in record.questions] == ["color"]
    assert [o.label for o in record.questions[0].options] == ["Red", "Blue"]
    if answering:
        (request,) = asked
        assert request.questions[0].text == COLOR and request.questions[0].header == "Color"
        assert record.answers == {"color": ("Blue",)}
        assert json.loads(outputs[0]) == {"answers": {"color": {"answers": ["Blue"]}}}
    else:
        # Codex turns the refusal into an answer with no answers, at once.
        assert record.refused and json.loads(outputs[0]) == {"answers": {}}
    assert summary.ok and summary.text == "Blue it is."
