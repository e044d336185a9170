"""The wire schema of a recorded or live ``session/update`` line, validated from its bytes in one
pass (pydantic-core parses and checks it at once; no Python runs per value but the tool-call
content's own models).

It takes a transcript line ``{"dir": "recv", "msg": {"jsonrpc": ..., "method":
"session/update", "params": {"sessionId": ..., "update": {...}}}}`` (:class:`WireLine`), or the
message alone as received live (:class:`WireNotification`), whose update is of a kind the
translator reads
from plain values -- text chunks, ``usage_update``, ``tool_call`` / ``tool_call_update``,
``available_commands_update`` -- and nothing else. It is stricter than the models of
:mod:`.updates` and never looser: every object is closed (a key it does not name, a snake_case
spelling the models would also accept, an annotation, a non-text chunk refuse the line), the tag
is read only from ``sessionUpdate``, and values are strict (no ``"1"`` for ``1``, no ``1.0`` for
``1``; a JSON integer for a float is the float, as the models make it). A line it refuses is
decoded and read by the models as before, so what a line makes never depends on the path it
took.

``params["raw"]`` is the update object again, as the agent ordered its keys (the ``raw`` of
every message made of it); ``params["update"]`` is the validated view (declared keys first).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import ConfigDict, Discriminator, Field, TypeAdapter, with_config
from typing_extensions import NotRequired, TypedDict

from .tool_calls import ToolCallContent, ToolCallLocation

__all__ = [
    "TEXT_CHUNK_TAGS",
    "TOOL_CALL_TAGS",
    "WireCommand",
    "WireCommandsUpdate",
    "WireLine",
    "WireNotification",
    "WireParams",
    "WireTextChunk",
    "WireToolCall",
    "WireUpdate",
    "WireUsageUpdate",
    "wire_line_schema",
    "wire_notification_schema",
]

_CLOSED = ConfigDict(strict=True, extra="forbid")

#: The chunk kinds whose text the fast path reads, and the tool-call kinds.
TEXT_CHUNK_TAGS = frozenset({"agent_message_chunk", "agent_thought_chunk", "user_message_chunk"})
TOOL_CALL_TAGS = frozenset({"tool_call", "tool_call_update"})

_Meta: TypeAlias = dict[str, Any] | None


@with_config(_CLOSED)
class _WireText(TypedDict):
    _meta: NotRequired[_Meta]
    type: Literal["text"]
    text: str


@with_config(_CLOSED)
class WireTextChunk(TypedDict):
    """``agent_message_chunk`` / ``agent_thought_chunk`` / ``user_message_chunk`` of text."""

    _meta: NotRequired[_Meta]
    session_update: Annotated[
        Literal["agent_message_chunk", "agent_thought_chunk", "user_message_chunk"],
        Field(alias="sessionUpdate"),
    ]
    content: _WireText
    messageId: NotRequired[str | None]


@with_config(_CLOSED)
class _WireCost(TypedDict):
    _meta: NotRequired[_Meta]
    amount: float
    currency: str


@with_config(_CLOSED)
class WireUsageUpdate(TypedDict):
    """``usage_update``."""

    _meta: NotRequired[_Meta]
    session_update: Annotated[Literal["usage_update"], Field(alias="sessionUpdate")]
    used: int
    size: int
    cost: NotRequired[_WireCost | None]


@with_config(_CLOSED)
class WireToolCall(TypedDict):
    """``tool_call`` / ``tool_call_update`` (its content and locations are the models')."""

    _meta: NotRequired[_Meta]
    session_update: Annotated[
        Literal["tool_call", "tool_call_update"], Field(alias="sessionUpdate")
    ]
    toolCallId: str
    title: NotRequired[str | None]
    kind: NotRequired[str | None]
    status: NotRequired[str | None]
    content: NotRequired[list[ToolCallContent] | None]
    locations: NotRequired[list[ToolCallLocation] | None]
    rawInput: NotRequired[Any]
    rawOutput: NotRequired[Any]
    #: The tool's own name (an extension some agents send; the models keep it as an extra).
    name: NotRequired[Any]


@with_config(_CLOSED)
class WireCommand(TypedDict):
    """One command of an ``available_commands_update``, exactly as its model
    (:class:`~.updates.AvailableCommand`) dumps it to the wire: its keys in the model's order,
    every one holding a value (the model dumps no ``None`` and a description it defaults). A
    command whose dump would differ (no description, a ``null``, another key) is refused."""

    _meta: NotRequired[dict[str, Any]]
    name: str
    description: str
    input: NotRequired[dict[str, Any]]


@with_config(_CLOSED)
class WireCommandsUpdate(TypedDict):
    """``available_commands_update`` without a ``_meta`` of its own (the update's model dumps
    one along; refused): its commands as :class:`WireCommand` read them."""

    session_update: Annotated[Literal["available_commands_update"], Field(alias="sessionUpdate")]
    availableCommands: NotRequired[list[WireCommand]]


WireUpdate: TypeAlias = Annotated[
    WireTextChunk | WireUsageUpdate | WireToolCall | WireCommandsUpdate,
    Discriminator("session_update"),
]


@with_config(_CLOSED)
class WireParams(TypedDict):
    """The params of a ``session/update`` the wire schema takes."""

    _meta: NotRequired[_Meta]
    sessionId: str
    update: WireUpdate
    #: The same ``update`` object, its keys in the agent's order.
    raw: Annotated[dict[str, Any], Field(validation_alias="update")]


@with_config(_CLOSED)
class WireNotification(TypedDict):
    """A ``session/update`` notification as the agent sends it (``id`` would make it a
    request: refused)."""

    jsonrpc: NotRequired[Any]
    method: Literal["session/update"]
    params: WireParams


@with_config(ConfigDict(strict=True, extra="ignore"))
class WireLine(TypedDict):
    """A transcript line of a received ``session/update`` (other keys of the line, such as a
    recorder's timestamp, are ignored, as the translator ignores them)."""

    dir: Literal["recv"]
    msg: WireNotification


_SCHEMAS: dict[type[Any], TypeAdapter[Any]] = {}


def _compiled(kind: type[Any]) -> TypeAdapter[Any]:
    schema = _SCHEMAS.get(kind)
    if schema is None:
        schema = _SCHEMAS[kind] = TypeAdapter(kind)
    return schema


def wire_line_schema() -> TypeAdapter[WireLine]:
    """The compiled schema of :class:`WireLine` (built on first use)."""
    return _compiled(WireLine)


def wire_notification_schema() -> TypeAdapter[WireNotification]:
    """The compiled schema of :class:`WireNotification`, a line received live (built on first
    use)."""
    return _compiled(WireNotification)
