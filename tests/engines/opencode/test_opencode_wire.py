"""OpenCode's wire schema against the decoding path: a line read in one pass from its bytes
(``feed_line``) makes exactly the messages the decoded line makes (``feed_decoded``), and a line
the schema does not take is left to the decoding path."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticSerializationError
from repo_paths import FIXTURES as FIXTURE_ROOT

from agentrun import Message
from agentrun._bases.translator import frame_problem_message, line_feed, wire_event
from agentrun._wire.framing import JsonProblem, LineFramer, decode_json_line
from agentrun.engines._replay import read_events, translate_events, translate_lines
from agentrun.engines.opencode import OpenCodeTranslator
from agentrun.engines.opencode._wire import event_schema

TRANSCRIPTS = sorted((FIXTURE_ROOT / "opencode").rglob("*.jsonl"))


# -- comparing what both paths made -------------------------------------------------------------


def _raw(value: Any, *, ordered: bool = True) -> str:
    """The raw event as JSON text, keys in their order unless not ``ordered`` (bytes and other
    values by repr)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=not ordered)
    return repr(value)


def _dump(message: Message, **options: Any) -> str:
    try:
        return message.model_dump_json(**options)
    except PydanticSerializationError:  # a lone surrogate the agent escaped, on both paths
        return "not JSON: " + repr(message.model_dump(**options))


def _seen(messages: list[Message], *, ordered: bool = True) -> list[tuple[str, str, str, str]]:
    return [
        (
            _dump(m),
            _dump(m, exclude_unset=True),
            repr(sorted(m.model_fields_set)),
            _raw(m.raw, ordered=ordered),
        )
        for m in messages
    ]


def _both_paths(lines: list[bytes]) -> tuple[list[Message], list[Message], int]:
    """The messages of ``lines`` read as the library reads them (``line_feed``: the schema
    first) and as decoded events only, and how many lines the schema took."""
    fast = OpenCodeTranslator(model="fake/fake-model")
    slow = OpenCodeTranslator(model="fake/fake-model")
    feed = line_feed(fast, engine="opencode")
    taken = 0
    one_pass: list[Message] = []
    decoded: list[Message] = []
    for line in lines:
        if wire_event(event_schema(), line) is not None:
            taken += 1
        one_pass += feed(line)
        value = decode_json_line(line)
        if isinstance(value, JsonProblem):
            decoded.append(frame_problem_message(value, engine="opencode"))
        else:
            decoded += slow.feed_decoded(value)
    one_pass += fast.finish()
    decoded += slow.finish()
    return one_pass, decoded, taken


# -- events written as OpenCode writes them, and otherwise ----------------------------------------


@dataclass(frozen=True)
class Obj:
    """A JSON object written key by key: any order, repeated keys allowed."""

    items: tuple[tuple[str, Any], ...]


