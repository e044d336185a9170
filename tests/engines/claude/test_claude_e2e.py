"""The real pinned ``claude`` through ``run_turn`` against the embedded model server.

Run inside the loopback-only namespace:
``.venv/bin/python -m agentrun.offline netns -- .venv/bin/pytest tests/engines/claude/test_claude_e2e.py``
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import require_engine

from agentrun._turns.run import run_turn
from agentrun._turns.session import Session
from agentrun._vocabulary.messages import Message, MessageType
from agentrun._vocabulary.options import SessionOptions
from agentrun._vocabulary.permissions import (
    PermissionDecision,
    PermissionRequest,
    approve_all,
    deny_all,
)
from agentrun.engines.claude import ClaudeDriver, ClaudeEngine
from agentrun.offline import ModelServer, claude_offline
from agentrun.offline._script import Script, Text, Turn, Usage

pytestmark = [pytest.mark.agent, pytest.mark.anyio]


@pytest.fixture
def binary() -> str:
    return require_engine("claude")


def _u(inp: int, read: int, write: int, out: int) -> Usage:
    return Usage(
        input_tokens=inp, cache_read_tokens=read, cache_write_tokens=write, output_tokens=out
    )


@asynccontextmanager
async def _session(
    binary: str, script: Script, tmp: Path, **options: Any
) -> AsyncIterator[tuple[Session, ModelServer]]:
    async with ModelServer(script) as server:
        config = claude_offline(server.url, tmp)
        workspace = tmp / "workspace"
        workspace.mkdir(exist_ok=True)
        session = SessionOptions(
            env=dict(config.env), inherit_env=False, cwd=str(workspace), **options
        )
        process = ClaudeEngine(binary).start(session)
        async with process:
            yield process, server


async def test_multi_turn_resume_and_context_gauge(binary: str, tmp_path: Path) -> None:
    script = Script(
        turns=[
            Turn.text("First.", usage=_u(11, 8000, 2000, 2)),
            Turn.text("Second.", usage=_u(13, 10_000, 40, 2)),
        ]
    )
    async with _session(binary, script, tmp_path) as (process, _):
        one = await run_turn(process, "one", timeout=30)
        two = await run_turn(process, "two", timeout=30)
        driver = process.driver
        assert isinstance(driver, ClaudeDriver)
        usage = await driver.get_context_usage()
    assert (one.text, two.text) == ("First.", "Second.")
    assert one.context is not None and two.context is not None
    assert (one.context.used, one.context.size) == (10_011, 1_000_000)
    assert (two.context.used, two.context.size) == (10_053, 1_000_000)
    assert two.context.size_source == "agent"
    assert one.usage is not None and two.usage is not None
    assert two.usage.cost_usd is not None and 0 < two.usage.cost_usd < one.usage.cost_usd
    assert usage["maxTokens"] == 1_000_000
    resume_id = two.resume_id
    assert resume_id

    script2 = Script(turns=[Turn.text("Resumed.", usage=_u(20, 10_100, 30, 2))])
    async with _session(binary, script2, tmp_path, resume_id=resume_id) as (process, server):
        three = await run_turn(process, "three", timeout=30)
    assert three.ok and three.text == "Resumed." and three.resume_id == resume_id
    assert three.usage is not None and three.usage.cost_usd is not None
    assert three.usage.cost_usd < one.usage.cost_usd  # never the cumulative session cost
    assert len(server.model_requests) == 1


async def test_interrupt_then_next_turn_is_clean(binary: str, tmp_path: Path) -> None:
    slow = Turn(
        blocks=[Text(text="slow " * 200)], chunk_delay=0.05, chunk_chars=5, usage=_u(9, 9000, 9, 9)
    )
    script = Script(turns=[slow, Turn.text("Fresh answer.", usage=_u(10, 9100, 10, 2))])
    async with _session(binary, script, tmp_path) as (process, _):
        seen: list[Message] = []

        def on_message(message: Message) -> None:
            seen.append(message)

        with anyio.move_on_after(2.0) as scope:
            await run_turn(process, "count", on_message=on_message)
        assert scope.cancelled_caught
        assert any(m.type is MessageType.TEXT_DELTA for m in seen)
        second: list[Message] = []
        summary = await run_turn(process, "again", on_message=second.append, timeout=30)
    assert summary.ok and summary.text == "Fresh answer."
    assert all("slow" not in (m.text or "") for m in second)
    assert all(m.turn == 2 for m in second)


@pytest.mark.parametrize("allow", [True, False], ids=["approve", "deny"])
async def test_permission_callback(binary: str, tmp_path: Path, allow: bool) -> None:
    asked: list[PermissionRequest] = []

    async def handler(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return await (approve_all if allow else deny_all)(request)

    script = Script(
        turns=[
            Turn.shell("touch made.txt", say="Creating.", usage=_u(20, 9000, 100, 5)),
            Turn.text("Done.", usage=_u(21, 9100, 10, 1)),
        ]
    )
    async with _session(binary, script, tmp_path, hitl=True, permission_handler=handler) as (
        process,
        _,
    ):
        summary = await run_turn(process, "make it", timeout=30)
    assert [r.tool_name for r in asked] == ["Bash"]
    assert asked[0].tool_use_id and asked[0].input == {"command": "touch made.txt"}
    assert summary.ok
    made = (tmp_path / "workspace" / "made.txt").exists()
    if allow:
        assert made and not summary.denials
        assert summary.tool_calls[0].is_error is False
    else:
        assert not made
        assert [d.tool_name for d in summary.denials] == ["Bash"]


async def test_http_500_is_a_failed_summary(binary: str, tmp_path: Path) -> None:
    async with _session(binary, Script(turns=[Turn.error(500)]), tmp_path) as (process, _):
        with anyio.fail_after(30):
            summary = await run_turn(process, "hi")
    assert not summary.ok and summary.has_result
    assert summary.errors[-1].status == 500 and summary.errors[-1].fatal
