"""TurnSummary: a pure reducer over the messages of one turn.

Feed it messages one by one (:meth:`TurnSummary.add`) or build it from any iterable
(:meth:`TurnSummary.from_messages`); it never does I/O and never looks at the clock. ``run_turn``
and ``Turn`` keep one up to date and add the measured wall time at the end.

The JSON form (``model_dump(mode="json")``) uses stable field names tools can rely on:
``text``, ``thinking``, ``tool_calls`` (``id``, ``name``, ``input``, ``output``, ``is_error``),
``usage``, ``context`` (``used``, ``size``, ``fraction``, ``used_source``, ``size_source``),
``stop_reason``, ``denials``, ``errors`` (``message``, ``code``), ``resume_id``, ``model``, ``ok``.
It loads back: ``TurnSummary.model_validate_json(summary.model_dump_json()) == summary`` (the
texts are taken as they were joined; an ``output`` that was a model instance comes back as its
JSON).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)

from .errors import configuration_error
from .messages import (
    BackgroundTask,
    ContextSource,
    ContextWindow,
    ErrorInfo,
    Message,
    MessageType,
    PermissionDenial,
    Usage,
    assemble,
)
from .metering import MeteredUsage
from .questions import QuestionRecord

__all__ = [
    "WIND_DOWN_TEXT",
    "ContextSummary",
    "SessionTotals",
    "SteeredInput",
    "ToolCallSummary",
    "TurnSummary",
    "WindDown",
    "WoundDown",
]

#: What a turn is told ``wind_down`` seconds before its deadline (``WindDown.text``'s default).
WIND_DOWN_TEXT = (
    "You are almost out of time for this task. Do not start anything new: stop or finish what "
    "is running, then give your final answer now, saying what is done and what is left."
)

# The kinds :meth:`TurnSummary.add` tells apart, as module constants: reading a member off the
# enum class costs about as much as a dozen plain global reads, and every message is compared
# with up to thirteen of them.
_TEXT = MessageType.TEXT
_TEXT_DELTA = MessageType.TEXT_DELTA
_THINKING = MessageType.THINKING
_THINKING_DELTA = MessageType.THINKING_DELTA
_TOOL_USE = MessageType.TOOL_USE
_TOOL_RESULT = MessageType.TOOL_RESULT
_CONTEXT_WINDOW = MessageType.CONTEXT_WINDOW
_INIT = MessageType.INIT
_ERROR = MessageType.ERROR
_RESULT = MessageType.RESULT
_RETRY = MessageType.RETRY
_QUESTION = MessageType.QUESTION
_SYSTEM = MessageType.SYSTEM


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
        """The summary of a validated reading, assembled (a reading is summarized at every
        model call: validating it again cost 1.9 % of an OpenCode replay)."""
        known = reading.__dict__
        used = known["used_tokens"]
        size = known["size_tokens"]
        fields = {
            "used": used,
            "size": size,
            "fraction": None if used is None or not size else round(used / size, 6),
            "used_source": known["used_source"],
            "size_source": known["size_source"],
        }
        if cls is not ContextSummary:  # a subclass may have what assemble does not give
            return cls(**fields)
        return assemble(ContextSummary, fields)


class _Fold:
    """The running state of a :class:`TurnSummary` (private; plain attributes)."""

    # The immutable starting values are the class's: a fresh state makes only its containers
    # (one per turn summarised), and an assignment shadows the class's value.
    #: Thinking blocks since the last tool activity (text: ``tail_text``).
    tail_thinking: int = 0
    joined_text: str | None = None
    joined_all_text: str | None = None
    joined_thinking: str | None = None
    result_text: str | None = None

    def __init__(self) -> None:
        self.tail_text: list[str] = []
        self.all_text: list[str] = []
        self.thinking: list[str] = []
        self.tools: dict[str, ToolCallSummary] = {}

    def _key(self) -> tuple[object, ...]:
        # What the state shows: the texts as joined (a summary loaded from its JSON form has
        # each text as one block), not how the blocks were folded.
        text = self.result_text if self.result_text is not None else "\n\n".join(self.tail_text)
        return (text, "\n\n".join(self.all_text), "\n\n".join(self.thinking))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Fold) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]


class SteeredInput(BaseModel):
    """A user message added to a running turn (``Turn.steer``)."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    text: str
    #: Seconds since the turn started.
    at_s: float


