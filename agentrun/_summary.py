"""TurnSummary: a pure reducer over the messages of one turn.

Feed it messages one by one (:meth:`TurnSummary.add`) or build it from any iterable
(:meth:`TurnSummary.from_messages`); it never does I/O and never looks at the clock. ``run_turn``
and ``Turn`` keep one up to date and add the measured wall time at the end.

The JSON form (``model_dump(mode="json")``) uses stable field names tools can rely on:
``text``, ``thinking``, ``tool_calls`` (``id``, ``name``, ``input``, ``output``, ``is_error``),
``usage``, ``context`` (``used``, ``size``, ``fraction``, ``used_source``, ``size_source``),
``stop_reason``, ``denials``, ``errors`` (``message``, ``code``), ``resume_id``, ``model``, ``ok``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, cast

from pydantic import BaseModel, ConfigDict, PrivateAttr, computed_field

from ._messages import (
    BackgroundTask,
    ContextSource,
    ContextWindow,
    ErrorInfo,
    Message,
    MessageType,
    PermissionDenial,
    Usage,
)
from ._questions import QuestionRecord

__all__ = ["ContextSummary", "ToolCallSummary", "TurnSummary"]


class ToolCallSummary(BaseModel):
    """A tool use paired with its result."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    id: str | None = None
    name: str | None = None
    input: Any = None
    output: Any = None
    is_error: bool | None = None
    #: False while the tool has no result yet (e.g. the turn was cut short).
    completed: bool = False


