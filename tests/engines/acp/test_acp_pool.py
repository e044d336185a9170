"""Pooled ACP sessions where a real agent cannot take them: an agent that ignores one
session's ``session/cancel`` (the scripted fake's ``deaf`` prompt).

Unpooled, such an agent is killed once the grace ran out (tests/core/test_hard_timeouts.py).
Pooled, the process serves other sessions: only the deaf session ends
(``SessionTerminatedError`` from its next turn), its neighbour on the same process goes on, and
what the agent still says for the ended session reaches nobody.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from repo_paths import FAKES

from agentrun import Message, SessionOptions, run_turn
from agentrun._vocabulary.errors import SessionTerminatedError, TurnTimeoutError
from agentrun.engines.acp import AcpEngine

pytestmark = pytest.mark.anyio


def _pid(driver: object) -> int:
    pid = getattr(driver, "pid", None)
    assert isinstance(pid, int)
    return pid


async def test_a_pooled_session_whose_cancel_is_ignored_ends_alone(tmp_path: Path) -> None:
    engine = AcpEngine([sys.executable, str(FAKES / "acp_agent.py")], pool=2, terminate_timeout=1.0)
    options = SessionOptions(cwd=str(tmp_path))
    heard: list[Message] = []
    async with engine.start(options) as deaf, engine.start(options) as neighbour:
        pid = _pid(deaf.driver)
        assert _pid(neighbour.driver) == pid
        deaf.cancel_grace = 0.5
        with pytest.raises(TurnTimeoutError):
            await run_turn(deaf, "deaf", timeout=1)
        with pytest.raises(SessionTerminatedError):
            await run_turn(deaf, "next", timeout=5)
        # The agent still streams for the ended session: none of it reaches the neighbour.
        summary = await run_turn(neighbour, "hello there", on_message=heard.append, timeout=10)
        assert summary.ok, summary.errors
        assert "hello there" in summary.text
        assert not [m for m in heard if "still here" in (m.text or "")]
        assert _pid(neighbour.driver) == pid
        os.kill(pid, 0)  # the shared process was not killed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
