"""A turn's ``summary.usage`` against the model server's ledger, on the real pinned agents.

The server's ledger holds the tokens each answer carried, normalized to the library's
convention (``input_tokens`` without the cache, ``output_tokens`` with the thinking). A
one-turn session makes two model calls (a shell call, then the answer); the turn's usage must
be the sum of the main (non-side) entries served during the turn: every figure the summary
reports equals the ledger's, and the input and output are reported (``None`` is "not reported":
Chat Completions and Gemini carry no cache-write figure, and not every agent breaks its output
into thinking). OpenCode over ACP reports only the turn's last model call's tokens beside the
turn's cost: the usage holds the cost alone, ``last_call_usage`` the last main entry's figures. Gemini CLI reports the turn's whole prompt
without its cache split and its output without the thoughts: ``whole_prompt_tokens`` and
``answer_tokens`` hold them (the ledger's prompt and its output less the thinking), every field of
the split ``None``, nothing priced. With a price for the scripted model, an estimated cost is the
ledger's usage priced, whatever name the agent gives the model.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from agents_support import live_engine

from agentrun import EngineUnavailableError, PriceCatalog, Usage, run_turn
from agentrun._vocabulary.permissions import approve_all
from agentrun.offline import (
    LedgerSlice,
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: The two calls of the turn; every figure distinct.
CALLS = (
    ScriptUsage(input_tokens=1_204, cache_read_tokens=20_480, cache_write_tokens=3_072,
                output_tokens=52, reasoning_tokens=12),
    ScriptUsage(input_tokens=96, cache_read_tokens=23_552, cache_write_tokens=310,
                output_tokens=27),
)  # fmt: skip

#: The session options each engine needs for one shell call (the ACP modes ask first).
ASKS = {"hitl": True, "permission_handler": approve_all}
ENGINES: dict[str, dict[str, Any]] = {
    "claude": {},
    "codex": {},
    "codex-app-server": {},
    "opencode": {},
    "opencode-acp": ASKS,
    "claude-acp": ASKS,
    "codex-acp": ASKS,
    "qwen": ASKS,
    "gemini": ASKS,
    "acp": ASKS,
}


class UsageMismatch(AssertionError):
    """The turn's usage is not the ledger's (the only failure an expected failure may be)."""


def _figures(usage: Usage | None) -> dict[str, int | None]:
    assert usage is not None
    return {
        "input": usage.input_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_write": usage.cache_write_tokens,
        "output": usage.output_tokens,
        "thinking": usage.thinking_tokens,
        "whole_prompt": usage.whole_prompt_tokens,
        "answer": usage.answer_tokens,
    }


def _ledger_figures(usage: Usage) -> dict[str, int | None]:
    """The ledger's figures, with the unsplit ones an agent may report instead."""
    output, thinking = usage.output_tokens or 0, usage.thinking_tokens or 0
    return {**_figures(usage), "whole_prompt": usage.prompt_tokens, "answer": output - thinking}


#: Where the turn's usage differs from the ledger today.
MISMATCHES: dict[str, str] = {}

#: A price for the scripted model (US dollars per million tokens).
PRICES = {
    "models": {
        "fake-model": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}
    }
}

PARAMS = [
    pytest.param(
        name,
        id=name,
        marks=[pytest.mark.xfail(raises=UsageMismatch, strict=True, reason=MISMATCHES[name])]
        if name in MISMATCHES
        else [],
    )
    for name in ENGINES
]


