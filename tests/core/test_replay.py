"""Replay of recorded transcripts without an agent: turns, undecodable lines, the replay engine."""

from __future__ import annotations

import dataclasses
import json
import weakref
from pathlib import Path
from typing import Any, ClassVar

import pytest
from repo_paths import FIXTURES

from agentrun import (
    Message,
    MessageType,
    ReplayedTurn,
    SendNotSupportedError,
    TurnSummary,
    replay,
    run_turn,
)
from agentrun.abc import Translator
from agentrun.engines import _registry
from agentrun.engines._replay import ReplayEngine, read_events, replay_turns


def _claude_transcript() -> Path:
    found = sorted((FIXTURES / "claude").rglob("*.jsonl"))
    assert found
    return found[0]


def test_turns_are_numbered_and_end_with_their_result() -> None:
    turns = replay_turns(_claude_transcript(), engine="claude")
    assert turns
    for number, turn in enumerate(turns, start=1):
        assert {m.turn for m in turn} == {number}
        results = [m for m in turn if m.type is MessageType.RESULT]
        assert len(results) <= 1
        if results:
            assert turn[-1].type is MessageType.RESULT


def test_undecodable_lines_become_error_messages_in_place(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"type": "x"}\n\xff\xfe\nnot json\n{"type": "y"}')
    events = list(read_events(path, engine="claude"))
    assert [getattr(e, "type", None) for e in events[1:3]] == [MessageType.ERROR] * 2
    assert events[0] == {"type": "x"} and events[-1] == {"type": "y"}


def test_a_turn_without_a_result_is_kept_as_the_last_one(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    message = {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "partial"}]}
    path.write_text(json.dumps({"type": "assistant", "message": message}) + "\n")
    turns = replay_turns(path, engine="claude")
    assert len(turns) == 1
    assert all(m.type is not MessageType.RESULT for m in turns[0])
    assert any(m.text == "partial" for m in turns[0])


@pytest.mark.anyio
async def test_the_replay_engine_plays_turns_back_then_refuses_more() -> None:
    path = _claude_transcript()
    recorded = replay_turns(path, engine="claude")
    async with ReplayEngine(path, engine="claude").start() as session:
        for turn in recorded:
            summary = await run_turn(session, "anything")
            assert summary.turn == turn[0].turn
        with pytest.raises(SendNotSupportedError):
            await run_turn(session, "one too many")


def test_replay_makes_the_turns_the_dataclass_makes() -> None:
    """``replay`` builds its turns without the frozen dataclass's ``__init__``: the same fields,
    in the same order, as ``ReplayedTurn(...)`` makes."""
    turns = replay(_claude_transcript(), engine="claude")
    assert turns
    for turn in turns:
        assert type(turn) is ReplayedTurn
        made = ReplayedTurn(turn.number, turn.messages, turn.summary)
        assert list(vars(turn).items()) == list(vars(made).items())
        assert [f.name for f in dataclasses.fields(ReplayedTurn)] == list(vars(turn))
        assert turn == made
        assert turn.summary == TurnSummary.from_messages(turn.messages)


class _KeepingTranslator(Translator):
    """A translator that gives out messages it keeps: the same message on every ``again`` line,
    and on every ``kept`` line the list it keeps (with a message appended); fresh messages
    otherwise. Replay tags messages with their turn in place only when nothing else holds them."""

    made: ClassVar[list[_KeepingTranslator]] = []

    def __init__(self) -> None:
        self.again = Message(type=MessageType.TEXT, text="again")
        self.kept: list[Message] = []
        self.made.append(self)

    def feed(self, event: Any) -> list[Message]:
        kind = event["k"]
        if kind == "again":
            return [self.again]
        if kind == "kept":
            self.kept.append(Message(type=MessageType.TEXT, text=f"kept {len(self.kept)}"))
            return self.kept
        if kind == "end":
            return [Message(type=MessageType.RESULT, stop_reason="end_turn")]
        return [Message(type=MessageType.TEXT, text="fresh")]

    def finish(self) -> list[Message]:
        return [self.again]


def test_replay_tags_a_message_the_translator_keeps_on_a_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, kind in (("keeping", "_KeepingTranslator"), ("weakly", "_WeaklyKeepingTranslator")):
        monkeypatch.setitem(_registry._TRANSLATORS, name, f"{__name__}:{kind}")  # pyright: ignore[reportPrivateUsage]
    lines = ["again", "fresh", "kept", "end", "again", "kept", "fresh", "end", "fresh"]
    data = "".join(json.dumps({"k": k}) + "\n" for k in lines).encode()
    for source in (data, data.splitlines()):
        turns = replay(source, engine="keeping")
        translator = _KeepingTranslator.made[-1]
        assert [t.number for t in turns] == [1, 2, 3]
        for turn in turns:
            assert {m.turn for m in turn.messages} == {turn.number}
            assert all("turn" in m.model_fields_set for m in turn.messages)
        # What the translator kept is as it made it: untagged, and never one turn's message.
        assert translator.again.turn is None and "turn" not in translator.again.model_fields_set
        assert all(m.turn is None for m in translator.kept)
        held = {id(translator.again), *map(id, translator.kept)}
        assert not [m for t in turns for m in t.messages if id(m) in held]
        # The kept list was given out twice: its first message is in turns 1 and 2, as copies.
        texts = [[m.text for m in t.messages] for t in turns]
        assert texts == [
            ["again", "fresh", "kept 0", None],
            ["again", "kept 0", "kept 1", "fresh", None],
            ["fresh", "again"],
        ]
    # A fresh message nothing else holds is tagged where it is (no copy): the translator's
    # weak references, which hold nothing, find the very messages of the turns.
    turns = replay(data, engine="weakly")
    seen = [ref() for ref in _WeaklyKeepingTranslator.refs]
    assert seen and all(m is not None for m in seen)
    delivered = {id(m) for t in turns for m in t.messages}
    assert all(id(m) in delivered for m in seen)


class _WeaklyKeepingTranslator(_KeepingTranslator):
    refs: ClassVar[list[weakref.ref[Message]]] = []

    def feed(self, event: Any) -> list[Message]:
        out = super().feed(event)
        if event["k"] in ("fresh", "end"):
            self.refs.extend(weakref.ref(m) for m in out)
        return out
