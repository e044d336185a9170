"""Hand-off on the real pinned agents, offline: the agent writes a hand-off summary, a fresh
agent-side session starts (a new OpenCode session, Codex thread, ACP session), and the next
prompt reaches the model with the summary and without the earlier history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents_support import require_engine

from agentrun import Message, MessageType, run_turn
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

SECRET = "PINEAPPLE-7731"
SUMMARY = "Hand-off: the user chose the word on the first line of the task."


@pytest.mark.parametrize("name", ["opencode", "opencode-acp", "codex", "codex-app-server"])
async def test_handoff_continues_in_a_fresh_agent_session(name: str, tmp_path: Path) -> None:
    require_engine({"codex-app-server": "codex", "opencode-acp": "opencode"}.get(name, name))
    script = Script(
        turns=[
            ModelTurn.text("Noted."),
            ModelTurn.text(SUMMARY),
            ModelTurn.text("Continuing from the hand-off."),
        ]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        seen: list[Message] = []
        async with engine.start(options) as session:
            assert session.can_handoff
            await run_turn(session, f"Remember {SECRET}.", on_message=seen.append, timeout=120)
            first_id = session.resume_id
            handed = await session.handoff(on_message=seen.append, timeout=120)
            assert handed.text == SUMMARY
            after = await run_turn(session, "What now?", on_message=seen.append, timeout=120)
            handoffs = list(session.handoffs)
        last_call = json.dumps(json.loads(server.requests[-1].body))
    assert after.ok and after.text == "Continuing from the hand-off."
    # A new agent-side session, linked to the one before.
    assert handoffs == [(first_id, session.resume_id)]
    assert first_id and session.resume_id and first_id != session.resume_id
    (note,) = [m for m in seen if m.type is MessageType.COMPACTION]
    assert note.turn == 3 and note.data is not None
    assert note.data["trigger"] == "handoff"
    assert (note.data["previous_session_id"], note.data["session_id"]) == handoffs[0]
    # The model sees the summary and the new request, not the earlier conversation.
    assert SUMMARY in last_call and "What now?" in last_call
    assert SECRET not in last_call
