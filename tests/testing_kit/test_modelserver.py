"""The embedded model server: its three APIs on the wire, and the real agents against it.

Run the real-agent tests in a loopback-only namespace::

    .venv/bin/python -m agentrun.offline netns -- .venv/bin/pytest tests/testing_kit/test_modelserver.py
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import (
    claude_argv,
    codex_exec_argv,
    opencode_run_argv,
    require_engine,
    run_agent,
)
from model_client import exchange, post, raw_request
from pydantic import ValidationError

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun._wire.programs import resolve_binary
from agentrun.offline import (
    ModelServer,
    claude_offline,
    codex_offline,
    map_tool_call,
    opencode_offline,
)
from agentrun.offline._netns import can_isolate_network, network_is_loopback_only
from agentrun.offline._script import (
    DEFAULT_SHELL_COMMAND,
    EXHAUSTED_TEXT,
    HttpError,
    Script,
    StreamError,
    Text,
    Thinking,
    ToolCall,
    Turn,
    Usage,
    default_script,
)

pytestmark = pytest.mark.anyio

ANTHROPIC = {"model": "claude-opus-5-5", "stream": True, "messages": [], "max_tokens": 100}
CHAT = {
    "model": "fake-model",
    "stream": True,
    "messages": [{"role": "system", "content": "You are opencode"}],
}
TITLE = {
    "model": "fake-model",
    "stream": True,
    "messages": [
        {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
        {"role": "user", "content": "Generate a title for this conversation:\n"},
    ],
}
RESPONSES = {"model": "fake-model", "stream": True, "input": []}


# --------------------------------------------------------------------------- Anthropic


async def test_anthropic_default_script_streams_text_and_tool_use() -> None:
    async with ModelServer() as server:
        reply = await post(server, "/v1/messages?beta=true", ANTHROPIC)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["transfer-encoding"] == "chunked"
    assert reply.headers["request-id"].startswith("req_")
    events = reply.sse()
    names = [e for e, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    data = [json.loads(d) for _, d in events]
    assert all(d["type"] == e for (e, _), d in zip(events, data, strict=False))
    usage = data[0]["message"]["usage"]
    assert usage["cache_read_input_tokens"] == 14_336
    assert usage["cache_creation_input_tokens"] == 4_088
    assert usage["cache_creation"]["ephemeral_5m_input_tokens"] == 4_088
    assert usage["output_tokens"] == 1
    starts = [d["content_block"] for d in data if d["type"] == "content_block_start"]
    assert [s["type"] for s in starts] == ["text", "tool_use"]
    assert starts[1]["name"] == "Bash"
    text = "".join(
        d["delta"]["text"] for d in data if d.get("delta", {}).get("type") == "text_delta"
    )
    assert text == "I'll run a quick shell command to check the environment."
    pieces = [
        d["delta"]["partial_json"]
        for d in data
        if d.get("delta", {}).get("type") == "input_json_delta"
    ]
    assert len(pieces) > 1
    assert json.loads("".join(pieces)) == {"command": DEFAULT_SHELL_COMMAND}
    delta = data[-2]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] == 48
    assert delta["usage"]["output_tokens_details"] == {"thinking_tokens": 0}
    (rec,) = server.requests
    assert rec.api == "anthropic" and rec.path == "/v1/messages" and rec.query == "beta=true"
    assert rec.turn_index == 0 and rec.json["model"] == "claude-opus-5-5"


async def test_anthropic_thinking_signature_and_tokens() -> None:
    script = Script(
        turns=[
            Turn(
                blocks=[Thinking(text="Let me think about it.", signature="sig-1"), Text(text="4")],
                usage=Usage(input_tokens=10, output_tokens=57, reasoning_tokens=16),
                chunk_chars=5,
            )
        ]
    )
    async with ModelServer(script) as server:
        data = (await post(server, "/v1/messages", ANTHROPIC)).sse_json()
    starts = [d["content_block"] for d in data if d["type"] == "content_block_start"]
    assert starts[0] == {"type": "thinking", "thinking": "", "signature": ""}
    deltas = [d["delta"] for d in data if d["type"] == "content_block_delta" and d["index"] == 0]
    assert "".join(x["thinking"] for x in deltas[:-1]) == "Let me think about it."
    assert deltas[-1] == {"type": "signature_delta", "signature": "sig-1"}
    final = data[-2]
    assert final["delta"]["stop_reason"] == "end_turn"
    assert final["usage"]["output_tokens"] == 57
    assert final["usage"]["output_tokens_details"]["thinking_tokens"] == 16


async def test_anthropic_count_tokens_does_not_consume_a_turn() -> None:
    async with ModelServer(Script.of("only turn")) as server:
        reply = await post(server, "/v1/messages/count_tokens?beta=true", {"messages": []})
        assert reply.status == 200 and reply.json()["input_tokens"] >= 1
        assert server.remaining_turns == 1
        data = (await post(server, "/v1/messages", ANTHROPIC)).sse_json()
    assert data[2]["content_block"]["type"] == "text"
    assert [r.api for r in server.requests] == ["count_tokens", "anthropic"]
    assert server.requests[1].turn_index == 0


async def test_anthropic_http_error_and_mid_stream_error() -> None:
    script = Script(
        turns=[
            Turn(blocks=[HttpError(status=429, message="slow down", headers={"retry-after": "1"})]),
            Turn(blocks=[Text(text="partial"), StreamError()]),
        ]
    )
    async with ModelServer(script) as server:
        err = await post(server, "/v1/messages", ANTHROPIC)
        partial = await post(server, "/v1/messages", ANTHROPIC)
    assert err.status == 429
    assert err.headers["retry-after"] == "1"
    body = err.json()
    assert body["type"] == "error"
    assert body["error"] == {"type": "rate_limit_error", "message": "slow down"}
    assert body["request_id"] == err.headers["request-id"]
    events = partial.sse()
    assert events[-1][0] == "error"
    assert json.loads(events[-1][1])["error"]["type"] == "overloaded_error"
    assert "message_stop" not in [e for e, _ in events]
    assert [r.status for r in server.requests] == [429, 200]


async def test_anthropic_max_tokens_and_non_streaming() -> None:
    script = Script(turns=[Turn(blocks=[Text(text="cut")], stop_reason="max_tokens")] * 2)
    async with ModelServer(script) as server:
        data = (await post(server, "/v1/messages", ANTHROPIC)).sse_json()
        plain = (await post(server, "/v1/messages", {**ANTHROPIC, "stream": False})).json()
    assert data[-2]["delta"]["stop_reason"] == "max_tokens"
    assert plain["stop_reason"] == "max_tokens"
    assert plain["content"] == [{"type": "text", "text": "cut"}]


# --------------------------------------------------------------------------- Chat Completions


async def test_side_requests_are_answered_aside_in_each_api() -> None:
    from agentrun.offline import DEFAULT_SIDE_REQUESTS, SideRequest

    def marked(api: str, body: Any) -> bool:
        return "SIDE-CALL" in json.dumps(body)

    mine = SideRequest("mine", marked, lambda script: "aside")
    suggestion = {**ANTHROPIC, "messages": [{"role": "user", "content": "... Reply with ONLY "
                                             "the suggestion, no quotes or explanation."}]}  # fmt: skip
    async with ModelServer(side_requests=(*DEFAULT_SIDE_REQUESTS, mine)) as server:
        aside = await post(server, "/v1/messages", {**ANTHROPIC, "metadata": "SIDE-CALL",
                                                     "stream": False})  # fmt: skip
        await post(server, "/v1/messages", suggestion)
        await post(server, "/v1/messages", ANTHROPIC)
    assert aside.json()["content"] == [{"type": "text", "text": "aside"}]
    assert [r.side_request for r in server.requests] == ["mine", "prompt-suggestion", None]
    assert server.side_requests_served == server.requests[:2]
    assert [r.turn_index for r in server.requests] == [None, None, 0]

    async with ModelServer(side_requests=()) as server:
        await post(server, "/v1/messages", suggestion)
    assert server.requests[0].turn_index == 0  # no matchers: every call takes a turn


async def test_chat_title_request_does_not_consume_a_turn() -> None:
    async with ModelServer() as server:
        title = await post(server, "/v1/chat/completions", TITLE)
        main = await post(server, "/v1/chat/completions", CHAT)
    title_text = "".join(
        c["choices"][0]["delta"].get("content", "") for c in title.sse_json() if c["choices"]
    )
    assert title_text == default_script().title
    assert [(r.title_request, r.turn_index) for r in server.requests] == [(True, None), (False, 0)]
    assert server.model_requests == [server.requests[1]]

    assert main.headers["connection"] == "close"
    assert main.sse()[-1] == (None, "[DONE]")
    chunks = main.sse_json()
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == "I'll run a quick shell command to check the environment."
    calls = [
        tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert calls[0]["function"]["name"] == "bash" and calls[0]["id"].startswith("call_")
    args = json.loads("".join(tc["function"]["arguments"] for tc in calls))
    assert args["command"] == DEFAULT_SHELL_COMMAND and "description" in args
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "tool_calls"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == []
    assert usage["prompt_tokens"] == 26 + 14_336 + 4_088
    assert usage["prompt_tokens_details"]["cached_tokens"] == 14_336
    assert usage["completion_tokens"] == 48
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 0


async def test_chat_reasoning_length_and_errors() -> None:
    script = Script(
        turns=[
            Turn(
                blocks=[Thinking(text="hmm"), Text(text="long answer")],
                stop_reason="max_tokens",
                usage=Usage(input_tokens=5, output_tokens=20, reasoning_tokens=12),
            ),
            Turn(blocks=[HttpError(status=500, message="fake upstream error 500")]),
            Turn(blocks=[HttpError(status=429, headers={"Retry-After": "2"})]),
            Turn(blocks=[Text(text="par"), StreamError(message="upstream exploded")]),
        ]
    )
    async with ModelServer(script) as server:
        first = (await post(server, "/v1/chat/completions", CHAT)).sse_json()
        e500 = await post(server, "/v1/chat/completions", CHAT)
        e429 = await post(server, "/v1/chat/completions", CHAT)
        mid = (await post(server, "/v1/chat/completions", CHAT)).sse_json()
    deltas = [c["choices"][0]["delta"] for c in first if c["choices"]]
    assert deltas[1] == {"reasoning_content": "hmm"}
    assert first[-2]["choices"][0]["finish_reason"] == "length"
    assert first[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 12
    assert e500.status == 500
    assert e500.headers["retry-after-ms"] == "50"
    assert e500.json()["error"]["message"] == "fake upstream error 500"
    assert e500.json()["error"]["type"] == "server_error"
    assert e429.headers["retry-after"] == "2" and "retry-after-ms" not in e429.headers
    assert e429.json()["error"]["type"] == "rate_limit_error"
    assert mid[-1] == {
        "error": {"message": "upstream exploded", "type": "overloaded_error", "code": "500"}
    }


# --------------------------------------------------------------------------- Responses


async def test_responses_stream_items_and_usage() -> None:
    script = Script(
        turns=[
            Turn(
                blocks=[
                    Thinking(text="**Plan**\n\nrun it"),
                    Text(text="Running."),
                    ToolCall(tool="shell", arguments={"command": "echo hi"}),
                ],
                usage=Usage(
                    input_tokens=100,
                    cache_read_tokens=1900,
                    cache_write_tokens=50,
                    output_tokens=30,
                    reasoning_tokens=10,
                ),
            )
        ]
    )
    async with ModelServer(script) as server:
        reply = await post(server, "/v1/responses", RESPONSES)
    events = reply.sse()
    assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
    data = [json.loads(d) for _, d in events]
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    done = [d["item"] for d in data if d["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "message", "function_call"]
    assert done[0]["summary"] == [{"type": "summary_text", "text": "**Plan**\n\nrun it"}]
    assert done[1]["content"][0]["text"] == "Running."
    assert done[2]["name"] == "exec_command"
    assert json.loads(done[2]["arguments"]) == {"cmd": "echo hi", "yield_time_ms": 1000}
    usage = data[-1]["response"]["usage"]
    assert usage["input_tokens"] == 2050
    assert usage["input_tokens_details"] == {"cached_tokens": 1900, "cache_write_tokens": 50}
    assert usage["output_tokens_details"]["reasoning_tokens"] == 10
    assert data[-1]["response"]["id"].startswith("resp_")


async def test_responses_web_search_patch_and_mcp_items() -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n"
    script = Script(
        turns=[
            Turn(
                blocks=[
                    ToolCall(tool="web_search", arguments={"query": "q"}),
                    ToolCall(tool="apply_patch", arguments={"input": patch}),
                    ToolCall(tool="mcp__demo__echo", arguments={"text": "ping"}),
                ]
            )
        ]
    )
    async with ModelServer(script) as server:
        reply = await post(server, "/v1/responses", RESPONSES)
    data = [json.loads(d) for _, d in reply.sse()]
    done = [d["item"] for d in data if d["type"] == "response.output_item.done"]
    search, custom, mcp = done
    assert search["type"] == "web_search_call" and search["action"] == {
        "type": "search",
        "query": "q",
    }
    assert custom["type"] == "custom_tool_call" and custom["name"] == "apply_patch"
    deltas = "".join(
        d["delta"] for d in data if d["type"] == "response.custom_tool_call_input.delta"
    )
    assert custom["input"] == patch == deltas
    assert (mcp["type"], mcp["namespace"], mcp["name"]) == ("function_call", "mcp__demo", "echo")
    assert json.loads(mcp["arguments"]) == {"text": "ping"}


async def test_responses_failed_and_incomplete() -> None:
    script = Script(
        turns=[
            Turn(blocks=[Text(text="x"), StreamError(message="boom", error_type="server_error")]),
            Turn(blocks=[Text(text="trunc")], stop_reason="max_tokens"),
            Turn(blocks=[HttpError(status=400, message="bad", code="invalid_value")]),
        ]
    )
    async with ModelServer(script) as server:
        failed = (await post(server, "/v1/responses", RESPONSES)).sse_json()
        incomplete = (await post(server, "/v1/responses", RESPONSES)).sse_json()
        bad = await post(server, "/v1/responses", RESPONSES)
    assert failed[-1]["type"] == "response.failed"
    assert failed[-1]["response"]["error"] == {"code": "server_error", "message": "boom"}
    assert incomplete[-1]["type"] == "response.incomplete"
    assert incomplete[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert bad.status == 400 and bad.json()["error"]["code"] == "invalid_value"


# --------------------------------------------------------------------------- script handling


async def test_exhausted_script_answers_with_fixed_text() -> None:
    async with ModelServer(Script()) as server:
        data = (await post(server, "/v1/messages", ANTHROPIC)).sse_json()
    text = "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta")
    assert text == EXHAUSTED_TEXT
    assert server.requests[0].exhausted and server.requests[0].turn_index is None


async def test_repeat_serves_the_same_turn_several_times() -> None:
    script = Script(turns=[Turn.error(503, repeat=2), Turn.text("ok")])
    async with ModelServer(script) as server:
        statuses = [(await post(server, "/v1/chat/completions", CHAT)).status for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert [r.turn_index for r in server.requests] == [0, 0, 1]


async def test_estimated_usage_when_not_scripted() -> None:
    async with ModelServer(Script.of("one", "two")) as server:
        first = (await post(server, "/v1/messages", ANTHROPIC)).sse_json()
        second = (await post(server, "/v1/messages", ANTHROPIC)).sse_json()
    u1, u2 = first[0]["message"]["usage"], second[0]["message"]["usage"]
    assert u1["cache_creation_input_tokens"] > 0 and u1["cache_read_input_tokens"] == 0
    assert u2["cache_read_input_tokens"] > 0


async def test_delays_are_applied() -> None:
    script = Script(turns=[Turn(blocks=[Text(text="abcdef")], delay_before=0.2, chunk_chars=2)])
    async with ModelServer(script) as server:
        start = anyio.current_time()
        await post(server, "/v1/messages", ANTHROPIC)
        assert anyio.current_time() - start >= 0.19


def test_script_json_round_trip_and_validation(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            [
                {
                    "blocks": [
                        {"type": "text", "text": "hi"},
                        {"type": "tool_call", "tool": "Read", "arguments": {"file_path": "/x"}},
                    ]
                },
                {"blocks": [{"type": "http_error", "status": 529}], "repeat": 3},
            ]
        )
    )
    script = Script.from_file(path)
    assert len(script.turns) == 2 and len(script.expanded()) == 4
    assert Script.from_json(script.model_dump_json()) == script
    with pytest.raises(ValidationError):
        Turn(blocks=[Text(text="x"), HttpError()])
    with pytest.raises(ValidationError):
        Turn(blocks=[StreamError(), Text(text="x")])
    with pytest.raises(ValidationError):
        Script.from_json('{"turns": [{"blocks": [{"type": "nope"}]}]}')


def test_shell_tool_mapping_per_api() -> None:
    call = ToolCall(arguments={"command": "ls -la"})
    assert map_tool_call("anthropic", call) == ("Bash", {"command": "ls -la"})
    name, args = map_tool_call("chat", call)
    assert name == "bash" and args["command"] == "ls -la"
    assert map_tool_call("responses", call) == (
        "exec_command",
        {"cmd": "ls -la", "yield_time_ms": 1000},
    )
    exact = ToolCall(tool="Write", arguments={"file_path": "a", "content": "b"})
    assert map_tool_call("chat", exact) == ("Write", {"file_path": "a", "content": "b"})
    # Qwen Code speaks Chat Completions too; its request offers run_shell_command, not bash.
    qwen = map_tool_call("chat", call, frozenset({"run_shell_command", "write_file"}))
    assert qwen == ("run_shell_command", {"command": "ls -la"})


# --------------------------------------------------------------------------- HTTP layer


async def test_keep_alive_chunked_request_and_expect_continue() -> None:
    body = json.dumps(ANTHROPIC).encode()
    chunked = (
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Expect: 100-continue\r\nConnection: close\r\n\r\n"
        + f"{10:x}\r\n".encode()
        + body[:10]
        + b"\r\n"
        + f"{len(body) - 10:x}\r\n".encode()
        + body[10:]
        + b"\r\n0\r\n\r\n"
    )
    async with ModelServer(Script.of("a", "b")) as server:
        replies = await exchange(
            server, [raw_request("/v1/messages", ANTHROPIC, close=False), chunked]
        )
    assert [r.status for r in replies] == [200, 200]
    assert replies[0].headers["connection"] == "keep-alive"
    assert [r.turn_index for r in server.requests] == [0, 1]
    assert server.requests[1].json == ANTHROPIC


async def test_limits_unknown_routes_and_bad_bodies() -> None:
    async with ModelServer(max_header_bytes=1024, max_body_bytes=100) as server:
        big_header = await exchange(
            server, [raw_request("/v1/messages", {}, headers={"X-Big": "a" * 4000})]
        )
        big_body = await exchange(server, [raw_request("/v1/messages", {"x": "a" * 200})])
        missing = await exchange(server, [b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n"])
        health = await exchange(server, [b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"])
        not_json = await exchange(
            server,
            [b"POST /v1/messages HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"],
        )
        assert server.remaining_turns == 2
    assert big_header[0].status == 431
    assert big_body[0].status == 413
    assert missing[0].status == 404
    assert health[0].json() == {"status": "ok"}
    assert not_json[0].status == 400
    assert server.errors == []


async def test_server_url_and_stop() -> None:
    server = ModelServer()
    async with server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        port = server.port
    with pytest.raises(OSError):
        async with await anyio.connect_tcp("127.0.0.1", port):
            pass


def test_cli_serve_prints_url_and_serves(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"blocks": [{"type": "text", "text": "from file"}]}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrun.offline", "serve", "--script", str(script), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")

        port = int(url.rsplit(":", 1)[1])
        (reply,) = anyio.run(exchange, port, [raw_request("/v1/messages", ANTHROPIC)])
        data = reply.sse_json()
        text = "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta")
        assert text == "from file"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


# --------------------------------------------------------------------------- offline config


def test_offline_env_is_complete_and_does_not_leak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-REAL")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-REAL")
    monkeypatch.setenv("ANTHROPIC_MODEL", "real-model")
    url = "http://127.0.0.1:4321"
    claude = claude_offline(url, tmp_path / "c")
    assert claude.env["ANTHROPIC_BASE_URL"] == url
    assert claude.env["ANTHROPIC_API_KEY"] != "sk-ant-REAL"
    assert "ANTHROPIC_MODEL" not in claude.env and "OPENAI_API_KEY" not in claude.env
    for key in (
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_AUTOUPDATER",
    ):
        assert claude.env[key] == "1"
    assert claude.env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert claude.env["TERM"] == "dumb"
    assert Path(claude.env["HOME"]).is_dir() and claude.home == Path(claude.env["HOME"])
    assert ("IS_SANDBOX" in claude.env) == (os.geteuid() == 0)
    assert claude.context_window == 1_000_000

    oc = opencode_offline(url + "/", tmp_path / "o", context_window=32_000)
    assert oc.model == "fake/fake-model" and oc.context_window == 32_000
    config = json.loads(Path(oc.env["OPENCODE_CONFIG"]).read_text())
    assert config["provider"]["fake"]["options"]["baseURL"] == url + "/v1"
    assert config["provider"]["fake"]["models"]["fake-model"]["limit"]["context"] == 32_000
    assert config["enabled_providers"] == ["fake"]
    stub = Path(oc.env["XDG_CONFIG_HOME"]) / "opencode"
    assert (stub / "node_modules").is_dir()
    assert json.loads((stub / "package.json").read_text())["dependencies"]
    assert oc.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    assert "OPENAI_API_KEY" not in oc.env

    cx = codex_offline(url, tmp_path / "x", context_window=100_000)
    toml = (Path(cx.env["CODEX_HOME"]) / "config.toml").read_text()
    assert 'base_url = "http://127.0.0.1:4321/v1"' in toml
    assert "plugins = false" in toml and "request_max_retries = 0" in toml
    assert cx.context_window == 95_000 and cx.args == ("--skip-git-repo-check",)


# --------------------------------------------------------------------------- binaries


def test_resolve_binary_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EngineUnavailableError) as info:
        resolve_binary("claude", explicit=tmp_path / "missing", engine="claude")
    assert info.value.install_hint and "npm install --prefix engines" in info.value.install_hint

    engines = tmp_path / "engines"
    bin_dir = engines / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    tool = bin_dir / "agentrun-fake-agent"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("AGENTRUN_ENGINES_DIR", str(engines))
    assert resolve_binary("agentrun-fake-agent") == str(tool)
    assert resolve_binary("x", explicit=tool) == str(tool)

    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(EngineUnavailableError) as info:
        resolve_binary("agentrun-no-such-agent", engine="demo")
    assert info.value.engine == "demo"
    assert any("agentrun-no-such-agent" in s for s in info.value.searched)


# --------------------------------------------------------------------------- netns


def test_netns_entry_point_runs_command() -> None:
    code = (
        "from pathlib import Path; lines = Path('/proc/self/net/dev').read_text().splitlines(); "
        "print(sorted(x.split(':')[0].strip() for x in lines[2:]))"
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentrun.offline", "netns", "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    if can_isolate_network() or network_is_loopback_only():
        assert done.stdout.strip() == "['lo']"
    else:
        assert "relying on the offline configuration" in done.stderr


# --------------------------------------------------------------------------- real agents


@pytest.mark.agent
async def test_real_claude_default_script(tmp_path: Path) -> None:
    binary = require_engine("claude")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with ModelServer() as server:
        config = claude_offline(server.url, tmp_path)
        run = await run_agent(claude_argv(binary, "say hi"), config, workspace)
    assert run.returncode == 0, run.describe()
    init = run.events[0]
    assert init["type"] == "system" and init["subtype"] == "init"
    assert init["apiKeySource"] == "ANTHROPIC_API_KEY"
    blocks = [b for e in run.of_type("assistant") for b in e["message"]["content"]]
    assert blocks[0] == {
        "type": "text",
        "text": "I'll run a quick shell command to check the environment.",
    }
    assert blocks[1]["type"] == "tool_use" and blocks[1]["name"] == "Bash"
    assert blocks[1]["input"] == {"command": DEFAULT_SHELL_COMMAND}
    results = [b for e in run.of_type("user") for b in e["message"]["content"]]
    assert results[0]["tool_use_id"] == blocks[1]["id"]
    assert results[0]["content"] == "hello from agentrun" and results[0]["is_error"] is False
    assert blocks[-1]["text"].startswith("The command `echo hello from agentrun` ran")
    first_usage = run.of_type("assistant")[0]["message"]["usage"]
    assert first_usage["cache_read_input_tokens"] == 14_336
    (result,) = run.of_type("result")
    assert result["is_error"] is False and result["num_turns"] == 2
    assert result["usage"]["input_tokens"] == 26 + 94
    assert result["usage"]["cache_read_input_tokens"] == 14_336 + 18_424
    assert result["usage"]["cache_creation_input_tokens"] == 4_088 + 144
    assert result["usage"]["output_tokens"] == 48 + 31
    model_usage = next(iter(result["modelUsage"].values()))
    assert model_usage["contextWindow"] == config.context_window
    assert [r.turn_index for r in server.model_requests] == [0, 1]
    assert all(r.headers["x-api-key"] == config.env["ANTHROPIC_API_KEY"] for r in server.requests)


@pytest.mark.agent
async def test_real_claude_http_error_fails_fast(tmp_path: Path) -> None:
    binary = require_engine("claude")
    script = Script(turns=[Turn.error(500, "scripted failure")])
    async with ModelServer(script) as server:
        config = claude_offline(server.url, tmp_path)
        run = await run_agent(claude_argv(binary, "say hi"), config, tmp_path)
    assert run.returncode == 1, run.describe()
    (result,) = run.of_type("result")
    assert result["is_error"] is True and result["terminal_reason"] == "api_error"
    assert len(server.model_requests) == 1
    assert run.wall < 20


@pytest.mark.agent
async def test_real_opencode_default_script(tmp_path: Path) -> None:
    binary = require_engine("opencode")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with ModelServer() as server:
        config = opencode_offline(server.url, tmp_path)
        run = await run_agent(opencode_run_argv(binary, config, "say", "hi"), config, workspace)
    assert run.returncode == 0, run.describe()
    types = [e["type"] for e in run.events]
    assert types == [
        "step_start",
        "text",
        "tool_use",
        "step_finish",
        "step_start",
        "text",
        "step_finish",
    ], run.describe()
    texts = [e["part"]["text"] for e in run.of_type("text")]
    assert texts[0] == "I'll run a quick shell command to check the environment."
    assert texts[1].startswith("The command `echo hello from agentrun` ran")
    (tool,) = run.of_type("tool_use")
    assert tool["part"]["tool"] == "bash"
    assert tool["part"]["state"]["status"] == "completed"
    assert tool["part"]["state"]["input"]["command"] == DEFAULT_SHELL_COMMAND
    assert tool["part"]["state"]["output"] == "hello from agentrun\n"
    finishes = [e["part"] for e in run.of_type("step_finish")]
    assert [f["reason"] for f in finishes] == ["tool-calls", "stop"]
    # OpenCode reads cached tokens from Chat Completions, but no cache writes: they count as input.
    assert finishes[0]["tokens"]["cache"]["read"] == 14_336
    assert finishes[0]["tokens"]["input"] == 26 + 4_088
    assert finishes[0]["tokens"]["output"] == 48
    assert finishes[1]["tokens"]["cache"]["read"] == 18_424
    assert finishes[1]["tokens"]["output"] == 31
    titles = [r for r in server.requests if r.title_request]
    assert len(titles) == 1
    assert [r.turn_index for r in server.model_requests] == [0, 1]
    assert all(r.headers["authorization"] == "Bearer dummy-key-not-real" for r in server.requests)


@pytest.mark.agent
async def test_real_opencode_http_error_fails_fast(tmp_path: Path) -> None:
    binary = require_engine("opencode")
    # OpenCode makes 6 attempts for a 5xx; retry-after-ms: 50 keeps that at about 2 s.
    script = Script(turns=[Turn.error(500, "fake upstream error 500", repeat=6)])
    async with ModelServer(script) as server:
        config = opencode_offline(server.url, tmp_path)
        run = await run_agent(opencode_run_argv(binary, config, "say", "hi"), config, tmp_path)
    assert run.returncode == 1, run.describe()
    (error,) = run.of_type("error")
    assert error["error"]["name"] == "APIError"
    assert error["error"]["data"]["statusCode"] == 500
    assert len(server.model_requests) == 6
    assert run.wall < 45  # about 70 s without retry-after-ms


@pytest.mark.agent
async def test_real_codex_default_script(tmp_path: Path) -> None:
    binary = require_engine("codex")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with ModelServer() as server:
        config = codex_offline(server.url, tmp_path)
        run = await run_agent(codex_exec_argv(binary, config, "say hi"), config, workspace)
    assert run.returncode == 0, run.describe()
    items = [e["item"] for e in run.of_type("item.completed")]
    messages = [i["text"] for i in items if i["type"] == "agent_message"]
    assert messages[0] == "I'll run a quick shell command to check the environment."
    assert messages[-1].startswith("The command `echo hello from agentrun` ran")
    (command,) = [i for i in items if i["type"] == "command_execution"]
    assert "echo hello from agentrun" in command["command"]
    assert command["aggregated_output"] == "hello from agentrun\n"
    assert command["exit_code"] == 0
    (done,) = run.of_type("turn.completed")
    usage = done["usage"]
    assert usage["cached_input_tokens"] == 14_336 + 18_424
    assert usage["cache_write_input_tokens"] == 4_088 + 144
    assert usage["input_tokens"] == (26 + 14_336 + 4_088) + (94 + 18_424 + 144)
    assert usage["output_tokens"] == 48 + 31
    assert [r.turn_index for r in server.model_requests] == [0, 1]


@pytest.mark.agent
async def test_real_opencode_acp_uses_the_same_offline_config(tmp_path: Path) -> None:
    binary = require_engine("opencode")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = Script(
        turns=[
            Turn(
                blocks=[Text(text="Hello over ACP.")],
                usage=Usage(input_tokens=1000, cache_read_tokens=200, output_tokens=7),
            )
        ]
    )
    async with ModelServer(script) as server:
        config = opencode_offline(server.url, tmp_path, context_window=64_000)
        received: list[dict[str, Any]] = []
        with anyio.fail_after(60):
            async with await anyio.open_process(
                [binary, "acp", "--cwd", str(workspace)],
                env=dict(config.env),
                cwd=workspace,
            ) as proc:
                assert proc.stdin is not None
                assert proc.stdout is not None
                buffer = b""

                async def call(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
                    nonlocal buffer
                    message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
                    assert proc.stdin is not None
                    assert proc.stdout is not None
                    await proc.stdin.send((json.dumps(message) + "\n").encode())
                    while True:
                        while b"\n" not in buffer:
                            buffer += await proc.stdout.receive()
                        line, buffer = buffer.split(b"\n", 1)
                        msg = json.loads(line)
                        received.append(msg)
                        if msg.get("id") == id_ and "method" not in msg:
                            return msg

                init = await call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
                assert init["result"]["protocolVersion"] == 1
                new = await call(2, "session/new", {"cwd": str(workspace), "mcpServers": []})
                session_id = new["result"]["sessionId"]
                prompt = await call(
                    3,
                    "session/prompt",
                    {"sessionId": session_id, "prompt": [{"type": "text", "text": "say hi"}]},
                )
                await proc.stdin.aclose()
                await proc.wait()
    assert prompt["result"]["stopReason"] == "end_turn"
    assert prompt["result"]["usage"]["inputTokens"] == 1000
    assert prompt["result"]["usage"]["cachedReadTokens"] == 200
    updates = [m["params"]["update"] for m in received if m.get("method") == "session/update"]
    text = "".join(
        u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert text == "Hello over ACP."
    (usage,) = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    assert usage["size"] == config.context_window == 64_000
    assert usage["used"] == 1200
    assert [r.turn_index for r in server.model_requests] == [0]


@pytest.mark.anyio
async def test_an_error_in_the_block_leaves_the_server_as_itself() -> None:
    # A public context manager raises the caller's own exception, never a group of one.
    with pytest.raises(KeyError):
        async with ModelServer():
            raise KeyError("mine")


# --------------------------------------------------------------------------- Gemini API

GEMINI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


async def test_gemini_streams_text_thinking_and_a_whole_function_call_with_usage() -> None:
    turn = Turn(
        blocks=[
            Thinking(text="ponder"),
            Text(text="Running it."),
            ToolCall(arguments={"command": "ls"}),
        ],
        usage=Usage(input_tokens=100, cache_read_tokens=50, output_tokens=9, reasoning_tokens=4),
        chunk_chars=4,
    )
    async with ModelServer(Script(turns=[turn])) as server:
        reply = await post(
            server, "/v1beta/models/fake-model:streamGenerateContent?alt=sse", GEMINI
        )
    events = reply.sse_json()
    parts = [p for e in events for p in e["candidates"][0]["content"]["parts"]]
    assert "".join(p["text"] for p in parts if p.get("thought")) == "ponder"
    assert (
        "".join(p["text"] for p in parts if "text" in p and not p.get("thought")) == "Running it."
    )
    (call,) = [p["functionCall"] for p in parts if "functionCall" in p]
    assert (call["name"], call["args"]) == ("run_shell_command", {"command": "ls"})
    last = events[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["modelVersion"] == "fake-model"
    assert last["usageMetadata"] == {
        "promptTokenCount": 150, "candidatesTokenCount": 5, "totalTokenCount": 159,
        "cachedContentTokenCount": 50, "thoughtsTokenCount": 4,
    }  # fmt: skip
    assert server.requests[0].api == "gemini" and server.requests[0].turn_index == 0


async def test_gemini_whole_answer_count_tokens_and_errors() -> None:
    script = Script(turns=[Turn.text("Plain."), Turn.error(429, "slow down")])
    async with ModelServer(script) as server:
        whole = await post(server, "/v1beta/models/m:generateContent", GEMINI)
        counted = await post(server, "/v1beta/models/m:countTokens", GEMINI)
        limited = await post(server, "/v1beta/models/m:generateContent", GEMINI)
    assert whole.json()["candidates"][0]["content"]["parts"] == [{"text": "Plain."}]
    assert counted.json()["totalTokens"] >= 1
    assert limited.status == 429
    assert limited.json() == {
        "error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}
    }
    assert [r.api for r in server.requests] == ["gemini", "count_tokens", "gemini"]
