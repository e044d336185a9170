"""Input to a running turn on the real pinned agents, offline: ``turn.steer(text)`` while a slow
tool runs reaches the agent's next model request, and the summary records it; engines whose
agent takes no input during a turn refuse at once with :class:`SteeringNotSupportedError`."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_support import require_engine

from agentrun import MessageType, SteeringNotSupportedError, UsageError
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

STEERED = "Also mention the colour purple."


def _slow_tool_script() -> Script:
    return Script(
        turns=[
            ModelTurn.shell("sleep 3", say="Running the slow step."),
            ModelTurn.text("Done, and purple."),
        ]
    )


@pytest.mark.parametrize("name", ["claude", "codex-app-server"])
async def test_a_steer_while_a_tool_runs_reaches_the_next_model_request(
    name: str, tmp_path: Path
) -> None:
    require_engine({"codex-app-server": "codex"}.get(name, name))
    async with ModelServer(_slow_tool_script()) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent", hitl=False)
        async with engine.start(options) as session:
            assert session.can_steer
            async with session.turn("do the slow step", timeout=120) as turn:
                async for message in turn:
                    if message.type is MessageType.TOOL_USE and not turn.summary.steered:
                        await turn.steer(STEERED)
            summary = turn.summary
            with pytest.raises(UsageError):
                await turn.steer("too late")
        requests = [r for r in server.requests if r.turn_index is not None]
    assert summary.ok, summary.errors
    assert [s.text for s in summary.steered] == [STEERED]
    assert 0 < summary.steered[0].at_s < 60
    # One turn, one result: the steered text went into the turn's next model request.
    assert len(requests) == 2
    assert STEERED.encode() not in requests[0].body
    assert STEERED.encode() in requests[1].body
    assert summary.text == "Done, and purple."


@pytest.mark.parametrize("name", ["codex", "opencode", "opencode-acp"])
async def test_engines_without_input_during_a_turn_refuse_at_once(
    name: str, tmp_path: Path
) -> None:
    require_engine({"opencode-acp": "opencode"}.get(name, name))
    async with ModelServer(Script.of("Hello.")) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            assert not session.can_steer
            async with session.turn("hi", timeout=120) as turn:
                with pytest.raises(SteeringNotSupportedError) as caught:
                    await turn.steer(STEERED)
                async for _ in turn:
                    pass
    assert caught.value.error_code == "steering_not_supported"
    assert turn.summary.ok and turn.summary.steered == []