class ContextSummary(BaseModel):
    """The last context-window reading of the turn."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    used: int | None = None
    size: int | None = None
    fraction: float | None = None
    used_source: ContextSource | None = None
    size_source: ContextSource | None = None

    @classmethod
    def from_reading(cls, reading: ContextWindow) -> ContextSummary:
        fraction = reading.fraction
        return cls(
            used=reading.used_tokens,
            size=reading.size_tokens,
            fraction=None if fraction is None else round(fraction, 6),
            used_source=reading.used_source,
            size_source=reading.size_source,
        )


class TurnSummary(BaseModel):
    """What one turn produced. See the module docstring for the field contract.

    * ``text`` is the turn's final answer: the agent's own final text when its result carries
      one, else the main-thread text blocks after the last tool activity, joined by blank lines.
    * ``all_text`` joins every main-thread text block of the turn, in order (what the agent said
      before its tools ran included); ``thinking`` joins every main-thread thinking block.
    * ``usage`` and ``usage.cost_usd`` are **this turn's** (from the engine's result); the context
      fields of ``usage`` repeat the last reading.
    * ``ok`` is true when the turn reached a result that is neither an error nor a
      cancellation.
    * ``background_tasks``: work the agent started that was still running when the turn
      ended (the turn is over; the agent is not idle).
    * ``retries`` counts the failed model calls the agent retried (``retry`` messages). What a
      retried call had streamed is not the turn's text: the agent streams it again.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid", validate_assignment=False)

    turn: int | None = None
    tool_calls: list[ToolCallSummary] = []
    usage: Usage | None = None
    context: ContextSummary | None = None
    stop_reason: str | None = None
    denials: list[PermissionDenial] = []
    errors: list[ErrorInfo] = []
    resume_id: str | None = None
    session_id: str | None = None
    model: str | None = None
    ok: bool = False
    has_result: bool = False
    questions: list[QuestionRecord] = []
    background_tasks: list[BackgroundTask] = []
    messages: int = 0
    retries: int = 0
    duration_s: float | None = None

    # Blocks are kept and joined once, when read: folding a message costs the same at the
    # 100,000th message as at the first.
    _tail_text: list[str] = PrivateAttr(default_factory=list[str])
    _all_text: list[str] = PrivateAttr(default_factory=list[str])
    _thinking: list[str] = PrivateAttr(default_factory=list[str])
    #: Thinking blocks since the last tool activity (text: ``_tail_text``).
    _tail_thinking: int = PrivateAttr(default=0)
    _joined_text: str | None = PrivateAttr(default=None)
    _joined_all_text: str | None = PrivateAttr(default=None)
    _joined_thinking: str | None = PrivateAttr(default=None)
    _tools: dict[str, ToolCallSummary] = PrivateAttr(default_factory=dict[str, ToolCallSummary])
    _result_text: str | None = PrivateAttr(default=None)

    @computed_field
    @property
    def text(self) -> str:
        """The final answer: the result's text, else the main thread's text blocks after its last
        tool activity, joined by blank lines."""
        if self._result_text is not None:
            return self._result_text
        if self._joined_text is None:
            self._joined_text = "\n\n".join(self._tail_text)
        return self._joined_text

    @computed_field
    @property
    def all_text(self) -> str:
        """Every main-thread text block of the turn, in order, joined by blank lines (what the
        agent said before its tools ran included)."""
        if self._joined_all_text is None:
            self._joined_all_text = "\n\n".join(self._all_text)
        return self._joined_all_text

    @computed_field
    @property
    def thinking(self) -> str:
        """Every main-thread thinking block, joined by blank lines."""
        if self._joined_thinking is None:
            self._joined_thinking = "\n\n".join(self._thinking)
        return self._joined_thinking

    @classmethod
    def from_messages(cls, messages: Iterable[Message]) -> TurnSummary:
        summary = cls()
        for message in messages:
            summary.add(message)
        return summary

    def add(self, message: Message) -> None:
        """Fold one message into the summary."""
        if message.replayed:
            return
        self.messages += 1
        if message.turn is not None and self.turn is None:
            self.turn = message.turn
        kind = message.type
        main = message.parent_tool_use_id is None
        if kind is MessageType.TEXT:
            if main and message.text:
                self._tail_text.append(message.text)
                self._all_text.append(message.text)
                self._joined_text = self._joined_all_text = None
        elif kind is MessageType.THINKING:
            if main and message.text:
                self._thinking.append(message.text)
                self._tail_thinking += 1
                self._joined_thinking = None
        elif kind is MessageType.TOOL_USE or kind is MessageType.TOOL_RESULT:
            if message.tool is not None:
                self._tool(message, is_result=kind is MessageType.TOOL_RESULT)
            if main:
                self._tail_thinking = 0
            if main and self._tail_text:
                self._tail_text.clear()
                self._joined_text = None
        elif kind is MessageType.CONTEXT_WINDOW:
            if message.context is not None and main:
                self.context = ContextSummary.from_reading(message.context)
                self._merge_context_into_usage()
        elif kind is MessageType.INIT:
            self._init(message)
        elif kind is MessageType.ERROR:
            if message.error is not None:
                self.errors.append(message.error)
                if message.error.fatal:
                    self.ok = False
        elif kind is MessageType.RESULT:
            self._result(message)
        elif kind is MessageType.RETRY:
            self._retried()
        elif kind is MessageType.QUESTION and message.data is not None:
            self.questions.append(QuestionRecord.model_validate(message.data))
        elif kind is MessageType.SYSTEM and message.subtype == "background_tasks":
            tasks = cast("list[dict[str, Any]]", (message.data or {}).get("tasks") or [])
            self.background_tasks = [BackgroundTask.model_validate(t) for t in tasks]
        if message.denials:
            for denial in message.denials:
                self._deny(denial)
        if message.resume_id:
            self.resume_id = message.resume_id

    # -- parts -------------------------------------------------------------------------------

    def _retried(self) -> None:
        """The agent retries a failed model call: what that call streamed since the last tool
        activity is streamed again by the retry, so it leaves the turn's text and thinking."""
        self.retries += 1
        if self._tail_text:
            del self._all_text[len(self._all_text) - len(self._tail_text) :]
            self._tail_text.clear()
            self._joined_text = self._joined_all_text = None
        if self._tail_thinking:
            del self._thinking[len(self._thinking) - self._tail_thinking :]
            self._tail_thinking = 0
            self._joined_thinking = None

    def _tool(self, message: Message, *, is_result: bool) -> None:
        tool = message.tool
        assert tool is not None
        entry = self._tools.get(tool.id) if tool.id is not None else None
        if entry is None:
            entry = ToolCallSummary(id=tool.id, name=tool.name, input=tool.input)
            self.tool_calls.append(entry)
            if tool.id is not None:
                self._tools[tool.id] = entry
        if tool.name is not None and entry.name is None:
            entry.name = tool.name
        if tool.input is not None and (entry.input is None or entry.input == {}):
            entry.input = tool.input
        if is_result:
            entry.output = tool.output
            entry.is_error = tool.is_error
            entry.completed = True

    def _init(self, message: Message) -> None:
        init = message.init
        if init is None:
            return
        if init.model:
            self.model = init.model
        if init.session_id:
            self.session_id = init.session_id

    def _result(self, message: Message) -> None:
        self.has_result = True
        if message.usage is not None:
            self.usage = message.usage
            self._merge_context_into_usage()
        if message.stop_reason is not None:
            self.stop_reason = message.stop_reason
        if message.text:
            self._result_text = message.text
        if message.error is not None:
            # The agent often reports an error as an event and again on its result: keep one
            # record, the result's (which says whether it ended the turn).
            same = [
                i
                for i, e in enumerate(self.errors)
                if e.message == message.error.message and e.code == message.error.code
            ]
            if same:
                self.errors[same[-1]] = message.error
            else:
                self.errors.append(message.error)
        fatal = any(e.fatal for e in self.errors)
        cancelled = message.stop_reason == "cancelled"
        self.ok = message.error is None and not fatal and not cancelled
        data = message.data or {}
        model = data.get("model")
        if isinstance(model, str) and model:
            self.model = model

    def _merge_context_into_usage(self) -> None:
        if self.usage is None or self.context is None:
            return
        self.usage = self.usage.model_copy(
            update={
                "context_used_tokens": self.context.used,
                "context_size_tokens": self.context.size,
            }
        )

    def _deny(self, denial: PermissionDenial) -> None:
        for i, known in enumerate(self.denials):
            if denial.tool_use_id is not None and known.tool_use_id == denial.tool_use_id:
                # Keep the richer of the two records.
                merged = known.model_copy(
                    update={
                        k: v
                        for k, v in denial.model_dump(exclude_none=True).items()
                        if getattr(known, k) is None
                    }
                )
                self.denials[i] = merged
                return
        self.denials.append(denial)