class WindDown(BaseModel):
    """Wind a turn down before its deadline: ``seconds`` before the turn's ``timeout`` the
    library steers the agent with ``text`` (``Turn.steer``), so it can end the turn by itself.
    ``run_turn(..., wind_down=S)`` is ``WindDown(seconds=S)``. The request, part of the turn's
    limits (:class:`~agentrun.TurnLimits`); what happened is the summary's :class:`WoundDown`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    #: Seconds before the deadline; more than 0 and less than the turn's ``timeout``.
    seconds: float = Field(gt=0, allow_inf_nan=False)
    #: The instruction the agent gets.
    text: str = WIND_DOWN_TEXT

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as exc:
            raise configuration_error(exc, "wind_down") from None

    @field_validator("seconds", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("must be a number of seconds")
        return value

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the text is empty")
        if "\0" in value:
            raise ValueError("the text contains a NUL character")
        return value


class WoundDown(BaseModel):
    """How a turn run with ``wind_down`` was wound down (``TurnSummary.wound_down``): the record
    of what a :class:`WindDown` asked for, once it acted."""

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    #: Seconds since the turn started when the wind-down acted.
    at_s: float
    #: True when the agent was steered with the wrap-up text; False when the engine takes no
    #: input during a turn (a ``system`` ``wind_down`` message said so) or the steer failed.
    steered: bool
    #: True when the turn then reached its result by itself, before its deadline.
    ended_by_itself: bool = False


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
    * ``output``: for a turn run with ``output=`` (structured output), the validated answer (an
      instance of the model class, or the decoded JSON for a schema ``dict``); ``None``
      otherwise. ``output_repairs`` counts the repair turns it took (0 or 1).
    * ``steered``: what was added to the running turn with ``Turn.steer``, and when.
    * ``wound_down``: for a turn run with ``wind_down`` whose wind-down acted, when, whether the
      agent was steered and whether the turn ended by itself; ``None`` otherwise (and then left
      out of the JSON form).
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid", validate_assignment=False)

    turn: int | None = None
    tool_calls: list[ToolCallSummary] = Field(default_factory=list[ToolCallSummary])
    usage: Usage | None = None
    context: ContextSummary | None = None
    stop_reason: str | None = None
    denials: list[PermissionDenial] = Field(default_factory=list[PermissionDenial])
    errors: list[ErrorInfo] = Field(default_factory=list[ErrorInfo])
    resume_id: str | None = None
    session_id: str | None = None
    model: str | None = None
    ok: bool = False
    has_result: bool = False
    questions: list[QuestionRecord] = Field(default_factory=list[QuestionRecord])
    background_tasks: list[BackgroundTask] = Field(default_factory=list[BackgroundTask])
    messages: int = 0
    retries: int = 0
    duration_s: float | None = None
    output: Any = None
    output_repairs: int = 0
    steered: list[SteeredInput] = Field(default_factory=list[SteeredInput])
    wound_down: WoundDown | None = Field(default=None, exclude_if=lambda value: value is None)
    #: The tokens (and the estimated cost) of the model calls the agent made beside the turn's
    #: main loop -- a session title, prompt suggestions, subagents, compaction -- where the
    #: agent reports them (claude-agent-acp, its result's ``data["side_usage"]``); ``None``
    #: otherwise (and then left out of the JSON form). ``usage`` never counts them. A call made
    #: after a turn's result (a prompt suggestion) counts in the next turn's.
    side_usage: Usage | None = Field(default=None, exclude_if=lambda value: value is None)
    #: What the metering proxy counted for this turn (a session with ``SessionOptions.meter``),
    #: beside ``usage``; ``None`` otherwise (and then left out of the JSON form).
    metered: MeteredUsage | None = Field(default=None, exclude_if=lambda value: value is None)
    #: The tokens of the turn's last model call, where the agent reports only that call's
    #: beside the whole turn's cost (OpenCode over ACP, a turn of several calls; its result's
    #: ``data["last_call_usage"]``, ``usage_source`` ``last_call``, never priced): ``usage``
    #: then holds the turn's cost and no token figure. ``None`` otherwise (left out of the JSON).
    last_call_usage: Usage | None = Field(default=None, exclude_if=lambda value: value is None)

    # The running state of the fold lives in one plain object: folding a message touches no
    # pydantic attribute machinery, and blocks are kept and joined once, when read (folding a
    # message costs the same at the 100,000th message as at the first).
    _fold: _Fold = PrivateAttr(default_factory=lambda: _Fold())

    def _state(self) -> _Fold:
        return self.__pydantic_private__["_fold"]  # pyright: ignore[reportOptionalSubscript, reportUnknownVariableType]

    @computed_field
    @property
    def text(self) -> str:
        """The final answer: the result's text, else the main thread's text blocks after its last
        tool activity, joined by blank lines."""
        private: dict[str, _Fold] = self.__pydantic_private__  # pyright: ignore[reportAssignmentType]
        state = private["_fold"]
        if state.result_text is not None:
            return state.result_text
        if state.joined_text is None:
            state.joined_text = "\n\n".join(state.tail_text)
        return state.joined_text

    @computed_field
    @property
    def all_text(self) -> str:
        """Every main-thread text block of the turn, in order, joined by blank lines (what the
        agent said before its tools ran included)."""
        private: dict[str, _Fold] = self.__pydantic_private__  # pyright: ignore[reportAssignmentType]
        state = private["_fold"]
        if state.joined_all_text is None:
            state.joined_all_text = "\n\n".join(state.all_text)
        return state.joined_all_text

    @computed_field
    @property
    def thinking(self) -> str:
        """Every main-thread thinking block, joined by blank lines."""
        private: dict[str, _Fold] = self.__pydantic_private__  # pyright: ignore[reportAssignmentType]
        state = private["_fold"]
        if state.joined_thinking is None:
            state.joined_thinking = "\n\n".join(state.thinking)
        return state.joined_thinking

    @model_validator(mode="wrap")
    @classmethod
    def _load(cls, data: Any, handler: ModelWrapValidatorHandler[TurnSummary]) -> TurnSummary:
        """The JSON form loads back: its texts (computed fields) become the fold's state."""
        if not isinstance(data, dict):
            return handler(data)
        given = dict(cast("dict[str, Any]", data))
        shown = {name: given.pop(name) for name in _SHOWN if name in given}
        for name, value in shown.items():
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string, got {type(value).__name__}")
        summary = handler(given)
        state = summary._state()
        text = shown.get("text", "")
        if text and summary.has_result:
            state.result_text = text
        elif text:
            state.tail_text.append(text)
        if shown.get("all_text"):
            state.all_text.append(shown["all_text"])
        if shown.get("thinking"):
            state.thinking.append(shown["thinking"])
        # A later tool result still finds its call.
        state.tools.update((t.id, t) for t in summary.tool_calls if t.id is not None)
        return summary

    @classmethod
    def from_messages(cls, messages: Iterable[Message]) -> TurnSummary:
        if cls is TurnSummary:
            summary = _empty_summary()
            summary._fold_in(messages)
            return summary
        summary = cls()
        if cls.add is TurnSummary.add:
            summary._fold_in(messages)
        else:  # a subclass's own add sees every message
            add = summary.add
            for message in messages:
                add(message)
        return summary

    def add(self, message: Message) -> None:
        """Fold one message into the summary."""
        self._fold_in((message,))

    def _fold_in(self, messages: Iterable[Message]) -> None:
        """Fold messages into the summary, in order (:meth:`add` of each, in one loop)."""
        # Fields are written to the instance's own dict (what pydantic's assignment does when
        # it does not validate, less its per-call dispatch) and marked set, as assignment would.
        own = vars(self)
        fields_set = self.__pydantic_fields_set__
        private: dict[str, _Fold] = self.__pydantic_private__  # pyright: ignore[reportAssignmentType]
        state = private["_fold"]
        # The messages counted, written once at the end (nothing in between reads the count).
        counted = 0
        try:
            for message in messages:
                fields = vars(message)
                if fields["replayed"]:
                    continue
                counted += 1
                if own["turn"] is None and fields["turn"] is not None:
                    own["turn"] = fields["turn"]
                    fields_set.add("turn")
                kind = fields["type"]
                if kind is _TEXT_DELTA or kind is _THINKING_DELTA:
                    pass
                elif kind is _TEXT:
                    text = fields["text"]
                    if text and fields["parent_tool_use_id"] is None:
                        state.tail_text.append(text)
                        state.all_text.append(text)
                        state.joined_text = state.joined_all_text = None
                elif kind is _THINKING:
                    text = fields["text"]
                    if text and fields["parent_tool_use_id"] is None:
                        state.thinking.append(text)
                        state.tail_thinking += 1
                        state.joined_thinking = None
                elif kind is _TOOL_USE or kind is _TOOL_RESULT:
                    if fields["tool"] is not None:
                        self._tool(message, is_result=kind is _TOOL_RESULT)
                    if fields["parent_tool_use_id"] is None:
                        state.tail_thinking = 0
                        if state.tail_text:
                            state.tail_text.clear()
                            state.joined_text = None
                elif kind is _CONTEXT_WINDOW:
                    reading = fields["context"]
                    if reading is not None and fields["parent_tool_use_id"] is None:
                        own["context"] = ContextSummary.from_reading(reading)
                        fields_set.add("context")
                        if own["usage"] is not None:  # a reading before the result has none
                            self._merge_context_into_usage()
                elif kind is _INIT:
                    self._init(message)
                elif kind is _ERROR:
                    error = fields["error"]
                    if error is not None:
                        own["errors"].append(error)
                        if error.fatal:
                            own["ok"] = False
                            fields_set.add("ok")
                elif kind is _RESULT:
                    self._result(message)
                elif kind is _RETRY:
                    self._retried()
                elif kind is _QUESTION and fields["data"] is not None:
                    self.questions.append(QuestionRecord.model_validate(fields["data"]))
                elif kind is _SYSTEM and fields["subtype"] == "background_tasks":
                    tasks = cast("list[dict[str, Any]]", (message.data or {}).get("tasks") or [])
                    self.background_tasks = [BackgroundTask.model_validate(t) for t in tasks]
                denials = fields["denials"]
                if denials:
                    for denial in denials:
                        self._deny(denial)
                if fields["resume_id"]:
                    own["resume_id"] = fields["resume_id"]
                    fields_set.add("resume_id")
        finally:
            if counted:
                own["messages"] += counted
                fields_set.add("messages")

    # -- parts -------------------------------------------------------------------------------

    def _retried(self) -> None:
        """The agent retries a failed model call: what that call streamed since the last tool
        activity is streamed again by the retry, so it leaves the turn's text and thinking."""
        vars(self)["retries"] += 1
        self.__pydantic_fields_set__.add("retries")
        state = self._state()
        if state.tail_text:
            del state.all_text[len(state.all_text) - len(state.tail_text) :]
            state.tail_text.clear()
            state.joined_text = state.joined_all_text = None
        if state.tail_thinking:
            del state.thinking[len(state.thinking) - state.tail_thinking :]
            state.tail_thinking = 0
            state.joined_thinking = None

    def _tool(self, message: Message, *, is_result: bool) -> None:
        tool = message.tool
        assert tool is not None
        tools = self._state().tools
        entry = tools.get(tool.id) if tool.id is not None else None
        if entry is None:
            # Its fields were validated when the tool call was made.
            entry = assemble(
                ToolCallSummary, {"id": tool.id, "name": tool.name, "input": tool.input}
            )
            self.tool_calls.append(entry)
            if tool.id is not None:
                tools[tool.id] = entry
        # The entry is the summary's own (never shared): its fields are written directly.
        known = vars(entry)
        changed = entry.__pydantic_fields_set__
        if tool.name is not None and known["name"] is None:
            known["name"] = tool.name
            changed.add("name")
        if tool.input is not None and (known["input"] is None or known["input"] == {}):
            known["input"] = tool.input
            changed.add("input")
        if is_result:
            known["output"] = tool.output
            known["is_error"] = tool.is_error
            known["completed"] = True
            changed.update(("output", "is_error", "completed"))

    def _init(self, message: Message) -> None:
        init = message.init
        if init is None:
            return
        own = vars(self)
        if init.model:
            own["model"] = init.model
            self.__pydantic_fields_set__.add("model")
        if init.session_id:
            own["session_id"] = init.session_id
            self.__pydantic_fields_set__.add("session_id")

    def _result(self, message: Message) -> None:
        # Written like the counters in :meth:`add`: to the instance's dict, marked set.
        own = vars(self)
        fields_set = self.__pydantic_fields_set__
        fields = vars(message)
        own["has_result"] = True
        fields_set.add("has_result")
        if fields["usage"] is not None:
            own["usage"] = fields["usage"]
            fields_set.add("usage")
            self._merge_context_into_usage()
        stop_reason = fields["stop_reason"]
        if stop_reason is not None:
            own["stop_reason"] = stop_reason
            fields_set.add("stop_reason")
        if fields["text"]:
            self._state().result_text = fields["text"]
        error: ErrorInfo | None = fields["error"]
        errors: list[ErrorInfo] = own["errors"]
        if error is not None:
            # The agent often reports an error as an event and again on its result: keep one
            # record, the result's (which says whether it ended the turn).
            same = [
                i
                for i, e in enumerate(errors)
                if e.message == error.message and e.code == error.code
            ]
            if same:
                errors[same[-1]] = error
            else:
                errors.append(error)
        fatal = False
        for known in errors:
            if known.fatal:
                fatal = True
                break
        cancelled = stop_reason == "cancelled"
        own["ok"] = error is None and not fatal and not cancelled
        fields_set.add("ok")
        data = fields["data"]
        side = data.get("side_usage") if data else None
        if isinstance(side, dict):
            own["side_usage"] = Usage.model_validate(side)
            fields_set.add("side_usage")
        last_call = data.get("last_call_usage") if data else None
        if isinstance(last_call, dict):
            own["last_call_usage"] = Usage.model_validate(last_call)
            fields_set.add("last_call_usage")
        model = data.get("model") if data else None
        if isinstance(model, str) and model:
            own["model"] = model
            fields_set.add("model")

    def _merge_context_into_usage(self) -> None:
        own = vars(self)
        usage: Usage | None = own["usage"]
        context: ContextSummary | None = own["context"]
        if usage is None or context is None:
            return
        # ``model_copy(update=...)``, assembled: a context reading is merged at every result.
        own["usage"] = assemble(
            Usage,
            {
                **usage.__dict__,
                "context_used_tokens": context.used,
                "context_size_tokens": context.size,
            },
            {*usage.__pydantic_fields_set__, "context_used_tokens", "context_size_tokens"},
        )
        self.__pydantic_fields_set__.add("usage")

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


