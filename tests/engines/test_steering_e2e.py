"""Input to a running turn on the real pinned agents, offline: ``turn.steer(text)`` while a slow
tool runs reaches the agent's next model request, and the summary records it; engines whose
agent takes no input during a turn refuse at once with :class:`SteeringNotSupportedError`.
``wind_down`` steers the agent to wrap up before the deadline while its tool still runs, and
the turn then ends by itself before the deadline; elsewhere it says so in a notice."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_support import live_engine, require_engine

from agentrun import Message, MessageType, SteeringNotSupportedError, UsageError, WindDown, run_turn
from agentrun.offline import (
    ModelServer,
    ModelTurn,
    Script,
    TextBlock,
    ToolCallBlock,
    embedded_engine,
)

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


#: The engines whose agent takes no input while a turn runs.
REFUSES_STEER = (
    "codex",
    "opencode",
    "opencode-acp",
    "claude-acp",
    "codex-acp",
    "gemini",
    "qwen",
    "acp",
)


@pytest.mark.parametrize("name", REFUSES_STEER)
async def test_engines_without_input_during_a_turn_refuse_at_once(
    name: str, tmp_path: Path
) -> None:
    require_engine({"opencode-acp": "opencode", "acp": "claude-acp"}.get(name, name))
    # The model takes its time, so the turn still runs when the wind-down acts: an ACP agent
    # whose session is open answers a prompt in less than the tenth of a second otherwise.
    slow = Script(turns=[ModelTurn.text("Hello.").model_copy(update={"delay_before": 2.0})])
    async with ModelServer(slow) as server:
        engine, options = live_engine(name, server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            assert not session.can_steer
            # The wind-down acts a tenth of a second in, while the turn runs.
            async with session.turn("hi", timeout=120, wind_down=119.9) as turn:
                with pytest.raises(SteeringNotSupportedError) as caught:
                    await turn.steer(STEERED)
                notes = [m async for m in turn if m.subtype == "wind_down"]
    assert caught.value.error_code == "steering_not_supported"
    assert turn.summary.ok and turn.summary.steered == []
    # Not an error and not silent: a notice, and the turn ran on to its own end.
    assert len(notes) == 1 and notes[0].type is MessageType.SYSTEM, notes
    assert "takes no input while a turn runs" in (notes[0].text or "")
    wound = turn.summary.wound_down
    assert wound is not None and not wound.steered and wound.ended_by_itself


WRAP_UP = "Time is nearly up: stop and report."


@pytest.mark.parametrize("name", ["claude", "codex-app-server"])
async def test_a_wound_down_turn_ends_by_itself_before_its_deadline(
    name: str, tmp_path: Path
) -> None:
    require_engine({"codex-app-server": "codex"}.get(name, name))
    # The wind-down acts 4 s into the turn, while the 6 s tool runs; the tool's end, the
    # answer and the result come well before the 15 s deadline.
    timeout, wind_down = 15.0, 11.0
    # Codex hands a command still running after yield_time_ms back to the model (1 s unless
    # the call says otherwise): this one waits for its end.
    extra = {"yield_time_ms": 10_000} if name == "codex-app-server" else {}
    long_step = ToolCallBlock(tool="shell", arguments={"command": "sleep 6", **extra})
    script = Script(
        turns=[
            ModelTurn(blocks=[TextBlock(text="Running the long step."), long_step]),
            ModelTurn.text("Stopped as asked: the long step ran."),
        ]
    )
    seen: list[Message] = []
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent", hitl=False)
        async with engine.start(options) as session:
            summary = await run_turn(
                session,
                "do the long step",
                timeout=timeout,
                wind_down=WindDown(seconds=wind_down, text=WRAP_UP),
                on_message=seen.append,
            )
        requests = [r for r in server.requests if r.turn_index is not None]
    assert summary.ok, summary.errors
    wound = summary.wound_down
    assert wound is not None and wound.steered and wound.ended_by_itself, wound
    assert wound.at_s == pytest.approx(timeout - wind_down, abs=0.5)
    assert summary.duration_s is not None and summary.duration_s < timeout
    assert summary.text == "Stopped as asked: the long step ran."
    # The steer came while the tool was running: after its start, before its result.
    order = [m.subtype if m.subtype == "wind_down" else str(m.type) for m in seen]
    assert order.index("tool_use") < order.index("wind_down") < order.index("tool_result")
    # The next model request carried the wrap-up text; the first did not.
    assert len(requests) == 2
    assert WRAP_UP.encode() not in requests[0].body
    assert WRAP_UP.encode() in requests[1].body
