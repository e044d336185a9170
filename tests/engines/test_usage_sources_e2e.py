"""Where a turn's tokens and cost came from, on the real pinned agents, offline.

Claude Code and OpenCode report a cost; Codex (also over ACP) and Qwen Code report tokens only,
so the library estimates the cost from the price catalog (here a file in
``$AGENTRUN_PRICE_CATALOG`` that prices the offline model); an ACP agent's session cost is
differenced per turn.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents_support import live_engine, require_engine

from agentrun import TurnSummary, Usage, run_turn
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: US dollars per million tokens of the offline model, for this test only.
PRICES = {"input": 2.0, "cached_input": 0.5, "cache_write": 2.5, "output": 8.0}

EXPECTED = {
    "claude": ("reported", "reported"),
    "opencode": ("reported", "reported"),
    # OpenCode over ACP reports only the last model call's tokens: a turn of one call (no tool
    # started) has them as its own.
    "opencode-acp": ("reported", "derived"),
    "codex": ("reported", "estimated"),
    "codex-app-server": ("reported", "estimated"),
    # Codex over ACP and Qwen Code report a turn's tokens and no cost: priced from the catalog.
    "codex-acp": ("reported", "estimated"),
    "qwen": ("reported", "estimated"),
    # claude-agent-acp as a plain command: its session's running cost, differenced per turn.
    "acp": ("reported", "derived"),
}


def _priced(usage: Usage) -> float:
    return (
        (usage.input_tokens or 0) * PRICES["input"]
        + (usage.cache_read_tokens or 0) * PRICES["cached_input"]
        + (usage.cache_write_tokens or 0) * PRICES["cache_write"]
        + (usage.output_tokens or 0) * PRICES["output"]
    ) / 1_000_000


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_every_result_says_where_its_tokens_and_cost_came_from(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_engine(
        {"codex-app-server": "codex", "opencode-acp": "opencode", "acp": "claude-acp"}.get(
            name, name
        )
    )
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"fake-model": PRICES}}))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    usage = ScriptUsage(input_tokens=1_200, cache_read_tokens=30_000, output_tokens=400)
    # Agents make side calls too (titles): each gets the same answer.
    answer = ModelTurn.text("Priced.", usage=usage).model_copy(update={"repeat": 20})
    async with ModelServer(Script(turns=[answer])) as server:
        engine, options = live_engine(name, server.url, tmp_path / "agent")
        summaries: list[TurnSummary] = []
        async with engine.start(options) as session:
            summaries.append(await run_turn(session, "one", timeout=120))
            summaries.append(await run_turn(session, "two", timeout=120))
    for summary in summaries:
        got = summary.usage
        assert got is not None, summary
        assert (got.usage_source, got.cost_source) == EXPECTED[name], got
        assert got.output_tokens and got.output_tokens >= 400
        assert got.cost_usd is not None
        if got.cost_source == "estimated":
            # Exactly the turn's tokens at the catalog's prices.
            assert got.cost_usd == pytest.approx(_priced(got), rel=1e-9)
            assert got.cost_usd > 0


@pytest.mark.parametrize("name", ["gemini"])
async def test_tokens_without_their_split_are_never_priced(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemini CLI 0.61 sends a turn's tokens only as ``_meta.quota.token_count`` on the prompt
    result: the whole prompt (its cache reads not told apart) and the answer. The model has a
    price here, yet no cost is made up from figures a price cannot be applied to: the result
    says ``cost_source == "unavailable"`` and carries the figures it has, the server's."""
    require_engine(name)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"fake-model": PRICES}}))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    usage = ScriptUsage(input_tokens=1_200, cache_read_tokens=30_000, output_tokens=400)
    answer = ModelTurn.text("Unpriced.", usage=usage).model_copy(update={"repeat": 20})
    async with ModelServer(Script(turns=[answer])) as server:
        engine, options = live_engine(name, server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            for prompt in ("one", "two"):
                mark = server.ledger.mark()
                summary = await run_turn(session, prompt, timeout=120)
                served = server.ledger.since(mark).main.usage
                got = summary.usage
                assert summary.ok and got is not None, summary
                assert got.usage_source == "reported", got
                assert got.cost_source == "unavailable" and got.cost_usd is None, got
                assert got.input_tokens is None and got.cache_read_tokens is None, got
                assert got.whole_prompt_tokens == (served.input_tokens or 0) + (
                    served.cache_read_tokens or 0
                ), (got, served)
                assert got.answer_tokens == served.output_tokens, (got, served)
