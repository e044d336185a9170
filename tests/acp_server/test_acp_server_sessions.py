"""``agentrun acp`` at the edges of its sessions: the model option an ACP client (``acpx
--model``) picks from, ids the server never issued, and what it keeps of each session.

Each test starts ``agentrun acp --embedded`` as a subprocess and talks ACP to it with the small
client of :mod:`acp_client`; the engines are the real pinned agents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, AcpClient, open_server, schema_validator, server_argv
from agents_support import descendants

from agentrun import run_turn
from agentrun._acp_server._known import agent_knows
from agentrun._acp_server._sessions import History
from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun.engines._registry import get_engine
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


def _available(engine: str) -> None:
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))


def _model_option(answer: dict[str, Any]) -> dict[str, Any]:
    return next(o for o in answer["configOptions"] if o["id"] == "model")


async def _closed(client: AcpClient, before: set[int]) -> None:
    assert client.process.stdin is not None
    await client.process.stdin.aclose()
    with anyio.fail_after(40):
        assert await client.process.wait() == 0
    with anyio.fail_after(10):
        while descendants() - before:
            await anyio.sleep(0.1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("engine", "known"), [("claude", "claude-sonnet-4-5-20250929"), ("codex", "gpt-5.5")]
)
async def test_the_model_option_offers_the_catalogs_models_and_takes_them(
    engine: str, known: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """The model option listed only the current value (``default``), so a client that picks
    from the list (``acpx --model X``) could pick nothing; it lists the catalog's models of the
    engine, and ``session/set_config_option`` and ``session/set_model`` take them."""
    _available(engine)
    before = descendants()
    argv = server_argv(engine, "--embedded", backend=anyio_backend_name)
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        await client.request("initialize", CLIENT_INIT)
        new = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert schema_validator("NewSessionResponse").is_valid(new)
        sid = new["sessionId"]
        option = _model_option(new)
        offered = [o["value"] for o in option["options"]]
        assert option["category"] == "model" and option["currentValue"] in offered
        assert "default" in offered and known in offered, offered
        assert len(offered) == len(set(offered))
        # Picked through the config option ...
        changed = await client.request(
            "session/set_config_option", {"sessionId": sid, "configId": "model", "value": known}
        )
        assert _model_option(changed)["currentValue"] == known
        # ... through the unstable session/set_model, and back to the agent's default.
        assert await client.request(
            "session/set_model", {"sessionId": sid, "modelId": "default"}
        ) == {}  # fmt: skip
        resumed = await client.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
        assert _model_option(resumed)["currentValue"] == "default"
        assert await client.request("session/set_model", {"sessionId": sid, "modelId": known}) == {}
        resumed = await client.request("session/resume", {"sessionId": sid, "cwd": str(tmp_path)})
        assert _model_option(resumed)["currentValue"] == known
        bad = await client.call("session/set_model", {"sessionId": sid, "modelId": ""})
        assert bad["error"]["code"] == -32602, bad
        assert client.invalid == []
        await _closed(client, before)
        tg.cancel_scope.cancel()


#: Ids no agent has: one of the server's own shape (an earlier ``agentrun acp`` process issued
#: it; what ``acpx`` loads after ``sessions new``), a malformed one, a UUID.
FOREIGN_IDS = ("sess_0123456789abcdef0123456789abcdef", "no-such-id",
               "01a20000-0000-7000-8000-00000000beef")  # fmt: skip
RESUMING_ENGINES = ("claude", "codex", "opencode", "opencode-acp", "codex-app-server")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("engine", RESUMING_ENGINES)
async def test_an_id_nobody_issued_is_not_found_at_resume_and_a_new_session_works(
    engine: str, tmp_path: Path
) -> None:
    """``session/load`` and ``session/resume`` of an id the server never issued and the agent
    does not know answered success on the spawn-per-turn agents, and the error came at the next
    prompt: ``acpx``'s ``sessions new`` then a prompt (a new process loading the id it was
    given) failed. Now it is ``-32002`` at once, and the session ``acpx`` opens instead works."""
    _available(engine)
    before = descendants()
    argv = server_argv(engine, "--embedded")
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        await client.request("initialize", CLIENT_INIT)
        for method in ("session/load", "session/resume"):
            for foreign in FOREIGN_IDS:
                params = {"sessionId": foreign, "cwd": str(tmp_path), "mcpServers": []}
                answer = await client.call(method, params)
                assert "error" in answer, (method, foreign, answer)
                assert answer["error"]["code"] == -32002, (method, foreign, answer)
                assert answer["error"]["data"]["errorCode"] == "session_not_found", answer
        listed = await client.request("session/list", {})
        assert listed["sessions"] == []  # nothing was opened for them
        # What acpx does next: a new session, and a prompt in it.
        sid = (await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
            "sessionId"
        ]
        reply = await client.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
        )
        assert reply["stopReason"] == "end_turn"
        assert client.invalid == []
        await _closed(client, before)
        tg.cancel_scope.cancel()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("engine", ["claude", "codex", "opencode"])
async def test_the_agents_own_store_tells_a_session_it_has_from_one_it_lacks(
    engine: str, tmp_path: Path
) -> None:
    """What the server looks up for an id it did not issue, against a session the real agent
    ran: its resume id is known (the conversation can go on), the other ids are not."""
    _available(engine)
    async with ModelServer(Script(turns=[ModelTurn.text("Noted.")])) as server:
        engine_obj, options = embedded_engine(engine, server.url, tmp_path / "agent",
                                              cwd=str(tmp_path))  # fmt: skip
        async with engine_obj.start(options) as session:
            summary = await run_turn(session, "remember this", timeout=120)
    assert summary.ok and summary.resume_id
    assert agent_knows(engine, options, summary.resume_id) is True
    for foreign in FOREIGN_IDS:
        assert agent_knows(engine, options, foreign) is False, foreign


def _compact(update: dict[str, Any]) -> int:
    return len(json.dumps(update, separators=(",", ":")).encode())


def test_the_history_keeps_the_newest_whole_turns_within_its_bound() -> None:
    """Every update of every session was kept for the server's lifetime (36 MB of updates grew
    the server by 58 MB more than without them). The history holds compact JSON within a byte
    bound, drops the oldest turns whole, and a turn larger than the bound keeps its newest
    updates."""
    history = History(limit=4096)
    history.append({"sessionUpdate": "config_option_update", "configOptions": []})  # turn 0
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x" * 90}}
    for turn in range(1, 31):
        history.begin_turn()
        history.append({"sessionUpdate": "user_message_chunk",
                        "content": {"type": "text", "text": f"prompt {turn}"}})  # fmt: skip
        for _ in range(10):
            history.append(chunk)
        kept = list(history)
        assert history.size == sum(_compact(u) for u in kept) <= 4096
        if history.dropped:
            # The replay starts at a prompt, and the newest turn is all there.
            assert kept[0]["sessionUpdate"] == "user_message_chunk", kept[0]
            assert kept[-11]["content"]["text"] == f"prompt {turn}"
    assert history.dropped > 0 and len(history) < 30 * 11
    # One turn larger than the bound: its newest updates, nothing of earlier turns.
    history.begin_turn()
    for index in range(100):
        history.append({**chunk, "content": {"type": "text", "text": f"{index:03d}" + "y" * 90}})
    kept = list(history)
    assert history.size <= 4096
    assert kept[-1]["content"]["text"].startswith("099")
    assert all(u["sessionUpdate"] == "agent_message_chunk" for u in kept)
    assert History(limit=0).limit == 0
    empty = History(limit=0)
    empty.append(chunk)
    assert len(empty) == 0 and empty.size == 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_session_load_replays_the_newest_turns_within_the_bound(tmp_path: Path) -> None:
    """Over ``agentrun acp``: what ``session/load`` replays is at most ``--history-bytes`` of
    updates, starting at a prompt, and it has the newest turn."""
    _available("claude")
    bound = 32 * 1024
    long_text = "lorem ipsum " * 2000  # about 24 KiB, in many chunks
    script = Script(turns=[ModelTurn.text(long_text), ModelTurn.text(long_text),
                           ModelTurn.text("The last answer.")])  # fmt: skip
    script_file = tmp_path / "script.json"
    script_file.write_text(script.model_dump_json())
    before = descendants()
    argv = server_argv("claude", "--embedded", "--script", str(script_file),
                       "--history-bytes", str(bound))  # fmt: skip
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        await client.request("initialize", CLIENT_INIT)
        sid = (await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
            "sessionId"
        ]
        sent = 0
        for prompt in ("first", "second", "third"):
            since = len(client.updates)
            await client.request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}
            )
            sent += sum(_compact(u["update"]) for u in client.updates[since:])
        assert sent > 2 * bound  # more was said than is kept
        await client.request("session/close", {"sessionId": sid})
        since = len(client.updates)
        await client.request(
            "session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []}
        )
        replayed = [u["update"] for u in client.updates[since:] if u["sessionId"] == sid]
        history = [u for u in replayed if u["sessionUpdate"] != "usage_update"]
        assert sum(_compact(u) for u in history) <= bound
        assert history[0]["sessionUpdate"] == "user_message_chunk"
        prompts = [u["content"]["text"] for u in history
                   if u["sessionUpdate"] == "user_message_chunk"]  # fmt: skip
        assert prompts[-1] == "third" and "first" not in prompts, prompts
        assert client.invalid == []
        await _closed(client, before)
        tg.cancel_scope.cancel()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_tool_of_a_later_turn_is_a_new_call_even_after_the_session_reopened(
    tmp_path: Path,
) -> None:
    """``codex exec`` numbers its items per process: the second turn's shell call arrived as
    an update of the first turn's call. The engine numbers them per library session, and a new
    option reopens that session (numbering starts again): the server sends an id an earlier
    turn used with the turn's number, so each turn's call is a ``tool_call`` of its own."""
    _available("codex")
    script = Script(turns=[ModelTurn.shell("echo one"), ModelTurn.text("one"),
                           ModelTurn.shell("echo two"), ModelTurn.text("two"),
                           ModelTurn.shell("echo three"), ModelTurn.text("three")])  # fmt: skip
    script_file = tmp_path / "script.json"
    script_file.write_text(script.model_dump_json())
    before = descendants()
    argv = server_argv("codex", "--embedded", "--script", str(script_file))
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        await client.request("initialize", CLIENT_INIT)
        sid = (await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []}))[
            "sessionId"
        ]
        await client.request("session/set_mode", {"sessionId": sid, "modeId": "bypass"})
        calls: list[list[str]] = []
        for prompt, effort in (("one", None), ("two", None), ("three", "high")):
            if effort is not None:  # the library session reopens at this prompt
                await client.request(
                    "session/set_config_option",
                    {"sessionId": sid, "configId": "effort", "value": effort},
                )
            since = len(client.updates)
            await client.request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}
            )
            calls.append([u["update"]["toolCallId"] for u in client.updates[since:]
                          if u["update"]["sessionUpdate"] == "tool_call"])  # fmt: skip
        assert all(len(ids) == 1 for ids in calls), calls
        assert len({ids[0] for ids in calls}) == 3, calls
        assert client.invalid == []
        await _closed(client, before)
        tg.cancel_scope.cancel()
