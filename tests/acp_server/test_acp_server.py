"""ACP-client conformance of ``agentrun acp --embedded``: the server runs as a subprocess, the
real pinned agent behind it talks to the embedded model server, and a small ACP client (asyncio
and trio; the server runs on the same backend) drives it. Every ``session/update`` is checked
against the ACP v1 schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, AcpClient, AcpError, open_server, schema_validator, server_argv
from acp_conformance import assert_conforms
from agents_support import GEMINI_RESUME_ON_ASYNCIO, GENERIC_ACP_AGENT, descendants

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun.engines._registry import get_engine
from agentrun.offline import ModelTurn, Script, ScriptUsage, TextBlock, ToolCallBlock

pytestmark = [pytest.mark.anyio]

#: The nine embedded engines and the generic ``acp`` one (``--embedded`` runs claude-agent-acp
#: as a plain command line for it).
ENGINES = [
    "claude", "codex", "codex-app-server", "opencode", "opencode-acp",
    "claude-acp", "codex-acp", "qwen", "gemini", "acp",
]  # fmt: skip
#: Engines whose agent asks before a tool that writes (so the client is asked).
ASKING = {"claude", "codex-app-server", "opencode-acp", "claude-acp", "codex-acp", "qwen",
          "gemini", "acp"}  # fmt: skip
#: Engines that cannot know the context fill (Gemini CLI reports no usage at all).
NO_USAGE = {"gemini"}
#: Engines that report the fill after each model call (not only at the end of a prompt).
PER_CALL = {"claude", "opencode", "codex-app-server"}
#: Engines whose offline model has a cost (reported, or derived from the agent's session
#: cost); the others run a model the price catalog does not know.
COSTED = {"claude", "opencode", "opencode-acp", "claude-acp", "acp"}
#: Engines whose agent gives its text in one piece (no deltas): a cancel comes after it.
WHOLE_TEXT = {"codex", "opencode"}
COUNTING = "Counting: " + " ".join(str(i) for i in range(300))
USAGE = ScriptUsage(input_tokens=1000, cache_read_tokens=2000, output_tokens=7)
#: A model call after a tool: a fuller context.
AFTER_TOOL = ScriptUsage(input_tokens=1500, cache_read_tokens=2000, output_tokens=9)


def _available(engine: str) -> str:
    try:
        get_engine(GENERIC_ACP_AGENT if engine == "acp" else engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    return engine


def _writes(engine: str, name: str) -> ModelTurn:
    arguments: dict[str, Any] = {"command": f"touch {name}"}
    if engine == "codex-acp":
        # Codex's read-only sandbox asks only when the model requests escalation.
        arguments |= {"sandbox_permissions": "require_escalated", "justification": "write it"}
    return ModelTurn(blocks=[ToolCallBlock(tool="shell", arguments=arguments)], usage=USAGE)


def _script(engine: str) -> Script:
    turns = [
        ModelTurn.text("First answer.", usage=USAGE),
        ModelTurn.text("Second answer.", usage=USAGE),
        ModelTurn(blocks=[TextBlock(text=COUNTING)], chunk_delay=0.05, chunk_chars=6),
        ModelTurn.text("Fresh answer.", usage=USAGE),
        ModelTurn.text("Loaded answer.", usage=USAGE),
        _writes(engine, "allowed.txt"),
        ModelTurn.text("Created it.", usage=AFTER_TOOL),
    ]
    if engine in ASKING:
        turns += [
            _writes(engine, "refused.txt"),
            ModelTurn.text("It was refused.", usage=AFTER_TOOL),
        ]
    return Script(turns=turns)


def _text(client: AcpClient, session_id: str, since: int) -> str:
    return "".join(
        u["update"]["content"].get("text", "")
        for u in client.updates[since:]
        if u["sessionId"] == session_id and u["update"]["sessionUpdate"] == "agent_message_chunk"
    )


def _of(client: AcpClient, kind: str, since: int = 0) -> list[dict[str, Any]]:
    return [u["update"] for u in client.updates[since:] if u["update"]["sessionUpdate"] == kind]


async def _prompt(client: AcpClient, session_id: str, text: str) -> tuple[str, int]:
    since = len(client.updates)
    result = await client.request(
        "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    )
    return result["stopReason"], since


async def _closed(client: AcpClient, before: set[int]) -> float:
    """Close the server's stdin; it and every agent it ran end within a bound."""
    started = anyio.current_time()
    assert client.process.stdin is not None
    await client.process.stdin.aclose()
    with anyio.fail_after(40):
        code = await client.process.wait()
    assert code == 0
    with anyio.fail_after(10):
        while descendants() - before:
            await anyio.sleep(0.1)
    return anyio.current_time() - started


