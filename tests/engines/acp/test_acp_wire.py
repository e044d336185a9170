"""The ACP translator's ways of reading a line agree: ``feed_line`` (a transcript line's bytes
validated by the wire schema in one pass, the messages made from its values), ``feed_received``
(the same for a message received live) and ``feed_decoded`` (the line decoded, then read by the
models). Generated sessions of valid, odd and malformed ``session/update`` lines go through all
three, line by line; every message must be equal and dump to the same JSON, with its ``raw`` in
the agent's key order. A line the wire schema refuses takes the decoding path, so a refusal is
always safe; an acceptance must be exact."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo_paths import FIXTURES

from agentrun import Message, Usage
from agentrun._bases.translator import frame_problem_message, line_feed
from agentrun._wire.framing import JsonProblem, decode_json_line
from agentrun.engines.acp import AcpTranslator
from agentrun.engines.acp._schema import Usage as AcpUsage
from agentrun.engines.acp._usage import _output_with_thoughts, usage_of  # pyright: ignore[reportPrivateUsage]

SESSION = "ses_1"


def line(direction: str, msg: Any, **extra: Any) -> bytes:
    return json.dumps({"dir": direction, "msg": msg, **extra}).encode()


def opening(method: str) -> list[bytes]:
    params: dict[str, Any] = {"cwd": "/w", "mcpServers": []}
    if method != "session/new":
        params["sessionId"] = SESSION
    return [
        line("send", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
        line(
            "recv",
            {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"protocolVersion": 1, "agentInfo": {"name": "OpenCode", "version": "1"}},
            },
        ),
        line("send", {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}),
    ]


def opened() -> bytes:
    return line("recv", {"jsonrpc": "2.0", "id": 2, "result": {"sessionId": SESSION}})


def prompt(request_id: int) -> bytes:
    params = {"sessionId": SESSION, "prompt": [{"type": "text", "text": "hi"}]}
    return line(
        "send", {"jsonrpc": "2.0", "id": request_id, "method": "session/prompt", "params": params}
    )


def answer(request_id: int) -> bytes:
    return line("recv", {"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})


def as_json(message: Message, **options: Any) -> str:
    try:
        return message.model_dump_json(**options)
    except ValueError as exc:  # a lone surrogate cannot be written (on either path)
        return repr(exc)


def dumped(messages: list[Message]) -> list[tuple[str, str, str]]:
    return [
        (
            as_json(m),
            as_json(m, exclude_unset=True),
            json.dumps(m.raw, allow_nan=True, default=repr),
        )
        for m in messages
    ]


class _Counting(AcpTranslator):
    """Counts the events it was given decoded (the lines its wire schema left)."""

    decoded = 0

    def feed_decoded(self, event: Any) -> list[Message]:
        self.decoded += 1
        return super().feed_decoded(event)


class BothPaths:
    """Translators fed the same lines: one through ``line_feed`` (the wire schema first), one
    through ``feed_decoded`` only, and one as the live engine feeds it (a received message's
    bytes to ``feed_received`` first)."""

    def __init__(self) -> None:
        self.fast = _Counting(engine="opencode-acp")
        self.slow = AcpTranslator(engine="opencode-acp")
        self.feed_fast = line_feed(self.fast, engine="opencode-acp")
        self.live = AcpTranslator(engine="opencode-acp")
        self.taken = self.taken_live = 0
        self.nan = False

    def both(self, data: bytes) -> None:
        left = self.fast.decoded
        got = self.feed_fast(data)
        decoded = decode_json_line(data)
        expected = (
            [frame_problem_message(decoded, engine="opencode-acp")]
            if isinstance(decoded, JsonProblem)
            else self.slow.feed_decoded(decoded)
        )
        if self.fast.decoded == left and not isinstance(decoded, JsonProblem):
            self.taken += 1
        self.nan = self.nan or b"NaN" in data
        self.same(got, expected, data)
        if isinstance(decoded, JsonProblem):
            return  # (live, the connection reports it; the translator never sees it)
        self.same(self.live_feed(decoded), expected, data)

    def live_feed(self, decoded: Any) -> list[Message]:
        """What the live engine feeds the translator: a received line's bytes first
        (``feed_received``), else ``{"dir": ..., "msg": <decoded>}``."""
        if isinstance(decoded, dict) and decoded.get("dir") == "recv" and "msg" in decoded:
            received = json.dumps(decoded["msg"], allow_nan=True).encode()
            out = self.live.feed_received(received)
            if out is not None:
                self.taken_live += 1
                return out
            return self.live.feed({"dir": "recv", "msg": decode_json_line(received)})
        return self.live.feed_decoded(decoded)

    def same(self, got: list[Message], expected: list[Message], data: bytes = b"") -> None:
        assert dumped(got) == dumped(expected), data
        if not self.nan:  # (a NaN the agent sent is not equal to itself)
            assert got == expected, data

    def finish(self) -> None:
        expected = self.slow.finish()
        self.same(self.fast.finish(), expected)
        self.same(self.live.finish(), expected)
        # (the test writes the received message again: an escaped "\/" in its method is gone)
        assert self.taken_live >= self.taken


def session(updates: list[list[bytes]], method: str = "session/new") -> int:
    """Feed an opening, then each batch of update lines: the first before the first prompt,
    the next ones in prompts, the last between turns; returns how many lines the wire schema
    took."""
    pair = BothPaths()
    for data in opening(method):
        pair.both(data)
    first, *rest = updates
    if method == "session/load":
        for data in first:  # the history an agent replays while the load is pending
            pair.both(data)
        pair.both(opened())
    else:
        pair.both(opened())
        for data in first:  # between the opening and the first prompt
            pair.both(data)
    request_id = 3
    for batch in rest[:-1]:
        pair.both(prompt(request_id))
        for data in batch:
            pair.both(data)
        pair.both(answer(request_id))
        request_id += 1
    for data in rest[-1] if rest else []:
        pair.both(data)
    pair.finish()
    return pair.taken


# -- generated updates -----------------------------------------------------------------------

TEXTS = st.text(max_size=12)
JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TEXTS
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 10**12)
#: Values of the wrong type, for any field.
ODD = (
    JSON_SCALARS
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(TEXTS, st.integers(), max_size=2)
)
JSON = st.recursive(
    JSON_SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def maybe(draw: st.DrawFn, value: st.SearchStrategy[Any]) -> Any:
    """A field's value: usually one of ``value``, now and then one of another type."""
    return draw(ODD) if draw(st.integers(0, 11)) == 11 else draw(value)


