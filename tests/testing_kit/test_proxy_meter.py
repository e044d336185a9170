"""A session metered by the credential proxy, from Python: ``run_turn`` returns a summary that
carries the proxy's figures (``summary.metered``), a disagreement as a ``usage_mismatch`` error,
and a call the proxy refused for its budget as the stop reason ``budget``.

Real agents (Claude Code, Codex) against the embedded model server as the upstream, each with a
client of its own (``proxy.client(...)``): its key is the agent's, and it is the session's
meter."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_support import require_engine

from agentrun import CredentialProxy, run_turn
from agentrun.offline import (
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    ToolCallBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

KEYS = {"anthropic": "sk-ant-real-meter-51b2", "openai": "sk-real-meter-7c0e"}


def _usage(fresh: int, output: int) -> ScriptUsage:
    return ScriptUsage(input_tokens=fresh, cache_read_tokens=0, cache_write_tokens=0,
                       output_tokens=output)  # fmt: skip


@pytest.mark.parametrize("engine", ["claude", "codex"])
async def test_a_metered_turn_carries_the_proxy_s_figures(engine: str, tmp_path: Path) -> None:
    require_engine(engine)
    script = Script(turns=[ModelTurn.text("Metered.", usage=_usage(812, 23))])
    async with ModelServer(script) as server, CredentialProxy(server.url, keys=KEYS) as proxy:
        client = proxy.client("only")
        agent, options = embedded_engine(
            engine, proxy.url, tmp_path / "agent", api_key=client.key, meter=client
        )
        async with agent.start(options) as session:
            summary = await run_turn(session, "say it", timeout=120)
    metered = summary.metered
    assert metered is not None and summary.ok
    served = server.ledger.since(0).main
    assert metered.usage == served.usage and metered.calls == len(served) >= 1
    assert metered.agrees and not any(e.code == "usage_mismatch" for e in summary.errors)
    assert summary.usage is not None
    assert summary.usage.output_tokens == metered.usage.output_tokens == 23 * len(served)


#: A tool that spends through the proxy behind the agent's back: with the agent's own key (in
#: its environment), a model call the agent never sees, so never reports.
BEHIND_THE_BACK = (
    'curl -s "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" '
    '-H "anthropic-version: 2023-06-01" -H "content-type: application/json" '
    '-d \'{"model": "claude-sonnet-4-5", "max_tokens": 64, '
    '"messages": [{"role": "user", "content": "hi"}]}\''
)


async def test_a_call_the_agent_does_not_report_is_a_usage_mismatch(tmp_path: Path) -> None:
    require_engine("claude")
    script = Script(
        turns=[
            ModelTurn(blocks=[ToolCallBlock(arguments={"command": BEHIND_THE_BACK})],
                      usage=_usage(500, 40)),
            ModelTurn.text("spent behind the back", usage=_usage(7_000, 900)),
            ModelTurn.text("Done.", usage=_usage(600, 20)),
        ]
    )  # fmt: skip
    async with ModelServer(script) as server, CredentialProxy(server.url, keys=KEYS) as proxy:
        client = proxy.client("claude")
        agent, options = embedded_engine(
            "claude", proxy.url, tmp_path / "agent", api_key=client.key, meter=client, hitl=False
        )
        async with agent.start(options) as session:
            summary = await run_turn(session, "run it", timeout=120)
    metered = summary.metered
    assert metered is not None
    # The curl call went through the proxy as this client's: the proxy counted three calls.
    assert metered.calls == len(server.ledger.since(0).main) == 3
    assert metered.usage.output_tokens == 40 + 900 + 20
    assert summary.usage is not None and summary.usage.output_tokens == 40 + 20
    assert not metered.agrees and metered.disagreement is not None
    assert "output_tokens 60 (proxy 960)" in metered.disagreement
    (mismatch,) = [e for e in summary.errors if e.code == "usage_mismatch"]
    assert metered.disagreement in mismatch.message


@pytest.mark.parametrize("engine", ["claude", "codex"])
async def test_a_budget_refusal_stops_the_turn_with_budget(engine: str, tmp_path: Path) -> None:
    """The agent calls the model tool call after tool call until the proxy refuses: the turn
    returns (no quota error raised) with stop reason ``budget``."""
    require_engine(engine)
    loop = ModelTurn(
        blocks=[ToolCallBlock(arguments={"command": "echo again"})],
        usage=_usage(400, 100),
        repeat=20,
    )
    async with (
        ModelServer(Script(turns=[loop])) as server,
        CredentialProxy(server.url, keys=KEYS, max_tokens=1000) as proxy,
    ):
        client = proxy.client(engine)
        agent, options = embedded_engine(
            engine, proxy.url, tmp_path / "agent", api_key=client.key, meter=client, hitl=False
        )
        async with agent.start(options) as session:
            summary = await run_turn(session, "keep going", timeout=120)
    metered = summary.metered
    assert metered is not None
    assert summary.stop_reason == "budget" and not summary.ok
    assert metered.refused >= 1 and metered.budget_spent == "1000 tokens of 1000"
    assert len(server.model_requests) == 2  # the refused calls never went upstream
