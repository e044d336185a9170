"""Retries and a running tool on the real pinned agents, offline: a failed model call the agent
retries is a typed ``retry`` message, never answer text or a turn error; a long tool is timed by
``tool_timeout`` and reported as a stall, not killed by the idle timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import Message, MessageType, TurnLimits, TurnTimeoutError, run_turn
from agentrun.offline import (
    ModelServer,
    ModelTurn,
    Script,
    StreamError,
    TextBlock,
    ToolCallBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: How each agent is told to retry once (the offline configurations retry never).
ONE_RETRY = {
    "claude": {"env": {"CLAUDE_CODE_MAX_RETRIES": "1"}},
    "codex": {"options": {"codex.config.model_providers.fake.stream_max_retries": "1"}},
    "codex-app-server": {"options": {"codex.config.model_providers.fake.stream_max_retries": "1"}},
}
STATUS = {"claude": 529, "codex": 503, "codex-app-server": 503}


@pytest.mark.parametrize("name", sorted(ONE_RETRY))
async def test_a_retried_model_call_is_a_typed_retry_message(name: str, tmp_path: Path) -> None:
    require_engine({"codex-app-server": "codex"}.get(name, name))
    status = STATUS[name]
    script = Script(
        turns=[ModelTurn.error(status, "busy for a moment"), ModelTurn.text("After the retry.")]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        update = ONE_RETRY[name]
        options = options.model_copy(
            update={
                key: {**getattr(options, key), **value}  # merged over the offline settings
                for key, value in update.items()
            }
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            summary = await run_turn(session, "hi", on_message=seen.append, timeout=120)
    retries = [m for m in seen if m.type is MessageType.RETRY]
    assert len(retries) == 1, [m.type for m in seen]
    retry = retries[0]
    assert retry.error is not None and retry.error.status == status, str(retry.raw)
    assert retry.data is not None and retry.data.get("attempt") == 1, retry.data
    assert retry.data.get("max_attempts") == 1, retry.data
    if name == "claude":
        assert retry.data["delay_s"] > 0  # Claude Code says how long it waits
    # The retry succeeded: the turn is fine, its answer is the model's, no error recorded.
    assert summary.ok and summary.errors == [], summary.errors
    assert summary.text is not None and "After the retry." in summary.text
    assert "busy" not in (summary.all_text or "")


async def test_a_long_tool_runs_under_tool_timeout_and_is_reported_as_a_stall(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    script = Script(
        turns=[
            ModelTurn.shell("sleep 3", say="Running the slow step."),
            ModelTurn.text("The slow step finished."),
            ModelTurn.shell("sleep 3", say="Running it again."),
            ModelTurn.text("Unreachable."),
        ]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", hitl=False)
        seen: list[Message] = []
        async with engine.start(options) as session:
            summary = await run_turn(
                session,
                "run the slow step",
                idle_timeout=1.5,
                tool_timeout=60,
                stall_after=1,
                on_message=seen.append,
                timeout=120,
            )
            assert summary.ok and summary.text == "The slow step finished."
            stalls = [m for m in seen if m.type is MessageType.STALL]
            assert stalls, [m.type for m in seen]
            data = stalls[0].data
            assert data is not None and data["waiting_for"] == "tool"
            assert [t["name"] for t in data["open_tools"]] == ["Bash"]
            # The same tool without a tool timeout: the idle timeout acts on it.
            with pytest.raises(TurnTimeoutError) as info:
                await run_turn(session, "again", idle_timeout=1.5, timeout=120)
            assert info.value.kind == "idle"


@pytest.mark.parametrize("name", ["codex", "codex-app-server"])
async def test_text_streamed_by_a_retried_call_is_not_repeated(name: str, tmp_path: Path) -> None:
    require_engine("codex")
    script = Script(
        turns=[
            # The first call streams part of its answer, then the stream fails; Codex retries.
            ModelTurn(blocks=[TextBlock(text="Partial answer"), StreamError(message="reset")]),
            ModelTurn.text("Partial answer, complete."),
        ]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        options = options.model_copy(
            update={"options": {**options.options, **ONE_RETRY[name]["options"]}}
        )
        seen: list[Message] = []
        async with engine.start(options) as session:
            summary = await run_turn(session, "hi", on_message=seen.append, timeout=120)
    texts = [m.text for m in seen if m.type is MessageType.TEXT]
    assert texts == ["Partial answer", "Partial answer, complete."]  # the stream shows both
    assert summary.text == summary.all_text == "Partial answer, complete."
    assert summary.retries == 1 and summary.ok


async def test_a_turn_that_leaves_background_work_running_says_so(tmp_path: Path) -> None:
    require_engine("claude")
    background = {"command": "sleep 30", "description": "slow job", "run_in_background": True}
    script = Script(
        turns=[
            ModelTurn(blocks=[ToolCallBlock(tool="Bash", arguments=background)]),
            ModelTurn.text("Started it."),
            ModelTurn.text("Still going."),
        ]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", hitl=False)
        async with engine.start(options) as session:
            first = await run_turn(session, "start the job", timeout=120)
            second = await run_turn(session, "how is it?", timeout=120)
    # The turn is over, the agent is not idle: the summary names the work still running.
    (task,) = first.background_tasks
    assert task.description == "slow job" and task.kind == "local_bash"
    assert task.tool_use_id == first.tool_calls[0].id
    assert first.text == "Started it."
    # The next turn still sees it, and its answer is its own.
    assert [t.id for t in second.background_tasks] == [task.id]
    assert second.text == "Still going."


@pytest.mark.parametrize("spelling", ["keywords", "limits"])
async def test_limits_given_as_one_value_are_the_keywords_limits(
    spelling: str, tmp_path: Path
) -> None:
    """``limits=TurnLimits(...)`` reaches a real agent's turn as the keywords do: the tool timeout
    and the stall report act on the running tool, the idle timeout ends a quiet turn."""
    require_engine("claude")
    script = Script(
        turns=[
            ModelTurn.shell("sleep 3", say="Running the slow step."),
            ModelTurn.text("The slow step finished."),
            ModelTurn.shell("sleep 3", say="Running it again."),
            ModelTurn.text("Unreachable."),
        ]
    )

    def spelled(**limits: Any) -> dict[str, Any]:
        return limits if spelling == "keywords" else {"limits": TurnLimits(**limits)}

    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", hitl=False)
        seen: list[Message] = []
        async with engine.start(options) as session:
            # No idle timeout here: a loaded machine's slow start cannot end the turn.
            summary = await run_turn(
                session,
                "run the slow step",
                on_message=seen.append,
                **spelled(tool_timeout=60, stall_after=1, timeout=120),
            )
            assert summary.ok and summary.text == "The slow step finished."
            stalls = [m.data for m in seen if m.type is MessageType.STALL]
            assert any(data is not None and data["waiting_for"] == "tool" for data in stalls)
            with pytest.raises(TurnTimeoutError) as info:
                await run_turn(session, "again", **spelled(idle_timeout=1.5, timeout=120))
            assert info.value.kind == "idle" and info.value.seconds == 1.5