@st.composite
def fields(draw: st.DrawFn, wanted: dict[str, st.SearchStrategy[Any]]) -> dict[str, Any]:
    """An object of some of ``wanted``'s keys (drawn present or absent), now and then a
    snake_case spelling of one, an unknown key or a ``_meta``, in a drawn key order."""
    items: list[tuple[str, Any]] = []
    for key, strategy in wanted.items():
        if draw(st.integers(0, 7)) < 7:  # (hypothesis starts from 0: present, well spelled)
            spelled = key
            if draw(st.integers(0, 15)) == 15:
                spelled = "".join("_" + c.lower() if c.isupper() else c for c in key)
            items.append((spelled, draw(strategy)))
    if draw(st.integers(0, 7)) == 7:
        items.append(("_meta", draw(st.none() | st.dictionaries(TEXTS, JSON, max_size=3) | ODD)))
    if draw(st.integers(0, 10)) == 10:
        items.append((draw(st.sampled_from(["extra", "meta", "annotations", "name"])), draw(JSON)))
    order = draw(st.permutations(range(len(items))))
    return {items[i][0]: items[i][1] for i in order}


TEXT_BLOCK = fields(
    {"type": maybe(st.sampled_from(["text", "text", "text", "image"])), "text": maybe(TEXTS)}
)
COST = fields({"amount": maybe(FLOATS), "currency": maybe(st.sampled_from(["USD", "usd", "EUR"]))})
TOOL_CONTENT = st.one_of(
    fields({"type": st.just("content"), "content": TEXT_BLOCK}),
    fields({"type": st.just("diff"), "path": maybe(TEXTS), "newText": maybe(TEXTS)}),
    fields({"type": st.just("terminal"), "terminalId": maybe(TEXTS)}),
    fields({"type": maybe(TEXTS), "value": JSON}),
)
LOCATION = fields({"path": maybe(TEXTS), "line": maybe(st.integers(0, 99) | st.none())})
TOOL_IDS = st.sampled_from(["t1", "t2", "t3"])
STATUSES = st.sampled_from(["pending", "in_progress", "completed", "failed", None])
INPUTS = st.none() | st.just({}) | st.just({"cwd": "/w"}) | st.dictionaries(TEXTS, JSON, max_size=3)

KINDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "agent_message_chunk": {"content": maybe(TEXT_BLOCK), "messageId": maybe(TEXTS | st.none())},
    "agent_thought_chunk": {"content": maybe(TEXT_BLOCK), "messageId": maybe(TEXTS | st.none())},
    "user_message_chunk": {"content": maybe(TEXT_BLOCK), "messageId": maybe(TEXTS | st.none())},
    "usage_update": {
        "used": maybe(st.integers(-3, 10**6)),
        "size": maybe(st.integers(-3, 10**6)),
        "cost": maybe(COST | st.none()),
    },
    "tool_call": {
        "toolCallId": maybe(TOOL_IDS),
        "title": maybe(TEXTS | st.none()),
        "kind": maybe(st.sampled_from(["read", "execute", "other"])),
        "status": maybe(STATUSES),
        "content": maybe(st.lists(TOOL_CONTENT, max_size=2) | st.none()),
        "locations": maybe(st.lists(LOCATION, max_size=2) | st.none()),
        "rawInput": INPUTS,
        "rawOutput": JSON,
        "name": maybe(TEXTS),
    },
    "tool_call_update": {
        "toolCallId": maybe(TOOL_IDS),
        "title": maybe(TEXTS | st.none()),
        "status": maybe(STATUSES),
        "content": maybe(st.lists(TOOL_CONTENT, max_size=2) | st.none()),
        "rawInput": INPUTS,
        "rawOutput": JSON,
    },
    "available_commands_update": {
        "availableCommands": maybe(
            st.lists(
                fields({"name": maybe(TEXTS), "description": maybe(TEXTS), "input": JSON}),
                max_size=3,
            )
        )
    },
    "plan": {"entries": st.lists(fields({"content": TEXTS}), max_size=2)},
    "current_mode_update": {"currentModeId": maybe(TEXTS)},
}


@st.composite
def update_line(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([*KINDS, "made_up_kind"]))
    update = draw(fields(KINDS.get(kind, {"value": JSON})))
    if draw(st.integers(0, 20)) < 20:
        tag = kind if draw(st.integers(0, 30)) < 30 else draw(ODD)
        update = (
            {"sessionUpdate": tag, **update}
            if draw(st.booleans())
            else {**update, "sessionUpdate": tag}
        )
    params: dict[str, Any] = {"sessionId": SESSION, "update": update}
    if draw(st.integers(0, 20)) == 20:
        params = draw(
            st.sampled_from(
                [
                    {"update": update},
                    {"sessionId": 1, "update": update},
                    {"session_id": SESSION, "update": update},
                    {"sessionId": SESSION, "update": update, "_meta": draw(ODD)},
                    {"sessionId": SESSION, "update": update, "meta": {}},
                ]
            )
        )
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": "session/update", "params": params}
    if draw(st.integers(0, 20)) == 20:
        msg = draw(
            st.sampled_from(
                [
                    {**msg, "id": 7},
                    {"method": "session/update", "params": params},
                    {**msg, "extra": 1},
                    {**msg, "method": "session/other"},
                ]
            )
        )
    direction = "recv" if draw(st.integers(0, 20)) < 20 else draw(st.sampled_from(["send", "err"]))
    extra = {"t": 1.5} if draw(st.integers(0, 5)) == 5 else {}
    return json.dumps({"dir": direction, "msg": msg, **extra}, allow_nan=True).encode()


