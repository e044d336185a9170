"""Tool calls and permission requests -> ``tool_use``, ``tool_result`` and ``permission``.

``tool_call`` -> ``tool_use``; ``tool_call_update`` with status ``completed`` / ``failed`` ->
``tool_result`` with the same id (``failed`` -> ``is_error``). Other updates of an announced call
-> ``system`` ``tool_call_update`` with the update in ``data``. A ``tool_call`` whose ``rawInput``
is still a placeholder (empty, or only ``cwd`` as OpenCode sends it) is announced once its input
arrives, its status moves past ``pending``, a permission request names it, or anything else is
said (so ``tool_use`` carries the real input); a repeated ``tool_call`` with the same id
(claude-code-acp) is merged into one call. ``session/request_permission`` and the client's answer
-> ``system`` ``permission`` (outcome in ``data``), with ``denials`` when the answer was not an
allow option.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import BaseModel

from ..._vocabulary.jsonvalues import as_dict as _dict
from ..._vocabulary.messages import (
    Message,
    MessageType,
    PermissionDenial,
    ToolCall,
    assemble,
)
from ._message_blocks import MessageBlocks
from ._meta import terminal_exit_code, terminal_output, tool_name
from ._schema import ToolCallProgress, ToolCallStart, ToolCallUpdateFields, to_wire

__all__ = ["DONE", "ToolCalls", "ToolState", "placeholder_input", "text_of"]

# Message kinds as module constants: an enum's attribute look-up costs more than a global's.
_SYSTEM = MessageType.SYSTEM
_TOOL_RESULT = MessageType.TOOL_RESULT
_TOOL_USE = MessageType.TOOL_USE

#: The statuses that end a tool call.
DONE = frozenset({"completed", "failed"})


@dataclass
class ToolState:
    """What is known about one tool call, merged over its updates."""

    id: str
    name: str | None = None
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    input: Any = None
    raw_output: Any = None
    content: list[Any] | None = None
    locations: list[Any] | None = None
    announced: bool = False
    finished: bool = False
    replayed: bool = False
    #: Output an agent streams in ``_meta.terminal_output_delta`` (codex-acp), and the exit code
    #: from ``_meta.terminal_exit``.
    terminal_output: list[str] = field(default_factory=list[str])
    exit_code: int | None = None


def _reported_exit_code(raw_output: Any) -> int | None:
    """The exit code an agent puts in a shell call's ``rawOutput`` (OpenCode:
    ``{"metadata": {"exit": 3}}``), or ``None``."""
    metadata = _dict((_dict(raw_output) or {}).get("metadata")) or {}
    code = metadata.get("exit")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def placeholder_input(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        keys = set(cast("dict[str, Any]", value))
        return keys <= {"cwd"}
    return False


def text_of(content: list[Any] | None) -> str | None:
    if not content:
        return None
    texts: list[str] = []
    for item in content:
        entry = _dict(item)
        if entry is None or entry.get("type") != "content":
            continue
        inner = _dict(entry.get("content"))
        if inner is not None and inner.get("type") == "text" and isinstance(inner.get("text"), str):
            texts.append(inner["text"])
    return "".join(texts) if texts else None


class ToolCalls(MessageBlocks):
    """The session's tool calls, merged over their updates (on top of :class:`MessageBlocks`)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.tools: dict[str, ToolState] = {}
        self._unannounced: list[str] = []

    def _merge(self, tool: ToolState, fields: ToolCallUpdateFields) -> None:
        self._merge_values(
            tool,
            title=fields.title,
            kind=fields.kind,
            status=fields.status,
            raw_input=fields.raw_input,
            raw_output=fields.raw_output,
            content=fields.content,
            locations=fields.locations,
            name=(fields.model_extra or {}).get("name"),
            meta=fields.meta,
        )

    def _merge_values(
        self,
        tool: ToolState,
        *,
        title: str | None,
        kind: str | None,
        status: str | None,
        raw_input: Any,
        raw_output: Any,
        content: Sequence[BaseModel] | None,
        locations: Sequence[BaseModel] | None,
        name: Any,
        meta: dict[str, Any] | None,
    ) -> None:
        """Merge one update's fields (validated: a model's, or the wire schema's) into
        ``tool``."""
        if title is not None:
            tool.title = title
            if tool.name is None:
                tool.name = title
        if kind is not None:
            tool.kind = kind
        if status is not None:
            tool.status = status
        if raw_input is not None and not (
            placeholder_input(raw_input) and not placeholder_input(tool.input)
        ):
            tool.input = raw_input
        if raw_output is not None:
            tool.raw_output = raw_output
        if content is not None:
            tool.content = [to_wire(c) for c in content]
        if locations is not None:
            tool.locations = [to_wire(loc) for loc in locations]
        if isinstance(name, str) and name:
            tool.name = name  # the tool's own name beats its human title
        meta = meta or {}
        name = tool_name(meta)
        if name is not None:
            tool.name = name
        output = terminal_output(meta)
        if output is not None:
            tool.terminal_output.append(output)
        code = terminal_exit_code(meta)
        if code is None:
            code = _reported_exit_code(raw_output)
        if code is not None:
            tool.exit_code = code

    def _ready(self, tool: ToolState) -> bool:
        return tool.status not in (None, "pending") or not placeholder_input(tool.input)

    def _tool_call(self, update: ToolCallStart, raw: Any) -> list[Message]:
        out, tool = self._tool_started(update.tool_call_id)
        self._merge(tool, update)
        out.extend(self._progress(tool, raw))
        return out

    def _tool_update(self, update: ToolCallProgress, raw: Any) -> list[Message]:
        out, tool = self._tool_updated(update.tool_call_id)
        self._merge(tool, update)
        out.extend(self._progress(tool, raw))
        return out

    def _tool_started(self, tool_id: str) -> tuple[list[Message], ToolState]:
        """A ``tool_call`` of ``tool_id``: what comes before its fields are merged."""
        out = self._flush_block()
        tool = self.tools.get(tool_id)
        if tool is None:
            tool = self.tools[tool_id] = ToolState(tool_id, replayed=self.replaying)
        # Calls announced earlier come first, in the order the agent started them.
        out.extend(self._announce_pending(but=tool.id))
        return out, tool

    def _tool_updated(self, tool_id: str) -> tuple[list[Message], ToolState]:
        """A ``tool_call_update`` of ``tool_id``: what comes before its fields are merged."""
        tool = self.tools.get(tool_id)
        out: list[Message] = []
        if tool is None:
            tool = self.tools[tool_id] = ToolState(tool_id, replayed=self.replaying)
            out.extend(self._flush_block())
        return out, tool

    def _progress(self, tool: ToolState, raw: Any) -> list[Message]:
        out: list[Message] = []
        if not tool.announced:
            if self._ready(tool) or tool.status in DONE:
                out.extend(self._announce(tool, raw))
            elif tool.id not in self._unannounced:
                self._unannounced.append(tool.id)
        elif not (tool.status in DONE and not tool.finished):
            data = dict(_dict(raw) or {})
            data.pop("sessionUpdate", None)
            out.append(
                self._msg(
                    type=_SYSTEM,
                    subtype="tool_call_update",
                    tool=self._tool_model(tool),
                    data=data,
                    raw=raw,
                )
            )
        if tool.status in DONE and not tool.finished:
            tool.finished = True
            out.append(self._result_of(tool, raw))
        return out

    def _tool_model(
        self, tool: ToolState, *, output: Any = None, error: bool | None = None
    ) -> ToolCall:
        # Every value is one of a validated update's (or a bool made of them).
        return assemble(
            ToolCall,
            {
                "id": tool.id,
                "name": tool.name,
                "input": tool.input,
                "output": output,
                "is_error": error,
                "title": tool.title,
                "kind": tool.kind,
                "status": tool.status,
            },
        )

    def _announce(self, tool: ToolState, raw: Any = None) -> list[Message]:
        tool.announced = True
        if tool.id in self._unannounced:
            self._unannounced.remove(tool.id)
        data: dict[str, Any] = {}
        if tool.locations:
            data["locations"] = tool.locations
        if tool.content:
            data["content"] = tool.content
        return [
            self._msg(
                tool.replayed,
                type=_TOOL_USE,
                tool=self._tool_model(tool),
                data=data or None,
                raw=raw,
            )
        ]

    def _announce_pending(self, but: str | None = None) -> list[Message]:
        out: list[Message] = []
        for tool_id in [t for t in self._unannounced if t != but]:
            out.extend(self._announce(self.tools[tool_id]))
        return out

    def _result_of(self, tool: ToolState, raw: Any) -> Message:
        text = text_of(tool.content)
        if text is not None:
            output: Any = text
        elif tool.raw_output is not None:
            output = tool.raw_output
        elif tool.terminal_output or tool.exit_code is not None:
            # The content only points at a terminal; the agent streamed its output in _meta.
            output = "".join(tool.terminal_output)
        else:
            output = tool.content
        data: dict[str, Any] = {}
        if tool.exit_code is not None:
            data["exit_code"] = tool.exit_code
        if tool.raw_output is not None:
            data["raw_output"] = tool.raw_output
        if tool.content:
            data["content"] = tool.content
        return self._msg(
            tool.replayed,
            type=_TOOL_RESULT,
            tool=self._tool_model(
                tool, output=output, error=tool.status == "failed" or bool(tool.exit_code)
            ),
            data=data or None,
            raw=raw,
        )

    def _flush_all(self) -> list[Message]:
        return [*self._flush_block(), *self._announce_pending()]

    # -- permissions ---------------------------------------------------------------------

    def permission_requested(self, params: Any) -> list[Message]:
        """The agent asks; the call it names is announced first (with its best input)."""
        fields = _dict(params) or {}
        call = _dict(fields.get("toolCall")) or {}
        tool_id = call.get("toolCallId")
        out = self._flush_block()
        if isinstance(tool_id, str) and tool_id in self.tools:
            tool = self.tools[tool_id]
            if not tool.announced:
                if placeholder_input(tool.input) and not placeholder_input(call.get("rawInput")):
                    tool.input = call.get("rawInput")
                out.extend(self._announce_pending(but=tool_id))
                out.extend(self._announce(tool))
        return out

    def permission_answered(self, params: Any, result: Any) -> list[Message]:
        fields = _dict(params) or {}
        call = _dict(fields.get("toolCall")) or {}
        options = [_dict(o) for o in cast("list[Any]", fields.get("options") or [])]
        outcome = _dict((_dict(result) or {}).get("outcome")) or {}
        option_id = outcome.get("optionId")
        chosen = next(
            (o for o in options if o is not None and o.get("optionId") == option_id), None
        )
        kind = chosen.get("kind") if chosen is not None else None
        allowed = (
            outcome.get("outcome") == "selected"
            and isinstance(kind, str)
            and (kind.startswith("allow"))
        )
        tool_id = call.get("toolCallId") if isinstance(call.get("toolCallId"), str) else None
        tool = self.tools.get(tool_id) if tool_id is not None else None
        name = tool.name if tool is not None else None
        if name is None and isinstance(call.get("title"), str):
            name = call["title"]
        data: dict[str, Any] = {
            "tool_call_id": tool_id,
            "title": call.get("title"),
            "kind": call.get("kind"),
            "outcome": outcome.get("outcome") or "invalid",
            "option_id": option_id,
            "option_kind": kind,
            "allowed": allowed,
        }
        denials = None
        if not allowed:
            if outcome.get("outcome") == "selected" and chosen is not None:
                reason = f"rejected: {chosen.get('name') or option_id} ({kind})"
            else:
                reason = "the permission request was cancelled"
            tool_input = call.get("rawInput")
            if tool is not None and not placeholder_input(tool.input):
                tool_input = tool.input
            denials = (
                PermissionDenial(
                    tool_name=name, tool_use_id=tool_id, input=tool_input, reason=reason
                ),
            )
        return [self._msg(type=_SYSTEM, subtype="permission", data=data, denials=denials)]
