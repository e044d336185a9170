"""ATIF trajectories back into turns: :func:`from_atif`.

A trajectory the library wrote (:mod:`.export`) reads back into the messages it was
made of, from what it kept under ``extra["agentrun"]``; any other ATIF document reads as turns
that begin at its ``user`` steps.

A document is read as untrusted: a piece of ``extra`` of the wrong shape (the library's own
``extra["agentrun"]`` included, which another tool may have rewritten) is left out and the rest
of the trajectory is read; a token count below zero is not reported, and so is a cost that is
negative, NaN or infinite; an embedded subagent trajectory is read once, at its first reference
(a reference back to one being read, a cycle, or a second reference adds nothing); references
nested deeper than :data:`MAX_SUBAGENT_DEPTH` are a :class:`ConfigurationError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast, get_args

from pydantic import ValidationError

from ..._vocabulary.errors import ConfigurationError
from ..._vocabulary.messages import (
    ContextSource,
    ContextWindow,
    Message,
    MessageType,
    ToolCall,
    Usage,
)
from ..._vocabulary.summary import TurnSummary
from .atif import AtifContentPart, AtifMetrics, AtifStep, Trajectory
from .load import (
    ATIF_SYSTEM,
    CONTENT_KEY,
    EXTRA_KEY,
    TrajectorySource,
    load_trajectory,
    parts_text,
)
from .turns import ReplayedTurn, TrajectoryTurns

__all__ = ["MAX_SUBAGENT_DEPTH", "from_atif"]

#: How deep subagent references are followed: a subagent's subagent is depth 2. Deeper is a
#: :class:`ConfigurationError` (agents delegate one or two levels deep; a chain this long is a
#: broken or hostile document).
MAX_SUBAGENT_DEPTH = 16

_CONTEXT_SOURCES: frozenset[str] = frozenset(get_args(ContextSource))


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = cast("list[Any]", content)
    return "\n".join(p.text for p in parts if getattr(p, "text", None))


def _parts(content: Any) -> list[dict[str, Any]] | None:
    """``content`` given as content parts (text, images, audio): the parts in their JSON form,
    kept as :data:`CONTENT_KEY` of the message read from it so that nothing of it is lost and
    export writes it back as it was; ``None`` for a string or no parts."""
    if not isinstance(content, list) or not content:
        return None
    parts = cast("list[AtifContentPart]", content)
    return [p.model_dump(mode="json", exclude_none=True) for p in parts]


def _has_media(content: Any) -> bool:
    return isinstance(content, list) and any(
        p.type != "text" for p in cast("list[AtifContentPart]", content)
    )


def _with_parts(data: dict[str, Any] | None, content: Any) -> dict[str, Any] | None:
    parts = _parts(content)
    return data if parts is None else {**(data or {}), CONTENT_KEY: parts}


def _own(step: AtifStep | Trajectory) -> dict[str, Any]:
    value = (step.extra or {}).get(EXTRA_KEY)
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


def _string(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int | None:
    """A token count: a non-negative integer, else not reported."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _message(dump: object, turn: int, parent: str | None = None) -> Message | None:
    """The message kept in ``dump``; ``None`` when it is not one (left out, not raised)."""
    if not isinstance(dump, dict):
        return None
    fields = dict(cast("dict[str, Any]", dump))
    if parent is not None and "parent_tool_use_id" not in fields:
        fields["parent_tool_use_id"] = parent
    try:
        message = Message.model_validate({**fields, "turn": turn})
    except ValidationError:
        return None
    reading = message.context
    if reading is not None and any(
        n is not None and n < 0 for n in (reading.used_tokens, reading.size_tokens)
    ):
        return None
    return message


def _events(own: Mapping[str, Any], key: str, turn: int, parent: str | None) -> list[Message]:
    listed = own.get(key)
    if not isinstance(listed, list):
        return []
    found = (_message(e, turn, parent) for e in cast("list[Any]", listed))
    return [m for m in found if m is not None]


def _reading(metrics: AtifMetrics) -> ContextWindow | None:
    used = _count(metrics.prompt_tokens)
    if used is None:
        return None
    extra = metrics.extra or {}
    source = extra.get("context_size_source")
    return ContextWindow(
        used_tokens=used,
        size_tokens=_count(extra.get("context_size_tokens")),
        used_source="call_usage",
        size_source=cast("ContextSource", source)
        if isinstance(source, str) and source in _CONTEXT_SOURCES
        else None,
    )


