"""Codex app-server: a line read through the wire schema from its bytes (``feed_line``) makes
exactly the messages the decoded line makes (``feed_decoded``), whatever the line says.

Recorded sessions are replayed line by line through both paths, as they are and with lines
changed at random (a value replaced by any JSON value, a key dropped or added, keys repeated,
text that is not strict UTF-8), and every message is compared as it serializes, with the fields
it marks set and the agent's event it keeps (``raw``, key order included).
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticSerializationError
from repo_paths import FIXTURES as FIXTURE_ROOT

from agentrun import Message
from agentrun._bases.translator import frame_problem_message, line_feed
from agentrun._wire.framing import JsonProblem, decode_json_line
from agentrun.engines.codex import CodexAppServerTranslator

ENGINE = "codex-app-server"
RECORDED = sorted((FIXTURE_ROOT / ENGINE).glob("*.jsonl"))


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def _shown(message: Message) -> tuple[str, str, list[str], str]:
    try:
        shown = (message.model_dump_json(), message.model_dump_json(exclude_unset=True))
    except PydanticSerializationError:
        # A lone surrogate the agent escaped (which the decoding path lets through, either way
        # the line is read) is no UTF-8: the fields as Python values, in order, instead.
        shown = (repr(message.model_dump()), repr(message.model_dump(exclude_unset=True)))
    return (
        *shown,
        sorted(message.model_fields_set),
        json.dumps(message.raw, default=repr),  # the agent's key order shows here
    )


def _state(translator: CodexAppServerTranslator) -> tuple[Any, ...]:
    usage = translator._usage  # pyright: ignore[reportPrivateUsage]
    return (
        translator.thread_id,
        translator.turn_id,
        translator.model,
        translator._in_turn,  # pyright: ignore[reportPrivateUsage]
        translator._sent,  # pyright: ignore[reportPrivateUsage]
        json.dumps(translator._asked, default=repr),  # pyright: ignore[reportPrivateUsage]
        None if usage is None else usage.model_dump_json(),
        translator.tracker.last,
    )


class _Counting(CodexAppServerTranslator):
    """Counts the events it was given decoded (the lines its wire schema left)."""

    decoded = 0

    def feed_decoded(self, event: Any) -> list[Message]:
        self.decoded += 1
        return super().feed_decoded(event)


def both_paths(lines: list[bytes]) -> int:
    """Feeds ``lines`` through the wire schema (as replay does) and through the decoder alike,
    checking each line's messages and the translators' state after it; returns how many lines
    the schema took."""
    fast, slow = _Counting(), CodexAppServerTranslator()
    feed = line_feed(fast, engine=ENGINE)
    taken = 0
    for line in lines:
        left = fast.decoded
        got = feed(line)
        event = decode_json_line(line)
        taken += fast.decoded == left and not isinstance(event, JsonProblem)
        want = (
            [frame_problem_message(event, engine=ENGINE)]
            if isinstance(event, JsonProblem)
            else slow.feed_decoded(event)
        )
        assert [_shown(m) for m in got] == [_shown(m) for m in want], line
        assert _state(fast) == _state(slow), line
    assert [_shown(m) for m in fast.finish()] == [_shown(m) for m in slow.finish()]
    return taken


def test_recorded_sessions_read_alike_and_mostly_from_bytes() -> None:
    assert RECORDED
    for path in RECORDED:
        lines = _lines(path)
        taken = both_paths(lines)
        # The kinds the schema knows are most of every session: the fast path is exercised.
        assert taken >= 0.7 * len(lines), (path.name, taken, len(lines))


# -- changed lines -------------------------------------------------------------------------------

_WORDS = [
    "",
    "recv",
    "send",
    "<-",
    "->",
    "id",
    "method",
    "params",
    "turnId",
    "itemId",
    "delta",
    "item",
    "type",
    "text",
    "summary",
    "turn",
    "thread",
    "status",
    "error",
    "message",
    "result",
    "model",
    "tokenUsage",
    "last",
    "total",
    "modelContextWindow",
    "inputTokens",
    "totalTokens",
    "userMessage",
    "agentMessage",
    "reasoning",
    "commandExecution",
    "completed",
    "failed",
    "interrupted",
    "turn/start",
    "turn/started",
    "turn/completed",
    "thread/started",
    "item/started",
    "item/completed",
    "warning",
    "thread/tokenUsage/updated",
    "item/agentMessage/delta",
    "\ud800",  # a lone surrogate
    "\ud800",
]

#: What a lax schema would take for another type: numbers as text, text as numbers, ...
_tricky = st.sampled_from(["1", "0", "-1", "1.0", "true", "null", [], {}, True, False, 1.0, 0])
_leaves = (
    _tricky
    | _tricky
    | _tricky
    | st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.integers(min_value=-3, max_value=3)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, 1.0, -1.0, 1e20, 2.5])
    | st.text(max_size=4)
    | st.sampled_from(_WORDS)
)
_json = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(_WORDS) | st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():  # pyright: ignore[reportUnknownVariableType]
            out.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):  # pyright: ignore[reportUnknownArgumentType]
            out.extend(_paths(child, (*prefix, index)))
    return out


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _changed(event: Any, rnd: random.Random, values: list[Any]) -> Any:
    """``event`` with a value replaced, a key dropped or a key added somewhere."""
    paths = _paths(event)
    leaves = [p for p in paths if not isinstance(_at(event, p), (dict, list))]
    path = rnd.choice(leaves if leaves and rnd.random() < 0.7 else paths)
    value = copy.deepcopy(values[0])
    if not path:
        return value
    parent = event
    for step in path[:-1]:
        parent = parent[step]
    action = rnd.randrange(3)
    if action == 0:
        parent[path[-1]] = value
    elif action == 1 and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[rnd.choice(_WORDS)] = value
        if rnd.random() < 0.5:  # and moved first: the agent's key order changes
            moved = {key: parent.pop(key) for key in list(parent)[::-1]}  # pyright: ignore
            parent.update(dict(reversed(moved.items())))
    else:
        parent.insert(0, value)
    return event


def _text(value: Any, rnd: random.Random) -> str:
    """JSON text of ``value``; now and then an object repeats a key (the last one counts)."""
    if isinstance(value, dict):
        pairs = [f"{json.dumps(k)}: {_text(v, rnd)}" for k, v in value.items()]  # pyright: ignore
        if pairs and rnd.random() < 0.1:
            key = json.dumps(rnd.choice(list(value)))  # pyright: ignore[reportUnknownArgumentType]
            pairs.insert(0, f"{key}: {json.dumps(rnd.choice(_WORDS))}")
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_text(v, rnd) for v in value) + "]"  # pyright: ignore
    return json.dumps(value)


def _line(event: Any, rnd: random.Random) -> bytes:
    text = _text(event, rnd)
    if rnd.random() < 0.1:
        # Characters as they are, a lone surrogate as bytes that are not UTF-8.
        text = text.encode().decode("unicode_escape", "ignore")
    return text.encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(min_value=0, max_value=len(RECORDED) - 1),
    rnd=st.randoms(use_true_random=False),
    values=st.lists(_json, min_size=12, max_size=12),
)
def test_changed_lines_read_alike(index: int, rnd: random.Random, values: list[Any]) -> None:
    lines = _lines(RECORDED[index])
    out: list[bytes] = []
    for number, line in enumerate(lines):
        if rnd.random() < 0.4:
            event = json.loads(line)
            for change in range(rnd.randrange(1, 4)):
                event = _changed(event, rnd, values[(number + change) % len(values) :])
            out.append(_line(event, rnd))
        else:
            out.append(line)
    both_paths(out)


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for level in range(levels):
        value = [value] if level % 2 else {"deep": value}
    return value


#: Values of other types, and values nested deeper than the decoder keeps (the schema's path
#: does not count brackets: no value of its views reaches a message as a container).
_ODD = ["1", "", 1, 1.0, -1, True, None, [], {}, _deep(120), _deep(300)]


def _leaf_paths(value: Any) -> list[tuple[Any, ...]]:
    return [p for p in _paths(value) if p and not isinstance(_at(value, p), (dict, list))]


def test_every_value_the_schema_reads_of_another_type_reads_alike() -> None:
    """Each value of each line of a few sessions replaced in turn by one of another type (or
    ``null``, or a container, or one nested too deep), in the state the session is in at that
    line."""
    for name in ("two_turns.jsonl", "reasoning.jsonl", "interrupt.jsonl"):
        fast, slow = CodexAppServerTranslator(), CodexAppServerTranslator()
        feed = line_feed(fast, engine=ENGINE)
        for line in _lines(FIXTURE_ROOT / ENGINE / name):
            event = json.loads(line)
            for path in _leaf_paths(event):
                for odd in _ODD:
                    changed = copy.deepcopy(event)
                    parent = _at(changed, path[:-1])
                    parent[path[-1]] = odd
                    text = json.dumps(changed).encode()
                    a, b = copy.deepcopy(fast), copy.deepcopy(slow)
                    got = line_feed(a, engine=ENGINE)(text)
                    want = b.feed_decoded(decode_json_line(text))
                    assert [_shown(m) for m in got] == [_shown(m) for m in want], text
                    assert _state(a) == _state(b), text
            feed(line)
            slow.feed_decoded(decode_json_line(line))
