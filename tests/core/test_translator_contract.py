"""The translator contract: a translator that writes only ``feed`` and ``finish`` is fed lines
through the protocol's own ``feed_line`` (decoded, then ``feed``), as every reader of lines feeds
every translator."""

from __future__ import annotations

import json
from typing import Any

from agentrun import Message, MessageType
from agentrun._bases.translator import JsonRpcTranslator, Translator, line_feed
from agentrun._wire.framing import MAX_NESTING, NESTING_MARKER, LineFramer, LineTooLong


class _Minimal(Translator):
    """Only what the protocol asks a translator to write."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def feed(self, event: Any) -> list[Message]:
        self.events.append(event)
        return [Message(type=MessageType.TEXT, text=json.dumps(event))]

    def finish(self) -> list[Message]:
        return []


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list) and value:
        depth += 1
        value = value[0]  # pyright: ignore[reportUnknownVariableType]
    return depth


def test_a_translator_writing_only_feed_reads_lines_through_the_declared_default() -> None:
    translator = _Minimal()
    (text,) = translator.feed_line(b'{"type": "hello", "n": 1}', engine="minimal")
    assert translator.events == [{"type": "hello", "n": 1}]
    assert text.text == '{"type": "hello", "n": 1}'

    (problem,) = translator.feed_line(b"{not json", engine="minimal")
    assert problem.type is MessageType.ERROR
    assert problem.error is not None and problem.error.code == "invalid_json"
    assert problem.error.message.startswith("minimal: ")
    assert len(translator.events) == 1  # a line that is not JSON never reaches feed

    deep = b"[" * 300 + b"]" * 300
    translator.feed_line(deep, engine="minimal")
    assert _depth(translator.events[-1]) == MAX_NESTING
    assert NESTING_MARKER in json.dumps(translator.events[-1])


def test_line_feed_gives_each_framed_line_to_feed_line() -> None:
    translator = _Minimal()
    framer = LineFramer(max_line_bytes=64)
    items = framer.feed(b'{"a": 1}\n' + b"x" * 100 + b'\n{"b": 2}\n')
    assert isinstance(items[1], LineTooLong)
    feed = line_feed(translator, engine="minimal")
    out = [message for item in items for message in feed(item)]
    assert translator.events == [{"a": 1}, {"b": 2}]
    assert [m.type for m in out] == [MessageType.TEXT, MessageType.ERROR, MessageType.TEXT]
    assert out[1].error is not None and out[1].error.code == "line_too_long"


def test_a_json_rpc_translator_leaves_every_received_line_to_the_connection_by_default() -> None:
    class _Rpc(JsonRpcTranslator, _Minimal):
        pass

    translator = _Rpc()
    assert translator.feed_received(b'{"jsonrpc": "2.0", "method": "x"}') is None
    assert translator.events == []
