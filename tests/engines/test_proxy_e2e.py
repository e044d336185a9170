"""The metering credential proxy in front of an engine driven through the library (no CLI):
:class:`~agentrun.offline.CredentialProxy` holds the real key, the agent gets the proxy's client
key, and the embedded model server stands in for the provider. Here the generic ``acp`` engine
(claude-agent-acp as a plain command line), which ``agentrun run --live --upstream`` cannot
start (the generic engine has no agent of its own there); the presets are covered through the
CLI in ``tests/cli/test_proxy_cli.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents_support import GENERIC_ACP_AGENT, require_engine

from agentrun import Message, run_turn
from agentrun.offline import (
    CredentialProxy,
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    ToolCallBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: The caller's "real" key: planted, to be found nowhere but on the upstream's requests.
PLANTED = "sk-ant-planted-91d3c7e0a4f2"
#: The agent's environment, printed by its own shell.
SHOW_ENV = "env"


def _script() -> Script:
    usage = ScriptUsage(input_tokens=1_204, cache_read_tokens=20_480, output_tokens=52)
    return Script(
        turns=[
            ModelTurn(blocks=[ToolCallBlock(arguments={"command": SHOW_ENV})], usage=usage),
            ModelTurn.text(
                "The shell works.",
                usage=ScriptUsage(input_tokens=96, cache_read_tokens=23_552, output_tokens=27),
            ),
        ]
    )


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes()
    ]


@pytest.mark.parametrize("name", ["acp"])
async def test_the_real_key_reaches_the_upstream_only_and_usage_is_the_proxys_ledger(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_engine(GENERIC_ACP_AGENT)
    monkeypatch.setenv("ANTHROPIC_API_KEY", PLANTED)  # the caller's environment holds it too
    messages: list[Message] = []
    async with ModelServer(_script()) as server:
        async with CredentialProxy(server.url, keys={"anthropic": PLANTED}) as proxy:
            engine, options = embedded_engine(
                name, proxy.url, tmp_path / "agent", api_key=proxy.client_key,
                options={"acp.mode": "bypassPermissions"},
            )  # fmt: skip
            async with engine.start(options) as session:
                summary = await run_turn(
                    session, "check the shell", timeout=120, on_message=messages.append
                )
            await proxy.settled()
            metered = proxy.ledger.since(0).main
    assert summary.ok, summary
    # The agent's shell ran and printed its environment, which the agent sent the model.
    shown = "".join(json.dumps(m.model_dump(mode="json")) for m in messages)
    assert "PATH=" in server.model_requests[-1].body.decode()
    # The upstream received the real key on every model call, in Anthropic's header; the
    # client key stopped at the proxy.
    assert server.model_requests
    assert all(r.headers.get("x-api-key") == PLANTED for r in server.model_requests)
    assert all("agentrun-proxy-" not in f"{r.headers} {r.query}" for r in server.requests)
    # ... and the real key is nowhere else: messages, what the agent sent, the agent's home.
    assert PLANTED not in shown
    assert all(PLANTED.encode() not in r.body for r in server.model_requests)
    assert _files_holding(tmp_path / "agent", PLANTED.encode()) == []
    # The proxy's ledger is what the upstream served, and the turn's tokens are those.
    served = server.ledger.since(0).main
    assert metered.usage == served.usage and len(metered) == len(served) == 2
    assert summary.usage is not None
    assert summary.usage.input_tokens == served.usage.input_tokens
    assert summary.usage.output_tokens == served.usage.output_tokens
    assert summary.usage.cache_read_tokens == served.usage.cache_read_tokens
