"""Arguments are validated at the API boundary: a ConfigurationError naming the argument, and
nothing reaches the agent."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun import ConfigurationError, run_turn
from agentrun.testing import ScriptedEngine
from agentrun.testing._scripted_engine import scripted

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("prompt", "kwargs", "option"),
    [
        (None, {}, "prompt"),
        (b"bytes", {}, "prompt"),
        (42, {}, "prompt"),
        ("", {}, "prompt"),
        ("   \n", {}, "prompt"),
        ("nul\0byte", {}, "prompt"),
        ("hi", {"timeout": "5"}, "timeout"),
        ("hi", {"timeout": True}, "timeout"),
        ("hi", {"timeout": -1}, "timeout"),
        ("hi", {"timeout": float("nan")}, "timeout"),
        ("hi", {"idle_timeout": 0}, "idle_timeout"),
        ("hi", {"on_message": 5}, "on_message"),
    ],
)
async def test_bad_turn_arguments_are_typed_errors(
    prompt: Any, kwargs: dict[str, Any], option: str
) -> None:
    engine = ScriptedEngine()
    async with engine.start() as session:
        with pytest.raises(ConfigurationError) as caught:
            await run_turn(session, prompt, **kwargs)
        assert caught.value.option == option
        assert scripted(session).log == []  # nothing reached the agent
        summary = await run_turn(session, "still usable")
    assert summary.ok


async def test_a_session_that_is_not_a_session() -> None:
    with pytest.raises(ConfigurationError, match=r"engine\.start"):
        await run_turn(object(), "hi")  # type: ignore[arg-type]