#: The computed fields of the JSON form, read back into the fold's state by ``_load``.
_SHOWN = ("text", "all_text", "thinking")


#: ``TurnSummary``'s fields made by a factory (each a ``list[...]``: a fresh empty list per
#: summary).
_FRESH_LISTS: tuple[str, ...] = tuple(
    name for name, field in TurnSummary.model_fields.items() if field.default_factory is not None
)


def _empty_summary() -> TurnSummary:
    """``TurnSummary()`` without its validator (there is nothing to validate): a summary is
    made for every turn, and the validated one costs as much as folding a short turn."""
    return assemble(
        TurnSummary, {name: [] for name in _FRESH_LISTS}, set(), private={"_fold": _Fold()}
    )


def _has_tokens(usage: Usage) -> bool:
    """Whether ``usage`` reports a token count above zero."""
    fields = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    )
    return any(count for count in fields)


def _known_in_full(usage: Usage | None) -> bool:
    """Whether ``usage`` holds a turn's tokens in full (see ``Session.unaccounted_turns``)."""
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return False
    return usage.usage_source not in ("unavailable", "last_call")


def turn_cost(usage: Usage | None, side_usage: Usage | None) -> float | None:
    """What one turn cost in US dollars, its side calls included; ``None`` when it is not known:
    no usage, tokens without a cost, or a cost of the last model call only (or estimated from
    its tokens). A turn whose usage reports no token spent cost nothing."""
    main: float | None = None
    if usage is None or usage.cost_source == "last_call":
        main = None
    elif usage.usage_source == "last_call" and usage.cost_source == "estimated":
        main = None  # priced from the last call's tokens only
    elif usage.cost_usd is not None:
        main = usage.cost_usd
    elif _known_in_full(usage) and not _has_tokens(usage):
        main = 0.0
    if main is None or side_usage is None:
        return main
    if side_usage.cost_usd is not None:
        return round(main + side_usage.cost_usd, 12)
    return None if _has_tokens(side_usage) else main


