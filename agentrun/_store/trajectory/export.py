"""Sessions out as ATIF trajectories: :func:`to_atif` and the step builders behind it.

Export maps the vocabulary onto the RFC:

* a turn's prompt, when known, is a ``user`` step;
* each model call is an ``agent`` step: its text is the step's ``message``, its thinking the
  ``reasoning_content``, its tool uses the ``tool_calls``, and their results the step's
  ``observation`` (paired by id). A new step begins at a new ``message_id``, after the step's
  tool results, or when thinking follows text or tool calls;
* a ``context_window`` reading taken from a model call's usage (``used_source="call_usage"``)
  is that step's ``metrics.prompt_tokens`` (the whole prompt, cached tokens included);
* a ``compaction`` (hand-offs included) is a ``system`` step with the RFC's context-management
  convention (``extra.context_management``: ``compaction``, boundary ``replace``);
* subagent work (messages with a ``parent_tool_use_id``) is an embedded subagent trajectory,
  referenced from the result of the tool call that started it;
* ``final_metrics`` are the sums of the turns' usage (``total_prompt_tokens`` = input + cache
  read + cache write; ``total_cached_tokens`` = cache read; cache writes and thinking tokens in
  ``extra``).

What the RFC has no field for (the turn number, each turn's ``result``, errors, retries,
questions, denials) is kept under ``extra["agentrun"]`` of the step it belongs to, so that an
exported trajectory reads back into the same messages and summaries. Content parts (images,
audio) an imported trajectory had are written back where they were (:data:`CONTENT_KEY`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError

from ..._vocabulary.messages import ContextWindow, Message, MessageType, ToolCall, Usage
from ..._vocabulary.summary import TurnSummary
from .atif import (
    ATIF_VERSION,
    AtifAgent,
    AtifContentPart,
    AtifFinalMetrics,
    AtifMetrics,
    AtifObservation,
    AtifObservationResult,
    AtifStep,
    AtifSubagentRef,
    AtifToolCall,
    Trajectory,
)
from .load import ATIF_SYSTEM, CONTENT_KEY, EXTRA_KEY
from .turns import ReplayedTurn

__all__ = ["to_atif"]

_CONTEXT_MANAGEMENT = {"type": "compaction", "boundary": "replace"}
#: Message kinds export leaves out: fragments (their complete block follows), the library's
#: own notes, and the agent's housekeeping events.
_SKIPPED = {
    MessageType.TEXT_DELTA,
    MessageType.THINKING_DELTA,
    MessageType.TOOL_USE_DELTA,
    MessageType.STALL,
    MessageType.CONTEXT_THRESHOLD,
}


@dataclass
class _Draft:
    """A step being built."""

    source: str
    turn: int
    message: str = ""
    #: ``message`` as content parts, when it was given as parts (a system or user step).
    parts: list[AtifContentPart] | None = None
    texts: list[str] = field(default_factory=list[str])
    #: Each text's content parts, when it was given as parts (``None`` for a plain text).
    text_parts: list[list[AtifContentPart] | None] = field(
        default_factory=list[list[AtifContentPart] | None]
    )
    thinking: list[str] = field(default_factory=list[str])
    calls: list[AtifToolCall] = field(default_factory=list[AtifToolCall])
    results: list[AtifObservationResult] = field(default_factory=list[AtifObservationResult])
    message_id: str | None = None
    metrics: AtifMetrics | None = None
    before: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    after: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    result: dict[str, Any] | None = None
    own: dict[str, Any] = field(default_factory=dict[str, Any])
    extra: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def has_content(self) -> bool:
        return bool(self.texts or self.thinking or self.calls)

    def step(self, step_id: int) -> AtifStep:
        own: dict[str, Any] = {"turn": self.turn, **self.own}
        if self.message_id is not None:
            own["message_id"] = self.message_id
        if self.before:
            own["events_before"] = self.before
        if self.after:
            own["events"] = self.after
        if self.result is not None:
            own["result"] = self.result
        message: str | list[AtifContentPart]
        if self.source != "agent":
            message = self.message if self.parts is None else self.parts
        elif any(self.text_parts):
            message = [
                part
                for text, parts in zip(self.texts, self.text_parts, strict=True)
                for part in (parts or [AtifContentPart(type="text", text=text)])
            ]
        else:
            message = "\n\n".join(self.texts)
        return AtifStep(
            step_id=step_id,
            source=cast(Any, self.source),
            message=message,
            reasoning_content="\n\n".join(self.thinking) if self.thinking else None,
            tool_calls=list(self.calls) or None,
            observation=AtifObservation(results=self.results) if self.results else None,
            metrics=self.metrics,
            extra={**self.extra, EXTRA_KEY: own},
        )


def _dump(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude_none=True, exclude={"turn", "replayed"})


_PARTS = TypeAdapter(list[AtifContentPart])


def _kept_parts(given: object, text: str | None) -> list[AtifContentPart] | None:
    """The content parts kept for a message (``given``: its ``data[CONTENT_KEY]``, or a
    prompt's ``prompt_content``), when they are valid parts whose text is ``text``: a message
    whose text was changed since is written as its text alone."""
    if not isinstance(given, (list, tuple)) or not given:
        return None
    try:
        parts = _PARTS.validate_python(list(cast("Sequence[object]", given)))
    except ValidationError:
        return None
    own_text = "\n".join(p.text for p in parts if p.type == "text" and p.text)
    return parts if own_text == (text or "") else None


def _parts_of(message: Message, text: str | None) -> list[AtifContentPart] | None:
    data = message.data
    return None if data is None else _kept_parts(data.get(CONTENT_KEY), text)


def _content(output: Any) -> str | None:
    if output is None or isinstance(output, str):
        return output
    if output == [] or output == {}:
        return None  # the agent reported the call's end without any output (Gemini CLI)
    return json.dumps(output, ensure_ascii=False, sort_keys=True)


def _system_step(turn: int, message: Message) -> _Draft:
    text = message.text or ""
    return _Draft("system", turn, message=text, parts=_parts_of(message, text))


class _Builder:
    """The steps of one trajectory (the main thread, or one subagent's)."""

    def __init__(self) -> None:
        self.drafts: list[_Draft] = []
        self.current: _Draft | None = None
        self.reading: ContextWindow | None = None
        self.pending: list[dict[str, Any]] = []
        self.calls: dict[str, _Draft] = {}
        self.turn_start = 0
        self._pending_metrics: AtifMetrics | None = None

    def begin_turn(
        self, number: int, prompt: str | None, content: Sequence[object] | None = None
    ) -> None:
        self.current = None
        self.reading = None
        self.turn_start = len(self.drafts)
        if prompt is not None:
            parts = _kept_parts(content, prompt)
            self.drafts.append(_Draft("user", number, message=prompt, parts=parts))

    def _agent_step(self, turn: int, message: Message, *, thinking: bool = False) -> _Draft:
        step = self.current
        new = (
            step is None
            or step.source != "agent"
            or bool(step.results)
            or (
                message.message_id is not None
                and step.message_id is not None
                and message.message_id != step.message_id
            )
            or (thinking and bool(step.texts or step.calls))
        )
        if new or step is None:
            step = _Draft("agent", turn, message_id=message.message_id)
            step.before, self.pending = self.pending, []
            self.drafts.append(step)
            self.current = step
        elif step.message_id is None:
            step.message_id = message.message_id
        return step

    def add(self, turn: int, message: Message) -> None:
        kind = message.type
        if kind is MessageType.TEXT or kind is MessageType.THINKING:
            text = message.text or ""
            is_thinking = kind is MessageType.THINKING
            step = self._agent_step(turn, message, thinking=is_thinking)
            if is_thinking:
                step.thinking.append(text)
            else:
                step.texts.append(text)
                step.text_parts.append(_parts_of(message, text))
        elif kind is MessageType.TOOL_USE and message.tool is not None:
            self._tool_use(turn, message, message.tool)
        elif kind is MessageType.TOOL_RESULT and message.tool is not None:
            self._tool_result(turn, message, message.tool)
        elif kind is MessageType.CONTEXT_WINDOW:
            reading = message.context
            if reading is not None and reading.used_source == "call_usage":
                self._reading(reading)
        elif kind is MessageType.COMPACTION:
            step = _system_step(turn, message)
            step.extra["context_management"] = dict(_CONTEXT_MANAGEMENT)
            step.own["compaction"] = _dump(message)
            step.before, self.pending = self.pending, []
            self.drafts.append(step)
            self.current = step
        elif kind is MessageType.SYSTEM and message.subtype == ATIF_SYSTEM:
            step = _system_step(turn, message)
            self.drafts.append(step)
            self.current = step
        elif kind is MessageType.RESULT:
            self._last_of_turn(turn).result = _dump(message)
        elif kind in _SKIPPED or (
            kind is MessageType.SYSTEM
            and not message.denials
            and message.subtype != "background_tasks"
        ):
            return
        else:
            event = _dump(message)
            if self.current is None:
                self.pending.append(event)
            else:
                self.current.after.append(event)

    def _tool_use(self, turn: int, message: Message, tool: ToolCall) -> None:
        step = self._agent_step(turn, message)
        call_id = tool.id or f"call-{turn}-{len(self.calls) + 1}"
        given: Any = tool.input
        arguments: dict[str, Any] = (
            cast("dict[str, Any]", given)
            if isinstance(given, dict)
            else ({} if given is None else {"input": given})
        )
        named = (("title", tool.title), ("kind", tool.kind), ("status", tool.status))
        extra = {k: v for k, v in named if v is not None}
        step.calls.append(
            AtifToolCall(
                tool_call_id=call_id,
                function_name=tool.name or "unknown",
                arguments=arguments,
                extra=extra or None,
            )
        )
        self.calls[call_id] = step

    def _tool_result(self, turn: int, message: Message, tool: ToolCall) -> None:
        extra: dict[str, Any] = {}
        if tool.is_error is not None:
            extra["is_error"] = tool.is_error
        step = self.calls.get(tool.id) if tool.id is not None else None
        source_call_id = tool.id
        if step is None:
            # A result of a call this trajectory never saw: kept, unpaired.
            step = self._agent_step(turn, message)
            source_call_id = None
            if tool.id is not None:
                extra["tool_call_id"] = tool.id
        output = tool.output
        parts = _parts_of(message, output) if isinstance(output, str) else None
        step.results.append(
            AtifObservationResult(
                source_call_id=source_call_id,
                content=_content(output) if parts is None else parts,
                extra=extra or None,
            )
        )

    def _reading(self, reading: ContextWindow) -> None:
        step = self.current
        extra: dict[str, Any] = {}
        if reading.size_tokens is not None:
            extra["context_size_tokens"] = reading.size_tokens
        if reading.size_source is not None:
            extra["context_size_source"] = reading.size_source
        metrics = AtifMetrics(prompt_tokens=reading.used_tokens, extra=extra or None)
        if (
            step is not None
            and step.source == "agent"
            and step.metrics is None
            and step.has_content
        ):
            step.metrics = metrics
        else:
            self.reading = reading
            self._pending_metrics = metrics

    def take_reading(self, step: _Draft) -> None:
        if self.reading is not None and step.metrics is None:
            step.metrics = self._pending_metrics
            self.reading = self._pending_metrics = None

    def _last_of_turn(self, turn: int) -> _Draft:
        if len(self.drafts) > self.turn_start:
            return self.drafts[-1]
        step = _Draft("system", turn)
        step.own["placeholder"] = True
        self.drafts.append(step)
        self.current = step
        return step

    def end_turn(self, turn: int, *, keep: bool = False) -> None:
        """The turn is over; ``keep``: it has a step even when nothing in it made one."""
        if self.pending or keep:
            step = self._last_of_turn(turn)
            step.after.extend(self.pending)
            self.pending = []
        self.current = None
        self.reading = None


class _ReadingAware(_Builder):
    """A builder whose pending call reading goes to the next agent step it starts."""

    def _agent_step(self, turn: int, message: Message, *, thinking: bool = False) -> _Draft:
        before = self.current
        step = super()._agent_step(turn, message, thinking=thinking)
        if step is not before:
            self.take_reading(step)
        return step


_Group = tuple[list[Message], str | None, Sequence[object] | None]


def _as_turns(turns: Iterable[ReplayedTurn | Sequence[Message] | Message]) -> list[_Group]:
    """The turns' messages, each with its prompt and the prompt's content parts when known."""
    grouped: list[_Group] = []
    loose: list[Message] = []
    for item in turns:
        if isinstance(item, Message):
            loose.append(item)
        elif isinstance(item, ReplayedTurn):
            grouped.append((list(item.messages), item.prompt, item.prompt_content))
        else:
            grouped.append((list(item), None, None))
    if loose:
        # One stream of messages: turns by their number, else split at each result.
        current: list[Message] = []
        number: int | None = None
        for message in loose:
            if (
                current
                and message.turn is not None
                and number is not None
                and message.turn != number
            ):
                grouped.append((current, None, None))
                current = []
            current.append(message)
            number = message.turn if message.turn is not None else number
            if message.type is MessageType.RESULT and message.turn is None:
                grouped.append((current, None, None))
                current = []
        if current:
            grouped.append((current, None, None))
    return grouped


def to_atif(
    turns: Iterable[ReplayedTurn | Sequence[Message] | Message],
    *,
    prompts: Sequence[str | None] | None = None,
    agent_name: str | None = None,
    agent_version: str | None = None,
    model: str | None = None,
    session_id: str | None = None,
    notes: str | None = None,
) -> Trajectory:
    """The ATIF trajectory of a session: its turns (:class:`ReplayedTurn`\\ s, lists of
    messages, or one stream of messages), with the turns' prompts when known (``prompts``, or
    each :class:`ReplayedTurn`'s, with its ``prompt_content`` unless ``prompts`` replaces it).
    Content parts :func:`from_atif` kept (``data["atif_content"]``) are written back while their
    text is still the message's. The agent's name, version and model come from the session's
    ``init`` unless given; a name or version nobody knows is ``"unknown"``."""
    grouped = _as_turns(turns)
    main = _ReadingAware()
    subagents: dict[str, _ReadingAware] = {}
    init_name = init_version = init_model = init_session = None
    summaries: list[TurnSummary] = []
    for index, (messages, own_prompt, own_content) in enumerate(grouped):
        number = index + 1
        if prompts is not None and index < len(prompts):
            main.begin_turn(number, prompts[index])
        else:
            main.begin_turn(number, own_prompt, own_content)
        for sub in subagents.values():
            sub.begin_turn(number, None)
        for message in messages:
            if message.replayed:
                continue
            if message.type is MessageType.INIT and message.init is not None:
                init = message.init
                init_name = init_name or init.agent_name
                init_version = init_version or init.agent_version
                init_model = init_model or init.model
                init_session = init_session or init.session_id
                continue
            parent = message.parent_tool_use_id
            if parent is None:
                main.add(number, message)
            else:
                subagents.setdefault(parent, _ReadingAware()).add(number, message)
        main.end_turn(number, keep=True)
        for sub in subagents.values():
            sub.end_turn(number)
        summaries.append(TurnSummary.from_messages(messages))
    name = agent_name or init_name or "unknown"
    version = agent_version or init_version or "unknown"
    model_name = model or init_model or next((s.model for s in summaries if s.model), None)
    agent = AtifAgent(name=name, version=version, model_name=model_name)
    session = session_id or init_session
    embedded: list[Trajectory] = []
    builders = [main, *subagents.values()]
    for parent, sub in subagents.items():
        if not sub.drafts:
            continue
        trajectory_id = f"subagent-{parent}"
        embedded.append(
            Trajectory(
                schema_version=ATIF_VERSION,
                session_id=session,
                trajectory_id=trajectory_id,
                agent=agent,
                steps=[d.step(i) for i, d in enumerate(sub.drafts, start=1)],
                extra={EXTRA_KEY: {"parent_tool_use_id": parent}},
            )
        )
        _reference(builders, main, parent, trajectory_id)
    if not main.drafts:
        main.drafts.append(_Draft("system", 1, own={"placeholder": True}))
    steps = [d.step(i) for i, d in enumerate(main.drafts, start=1)]
    return Trajectory(
        schema_version=ATIF_VERSION,
        session_id=session,
        agent=agent,
        steps=steps,
        notes=notes,
        final_metrics=_final_metrics(summaries, len(steps)),
        subagent_trajectories=embedded or None,
    )


def _reference(builders: list[_ReadingAware], main: _Builder, parent: str, target: str) -> None:
    ref = AtifSubagentRef(trajectory_id=target)
    for builder in builders:
        step = builder.calls.get(parent)
        if step is None:
            continue
        for result in step.results:
            if result.source_call_id == parent:
                result.subagent_trajectory_ref = [*(result.subagent_trajectory_ref or ()), ref]
                return
        step.results.append(
            AtifObservationResult(source_call_id=parent, subagent_trajectory_ref=[ref])
        )
        return
    last = main.drafts[-1] if main.drafts else _Draft("system", 1, own={"placeholder": True})
    if not main.drafts:
        main.drafts.append(last)
    last.results.append(
        AtifObservationResult(subagent_trajectory_ref=[ref], extra={"tool_call_id": parent})
    )


def _final_metrics(summaries: list[TurnSummary], steps: int) -> AtifFinalMetrics:
    total = Usage()
    for summary in summaries:
        if summary.usage is not None:
            total = total + summary.usage
    extra: dict[str, Any] = {"turns": len(summaries)}
    if total.cache_write_tokens is not None:
        extra["total_cache_write_tokens"] = total.cache_write_tokens
    if total.thinking_tokens is not None:
        extra["total_thinking_tokens"] = total.thinking_tokens
    return AtifFinalMetrics(
        total_prompt_tokens=total.prompt_tokens,
        total_completion_tokens=total.output_tokens,
        total_cached_tokens=total.cache_read_tokens,
        total_cost_usd=total.cost_usd,
        total_steps=steps,
        extra=extra,
    )
