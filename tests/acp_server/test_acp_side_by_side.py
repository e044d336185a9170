"""``agentrun acp`` next to the official ACP adapter of Claude Code, and under the official ACP
Python SDK as its client."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, AcpClient, open_server, server_argv
from agents_support import descendants

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun._wire.programs import resolve_node, resolve_node_script
from agentrun.engines._registry import get_engine
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, offline_config

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

USAGE = ScriptUsage(input_tokens=1000, cache_read_tokens=2000, output_tokens=7)


def _script() -> Script:
    return Script(
        turns=[
            ModelTurn.shell("echo side by side", say="Running it.", usage=USAGE),
            ModelTurn.text(
                "It printed the words.",
                usage=ScriptUsage(input_tokens=1200, cache_read_tokens=2000, output_tokens=6),
            ),
        ]
    )


async def _kinds(client: AcpClient, workspace: Path, mode: str | None) -> set[str]:
    await client.request("initialize", CLIENT_INIT)
    sid = (await client.request("session/new", {"cwd": str(workspace), "mcpServers": []}))[
        "sessionId"
    ]
    if mode is not None:
        await client.request("session/set_mode", {"sessionId": sid, "modeId": mode})
    result = await client.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "run it"}]}
    )
    assert result["stopReason"] == "end_turn"
    return {u["update"]["sessionUpdate"] for u in client.updates if u["sessionId"] == sid}


async def _close(client: AcpClient, before: set[int]) -> None:
    assert client.process.stdin is not None
    await client.process.stdin.aclose()
    with anyio.fail_after(40):
        await client.process.wait()
    with anyio.fail_after(10):
        while descendants() - before:
            await anyio.sleep(0.1)


async def test_agentrun_sends_every_update_kind_the_official_claude_adapter_sends(
    tmp_path: Path, anyio_backend_name: str
) -> None:
    try:
        get_engine("claude-acp").check()
        get_engine("claude").check()
        node = resolve_node(minimum=22, engine="claude-acp")
        adapter = resolve_node_script(
            "@agentclientprotocol/claude-agent-acp", "dist/index.js", engine="claude-acp"
        )
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    script_file = tmp_path / "script.json"
    script_file.write_text(_script().model_dump_json())
    before = descendants()

    official_ws = tmp_path / "official"
    official_ws.mkdir()
    async with ModelServer(_script()) as server, anyio.create_task_group() as tg:
        config = offline_config("claude-acp", server.url, tmp_path / "agent")
        client = await open_server(
            tg, [node, adapter], stderr_path=tmp_path / "official.err", env=dict(config.env),
            cwd=official_ws,
        )  # fmt: skip
        client.on_permission = _allow
        official = await _kinds(client, official_ws, "bypassPermissions")
        assert client.invalid == []
        await _close(client, before)
        tg.cancel_scope.cancel()

    ours_ws = tmp_path / "ours"
    ours_ws.mkdir()
    async with anyio.create_task_group() as tg:
        argv = server_argv("claude", "--embedded", "--script", str(script_file),
                           backend=anyio_backend_name)  # fmt: skip
        client = await open_server(tg, argv, stderr_path=tmp_path / "ours.err")
        client.on_permission = _allow
        ours = await _kinds(client, ours_ws, None)
        assert client.invalid == []
        assert client.stray == []  # (the adapter also sends extension notifications of its own)
        await _close(client, before)
        tg.cancel_scope.cancel()

    # What the adapter says about its own mode and options is its business; the rest is the
    # conversation, and agentrun says all of it.
    conversation = official - {"current_mode_update", "config_option_update"}
    assert {"agent_message_chunk", "tool_call", "tool_call_update", "usage_update"} <= official
    assert conversation <= ours, (sorted(official), sorted(ours))


async def _allow(params: dict[str, Any]) -> dict[str, Any]:
    option = next(o for o in params["options"] if o["kind"].startswith("allow"))
    return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_official_python_sdk_drives_agentrun_acp(tmp_path: Path) -> None:
    """The ``agent-client-protocol`` SDK (asyncio) as the client: its own models parse every
    update and answer."""
    acp = pytest.importorskip("acp")
    try:
        get_engine("claude").check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    script_file = tmp_path / "script.json"
    script_file.write_text(_script().model_dump_json())
    updates: list[Any] = []

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            updates.append(update)

        async def request_permission(self, session_id: str, tool_call: Any, options: Any,
                                     **kwargs: Any) -> Any:  # fmt: skip
            chosen = next(o for o in options if o.kind == "allow_once")
            return acp.RequestPermissionResponse.model_validate(
                {"outcome": {"outcome": "selected", "optionId": chosen.option_id}}
            )

    from repo_paths import REPO

    before = descendants()
    async with acp.spawn_agent_process(
        Client(), sys.executable, "-m", "agentrun", "acp", "--engine", "claude", "--embedded",
        "--script", str(script_file), env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    ) as (conn, _process):  # fmt: skip
        init = await conn.initialize(protocol_version=1)
        assert init.agent_info is not None and init.agent_info.name == "agentrun"
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        response = await conn.prompt(
            session_id=session.session_id, prompt=[acp.text_block("run it")]
        )
        assert response.stop_reason == "end_turn"
        listed = await conn.list_sessions()
        assert [s.session_id for s in listed.sessions] == [session.session_id]
    with anyio.fail_after(30):
        while descendants() - before:
            await anyio.sleep(0.1)
    kinds = {type(u).__name__ for u in updates}
    assert {"AgentMessageChunk", "ToolCallStart", "ToolCallProgress", "UsageUpdate"} <= kinds, kinds
    usage = [u for u in updates if type(u).__name__ == "UsageUpdate"]
    assert usage[-1].size == 1_000_000 and usage[-1].cost is not None
