"""Hostile input the decoders and the vocabulary must survive (found by tests/compliance/test_fuzz)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from agentrun import Message, TurnSummary, Usage, get_translator
from agentrun._bases import translator as base_translator
from agentrun._bases.translator import line_feed
from agentrun._wire import framing
from agentrun._wire.framing import MAX_NESTING, NESTING_MARKER, decode_json_line
from agentrun.engines._replay import replay_turns
from agentrun.engines.acp import _translate as acp_translate
from agentrun.engines.claude import _translate as claude_translate
from agentrun.engines.codex import _app_translate as codex_app_translate

#: Every module whose translator walks a value's nesting (``capped``).
_TRANSLATOR_MODULES = (base_translator, acp_translate, claude_translate, codex_app_translate)


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


#: One recorded transcript per translator module (their folders are named after the engine).
_READ_ONCE = {
    "claude": "claude",
    "codex": "codex",
    "codex-app-server": "codex-app-server",
    "opencode": "opencode",
    "acp": "opencode-acp",
}


@pytest.mark.parametrize("engine", sorted(_READ_ONCE))
def test_replay_walks_a_lines_nesting_once_in_the_decoder(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder cuts a line's nesting; the translator does not walk the decoded event again
    (it does for a value given to ``feed`` as it is), and makes the same messages of it."""
    walks: list[object] = []

    def counting(value: object, limit: int = MAX_NESTING) -> object:
        walks.append(value)
        return framing.capped(value, limit)

    for module in _TRANSLATOR_MODULES:
        monkeypatch.setattr(module, "capped", counting)
    folder = FIXTURES / _READ_ONCE[engine]
    transcript = next(p for p in sorted(folder.rglob("*.jsonl")) if ".rollout." not in p.name)
    turns = replay_turns(transcript, engine=engine)
    assert turns and walks == []
    # feed still walks what it is given, and makes the same messages of a decoded event.
    event = decode_json_line(transcript.read_bytes().splitlines()[0])
    via_feed = get_translator(engine).feed(event)
    assert len(walks) == 1
    assert [m.model_dump_json() for m in via_feed] == [
        m.model_dump_json() for m in get_translator(engine).feed_decoded(event)
    ]


@pytest.mark.parametrize("engine", ["claude", "opencode", "codex-app-server", "opencode-acp"])
def test_a_lone_surrogate_escape_becomes_a_replacement_character_so_every_message_serializes(
    engine: str,
) -> None:
    # JSON may spell half a surrogate pair alone ("\ud800"); no UTF-8 text can hold it, so a
    # message keeping it could not be written as JSON (every recorded line of the engine is
    # fed with a lone surrogate in each of its strings, keys included).
    folder = FIXTURES / ("acp" if engine == "opencode-acp" else engine.split("-")[0])
    line = next(
        line
        for path in sorted(folder.rglob("*.jsonl"))
        for line in path.read_bytes().splitlines()
        if b'"' in line
    )
    event = json.loads(line)

    def spoil(value: object) -> object:
        if isinstance(value, str):
            return value + "\ud800"
        if isinstance(value, dict):
            return {spoil(k): spoil(v) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
        if isinstance(value, list):
            return [spoil(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
        return value

    spoiled = json.dumps(spoil(event)).encode()
    assert b"\\ud800" in spoiled
    decoded = decode_json_line(spoiled)
    assert "\ud800" not in json.dumps(decoded, ensure_ascii=False, default=str).encode(
        "utf-8", "surrogatepass"
    ).decode("utf-8", "surrogatepass")
    assert "\ufffd" in json.dumps(decoded, ensure_ascii=False)
    messages = get_translator(engine).feed_decoded(decoded)
    messages += get_translator(engine).finish()
    for message in messages:
        json.loads(message.model_dump_json())
    json.loads(TurnSummary.from_messages(messages).model_dump_json())


def test_a_surrogate_pair_spelled_in_escapes_is_one_character() -> None:
    assert decode_json_line(b'"\\ud83d\\ude00 \\u00e9"') == "\U0001f600 \u00e9"


@pytest.mark.parametrize("engine", ["claude", "opencode", "codex", "codex-app-server", "acp"])
def test_a_number_too_large_for_a_float_is_not_reported_rather_than_raised(engine: str) -> None:
    # JSON's integers have no bound; every recorded line of the engine with a number in it is
    # fed again with each of its numbers made 10**400 (costs, tokens, durations).
    folder = FIXTURES / engine.split("-")[0]
    huge = 10**400

    def enlarge(value: object) -> object:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return huge
        if isinstance(value, dict):
            return {k: enlarge(v) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
        if isinstance(value, list):
            return [enlarge(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
        return value

    fed = 0
    for path in sorted(folder.rglob("*.jsonl"))[:20]:
        if ".rollout." in path.name:
            continue
        translator = get_translator(engine)
        feed = line_feed(translator, engine=engine)  # the wire schema first, as replay reads
        messages: list[Message] = []
        for line in path.read_bytes().splitlines():
            event = decode_json_line(line)
            if isinstance(event, dict) and any(c.isdigit() for c in line.decode(errors="replace")):
                line = json.dumps(enlarge(event)).encode()
                fed += 1
            messages += feed(line)
        messages += translator.finish()
        for message in messages:
            json.loads(message.model_dump_json())
        json.loads(TurnSummary.from_messages(messages).model_dump_json())
    assert fed > 0