HYPOTHESIS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@HYPOTHESIS
@given(
    updates=st.lists(st.lists(update_line(), max_size=6), min_size=1, max_size=4),
    method=st.sampled_from(["session/new", "session/load"]),
)
def test_generated_updates_make_the_same_messages_on_both_paths(
    updates: list[list[bytes]], method: str
) -> None:
    session(updates, method)


def test_the_generated_sessions_exercise_the_wire_schema() -> None:
    """The generated lines are not all refused (the comparison above is not vacuous): over a
    run of generated sessions, the wire schema takes many of them."""
    taken: list[int] = []

    @settings(HYPOTHESIS, max_examples=30)
    @given(updates=st.lists(st.lists(update_line(), max_size=6), min_size=2, max_size=4))
    def run(updates: list[list[bytes]]) -> None:
        taken.append(session(updates))

    run()
    assert sum(taken) >= 20


# -- hand-made cases -------------------------------------------------------------------------


def update(value: dict[str, Any]) -> bytes:
    params = {"sessionId": SESSION, "update": value}
    return line("recv", {"jsonrpc": "2.0", "method": "session/update", "params": params})


def chunk(text: Any, **more: Any) -> dict[str, Any]:
    return {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": text},
        **more,
    }


TAKEN: list[tuple[str, bytes]] = [
    ("text", update(chunk("hi", messageId="m1"))),
    (
        "text, key order of the agent",
        update({"content": {"text": "x", "type": "text"}, "sessionUpdate": "agent_message_chunk"}),
    ),
    (
        "thought",
        update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "t"}}),
    ),
    ("qwen call usage", update(chunk("", _meta={"usage": {"inputTokens": 3}}))),
    (
        "adapter notice",
        update(chunk("n", _meta={"claudeCode": {"kind": "informational", "level": "warning"}})),
    ),
    (
        "usage with an integer cost",
        update(
            {
                "sessionUpdate": "usage_update",
                "used": 5,
                "size": 9,
                "cost": {"amount": 3, "currency": "USD"},
            }
        ),
    ),
    ("usage with no cost", update({"sessionUpdate": "usage_update", "used": 0, "size": 0})),
    (
        "tool call",
        update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "t",
                "title": "ls",
                "kind": "execute",
                "status": "pending",
                "rawInput": {"cwd": "/"},
            }
        ),
    ),
    (
        "tool call done",
        update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t",
                "status": "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": "out"}}],
            }
        ),
    ),
    (
        "commands",
        update(
            {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [
                    {"name": "/init", "description": "d"},
                    {"description": "", "name": "x", "input": {"hint": "h"}, "_meta": {}},
                ],
            }
        ),
    ),
    ("no commands", update({"sessionUpdate": "available_commands_update"})),
]


def commands(*listed: Any, **more: Any) -> bytes:
    return update(
        {"sessionUpdate": "available_commands_update", "availableCommands": list(listed), **more}
    )


REFUSED: list[tuple[str, bytes]] = [
    (
        "an image chunk",
        update(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "image", "data": "", "mimeType": "x"},
            }
        ),
    ),
    ("a snake_case field", update(chunk("x", message_id="m"))),
    (
        "a snake_case tag",
        update({"session_update": "agent_message_chunk", "content": {"type": "text", "text": "x"}}),
    ),
    ("an unknown field", update(chunk("x", extra=1))),
    (
        "annotations",
        update(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "x", "annotations": {}},
            }
        ),
    ),
    ("a float for an integer", update({"sessionUpdate": "usage_update", "used": 5.0, "size": 9})),
    ("a string for an integer", update({"sessionUpdate": "usage_update", "used": "5", "size": 9})),
    (
        "a boolean for an integer",
        update({"sessionUpdate": "usage_update", "used": True, "size": 9}),
    ),
    ("an unknown kind", update({"sessionUpdate": "plan", "entries": []})),
    ("a command without its description", commands({"name": "/init"})),
    ("a command with a null input", commands({"name": "x", "description": "", "input": None})),
    ("a command with an unknown key", commands({"name": "x", "description": "", "more": 1})),
    ("commands with a _meta of their own", commands(_meta={"k": 1})),
    (
        "a command with a number that is not finite",
        commands({"name": "x", "description": "", "input": {"hint": math.inf}}),
    ),
    (
        "a request",
        line(
            "recv",
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "session/update",
                "params": {"sessionId": SESSION, "update": chunk("x")},
            },
        ),
    ),
    (
        "sent",
        line(
            "send",
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": SESSION, "update": chunk("x")},
            },
        ),
    ),
    (
        "no session id",
        line(
            "recv", {"jsonrpc": "2.0", "method": "session/update", "params": {"update": chunk("x")}}
        ),
    ),
    ("an escaped method name", update(chunk("x")).replace(b"session/update", b"session\\/update")),
    ("not JSON", b'{"dir": "recv", "msg": {"method": "session/update"'),
    ("a lone surrogate", update(chunk("\ud800"))),
    ("not UTF-8", update(chunk("x")).replace(b'"x"', b'"\xff"')),
    (
        "nested deeper than the cap",
        update(chunk("x", _meta={"a": json.loads("[" * 120 + "]" * 120)})),
    ),
]


