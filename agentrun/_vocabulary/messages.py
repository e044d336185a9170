"""The normalized message vocabulary every engine translates into.

A :class:`Message` is frozen and typed. Its ``type`` is a :class:`MessageType` for the kinds the
library knows, and the plain string otherwise: a newer agent's new event kind passes through as
a ``system``-like message with its own type string instead of crashing an older library.

Usage numbers follow one convention across engines (see ``docs/vocabulary.md``):

* ``input_tokens`` counts **non-cached** input only; ``input + cache_read + cache_write`` is the
  whole prompt (Anthropic's convention; engines subtract cached tokens where the agent reports
  OpenAI-style totals).
* ``output_tokens`` **includes** thinking tokens; ``thinking_tokens`` says how many of them were
  thinking (engines add reasoning tokens where the agent reports them separately).
* ``cost_usd`` on a ``result`` is the cost of **that turn**, never a session total.
* ``None`` means "not reported"; ``0`` means "reported as zero".
* An agent that reports a figure without the split the convention needs has it in a field of
  its own: ``whole_prompt_tokens`` (the prompt, its cache reads not told apart; Gemini CLI) and
  ``answer_tokens`` (the output without the thinking, the thinking not counted); the split's
  fields stay ``None``. ``prompt_tokens`` counts the whole prompt either way.
* On a ``result``, ``usage_source`` and ``cost_source`` say where the turn's token figures and its
  cost came from (:data:`UsageSource`); elsewhere they are ``None``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "BackgroundTask",
    "ContextSource",
    "ContextWindow",
    "ErrorInfo",
    "InitMeta",
    "Message",
    "MessageType",
    "PermissionDenial",
    "ProcessMeta",
    "ToolCall",
    "Usage",
    "UsageSource",
]


class MessageType(str, enum.Enum):
    """The kinds of message the library knows. Unknown kinds pass through as plain strings."""

    INIT = "init"
    TEXT = "text"
    TEXT_DELTA = "text_delta"
    THINKING = "thinking"
    THINKING_DELTA = "thinking_delta"
    TOOL_USE = "tool_use"
    TOOL_USE_DELTA = "tool_use_delta"
    TOOL_RESULT = "tool_result"
    CONTEXT_WINDOW = "context_window"
    #: The session's context fill crossed a threshold of its :class:`~agentrun.ContextPolicy`.
    CONTEXT_THRESHOLD = "context_threshold"
    RESULT = "result"
    ERROR = "error"
    SYSTEM = "system"
    #: The agent will retry a failed model call (``data``: attempt, max_attempts, delay_s).
    RETRY = "retry"
    #: The agent has been quiet for a while (``data``: what was last seen, what it waits for).
    STALL = "stall"
    #: The agent asked the caller questions (``data``: a :class:`~agentrun.QuestionRecord`).
    QUESTION = "question"
    #: The agent compacted its context (``data``: trigger, before_tokens, after_tokens).
    COMPACTION = "compaction"

    def __str__(self) -> str:
        return self.value


#: Where a context-window number came from, best first.
#: ``agent``: the agent reported it (ACP ``usage_update``, Claude's ``modelUsage.contextWindow``).
#: ``agent_effective``: the agent reported its *effective* window, the part of the model's window
#: it lets a conversation fill (Codex: 95 %, keeping the rest for the answer).
#: ``call_usage``: derived from the latest main-thread model call's input + cache tokens.
#: ``user``: the session's ``context_window_tokens`` override.
#: ``catalog``: the library's model catalog.
ContextSource = Literal["agent", "agent_effective", "call_usage", "user", "catalog"]


_INFINITY = float("inf")


class _Model(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(
        frozen=True, extra="forbid", ser_json_inf_nan="null"
    )


_B = TypeVar("_B", bound=BaseModel)
_new = object.__new__
#: Each vocabulary class's defaults, read once (see :func:`assemble`).
_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {}


def _setter(name: str) -> Callable[[object, object], None]:
    """A setter of one of the four attributes every pydantic model has (what ``model_construct``
    sets): the setter of ``BaseModel``'s slot, as every pydantic 2 release keeps them (a third
    of :func:`assemble` cheaper than ``object.__setattr__``, which looks the name up at every
    call), else ``object.__setattr__``."""
    slot = BaseModel.__dict__.get(name)
    if slot is not None and hasattr(slot, "__set__"):
        return slot.__set__
    return lambda model, value: object.__setattr__(model, name, value)


_set_dict = _setter("__dict__")
_set_fields_set = _setter("__pydantic_fields_set__")
_set_extra = _setter("__pydantic_extra__")
_set_private = _setter("__pydantic_private__")


def assemble(
    cls: type[_B],
    fields: dict[str, Any],
    fields_set: set[str] | None = None,
    *,
    private: dict[str, Any] | None = None,
) -> _B:
    """``cls.model_construct(fields_set, **fields)``, cheaper: the one way the library builds a
    model without validating it. For values that already are what ``cls``'s validation returns
    (the library's own figures and models, or values a translator checked to be exactly that:
    a ``str`` for a ``str | None`` field, a count :func:`reported_figure` reports); a value that
    is not makes a model validation would not, which no one checks afterwards. The fields not
    given take their defaults; the given ones are marked set, or ``fields_set``.

    A field with a default factory must be given (its factory is not called), and a model with
    private attributes is given all of them in ``private``; a model with extra fields is
    refused. ``tests/core/test_vocabulary.py`` holds it to ``model_construct`` and, for such
    values, to ``model_validate``."""
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        defaults = _DEFAULTS[cls] = _defaults_of(cls)
    model = _new(cls)
    _set_dict(model, {**defaults, **fields})
    _set_fields_set(model, {*fields} if fields_set is None else fields_set)
    _set_extra(model, None)
    _set_private(model, private)
    return model


def _defaults_of(cls: type[BaseModel]) -> dict[str, Any]:
    """The defaults :func:`assemble` gives a class's fields (``None`` where a factory makes
    the default: the caller gives those); a model with extra fields is refused."""
    if cls.model_config.get("extra") == "allow":
        raise TypeError(f"assemble: {cls.__name__} takes extra fields")
    return {
        name: None if field.default_factory is not None else field.default
        for name, field in cls.model_fields.items()
    }


#: Where a turn's token figures or cost came from.
#: ``reported``: the agent reported them for this turn (or for each of its calls or steps).
#: ``derived``: the library computed them from what the agent reported, e.g. the difference of
#: two running totals of the session.
#: ``estimated``: the agent reported none; computed from the tokens and the price catalog.
#: ``last_call``: the token figures are one model call's, the turn's last, not the turn's
#: (``TurnSummary.last_call_usage``: OpenCode over ACP reports only those beside the turn's cost,
#: which the turn's own usage holds); never priced.
#: ``unavailable``: nobody knows them (the figure is ``None``).
UsageSource = Literal["reported", "derived", "estimated", "last_call", "unavailable"]


_N = TypeVar("_N", int, float)


def reported_figure(value: _N | None) -> _N | None:
    """``Usage``'s rule for each of its counts and its cost, stated once: a negative, NaN or
    infinite figure is nonsense from a broken or hostile agent (or file), not reported (NaN
    fails every comparison). Its validation applies it; a translator that assembles a usage
    (:func:`assemble`) applies it to each figure it read."""
    if value is None or (0 <= value < _INFINITY):
        return value
    return None


class Usage(_Model):
    """Token and cost figures. ``None`` = not reported. See the module docstring."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    thinking_tokens: int | None = None
    cost_usd: float | None = None
    context_used_tokens: int | None = None
    context_size_tokens: int | None = None
    #: Prompt tokens reported without telling input from cache reads (Gemini CLI's total).
    whole_prompt_tokens: int | None = None
    #: Output tokens reported without the thinking, whose count was not reported (Gemini CLI):
    #: not part of ``output_tokens``, which includes the thinking.
    answer_tokens: int | None = None
    #: Where the token figures came from (set on a turn's ``result``).
    usage_source: UsageSource | None = None
    #: Where ``cost_usd`` came from (set on a turn's ``result``).
    cost_source: UsageSource | None = None

    @property
    def prompt_tokens(self) -> int | None:
        """The whole prompt: input + cache read + cache write, and the prompt tokens reported
        without that split (None if none known)."""
        fields = self.__dict__
        read = fields["cache_read_tokens"]
        write = fields["cache_write_tokens"]
        new = fields["input_tokens"]
        whole = fields["whole_prompt_tokens"]
        if new is None and read is None and write is None and whole is None:
            return None
        return (new or 0) + (read or 0) + (write or 0) + (whole or 0)

    @field_validator(
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "thinking_tokens",
        "cost_usd",
        "context_used_tokens",
        "context_size_tokens",
        "whole_prompt_tokens",
        "answer_tokens",
    )
    @classmethod
    def _never_negative(cls, value: float | None) -> float | None:
        return reported_figure(value)

    def is_empty(self) -> bool:
        return all(v is None for v in self.__dict__.values())

    def __add__(self, other: Usage) -> Usage:
        """Sum token and cost fields (None + None = None); context fields take ``other``'s.

        Both were validated (or assembled from what validation returns): their sums are what
        validating them would return (a cost's sum as ``Usage``'s rule reports it: two large
        costs may add up to infinity), so the sum is assembled, every field marked set.
        Sessions sum every turn's usage, and translators every step's."""
        a = self.__dict__
        b = other.__dict__
        used = b["context_used_tokens"]
        size = b["context_size_tokens"]
        return assemble(
            Usage,
            {
                "input_tokens": _add(a["input_tokens"], b["input_tokens"]),
                "output_tokens": _add(a["output_tokens"], b["output_tokens"]),
                "cache_read_tokens": _add(a["cache_read_tokens"], b["cache_read_tokens"]),
                "cache_write_tokens": _add(a["cache_write_tokens"], b["cache_write_tokens"]),
                "thinking_tokens": _add(a["thinking_tokens"], b["thinking_tokens"]),
                "cost_usd": reported_figure(_addf(a["cost_usd"], b["cost_usd"])),
                "context_used_tokens": a["context_used_tokens"] if used is None else used,
                "context_size_tokens": a["context_size_tokens"] if size is None else size,
                "whole_prompt_tokens": _add(a["whole_prompt_tokens"], b["whole_prompt_tokens"]),
                "answer_tokens": _add(a["answer_tokens"], b["answer_tokens"]),
                "usage_source": _pick_source(a["usage_source"], b["usage_source"]),
                "cost_source": _pick_source(a["cost_source"], b["cost_source"]),
            },
        )


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _addf(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return round(a + b, 12)


#: Weakest first: a sum of known figures is only as good as its weakest part; a part nobody
#: knows adds nothing and says nothing about the rest.
_SOURCE_RANK: dict[str, int] = {
    "estimated": 0,
    "derived": 1,
    "reported": 2,
    "last_call": 3,
    "unavailable": 4,
}


def _pick_source(a: UsageSource | None, b: UsageSource | None) -> UsageSource | None:
    if a is None or b is None:
        return b if a is None else a
    return a if _SOURCE_RANK[a] <= _SOURCE_RANK[b] else b


class ContextWindow(_Model):
    """One reading of how full the model's context is.

    ``used_tokens`` is the prompt size of the latest main-thread model call (never a sum across
    calls); ``size_tokens`` the window. Each number says where it came from; a number nobody
    knows is ``None``, never invented.
    """

    used_tokens: int | None = None
    size_tokens: int | None = None
    used_source: ContextSource | None = None
    size_source: ContextSource | None = None

    @property
    def fraction(self) -> float | None:
        """``used / size`` (0.0 - 1.0+), or ``None`` when either number is unknown."""
        if self.used_tokens is None or not self.size_tokens:
            return None
        return self.used_tokens / self.size_tokens


class ToolCall(_Model):
    """A tool invocation; ``id`` pairs a ``tool_use`` with its ``tool_result``."""

    id: str | None = None
    name: str | None = None
    input: Any = None
    output: Any = None
    is_error: bool | None = None
    #: Engine-specific extras: ACP ``kind``/``status``/``title``/``locations``, OpenCode metadata.
    title: str | None = None
    kind: str | None = None
    status: str | None = None


class PermissionDenial(_Model):
    """A tool use that the permission system (or the caller's callback) refused."""

    tool_name: str | None = None
    tool_use_id: str | None = None
    input: Any = None
    reason: str | None = None


class BackgroundTask(_Model):
    """Work the agent started that goes on by itself (a background shell, a subagent)."""

    id: str
    description: str | None = None
    #: The tool call that started it.
    tool_use_id: str | None = None
    #: The agent's own kind (Claude Code: ``local_bash``, ...).
    kind: str | None = None


class InitMeta(_Model):
    """What the agent said about itself and the session when it started."""

    model: str | None = None
    agent_name: str | None = None
    agent_version: str | None = None
    session_id: str | None = None
    cwd: str | None = None
    tools: tuple[str, ...] | None = None
    permission_mode: str | None = None


class ProcessMeta(_Model):
    """The operating-system process behind a session (spawn-per-turn: this turn's process)."""

    pid: int
    binary: str


class ErrorInfo(_Model):
    """What went wrong: a human message, a stable code, and what the agent said about it."""

    message: str
    code: str | None = None
    #: HTTP status when the model API failed.
    status: int | None = None
    #: True when the failure ended the turn (the turn's result is an error).
    fatal: bool = False
    #: What the agent sent with the error beyond its message (a JSON-RPC error's ``data``: the
    #: model provider's own message, an error name ...), when it sent anything.
    data: dict[str, Any] | None = None


class Message(_Model):
    """One normalized event of an agent session.

    Which payload fields are set depends on ``type``:

    ========================  ==============================================================
    ``init``                  ``init``, ``process``, ``resume_id``
    ``text`` / ``thinking``   ``text`` (a complete block), ``message_id``
    ``*_delta``               ``text`` (a fragment), ``message_id``; ``tool`` for tool_use_delta
    ``tool_use``              ``tool`` (id, name, input)
    ``tool_result``           ``tool`` (id, name?, output, is_error)
    ``context_window``        ``context`` and the context fields of ``usage``
    ``result``                ``usage`` (this turn), ``stop_reason``, ``text`` (final text, when the
                              agent reports one), ``denials``, ``error`` when the turn failed,
                              ``resume_id``
    ``error``                 ``error``
    ``system``                ``subtype`` and ``data``; ``denials`` for permission denials;
                              subtype ``background_tasks``: ``data["tasks"]``, the agent's
                              running background tasks (``BackgroundTask`` fields)
    ``retry``                 ``error`` (what failed: message, code, HTTP status), ``data``
                              (``attempt``, ``max_attempts``, ``delay_s`` where known)
    ``stall``                 ``data`` (``quiet_s``, ``waiting_for``, ``open_tools``,
                              ``last_seen``, ``acts_in_s``); made by the library, not the agent
    ``question``              ``text`` (the questions), ``data`` (a ``QuestionRecord``: the
                              questions, the answers or the refusal)
    ``compaction``            ``data`` (``trigger``: manual / auto, ``before_tokens``,
                              ``after_tokens``), ``context`` (the reading after, when known)
    ========================  ==============================================================

    ``turn`` is set by the library to the number of the turn the message belongs to (1, 2, ...).
    ``raw`` keeps the agent's original event (not serialized). ``replayed`` marks history an agent
    replays when a session is loaded; it never counts toward a turn.
    """

    #: A known kind becomes its :class:`MessageType`, any other string stays as it is (tried in
    #: this order by pydantic-core itself: no Python validator runs per message).
    type: Annotated[MessageType | str, Field(union_mode="left_to_right")]
    turn: int | None = None
    subtype: str | None = None
    text: str | None = None
    message_id: str | None = None
    parent_tool_use_id: str | None = None
    tool: ToolCall | None = None
    usage: Usage | None = None
    context: ContextWindow | None = None
    stop_reason: str | None = None
    denials: tuple[PermissionDenial, ...] | None = None
    error: ErrorInfo | None = None
    init: InitMeta | None = None
    process: ProcessMeta | None = None
    resume_id: str | None = None
    replayed: bool = False
    data: dict[str, Any] | None = None
    raw: Any = Field(default=None, exclude=True, repr=False)

    @property
    def is_delta(self) -> bool:
        return str(self.type).endswith("_delta")

    def in_turn(self, turn: int) -> Message:
        """This message tagged with its turn number: a copy, what ``model_copy(update={"turn":
        turn})`` makes, assembled (the library tags every message it delivers; ``model_copy``
        cost a tenth of a Claude replay more)."""
        fields = self.__dict__
        if fields["turn"] == turn:
            return self
        if type(self) is not Message:  # a subclass may have what :func:`assemble` does not give
            return self.model_copy(update={"turn": turn})
        # :func:`assemble` of every field (no defaults to merge).
        fields = fields.copy()
        fields["turn"] = turn
        model = _new(Message)
        _set_dict(model, fields)
        _set_fields_set(model, {*self.__pydantic_fields_set__, "turn"})
        _set_extra(model, None)
        _set_private(model, None)
        return model

    # -- constructors used by engines ------------------------------------------------------

    @classmethod
    def error_message(
        cls,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        fatal: bool = False,
        data: dict[str, Any] | None = None,
        raw: Any = None,
    ) -> Message:
        return cls(
            type=MessageType.ERROR,
            error=ErrorInfo(message=message, code=code, status=status, fatal=fatal),
            data=data,
            raw=raw,
        )

    @classmethod
    def retry_notice(
        cls,
        message: str,
        *,
        attempt: int | None = None,
        max_attempts: int | None = None,
        delay_s: float | None = None,
        code: str | None = None,
        status: int | None = None,
        raw: Any = None,
    ) -> Message:
        """A ``retry`` message: the agent will call the model again after a failure."""
        data: dict[str, Any] = {}
        if attempt is not None:
            data["attempt"] = attempt
        if max_attempts is not None:
            data["max_attempts"] = max_attempts
        if delay_s is not None and delay_s >= 0:
            data["delay_s"] = delay_s
        return cls(
            type=MessageType.RETRY,
            text=message,
            error=ErrorInfo(message=message, code=code, status=status),
            data=data,
            raw=raw,
        )

    @classmethod
    def compaction(
        cls,
        *,
        trigger: str | None,
        before_tokens: int | None,
        after: ContextWindow | None,
        raw: Any = None,
    ) -> Message:
        """A ``compaction`` message: the agent replaced its context with a summary."""
        after_tokens = None if after is None else after.used_tokens
        shown = f"context compacted: {before_tokens or '?'} -> {after_tokens or '?'} tokens"
        return cls(
            type=MessageType.COMPACTION,
            text=shown,
            context=after,
            data={
                "trigger": trigger,
                "before_tokens": before_tokens,
                "after_tokens": after_tokens,
            },
            raw=raw,
        )

    @classmethod
    def init_message(
        cls,
        agent: str,
        *,
        model: str | None = None,
        version: str | None = None,
        session_id: str | None = None,
        cwd: str | None = None,
        permission_mode: str | None = None,
        process: ProcessMeta | None = None,
        raw: Any = None,
    ) -> Message:
        """An ``init`` message; ``session_id`` is also the ``resume_id``."""
        meta = {
            "model": model,
            "agent_name": agent,
            "agent_version": version,
            "session_id": session_id,
            "cwd": cwd,
            "permission_mode": permission_mode,
        }
        # Text or nothing is what validation would keep as it is: assembled (validating cost
        # 2.4 % of an OpenCode replay); anything else is validated (and refused).
        if all(value is None or type(value) is str for value in meta.values()):
            init = assemble(InitMeta, meta)
        else:
            init = InitMeta.model_validate(meta)
        if cls is not Message:  # a subclass may have what assemble does not give
            return cls(
                type=MessageType.INIT, init=init, process=process, resume_id=session_id, raw=raw
            )
        # The agent's values are validated (the meta); the message around them is assembled
        # of validated values (the process is a validated model).
        return assemble(
            Message,
            {
                "type": MessageType.INIT,
                "init": init,
                "process": process,
                "resume_id": init.session_id,
                "raw": raw,
            },
        )

    @classmethod
    def not_an_object(cls, agent: str, event: Any) -> Message:
        """The ``error`` message for a decoded line that is not a JSON object."""
        return cls.error_message(
            f"{agent}: expected a JSON object, got {type(event).__name__}",
            code="protocol",
            raw=event,
        )

    @classmethod
    def context_window(cls, reading: ContextWindow, *, raw: Any = None) -> Message:
        """A ``context_window`` message; its ``usage`` repeats the reading's two numbers (as
        ``Usage``'s rule reports them). The reading was validated: the message is assembled."""
        fields = reading.__dict__
        usage = assemble(
            Usage,
            {
                "context_used_tokens": reported_figure(fields["used_tokens"]),
                "context_size_tokens": reported_figure(fields["size_tokens"]),
            },
        )
        if cls is not Message:  # a subclass may have what assemble does not give
            return cls(type=MessageType.CONTEXT_WINDOW, context=reading, usage=usage, raw=raw)
        return assemble(
            Message,
            {"type": MessageType.CONTEXT_WINDOW, "context": reading, "usage": usage, "raw": raw},
        )
