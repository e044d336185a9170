"""``agentrun mcp``: the MCP SDK's own client against the server, in process, on the scripted
engine; and over stdio against ``agentrun mcp`` driving the real pinned OpenCode offline."""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import require_engine
from mcp import Client, StdioServerParameters

from agentrun import ContextWindow, Message
from agentrun.mcp_server import build_server
from agentrun.offline import ModelServer, ModelTurn, Script
from agentrun.testing import Hang, ScriptedEngine
from agentrun.testing._scripted_engine import result, text, tool_result, tool_use

pytestmark = pytest.mark.anyio


def _reading(used: int) -> Message:
    return Message.context_window(ContextWindow(used_tokens=used, size_tokens=1000))


def _script(prompt: str, number: int) -> list[Any]:
    if prompt == "hang":
        return [text("working"), Hang()]
    if prompt == "compact":  # the fill repeats, then falls
        return [_reading(420), text("a"), _reading(420), _reading(300), result("compacted")]
    # Structured output: the first line of the prompt is the answer (the schema follows it).
    if prompt.startswith("answer "):
        answer = prompt.split("\n")[0].removeprefix("answer ")
        return [text(answer), result(answer)]
    if prompt.startswith("Your previous final answer"):
        answer = '{"count": 4}' if "not JSON" in prompt else "still not JSON"
        return [text(answer), result(answer)]
    return [
        text("Looking."),
        tool_use("t1", "Bash", {"command": "ls"}),
        tool_result("t1", "a.txt"),
        Message.context_window(ContextWindow(used_tokens=420, size_tokens=1000)),
        text(f"Done: {prompt}"),
        result(f"Done: {prompt}"),
    ]


def _server(tmp_path: Path, **kw: Any) -> Any:
    return build_server(
        roots=[tmp_path], engines={"scripted": lambda: ScriptedEngine(_script)}, **kw
    )


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


async def test_a_client_runs_a_turn_and_gets_the_summary(tmp_path: Path) -> None:
    reported: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async with Client(_server(tmp_path)) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == {"list_engines", "start_session", "run_turn", "cancel_turn",
                         "get_context", "close_session"}  # fmt: skip
        engines = _data(await client.call_tool("list_engines"))["engines"]
        assert engines == [{"name": "scripted", "available": True}]
        started = _data(await client.call_tool("start_session", {"engine": "scripted"}))
        assert started["cwd"] == str(tmp_path.resolve())
        sid = started["session_id"]
        summary = _data(
            await client.call_tool(
                "run_turn",
                {"session_id": sid, "prompt": "list files"},
                progress_callback=on_progress,
            )
        )
        assert summary["text"] == "Done: list files" and summary["ok"] is True
        assert summary["all_text"] == "Looking.\n\nDone: list files"
        assert summary["tool_calls"][0]["name"] == "Bash"
        assert summary["context"]["fraction"] == 0.42
        assert reported == [(4.0, None, "context 42% full")]
        context = _data(await client.call_tool("get_context", {"session_id": sid}))["context"]
        assert (context["used"], context["size"]) == (420, 1000)
        assert _data(await client.call_tool("close_session", {"session_id": sid})) == {
            "closed": True
        }
        gone = await client.call_tool("get_context", {"session_id": sid})
        assert gone.is_error and "no session" in json.dumps(gone.model_dump(mode="json"))


async def test_progress_increases_with_each_notification(tmp_path: Path) -> None:
    """MCP: "The progress value MUST increase with each notification". A context fill that
    repeats or falls is still reported, in the message; progress counts the turn's messages."""
    reported: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total, message))

    async with Client(_server(tmp_path)) as client:
        sid = _data(await client.call_tool("start_session", {"engine": "scripted"}))["session_id"]
        arguments = {"session_id": sid, "prompt": "compact"}
        _data(await client.call_tool("run_turn", arguments, progress_callback=on_progress))
    assert [message for _, _, message in reported] == [
        "context 42% full", "context 42% full", "context 30% full"
    ]  # fmt: skip
    values = [value for value, _, _ in reported]
    assert all(later > earlier for earlier, later in itertools.pairwise(values)), values


async def test_bad_requests_are_clear_tool_errors(tmp_path: Path) -> None:
    outside = tmp_path.parent
    async with Client(_server(tmp_path, max_sessions=1)) as client:
        for arguments, said in [
            ({"engine": "nope"}, "unknown engine"),
            ({"engine": "scripted", "cwd": str(outside)}, "outside the allowed roots"),
        ]:
            answer = await client.call_tool("start_session", arguments)
            assert answer.is_error and said in str(answer.content), answer.content
        _data(await client.call_tool("start_session", {"engine": "scripted"}))
        full = await client.call_tool("start_session", {"engine": "scripted"})
        assert full.is_error and "1 sessions are open" in str(full.content)
        missing = await client.call_tool("run_turn", {"session_id": "s-x", "prompt": "hi"})
        assert missing.is_error and "no session" in str(missing.content)