def _embedded(trajectory: Trajectory, outer: Mapping[str, Trajectory]) -> dict[str, Trajectory]:
    """The subagent trajectories a step of ``trajectory`` can name: its own embedded ones, then
    those of the trajectories it is embedded in (``outer``)."""
    names = dict(outer)
    for sub in trajectory.subagent_trajectories or ():
        if sub.trajectory_id:
            names[sub.trajectory_id] = sub
    return names


def _step_messages(
    step: AtifStep,
    turn: int,
    parent: str | None,
    subagents: Mapping[str, Trajectory],
    read: set[int],
    depth: int = 0,
) -> list[Message]:
    """``step``'s messages, ``depth`` subagents deep. ``read``: the subagent trajectories read
    so far (by identity): each is read once, at its first reference, so a reference back to one
    (a cycle) or a second reference to it adds nothing, and the messages never outnumber the
    document's steps."""
    own = _own(step)
    out = _events(own, "events_before", turn, parent)
    common: dict[str, Any] = {"turn": turn, "parent_tool_use_id": parent}
    message_id = _string(own.get("message_id"))
    if step.source == "system":
        context = (step.extra or {}).get("context_management")
        compaction = _message(own.get("compaction"), turn, parent)
        if compaction is not None:
            out.append(compaction)
        elif isinstance(context, dict):
            out.append(
                Message(
                    type=MessageType.COMPACTION,
                    text=_text(step.message),
                    data=_with_parts(
                        {"trigger": _string(cast("dict[str, Any]", context).get("type"))},
                        step.message,
                    ),
                    **common,
                )
            )
        elif not own.get("placeholder"):
            out.append(
                Message(
                    type=MessageType.SYSTEM,
                    subtype=ATIF_SYSTEM,
                    text=_text(step.message),
                    data=_with_parts(None, step.message),
                    **common,
                )
            )
    elif step.source == "agent":
        if step.reasoning_content:
            out.append(
                Message(
                    type=MessageType.THINKING,
                    text=step.reasoning_content,
                    message_id=message_id,
                    **common,
                )
            )
        text = _text(step.message)
        if text or _has_media(step.message):
            out.append(
                Message(
                    type=MessageType.TEXT,
                    text=text,
                    message_id=message_id,
                    data=_with_parts(None, step.message),
                    **common,
                )
            )
        for call in step.tool_calls or ():
            extra = call.extra or {}
            out.append(
                Message(
                    type=MessageType.TOOL_USE,
                    tool=ToolCall(
                        id=call.tool_call_id,
                        name=call.function_name,
                        input=call.arguments,
                        title=_string(extra.get("title")),
                        kind=_string(extra.get("kind")),
                        status=_string(extra.get("status")),
                    ),
                    message_id=message_id,
                    **common,
                )
            )
    for result in step.observation.results if step.observation else ():
        extra = result.extra or {}
        call_id = result.source_call_id or _string(extra.get("tool_call_id"))
        for ref in result.subagent_trajectory_ref or ():
            name = ref.trajectory_id or ""
            sub = subagents.get(name)
            if sub is None or call_id is None or id(sub) in read:
                continue
            if depth >= MAX_SUBAGENT_DEPTH:
                raise ConfigurationError(
                    f"subagent trajectories nested deeper than {MAX_SUBAGENT_DEPTH} levels "
                    f"(at {_shown(name)})",
                    option="trajectory",
                )
            read.add(id(sub))
            names = _embedded(sub, subagents)
            for sub_step in sub.steps:
                out.extend(_step_messages(sub_step, turn, call_id, names, read, depth + 1))
        if result.source_call_id is None and result.content is None:
            continue
        is_error = extra.get("is_error")
        out.append(
            Message(
                type=MessageType.TOOL_RESULT,
                tool=ToolCall(
                    id=call_id,
                    output=_text(result.content) if result.content is not None else None,
                    is_error=is_error if isinstance(is_error, bool) else None,
                ),
                data=_with_parts(None, result.content),
                **common,
            )
        )
    reading_taken = _reading(step.metrics) if step.metrics is not None else None
    if reading_taken is not None:
        out.append(Message.context_window(reading_taken).model_copy(update=common))
    out.extend(_events(own, "events", turn, parent))
    return out


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:79] + "…")