def _encode(value: Any) -> str:
    if isinstance(value, Obj):
        return "{" + ",".join(f"{json.dumps(k)}:{_encode(v)}" for k, v in value.items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode(v) for v in value) + "]"  # pyright: ignore[reportUnknownVariableType]
    return json.dumps(value)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8)
)
#: Any JSON value; its objects' keys are none that OpenCode writes (a value of another type where
#: an object is expected is refused, never taken in another key order).
anything = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "k"]), inner, max_size=3)
    ),
    max_leaves=6,
)
strings = st.sampled_from(["", "ses_1", "msg_1", "call_1", "bash", "stop", "x y"]) | st.text(
    max_size=6
)
counts = st.integers(min_value=0, max_value=10**7)
costs = st.floats(min_value=0, max_value=1, allow_nan=False) | st.integers(0, 3)


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value of the expected type, sometimes any JSON value at all."""
    return st.integers(0, 9).flatmap(lambda pick: good if pick else anything)


@st.composite
def obj(draw: st.DrawFn, fields: list[tuple[str, st.SearchStrategy[Any]]], keep: int = 0) -> Obj:
    """An object with most of ``fields`` (the first ``keep`` always) in their order, maybe an
    extra key, maybe a repeated one; in another order when the test draws ``shuffled``."""
    items = [
        (key, draw(values))
        for index, (key, values) in enumerate(fields)
        if index < keep or draw(st.integers(0, 9))
    ]
    if draw(st.integers(0, 9)) == 0:
        items.append((draw(st.sampled_from(["extra", "future"])), draw(anything)))
    if items and draw(st.integers(0, 19)) == 0:
        key, _ = draw(st.sampled_from(items))
        items.append((key, draw(anything)))
    if items and draw(SHUFFLED):
        items = draw(st.permutations(items))
    return Obj(tuple(items))


#: Whether the objects of one example are written in another order than OpenCode's.
SHUFFLED: st.SearchStrategy[bool] = st.shared(st.booleans(), key="shuffled")


text_part = obj(
    [
        ("id", strings),
        ("messageID", mostly(strings)),
        ("sessionID", strings),
        ("type", strings),
        ("text", mostly(strings)),
        ("time", mostly(st.fixed_dictionaries({"start": counts, "end": counts}))),
    ]
)
state = obj(
    [
        ("status", mostly(st.sampled_from(["completed", "error", "running", ""]))),
        ("input", anything),
        ("output", anything),
        (
            "error",
            mostly(
                st.sampled_from(
                    ["The user rejected permission to use this specific tool call.", "boom"]
                )
            ),
        ),
        ("metadata", anything),
        ("title", mostly(strings)),
        ("time", mostly(st.dictionaries(st.sampled_from(["start", "end"]), anything))),
    ]
)
tool_part = obj(
    [
        ("type", strings),
        ("tool", mostly(strings)),
        ("callID", mostly(strings)),
        ("state", mostly(state)),
        ("id", mostly(strings)),
        ("sessionID", strings),
        ("messageID", mostly(strings)),
    ]
)
cache = obj([("write", mostly(counts)), ("read", mostly(counts))])
tokens = obj(
    [
        ("total", counts),
        ("input", mostly(counts)),
        ("output", mostly(counts)),
        ("reasoning", mostly(counts)),
        ("cache", mostly(cache)),
    ]
)
finish_part = obj(
    [
        ("id", strings),
        ("reason", mostly(st.sampled_from(["stop", "tool-calls", "length", ""]))),
        ("messageID", strings),
        ("sessionID", strings),
        ("type", strings),
        ("tokens", mostly(tokens)),
        ("cost", mostly(costs)),
    ]
)
start_part = obj(
    [("id", strings), ("messageID", mostly(strings)), ("sessionID", strings), ("type", strings)]
)
error_data = obj(
    [
        ("message", mostly(strings)),
        ("statusCode", mostly(st.sampled_from([401, 500, 0, -1]))),
        ("isRetryable", anything),
        ("responseHeaders", anything),
        ("responseBody", anything),
        ("metadata", anything),
        ("ref", anything),
    ]
)
error_body = obj([("name", mostly(strings)), ("data", mostly(error_data)), ("message", strings)])

PARTS: dict[str, st.SearchStrategy[Any]] = {
    "step_start": start_part,
    "text": text_part,
    "reasoning": text_part,
    "tool_use": tool_part,
    "step_finish": finish_part,
    "future_thing": anything,
}


@st.composite
def events(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([*PARTS, "error"]))
    body = ("error", error_body) if kind == "error" else ("part", PARTS[kind])
    fields: list[tuple[str, st.SearchStrategy[Any]]] = [
        ("type", mostly(st.just(kind))),
        (body[0], mostly(body[1])),
        ("timestamp", counts),
        ("sessionID", mostly(strings)),
    ]
    written = draw(obj(fields, keep=2))
    # OpenCode's order: type, timestamp, sessionID, then the part (or error).
    order = ["type", "timestamp", "sessionID", body[0]]
    if not draw(SHUFFLED):
        written = Obj(tuple(sorted(written.items, key=lambda item: _position(order, item[0]))))
    return _encode(written).encode()


def _position(order: list[str], key: str) -> int:
    return order.index(key) if key in order else len(order)


odd_lines = st.sampled_from(
    [
        b"not json",
        b"[1, 2]",
        b'"text"',
        b"\xff\xfe",
        b'{"type":"text","part":{"text":"\\ud800"}}',
        b'{"type":"text","sessionID":"s","part":{"text":"a","text":"b"}}',
        b'{"type":"text","type":"step_start","part":{"messageID":"m"}}',
        b'{"type":"step_finish","part":{"tokens":{"input":1.0}, "cost":NaN}}',
        b'{"type":"step_finish","part":{"cost":Infinity}}',
        b'{"type":"step_finish","part":{"tokens":{"input":1e400}}}',
        b'{"type":"tool_use","part":{"state":{"status":"completed","input":'
        + b"[" * 120
        + b"]" * 120
        + b"}}}",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.integers(0, 3).flatmap(lambda pick: events() if pick else odd_lines),
        min_size=1,
        max_size=6,
    ),
    SHUFFLED,
)
def test_a_line_makes_the_same_messages_on_both_paths(lines: list[bytes], shuffled: bool) -> None:
    one_pass, decoded, taken = _both_paths(lines)
    event(f"lines the schema took: {taken} of {len(lines)}")
    # The messages alike, and the events they keep (raw) alike: with OpenCode's keys in
    # OpenCode's order as decoding keeps them, unless they came in another order.
    assert _seen(one_pass, ordered=not shuffled) == _seen(decoded, ordered=not shuffled)


# -- the recordings --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_every_recorded_line_is_read_in_one_pass(path: Path) -> None:
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    translator = OpenCodeTranslator()
    assert all(translator.feed_line(line) is not None for line in lines)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_a_recording_reads_the_same_on_both_paths(path: Path) -> None:
    framer = LineFramer()
    items = [*framer.feed(path.read_bytes()), *framer.flush()]
    one_pass = list(translate_lines(items, OpenCodeTranslator(), engine="opencode"))
    decoded = list(translate_events(read_events(path, engine="opencode"), OpenCodeTranslator()))
    # Also the events the messages keep (raw): OpenCode's keys in OpenCode's order.
    assert _seen(one_pass) == _seen(decoded)


def test_the_schema_refuses_what_decoding_treats_specially() -> None:
    schema = event_schema()
    refused = [
        b'{"type":"future_thing","part":{}}',
        b'{"part":{"text":"a"}}',
        b'{"type":"text"}',
        b'{"type":"text","part":{"text":1}}',
        b'{"type":"text","part":"text"}',
        b'{"type":"step_finish","part":{"tokens":{"input":-1}}}',
        b'{"type":"step_finish","part":{"tokens":{"input":1.0}}}',
        b'{"type":"step_finish","part":{"tokens":{"input":true}}}',
        b'{"type":"step_finish","part":{"cost":-0.5}}',
        b'{"type":"step_finish","part":{"cost":NaN}}',
        b'{"type":"error","error":{"data":{"statusCode":"500"}}}',
        b'{"type":"step_start","sessionID":7,"part":{}}',
    ]
    for line in refused:
        with pytest.raises(ValueError):
            schema.validate_json(line)
    # An integer cost stays an integer, as decoding leaves it.
    taken = schema.validate_json(b'{"type":"step_finish","part":{"cost":2}}')
    assert type(taken["part"]["cost"]) is int
