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
    otherwise. Replay tags a copy of each, never the message given."""

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


_KEEPING_LINES = "".join(
    json.dumps({"k": k}) + "\n"
    for k in ("again", "fresh", "kept", "end", "again", "kept", "fresh", "end", "fresh")
).encode()


def test_replay_tags_a_message_the_translator_keeps_on_a_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(_registry._TRANSLATORS, "keeping", f"{__name__}:_KeepingTranslator")  # pyright: ignore[reportPrivateUsage]
    for source in (_KEEPING_LINES, _KEEPING_LINES.splitlines()):
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


def test_replay_tags_every_message_on_a_copy() -> None:
    """Replay never changes a message a translator made, even one nothing else holds: each
    message of a turn is a copy tagged with its turn (the translator's weak references, which
    hold nothing, find none of them), and the turns are the same."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(_registry._TRANSLATORS, "weakly", f"{__name__}:_WeaklyKeepingTranslator")  # pyright: ignore[reportPrivateUsage]
        _WeaklyKeepingTranslator.refs.clear()
        turns = replay(_KEEPING_LINES, engine="weakly")
    assert [[(m.turn, m.text) for m in t.messages] for t in turns] == [
        [(1, "again"), (1, "fresh"), (1, "kept 0"), (1, None)],
        [(2, "again"), (2, "kept 0"), (2, "kept 1"), (2, "fresh"), (2, None)],
        [(3, "fresh"), (3, "again")],
    ]
    seen = [ref() for ref in _WeaklyKeepingTranslator.refs]
    assert len(seen) == 5
    delivered = {id(m) for t in turns for m in t.messages}
    assert not [m for m in seen if m is not None and id(m) in delivered]
    assert all(m is None or m.turn is None for m in seen)


class _WeaklyKeepingTranslator(_KeepingTranslator):
    refs: ClassVar[list[weakref.ref[Message]]] = []

    def feed(self, event: Any) -> list[Message]:
        out = super().feed(event)
        if event["k"] in ("fresh", "end"):
            self.refs.extend(weakref.ref(m) for m in out)
        return out


# -- recognising a transcript as an engine's ---------------------------------------------------

_PASSED_THROUGH = frozenset({"type", "subtype", "data", "raw", "turn"})
_UNREADABLE_CODES = frozenset({"protocol", "invalid_json", "invalid_utf8", "line_too_long"})


def _known_by_the_rule(message: Message) -> bool:
    """The translator made something of its own: not a pass-through, not an unreadable line,
    not the ``init``."""
    kind = message.type
    if kind is MessageType.INIT or not isinstance(kind, MessageType):
        return False
    if message.__pydantic_fields_set__ <= _PASSED_THROUGH:
        return False
    if kind is MessageType.ERROR:
        return message.error is not None and message.error.code not in _UNREADABLE_CODES
    return True


def _foreign_by_the_rule(message: Message) -> bool:
    """An event of an unknown kind passed through, or a line that could not be read."""
    if not isinstance(message.type, MessageType):
        return True
    if message.type is MessageType.ERROR:
        return message.error is None or message.error.code in _UNREADABLE_CODES
    return False


def _by_the_rule(out: list[Message]) -> int:
    if any(map(_known_by_the_rule, out)):
        return 1
    return -1 if any(map(_foreign_by_the_rule, out)) else 0


def test_each_line_is_recognised_by_the_rule_on_every_recording_read_by_every_engine() -> None:
    # Every recorded line, read by its own engine's translator and by every other one (which
    # passes it through or cannot read it), says of itself what the rule says.
    from agentrun._bases.translator import line_feed
    from agentrun.engines._replay import _framed_chunks, _line_recognition  # pyright: ignore[reportPrivateUsage]

    engines = ("claude", "codex", "codex-app-server", "opencode", "acp")
    folders = ("claude", "codex", "codex-app-server", "opencode", "opencode-acp", "gemini")
    seen = {1: 0, 0: 0, -1: 0}
    for folder in folders:
        for path in sorted((FIXTURES / folder).glob("*.jsonl"))[:6]:
            lines = _framed_chunks((path.read_bytes(),), 1 << 20)
            for engine in engines:
                feed = line_feed(_registry.get_translator(engine), engine=engine)
                for item in lines:
                    out = feed(item)
                    expected = _by_the_rule(out)
                    assert _line_recognition(out) == expected, (path.name, engine, out)
                    seen[expected] += 1
    assert min(seen.values()) > 20, seen


def test_line_recognition_reads_every_message_of_a_line() -> None:
    from agentrun._vocabulary.messages import ErrorInfo
    from agentrun.engines._replay import _line_recognition  # pyright: ignore[reportPrivateUsage]

    text = Message(type=MessageType.TEXT, text="hi")
    init = Message(type=MessageType.INIT, resume_id="s")
    passed = Message(type="x_unknown_kind", raw={"type": "x_unknown_kind"})
    unknown_subtype = Message(type=MessageType.SYSTEM, subtype="new_thing", data={"a": 1})
    bare_error = Message(type=MessageType.ERROR, text="?")
    unreadable = Message(
        type=MessageType.ERROR, error=ErrorInfo(message="bad", code="invalid_json")
    )
    error = Message(type=MessageType.ERROR, error=ErrorInfo(message="rate", code="rate_limit"))
    # An error whose details were left unmarked is no message of the translator's own.
    unmarked = Message.model_construct(
        type=MessageType.ERROR, error=ErrorInfo(message="x"), _fields_set={"type", "raw"}
    )
    cases: list[tuple[list[Message], int]] = [
        ([], 0),
        ([text], 1),
        ([init], 0),
        ([unknown_subtype], 0),
        ([passed], -1),
        ([bare_error], -1),
        ([unreadable], -1),
        ([error], 1),
        ([unmarked], 0),
        ([init, passed], -1),
        ([passed, text], 1),
        ([unreadable, error], 1),
        ([unknown_subtype, init, passed, unmarked], -1),
    ]
    for out, expected in cases:
        assert _by_the_rule(out) == expected, out
        assert _line_recognition(out) == expected, out
