"""A turn's ``summary.usage`` against the model server's ledger, on the real pinned agents.

The server's ledger holds the tokens each answer carried, normalized to the library's
convention (``input_tokens`` without the cache, ``output_tokens`` with the thinking). A
one-turn session makes two model calls (a shell call, then the answer); the turn's usage must
be the sum of the main (non-side) entries served during the turn: every figure the summary
reports equals the ledger's, and the input and output are reported (``None`` is "not reported":
Chat Completions and Gemini carry no cache-write figure, and not every agent breaks its output
into thinking). Where an engine reports otherwise today, the comparison is an expected failure
that names the difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentrun import EngineUnavailableError, Usage, run_turn
from agentrun._vocabulary.permissions import approve_all
from agentrun.offline import (
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
    }


#: Where the turn's usage differs from the ledger today (ledger: input 1,300 / 4,682 where the
#: API has no cache-write figure, cache read 44,032, cache write 3,382 or 0, output 79 of which
#: 12 thinking).
MISMATCHES = {
    "opencode-acp": "only the turn's last model call: input 406, cache read 23,552, output 27 "
    "(OpenCode's ACP usage is the last call's)",
    "codex-acp": "output 91: the 12 reasoning tokens added to an outputTokens that already "
    "holds them",
    "qwen": "output 91: the 12 reasoning tokens added to an outputTokens that already holds them",
    "gemini": "input 48,714 (cached input not taken out), no cache read, output 67 (thoughts "
    "not added), no thinking",
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
async def test_a_turns_usage_is_what_the_server_served(name: str, tmp_path: Path) -> None:
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
    assert [e.turn_index for e in served.main.entries] == [0, 1], served
    assert all(e.status == 200 and e.complete for e in served.entries), served
    ledger, reported = _figures(served.main.usage), _figures(summary.usage)
    assert ledger["input"] and ledger["output"]
    known = {k: v for k, v in reported.items() if v is not None}
    if {"input", "output"} - known.keys() or known != {k: ledger[k] for k in known}:
        raise UsageMismatch(f"{name}: ledger {ledger}, summary.usage {reported}")
