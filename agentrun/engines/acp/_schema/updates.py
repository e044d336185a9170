"""``session/update``: the notifications an agent streams during a session, and their parser
(which never fails on an unknown or invalid kind)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, Tag, TypeAdapter, ValidationError

from ._base import AcpModel, CatchAll, as_dict, short_error, tagged_union
from .config import SessionConfigOption
from .content import ContentBlock
from .tool_calls import ToolCallUpdateFields


class _Chunk(AcpModel):
    content: ContentBlock
    message_id: str | None = None


class UserMessageChunk(_Chunk):
    session_update: Literal["user_message_chunk"] = "user_message_chunk"


class AgentMessageChunk(_Chunk):
    session_update: Literal["agent_message_chunk"] = "agent_message_chunk"


class AgentThoughtChunk(_Chunk):
    session_update: Literal["agent_thought_chunk"] = "agent_thought_chunk"


class ToolCallStart(ToolCallUpdateFields):
    """``tool_call``: a new tool call (the schema requires ``title``; we do not)."""

    session_update: Literal["tool_call"] = "tool_call"


class ToolCallProgress(ToolCallUpdateFields):
    """``tool_call_update``: new values for some fields of a known tool call."""

    session_update: Literal["tool_call_update"] = "tool_call_update"


class PlanEntry(AcpModel):
    content: str
    priority: Literal["high", "medium", "low"] | str | None = None
    status: Literal["pending", "in_progress", "completed"] | str | None = None


class AgentPlanUpdate(AcpModel):
    """``plan``: the agent's complete current plan (replaces the previous one)."""

    session_update: Literal["plan"] = "plan"
    entries: list[PlanEntry] = Field(default_factory=list[PlanEntry])


class PlanUpdate(AcpModel):
    """``plan_update`` (unstable): one plan by id; ``plan["type"]`` is items, file or markdown."""

    session_update: Literal["plan_update"] = "plan_update"
    plan: dict[str, Any]


class PlanRemovedUpdate(AcpModel):
    """``plan_removed`` (unstable)."""

    session_update: Literal["plan_removed"] = "plan_removed"
    plan_id: str


class AvailableCommand(AcpModel):
    name: str
    description: str = ""
    #: ``{"hint": ...}`` for commands that take free text, else ``None``.
    input: dict[str, Any] | None = None


class AvailableCommandsUpdate(AcpModel):
    session_update: Literal["available_commands_update"] = "available_commands_update"
    available_commands: list[AvailableCommand] = Field(default_factory=list[AvailableCommand])


class CurrentModeUpdate(AcpModel):
    session_update: Literal["current_mode_update"] = "current_mode_update"
    current_mode_id: str


class ConfigOptionUpdate(AcpModel):
    session_update: Literal["config_option_update"] = "config_option_update"
    config_options: list[SessionConfigOption] = Field(default_factory=list[SessionConfigOption])


class SessionInfoUpdate(AcpModel):
    session_update: Literal["session_info_update"] = "session_info_update"
    title: str | None = None
    updated_at: str | None = None


class Cost(AcpModel):
    amount: float
    currency: str


class UsageUpdate(AcpModel):
    """``usage_update``: context-window fill (``used`` of ``size`` tokens) and session cost.

    ``cost`` is **cumulative for the session** when present.
    """

    session_update: Literal["usage_update"] = "usage_update"
    used: int
    size: int
    cost: Cost | None = None


class NoticeUpdate(AcpModel):
    """``notice`` (unstable): a message for the user (``severity`` info/warning/error)."""

    session_update: Literal["notice"] = "notice"
    severity: Literal["info", "warning", "error"] | str
    title: str
    description: str | None = None


class CompactionUpdate(AcpModel):
    """``compaction_update`` (unstable): progress of a context compaction."""

    session_update: Literal["compaction_update"] = "compaction_update"
    compaction_id: str
    status: Literal["in_progress", "completed", "failed", "cancelled"] | str
    summary: list[ContentBlock] | None = None
    error: str | None = None


class CompactionSummaryChunk(AcpModel):
    """``compaction_summary_chunk`` (unstable)."""

    session_update: Literal["compaction_summary_chunk"] = "compaction_summary_chunk"
    compaction_id: str
    content: ContentBlock


class UnknownUpdate(CatchAll):
    """A ``session/update`` this version cannot use; ``raw`` holds the update object.

    ``error`` is set when the kind is known but the object did not validate.
    """

    error: str | None = None

    @property
    def session_update(self) -> str | None:
        tag = self.raw.get("sessionUpdate")
        return tag if isinstance(tag, str) else None


UPDATE_TAGS = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "plan_update",
        "plan_removed",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
        "notice",
        "compaction_update",
        "compaction_summary_chunk",
    }
)

SessionUpdate: TypeAlias = Annotated[
    Annotated[UserMessageChunk, Tag("user_message_chunk")]
    | Annotated[AgentMessageChunk, Tag("agent_message_chunk")]
    | Annotated[AgentThoughtChunk, Tag("agent_thought_chunk")]
    | Annotated[ToolCallStart, Tag("tool_call")]
    | Annotated[ToolCallProgress, Tag("tool_call_update")]
    | Annotated[AgentPlanUpdate, Tag("plan")]
    | Annotated[PlanUpdate, Tag("plan_update")]
    | Annotated[PlanRemovedUpdate, Tag("plan_removed")]
    | Annotated[AvailableCommandsUpdate, Tag("available_commands_update")]
    | Annotated[CurrentModeUpdate, Tag("current_mode_update")]
    | Annotated[ConfigOptionUpdate, Tag("config_option_update")]
    | Annotated[SessionInfoUpdate, Tag("session_info_update")]
    | Annotated[UsageUpdate, Tag("usage_update")]
    | Annotated[NoticeUpdate, Tag("notice")]
    | Annotated[CompactionUpdate, Tag("compaction_update")]
    | Annotated[CompactionSummaryChunk, Tag("compaction_summary_chunk")]
    | Annotated[UnknownUpdate, Tag("unknown")],
    tagged_union("sessionUpdate", "session_update", UPDATE_TAGS),
]


class SessionNotification(AcpModel):
    """Params of the ``session/update`` notification."""

    session_id: str
    update: SessionUpdate


_UPDATE_ADAPTER: TypeAdapter[SessionUpdate] = TypeAdapter(SessionUpdate)


def parse_session_update(update: Any) -> SessionUpdate:
    """Parse one ``update`` object; never raises (falls back to :class:`UnknownUpdate`)."""
    try:
        return _UPDATE_ADAPTER.validate_python(update)
    except ValidationError as exc:
        fields = as_dict(update)
        raw = fields if fields is not None else {"value": update}
        return UnknownUpdate(raw=raw, error=short_error(exc))


def parse_session_notification(params: Any) -> SessionNotification:
    """Parse ``session/update`` params.

    A bad ``update`` becomes an :class:`UnknownUpdate`; raises :class:`ValidationError` only
    when ``params`` is not an object with a string ``sessionId``.
    """
    try:
        return SessionNotification.model_validate(params)
    except ValidationError:
        given = as_dict(params)
        if given is None or not isinstance(given.get("sessionId"), str):
            raise
        fields = dict(given)
        fields["update"] = parse_session_update(fields.get("update"))
        return SessionNotification.model_validate(fields)
