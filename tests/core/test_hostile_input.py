"""Hostile input the decoders and the vocabulary must survive (found by tests/compliance/test_fuzz)."""

from __future__ import annotations

import json
from pathlib import Path

from agentrun import Message, TurnSummary, Usage, get_translator
from agentrun._wire.framing import MAX_NESTING, NESTING_MARKER, decode_json_line
from agentrun.engines._replay import replay_turns


def _nested(depth: int) -> str:
    return '{"type": "x_deep", "v": ' + "[" * depth + "1" + "]" * depth + "}"


def test_deep_nesting_is_cut_so_every_message_serializes(tmp_path: Path) -> None:
    decoded = decode_json_line(_nested(900).encode())
    assert isinstance(decoded, dict)
    depth, value = 0, decoded["v"]
    while isinstance(value, list):
        depth, value = depth + 1, value[0]
    assert depth == MAX_NESTING - 1 and value == NESTING_MARKER
    transcript = tmp_path / "deep.jsonl"
    transcript.write_text(_nested(900) + "\n")
    (turn,) = replay_turns(transcript, engine="claude")
    for message in turn:
        json.loads(message.model_dump_json())


def test_shallow_lines_are_left_alone() -> None:
    line = json.dumps({"a": [[[[1]]]], "b": list(range(300))}).encode()
    assert decode_json_line(line) == json.loads(line)


def test_negative_usage_is_not_reported_rather_than_negative() -> None:
    usage = Usage(input_tokens=-5, output_tokens=3, cost_usd=-0.01)
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == (None, 3, None)


def test_json_rpc_ids_of_the_wrong_type_are_ignored_not_fatal() -> None:
    translator = get_translator("acp")
    for msg in (
        {"jsonrpc": "2.0", "id": {"x": 1}, "method": "session/prompt", "params": {}},
        {"jsonrpc": "2.0", "id": [1], "result": {}},
        {"jsonrpc": "2.0", "id": [2], "method": "session/request_permission", "params": {}},
    ):
        for direction in ("send", "recv"):
            for message in translator.feed({"dir": direction, "msg": msg}):
                assert isinstance(message, Message)
    # Nothing was answered, so nothing ended a turn.
    assert not TurnSummary.from_messages(translator.finish()).has_result
