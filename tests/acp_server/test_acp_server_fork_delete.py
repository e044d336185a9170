"""``agentrun acp`` serving ``session/delete`` (stable ACP) and ``session/fork`` (unstable).

Each test starts ``agentrun acp --embedded`` as a subprocess and talks ACP to it with the small
client of :mod:`acp_client`; the engines are the real pinned agents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, AcpClient, open_server, schema_validator, server_argv
from agents_support import descendants

from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun.engines._registry import get_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: A first prompt long enough that a conversation holding it is plainly larger, in the context
#: the model server reports (about four bytes of request per token), than one that does not.
LONG_PROMPT = "Remember these notes. " + "the quick brown fox jumps over the lazy dog " * 120


def _available(engine: str) -> None:
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))


async def _closed(client: AcpClient, before: set[int]) -> None:
    assert client.process.stdin is not None
    await client.process.stdin.aclose()
    with anyio.fail_after(40):
        assert await client.process.wait() == 0
    with anyio.fail_after(10):
        while descendants() - before:
            await anyio.sleep(0.1)


async def _prompt(client: AcpClient, sid: str, text: str) -> int | None:
    """Runs one prompt; the context the agent then used (its last ``usage_update``, if any)."""
    since = len(client.updates)
    reply = await client.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    )
    assert reply["stopReason"] == "end_turn", reply
    usage = [u["update"] for u in client.updates[since:]
             if u["sessionId"] == sid and u["update"]["sessionUpdate"] == "usage_update"]  # fmt: skip
    return int(usage[-1]["used"]) if usage else None


def _user_texts(updates: list[dict[str, Any]], sid: str) -> list[str]:
    return [u["update"]["content"]["text"] for u in updates
            if u["sessionId"] == sid and u["update"]["sessionUpdate"] == "user_message_chunk"]  # fmt: skip


@pytest.mark.timeout(180)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    "engine",
    ["claude", "codex", "codex-app-server", "opencode", "opencode-acp", "claude-acp", "codex-acp"],
)
async def test_fork_goes_on_from_a_copy_of_the_conversation(engine: str, tmp_path: Path) -> None:
    """``session/fork`` answered "method not found". Now the fork is the engine's own: its first
    prompt runs on the source's conversation (a context as large as the source's grown by one
    prompt, far above a fresh session's), its history replays the source's, and the source
    goes on unchanged."""
    _available(engine)
    before = descendants()
    argv = server_argv(engine, "--embedded")
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        init = await client.request("initialize", CLIENT_INIT)
        assert init["agentCapabilities"]["sessionCapabilities"]["fork"] == {}
        cwd = str(tmp_path)
        source = (await client.request("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]
        await _prompt(client, source, LONG_PROMPT)
        forked = await client.request(
            "session/fork", {"sessionId": source, "cwd": cwd, "mcpServers": []}
        )
        assert schema_validator("ForkSessionResponse", unstable=True).is_valid(forked), forked
        fork = forked["sessionId"]
        assert fork != source
        fork_used = await _prompt(client, fork, "What did I ask you to remember?")
        fresh = (await client.request("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]
        fresh_used = await _prompt(client, fresh, "What did I ask you to remember?")
        # The long first prompt alone is over a thousand tokens of the fork's context.
        assert fork_used is not None and fresh_used is not None
        assert fork_used > fresh_used + 1000, (fork_used, fresh_used)
        # The source goes on (its own conversation, not the fork's).
        await _prompt(client, source, "and again")
        listed = {s["sessionId"] for s in (await client.request("session/list", {}))["sessions"]}
        assert {source, fork, fresh} <= listed
        since = len(client.updates)
        await client.request("session/load", {"sessionId": fork, "cwd": cwd, "mcpServers": []})
        replayed = _user_texts(client.updates[since:], fork)
        assert replayed == [LONG_PROMPT, "What did I ask you to remember?"], replayed
        assert client.invalid == []
        await _closed(client, before)
        tg.cancel_scope.cancel()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_fork_on_an_agent_that_cannot_is_method_not_found(tmp_path: Path) -> None:
    """Gemini CLI offers no ``session/fork``: the library's typed refusal
    (:class:`~agentrun.ForkNotSupportedError`) is ACP's "method not found" with its error code,
    no session is added, and the source goes on."""
    _available("gemini")
    before = descendants()
    async with anyio.create_task_group() as tg:
        client = await open_server(
            tg, server_argv("gemini", "--embedded"), stderr_path=tmp_path / "server.err"
        )
        await client.request("initialize", CLIENT_INIT)
        cwd = str(tmp_path)
        source = (await client.request("session/new", {"cwd": cwd, "mcpServers": []}))["sessionId"]
        await _prompt(client, source, "hello")
        answer = await client.call("session/fork", {"sessionId": source, "cwd": cwd})
        assert answer["error"]["code"] == -32601, answer
        assert answer["error"]["data"]["errorCode"] == "fork_not_supported", answer
        listed = (await client.request("session/list", {}))["sessions"]
        assert [s["sessionId"] for s in listed] == [source]
        await _prompt(client, source, "still here?")
        await _closed(client, before)
        tg.cancel_scope.cancel()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("engine", ["claude", "opencode-acp"])
async def test_delete_forgets_the_session_and_closes_its_agent(
    engine: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """``session/delete`` answered "method not found". Now the session leaves ``session/list``,
    its agent is closed, its id is "resource not found" to every session method after, and
    the other sessions go on."""
    _available(engine)
    before = descendants()
    argv = server_argv(engine, "--embedded", backend=anyio_backend_name)
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        init = await client.request("initialize", CLIENT_INIT)
        assert init["agentCapabilities"]["sessionCapabilities"]["delete"] == {}
        cwd = str(tmp_path)
        new = {"cwd": cwd, "mcpServers": []}
        gone = (await client.request("session/new", new))["sessionId"]
        kept = (await client.request("session/new", new))["sessionId"]
        await _prompt(client, gone, "hello")
        with_agent = descendants() - before
        assert await client.request("session/delete", {"sessionId": gone}) == {}
        listed = (await client.request("session/list", {}))["sessions"]
        assert [s["sessionId"] for s in listed] == [kept]
        for method, params in [
            ("session/load", {"sessionId": gone, "cwd": cwd, "mcpServers": []}),
            ("session/resume", {"sessionId": gone, "cwd": cwd}),
            ("session/prompt", {"sessionId": gone, "prompt": [{"type": "text", "text": "x"}]}),
            ("session/delete", {"sessionId": gone}),
            ("session/fork", {"sessionId": gone, "cwd": cwd}),
        ]:
            answer = await client.call(method, params)
            assert answer.get("error", {}).get("code") == -32002, (method, answer)
        assert with_agent  # the deleted session's agent ran ...
        await _prompt(client, kept, "still here?")
        assert client.invalid == []
        await _closed(client, before)  # ... and every agent is gone once the server ends
        tg.cancel_scope.cancel()
