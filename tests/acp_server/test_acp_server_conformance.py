"""``agentrun acp`` as an ACP agent, checked against the latest published schema: every message
of a session that uses each agent method the server serves (both directions: the client's
requests and notifications, the server's answers, updates and its own requests) is validated
by the zod validators of the ``@agentclientprotocol/sdk`` npm package (:mod:`acp_conformance`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, open_server, server_argv
from acp_conformance import assert_conforms, check_wire
from agents_support import descendants

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun.engines._registry import get_engine
from agentrun.offline import ModelTurn, Script, ScriptUsage, ToolCallBlock

pytestmark = [pytest.mark.anyio]

USAGE = ScriptUsage(input_tokens=1000, cache_read_tokens=2000, output_tokens=7)
#: The agent methods of the stable schema the server serves, each of which the session below
#: uses (``authenticate`` is answered with an error: the server offers no auth methods).
STABLE_METHODS = {
    "initialize", "authenticate", "session/new", "session/load", "session/resume",
    "session/list", "session/close", "session/delete", "session/set_mode",
    "session/set_config_option", "session/prompt",
}  # fmt: skip


def _available(engine: str) -> None:
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))


async def _allow_once(params: dict[str, Any]) -> dict[str, Any]:
    option = next(o for o in params["options"] if o["kind"] == "allow_once")
    return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}


def test_the_validators_refuse_what_the_schema_does_not_allow() -> None:
    """The check can fail: a request without a required field, an update of a wrong type and
    an answer to no request are each reported, and so is a malformed optional field the SDK's
    zod schema lets through (a default) but its JSON Schema refuses; a method of neither schema
    is listed apart, with the side it went to."""
    records = [
        {"to": "agent", "message": {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                    "params": {}}},
        {"to": "client", "message": {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s", "update": {"sessionUpdate": "usage_update", "used": "many"}}}},
        {"to": "client", "message": {"jsonrpc": "2.0", "id": 9, "result": {}}},
        {"to": "agent", "message": {"jsonrpc": "2.0", "id": 2, "method": "session/teleport"}},
        {"to": "agent", "message": {"jsonrpc": "2.0", "id": 3, "method": "initialize",
                                    "params": {"protocolVersion": 1}}},
        {"to": "client", "message": {"jsonrpc": "2.0", "id": 3, "result": {
            "protocolVersion": 1, "agentCapabilities": {"sessionCapabilities": {"delete": 3}}}}},
    ]  # fmt: skip
    report = check_wire(records)
    found = [(f.get("method"), f["kind"], f.get("validator")) for f in report["failures"]]
    assert found == [
        ("initialize", "request", "zod"), ("initialize", "request", "json-schema"),
        ("session/update", "notification", "zod"),
        ("session/update", "notification", "json-schema"),
        (None, "response", None), ("initialize", "response", "json-schema"),
    ]  # fmt: skip
    assert report["unknown"] == ["session/teleport request to agent"]


@pytest.mark.agent
@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ["claude", "codex-app-server", "opencode-acp", "codex-acp"])
async def test_every_message_of_a_full_session_validates(
    engine: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    _available(engine)
    arguments: dict[str, Any] = {"command": "touch made.txt"}
    if engine == "codex-acp":
        arguments |= {"sandbox_permissions": "require_escalated", "justification": "write it"}
    script = Script(turns=[
        ModelTurn(blocks=[ToolCallBlock(tool="shell", arguments=arguments)], usage=USAGE),
        ModelTurn.text("Made it.", usage=USAGE),
        ModelTurn.text("Second.", usage=USAGE),
    ])  # fmt: skip
    script_file = tmp_path / "script.json"
    script_file.write_text(script.model_dump_json())
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    cwd = str(workspace)
    before = descendants()
    argv = server_argv(engine, "--embedded", "--script", str(script_file),
                       backend=anyio_backend_name)  # fmt: skip
    report: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        client.on_permission = _allow_once
        await client.request("initialize", CLIENT_INIT)
        assert "error" in await client.call("authenticate", {"methodId": "none"})
        new = await client.request("session/new", {"cwd": cwd, "mcpServers": []})
        sid = new["sessionId"]
        await client.request("session/set_mode", {"sessionId": sid, "modeId": "default"})
        for option in new["configOptions"]:
            await client.request(
                "session/set_config_option",
                {"sessionId": sid, "configId": option["id"], "value": option["currentValue"]},
            )
        prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "make it"},
                  {"type": "resource_link", "uri": f"file://{cwd}/x", "name": "x"}]}  # fmt: skip
        assert (await client.request("session/prompt", prompt))["stopReason"] == "end_turn"
        assert (workspace / "made.txt").exists()
        await client.request("session/list", {})
        await client.request("session/list", {"cwd": cwd})
        forked = await client.call("session/fork", {"sessionId": sid, "cwd": cwd})
        await client.request("session/close", {"sessionId": sid})
        await client.request("session/load", {"sessionId": sid, "cwd": cwd, "mcpServers": []})
        await client.request("session/resume", {"sessionId": sid, "cwd": cwd})
        again = {"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}
        assert (await client.request("session/prompt", again))["stopReason"] == "end_turn"
        if "result" in forked:
            await client.request("session/delete", {"sessionId": forked["result"]["sessionId"]})
        await client.request("session/delete", {"sessionId": sid})
        assert "error" in await client.call("session/close", {"sessionId": sid})
        assert client.process.stdin is not None
        await client.process.stdin.aclose()
        with anyio.fail_after(40):
            assert await client.process.wait() == 0
        with anyio.fail_after(10):
            while descendants() - before:
                await anyio.sleep(0.1)
        report = assert_conforms(client.wire, library="agent")
        tg.cancel_scope.cancel()
    seen = {key.rsplit(" ", 1)[0] for key in report["methods"]}
    assert seen >= STABLE_METHODS, sorted(STABLE_METHODS - seen)
    assert "session/request_permission request" in report["methods"], json.dumps(report)
    assert report["methods"]["session/update notification"] > 3, report["methods"]
