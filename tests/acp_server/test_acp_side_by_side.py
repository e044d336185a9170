"""``agentrun acp`` next to the official ACP adapters of Claude Code (``claude-agent-acp``) and
Codex (``codex-acp``) on the same scripts, and under the official ACP Python SDK as its
client."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, AcpClient, open_server, server_argv
from agents_support import descendants

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun._wire.programs import resolve_binary, resolve_node, resolve_node_script
from agentrun.engines._registry import get_engine
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, offline_config

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

USAGE = ScriptUsage(input_tokens=1000, cache_read_tokens=2000, output_tokens=7)


#: The script's shell commands, each with the status and exit code of its end: one that
#: succeeds, one that fails with a code of its own.
COMMANDS = (("echo side by side", "completed", 0), ("echo failing; exit 3", "failed", 3))


def _script() -> Script:
    return Script(
        turns=[
            ModelTurn.shell(COMMANDS[0][0], say="Running it.", usage=USAGE),
            ModelTurn.shell(
                COMMANDS[1][0],
                usage=ScriptUsage(input_tokens=1100, cache_read_tokens=2000, output_tokens=5),
            ),
            ModelTurn.text(
                "It printed the words.",
                usage=ScriptUsage(input_tokens=1200, cache_read_tokens=2000, output_tokens=6),
            ),
        ]
    )


@dataclass(frozen=True)
class Run:
    """What a client saw of one prompt on a new session."""

    new_session: dict[str, Any]
    answer: dict[str, Any]
    updates: list[dict[str, Any]]


async def _close(client: AcpClient, before: set[int]) -> None:
    assert client.process.stdin is not None
    await client.process.stdin.aclose()
    with anyio.fail_after(40):
        await client.process.wait()
    with anyio.fail_after(10):
        while descendants() - before:
            await anyio.sleep(0.1)


async def test_agentrun_sends_what_the_official_claude_adapter_sends(
    tmp_path: Path, anyio_backend_name: str
) -> None:
    """claude-agent-acp, then ``agentrun acp --engine claude``, on one script."""
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
    runs: dict[str, Run] = {}

    official_ws = tmp_path / "official"
    official_ws.mkdir()
    async with ModelServer(_script()) as server, anyio.create_task_group() as tg:
        config = offline_config("claude-acp", server.url, tmp_path / "agent")
        client = await open_server(
            tg, [node, adapter], stderr_path=tmp_path / "official.err", env=dict(config.env),
            cwd=official_ws,
        )  # fmt: skip
        runs["claude-agent-acp"] = await _run(client, official_ws, "bypassPermissions")
        await _close(client, before)
        tg.cancel_scope.cancel()

    ours_ws = tmp_path / "ours"
    ours_ws.mkdir()
    async with anyio.create_task_group() as tg:
        argv = server_argv("claude", "--embedded", "--script", str(script_file),
                           backend=anyio_backend_name)  # fmt: skip
        client = await open_server(tg, argv, stderr_path=tmp_path / "ours.err")
        runs["claude"] = await _run(client, ours_ws, None)
        assert client.stray == []  # (the adapter also sends extension notifications of its own)
        await _close(client, before)
        tg.cancel_scope.cancel()

    # What the adapter says about its own mode and options is its business; the rest is the
    # conversation, and agentrun says all of it.
    _at_least(runs["claude-agent-acp"], runs["claude"], ours_ws, readings=2)


#: A client like Zed: it shows a shell tool's output in a terminal of the tool call
#: (``_meta.terminal_output``, the convention both official adapters follow).
TERMINAL_CLIENT = {
    **CLIENT_INIT,
    "clientCapabilities": {**CLIENT_INIT["clientCapabilities"], "_meta": {"terminal_output": True}},
}
#: What ACP v1 defines of a tool call (fields outside it are an adapter's own: ACP asks for
#: extensions under ``_meta``).
TOOL_CALL_FIELDS = {"sessionUpdate", "toolCallId", "title", "kind", "status", "content",
                    "locations", "rawInput", "rawOutput", "_meta"}  # fmt: skip
#: The terminal convention's keys of a tool call's ``_meta``.
TERMINAL_META = {"terminal_info", "terminal_output", "terminal_output_delta", "terminal_exit"}


async def _run(client: AcpClient, workspace: Path, mode: str | None) -> Run:
    """One prompt on a new session: the session/new answer, the prompt's answer and the
    session's updates."""
    client.on_permission = _allow
    await client.request("initialize", TERMINAL_CLIENT)
    new_session = await client.request("session/new", {"cwd": str(workspace), "mcpServers": []})
    sid = new_session["sessionId"]
    if mode is not None:
        await client.request("session/set_mode", {"sessionId": sid, "modeId": mode})
    answer = await client.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "run it"}]}
    )
    assert client.invalid == []
    return Run(new_session, answer, [u["update"] for u in client.updates if u["sessionId"] == sid])


