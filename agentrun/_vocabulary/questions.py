"""Questions from the agent: the caller answers in code, or the agent hears "no" at once.

Agents ask the user things mid-turn: Claude Code's ``AskUserQuestion`` tool, Codex app-server's
``item/tool/requestUserInput``, ACP's ``elicitation/create``. An engine that receives one builds a
:class:`QuestionRequest` and awaits the session's :data:`QuestionHandler`; the caller's
:class:`QuestionAnswer` goes back in the agent's own format. Without a handler (or when the
handler raises or refuses) the agent is told at once that nobody will answer, so no turn ever
waits on a question nobody sees. Every question and its answer are a ``question`` message and a
:class:`QuestionRecord` in the turn's summary.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .jsonvalues import as_dict, as_list, as_str
from .messages import Message, MessageType

__all__ = [
    "Question",
    "QuestionAnswer",
    "QuestionHandler",
    "QuestionOption",
    "QuestionRecord",
    "QuestionRequest",
    "ask_question",
]

_NOBODY = "no question callback is set: nobody can answer; decide on your own"


class _Frozen(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")


class QuestionOption(_Frozen):
    """One answer the agent suggests."""

    label: str
    description: str | None = None


class Question(_Frozen):
    """One question. Answers are keyed by ``id`` (the question's text where the agent gives
    none)."""

    id: str
    text: str
    #: A short label for the question (Claude Code's chip, Codex's header).
    header: str | None = None
    options: tuple[QuestionOption, ...] = ()
    #: Several options may be chosen.
    multi_select: bool = False
    #: A free-text answer is accepted besides the options.
    allow_other: bool = True
    #: The answer is a secret (a password): do not log or echo it.
    secret: bool = False


class QuestionRequest(_Frozen):
    """The agent asks the caller one or more questions at once."""

    questions: tuple[Question, ...]
    #: The tool call that asks (Claude Code, Codex), when there is one.
    tool_use_id: str | None = None
    #: What the agent said around the questions (ACP's elicitation message).
    message: str | None = None
    engine: str | None = None
    raw: Any = Field(default=None, exclude=True, repr=False)


class QuestionAnswer(_Frozen):
    """The caller's reply: the chosen labels or free text per question id, or a refusal."""

    answers: dict[str, tuple[str, ...]] = Field(default_factory=dict[str, tuple[str, ...]])
    refused: bool = False
    reason: str | None = None

    @classmethod
    def of(cls, answers: Mapping[str, str | Sequence[str]]) -> QuestionAnswer:
        """Answers by question id; a single string is one answer."""
        return cls(
            answers={
                key: (value,) if isinstance(value, str) else tuple(value)
                for key, value in answers.items()
            }
        )

    @classmethod
    def refuse(cls, reason: str | None = None) -> QuestionAnswer:
        """Tell the agent the questions will not be answered."""
        return cls(refused=True, reason=reason)

    def first(self, question_id: str) -> str | None:
        """The first answer to one question, if any."""
        values = self.answers.get(question_id)
        return values[0] if values else None


class QuestionRecord(_Frozen):
    """A question the agent asked during a turn and what it was told (the answer to a
    ``secret`` question shows as ``***``)."""

    questions: tuple[Question, ...]
    answers: dict[str, tuple[str, ...]] = Field(default_factory=dict[str, tuple[str, ...]])
    refused: bool = False
    reason: str | None = None
    tool_use_id: str | None = None


QuestionHandler = Callable[[QuestionRequest], Awaitable[QuestionAnswer]]


async def ask_question(
    handler: QuestionHandler | None, request: QuestionRequest, *, engine: str
) -> tuple[QuestionAnswer, list[Message]]:
    """The one question flow every engine shares: the caller's answer (or a refusal when there
    is no handler, or it raised, or it answered nothing), and the messages that record it: an
    ``error`` for a failing handler, then the ``question`` message."""
    notes: list[Message] = []
    if handler is None:
        answer = QuestionAnswer.refuse(_NOBODY)
    else:
        try:
            answer = await handler(request)
        except Exception as exc:
            notes.append(
                Message.error_message(
                    f"{engine}: the question callback raised {exc!r}; the question was refused",
                    code="question_callback",
                )
            )
            answer = QuestionAnswer.refuse("the question callback failed")
        else:
            if not isinstance(answer, QuestionAnswer):  # pyright: ignore[reportUnnecessaryIsInstance]
                notes.append(
                    Message.error_message(
                        f"{engine}: the question callback returned {type(answer).__name__}, "
                        "not a QuestionAnswer; the question was refused",
                        code="question_callback",
                    )
                )
                answer = QuestionAnswer.refuse("the question callback failed")
    secret = {q.id for q in request.questions if q.secret}
    record = QuestionRecord(
        questions=request.questions,
        # A secret's answer reaches the agent only: the record keeps that it was answered.
        answers={}
        if answer.refused
        else {k: ("***",) if k in secret else v for k, v in answer.answers.items()},
        refused=answer.refused,
        reason=answer.reason,
        tool_use_id=request.tool_use_id,
    )
    shown = "; ".join(q.text for q in request.questions)
    notes.append(
        Message(
            type=MessageType.QUESTION,
            text=shown,
            data=record.model_dump(mode="json"),
        )
    )
    return answer, notes


def options_of(items: object) -> tuple[QuestionOption, ...]:
    """Options from a list of ``{"label", "description"}`` objects (Claude Code, Codex);
    entries without a label are skipped."""
    out: list[QuestionOption] = []
    for item in as_list(items) or []:
        entry = as_dict(item) or {}
        label = as_str(entry.get("label"))
        if label is not None:
            out.append(QuestionOption(label=label, description=as_str(entry.get("description"))))
    return tuple(out)


def nobody_answers(reason: str | None) -> str:
    """What an agent is told when its question is refused."""
    return reason or _NOBODY
