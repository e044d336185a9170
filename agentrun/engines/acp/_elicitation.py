"""ACP form elicitations (``elicitation/create``) as the library's questions.

Each field of the requested schema is one :class:`~agentrun.Question` keyed by the field's name:
a single-select enum (``enum``, or ``oneOf`` of ``{const, title}``) gives options, a multi-select
(``array`` of such items) allows several, a boolean offers ``true`` / ``false``, other fields take
free text. Answers are converted back to the field's type for the form's content.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._vocabulary.jsonvalues import as_list, as_object
from ..._vocabulary.questions import Question, QuestionOption

__all__ = ["elicitation_question", "elicitation_value"]


def _options(field: dict[str, Any]) -> tuple[QuestionOption, ...]:
    enum = as_list(field.get("enum"))
    if enum:
        return tuple(QuestionOption(label=str(v)) for v in enum if isinstance(v, (str, int, float)))
    choices = as_list(field.get("oneOf")) or as_list(field.get("anyOf")) or []
    out: list[QuestionOption] = []
    for choice in choices:
        entry = as_object(choice) or {}
        const = entry.get("const")
        if isinstance(const, (str, int, float)):
            title = entry.get("title")
            description = title if isinstance(title, str) else None
            out.append(QuestionOption(label=str(const), description=description))
    return tuple(out)


def elicitation_question(name: str, field: dict[str, Any]) -> Question:
    """The question one form field asks."""
    kind = field.get("type")
    title = field.get("title") if isinstance(field.get("title"), str) else None
    description = field.get("description") if isinstance(field.get("description"), str) else None
    multi = kind == "array"
    options = _options(as_object(field.get("items")) or {}) if multi else _options(field)
    if kind == "boolean":
        options = (QuestionOption(label="true"), QuestionOption(label="false"))
    return Question(
        id=name,
        text=description or title or name,
        header=title if description else None,
        options=options,
        multi_select=multi,
        allow_other=not options,
    )


def elicitation_value(kind: str, values: Sequence[str]) -> Any:
    """An answer as the field's type (a string the type cannot take stays a string: the agent
    validates its own form)."""
    if kind == "array":
        return list(values)
    first = values[0]
    if kind == "boolean":
        return first.strip().lower() in ("true", "yes", "y", "1")
    if kind in ("integer", "number"):
        try:
            number = float(first)
        except ValueError:
            return first
        return int(number) if kind == "integer" and number.is_integer() else number
    return first
