"""The wire schema of ``opencode run --format json``: one typed dict per event kind the translator
knows, told apart by ``type``, checked by pydantic-core straight from a line's bytes.

A line the schema takes is exactly what decoding it would give (strict types, no conversion; the
values typed ``Any`` come through as they are), so :class:`~.OpenCodeTranslator` makes the same
messages of it, by the same code, as of the decoded line, and validates none of them again. A
line it does not take (another kind of event, a key it does not know, a value of another type,
a negative token count, a non-finite cost) is decoded and translated as before: the schema only
decides which lines are read in one pass, never what a line means.

Every key OpenCode writes is declared, in the order OpenCode writes it (``docs/engines/
opencode.md``, the recordings in ``fixtures/opencode/``), and no other key is taken: a validated
dict lists its keys in their declared order, so the event a message keeps as ``raw`` lists its
keys as OpenCode wrote them. ``bench/equality.py`` and the tests prove it on every recording; a
line whose keys came in another order would keep its keys in the declared order (the messages
themselves do not change).

The schema is compiled once, when the first line is read (importing the engine builds nothing).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import NotRequired, TypedDict

__all__ = [
    "ErrorEvent",
    "Event",
    "StepFinishEvent",
    "StepStartEvent",
    "TextEvent",
    "ToolUseEvent",
    "event_schema",
]

#: Strict: a value of another JSON type is refused, never converted. A key the schema does not
#: know is refused too: a validated dict would list it after the known ones, not where OpenCode
#: wrote it.
_STRICT = ConfigDict(strict=True, extra="forbid")

#: A token count: an integer (not a boolean, not ``1.0``), never negative (the vocabulary turns a
#: negative count into "not reported": such a line takes the decoding path, which does that).
Count = Annotated[int, Field(ge=0)]
#: A cost: a number as the agent wrote it (an integer stays an integer in ``raw``), finite and
#: never negative.
Cost = Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0, allow_inf_nan=False)]


@with_config(_STRICT)
class StepStartPart(TypedDict):
    id: NotRequired[Any]
    messageID: NotRequired[str]
    sessionID: NotRequired[Any]
    type: NotRequired[Any]
    snapshot: NotRequired[Any]


@with_config(_STRICT)
class TextPart(TypedDict):
    """``text`` and ``reasoning`` parts."""

    id: NotRequired[Any]
    messageID: NotRequired[str]
    sessionID: NotRequired[Any]
    type: NotRequired[Any]
    text: NotRequired[str]
    time: NotRequired[Any]


@with_config(_STRICT)
class ToolState(TypedDict):
    """A tool part's ``state``: ``completed`` (output, metadata, title) or ``error`` (error)."""

    status: NotRequired[str]
    input: NotRequired[Any]
    output: NotRequired[Any]
    error: NotRequired[Any]
    metadata: NotRequired[Any]
    title: NotRequired[str]
    time: NotRequired[dict[str, Any]]


@with_config(_STRICT)
class ToolPart(TypedDict):
    type: NotRequired[Any]
    tool: NotRequired[str]
    callID: NotRequired[str]
    state: NotRequired[ToolState]
    id: NotRequired[str]
    sessionID: NotRequired[Any]
    messageID: NotRequired[str]


@with_config(_STRICT)
class CacheTokens(TypedDict):
    write: NotRequired[Count]
    read: NotRequired[Count]


@with_config(_STRICT)
class Tokens(TypedDict):
    total: NotRequired[Any]
    input: NotRequired[Count]
    output: NotRequired[Count]
    reasoning: NotRequired[Count]
    cache: NotRequired[CacheTokens]


@with_config(_STRICT)
class StepFinishPart(TypedDict):
    id: NotRequired[Any]
    reason: NotRequired[str]
    messageID: NotRequired[Any]
    sessionID: NotRequired[Any]
    type: NotRequired[Any]
    snapshot: NotRequired[Any]
    tokens: NotRequired[Tokens]
    cost: NotRequired[Cost]


@with_config(_STRICT)
class ErrorData(TypedDict):
    message: NotRequired[str]
    statusCode: NotRequired[int]
    isRetryable: NotRequired[Any]
    responseHeaders: NotRequired[Any]
    responseBody: NotRequired[Any]
    metadata: NotRequired[Any]
    ref: NotRequired[Any]


@with_config(_STRICT)
class ErrorBody(TypedDict):
    name: NotRequired[str]
    data: NotRequired[ErrorData]
    message: NotRequired[str]


@with_config(_STRICT)
class StepStartEvent(TypedDict):
    type: Literal["step_start"]
    timestamp: NotRequired[Any]
    sessionID: NotRequired[str]
    part: StepStartPart


@with_config(_STRICT)
class TextEvent(TypedDict):
    type: Literal["text", "reasoning"]
    timestamp: NotRequired[Any]
    sessionID: NotRequired[str]
    part: TextPart


@with_config(_STRICT)
class ToolUseEvent(TypedDict):
    type: Literal["tool_use"]
    timestamp: NotRequired[Any]
    sessionID: NotRequired[str]
    part: ToolPart


@with_config(_STRICT)
class StepFinishEvent(TypedDict):
    type: Literal["step_finish"]
    timestamp: NotRequired[Any]
    sessionID: NotRequired[str]
    part: StepFinishPart


@with_config(_STRICT)
class ErrorEvent(TypedDict):
    type: Literal["error"]
    timestamp: NotRequired[Any]
    sessionID: NotRequired[str]
    error: ErrorBody


#: The events the translator knows; any other ``type`` is not the schema's.
Event = Annotated[
    StepStartEvent | TextEvent | ToolUseEvent | StepFinishEvent | ErrorEvent,
    Field(discriminator="type"),
]

_schema: list[TypeAdapter[Any]] = []


def event_schema() -> TypeAdapter[Any]:
    """The compiled schema of :data:`Event` (built on the first call)."""
    if not _schema:
        _schema.append(TypeAdapter(Event))
    return _schema[0]
