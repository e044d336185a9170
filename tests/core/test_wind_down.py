"""``wind_down`` without an agent: the arguments are checked at the boundary, the wrap-up text
reaches a steerable session that many seconds before the deadline, an engine that takes no
input during a turn gets a ``system`` ``wind_down`` notice and the turn goes on, and the
summary's JSON form leaves ``wound_down`` out when the turn was not wound down."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun import (
    ConfigurationError,
    FleetTask,
    Message,
    MessageType,
    Session,
    SessionOptions,
    TurnTimeoutError,
    WindDown,
    run_turn,
)
from agentrun._turns.turn import TurnContext
from agentrun.testing._scripted_engine import (
    ScriptedDriver,
    ScriptedEngine,
    Sleep,
    result,
    text,
    tool_use,
)

pytestmark = pytest.mark.anyio


class _SteerableDriver(ScriptedDriver):
    received: list[str]

    @property
    def can_steer(self) -> bool:
        return True

    async def steer(self, ctx: TurnContext, text: str) -> None:
        self.received.append(text)


class _SteerableEngine(ScriptedEngine):
    def start(self, options: SessionOptions | None = None) -> Session:
        driver = _SteerableDriver(self, options)
        driver.received = []
        return Session(driver)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"wind_down": 5}, "needs a timeout"),
        ({"wind_down": 10, "timeout": 10}, "less than the timeout"),
        ({"wind_down": 0, "timeout": 10}, "positive"),
        ({"wind_down": -1, "timeout": 10}, "positive"),
        ({"wind_down": float("nan"), "timeout": 10}, "positive"),
        ({"wind_down": True, "timeout": 10}, "number of seconds"),
        ({"wind_down": "5", "timeout": 10}, "number of seconds"),
        ({"wind_down": WindDown(seconds=20), "timeout": 10}, "less than the timeout"),
    ],
)
async def test_bad_wind_down_arguments_are_refused_before_anything_runs(
    arguments: dict[str, Any], words: str
) -> None:
    async with ScriptedEngine().start() as session:
        with pytest.raises(ConfigurationError) as caught:
            await run_turn(session, "hi", **arguments)
        assert words in caught.value.message
        assert caught.value.option == "wind_down"
        with pytest.raises(ConfigurationError):
            session.turn("hi", **arguments)
        assert session.turns == 0


def test_a_wind_down_value_checks_its_fields() -> None:
    for fields in ({"seconds": 0}, {"seconds": 1, "text": "  "}, {"seconds": 1, "extra": 1}):
        with pytest.raises(ConfigurationError):
            WindDown(**fields)
    with pytest.raises(ConfigurationError):
        FleetTask(engine="claude", prompts=("hi",), timeout=10, wind_down=10)
    with pytest.raises(ConfigurationError):
        FleetTask(engine="claude", prompts=("hi",), wind_down=1)
    assert "final answer" in WindDown(seconds=1).text


async def test_a_steerable_turn_is_told_to_wrap_up_before_its_deadline() -> None:
    steps = [tool_use("t1", "Bash"), Sleep(0.6), text("wrapped up"), result("wrapped up")]
    seen: list[Message] = []
    async with _SteerableEngine([steps]).start() as session:
        driver = session.driver
        assert isinstance(driver, _SteerableDriver)
        summary = await run_turn(
            session,
            "work",
            timeout=5,
            wind_down=WindDown(seconds=4.7, text="Stop now."),
            on_message=seen.append,
        )
        assert driver.received == ["Stop now."]
    assert summary.ok
    wound = summary.wound_down
    assert wound is not None and wound.steered and wound.ended_by_itself
    assert 0.2 <= wound.at_s < 0.6
    assert [s.text for s in summary.steered] == ["Stop now."]
    notes = [m for m in seen if m.subtype == "wind_down"]
    assert len(notes) == 1 and notes[0].type is MessageType.SYSTEM
    assert notes[0].data is not None and notes[0].data["steered"] is True
    # Between the tool's start and the answer: the tool was still running.
    kinds = [m.subtype or str(m.type) for m in seen]
    assert kinds.index("tool_use") < kinds.index("wind_down") < kinds.index("text")
    assert summary.model_dump(mode="json")["wound_down"] == {
        "at_s": wound.at_s,
        "steered": True,
        "ended_by_itself": True,
    }


async def test_an_engine_without_steering_gets_a_notice_and_runs_on_to_its_deadline() -> None:
    steps = [tool_use("t1", "Bash"), Sleep(5)]
    seen: list[Message] = []
    async with ScriptedEngine([steps]).start() as session:
        with pytest.raises(TurnTimeoutError) as caught:
            await run_turn(session, "work", timeout=0.8, wind_down=0.6, on_message=seen.append)
    summary = caught.value.summary
    assert summary is not None
    wound = summary.wound_down
    assert wound is not None and not wound.steered and not wound.ended_by_itself
    assert summary.steered == []
    (note,) = [m for m in seen if m.subtype == "wind_down"]
    assert note.data is not None and note.data["steered"] is False
    assert "takes no input while a turn runs" in (note.text or "")


async def test_a_turn_that_ends_before_the_wind_down_is_not_wound_down() -> None:
    async with _SteerableEngine([[text("quick"), result("quick")]]).start() as session:
        driver = session.driver
        assert isinstance(driver, _SteerableDriver)
        async with session.turn("hi", timeout=30, wind_down=10) as turn:
            async for _ in turn:
                pass
        assert driver.received == []
    assert turn.summary.wound_down is None
    assert "wound_down" not in turn.summary.model_dump(mode="json")
