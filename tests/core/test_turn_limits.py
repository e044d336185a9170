"""A turn's limits as one value: ``TurnLimits`` is checked once, when it is made, with the same
typed errors the keyword arguments raise; ``limits=`` and the keywords are two spellings of the
same turn, and a field given both ways is refused."""

from __future__ import annotations

import dataclasses
import math
import pickle
from typing import Any

import pytest

from agentrun import ConfigurationError, FleetTask, TurnLimits, WindDown, run_turn
from agentrun.testing import ScriptedEngine
from agentrun.testing._scripted_engine import scripted

pytestmark = pytest.mark.anyio

SECONDS = ("timeout", "idle_timeout", "tool_timeout", "stall_after")


def _stable_id(value: object) -> str:
    """A test id that is the same in every worker (an object's repr holds its address)."""
    return "object()" if type(value) is object else repr(value)


BAD_SECONDS: list[Any] = [-1, 0, -0.5, math.nan, math.inf, -math.inf, "5", True, [5], object()]


@pytest.mark.parametrize("field", SECONDS)
@pytest.mark.parametrize("value", BAD_SECONDS, ids=_stable_id)
async def test_a_bad_number_of_seconds_is_the_error_the_keyword_raises(
    field: str, value: Any
) -> None:
    with pytest.raises(ConfigurationError) as made:
        TurnLimits(**{field: value})
    assert made.value.option == field
    async with ScriptedEngine().start() as session:
        with pytest.raises(ConfigurationError) as keyword:
            await run_turn(session, "hi", **{field: value})
        with pytest.raises(ConfigurationError) as streaming:
            session.turn("hi", **{field: value})
        assert scripted(session).log == []  # nothing reached the agent
    # One check, one wording, whichever way the limit is given.
    assert made.value.message == keyword.value.message == streaming.value.message


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"wind_down": 5}, "needs a timeout"),
        ({"wind_down": 10, "timeout": 10}, "less than the timeout"),
        ({"wind_down": WindDown(seconds=20), "timeout": 10}, "less than the timeout"),
        ({"wind_down": math.nan, "timeout": 10}, "positive"),
        ({"wind_down": math.inf, "timeout": 10}, "positive"),
        ({"wind_down": "5", "timeout": 10}, "number of seconds"),
    ],
)
def test_a_bad_wind_down_is_refused_when_the_value_is_made(
    fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigurationError, match=words) as caught:
        TurnLimits(**fields)
    assert caught.value.option == "wind_down"


def test_the_value_is_frozen_and_keeps_what_it_was_given() -> None:
    limits = TurnLimits(timeout=60, idle_timeout=10, tool_timeout=600, stall_after=5, wind_down=15)
    assert (limits.timeout, limits.idle_timeout, limits.tool_timeout, limits.stall_after) == (
        60,
        10,
        600,
        5,
    )
    assert limits.wind_down == WindDown(seconds=15)  # seconds become the default wording
    own = WindDown(seconds=15, text="Stop now and summarize.")
    assert TurnLimits(timeout=60, wind_down=own).wind_down is own
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.timeout = 1  # type: ignore[misc]
    assert limits == TurnLimits(
        timeout=60, idle_timeout=10, tool_timeout=600, stall_after=5, wind_down=15
    )
    assert hash(limits) == hash(dataclasses.replace(limits))
    assert TurnLimits() == TurnLimits(timeout=None)
    with pytest.raises(TypeError):
        TurnLimits(60)  # type: ignore[misc]  # keywords only: no guessing which limit is meant
    # A changed copy is checked again.
    with pytest.raises(ConfigurationError, match="less than the timeout"):
        dataclasses.replace(limits, timeout=15)
    assert dataclasses.replace(limits, stall_after=None).stall_after is None
    # It crosses process boundaries (a fleet's workers) as itself.
    assert pickle.loads(pickle.dumps(limits)) == limits


async def test_limits_and_keywords_are_one_turn() -> None:
    keywords: dict[str, Any] = {
        "timeout": 60,
        "idle_timeout": 10,
        "tool_timeout": 600,
        "stall_after": 5,
        "wind_down": 15,
    }
    limits = TurnLimits(**keywords)
    async with ScriptedEngine().start() as session:
        assert session.turn("hi", **keywords).limits == limits
        assert session.turn("hi", limits=limits).limits == limits
        # Fields the value leaves open may come as keywords: the two are merged (and checked).
        merged = session.turn("hi", limits=TurnLimits(timeout=60), wind_down=15, stall_after=5)
        assert merged.limits == TurnLimits(timeout=60, wind_down=15, stall_after=5)
        with pytest.raises(ConfigurationError, match="less than the timeout"):
            session.turn("hi", limits=TurnLimits(timeout=10), wind_down=15)
        summary = await run_turn(session, "hi", limits=limits)
    assert summary.ok


@pytest.mark.parametrize("field", [*SECONDS, "wind_down"])
async def test_a_limit_given_both_ways_is_refused(field: str) -> None:
    limits = TurnLimits(timeout=60, idle_timeout=10, tool_timeout=600, stall_after=5, wind_down=15)
    # A second spelling is refused, never merged: even one that agrees (timeout, wind_down).
    again: dict[str, Any] = {field: {"timeout": 60, "wind_down": 15}.get(field, 5)}
    async with ScriptedEngine().start() as session:
        with pytest.raises(ConfigurationError, match="given twice") as caught:
            await run_turn(session, "hi", limits=limits, **again)
        assert caught.value.option == field
        with pytest.raises(ConfigurationError, match="given twice"):
            session.turn("hi", limits=limits, **again)
        assert session.turns == 0 and scripted(session).log == []


@pytest.mark.parametrize("limits", [{"timeout": 5}, 5, "timeout=5"], ids=repr)
async def test_limits_that_are_no_turn_limits_are_refused(limits: Any) -> None:
    async with ScriptedEngine().start() as session:
        with pytest.raises(ConfigurationError, match="must be a TurnLimits") as caught:
            await run_turn(session, "hi", limits=limits)
        assert caught.value.option == "limits"
        with pytest.raises(ConfigurationError, match="must be a TurnLimits"):
            session.turn("hi", limits=limits)
        assert session.turns == 0


def test_a_fleet_task_refuses_limits_no_turn_could_run_with() -> None:
    # Refused where the task is made, not when its first turn starts.
    for fields in ({"timeout": math.inf}, {"idle_timeout": math.inf}):
        with pytest.raises(ConfigurationError, match="positive number of seconds"):
            FleetTask(engine="claude", prompts=("hi",), **fields)
    task = FleetTask(engine="claude", prompts=("hi",), timeout=60, idle_timeout=9, wind_down=5)
    assert task.limits == TurnLimits(timeout=60, idle_timeout=9, wind_down=5)