@pytest.mark.agent
@pytest.mark.timeout(400)
@pytest.mark.parametrize("engine", ENGINES)
@GEMINI_RESUME_ON_ASYNCIO
async def test_conversation_over_acp(engine: str, tmp_path: Path, anyio_backend_name: str) -> None:
    _available(engine)
    script_file = tmp_path / "script.json"
    script_file.write_text(_script(engine).model_dump_json())
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    before = descendants()
    asked: list[dict[str, Any]] = []

    async def answer(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        wanted = "reject_once" if "refused" in json.dumps(params["toolCall"]) else "allow_once"
        option = next(o for o in params["options"] if o["kind"] == wanted)
        return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}

    argv = server_argv(engine, "--embedded", "--script", str(script_file),
                       backend=anyio_backend_name)  # fmt: skip
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        client.on_permission = answer
        init = await client.request("initialize", CLIENT_INIT)
        assert init["protocolVersion"] == 1
        assert init["agentCapabilities"]["loadSession"] is True
        new = await client.request("session/new", {"cwd": str(workspace), "mcpServers": []})
        sid = new["sessionId"]
        assert schema_validator("NewSessionResponse").is_valid(new)

        # Two turns, each with its text and (where the agent can know) its context fill.
        for prompt, expected in (("say hi", "First answer."), ("again", "Second answer.")):
            since = len(client.updates)
            reply = await client.request(
                "session/prompt",
                {"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]},
            )
            assert reply["stopReason"] == "end_turn"
            assert _text(client, sid, since) == expected
            usage = _of(client, "usage_update", since)
            if engine in NO_USAGE:
                assert usage == []  # nothing known, nothing invented
                assert "usage" not in reply
            else:
                # The turn's tokens (the script's call: 1000 + 2000 cached in, 7 out).
                assert schema_validator("PromptResponse", unstable=True).is_valid(reply)
                tokens = reply["usage"]
                assert (tokens["inputTokens"], tokens["outputTokens"]) == (1000, 7), reply
                assert tokens["totalTokens"] == 3007 + tokens.get("cachedWriteTokens", 0), reply
                assert usage, client.kinds(sid, since)
                assert all(u["used"] > 0 and u["size"] > 0 for u in usage), usage
                if engine in COSTED:
                    assert usage[-1]["cost"]["currency"] == "USD", usage
                    assert usage[-1]["cost"]["amount"] > 0, usage
                else:
                    assert all("cost" not in u for u in usage), usage  # nobody knows it

        # A cancel, then a clean turn.
        since = len(client.updates)
        pending = await client.start_call(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "count"}]}
        )
        await client.wait_update(
            lambda u: (
                u["sessionId"] == sid
                and u["update"]["sessionUpdate"] == "agent_message_chunk"
                and client.updates.index(u) >= since
            )
        )
        await client.notify("session/cancel", {"sessionId": sid})
        response = await client.response(pending, timeout=60)
        assert response["result"]["stopReason"] == "cancelled", response
        partial = _text(client, sid, since)
        assert COUNTING.startswith(partial)
        if engine not in WHOLE_TEXT:
            assert len(partial) < len(COUNTING)
        reason, since = await _prompt(client, sid, "and now?")
        assert (reason, _text(client, sid, since)) == ("end_turn", "Fresh answer.")

        # Close, list, load (the history is replayed before the answer), prompt again.
        listed = await client.request("session/list", {})
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
        assert listed["sessions"][0]["title"] == "say hi"
        assert await client.request("session/close", {"sessionId": sid}) == {}
        load = {"sessionId": sid, "cwd": str(workspace), "mcpServers": []}
        since = len(client.updates)
        await client.request("session/load", load)
        replayed = client.updates[since:]
        users = [u["update"]["content"]["text"] for u in replayed
                 if u["update"]["sessionUpdate"] == "user_message_chunk"]  # fmt: skip
        assert users == ["say hi", "again", "count", "and now?"]
        assert "First answer." in _text(client, sid, since)
        reason, since = await _prompt(client, sid, "what did I ask first?")
        assert (reason, _text(client, sid, since)) == ("end_turn", "Loaded answer.")
        # Resume: no replay.
        await client.request("session/close", {"sessionId": sid})
        since = len(client.updates)
        await client.request("session/resume", {"sessionId": sid, "cwd": str(workspace)})
        assert _of(client, "user_message_chunk", since) == []

        # A tool allowed and, where the agent asks, one rejected.
        reason, since = await _prompt(client, sid, "create allowed.txt")
        assert (workspace / "allowed.txt").exists()
        calls = _of(client, "tool_call", since)
        assert calls and calls[0]["kind"] == "execute", client.kinds(sid, since)
        done = [u for u in _of(client, "tool_call_update", since) if u.get("status")]
        assert done and done[-1]["status"] == "completed", done
        if engine in PER_CALL:
            assert len(_of(client, "usage_update", since)) >= 2  # after each model call
        if engine in ASKING:
            assert len(asked) == 1 and "allowed.txt" in json.dumps(asked[0]), asked
            reason, since = await _prompt(client, sid, "create refused.txt")
            assert len(asked) == 2, asked
            assert not (workspace / "refused.txt").exists()
        else:
            assert asked == []  # the agent cannot ask: its own rules decide

        assert client.invalid == []
        assert client.stray == []
        await _closed(client, before)
        # Every message both ways, checked by the published SDK's own validators.
        assert_conforms(client.wire, library="agent")
        tg.cancel_scope.cancel()


