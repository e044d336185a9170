"""Messages of Claude Code's events made of values already read and checked, shared by the
translator's readers (the common ones assembled, not validated again; rare ones validated)."""

from __future__ import annotations

from typing import Any, cast

from ..._vocabulary.jsonvalues import as_dict as _obj
from ..._vocabulary.jsonvalues import as_float as _float
from ..._vocabulary.jsonvalues import as_int as _int
from ..._vocabulary.jsonvalues import as_list as _list
from ..._vocabulary.jsonvalues import as_str as _str
from ..._vocabulary.messages import (
    BackgroundTask,
    Message,
    MessageType,
    PermissionDenial,
    ToolCall,
    Usage,
    assemble,
)
from ._usage import token_count

__all__ = [
    "Json",
    "background_tasks",
    "message_delta",
    "permission_denied",
    "protocol_error",
    "result_denials",
    "retry_notice",
    "stream_note",
    "strings",
    "text_message",
    "text_of",
    "tool_delta",
    "user_message",
    "without",
]

Json = dict[str, Any]


def without(event: Json, *keys: str) -> Json:
    """A copy of ``event`` without ``keys`` (in the event's order)."""
    copy = dict(event)
    for key in keys:
        copy.pop(key, None)
    return copy


def strings(value: object) -> tuple[str, ...]:
    """The strings of a list (anything else has none)."""
    if not isinstance(value, list):
        return ()
    items = cast("list[Any]", value)
    if set(map(type, items)) <= _STR_ONLY:  # the common case, checked without a Python loop
        return tuple(items)
    return tuple(t for t in items if isinstance(t, str))


_STR_ONLY = frozenset({str})


def text_of(value: object) -> str:
    """A block's or a delta's text: a string, else empty."""
    return value if isinstance(value, str) else ""


def text_message(
    kind: MessageType, text: str, message_id: str | None, parent: str | None, raw: Json
) -> Message:
    """A text or thinking message (a block or a delta) of checked values."""
    return assemble(
        Message,
        {
            "type": kind,
            "text": text,
            "message_id": message_id,
            "parent_tool_use_id": parent,
            "raw": raw,
        },
    )


def tool_delta(
    text: str,
    tool: tuple[str | None, str | None],
    message_id: str | None,
    parent: str | None,
    raw: Json,
) -> Message:
    """A ``tool_use_delta`` of checked values: a tool block's start (no text) or its input."""
    tool_id, name = tool
    return assemble(
        Message,
        {
            "type": MessageType.TOOL_USE_DELTA,
            "text": text,
            "tool": assemble(ToolCall, {"id": tool_id, "name": name}),
            "message_id": message_id,
            "parent_tool_use_id": parent,
            "raw": raw,
        },
    )


def stream_note(
    subtype: str, message_id: str | None, parent: str | None, data: Json, raw: Json
) -> Message:
    """A ``system`` message of a stream event the translator passes on (rare: validated)."""
    return Message(
        type=MessageType.SYSTEM,
        subtype=subtype,
        message_id=message_id,
        parent_tool_use_id=parent,
        data=data,
        raw=raw,
    )


def protocol_error(text: str, data: Json, raw: Any) -> list[Message]:
    return [Message.error_message(f"claude: {text}", code="protocol", data=data, raw=raw)]


def retry_notice(ev: Json) -> Message:
    """An ``api_retry`` event: the model call failed and the CLI tries again."""
    status = _int(ev.get("error_status"))
    reason = _str(ev.get("error")) or "api_error"
    delay_ms = _float(ev.get("retry_delay_ms"))
    attempt, most = _int(ev.get("attempt")), _int(ev.get("max_retries"))
    progress = f" {attempt}/{most}" if attempt is not None and most is not None else ""
    return Message.retry_notice(
        f"claude: model call failed ({reason}{f', HTTP {status}' if status else ''}); "
        f"retry{progress}",
        attempt=attempt,
        max_attempts=most,
        delay_s=None if delay_ms is None else round(delay_ms / 1000, 3),
        code=reason,
        status=status,
        raw=ev,
    )


def background_tasks(tasks: dict[str, Json], task_tools: dict[str, str], ev: Json) -> Message:
    """The set of background tasks still running (it changes as they start and end): ``tasks``
    by id, and the tool call that started each when its entry does not say (``task_tools``)."""
    listed = [
        BackgroundTask(
            id=task_id,
            description=_str(task.get("description")),
            tool_use_id=_str(task.get("tool_use_id")) or task_tools.get(task_id),
            kind=_str(task.get("task_type")),
        ).model_dump(mode="json")
        for task_id, task in tasks.items()
    ]
    return Message(
        type=MessageType.SYSTEM, subtype="background_tasks", data={"tasks": listed}, raw=ev
    )


def user_message(ev: Json, texts: list[str], parent: str | None, replayed: bool) -> Message:
    """A user message's own text (values already checked by either reader): prompts the CLI
    adds itself (continuation after a mid-stream error, the interrupt marker) and replayed
    user messages, information, not agent output."""
    data: Json = {"text": "\n".join(texts)}
    for key in ("isSynthetic", "isReplay"):
        if key in ev:
            data[key] = ev[key]
    return assemble(
        Message,
        {
            "type": MessageType.SYSTEM,
            "subtype": "user_message",
            "parent_tool_use_id": parent,
            "replayed": replayed,
            "data": data,
            "raw": ev,
        },
    )


def result_denials(denied: object) -> tuple[PermissionDenial, ...]:
    """The permission denials a result lists (an entry that is not an object: none)."""
    return (
        tuple(
            assemble(
                PermissionDenial,
                {
                    "tool_name": _str(d.get("tool_name")),
                    "tool_use_id": _str(d.get("tool_use_id")),
                    "input": d.get("tool_input"),
                },
            )
            for d in (_obj(item) for item in _list(denied))
            if d is not None
        )
        if denied
        else ()
    )


def message_delta(event: Json, message_id: str | None, parent: str | None, ev: Json) -> Message:
    """A ``message_delta`` stream event: the call's stop reason and the output side of its usage
    (none reported: none)."""
    delta = _obj(event.get("delta")) or {}
    stop = _str(delta.get("stop_reason"))
    output = thinking = None
    usage = _obj(event.get("usage"))
    if usage is not None:
        output = token_count(usage.get("output_tokens"))
        details = _obj(usage.get("output_tokens_details"))
        if details is not None:
            thinking = token_count(details.get("thinking_tokens"))
    # The output side of the call's usage (none reported: none).
    call = (
        None
        if output is None and thinking is None
        else assemble(Usage, {"output_tokens": output, "thinking_tokens": thinking})
    )
    return assemble(
        Message,
        {
            "type": MessageType.SYSTEM,
            "subtype": "message_delta",
            "stop_reason": stop,
            "usage": call,
            "message_id": message_id,
            "parent_tool_use_id": parent,
            "raw": ev,
        },
    )


def permission_denied(ev: Json, data: Json) -> Message:
    """A ``permission_denied`` system event: the one tool call the CLI refused."""
    denial = PermissionDenial(
        tool_name=_str(ev.get("tool_name")),
        tool_use_id=_str(ev.get("tool_use_id")),
        input=ev.get("tool_input"),
        reason=_str(ev.get("message")),
    )
    return Message(
        type=MessageType.SYSTEM, subtype="permission_denied", denials=(denial,), data=data, raw=ev
    )
