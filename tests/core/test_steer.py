"""``Turn.steer`` without an agent: refused at once where the engine takes no input during a
turn, refused outside a running turn or for text that is no prompt, and recorded in the
summary in the order it was given."""

from __future__ import annotations

import pytest

from agentrun import (
    ConfigurationError,
    MessageType,
    Session,
    SessionOptions,
    SteeringNotSupportedError,
    UsageError,
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


async def test_an_engine_without_steering_refuses_at_once() -> None:
    async with ScriptedEngine().start() as session:
        turn = session.turn("hi")
        with pytest.raises(SteeringNotSupportedError):
            await turn.steer("more")
        async with turn:
            with pytest.raises(SteeringNotSupportedError):
                await turn.steer("more")
            async for _ in turn:
                pass
    assert turn.summary.steered == []


async def test_steering_is_for_a_running_turn_and_is_recorded() -> None:
    steps = [tool_use("t1", "Bash"), Sleep(0.2), text("done"), result("done")]
    async with _SteerableEngine([steps]).start() as session:
        turn = session.turn("work")
        with pytest.raises(UsageError):
            await turn.steer("too early")
        async with turn:
            with pytest.raises(ConfigurationError):
                await turn.steer("")
            async for message in turn:
                if message.type is MessageType.TOOL_USE:
                    await turn.steer("first")
                    await turn.steer("second")
        with pytest.raises(UsageError):
            await turn.steer("too late")
        driver = session.driver
        assert isinstance(driver, _SteerableDriver)
        assert driver.received == ["first", "second"]
    steered = turn.summary.steered
    assert [s.text for s in steered] == ["first", "second"]
    assert 0 <= steered[0].at_s <= steered[1].at_s < 5
