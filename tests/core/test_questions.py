"""The shared question flow: the caller answers, or the agent hears "no" at once."""

from __future__ import annotations

import pytest

from agentrun import (
    MessageType,
    Question,
    QuestionAnswer,
    QuestionOption,
    QuestionRecord,
    QuestionRequest,
    TurnSummary,
)
from agentrun._vocabulary.questions import ask_question

pytestmark = pytest.mark.anyio

REQUEST = QuestionRequest(
    questions=(
        Question(id="q1", text="Which color?", options=(QuestionOption(label="Red"),)),
        Question(id="q2", text="Why?"),
    ),
    tool_use_id="t1",
    engine="test",
)


async def test_the_callers_answer_is_recorded() -> None:
    async def answer(request: QuestionRequest) -> QuestionAnswer:
        return QuestionAnswer.of({"q1": "Red", "q2": ["because", "it is warm"]})

    got, notes = await ask_question(answer, REQUEST, engine="test")
    assert got.answers == {"q1": ("Red",), "q2": ("because", "it is warm")}
    assert got.first("q1") == "Red" and got.first("nope") is None
    (note,) = notes
    assert note.type is MessageType.QUESTION and note.text == "Which color?; Why?"
    record = QuestionRecord.model_validate(note.data)
    assert record.answers == got.answers and record.tool_use_id == "t1" and not record.refused
    summary = TurnSummary.from_messages(notes)
    assert summary.questions == [record]


async def test_without_a_handler_the_question_is_refused_at_once() -> None:
    got, notes = await ask_question(None, REQUEST, engine="test")
    assert got.refused and got.reason is not None and "nobody can answer" in got.reason
    assert [n.type for n in notes] == [MessageType.QUESTION]


async def test_a_handler_that_raises_or_answers_nonsense_refuses_with_an_error() -> None:
    async def broken(request: QuestionRequest) -> QuestionAnswer:
        raise RuntimeError("ui crashed")

    async def sloppy(request: QuestionRequest) -> QuestionAnswer:
        return "Red"  # type: ignore[return-value]

    for handler in (broken, sloppy):
        got, notes = await ask_question(handler, REQUEST, engine="test")
        assert got.refused
        assert [n.type for n in notes] == [MessageType.ERROR, MessageType.QUESTION]
        assert notes[0].error is not None and notes[0].error.code == "question_callback"
        record = QuestionRecord.model_validate(notes[1].data)
        assert record.refused and record.answers == {}


async def test_a_refusal_keeps_its_reason() -> None:
    async def busy(request: QuestionRequest) -> QuestionAnswer:
        return QuestionAnswer.refuse("in a meeting")

    got, notes = await ask_question(busy, REQUEST, engine="test")
    assert (got.refused, got.reason) == (True, "in a meeting")
    assert QuestionRecord.model_validate(notes[-1].data).reason == "in a meeting"


async def test_a_secrets_answer_reaches_the_agent_but_is_never_recorded() -> None:
    request = QuestionRequest(questions=(Question(id="pw", text="Password?", secret=True),))

    async def answer(request: QuestionRequest) -> QuestionAnswer:
        return QuestionAnswer.of({"pw": "hunter2"})

    got, notes = await ask_question(answer, request, engine="test")
    assert got.first("pw") == "hunter2"
    assert "hunter2" not in notes[-1].model_dump_json()
    assert QuestionRecord.model_validate(notes[-1].data).answers == {"pw": ("***",)}