COUNT = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}


async def test_run_turn_returns_the_answer_validated_against_an_output_schema(
    tmp_path: Path,
) -> None:
    async with Client(_server(tmp_path)) as client:
        sid = _data(await client.call_tool("start_session", {"engine": "scripted"}))["session_id"]

        async def turn(prompt: str) -> dict[str, Any]:
            arguments = {"session_id": sid, "prompt": prompt, "output_schema": COUNT}
            return _data(await client.call_tool("run_turn", arguments))

        valid = await turn('answer {"count": 3}')
        assert valid["output"] == {"count": 3} and valid["output_repairs"] == 0
        assert "output_errors" not in valid
        # Not JSON: one repair turn in the same session, which answers right.
        repaired = await turn("answer three")
        assert repaired["output"] == {"count": 4} and repaired["output_repairs"] == 1
        # Wrong twice: no output, and what was wrong, with the rest of the summary.
        wrong = await turn('answer {"count": "three"}')
        assert wrong["output"] is None and wrong["output_repairs"] == 1
        assert wrong["output_errors"][0].startswith("not JSON"), wrong
        assert wrong["text"] == "still not JSON"


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "strng"}, '(root).type: "strng" is not one of'),
        ({"properties": {"n": {"minimum": "1"}}}, "(root).properties.n.minimum: must be a number"),
        ({"required": "count"}, "(root).required: must be an array of property names"),
        ({"$ref": "#/$defs/Missing"}, "points to nothing"),
        ("not a schema", "output_schema"),
    ],
)
async def test_a_bad_output_schema_is_a_tool_error_saying_what_is_wrong(
    tmp_path: Path, schema: Any, said: str
) -> None:
    async with Client(_server(tmp_path)) as client:
        sid = _data(await client.call_tool("start_session", {"engine": "scripted"}))["session_id"]
        arguments = {"session_id": sid, "prompt": 'answer {"count": 1}', "output_schema": schema}
        answer = await client.call_tool("run_turn", arguments)
        assert answer.is_error and said in str(answer.content), answer.content
        # Nothing was sent: the session's first turn is still to come.
        summary = _data(await client.call_tool("run_turn", {"session_id": sid, "prompt": "x"}))
        assert summary["turn"] == 1


