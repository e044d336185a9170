"""The vocabulary: messages, usage arithmetic, sessions, permissions, the public names."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError

import agentrun
from agentrun import (
    ConfigurationError,
    InitMeta,
    Message,
    MessageType,
    PermissionDecision,
    PermissionOption,
    ProcessMeta,
    SessionOptions,
    Usage,
)
from agentrun._vocabulary.context import ContextTracker
from agentrun._vocabulary.messages import (
    ContextSource,
    ContextWindow,
    ErrorInfo,
    ToolCall,
    UsageSource,
    assemble,
)

PUBLIC = {
    "ERROR_CODES", "AgentAccountError", "AgentrunError", "Catalog", "CompareRun", "FilesChanged", "compare", "ConfigurationError", "ContextSource",
    "ContextSummary", "ContextTracker", "ContextWindow", "Effort", "Engine",
    "EngineFactory", "EngineUnavailableError", "ErrorInfo", "Fleet", "FleetEvent",
    "FleetEventKind", "FleetResult", "FleetRun", "FleetSessionRecord", "FleetTask",
    "FleetTurnRecord", "ForkNotSupportedError", "InitMeta", "JournalError", "JournalInUseError", "JsonlSessionStore", "SessionTotals", "LineTooLongError", "Message",
    "MessageCallback", "MessageType", "Mode", "ModelInfo", "NoResultError",
    "SteeredInput", "SteeringNotSupportedError", "WindDown", "WoundDown",
    "OutputValidationError",
    "PermissionDecision", "PermissionDenial", "PermissionHandler", "PermissionOption",
    "NotAuthenticatedError", "QuotaExceededError", "PermissionRequest", "RayEngine", "RaySession", "SessionClosedError", "SessionLostError", "Session", "ProcessExitError", "ProcessMeta", "ProtocolError",
    "Sandbox", "SandboxBackend", "SendNotSupportedError", "SessionOptions", "SessionStore", "SessionNotFoundError", "SessionTerminatedError",
    "ToolCall", "ToolCallSummary", "Translator", "Turn", "TurnContext", "TurnError",
    "TurnInProgressError", "TurnLimits", "TurnSummary", "TurnTimeoutError", "Usage", "UsageError", "WireTap",
    "Budget", "BudgetExceededError", "BudgetLimit", "ContextPolicy",
    "ModelPrice", "PriceCatalog", "UsageSource", "default_prices",
    "Question", "QuestionAnswer", "QuestionHandler", "QuestionOption", "QuestionRecord",
    "QuestionRequest", "CompactionNotSupportedError", "BackgroundTask",
    "__version__", "approve_all", "default_catalog", "deny_all", "engine_names", "get_engine",
    "get_translator", "run_turn",
    "replay", "ReplayedTurn", "CredentialProxy", "ProxyClient", "MeteredUsage", "UsageMeter", "Trajectory", "to_atif", "from_atif",
}  # fmt: skip


def test_public_names_are_pinned() -> None:
    assert set(agentrun.__all__) == PUBLIC
    assert len(agentrun.__all__) == len(PUBLIC), "duplicates in __all__"
    for name in agentrun.__all__:
        assert hasattr(agentrun, name), name


def test_error_tree() -> None:
    assert issubclass(agentrun.ProcessExitError, agentrun.SessionTerminatedError)
    assert issubclass(agentrun.TurnTimeoutError, agentrun.TurnError)
    assert issubclass(agentrun.NoResultError, agentrun.TurnError)
    assert issubclass(agentrun.OutputValidationError, agentrun.TurnError)
    assert agentrun.OutputValidationError.error_code == "output_validation"
    assert issubclass(agentrun.NotAuthenticatedError, agentrun.AgentAccountError)
    assert issubclass(agentrun.QuotaExceededError, agentrun.AgentAccountError)
    assert issubclass(agentrun.AgentAccountError, agentrun.TurnError)
    assert issubclass(agentrun.LineTooLongError, agentrun.ProtocolError)
    assert issubclass(agentrun.ConfigurationError, ValueError)
    for name in agentrun.__all__:
        obj = getattr(agentrun, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, agentrun.AgentrunError), name
    err = agentrun.ProcessExitError("died", exit_code=2, stderr_tail="line1\nline2\n")
    assert "line2" in str(err) and err.exit_code == 2


def test_unknown_message_types_pass_through() -> None:
    known = Message(type="text", text="hi")
    assert known.type is MessageType.TEXT
    future = Message(type="hologram", data={"x": 1})
    assert future.type == "hologram"
    assert json.loads(future.model_dump_json())["type"] == "hologram"
    assert Message(type="text_delta").is_delta and not known.is_delta


def test_messages_are_frozen_and_raw_is_not_serialized() -> None:
    message = Message(type="text", text="hi", raw={"secret": "wire"})
    with pytest.raises(ValueError, match="frozen"):
        message.text = "changed"  # type: ignore[misc]
    assert "wire" not in message.model_dump_json()
    assert message.raw == {"secret": "wire"}


def test_context_window_message_repeats_numbers_in_usage() -> None:
    reading = agentrun.ContextWindow(
        used_tokens=50, size_tokens=200, used_source="call_usage", size_source="catalog"
    )
    message = Message.context_window(reading)
    assert message.usage is not None
    assert (message.usage.context_used_tokens, message.usage.context_size_tokens) == (50, 200)
    assert reading.fraction == 0.25
    assert agentrun.ContextWindow(used_tokens=5).fraction is None


opt_int = st.none() | st.integers(min_value=0, max_value=10**9)


@given(opt_int, opt_int, opt_int, opt_int)
def test_usage_addition(a: int | None, b: int | None, c: int | None, d: int | None) -> None:
    x = Usage(input_tokens=a, output_tokens=b)
    y = Usage(input_tokens=c, output_tokens=d)
    total = x + y
    for left, right, got in ((a, c, total.input_tokens), (b, d, total.output_tokens)):
        if left is None and right is None:
            assert got is None
        else:
            assert got == (left or 0) + (right or 0)


_any_count = st.none() | st.integers(min_value=-5, max_value=10**12)
_any_usage = st.builds(
    Usage,
    input_tokens=_any_count,
    output_tokens=_any_count,
    cache_read_tokens=_any_count,
    cache_write_tokens=_any_count,
    thinking_tokens=_any_count,
    cost_usd=st.none() | st.floats(-1, 1e6) | st.integers(-1, 10**6),
    context_used_tokens=_any_count,
    context_size_tokens=_any_count,
    whole_prompt_tokens=_any_count,
    answer_tokens=_any_count,
    usage_source=st.none() | st.sampled_from(get_args(UsageSource)),
    cost_source=st.none() | st.sampled_from(get_args(UsageSource)),
)


_count = st.none() | st.integers(min_value=-(10**12), max_value=10**12)
_cost = st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 10**6)
_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "thinking_tokens",
    "context_used_tokens",
    "context_size_tokens",
    "whole_prompt_tokens",
    "answer_tokens",
)


def _reported(value: float | None) -> bool:
    return value is not None and 0 <= value < float("inf")


@example(counts={"input_tokens": -1}, cost=float("nan"))
@example(counts={}, cost=-float("inf"))
@example(counts={}, cost=float("inf"))
@given(counts=st.dictionaries(st.sampled_from(_COUNTS), _count), cost=_cost)
def test_usage_reports_no_negative_nan_or_infinite_figure(
    counts: dict[str, int | None], cost: float | None
) -> None:
    """Whatever an agent or a file says, a figure below zero, NaN or infinite is not reported
    (``None``), and every other figure is kept as it was given."""
    usage = Usage.model_validate({**counts, "cost_usd": cost})
    for name, value in {**counts, "cost_usd": cost}.items():
        got = getattr(usage, name)
        assert got == (value if _reported(value) else None), name
        assert got is None or 0 <= got < float("inf")


def test_costs_that_add_up_to_infinity_are_not_reported() -> None:
    huge = Usage(cost_usd=1e308, input_tokens=1)
    total = huge + huge
    assert (total.cost_usd, total.input_tokens) == (None, 2)


@pytest.mark.parametrize("count", [float("nan"), float("inf"), -float("inf"), 1.5])
def test_a_count_that_is_no_whole_number_is_refused(count: float) -> None:
    with pytest.raises(ValidationError):
        Usage(input_tokens=count)  # pyright: ignore[reportArgumentType]


@given(_any_usage | st.builds(Usage), _any_usage | st.builds(Usage))
def test_a_sum_of_usages_reports_no_negative_or_nan_figure(x: Usage, y: Usage) -> None:
    """Sums are assembled: each is what validating its figures makes, and every figure of a
    sum is a reported one."""
    total = x + y
    _same_model(total, Usage.model_validate(vars(total)))
    assert total.model_fields_set == set(Usage.model_fields)
    for name in (*_COUNTS, "cost_usd"):
        got = getattr(total, name)
        assert got is None or 0 <= got < float("inf")
    assert json.loads(total.model_dump_json())  # NaN would not survive the JSON


def test_prompt_tokens_is_input_plus_cache() -> None:
    assert Usage(
        input_tokens=12, cache_read_tokens=8192, cache_write_tokens=2048
    ).prompt_tokens == (10252)
    assert Usage(output_tokens=3).prompt_tokens is None


def test_figures_reported_without_their_split_count_in_the_prompt_and_in_sums() -> None:
    # Gemini CLI's whole prompt (cache reads inside) and output without thoughts: their own
    # fields, counted in the whole prompt, summed over turns, never the split's.
    gemini = Usage(whole_prompt_tokens=24_000, answer_tokens=40)
    assert gemini.prompt_tokens == 24_000
    assert (gemini.input_tokens, gemini.output_tokens) == (None, None)
    total = gemini + Usage(whole_prompt_tokens=12_000, answer_tokens=3)
    assert (total.whole_prompt_tokens, total.answer_tokens) == (36_000, 43)
    mixed = total + Usage(input_tokens=10, cache_read_tokens=5)
    assert mixed.prompt_tokens == 36_015
    assert Usage(whole_prompt_tokens=-1).whole_prompt_tokens is None


def test_session_validation_is_typed_and_names_the_option() -> None:
    with pytest.raises(ConfigurationError) as info:
        SessionOptions(model="--dangerously-skip-permissions")
    assert info.value.option == "model"
    with pytest.raises(ConfigurationError, match="absolute"):
        SessionOptions(add_dirs=("relative/dir",))
    with pytest.raises(ConfigurationError, match="max_turns"):
        SessionOptions(max_turns=0)
    with pytest.raises(ConfigurationError, match="effort"):
        SessionOptions(effort="extreme")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="fork"):
        SessionOptions(fork=True)
    with pytest.raises(ConfigurationError, match="engine"):
        SessionOptions(options={"no_engine_prefix": "x"})


def test_session_env_errors_never_echo_values() -> None:
    with pytest.raises(ConfigurationError) as info:
        SessionOptions(env={"API_KEY": "sk-secret\0"})
    assert "API_KEY" in str(info.value)
    assert "sk-secret" not in str(info.value)
    with pytest.raises(ConfigurationError):
        SessionOptions(env={"A=B": "x"})


def test_session_is_immutable_and_cwd_absolute() -> None:
    session = SessionOptions(cwd=".", options={"claude.permission_mode": "plan"})
    assert session.cwd is not None and session.cwd.startswith("/")
    assert session.option("claude", "permission_mode") == "plan"
    with pytest.raises(ValueError, match="frozen"):
        session.model = "x"  # type: ignore[misc]


OPTIONS = (
    PermissionOption(option_id="once", kind="allow_once"),
    PermissionOption(option_id="always", kind="allow_always"),
    PermissionOption(option_id="reject", kind="reject_once"),
)


def test_permission_decision_picks_the_matching_option() -> None:
    assert PermissionDecision.allow_once().choose(OPTIONS) == OPTIONS[0]
    assert PermissionDecision.allow_always().choose(OPTIONS) == OPTIONS[1]
    assert PermissionDecision.deny().choose(OPTIONS) == OPTIONS[2]
    assert PermissionDecision.deny(always=True).choose(OPTIONS) == OPTIONS[2]
    # A one-off approval is never widened into a standing one.
    assert PermissionDecision.allow_once().choose(OPTIONS[1:]) is None
    assert PermissionDecision(allow=True, option_id="always").choose(OPTIONS) == OPTIONS[1]


def test_unknown_engine_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unknown engine"):
        agentrun.get_engine("nope")
    assert {"claude", "opencode", "acp", "opencode-acp", "scripted", "replay"} <= set(
        agentrun.engine_names()
    )


def _same_model(ours: object, theirs: object) -> None:
    """The same class, the same fields in the same order, the same fields set, at every
    level: what a model built without validation must be to stand for a validated one."""
    assert type(ours) is type(theirs)
    if not isinstance(ours, BaseModel):
        assert ours == theirs
        return
    assert isinstance(theirs, BaseModel)
    assert list(vars(ours)) == list(vars(theirs))
    assert ours.model_fields_set == theirs.model_fields_set
    assert ours.__pydantic_extra__ == theirs.__pydantic_extra__
    assert ours.__pydantic_private__ == theirs.__pydantic_private__
    for name, value in vars(ours).items():
        _same_model(value, vars(theirs)[name])
    assert ours.model_dump_json() == theirs.model_dump_json()
    assert ours.model_dump_json(exclude_unset=True) == theirs.model_dump_json(exclude_unset=True)


_short = st.none() | st.text(max_size=4)
_tool = st.builds(
    ToolCall,
    id=_short,
    name=_short,
    input=st.none() | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    is_error=st.none() | st.booleans(),
)
_context = st.builds(
    ContextWindow,
    used_tokens=st.none() | st.integers(0, 10**6),
    size_tokens=st.none() | st.integers(0, 10**6),
    used_source=st.none() | st.sampled_from(get_args(ContextSource)),
)
_error = st.builds(ErrorInfo, message=st.text(max_size=4), status=st.none() | st.integers(0, 599))
#: Validated models of the vocabulary, nested ones included, with only some fields given.
_validated = st.one_of(
    _any_usage,
    _tool,
    _context,
    _error,
    st.builds(InitMeta, model=_short, tools=st.none() | st.tuples(st.text(max_size=3))),
    st.builds(
        Message,
        type=st.sampled_from([*MessageType, "brand_new"]),
        text=_short,
        tool=st.none() | _tool,
        usage=st.none() | _any_usage,
        context=st.none() | _context,
        error=st.none() | _error,
        replayed=st.booleans(),
        raw=st.none() | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    ),
)


@given(_validated)
def test_assemble_is_model_construct_and_of_validated_values_what_validation_makes(
    model: BaseModel,
) -> None:
    """The library's one way to build a model without validating it: the fields a validated
    model has set, given back, make the same model (to the fields set and both JSON forms)
    as validation made it, and what pydantic's own ``model_construct`` makes of them."""
    cls: Any = type(model)
    given_fields = {name: getattr(model, name) for name in model.model_fields_set}
    made = assemble(cls, given_fields)
    _same_model(made, model)
    _same_model(made, cls.model_construct(**given_fields))
    assert made.model_dump() == cls.model_validate(given_fields).model_dump()
    every = dict(vars(model))
    marked = set(list(every)[:1])
    _same_model(assemble(cls, every, marked), cls.model_construct(marked, **every))


