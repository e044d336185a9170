"""The ACP server's memory of tool ids is bounded: a session of any length keeps the most recent
ids only, and an id an engine reuses after a restart still goes out as a new call while it is
remembered."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun import Message, MessageType, ToolCall
from agentrun._acp_server import _updates
from agentrun._acp_server._updates import RecentIds, UpdateMapper


def test_recent_ids_forget_the_oldest_past_the_limit() -> None:
    ids = RecentIds(limit=3)
    ids.update(["a", "b", "c"])
    ids.add("a")  # seen again: the most recent now
    ids.add("d")
    assert len(ids) == 3
    assert "b" not in ids and all(i in ids for i in "acd")


def _calls(mapper: UpdateMapper, tool_id: str) -> list[dict[str, Any]]:
    tool = ToolCall(id=tool_id, name="Bash", input={"command": "true"})
    done = ToolCall(id=tool_id, name="Bash", output="ok", is_error=False)
    return [
        *mapper.updates(Message(type=MessageType.TOOL_USE, tool=tool)),
        *mapper.updates(Message(type=MessageType.TOOL_RESULT, tool=done)),
    ]


def _sent_ids(updates: list[dict[str, Any]]) -> set[str]:
    return {u["toolCallId"] for u in updates if "toolCallId" in u}


def test_a_long_session_remembers_a_bounded_number_of_tool_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_updates, "REMEMBERED_TOOL_IDS", 8)
    mapper = UpdateMapper()
    mapper.begin_turn()
    assert _sent_ids(_calls(mapper, "toolu_1")) == {"toolu_1"}
    # An engine restarted between turns numbers its tools again: the reused id is a new call.
    mapper.begin_turn()
    assert _sent_ids(_calls(mapper, "toolu_1")) == {"toolu_1~2"}
    # Thousands of tool calls later, the session holds no more than the limit ...
    for turn in range(3, 1_003):
        mapper.begin_turn()
        for n in range(5):
            _calls(mapper, f"call_{turn}_{n}")
    for memory in (mapper._announced, mapper._earlier_tool_ids):  # pyright: ignore[reportPrivateUsage]
        assert len(memory) <= 8
    # ... and an id from long ago is forgotten: it goes out as it came.
    mapper.begin_turn()
    assert _sent_ids(_calls(mapper, "toolu_1")) == {"toolu_1"}