@pytest.mark.parametrize(("case", "data"), TAKEN, ids=[c for c, _ in TAKEN])
def test_the_wire_schema_takes(case: str, data: bytes) -> None:
    assert session([[], [data], [data]]) == 2, case


@pytest.mark.parametrize(("case", "data"), REFUSED, ids=[c for c, _ in REFUSED])
def test_the_wire_schema_refuses(case: str, data: bytes) -> None:
    assert session([[], [data], [data]]) == 0, case


def test_duplicate_keys_are_read_as_the_decoder_reads_them() -> None:
    data = (
        b'{"dir": "recv", "msg": {"method": "session/update", "params": {"sessionId": "s", '
        b'"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", '
        b'"text": "first", "text": "second"}, "messageId": "a", "messageId": "b"}}}}'
    )
    session([[], [data, data]])


def test_a_nan_cost_is_read_as_the_decoder_reads_it() -> None:
    data = update(
        {
            "sessionUpdate": "usage_update",
            "used": 1,
            "size": 2,
            "cost": {"amount": math.nan, "currency": "USD"},
        }
    )
    assert session([[], [data]]) == 1


def recorded() -> list[Path]:
    return sorted(
        p for folder in ("acp", "opencode-acp") for p in (FIXTURES / folder).rglob("*.jsonl")
    )


@pytest.mark.parametrize("path", recorded(), ids=lambda p: p.name)
def test_recorded_updates_are_taken_by_the_wire_schema(path: Path) -> None:
    """Every ``session/update`` OpenCode sent in the recordings is read from its bytes in one
    pass, and makes the messages the decoding path makes."""
    pair = BothPaths()
    updates = 0
    for data in path.read_bytes().splitlines():
        updates += b'"session/update"' in data
        pair.both(data)
    pair.finish()
    assert pair.taken == updates


FIGURES = st.none() | st.integers(-5, 10**9)


@HYPOTHESIS
@given(
    figures=st.tuples(FIGURES, FIGURES, FIGURES, FIGURES, FIGURES, FIGURES),
    cost=st.none() | st.floats(-1, 1, allow_nan=False),
)
def test_a_prompts_usage_is_assembled_as_validation_makes_it(
    figures: tuple[int | None, ...], cost: float | None
) -> None:
    """The prompt's usage is assembled from the model's figures, not validated again: the same
    values (a negative one not reported), the same fields set."""
    names = ("input", "output", "total", "thought", "cached_read", "cached_write")
    reported = AcpUsage.model_validate(
        {f"{n}_tokens": v for n, v in zip(names, figures, strict=True)}
    )
    got = usage_of(reported, cost)
    assert got is not None
    expected = Usage(
        input_tokens=reported.input_tokens,
        output_tokens=_output_with_thoughts(reported),
        cache_read_tokens=reported.cached_read_tokens,
        cache_write_tokens=reported.cached_write_tokens,
        thinking_tokens=reported.thought_tokens,
        cost_usd=cost,
    )
    assert got == expected
    assert got.model_fields_set == expected.model_fields_set
    assert got.model_dump_json(exclude_unset=True) == expected.model_dump_json(exclude_unset=True)