def _usage_of(steps: Sequence[AtifStep]) -> Usage | None:
    total: Usage | None = None
    for step in steps:
        m = step.metrics
        if m is None:
            continue
        cached = _count(m.cached_tokens)
        prompt = _count(m.prompt_tokens)
        usage = Usage(
            input_tokens=None if prompt is None else max(prompt - (cached or 0), 0),
            cache_read_tokens=cached,
            output_tokens=_count(m.completion_tokens),
            cost_usd=m.cost_usd,  # Usage drops a negative, NaN or infinite cost
        )
        total = usage if total is None else total + usage
    return total


def from_atif(
    source: TrajectorySource,
) -> TrajectoryTurns:
    """Read an ATIF trajectory back into turns of messages with their summaries.

    A trajectory the library wrote reads back into the messages it was made of (less what
    export leaves out: deltas, the agent's housekeeping events, readings not taken from a model
    call), the events kept on a ``user`` step included (a turn the API refused has no agent
    step; its errors are kept on the prompt's step). Any other ATIF document reads as: a
    ``user`` step begins a turn (its text is the prompt), agent steps become thinking, text,
    tool uses and their results, step metrics context readings, and each turn ends with a
    ``result`` whose usage sums the turn's step metrics. Content given as parts (text, images,
    audio) reads as its text, and is kept whole under ``data["atif_content"]`` of the message
    (``ReplayedTurn.prompt_content`` for a prompt). Raises :class:`ConfigurationError` when
    ``source`` is not an ATIF document of a version from ATIF-v1.0 to ATIF-v1.8, or its subagent
    references nest deeper than :data:`MAX_SUBAGENT_DEPTH`."""
    trajectory = load_trajectory(source)
    subagents = _embedded(trajectory, {})
    read: set[int] = set()
    groups: list[tuple[int, list[AtifStep]]] = []
    numbered = any("turn" in _own(s) for s in trajectory.steps)
    for step in trajectory.steps:
        own_turn = _own(step).get("turn")
        if numbered and isinstance(own_turn, int):
            if not groups or groups[-1][0] != own_turn:
                groups.append((own_turn, []))
        elif not numbered and step.source == "user":
            if not groups or any(s.source == "agent" for s in groups[-1][1]):
                groups.append((len(groups) + 1, []))
        elif not groups:
            groups.append((1, []))
        groups[-1][1].append(step)
    agent = trajectory.agent
    turns: list[ReplayedTurn] = []
    for index, (_, steps) in enumerate(groups):
        number = index + 1
        messages: list[Message] = []
        if index == 0:
            messages.append(
                Message.init_message(
                    agent.name,
                    model=agent.model_name,
                    version=agent.version,
                    session_id=trajectory.session_id,
                ).in_turn(number)
            )
        asked = [s.message for s in steps if s.source == "user"]
        prompts = [_text(m) for m in asked]
        prompt_content: tuple[dict[str, Any], ...] | None = None
        if any(isinstance(m, list) for m in asked):
            # Parts of one or more user steps: kept whole; the prompt is their text.
            prompt_content = tuple(
                part for m in asked for part in (_parts(m) or [{"type": "text", "text": _text(m)}])
            )
            prompts = [parts_text(prompt_content)]
        result: Message | None = None
        for step in steps:
            # A user step holds no message of its own, but what happened before the agent's
            # first step can be kept on it (an API error that ended the turn).
            messages.extend(_step_messages(step, number, None, subagents, read))
            kept = _own(step).get("result")
            if isinstance(kept, dict):
                result = _message({**cast("dict[str, Any]", kept), "type": "result"}, number)
        if result is None and not numbered:
            # A foreign trajectory: each turn ends, with what its steps' metrics add up to.
            result = Message(type=MessageType.RESULT, turn=number, usage=_usage_of(steps))
        if result is not None:
            messages.append(result)
        turns.append(
            ReplayedTurn(
                number=number,
                messages=tuple(messages),
                summary=TurnSummary.from_messages(messages),
                prompt="\n\n".join(prompts) if prompts else None,
                prompt_content=prompt_content,
            )
        )
    return TrajectoryTurns(
        turns=turns,
        agent_name=agent.name,
        agent_version=agent.version,
        model=agent.model_name,
        session_id=trajectory.session_id,
    )