async def _allow_once(params: dict[str, Any]) -> dict[str, Any]:
    option = next(o for o in params["options"] if o["kind"] == "allow_once")
    return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}


@pytest.mark.agent
@pytest.mark.timeout(90)
async def test_bad_input_gets_json_rpc_errors_and_the_server_goes_on(
    tmp_path: Path, anyio_backend_name: str
) -> None:
    _available("claude")
    before = descendants()
    async with anyio.create_task_group() as tg:
        client = await open_server(
            tg, server_argv("claude", "--embedded", backend=anyio_backend_name),
            stderr_path=tmp_path / "server.err",
        )  # fmt: skip
        await client.send_raw(b"{this is not json\n")
        await client.send_raw(b"[1, 2, 3]\n")
        await client.send({"jsonrpc": "2.0", "id": 41})
        with anyio.fail_after(20):
            while len(client.stray) < 3:
                await anyio.sleep(0.05)
        errors = [(m.get("id"), m["error"]["code"]) for m in client.stray]
        assert errors == [(None, -32700), (None, -32600), (41, -32600)], client.stray

        unknown = await client.call("session/teleport", {})
        assert unknown["error"]["code"] == -32601
        missing = await client.call(
            "session/prompt", {"sessionId": "sess_nope", "prompt": [{"type": "text", "text": "x"}]}
        )
        assert missing["error"]["code"] == -32002, missing
        relative = await client.call("session/new", {"cwd": "relative/dir", "mcpServers": []})
        assert relative["error"]["code"] == -32602, relative
        assert "cwd" in relative["error"]["message"]
        no_params = await client.call("session/new")
        assert no_params["error"]["code"] == -32602
        empty = await client.call("session/list", {"cwd": 5})
        assert empty["error"]["code"] == -32602

        # Still serving.
        init = await client.request("initialize", CLIENT_INIT)
        assert init["agentInfo"]["name"] == "agentrun"
        sid = (await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
            "sessionId"
        ]
        image = await client.call(
            "session/prompt",
            {"sessionId": sid, "prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]},
        )
        assert image["error"]["code"] == -32602
        bad_mode = await client.call("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
        assert bad_mode["error"]["code"] == -32602
        # Config options: an unknown option, a value it does not take, a value of the wrong
        # type, a session nobody opened; each named in the error, and nothing changes.
        for config_id, value, says in (
            ("temperature", "hot", "temperature"),
            ("effort", "extreme", "extreme"),
            ("model", "  ", "model"),
            ("mode", True, "mode"),
            ("mode", "yolo", "yolo"),
        ):
            bad = await client.call(
                "session/set_config_option",
                {"sessionId": sid, "configId": config_id, "value": value},
            )
            assert bad["error"]["code"] == -32602, bad
            assert says in bad["error"]["message"], bad
        no_value = await client.call(
            "session/set_config_option", {"sessionId": sid, "configId": "effort"}
        )
        assert no_value["error"]["code"] == -32602 and "value" in no_value["error"]["message"]
        elsewhere = await client.call(
            "session/set_config_option",
            {"sessionId": "sess_nope", "configId": "effort", "value": "low"},
        )
        assert elsewhere["error"]["code"] == -32002, elsewhere
        unchanged = await client.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
        current = {o["id"]: o["currentValue"] for o in unchanged["configOptions"]}
        assert (current["mode"], current["effort"]) == ("default", "default"), current
        relative_load = await client.call(
            "session/load", {"sessionId": sid, "cwd": "here", "mcpServers": []}
        )
        assert relative_load["error"]["code"] == -32602, relative_load
        with pytest.raises(AcpError):
            await client.request("session/close", {"sessionId": "sess_nope"})

        # After all that, a turn: ``--embedded`` without ``--script`` runs the demo script.
        client.on_permission = _allow_once
        reason, since = await _prompt(client, sid, "check the environment")
        assert reason == "end_turn"
        assert _text(client, sid, since).endswith("Everything works offline.")
        assert [u["status"] for u in _of(client, "tool_call_update", since)
                if "status" in u][-1] == "completed"  # fmt: skip
        assert client.invalid == []
        await _closed(client, before)
        tg.cancel_scope.cancel()


@pytest.mark.agent
@pytest.mark.timeout(120)
async def test_modes_and_config_options_reach_the_session(
    tmp_path: Path, anyio_backend_name: str
) -> None:
    """``bypass`` approves without asking; ``effort`` and the model are session options the
    next prompt runs with (the session is reopened on the same agent session)."""
    _available("claude")
    script = Script(turns=[_writes("claude", "free.txt"), ModelTurn.text("Done.", usage=USAGE),
                           ModelTurn.text("Still here.", usage=USAGE)])  # fmt: skip
    script_file = tmp_path / "script.json"
    script_file.write_text(script.model_dump_json())
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    before = descendants()
    argv = server_argv("claude", "--embedded", "--script", str(script_file),
                       backend=anyio_backend_name)  # fmt: skip
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        await client.request("initialize", CLIENT_INIT)
        sid = (await client.request("session/new", {"cwd": str(workspace), "mcpServers": []}))[
            "sessionId"
        ]
        await client.request("session/set_mode", {"sessionId": sid, "modeId": "bypass"})
        options = await client.request(
            "session/set_config_option", {"sessionId": sid, "configId": "effort", "value": "high"}
        )
        assert schema_validator("SetSessionConfigOptionResponse").is_valid(options)
        effort = next(o for o in options["configOptions"] if o["id"] == "effort")
        assert effort["currentValue"] == "high"
        reason, _ = await _prompt(client, sid, "create free.txt")
        assert reason == "end_turn"
        assert (workspace / "free.txt").exists()
        assert client.server_requests == []  # approved without asking
        reason, since = await _prompt(client, sid, "still there?")
        assert (reason, _text(client, sid, since)) == ("end_turn", "Still here.")
        await _closed(client, before)
        tg.cancel_scope.cancel()


TODOS = {
    "todos": [
        {"content": "Write the code", "status": "in_progress", "activeForm": "Writing the code"},
        {"content": "Test it", "status": "pending", "activeForm": "Testing it"},
    ]
}
COLOR = "Which color should the button be?"
ASK_COLOR = {
    "questions": [
        {
            "question": COLOR,
            "header": "Color",
            "options": [
                {"label": "Red", "description": "warm"},
                {"label": "Blue", "description": "cool"},
            ],
            "multiSelect": False,
        }
    ]
}
#: The model the session switches to, and the context window Claude Code reports for it.
SMALL_MODEL, SMALL_WINDOW = "claude-sonnet-4-5-20250929", 200_000


@pytest.mark.agent
@pytest.mark.timeout(240)
async def test_plans_questions_a_new_model_and_closing_mid_turn(
    tmp_path: Path, anyio_backend_name: str
) -> None:
    """The agent's to-do list arrives as a ``plan``, its question as an ``elicitation/create``
    form whose answer reaches the agent, a model chosen through ``session/set_config_option``
    runs the next prompt, and closing stdin in the middle of a turn ends the server and the
    agent within the bound."""
    _available("claude")
    script = Script(
        turns=[
            ModelTurn(blocks=[ToolCallBlock(tool="TodoWrite", arguments=TODOS)], usage=USAGE),
            ModelTurn.text("Planned.", usage=USAGE),
            ModelTurn(blocks=[ToolCallBlock(tool="AskUserQuestion", arguments=ASK_COLOR)]),
            ModelTurn.text("Blue it is.", usage=USAGE),
            ModelTurn.text("A smaller model.", usage=USAGE),
            ModelTurn(blocks=[TextBlock(text=COUNTING)], chunk_delay=0.05, chunk_chars=6),
        ]
    )
    script_file = tmp_path / "script.json"
    script_file.write_text(script.model_dump_json())
    before = descendants()
    asked: list[dict[str, Any]] = []
    elicitation_schema = schema_validator("CreateElicitationRequest", unstable=True)

    async def answer(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        (key,) = params["requestedSchema"]["properties"]
        return {"action": "accept", "content": {key: "Blue"}}

    argv = server_argv("claude", "--embedded", "--script", str(script_file),
                       backend=anyio_backend_name)  # fmt: skip
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        client.on_permission = _allow_once
        client.on_elicitation = answer
        capabilities = {**CLIENT_INIT["clientCapabilities"], "elicitation": {"form": {}}}
        await client.request("initialize", {**CLIENT_INIT, "clientCapabilities": capabilities})
        sid = (await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
            "sessionId"
        ]

        # The to-do list is the plan (not a tool call).
        reason, since = await _prompt(client, sid, "plan it")
        assert (reason, _text(client, sid, since)) == ("end_turn", "Planned.")
        (plan,) = _of(client, "plan", since)
        assert plan["entries"] == [
            {"content": "Write the code", "priority": "medium", "status": "in_progress"},
            {"content": "Test it", "priority": "medium", "status": "pending"},
        ]
        assert _of(client, "tool_call", since) == []

        # A question: one form field with the options; the answer goes back to the agent.
        reason, since = await _prompt(client, sid, "pick a color")
        assert (reason, _text(client, sid, since)) == ("end_turn", "Blue it is.")
        (params,) = asked
        assert elicitation_schema.is_valid(params), params
        (field,) = params["requestedSchema"]["properties"].values()
        # Claude Code lets one answer in words too: a text field that names the options.
        assert (field["title"], field["type"]) == ("Color", "string"), field
        assert field["description"] == f"{COLOR} (e.g. Red, Blue)", field
        results = [u for u in _of(client, "tool_call_update", since)
                   if u.get("toolCallId") == params["toolCallId"]]  # fmt: skip
        assert "Blue" in json.dumps(results), results

        # A model chosen by the client runs the next prompt (its own context window).
        earlier = {u["size"] for u in _of(client, "usage_update")}
        options = await client.request(
            "session/set_config_option",
            {"sessionId": sid, "configId": "model", "value": SMALL_MODEL},
        )
        model = next(o for o in options["configOptions"] if o["id"] == "model")
        assert model["currentValue"] == SMALL_MODEL
        reason, since = await _prompt(client, sid, "who are you?")
        assert (reason, _text(client, sid, since)) == ("end_turn", "A smaller model.")
        # The window Claude Code reports for it at the turn's end (the default model's is 1M).
        assert _of(client, "usage_update", since)[-1]["size"] == SMALL_WINDOW
        assert earlier == {1_000_000}

        # The mode through its config option.
        options = await client.request(
            "session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "plan"}
        )
        mode = next(o for o in options["configOptions"] if o["id"] == "mode")
        assert mode["currentValue"] == "plan"

        # Closing stdin while the agent streams: server and agent end within the bound.
        since = len(client.updates)
        await client.start_call(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "count"}]}
        )
        await client.wait_update(
            lambda u: (
                u["update"]["sessionUpdate"] == "agent_message_chunk"
                and client.updates.index(u) >= since
            )
        )
        assert await _closed(client, before) < 30
        assert client.invalid == []
        tg.cancel_scope.cancel()