@pytest.mark.parametrize("name", PARAMS)
async def test_a_turns_usage_is_what_the_server_served(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    script = Script(
        turns=[
            ModelTurn(
                blocks=[
                    ThinkingBlock(text="A shell call will tell."),
                    TextBlock(text="Checking."),
                    ToolCallBlock(arguments={"command": "echo ledger"}),
                ],
                usage=CALLS[0],
            ),
            ModelTurn.text("It printed ledger.", usage=CALLS[1]),
        ]
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with ModelServer(script) as server:
        try:
            engine, options = live_engine(
                name, server.url, tmp_path / "agent", cwd=str(workspace), **ENGINES[name]
            )
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        async with engine.start(options) as session:
            mark = server.ledger.mark()
            summary = await run_turn(session, "run echo ledger", timeout=120)
            served = server.ledger.since(mark)
    assert summary.ok, summary
    assert [e.turn_index for e in served.main.entries] == [0, 1], served
    assert all(e.status == 200 and e.complete for e in served.entries), served
    assert summary.usage is not None
    source = summary.usage.usage_source
    main = served.main.usage
    if summary.last_call_usage is not None:
        # The agent reported only the last call's tokens (checked in
        # test_a_tool_turns_usage_is_the_turns_and_the_last_call_is_kept_apart): the turn's
        # usage holds its cost alone; those figures are the ledger's last entry.
        assert source == "unavailable" and summary.usage.cost_source != "estimated"
        main = served.main.entries[-1].usage
        reported_usage = summary.last_call_usage
    elif source == "unavailable":
        # Every agent here sends the turn's tokens in some form: reading none is the library's
        # failure, not the agent's.
        raise UsageMismatch(f"{name}: no token figure read, {summary.usage}")
    else:
        reported_usage = summary.usage
    ledger, reported = _ledger_figures(main), _figures(reported_usage)
    assert ledger["input"] and ledger["output"]
    if reported["whole_prompt"] is not None or reported["answer"] is not None:
        # Figures reported without their split (Gemini CLI): the split is not reported, the
        # figures are the ledger's, and nothing is priced from them.
        split = ("input", "cache_read", "cache_write", "output", "thinking")
        if any(reported[k] is not None for k in split) or None in (
            reported["whole_prompt"],
            reported["answer"],
        ):
            raise UsageMismatch(f"{name}: mixed split and unsplit figures {summary.usage}")
        if (reported["whole_prompt"], reported["answer"]) != (
            ledger["whole_prompt"],
            ledger["answer"],
        ):
            raise UsageMismatch(f"{name}: ledger {ledger}, summary.usage {reported}")
        assert summary.usage.cost_source == "unavailable", summary.usage
        return
    if source == "reported":
        # The model has a price: the turn's cost is reported or estimated, never unknown.
        assert summary.usage.cost_source != "unavailable", summary.usage
    if summary.usage.cost_source == "estimated":
        expected = PriceCatalog(PRICES).estimate(main, "fake-model")
        assert summary.usage.cost_usd == pytest.approx(expected), (summary.usage, main)
    side = summary.side_usage
    if side is not None:
        # The side calls' own figure: the ledger's side requests, tokens and cost. A side call
        # the agent made alongside the turn may end after the agent reported the turn (a title
        # generated while the turn ran): the agent reports the side calls that ended in time,
        # exactly some of those served, never more.
        assert served.by_side_request(), (name, side)
        entries = served.side.entries
        subsets = [
            LedgerSlice(entries=chosen)
            for k in range(1, len(entries) + 1)
            for chosen in itertools.combinations(entries, k)
        ]
        reported_side = (side.input_tokens or 0, side.output_tokens or 0)
        matching = [
            p for p in subsets if reported_side == (p.usage.input_tokens, p.usage.output_tokens)
        ]
        assert matching, (side, entries)
        assert side.cost_usd == pytest.approx(matching[-1].cost()), (side, matching[-1])
    if name in ("claude-acp", "acp"):
        # The session's running cost counts the side calls too; the turn's cost is its own.
        assert side is not None
        assert summary.usage.cost_usd == pytest.approx(served.main.cost()), summary.usage
    known = {k: v for k, v in reported.items() if v is not None}
    if {"input", "output"} - known.keys() or known != {k: ledger[k] for k in known}:
        raise UsageMismatch(f"{name}: ledger {ledger}, summary.usage {reported}")


#: Engines whose agent reports only the last model call of a turn (OpenCode over ACP).
LAST_CALL_ENGINES = ("opencode-acp",)


@pytest.mark.parametrize("name", LAST_CALL_ENGINES)
async def test_a_one_call_turns_tokens_are_the_turns_own(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn of one model call (no tool call): the last call the agent reports is the turn's
    only one, so its tokens are the turn's (``reported``), of the scope of the turn's cost;
    every figure the ledger's."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    script = Script(
        turns=[
            ModelTurn(
                blocks=[ThinkingBlock(text="A greeting."), TextBlock(text="Hello.")],
                usage=CALLS[0],
            )
        ]
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with ModelServer(script) as server:
        try:
            engine, options = embedded_engine(
                name, server.url, tmp_path / "agent", cwd=str(workspace), **ENGINES[name]
            )
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        async with engine.start(options) as session:
            mark = server.ledger.mark()
            summary = await run_turn(session, "say hello", timeout=120)
            served = server.ledger.since(mark)
    assert summary.ok, summary
    assert len(served.main.entries) == 1, served
    assert summary.usage is not None
    assert summary.usage.usage_source == "reported", summary.usage
    ledger, reported = _figures(served.main.usage), _figures(summary.usage)
    known = {k: v for k, v in reported.items() if v is not None}
    assert {"input", "output"} <= known.keys(), reported
    assert known == {k: ledger[k] for k in known}, (ledger, reported)
    assert summary.usage.cost_source in ("derived", "estimated"), summary.usage


#: What the offline OpenCode configuration charges for the scripted model (its own prices, per
#: million tokens: ``agentrun/engines/opencode/_offline.py``), as a catalog.
OPENCODE_PRICES = PriceCatalog(
    {"models": {"fake-model": {"input": 1.0, "cached_input": 0.1, "output": 2.0}}}
)


@pytest.mark.parametrize("name", LAST_CALL_ENGINES)
async def test_a_tool_turns_usage_is_the_turns_and_the_last_call_is_kept_apart(
    name: str, tmp_path: Path
) -> None:
    """A turn of two model calls: the agent reports the last call's tokens and the whole
    turn's cost. The turn's usage holds one scope, the turn's: the cost (the session's running
    cost differenced: both calls, at the agent's own prices), no token figure
    (``unavailable``); the last call's figures are ``data["last_call_usage"]``, the ledger's
    last entry, never priced."""
    script = Script(
        turns=[
            ModelTurn(
                blocks=[TextBlock(text="Checking."),
                        ToolCallBlock(arguments={"command": "echo ledger"})],
                usage=CALLS[0],
            ),
            ModelTurn.text("It printed ledger.", usage=CALLS[1]),
        ]
    )  # fmt: skip
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with ModelServer(script) as server:
        try:
            engine, options = embedded_engine(
                name, server.url, tmp_path / "agent", cwd=str(workspace), **ENGINES[name]
            )
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        async with engine.start(options) as session:
            mark = server.ledger.mark()
            summary = await run_turn(session, "run echo ledger", timeout=120)
            served = server.ledger.since(mark)
    assert summary.ok, summary
    assert len(served.main.entries) == 2, served
    usage = summary.usage
    assert usage is not None
    assert usage.usage_source == "unavailable", usage
    assert all(v is None for v in _figures(usage).values()), usage
    assert usage.cost_source == "derived", usage
    assert usage.cost_usd == pytest.approx(
        OPENCODE_PRICES.estimate(served.main.usage, "fake-model")
    )
    last = summary.last_call_usage
    assert last is not None
    assert last.usage_source == "last_call" and last.cost_usd is None, last
    known = {k: v for k, v in _figures(last).items() if v is not None}
    assert {"input", "output"} <= known.keys(), last
    assert known == {k: _figures(served.main.entries[-1].usage)[k] for k in known}
