"""ATIF trajectories back into turns: :func:`from_atif`.

A trajectory the library wrote (:mod:`.trajectory_export`) reads back into the messages it was
made of, from what it kept under ``extra["agentrun"]``; any other ATIF document reads as turns
that begin at its ``user`` steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from .atif import AtifStep, Trajectory
from .messages import ContextWindow, Message, MessageType, ToolCall, Usage
from .summary import TurnSummary
from .trajectory_load import ATIF_SYSTEM, EXTRA_KEY, TrajectorySource, load_trajectory
from .trajectory_turns import ReplayedTurn, TrajectoryTurns

__all__ = ["from_atif"]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = cast("list[Any]", content)
    return "\n".join(p.text for p in parts if getattr(p, "text", None))


def _own(step: AtifStep | Trajectory) -> dict[str, Any]:
    value = (step.extra or {}).get(EXTRA_KEY)
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


def _message(dump: Mapping[str, Any], turn: int, parent: str | None = None) -> Message:
    fields = dict(dump)
    if parent is not None and "parent_tool_use_id" not in fields:
        fields["parent_tool_use_id"] = parent
    return Message.model_validate({**fields, "turn": turn})


def _step_messages(
    step: AtifStep,
    turn: int,
    parent: str | None,
    subagents: Mapping[str, Trajectory],
) -> list[Message]:
    own = _own(step)
    out = [_message(e, turn, parent) for e in own.get("events_before", ())]
    common: dict[str, Any] = {"turn": turn, "parent_tool_use_id": parent}
    message_id = own.get("message_id")
    if step.source == "system":
        context = (step.extra or {}).get("context_management")
        if "compaction" in own:
            out.append(_message(own["compaction"], turn, parent))
        elif isinstance(context, dict):
            out.append(
                Message(
                    type=MessageType.COMPACTION,
                    text=_text(step.message),
                    data={"trigger": cast("dict[str, Any]", context).get("type")},
                    **common,
                )
            )
        elif not own.get("placeholder"):
            out.append(
                Message(
                    type=MessageType.SYSTEM, subtype=ATIF_SYSTEM, text=_text(step.message), **common
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
        if text:
            out.append(Message(type=MessageType.TEXT, text=text, message_id=message_id, **common))
        for call in step.tool_calls or ():
            extra = call.extra or {}
            out.append(
                Message(
                    type=MessageType.TOOL_USE,
                    tool=ToolCall(
                        id=call.tool_call_id,
                        name=call.function_name,
                        input=call.arguments,
                        title=extra.get("title"),
                        kind=extra.get("kind"),
                        status=extra.get("status"),
                    ),
                    message_id=message_id,
                    **common,
                )
            )
    for result in step.observation.results if step.observation else ():
        call_id = result.source_call_id or (result.extra or {}).get("tool_call_id")
        for ref in result.subagent_trajectory_ref or ():
            sub = subagents.get(ref.trajectory_id or "")
            if sub is not None and isinstance(call_id, str):
                for sub_step in sub.steps:
                    out.extend(_step_messages(sub_step, turn, call_id, subagents))
        if result.source_call_id is None and result.content is None:
            continue
        extra = result.extra or {}
        out.append(
            Message(
                type=MessageType.TOOL_RESULT,
                tool=ToolCall(
                    id=call_id if isinstance(call_id, str) else None,
                    output=_text(result.content) if result.content is not None else None,
                    is_error=extra.get("is_error"),
                ),
                **common,
            )
        )
    if step.metrics is not None and step.metrics.prompt_tokens is not None:
        extra = step.metrics.extra or {}
        out.append(
            Message.context_window(
                ContextWindow(
                    used_tokens=step.metrics.prompt_tokens,
                    size_tokens=extra.get("context_size_tokens"),
                    used_source="call_usage",
                    size_source=extra.get("context_size_source"),
                )
            ).model_copy(update=common)
        )
    out.extend(_message(e, turn, parent) for e in own.get("events", ()))
    return out


def _usage_of(steps: Sequence[AtifStep]) -> Usage | None:
    total: Usage | None = None
    for step in steps:
        m = step.metrics
        if m is None:
            continue
        cached = m.cached_tokens
        prompt = m.prompt_tokens
        usage = Usage(
            input_tokens=None if prompt is None else prompt - (cached or 0),
            cache_read_tokens=cached,
            output_tokens=m.completion_tokens,
            cost_usd=m.cost_usd,
        )
        total = usage if total is None else total + usage
    return total


def from_atif(
    source: TrajectorySource,
) -> TrajectoryTurns:
    """Read an ATIF trajectory back into turns of messages with their summaries.

    A trajectory the library wrote reads back into the messages it was made of (less what
    export leaves out: deltas, the agent's housekeeping events, readings not taken from a model
    call). Any other ATIF document reads as: a ``user`` step begins a turn (its text is the
    prompt), agent steps become thinking, text, tool uses and their results, step metrics
    context readings, and each turn ends with a ``result`` whose usage sums the turn's step
    metrics. Raises :class:`ConfigurationError` when ``source`` is not an ATIF document."""
    trajectory = load_trajectory(source)
    subagents = {
        s.trajectory_id: s for s in trajectory.subagent_trajectories or () if s.trajectory_id
    }
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
        prompts = [_text(s.message) for s in steps if s.source == "user"]
        result: Message | None = None
        for step in steps:
            if step.source != "user":
                messages.extend(_step_messages(step, number, None, subagents))
            own = _own(step)
            if "result" in own:
                result = _message({"type": "result", **own["result"]}, number)
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
            )
        )
    return TrajectoryTurns(
        turns=turns,
        agent_name=agent.name,
        agent_version=agent.version,
        model=agent.model_name,
        session_id=trajectory.session_id,
    )