def _one(updates: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [u for u in updates if u["sessionUpdate"] == kind]
    assert len(found) == 1, (kind, updates)
    return found[0]


def _merged(updates: list[dict[str, Any]], call: dict[str, Any]) -> dict[str, Any]:
    """What a tool call and all its updates said, the later over the earlier (an agent may
    give the title late, or split its output and its exit over two updates)."""
    merged: dict[str, Any] = {**call, "_meta": dict(call.get("_meta") or {})}
    for update in updates:
        if (
            update["sessionUpdate"] == "tool_call_update"
            and update["toolCallId"] == call["toolCallId"]
        ):
            merged |= {k: v for k, v in update.items() if k != "_meta"}
            merged["_meta"] |= update.get("_meta") or {}
    return merged


def _said(updates: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in updates
                   if u["sessionUpdate"] == "agent_message_chunk")  # fmt: skip


@pytest.mark.timeout(300)
async def test_agentrun_sends_what_the_official_codex_adapter_sends(
    tmp_path: Path, anyio_backend_name: str
) -> None:
    """codex-acp, then ``agentrun acp`` with ``codex`` (exec) and ``codex-app-server``, on one
    script: every conversation update kind, the tool call's fields (a terminal, its output and
    exit code), the context readings, the stop reason and the turn's token usage."""
    try:
        get_engine("codex-acp").check()
        get_engine("codex").check()
        node = resolve_node(minimum=20, engine="codex-acp")
        adapter = resolve_node_script(
            "@agentclientprotocol/codex-acp", "dist/index.js", engine="codex-acp"
        )
        codex = resolve_binary("codex", engine="codex-acp")
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    script_file = tmp_path / "script.json"
    script_file.write_text(_script().model_dump_json())
    before = descendants()
    runs: dict[str, Run] = {}

    official_ws = tmp_path / "codex-acp"
    official_ws.mkdir()
    async with ModelServer(_script()) as server, anyio.create_task_group() as tg:
        config = offline_config("codex-acp", server.url, tmp_path / "agent")
        client = await open_server(
            tg, [node, adapter], stderr_path=tmp_path / "codex-acp.err",
            env={**config.env, "CODEX_PATH": codex}, cwd=official_ws,
        )  # fmt: skip
        # Like agentrun's ``bypass``: no asking and no sandbox (in its default mode Codex's
        # sandbox cannot start here, bwrap finds no ``codex-linux-sandbox``, and the adapter
        # then reports no tool call at all).
        runs["codex-acp"] = await _run(client, official_ws, "agent-full-access")
        await _close(client, before)
        tg.cancel_scope.cancel()
    for engine in ("codex", "codex-app-server"):
        workspace = tmp_path / engine
        workspace.mkdir()
        async with anyio.create_task_group() as tg:
            argv = server_argv(engine, "--embedded", "--script", str(script_file),
                               backend=anyio_backend_name)  # fmt: skip
            client = await open_server(tg, argv, stderr_path=tmp_path / f"{engine}.err")
            runs[engine] = await _run(client, workspace, "bypass")  # no asking either
            assert client.stray == []
            await _close(client, before)
            tg.cancel_scope.cancel()

    official = runs.pop("codex-acp")
    # Its slash commands are its own (docs/acp-server.md). Context readings: after every model
    # call where the agent tells; codex exec reports its tokens once, at the end of the turn.
    _at_least(official, runs["codex-app-server"], tmp_path / "codex-app-server", readings=2,
              own={"available_commands_update"})  # fmt: skip
    _at_least(official, runs["codex"], tmp_path / "codex", readings=1,
              own={"available_commands_update"})  # fmt: skip


def _at_least(
    official_run: Run,
    our_run: Run,
    workspace: Path,
    *,
    readings: int,
    own: frozenset[str] | set[str] = frozenset(),
) -> None:
    """agentrun said at least what the adapter said, where ACP has a place for it."""
    # session/new: the same parts, and a config option of each ACP category the adapter
    # offers (its ``models`` is ACP's unstable model state; agentrun offers the model as a
    # config option, as the adapters do too).
    new_session, our_new_session = official_run.new_session, our_run.new_session
    assert new_session.keys() - {"models"} <= our_new_session.keys(), our_new_session
    categories = {o.get("category") for o in new_session.get("configOptions", [])}
    our_categories = {o.get("category") for o in our_new_session["configOptions"]}
    assert categories & ACP_CATEGORIES <= our_categories, (categories, our_categories)
    assert our_new_session["modes"]["currentModeId"] in {
        m["id"] for m in our_new_session["modes"]["availableModes"]
    }

    official, ours = official_run.updates, our_run.updates
    answer, our_answer = official_run.answer, our_run.answer
    kinds = {u["sessionUpdate"] for u in official}
    assert {"agent_message_chunk", "tool_call", "tool_call_update", "usage_update"} <= kinds
    # The adapter's own mode and options are its own business.
    conversation = kinds - {"current_mode_update", "config_option_update"} - set(own)
    our_kinds = {u["sessionUpdate"] for u in ours}
    assert conversation <= our_kinds, (sorted(kinds), sorted(our_kinds))
    assert _said(ours) == _said(official) == "Running it.It printed the words."
    if all(u.get("messageId") for u in official if u["sessionUpdate"] == "agent_message_chunk"):
        assert all(u.get("messageId") for u in ours if u["sessionUpdate"] == "agent_message_chunk")

    # Each tool call: its ACP fields, its title, kind and end, and its terminal (same output,
    # same exit code, the failing command's own).
    calls = [u for u in official if u["sessionUpdate"] == "tool_call"]
    our_calls = [u for u in ours if u["sessionUpdate"] == "tool_call"]
    assert len(calls) == len(our_calls) == len(COMMANDS), (calls, our_calls)
    for call, our_call, (command, status, exit_code) in zip(
        calls, our_calls, COMMANDS, strict=True
    ):
        assert (call.keys() & TOOL_CALL_FIELDS) <= our_call.keys(), (call, our_call)
        result, our_result = _merged(official, call), _merged(ours, our_call)
        assert (result.keys() & TOOL_CALL_FIELDS) <= our_result.keys(), (result, our_result)
        for key in ("title", "kind", "status"):
            assert our_result[key] == result[key], (key, result, our_result)
        assert result["status"] == status, result
        assert command in result["title"], result
        terminal = result["_meta"].keys() & TERMINAL_META
        assert terminal <= our_result["_meta"].keys(), (result, our_result)
        assert our_call["content"] == [{"type": "terminal", "terminalId": our_call["toolCallId"]}]
        assert our_call["_meta"]["terminal_info"]["cwd"] == str(workspace)
        output = {"terminal_output", "terminal_output_delta"} & terminal
        for key in output:
            said = result["_meta"][key]["data"].rstrip()
            assert our_result["_meta"][key]["data"].rstrip() == said
        assert our_result["_meta"]["terminal_exit"]["exit_code"] == exit_code, our_result
        assert result["_meta"]["terminal_exit"]["exit_code"] == exit_code, result
        # Its lifecycle: announced before it ends, never going back, one end.
        assert _statuses(ours, our_call)[-1] == _statuses(official, call)[-1] == status
        for updates, first in ((official, call), (ours, our_call)):
            seen = _statuses(updates, first)
            ranks = [LIFECYCLE[status] for status in seen]
            assert ranks == sorted(ranks) and ranks.count(LIFECYCLE[status]) == 1, seen

    # Context readings with used and size, and the session's cost where the adapter knows it.
    usage = [u for u in official if u["sessionUpdate"] == "usage_update"]
    our_usage = [u for u in ours if u["sessionUpdate"] == "usage_update"]
    assert len(our_usage) >= readings, our_usage
    assert all(u["used"] > 0 and u["size"] > 0 for u in usage + our_usage), our_usage
    if "cost" in usage[-1]:
        assert our_usage[-1]["cost"]["amount"] == pytest.approx(usage[-1]["cost"]["amount"])

    # The answer: the same stop reason and the same token counts for the turn.
    assert our_answer["stopReason"] == answer["stopReason"] == "end_turn"
    assert answer["usage"].keys() <= our_answer["usage"].keys(), our_answer
    assert our_answer["usage"] == {k: answer["usage"].get(k, 0) for k in our_answer["usage"]}


#: The ACP config option categories both sides offer (the adapters' ``model_config`` options,
#: fast mode and the like, are their own: docs/acp-server.md).
ACP_CATEGORIES = {"mode", "model", "thought_level"}
#: A tool call's statuses in the order ACP gives them.
LIFECYCLE = {"pending": 0, "in_progress": 1, "completed": 2, "failed": 2}


def _statuses(updates: list[dict[str, Any]], call: dict[str, Any]) -> list[str]:
    """The statuses a tool call went through, from its ``tool_call`` on."""
    mine = [u for u in updates if u.get("toolCallId") == call["toolCallId"]]
    return [u["status"] for u in mine[mine.index(call) :] if "status" in u]


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
