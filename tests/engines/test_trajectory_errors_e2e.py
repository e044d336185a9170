"""Trajectories of real agents at their edges: a turn the API refuses exports, reads back and
exports again unchanged, its errors kept; a trajectory whose subagent references itself
continues on another agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import AgentrunError, Message, MessageType, run_turn
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine
from agentrun.trajectory import Trajectory, from_atif, to_atif

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


def _errors(messages: Any) -> list[dict[str, Any]]:
    return [
        m.error.model_dump(exclude_none=True)
        for m in messages
        if m.type is MessageType.ERROR and m.error is not None
    ]


@pytest.mark.parametrize("name", ["claude", "codex", "opencode"])
async def test_a_turn_the_api_refuses_keeps_its_errors_through_export_and_import(
    name: str, tmp_path: Path
) -> None:
    require_engine(name)
    script = Script(turns=[ModelTurn.error(401, "invalid x-api-key", repeat=20)])
    seen: list[Message] = []
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            with pytest.raises(AgentrunError):
                await run_turn(session, "say hello", on_message=seen.append, timeout=120)
    live_errors = _errors(seen)
    assert live_errors, [m.type for m in seen]
    first = to_atif([seen], prompts=["say hello"])
    document = first.model_dump_json(exclude_none=True)
    Trajectory.model_validate_json(document)  # the RFC's models, strict
    (turn,) = from_atif(document).turns
    # The errors the agent reported before any model step are read back, in order.
    assert _errors(turn.messages) == live_errors
    assert [e.message for e in turn.summary.errors][: len(live_errors)] == [
        e["message"] for e in live_errors
    ]
    assert not turn.summary.ok
    again = to_atif([turn])
    assert again.model_dump(mode="json", exclude_none=True) == first.model_dump(
        mode="json", exclude_none=True
    )


def _self_referencing() -> dict[str, Any]:
    def delegating(step_id: int, call_id: str, say: str) -> dict[str, Any]:
        return {
            "step_id": step_id,
            "source": "agent",
            "message": say,
            "tool_calls": [
                {"tool_call_id": call_id, "function_name": "Task", "arguments": {"path": "x.py"}}
            ],
            "observation": {
                "results": [
                    {
                        "source_call_id": call_id,
                        "content": "done",
                        "subagent_trajectory_ref": [{"trajectory_id": "loop"}],
                    }
                ]
            },
        }

    agent = {"name": "other-tool", "version": "1"}
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": "recorded-1",
        "agent": agent,
        "steps": [
            {"step_id": 1, "source": "user", "message": "tidy x.py"},
            delegating(2, "c1", "Delegating."),
        ],
        "subagent_trajectories": [
            {
                "schema_version": "ATIF-v1.7",
                "trajectory_id": "loop",
                "agent": agent,
                "steps": [delegating(1, "c2", "Delegating again.")],
            }
        ],
    }


async def test_a_trajectory_whose_subagent_references_itself_continues_on_claude(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    script = Script(turns=[ModelTurn.text("Carrying on.")])
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            digest = session.continue_trajectory(_self_referencing())
            summary = await run_turn(session, "Carry on.", timeout=120)
        body = json.dumps(json.loads(server.requests[-1].body))
    assert summary.ok and summary.text == "Carrying on."
    assert "tidy x.py" in digest and "- x.py" in digest
    for line in filter(None, digest.splitlines()):
        assert json.dumps(line)[1:-1] in body, line
