"""The wire schema of Claude Code's stream-json events, as the translator reads them.

Each event kind the translator builds messages from has a typed view here: the fields it reads,
with the types it needs (strict: a JSON ``1.0`` is not an int, ``"1"`` is not a number, a string
is a string). Fields nobody reads are not declared and not looked at; the event itself (the
agent's dict, in the agent's key order) stays the message's ``raw`` and the source of every
value passed on as it is (tool inputs and outputs, ``data``).

An event the schema does not take (an unknown kind, a surprising shape, a negative token count)
is not an error: the translator reads it the lenient way, value by value, as it always did. So
the schema only decides which path a line takes, never what comes out of it; it may be as
strict as is convenient, and it is: every field it declares has the one shape the lenient path
would accept without a second look.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import NotRequired, TypedDict

from ..._vocabulary.jsonvalues import MAX_COUNT

__all__ = ["wire_schema"]

_VIEW = ConfigDict(strict=True, extra="ignore")

#: A token count as a usage figure takes it (a negative one, or one beyond a 64-bit integer, is
#: refused: the lenient path turns it into "not reported").
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
#: Any other integer the translator reads (``as_int``'s bounds: beyond them, the lenient path).
Int = Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]


@with_config(_VIEW)
class CallUsage(TypedDict):
    """``usage`` of one model call (Anthropic's shape)."""

    input_tokens: NotRequired[Count | None]
    output_tokens: NotRequired[Count | None]
    cache_read_input_tokens: NotRequired[Count | None]
    cache_creation_input_tokens: NotRequired[Count | None]
    output_tokens_details: NotRequired[OutputDetails | None]


@with_config(_VIEW)
class OutputDetails(TypedDict):
    thinking_tokens: NotRequired[Count | None]


# -- assistant and user messages -------------------------------------------------------------


@with_config(_VIEW)
class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


@with_config(_VIEW)
class ThinkingBlock(TypedDict):
    type: Literal["thinking"]
    thinking: str


@with_config(_VIEW)
class ToolUseBlock(TypedDict):
    type: Literal["tool_use", "server_tool_use"]
    id: str
    name: str


AssistantBlock = Annotated[TextBlock | ThinkingBlock | ToolUseBlock, Field(discriminator="type")]


@with_config(_VIEW)
class AssistantMessage(TypedDict):
    id: str
    model: str
    content: list[AssistantBlock]
    usage: CallUsage


@with_config(_VIEW)
class AssistantEvent(TypedDict):
    type: Literal["assistant"]
    message: AssistantMessage
    parent_tool_use_id: NotRequired[str | None]


@with_config(_VIEW)
class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    is_error: NotRequired[bool]


UserBlock = Annotated[TextBlock | ToolResultBlock, Field(discriminator="type")]


@with_config(_VIEW)
class UserMessage(TypedDict):
    content: str | list[UserBlock]


@with_config(_VIEW)
class UserEvent(TypedDict):
    type: Literal["user"]
    message: UserMessage
    parent_tool_use_id: NotRequired[str | None]


# -- stream_event (partial messages) -----------------------------------------------------------


@with_config(_VIEW)
class StartedMessage(TypedDict):
    id: str
    usage: CallUsage


@with_config(_VIEW)
class MessageStart(TypedDict):
    type: Literal["message_start"]
    message: StartedMessage


@with_config(_VIEW)
class StartedBlock(TypedDict):
    type: str
    id: NotRequired[str]
    name: NotRequired[str]


@with_config(_VIEW)
class ContentBlockStart(TypedDict):
    type: Literal["content_block_start"]
    index: Int
    content_block: StartedBlock


@with_config(_VIEW)
class TextDelta(TypedDict):
    type: Literal["text_delta"]
    text: str


@with_config(_VIEW)
class ThinkingDelta(TypedDict):
    type: Literal["thinking_delta"]
    thinking: str


@with_config(_VIEW)
class InputJsonDelta(TypedDict):
    type: Literal["input_json_delta"]
    partial_json: str


@with_config(_VIEW)
class SignatureDelta(TypedDict):
    type: Literal["signature_delta"]


BlockDelta = Annotated[
    TextDelta | ThinkingDelta | InputJsonDelta | SignatureDelta, Field(discriminator="type")
]


@with_config(_VIEW)
class ContentBlockDelta(TypedDict):
    type: Literal["content_block_delta"]
    index: Int
    delta: BlockDelta


@with_config(_VIEW)
class StopDelta(TypedDict):
    stop_reason: NotRequired[str | None]


@with_config(_VIEW)
class MessageDelta(TypedDict):
    type: Literal["message_delta"]
    delta: StopDelta
    usage: NotRequired[CallUsage]


@with_config(_VIEW)
class Quiet(TypedDict):
    """``content_block_stop``, ``message_stop`` and ``ping``: read from the event itself."""

    type: Literal["content_block_stop", "message_stop", "ping"]


StreamInner = Annotated[
    MessageStart | ContentBlockStart | ContentBlockDelta | MessageDelta | Quiet,
    Field(discriminator="type"),
]


@with_config(_VIEW)
class StreamEvent(TypedDict):
    type: Literal["stream_event"]
    event: StreamInner
    parent_tool_use_id: NotRequired[str | None]
    api_message_id: NotRequired[str | None]


# -- system and result ---------------------------------------------------------------------------


@with_config(_VIEW)
class SystemEvent(TypedDict):
    """Every ``system`` subtype: ``init`` reads the rest, the others pass through as data."""

    type: Literal["system"]
    subtype: str
    session_id: NotRequired[str]
    model: NotRequired[str]
    cwd: NotRequired[str]
    tools: NotRequired[list[str]]
    claude_code_version: NotRequired[str]
    permissionMode: NotRequired[str]


@with_config(_VIEW)
class ModelUsage(TypedDict):
    """One model's entry of ``modelUsage`` / ``model_usage_since_last_result``."""

    inputTokens: NotRequired[Count | None]
    outputTokens: NotRequired[Count | None]
    cacheReadInputTokens: NotRequired[Count | None]
    cacheCreationInputTokens: NotRequired[Count | None]
    thinkingTokens: NotRequired[Count | None]
    costUSD: NotRequired[Annotated[float, Field(ge=0)] | None]
    contextWindow: NotRequired[Int | None]


@with_config(_VIEW)
class Denial(TypedDict):
    tool_name: NotRequired[str | None]
    tool_use_id: NotRequired[str | None]


@with_config(_VIEW)
class ResultEvent(TypedDict):
    type: Literal["result"]
    subtype: NotRequired[str | None]
    result: NotRequired[str | None]
    session_id: NotRequired[str | None]
    stop_reason: NotRequired[str | None]
    terminal_reason: NotRequired[str | None]
    api_error_status: NotRequired[Int | None]
    errors: NotRequired[list[str] | None]
    total_cost_usd: NotRequired[float | None]
    usage: NotRequired[CallUsage | None]
    modelUsage: NotRequired[dict[str, ModelUsage] | None]
    model_usage_since_last_result: NotRequired[dict[str, ModelUsage] | None]
    permission_denials: NotRequired[list[Denial] | None]


Event = Annotated[
    StreamEvent | AssistantEvent | UserEvent | SystemEvent | ResultEvent,
    Field(discriminator="type"),
]


@cache
def wire_schema() -> TypeAdapter[Any]:
    """The compiled schema (built on the first line of the first Claude session)."""
    return TypeAdapter(Event)
