"""Replay of recorded transcripts without an agent: turns, undecodable lines, the replay engine."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from agentrun import (
    MessageType,
    ReplayedTurn,
    SendNotSupportedError,
    TurnSummary,
    replay,
    run_turn,
)
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
