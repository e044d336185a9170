"""End to end: the real pinned ``opencode acp`` through ``run_turn``, against the embedded model
server (offline). Run in the loopback-only namespace::

    .venv/bin/python -m agentrun.offline netns -- .venv/bin/pytest tests/engines/acp/test_acp_e2e.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import SessionOptions
from agentrun._turns.run import run_turn
from agentrun._vocabulary.messages import Message, MessageType
from agentrun._vocabulary.permissions import PermissionDecision, PermissionRequest
from agentrun.engines.acp import opencode_acp
from agentrun.offline import (
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    TextBlock,
    ToolCallBlock,
    opencode_offline,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


@pytest.fixture
def opencode() -> str:
    return require_engine("opencode")


def _session(server: ModelServer, tmp_path: Path, **options: Any) -> SessionOptions:
    permission = options.pop("permission", None)
    config = opencode_offline(server.url, tmp_path / "agent", permission=permission)
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return SessionOptions(
        cwd=str(workspace),
        env=dict(config.env),
        inherit_env=False,
        model=config.model,
        **options,
    )


async def test_turns_context_gauge_and_api_error(opencode: str, tmp_path: Path) -> None:
    script = Script(
        turns=[
            ModelTurn.text(
                "First answer.",
                usage=ScriptUsage(input_tokens=1000, cache_read_tokens=200, output_tokens=7),
            ),
            ModelTurn.error(500, "scripted upstream failure", repeat=6),
            ModelTurn.text(
                "Still here.",
                usage=ScriptUsage(input_tokens=300, cache_read_tokens=1200, output_tokens=3),
            ),
        ]
    )
    seen: list[Message] = []
    async with ModelServer(script) as server:
        session = _session(server, tmp_path)
        async with opencode_acp(binary=opencode).start(session) as process:
            first = await run_turn(process, "say hi", on_message=seen.append, timeout=60)
            failed = await run_turn(process, "fail now", timeout=60)
            third = await run_turn(process, "are you there?", timeout=60)
    init = next(m for m in seen if m.type is MessageType.INIT)
    assert init.init is not None
    assert init.init.agent_name == "OpenCode"
    assert init.init.model == "fake/fake-model"
    assert first.ok and first.text == "First answer."
    assert first.usage is not None
    assert (first.usage.input_tokens, first.usage.cache_read_tokens) == (1000, 200)
    assert first.usage.output_tokens == 7
    assert first.context is not None
    assert first.context.size == 200_000
    assert first.context.used == 1200
    assert first.context.size_source == "agent"
    assert first.resume_id and first.resume_id.startswith("ses_")
    assert not failed.ok
    assert failed.has_result
    assert failed.errors[0].code == "APIError"
    assert "scripted upstream failure" in failed.errors[0].message
    assert third.ok and third.text == "Still here."
    assert third.resume_id == first.resume_id


async def test_permission_callback_approve_then_deny(opencode: str, tmp_path: Path) -> None:
    script = Script(
        turns=[
            ModelTurn(blocks=[ToolCallBlock(tool="shell", arguments={"command": "echo hi"})]),
            ModelTurn.text("It printed hi."),
            ModelTurn(blocks=[ToolCallBlock(tool="shell", arguments={"command": "touch f"})]),
        ]
    )
    asked: list[PermissionRequest] = []

    async def handler(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        if len(asked) == 1:
            return PermissionDecision.allow_once()
        return PermissionDecision.deny("not this one")

    async with ModelServer(script) as server:
        session = _session(
            server, tmp_path, permission={"bash": "ask"}, hitl=True, permission_handler=handler
        )
        async with opencode_acp(binary=opencode).start(session) as process:
            approved = await run_turn(process, "run echo hi", timeout=60)
            denied = await run_turn(process, "create a file", timeout=60)
    assert [r.input.get("command") for r in asked] == ["echo hi", "touch f"]
    assert approved.ok and approved.text == "It printed hi."
    assert approved.tool_calls[0].output == "hi\n"
    assert approved.tool_calls[0].is_error is False
    assert approved.denials == []
    assert len(denied.denials) == 1
    assert denied.denials[0].tool_use_id == denied.tool_calls[0].id
    assert denied.tool_calls[0].is_error is True
    assert not (tmp_path / "workspace" / "f").exists()


async def test_cancel_and_continue(opencode: str, tmp_path: Path) -> None:
    counting = "Counting: " + " ".join(str(i) for i in range(300))
    slow = ModelTurn(
        blocks=[TextBlock(text=counting)],
        chunk_delay=0.05,
        chunk_chars=6,
    )
    script = Script(turns=[slow, ModelTurn.text("Fresh answer.")])
    async with ModelServer(script) as server:
        session = _session(server, tmp_path)
        async with opencode_acp(binary=opencode).start(session) as process:
            async with process.turn("count slowly", timeout=60) as turn:
                async for message in turn:
                    if message.type is MessageType.TEXT_DELTA:
                        break
            cancelled = turn.summary
            after = await run_turn(process, "and now?", timeout=60)
    assert cancelled.stop_reason == "cancelled"
    # Cut short: what arrived before the cancel landed, never the whole answer.
    assert cancelled.text and counting.startswith(cancelled.text)
    assert len(cancelled.text) < len(counting)
    assert after.ok
    assert after.text == "Fresh answer."