def test_assemble_refuses_a_model_it_cannot_build() -> None:
    """A model taking extra fields would need them sorted from its own: it takes its
    constructor."""

    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        x: int = 0

    with pytest.raises(TypeError, match="Open"):
        assemble(Open, {"x": 1})


class _Name(str):
    """A str subclass: validation makes a plain str of it."""


opt_text = st.none() | st.text(max_size=8) | st.text(max_size=8).map(_Name)


@given(
    agent=st.text(max_size=8) | st.text(max_size=8).map(_Name),
    model=opt_text,
    version=opt_text,
    session_id=opt_text,
    cwd=opt_text,
    permission_mode=opt_text,
    process=st.none() | st.builds(ProcessMeta, pid=st.integers(0, 99), binary=st.text(max_size=4)),
    raw=st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
def test_an_init_message_is_what_the_validating_constructors_make(
    agent: str,
    model: str | None,
    version: str | None,
    session_id: str | None,
    cwd: str | None,
    permission_mode: str | None,
    process: ProcessMeta | None,
    raw: dict[str, int] | None,
) -> None:
    made = Message.init_message(
        agent,
        model=model,
        version=version,
        session_id=session_id,
        cwd=cwd,
        permission_mode=permission_mode,
        process=process,
        raw=raw,
    )
    validated = Message(
        type=MessageType.INIT,
        init=InitMeta(
            model=model,
            agent_name=agent,
            agent_version=version,
            session_id=session_id,
            cwd=cwd,
            permission_mode=permission_mode,
        ),
        process=process,
        resume_id=session_id,
        raw=raw,
    )
    _same_model(made, validated)
    assert made.raw is raw
    assert made.init is not None
    # A value validation converts (a str subclass) is converted.
    assert all(type(v) is str for v in vars(made.init).values() if v is not None)


@given(
    turn=st.none() | st.integers(1, 3),
    number=st.integers(1, 3),
    text=st.none() | st.text(max_size=4),
)
def test_a_message_in_its_turn_is_a_copy_with_the_turn_set(
    turn: int | None, number: int, text: str | None
) -> None:
    message = Message(type=MessageType.TEXT, text=text, turn=turn, raw={"k": 1})
    tagged = message.in_turn(number)
    _same_model(tagged, message.model_copy(update={"turn": number}))
    assert tagged.turn == number and message.turn == turn
    assert (tagged is message) == (turn == number)
    assert tagged.raw is message.raw


_reading_number = (
    st.none()
    | st.integers(-3, 10**7)
    | st.floats(-3, 1e7, allow_nan=False)
    | st.integers(0, 10**6).map(float)
    | st.booleans()
)
_sources = st.none() | st.sampled_from(get_args(ContextSource))


# Every kind of number the validating constructors treat apart, whatever the draw.
@example(used=-3, used_source="agent", reported=None, override=None, model=None)
@example(used=7, used_source="agent", reported=-1, override=None, model=None)
@example(used=7.0, used_source="call_usage", reported=9.0, override=None, model=None)
@example(used=True, used_source="agent", reported=None, override=5, model=None)
@example(used=None, used_source="agent", reported=None, override=None, model="claude-sonnet-4-5")
@given(
    used=_reading_number,
    used_source=_sources,
    reported=st.none() | st.integers(-1, 10**6) | st.integers(1, 10**6).map(float),
    override=st.none() | st.integers(1, 10**6),
    model=st.sampled_from([None, "claude-sonnet-4-5", "no-such-model"]),
)
def test_a_context_reading_is_what_the_validating_constructors_make(
    used: Any,
    used_source: ContextSource | None,
    reported: Any,
    override: int | None,
    model: str | None,
) -> None:
    """Readings are assembled where their numbers are already what validation returns: the
    message must be the one the validating constructors make, a number validation converts
    (a float, a bool) or drops (below zero, in the usage) included."""
    tracker = ContextTracker(model=model, override=override)
    tracker.report_size(reported)
    size, size_source = tracker.size()
    try:
        reading = ContextWindow(
            used_tokens=used,
            size_tokens=size,
            used_source=used_source if used is not None else None,
            size_source=size_source,
        )
    except ValidationError:
        # Not a number validation takes: the tracker refuses it alike.
        with pytest.raises(ValidationError):
            tracker._reading(used, used_source)  # pyright: ignore[reportPrivateUsage]
        return
    made = tracker._reading(used, used_source, raw={"r": 1})  # pyright: ignore[reportPrivateUsage]
    validated = Message(
        type=MessageType.CONTEXT_WINDOW,
        context=reading,
        usage=Usage(
            context_used_tokens=reading.used_tokens, context_size_tokens=reading.size_tokens
        ),
        raw={"r": 1},
    )
    _same_model(made, validated)
    assert made.model_dump_json() == validated.model_dump_json()
    _same_model(Message.context_window(reading, raw={"r": 1}), validated)


@pytest.mark.parametrize("model", [5, ["gpt"], {"id": "m"}])
def test_an_init_message_refuses_what_is_not_text(model: object) -> None:
    # Text or nothing is assembled; anything else goes through validation, which refuses it.
    with pytest.raises(ValidationError):
        Message.init_message("agent", model=model)  # type: ignore[arg-type]
