"""Tool calls: their kinds, statuses, content and locations (the fields a ``tool_call`` update,
a ``tool_call_update`` and a permission request share)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Tag

from ._base import AcpModel, CatchAll, tagged_union
from .content import ContentBlock

ToolKind: TypeAlias = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
ToolCallStatus: TypeAlias = Literal["pending", "in_progress", "completed", "failed"]


class ContentToolCallContent(AcpModel):
    type: Literal["content"] = "content"
    content: ContentBlock


class DiffContent(AcpModel):
    type: Literal["diff"] = "diff"
    path: str
    new_text: str
    old_text: str | None = None


class TerminalToolCallContent(AcpModel):
    type: Literal["terminal"] = "terminal"
    terminal_id: str


class UnknownToolCallContent(CatchAll):
    """Tool-call content of a ``type`` this version does not know; ``raw`` holds it."""

    @property
    def type(self) -> str | None:
        tag = self.raw.get("type")
        return tag if isinstance(tag, str) else None


ToolCallContent: TypeAlias = Annotated[
    Annotated[ContentToolCallContent, Tag("content")]
    | Annotated[DiffContent, Tag("diff")]
    | Annotated[TerminalToolCallContent, Tag("terminal")]
    | Annotated[UnknownToolCallContent, Tag("unknown")],
    tagged_union("type", "type", frozenset({"content", "diff", "terminal"})),
]


class ToolCallLocation(AcpModel):
    path: str
    line: int | None = None


class ToolCallUpdateFields(AcpModel):
    """The fields of a tool call, all optional but the id (``ToolCallUpdate`` in the schema).

    Also the ``toolCall`` of :class:`RequestPermissionRequest`.
    """

    tool_call_id: str
    title: str | None = None
    kind: ToolKind | str | None = None
    status: ToolCallStatus | str | None = None
    content: list[ToolCallContent] | None = None
    locations: list[ToolCallLocation] | None = None
    raw_input: Any = None
    raw_output: Any = None
