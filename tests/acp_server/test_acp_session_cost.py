"""``agentrun acp``'s ``usage_update`` cost is the session's cumulative cost (the ACP usage
RFD's), counted as ``Session.totals`` counts it: the sum of every turn's cost, kept across a
close and load, and absent from the first turn whose cost is not known (a prompt cancelled
before the model reported its usage), never a partial sum that looks whole.

The real pinned agent runs behind the server against the embedded model server; its model has
a catalog price, so each turn's cost is the price of the tokens the script serves (what the
server's ledger records for each answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp_client import CLIENT_INIT, AcpClient, open_server, server_argv
from repo_paths import REPO

from agentrun import PriceCatalog, Usage, default_prices
from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun.engines._registry import get_engine
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, TextBlock, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: Engines whose turn cost the library estimates from the tokens (the agent reports none).
ENGINES = ["codex-app-server"]
PRICES = {
    "models": {
        "fake-model": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}
    }
}
CALLS = (
    ScriptUsage(input_tokens=1_204, cache_read_tokens=20_480, cache_write_tokens=3_072,
                output_tokens=52),
    ScriptUsage(input_tokens=96, cache_read_tokens=23_552, cache_write_tokens=310,
                output_tokens=27),
    ScriptUsage(input_tokens=2_500, cache_read_tokens=24_500, cache_write_tokens=128,
                output_tokens=6),
)  # fmt: skip
COUNTING = "Counting: " + " ".join(str(i) for i in range(300))


def _price(*calls: ScriptUsage) -> float:
    """The catalog's price of what the server served for ``calls`` (the ledger's usage)."""
    usage = sum(
        (
            Usage(input_tokens=c.input_tokens, cache_read_tokens=c.cache_read_tokens,
                  cache_write_tokens=c.cache_write_tokens, output_tokens=c.output_tokens)
            for c in calls
        ),
        Usage(),
    )  # fmt: skip
    price = PriceCatalog(PRICES).estimate(usage, "fake-model")
    assert price is not None
    return price


def _costs(client: AcpClient, since: int) -> list[Any]:
    return [
        u["update"].get("cost")
        for u in client.updates[since:]
        if u["update"]["sessionUpdate"] == "usage_update"
    ]


async def _prompt(client: AcpClient, sid: str, text: str) -> int:
    since = len(client.updates)
    reply = await client.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    )
    assert reply["stopReason"] == "end_turn", reply
    return since


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ENGINES)
async def test_the_usage_updates_cost_is_the_sessions_cumulative_cost(
    engine: str, tmp_path: Path, anyio_backend_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    script = Script(
        turns=[
            ModelTurn.text("First answer.", usage=CALLS[0]),
            ModelTurn.text("Second answer.", usage=CALLS[1]),
            ModelTurn.text("Loaded answer.", usage=CALLS[2]),
            ModelTurn(blocks=[TextBlock(text=COUNTING)], chunk_delay=0.05, chunk_chars=6),
            ModelTurn.text("After the cancel.", usage=CALLS[0]),
        ]
    )
    script_file = tmp_path / "script.json"
    script_file.write_text(script.model_dump_json())
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    argv = server_argv(engine, "--embedded", "--script", str(script_file),
                       backend=anyio_backend_name)  # fmt: skip
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=tmp_path / "server.err")
        await client.request("initialize", CLIENT_INIT)
        new = await client.request("session/new", {"cwd": str(workspace), "mcpServers": []})
        sid = new["sessionId"]
        since = await _prompt(client, sid, "say one thing")
        assert _costs(client, since)[-1]["amount"] == pytest.approx(_price(CALLS[0]))
        since = await _prompt(client, sid, "say another")
        # The session's cost so far, not the turn's.
        assert _costs(client, since)[-1]["amount"] == pytest.approx(_price(*CALLS[:2]))
        await client.request("session/close", {"sessionId": sid})
        since = len(client.updates)
        await client.request("session/load", {"sessionId": sid, "cwd": str(workspace),
                                              "mcpServers": []})  # fmt: skip
        assert _costs(client, since)[-1]["amount"] == pytest.approx(_price(*CALLS[:2]))
        since = await _prompt(client, sid, "and once more")
        assert _costs(client, since)[-1]["amount"] == pytest.approx(_price(*CALLS))
        # A prompt cancelled while the model streams: its cost is not known, nor then the
        # session's (the figure so far would look like the whole bill).
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
        since = await _prompt(client, sid, "and now?")
        costs = _costs(client, since)
        assert costs and all(cost is None for cost in costs), costs
        assert client.process.stdin is not None
        await client.process.stdin.aclose()
        with anyio.fail_after(40):
            await client.process.wait()


async def _serve_once(argv: list[str], env: dict[str, str], stderr: Path, talk: Any) -> None:
    """One ``agentrun acp`` process: ``talk(client)``, then its input ends and it exits."""
    async with anyio.create_task_group() as tg:
        client = await open_server(tg, argv, stderr_path=stderr, env=env)
        await client.request("initialize", CLIENT_INIT)
        await talk(client)
        assert client.process.stdin is not None
        await client.process.stdin.aclose()
        with anyio.fail_after(40):
            assert await client.process.wait() == 0


#: Engines whose cost ``agentrun acp`` counts itself (no ACP agent's own behind it), and the
#: prices their cost is made of: the catalog's estimate (Codex reports no cost), Claude Code's
#: own (the library's catalog prices its offline model the same).
COUNTED: dict[str, PriceCatalog] = {
    "codex-app-server": PriceCatalog(PRICES),
    "claude": default_prices(),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", list(COUNTED))
async def test_a_session_loaded_in_a_new_process_goes_on_with_its_cost(
    engine: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """``agentrun acp --journal``: a session of an earlier process is loaded by the id that
    process issued (an ACP client keeps it) and its ``usage_update`` cost goes on from the
    earlier process's turns, read from the journal: at the load, what the first process's
    answers cost; after one more turn, what all three answers the model server served cost.
    Without ``--journal`` that id is "resource not found".

    The agent runs against a model server of the test's own and a home prepared for it (the
    embedded configuration's), which both processes share: a real agent setup, not
    ``--embedded`` (whose homes last as long as the process)."""
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    script = Script(turns=[ModelTurn.text(f"Answer {i}.", usage=c) for i, c in enumerate(CALLS)])
    async with ModelServer(script) as server:

        def served() -> float:
            """What every answer served so far costs."""
            cost = server.ledger.since(0).cost(prices=COUNTED[engine])
            assert cost is not None
            return cost

        _, options = embedded_engine(engine, server.url, tmp_path / "agent", cwd=str(workspace))
        env = {**options.env, "PYTHONPATH": str(REPO), "AGENTRUN_PRICE_CATALOG": str(prices),
               "AGENTRUN_SESSIONS_DIR": str(tmp_path / "sessions")}  # fmt: skip
        model = ["--model", options.model] if options.model else []
        argv = server_argv(engine, *model, "--journal", backend=anyio_backend_name)
        new = {"cwd": str(workspace), "mcpServers": []}
        sid = ""
        earlier = 0.0

        async def first(client: AcpClient) -> None:
            nonlocal sid, earlier
            sid = (await client.request("session/new", new))["sessionId"]
            since = await _prompt(client, sid, "say one thing")
            assert _costs(client, since)[-1]["amount"] == pytest.approx(served())
            since = await _prompt(client, sid, "say another")
            earlier = served()
            assert _costs(client, since)[-1]["amount"] == pytest.approx(earlier)

        async def without_journal(client: AcpClient) -> None:
            answer = await client.call("session/load", {"sessionId": sid, **new})
            assert answer["error"]["code"] == -32002, answer

        async def second(client: AcpClient) -> None:
            since = len(client.updates)
            await client.request("session/load", {"sessionId": sid, **new})
            # The reading the journal's turns left, with their cost.
            assert _costs(client, since) == [{"amount": pytest.approx(earlier), "currency": "USD"}]
            since = await _prompt(client, sid, "and once more")
            assert _costs(client, since)[-1]["amount"] == pytest.approx(served())
            # Deleted, it is gone with its journal: not loaded again, here or later.
            await client.request("session/delete", {"sessionId": sid})
            answer = await client.call("session/load", {"sessionId": sid, **new})
            assert answer["error"]["code"] == -32002, answer
            assert not (tmp_path / "sessions" / f"{sid}.jsonl").exists()

        await _serve_once(argv, env, tmp_path / "first.err", first)
        plain = [a for a in argv if a != "--journal"]
        await _serve_once(plain, env, tmp_path / "plain.err", without_journal)
        await _serve_once(argv, env, tmp_path / "second.err", second)
        # The agent went on with its own conversation: the last call carried the earlier ones.
        calls = server.ledger.since(0).main.entries
        assert [e.turn_index for e in calls] == [0, 1, 2]
        assert "Answer 1." in server.model_requests[-1].body.decode()
