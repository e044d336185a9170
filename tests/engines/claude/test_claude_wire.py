"""Claude Code's reader builds the messages of the common events from the values it checked,
without validating them (``assemble``): every message it makes, at every level, must be exactly
what validating its own values makes, on every recorded transcript and on generated, mutated
and malformed events. And a line read from its bytes (replay, ``line_feed``) makes the same
messages as the event handed over decoded (``feed``), and leaves the translator in the same
state."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from repo_paths import FIXTURES

from agentrun._bases.translator import decode_line, line_feed
from agentrun._vocabulary.messages import Message, MessageType, Usage, assemble
from agentrun.engines.claude import ClaudeTranslator

TRANSCRIPTS = sorted((FIXTURES / "claude").rglob("*.jsonl"))


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def _events() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in TRANSCRIPTS:
        for line in _lines(path):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                found.append(event)  # pyright: ignore[reportUnknownArgumentType]
    return found


EVENTS = _events()


def _rebuilt(value: Any) -> Any:
    """``value`` made again by validation: a model from the fields it has set (each rebuilt
    first), a tuple item by item, anything else as it is."""
    if isinstance(value, BaseModel):
        fields = {name: _rebuilt(getattr(value, name)) for name in value.model_fields_set}
        return type(value).model_validate(fields)
    if isinstance(value, tuple):
        return tuple(_rebuilt(item) for item in value)  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return value


def _fields_set(value: Any) -> Any:
    """The fields set at every level of a model (what ``exclude_unset`` dumps decide on)."""
    if isinstance(value, BaseModel):
        return {name: _fields_set(getattr(value, name)) for name in sorted(value.model_fields_set)}
    if isinstance(value, tuple):
        return [_fields_set(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return None


def _check(messages: list[Message]) -> None:
    for message in messages:
        again = _rebuilt(message)
        assert message == again, message
        assert message.model_dump_json() == again.model_dump_json()
        assert message.model_dump_json(exclude_unset=True) == again.model_dump_json(
            exclude_unset=True
        )
        assert _fields_set(message) == _fields_set(again)
        assert message.raw is again.raw


def _state(translator: ClaudeTranslator) -> str:
    kept = {k: v for k, v in vars(translator).items() if k != "tracker"}
    tracker = translator.tracker
    return repr((kept, tracker.last, tracker.size(), tracker.model))


def _shown(messages: list[Message]) -> list[tuple[str, str, str, list[str]]]:
    """What a message shows: all fields, the fields set, its raw event (in its key order)."""
    return [
        (
            m.model_dump_json(),
            m.model_dump_json(exclude_unset=True),
            repr(m.raw),
            sorted(m.model_fields_set),
        )
        for m in messages
    ]


def _compare(lines: list[bytes]) -> None:
    """Every message checked against its validation; the line's bytes and the decoded event
    read alike."""
    from_bytes, decoded = ClaudeTranslator(), ClaudeTranslator()
    feed = line_feed(from_bytes, engine="claude")
    for line in lines:
        out = feed(line)
        _check(out)
        event, problem = decode_line(line, engine="claude")
        again = [problem] if problem is not None else decoded.feed(event)
        assert _shown(out) == _shown(again), line
    assert _shown(from_bytes.finish()) == _shown(decoded.finish())
    assert _state(from_bytes) == _state(decoded)


# -- recorded transcripts ------------------------------------------------------------------------


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_message_of_a_recorded_transcript_is_what_validation_makes(path: Path) -> None:
    _compare(_lines(path))


def test_the_check_sees_a_value_validation_would_change() -> None:
    """What the tests here rely on: a message assembled of a value its model would not take
    as it is fails the check."""
    usage = assemble(Usage, {"input_tokens": -1})  # validation: not reported
    with pytest.raises(AssertionError):
        _check([assemble(Message, {"type": MessageType.SYSTEM, "usage": usage})])
    _check([assemble(Message, {"type": MessageType.SYSTEM, "usage": Usage(input_tokens=1)})])


# -- generated events ------------------------------------------------------------------------

#: Keys the reader reads somewhere: mutations aim at them most of the time.
READ = {
    "type", "subtype", "message", "content", "text", "thinking", "id", "name", "input", "model",
    "usage", "input_tokens", "output_tokens", "cache_read_input_tokens",
    "cache_creation_input_tokens", "output_tokens_details", "thinking_tokens", "event", "index",
    "delta", "partial_json", "stop_reason", "content_block", "abandoned_blocks", "api_message_id",
    "parent_tool_use_id", "tool_use_id", "is_error", "isReplay", "isSynthetic", "session_id",
    "tools", "cwd", "claude_code_version", "permissionMode", "result", "terminal_reason",
    "api_error_status", "errors", "total_cost_usd", "modelUsage", "model_usage_since_last_result",
    "inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens",
    "thinkingTokens", "costUSD", "contextWindow", "permission_denials", "tool_name",
    "tool_input", "is_api_error_message", "num_turns",
}  # fmt: skip

scalars = st.sampled_from(
    [
        *(None, True, False, 0, 1, -1, 7, 2**70, 1.0, 2.5, -0.5, float("nan"), float("inf")),
        *("", "x", "text", "thinking", "tool_use", "tool_result", "success", "init", "status"),
        *("<synthetic>", "text_delta", "input_json_delta", "message_start", "message_delta"),
        *("message_stop", "content_block_start", "content_block_delta", "max_turns"),
        *("error_during_execution", "aborted_streaming", "No conversation found"),
        *("claude-opus-5-5", "server_tool_use"),
    ]
) | st.text(max_size=4)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(sorted(READ)) | st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=5,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths: list[tuple[Any, ...]] = [prefix]
    if len(prefix) < 6:
        if isinstance(value, dict):
            for key, child in value.items():  # pyright: ignore[reportUnknownVariableType]
                paths.extend(_paths(child, (*prefix, key)))
        elif isinstance(value, list):
            for index, child in enumerate(value[:4]):  # pyright: ignore[reportUnknownArgumentType]
                paths.extend(_paths(child, (*prefix, index)))
    return paths


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _mutate(draw: st.DrawFn, event: Any) -> Any:
    paths = _paths(event)
    aimed = [p for p in paths if p and p[-1] in READ]
    path = draw(st.sampled_from(aimed if aimed and draw(st.integers(0, 4)) else paths))
    op = draw(
        st.sampled_from(["replace", "replace", "delete", "empty", "clone", "reorder", "negate"])
        | st.sampled_from(["nest", "truncate"])
    )
    if not path:
        return draw(values) if op == "replace" else event
    parent, key = _at(event, path[:-1]), path[-1]
    target = parent[key]
    if op == "replace":
        parent[key] = draw(values)
    elif op == "delete":
        del parent[key]
    elif op == "empty":
        parent[key] = type(target)() if isinstance(target, (str, list, dict, int)) else None
    elif op == "clone" and isinstance(target, dict) and target:
        # Another entry like one there (a second model in a usage table, say).
        original = draw(st.sampled_from(sorted(target)))  # pyright: ignore[reportUnknownArgumentType]
        target[f"{original}-2"] = copy.deepcopy(target[original])
    elif op == "clone" and isinstance(target, list) and target:
        target.append(copy.deepcopy(draw(st.sampled_from(target))))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    elif op == "truncate" and isinstance(target, (str, list)):
        parent[key] = target[: draw(st.integers(0, max(len(target) - 1, 0)))]  # pyright: ignore[reportUnknownArgumentType]
    elif op == "reorder" and isinstance(target, dict):
        items = list(target.items())  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
        parent[key] = dict(draw(st.permutations(items)))
    elif op == "negate" and isinstance(target, (int, float)) and not isinstance(target, bool):
        parent[key] = -target - 1
    elif op == "nest":
        nested: Any = {"deep": True}
        for _ in range(draw(st.sampled_from([30, 120, 300]))):
            nested = {"x": [nested]}
        parent[key] = nested
    return event


#: Events of kinds no recording has, in the shapes of docs/engines/claude.md.
EXTRA: list[dict[str, Any]] = [
    {
        "type": "system",
        "subtype": "background_tasks_changed",
        "tasks": [{"task_id": "t1", "description": "sleep", "task_type": "local_bash"}],
        "session_id": "s",
    },
    {"type": "system", "subtype": "task_started", "task_id": "t1", "tool_use_id": "toolu_1"},
    {"type": "system", "subtype": "background_tasks_changed", "tasks": [], "session_id": "s"},
    {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 10,
        "retry_delay_ms": 557,
        "error_status": 500,
        "error": "server_error",
    },
    {
        "type": "system",
        "subtype": "compact_boundary",
        "compact_metadata": {"trigger": "manual", "pre_tokens": 12000, "post_tokens": 3000},
    },
    {
        "type": "stream_event",
        "event": {"type": "message_stop", "abandoned_blocks": [{"index": 0, "type": "text"}]},
        "parent_tool_use_id": None,
        "api_message_id": "msg_1",
    },
    {"type": "user", "message": {"role": "user", "content": "go on"}, "isSynthetic": True},
    {"type": "rate_limit_event", "subtype": "warning", "limit": 1},
]
KINDS: dict[str, list[dict[str, Any]]] = {}
for _event in [*EVENTS, *EXTRA]:
    KINDS.setdefault(f"{_event.get('type')}/{_event.get('subtype')}", []).append(_event)


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    start = draw(st.integers(0, len(EVENTS) - 1))
    stream = [copy.deepcopy(e) for e in EVENTS[start : start + draw(st.integers(1, 10))]]
    for _ in range(draw(st.integers(0, 3))):
        # Any kind as likely as any other, wherever in the stream.
        kind = KINDS[draw(st.sampled_from(sorted(KINDS)))]
        stream.insert(draw(st.integers(0, len(stream))), copy.deepcopy(draw(st.sampled_from(kind))))
    for _ in range(draw(st.integers(0, 6))):
        index = draw(st.integers(0, len(stream) - 1))
        stream[index] = _mutate(draw, stream[index])
    lines = [json.dumps(e, allow_nan=True).encode() for e in stream]
    if draw(st.booleans()):
        # A line that is not a JSON object: cut, another JSON value, or not UTF-8.
        bad = draw(
            st.sampled_from([lines[0][: len(lines[0]) // 2], b"[1, 2]", b"42", b'"\xff\xfe"'])
        )
        lines.insert(draw(st.integers(0, len(lines))), bad)
    return lines


@settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(lines=streams())
def test_every_message_of_a_mutated_or_malformed_stream_is_what_validation_makes(
    lines: list[bytes],
) -> None:
    _compare(lines)


# -- edges, each shown on its own ------------------------------------------------------------------


def _first(kind: str, inner: str | None = None) -> dict[str, Any]:
    """A deep copy of the first recorded event of a kind (and stream event type); a result
    is one with per-result usage."""
    for event in EVENTS:
        if f"{event.get('type')}/{event.get('subtype')}" != kind:
            continue
        if inner is not None and event["event"]["type"] != inner:
            continue
        if kind.startswith("result/") and not event.get("model_usage_since_last_result"):
            continue
        return copy.deepcopy(event)
    raise LookupError(kind)


def _result_with(**changes: Any) -> dict[str, Any]:
    event = _first("result/success")
    event.update(changes)
    return event


def _two_models(first: float, second: float | None) -> dict[str, Any]:
    event = _first("result/success")
    (name, entry), *_ = event["model_usage_since_last_result"].items()
    other = {**entry, "costUSD": second}
    event["model_usage_since_last_result"] = {name: {**entry, "costUSD": first}, "other": other}
    return event


def _started(message_id: str, *, parent: str | None = None) -> dict[str, Any]:
    event = _first("stream_event/None", "message_start")
    event["event"]["message"]["id"] = message_id
    event["parent_tool_use_id"] = parent
    return event


def _delta(usage: Any = ..., *, parent: str | None = None) -> dict[str, Any]:
    event = _first("stream_event/None", "message_delta")
    if usage is ...:
        del event["event"]["usage"]
    else:
        event["event"]["usage"] = usage
    event["parent_tool_use_id"] = parent
    event["event"]["delta"]["stop_reason"] = "tool_use"
    return event


def _init(**changes: Any) -> dict[str, Any]:
    event = _first("system/init")
    event.update(changes)
    return event


EDGES: dict[str, list[dict[str, Any]]] = {
    "costs of two models are summed and rounded": [_init(), _two_models(0.1, 0.2)],
    "a model without a cost": [_init(), _two_models(0.1, None)],
    "a negative cost is not reported": [_init(), _two_models(-0.5, 0.2)],
    "a negative token count is not reported": [
        _init(),
        _result_with(model_usage_since_last_result=None, usage={"input_tokens": -3}),
    ],
    "the session total without per-result figures": [
        _init(),
        _result_with(model_usage_since_last_result=None, total_cost_usd=2),
        _result_with(model_usage_since_last_result=None, total_cost_usd=1.25),
    ],
    "a negative session total is not reported": [
        _init(),
        _result_with(model_usage_since_last_result=None, total_cost_usd=-1),
        _result_with(model_usage_since_last_result=None, total_cost_usd=0.5),
    ],
    "an init with no tools": [_init(tools=[])],
    "an init while background tasks run": [EXTRA[0], _init(), EXTRA[1], _first("result/success")],
    "a call started without an id takes the stream's": [_started(""), _result_with()],
    "a call started twice is read once": [_started("msg_x"), _started("msg_x")],
    "a subagent's call is not the context": [_started("msg_y", parent="toolu_1")],
    "a call's end without usage": [_delta(), _result_with(stop_reason=None)],
    "a call's end with an empty usage": [_delta({}), _result_with(stop_reason=None)],
    "a call's end with thinking tokens": [
        _delta({"output_tokens": 5, "output_tokens_details": {"thinking_tokens": 3}})
    ],
    "a subagent's stop reason is not the turn's": [
        _delta(parent="toolu_1"),
        _result_with(stop_reason=None),
    ],
    "a failed result's status and denials": [
        _result_with(
            subtype="error_during_execution",
            is_error=True,
            api_error_status=529,
            errors=["overloaded"],
            permission_denials=[{"tool_name": "Bash", "tool_use_id": "t", "tool_input": {"a": 1}}],
        )
    ],
    "a window table whose cost no float holds": [
        _init(),
        _result_with(modelUsage={"claude-opus-5-5": {"costUSD": 10**400, "contextWindow": 9}}),
    ],
    "a system event without a subtype name": [_first("system/status") | {"subtype": ""}],
}


@pytest.mark.parametrize("events", EDGES.values(), ids=EDGES.keys())
def test_every_message_of_an_edge_is_what_validation_makes(events: list[dict[str, Any]]) -> None:
    _compare([json.dumps(e).encode() for e in events])


def test_a_negative_session_total_is_neither_a_cost_nor_what_the_next_is_measured_from() -> None:
    translator = ClaudeTranslator()
    costs: list[float | None] = []
    for total in (-1, 0.5, 0.75):
        event = _result_with(model_usage_since_last_result=None, total_cost_usd=total)
        for message in translator.feed(event):
            if message.type is MessageType.RESULT:
                assert message.usage is not None
                costs.append(message.usage.cost_usd)
    # The first total that counts is the turn's own (the session was not resumed).
    assert costs[0] is None and costs[1:] == [0.5, 0.25]
