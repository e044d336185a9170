"""What an agent's quiet means: a tool still running, the caller deciding a permission, a retry
delay the agent announced, or a stall — reported before the idle timeout acts."""

from __future__ import annotations

import anyio
import pytest

from agentrun import (
    ConfigurationError,
    Message,
    MessageType,
    PermissionDecision,
    PermissionRequest,
    SessionOptions,
    TurnTimeoutError,
    run_turn,
)
from agentrun.testing import Ask, Hang, ScriptedEngine, Sleep
from agentrun.testing._scripted_engine import result, scripted, text, tool_result, tool_use

pytestmark = pytest.mark.anyio


def _types(messages: list[Message]) -> list[str]:
    return [str(m.type) for m in messages]


async def test_an_open_tool_call_is_timed_by_tool_timeout_not_idle_timeout() -> None:
    steps = [tool_use("t1", "Bash", {"command": "make test"}), Sleep(0.8),
             tool_result("t1", "ok"), text("Tests pass."), result("Tests pass.")]  # fmt: skip
    engine = ScriptedEngine([steps, steps])
    async with engine.start() as session:
        summary = await run_turn(session, "test", idle_timeout=0.3, tool_timeout=10)
        assert summary.ok and summary.text == "Tests pass."
        # The same quiet without a tool timeout is an idle timeout, naming the limit.
        with pytest.raises(TurnTimeoutError, match=r"silent for 0\.3s \(idle timeout\)") as info:
            await run_turn(session, "test", idle_timeout=0.3)
        assert info.value.kind == "idle"


async def test_the_tool_timeout_acts_on_a_tool_that_runs_too_long() -> None:
    engine = ScriptedEngine([[tool_use("t1", "Bash"), Hang()]])
    async with engine.start() as session:
        with pytest.raises(TurnTimeoutError, match=r"tool timeout, while Bash ran") as info:
            await run_turn(session, "test", idle_timeout=5, tool_timeout=0.3)
    assert info.value.seconds == 0.3


async def test_no_quiet_clock_runs_while_the_caller_decides_a_permission() -> None:
    async def slow_human(request: PermissionRequest) -> PermissionDecision:
        await anyio.sleep(0.8)
        return PermissionDecision.allow_once()

    ask = Ask(PermissionRequest(tool_name="Bash", tool_use_id="t1", input={"command": "ls"}))
    engine = ScriptedEngine([[ask, text("Listed."), result("Listed.")]])
    options = SessionOptions(hitl=True, permission_handler=slow_human)
    seen: list[Message] = []
    async with engine.start(options) as session:
        summary = await run_turn(session, "ls", idle_timeout=0.3, on_message=seen.append)
        assert summary.ok
        assert scripted(session).log[0].decisions[0].allow
    assert MessageType.STALL not in [m.type for m in seen]


async def test_an_announced_retry_delay_extends_the_idle_clock() -> None:
    def script(prompt: str, number: int) -> list[Message | Sleep]:
        delay = 1.0 if prompt == "announced" else None
        return [Message.retry_notice("overloaded", attempt=1, max_attempts=3, delay_s=delay,
                                     code="overloaded", status=529),
                Sleep(0.7), text("Answer."), result("Answer.")]  # fmt: skip

    engine = ScriptedEngine(script)
    async with engine.start() as session:
        seen: list[Message] = []
        summary = await run_turn(session, "announced", idle_timeout=0.4, on_message=seen.append)
        assert summary.ok
        retry = next(m for m in seen if m.type is MessageType.RETRY)
        assert retry.data == {"attempt": 1, "max_attempts": 3, "delay_s": 1.0}
        assert retry.error is not None and retry.error.status == 529
        # A retry is not a turn error.
        assert summary.errors == []
        with pytest.raises(TurnTimeoutError):
            await run_turn(session, "unannounced", idle_timeout=0.4)


async def test_a_stall_is_reported_once_per_quiet_spell_with_what_was_last_seen() -> None:
    steps = [text("Thinking it over."), Sleep(0.6), text("Still here."), Sleep(0.6),
             result("Done.")]  # fmt: skip
    engine = ScriptedEngine([steps])
    seen: list[Message] = []
    async with engine.start() as session:
        summary = await run_turn(session, "go", stall_after=0.25, on_message=seen.append)
    assert summary.ok
    assert _types(seen) == ["text", "stall", "text", "stall", "result"]
    stall = seen[1]
    assert stall.turn == 1 and stall.data is not None
    assert stall.data["waiting_for"] == "agent" and stall.data["open_tools"] == []
    assert stall.data["last_seen"] == {"type": "text"}
    assert stall.data["quiet_s"] >= 0.25
    assert "acts_in_s" not in stall.data  # no idle limit: nothing will act
    assert stall.text is not None and "quiet" in stall.text


async def test_a_stall_comes_before_the_idle_timeout_and_does_not_reset_it() -> None:
    engine = ScriptedEngine([[tool_use("t1", "pytest"), Hang()]])
    seen: list[Message] = []
    async with engine.start() as session:
        with pytest.raises(TurnTimeoutError):
            await run_turn(session, "go", idle_timeout=0.6, on_message=seen.append)
    stalls = [m for m in seen if m.type is MessageType.STALL]
    assert len(stalls) == 1  # halfway to the idle limit, once
    data = stalls[0].data
    assert data is not None
    assert data["waiting_for"] == "tool"
    assert data["open_tools"] == [{"id": "t1", "name": "pytest"}]
    assert data["last_seen"] == {"type": "tool_use", "tool": "pytest"}
    assert 0 < data["acts_in_s"] <= 0.6
    assert _types(seen)[-1] == "error"


@pytest.mark.parametrize(
    ("argument", "value"),
    [("tool_timeout", 0), ("tool_timeout", "5"), ("stall_after", -1.0),
     ("stall_after", float("inf"))],
)  # fmt: skip
async def test_quiet_arguments_are_checked_at_the_boundary(argument: str, value: object) -> None:
    engine = ScriptedEngine()
    async with engine.start() as session:
        with pytest.raises(ConfigurationError, match=argument):
            await run_turn(session, "hi", **{argument: value})  # type: ignore[arg-type]
        assert session.turns == 0


async def test_the_live_view_shows_retries_and_stalls() -> None:
    import io

    from agentrun._cli.render import Renderer

    out = io.StringIO()
    renderer = Renderer(out, colour=False)
    steps = [Message.retry_notice("overloaded", attempt=2, max_attempts=10, delay_s=0.1,
                                  status=529),
             Sleep(0.5), result("a")]  # fmt: skip
    engine = ScriptedEngine([steps])
    async with engine.start() as session:
        await run_turn(session, "go", stall_after=0.25, on_message=renderer.message)
    shown = out.getvalue()
    assert "↻ retry 2/10 after HTTP 529 in 0.1s" in shown
    assert "… scripted has been quiet for" in shown and "(waiting for the retry)" in shown