class SessionTotals(BaseModel):
    """What a whole session used and cost (``Session.totals``): every turn it ran, and, for a
    session that goes on with its journal (``agentrun sessions resume``, a store with a
    ``journal_id``), the turns of the processes before it.

    * ``turns``: the turns that ended (the turns the library runs to compact or hand off
      included).
    * ``usage``: the sum of their ``TurnSummary.usage`` (the turns' main loops);
      ``side_usage``: the sum of their ``side_usage`` (titles, suggestions, subagents, where the
      agent reports them); ``None`` while nothing was reported. The context fields are the
      latest reading.
    * ``unaccounted_turns``: how many of those turns ``usage`` does not hold in full (no usage,
      ``usage_source`` ``unavailable`` or ``last_call``): a count, as turn numbers start from 1
      again in each process.
    * ``cost_usd``: what the whole session cost, side calls included; ``None`` as soon as one
      turn's cost is not known (``unpriced_turns`` says how many): never a partial sum that
      looks whole. ``0.0`` before any turn.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    turns: int = Field(default=0, ge=0)
    usage: Usage | None = None
    side_usage: Usage | None = None
    cost_usd: float | None = Field(default=0.0, ge=0, allow_inf_nan=False)
    unaccounted_turns: int = Field(default=0, ge=0)
    unpriced_turns: int = Field(default=0, ge=0)

    def with_turn(self, usage: Usage | None, side_usage: Usage | None = None) -> SessionTotals:
        """These totals and one more ended turn, whose usage and side usage are given."""
        cost = turn_cost(usage, side_usage)
        total = self.cost_usd
        return SessionTotals(
            turns=self.turns + 1,
            usage=_plus(self.usage, usage),
            side_usage=_plus(self.side_usage, side_usage),
            cost_usd=None if cost is None or total is None else round(total + cost, 12),
            unaccounted_turns=self.unaccounted_turns + (not _known_in_full(usage)),
            unpriced_turns=self.unpriced_turns + (cost is None),
        )

    @classmethod
    def from_journal(cls, records: Iterable[dict[str, Any]]) -> SessionTotals:
        """The totals of a session's journal records (every ``summary`` record is a turn that
        ended). A usage that is not one (a damaged record) counts as not known."""
        totals = cls()
        for record in records:
            if record.get("kind") != "summary":
                continue
            summary = record.get("summary")
            fields = cast("dict[str, Any]", summary) if isinstance(summary, dict) else {}
            totals = totals.with_turn(
                _usage_of(fields.get("usage")), _usage_of(fields.get("side_usage"))
            )
        return totals


def _plus(total: Usage | None, usage: Usage | None) -> Usage | None:
    if usage is None:
        return total
    return usage if total is None else total + usage


def _usage_of(value: Any) -> Usage | None:
    if not isinstance(value, dict):
        return None
    try:
        return Usage.model_validate(value)
    except ValidationError:
        return None