async def test_cancel_turn_interrupts_a_running_turn(tmp_path: Path) -> None:
    async with Client(_server(tmp_path)) as client:
        sid = _data(await client.call_tool("start_session", {"engine": "scripted"}))["session_id"]
        outcome: dict[str, Any] = {}

        async def run() -> None:
            outcome.update(
                _data(await client.call_tool("run_turn", {"session_id": sid, "prompt": "hang"}))
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            cancelled = {"cancelled": False}
            with anyio.fail_after(10):
                while not cancelled["cancelled"]:
                    await anyio.sleep(0.05)
                    cancelled = _data(await client.call_tool("cancel_turn", {"session_id": sid}))
        assert outcome["stop_reason"] == "cancelled" and outcome["ok"] is False
        # The session goes on.
        again = _data(await client.call_tool("run_turn", {"session_id": sid, "prompt": "next"}))
        assert again["text"] == "Done: next"


@pytest.mark.agent
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_agentrun_mcp_drives_real_opencode(tmp_path: Path, transport: str) -> None:
    """``agentrun mcp`` as a user starts it, over stdio or streamable HTTP on loopback."""
    import socket

    async with _opencode_behind_agentrun_mcp(tmp_path) as (argv, env, model):
        if transport == "stdio":
            async with Client(
                StdioServerParameters(command=sys.executable, args=argv, env=env)
            ) as client:
                summary = await _delegate(client, model)
        else:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            argv += ["--transport", "http", "--port", str(port)]
            async with await anyio.open_process([sys.executable, *argv], env=env) as process:
                try:
                    await _wait_for_port(port)
                    async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                        summary = await _delegate(client, model)
                finally:
                    process.terminate()
                    with anyio.fail_after(10):
                        await process.wait()
    assert summary["ok"] is True and summary["text"] == DELEGATED
    assert summary["output"] == {"verdict": "delegated"} and summary["output_repairs"] == 0
    assert summary["context"]["size"] == 200_000


@pytest.mark.agent
async def test_a_client_that_goes_away_leaves_no_agent_behind(tmp_path: Path) -> None:
    """The stdio client disconnects without closing its session: the server closes it, and
    neither the server nor the agent it started is left running."""
    async with _opencode_behind_agentrun_mcp(tmp_path) as (argv, env, model):
        params = StdioServerParameters(command=sys.executable, args=argv, env=env)
        async with Client(params) as client:
            sid = _data(await client.call_tool(
                "start_session", {"engine": "opencode-acp", "model": model}))["session_id"]  # fmt: skip
            _data(await client.call_tool("run_turn", {"session_id": sid, "prompt": "hi"}))
            assert _processes_of(tmp_path), "the server and its agent run while connected"
        with anyio.fail_after(15):
            while left := _processes_of(tmp_path):
                await anyio.sleep(0.1)
        assert not left


DELEGATED = '{"verdict": "delegated"}'


@asynccontextmanager
async def _opencode_behind_agentrun_mcp(
    tmp_path: Path,
) -> AsyncIterator[tuple[list[str], dict[str, str], str | None]]:
    """The command line and environment of ``agentrun mcp`` serving the pinned OpenCode, set up
    offline against a model server that answers every turn with :data:`DELEGATED`."""
    require_engine("opencode")
    from agentrun.offline import opencode_offline

    script = Script(turns=[ModelTurn.text(DELEGATED).model_copy(update={"repeat": 3})])
    async with ModelServer(script) as server:
        config = opencode_offline(server.url, tmp_path / "agent")
        workspace = tmp_path / "work"
        workspace.mkdir()
        argv = ["-m", "agentrun", "mcp", "--root", str(workspace)]
        env = {**config.env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        yield argv, env, config.model


def _processes_of(tmp_path: Path) -> list[int]:
    """Processes whose environment mentions ``tmp_path`` (the server and the agents it runs)."""
    needle = str(tmp_path).encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def _delegate(client: Any, model: str | None) -> dict[str, Any]:
    started = _data(await client.call_tool("start_session", {"engine": "opencode", "model": model}))
    assert started["session_id"] == "opencode-1"
    # The turn asks for structured output: the validated answer comes back as output.
    schema = {"type": "object", "properties": {"verdict": {"type": "string"}}}
    arguments = {"session_id": "opencode-1", "prompt": "judge", "output_schema": schema}
    summary = _data(await client.call_tool("run_turn", {**arguments, "timeout": 120}))
    assert _data(await client.call_tool("close_session", {"session_id": "opencode-1"})) == {
        "closed": True
    }
    return summary


async def _wait_for_port(port: int) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.1)
            else:
                await stream.aclose()
                return


def test_the_http_transport_refuses_a_non_loopback_address(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agentrun.cli import main

    assert main(["mcp", "--transport", "http", "--host", "0.0.0.0"]) == 2
    assert "loopback only" in capsys.readouterr().err


@pytest.mark.agent
async def test_claude_delegates_to_opencode_through_agentrun_mcp(tmp_path: Path) -> None:
    """One real agent delegating to another: the pinned claude, given ``agentrun mcp`` as an
    MCP server, calls start_session and run_turn; the opencode engine behind it answers from the
    same scripted model server; everything on loopback."""
    require_engine("claude")
    require_engine("opencode")
    from agentrun import SessionOptions, get_engine, run_turn
    from agentrun.offline import claude_offline, opencode_offline
    from agentrun.offline._script import ToolCall
    from agentrun.offline._script import Turn as ScriptTurn

    workspace = tmp_path / "work"
    workspace.mkdir()
    script = Script(
        turns=[
            ScriptTurn(
                blocks=[
                    ToolCall(
                        tool="mcp__agentrun__start_session",
                        arguments={"engine": "opencode", "model": "fake/fake-model"},
                    )
                ]
            ),
            ScriptTurn(
                blocks=[
                    ToolCall(
                        tool="mcp__agentrun__run_turn",
                        arguments={"session_id": "opencode-1", "prompt": "say hi", "timeout": 120},
                    )
                ]
            ),
            ModelTurn.text("Delegated answer."),  # opencode's turn, behind the MCP tool
            ModelTurn.text("OpenCode answered: Delegated answer."),
        ]
    )
    async with ModelServer(script) as server:
        opencode = opencode_offline(server.url, tmp_path / "opencode")
        mcp_config = {
            "mcpServers": {
                "agentrun": {
                    "command": sys.executable,
                    "args": ["-m", "agentrun", "mcp", "--root", str(workspace)],
                    "env": {
                        **opencode.env,
                        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
                    },
                }
            }
        }
        claude = claude_offline(server.url, tmp_path / "claude")
        options = SessionOptions(
            cwd=str(workspace),
            env=claude.env,
            inherit_env=False,
            model=claude.model,
            allowed_tools=("mcp__agentrun",),
            extra_args=("--mcp-config", json.dumps(mcp_config), "--strict-mcp-config"),
        )
        async with get_engine("claude").start(options) as session:
            summary = await run_turn(session, "Ask OpenCode to say hi.", timeout=180)
    calls = {call.name: call for call in summary.tool_calls}
    assert set(calls) == {"mcp__agentrun__start_session", "mcp__agentrun__run_turn"}
    output = calls["mcp__agentrun__run_turn"].output
    assert isinstance(output, str), output
    delegated = json.loads(output)  # the TurnSummary of OpenCode's turn, as claude saw it
    assert delegated["ok"] is True and delegated["text"] == "Delegated answer."
    assert delegated["model"] == "fake/fake-model" and delegated["context"]["size"] == 200_000
    assert not calls["mcp__agentrun__run_turn"].is_error
    assert summary.text == "OpenCode answered: Delegated answer."


@pytest.mark.agent
async def test_agentrun_mcp_embedded_runs_real_claude_offline(tmp_path: Path) -> None:
    """``agentrun mcp --embedded --script FILE``, as ``agentrun acp --embedded``: the pinned
    claude answers from the embedded model server; no account, no network; progress rises."""
    require_engine("claude")
    script = tmp_path / "script.json"
    script.write_text(Script(turns=[ModelTurn.text("Embedded answer.")]).model_dump_json())
    workspace = tmp_path / "work"
    workspace.mkdir()
    argv = [
        "-m",
        "agentrun",
        "mcp",
        "--embedded",
        "--script",
        str(script),
        "--root",
        str(workspace),
    ]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    reported: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reported.append(progress)

    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    async with Client(params) as client:
        engines = {e["name"]: e for e in _data(await client.call_tool("list_engines"))["engines"]}
        assert "scripted" not in engines and engines["claude"]["available"] is True
        sid = _data(await client.call_tool("start_session", {"engine": "claude"}))["session_id"]
        arguments = {"session_id": sid, "prompt": "hi", "timeout": 120}
        summary = _data(
            await client.call_tool("run_turn", arguments, progress_callback=on_progress)
        )
        _data(await client.call_tool("close_session", {"session_id": sid}))
    assert summary["ok"] is True and summary["text"] == "Embedded answer.", summary
    assert summary["errors"] == []
    assert reported, "claude reports its context fill"
    assert all(later > earlier for earlier, later in itertools.pairwise(reported)), reported


def test_script_needs_embedded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from agentrun.cli import main

    assert main(["mcp", "--script", str(tmp_path / "s.json")]) == 2
    assert "--script needs --embedded" in capsys.readouterr().err


@pytest.mark.agent
async def test_embedded_mcp_sessions_are_sandboxed_where_a_sandbox_can_be_had(
    tmp_path: Path,
) -> None:
    """By default an embedded session's agent runs sandboxed (an MCP client is usually a model
    acting unattended): its shell writes the sandbox's host name into the workspace; with
    ``sandbox=False`` the same script runs on the host."""
    from agentrun._wire.sandbox import sandbox_unavailable

    if (why := sandbox_unavailable()) is not None:
        pytest.skip(why)
    require_engine("codex")
    script = Script(turns=[ModelTurn.shell("hostname > made.txt"), ModelTurn.text("Done.")])
    written: dict[bool | None, str] = {}
    for sandbox in (None, False):
        workspace = tmp_path / f"work-{sandbox}"
        workspace.mkdir()
        server = build_server(roots=[workspace], embedded=True, script=script, sandbox=sandbox)
        async with Client(server) as client:
            assert _data(await client.call_tool("list_engines"))["sandboxed"] is (sandbox is None)
            started = _data(await client.call_tool("start_session", {"engine": "codex"}))
            assert started["sandboxed"] is (sandbox is None)
            arguments = {"session_id": started["session_id"], "prompt": "go", "timeout": 120}
            summary = _data(await client.call_tool("run_turn", arguments))
            assert summary["ok"] is True, summary
        written[sandbox] = (workspace / "made.txt").read_text().strip()
    assert written[None] == "agentrun-sandbox"
    assert written[False] not in ("", "agentrun-sandbox")


def test_sandboxed_sessions_of_the_callers_own_agents_are_refused() -> None:
    from agentrun import ConfigurationError

    with pytest.raises(ConfigurationError, match="caller's login"):
        build_server(sandbox=True)
    # Not embedded: not sandboxed by default (the caller's own agents).
    build_server()
