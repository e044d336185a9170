"""Fuzzing every translator with realistic and hostile events.

Realistic: events taken from the recorded transcripts of each engine. Hostile: the same events
mutated — keys dropped, values replaced by values of another type (type confusion), strings and
lists truncated, numbers made negative or huge, objects nested deeper than any agent sends,
events duplicated, reordered and cut off mid-stream. Whatever arrives:

* nothing escapes the translator but the library's typed errors (translators raise none today);
* every message serializes to JSON;
* the reducer's invariants hold: token counts and costs never negative, every tool result pairs
  with a tool use of the same id (or is marked as an orphan), one result at most, last.

``FUZZ_EXAMPLES`` (environment) raises the number of cases per translator for a longer run.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo_paths import FIXTURES
from test_compliance import FIXTURE_DIRS, TRANSLATORS

from agentrun import AgentrunError, Message, MessageType, TurnSummary, get_translator
from agentrun._bases.translator import decode_line
from agentrun._wire.framing import LineFramer

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "120"))


def _events(name: str) -> list[Any]:
    """Decoded events from every transcript of ``name``, in recorded order, per file."""
    found: list[Any] = []
    for folder in FIXTURE_DIRS.get(name, [name]):
        base = FIXTURES / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.jsonl")):
            if path.name.endswith(".rollout.jsonl"):
                continue
            for line in path.read_bytes().splitlines():
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
    return found


CORPUS = {name: _events(name) for name in TRANSLATORS}
FUZZED = [name for name in TRANSLATORS if CORPUS[name]]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
replacements = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (dict keys and list indices), 12 levels deep."""
    paths: list[tuple[Any, ...]] = [prefix]
    if len(prefix) >= 12:
        return paths
    if isinstance(value, dict):
        for key, child in value.items():
            paths.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value[:8]):
            paths.extend(_paths(child, (*prefix, index)))
    return paths


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _set(root: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = _get(root, path[:-1])
    parent[path[-1]] = new
    return root


def _delete(root: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return None
    parent = _get(root, path[:-1])
    del parent[path[-1]]
    return root


def _nest(depth: int) -> Any:
    value: Any = {"deep": True}
    for _ in range(depth):
        value = {"x": [value]}
    return value


@st.composite
def mutated_stream(draw: st.DrawFn, name: str) -> list[Any]:
    corpus = CORPUS[name]
    start = draw(st.integers(min_value=0, max_value=len(corpus) - 1))
    length = draw(st.integers(min_value=1, max_value=40))
    stream = [copy.deepcopy(e) for e in corpus[start : start + length]]
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        if not stream:
            break
        index = draw(st.integers(min_value=0, max_value=len(stream) - 1))
        event = stream[index]
        paths = _paths(event)
        path = draw(st.sampled_from(paths))
        op = draw(
            st.sampled_from(
                ["replace", "delete", "truncate", "negate", "nest", "duplicate", "swap", "cut"]
            )
        )
        if op == "replace":
            stream[index] = _set(event, path, draw(replacements))
        elif op == "delete" and path:
            stream[index] = _delete(event, path)
        elif op == "truncate":
            target = _get(event, path)
            if isinstance(target, (str, list)):
                keep = draw(st.integers(min_value=0, max_value=len(target)))
                stream[index] = _set(event, path, target[:keep])
        elif op == "negate":
            target = _get(event, path)
            if isinstance(target, (int, float)) and not isinstance(target, bool):
                stream[index] = _set(event, path, draw(st.sampled_from([-target - 1, 10**30])))
        elif op == "nest":
            stream[index] = _set(event, path, _nest(draw(st.sampled_from([50, 150, 400]))))
        elif op == "duplicate":
            stream.insert(index, copy.deepcopy(event))
        elif op == "swap" and len(stream) > 1:
            other = draw(st.integers(min_value=0, max_value=len(stream) - 1))
            stream[index], stream[other] = stream[other], stream[index]
        elif op == "cut":
            del stream[index:]
    return stream


def _check(messages: list[Message]) -> None:
    used: set[str] = set()
    results = 0
    for message in messages:
        json.loads(message.model_dump_json())  # every message serializes
        if message.type is MessageType.RESULT:
            results += 1
        tool = message.tool
        if tool is not None and tool.id and message.type is MessageType.TOOL_USE:
            used.add(tool.id)
        usage = message.usage
        if usage is not None:
            for field in ("input_tokens", "output_tokens", "cache_read_tokens"):
                value = getattr(usage, field)
                assert value is None or value >= 0, (field, value, message)
            assert usage.cost_usd is None or usage.cost_usd >= 0, message
    summary = TurnSummary.from_messages(messages)
    json.loads(summary.model_dump_json())
    if summary.usage is not None:
        assert summary.usage.cost_usd is None or summary.usage.cost_usd >= 0


@pytest.mark.parametrize("name", FUZZED)
def test_mutated_transcripts_never_break_a_translator(name: str) -> None:
    @settings(
        max_examples=EXAMPLES,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        deadline=None,
        derandomize=True,
    )
    @given(stream=mutated_stream(name))
    def run(stream: list[Any]) -> None:
        translator = get_translator(name)
        messages: list[Message] = []
        try:
            # Through the same decoding step a live run uses (it bounds what is kept).
            for event in stream:
                line = json.dumps(event, allow_nan=True).encode()
                decoded, problem = decode_line(line, engine=name)
                messages.extend([problem] if problem is not None else translator.feed(decoded))
            messages.extend(translator.finish())
        except AgentrunError:
            return
        _check(messages)

    run()


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=20),
    limit=st.integers(min_value=8, max_value=64),
)
def test_the_framer_finds_the_same_lines_wherever_the_chunks_break(
    lines: list[bytes], cuts: list[int], limit: int
) -> None:
    data = b"".join(line + b"\n" for line in lines)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})

    def frame(pieces: list[bytes]) -> list[Any]:
        framer = LineFramer(limit)
        out: list[Any] = []
        for piece in pieces:
            out.extend(framer.feed(piece))
        out.extend(framer.flush())
        return [item if isinstance(item, bytes) else ("too long", item.size) for item in out]

    chunked = frame([data[a:b] for a, b in itertools.pairwise(points)])
    assert chunked == frame([data])  # the same lines as one piece gives
    # Every non-blank line is there once, kept or reported as too long.
    assert len(chunked) == sum(1 for line in lines if line.rstrip(b"\r").strip())


def test_the_corpus_is_not_empty() -> None:
    assert FUZZED, "no translator has recorded transcripts to fuzz"
    for name in FUZZED:
        assert len(CORPUS[name]) > 20, name
    assert Path(FIXTURES).is_dir()
