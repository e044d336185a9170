"""Usage accounting through a whole session on the real pinned agents: every figure held
against what the model server served.

One session per engine covers the scenarios an orchestrator's bill meets: a turn with a tool
call (two model calls), a turn whose first model call fails with HTTP 500 (retried where the
agent retries), a turn cancelled while the model streams; then, in a new process, the session
resumed, compacted where the agent can compact, and one more turn. Each turn's ``usage`` must
be what the server's ledger holds for the calls answered during that turn (the convention of
docs/vocabulary.md: every figure the summary reports equals the ledger's, input and output
reported), or say honestly that it is not known: ``usage_source`` ``unavailable`` (no token
figure; the turn's cost may stand, and where the agent reported only the last call's tokens
they are apart, in ``last_call_usage``, the ledger's last entry), or no usage at all for a
cancelled turn the agent reported nothing for. Figures reported without their split (Gemini CLI's whole prompt and output
without thoughts) equal the ledger's whole prompt and its output less the thinking. A cancelled turn's figures never exceed what was served. An estimated cost
is the catalog's price of the ledger's tokens. The session's ``usage`` is the sum of its turns'
usage, its ``unaccounted_turns`` the turns not known in full.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import GEMINI_RESUME_ON_ASYNCIO

from agentrun import (
    EngineUnavailableError,
    PriceCatalog,
    Session,
    TurnError,
    TurnSummary,
    Usage,
    run_turn,
)
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

ASKS: dict[str, Any] = {"hitl": True, "permission_handler": approve_all}
#: Each engine's session options: the ACP modes ask before a shell call; the offline
#: configurations retry never, so the retry scenario allows one retry where the agent can be
#: told (OpenCode retries by itself).
CLAUDE_RETRY = {"env": {"CLAUDE_CODE_MAX_RETRIES": "1"}}
CODEX_RETRY = {"options": {"codex.config.model_providers.fake.stream_max_retries": "1"}}
ENGINES: dict[str, dict[str, Any]] = {
    "claude": CLAUDE_RETRY,
    "codex": CODEX_RETRY,
    "codex-app-server": CODEX_RETRY,
    "opencode": {},
    "opencode-acp": ASKS,
    "claude-acp": {**ASKS, **CLAUDE_RETRY},
    "codex-acp": ASKS,
    "qwen": ASKS,
    "gemini": ASKS,
}

#: Where an engine's accounting differs from the ledger today.
MISMATCHES: dict[str, str] = {}
#: Engines whose resume in a new process is not part of the scenario, and why.
NO_RESUME: dict[str, str] = {}

#: A price for the scripted model (US dollars per million tokens).
PRICES = {
    "models": {
        "fake-model": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}
    }
}


def _u(fresh: int, read: int, write: int, output: int, thinking: int = 0) -> ScriptUsage:
    return ScriptUsage(input_tokens=fresh, cache_read_tokens=read, cache_write_tokens=write,
                       output_tokens=output, reasoning_tokens=thinking)  # fmt: skip


#: Where each scenario's answers begin in the script.
TOOL, RETRY, CANCEL, RESUMED, COMPACT, AFTER = 0, 2, 4, 5, 6, 7
SLOW = " ".join(["slowly"] * 60)


def _script() -> Script:
    return Script(
        turns=[
            ModelTurn(
                blocks=[
                    ThinkingBlock(text="A shell call will tell."),
                    TextBlock(text="Checking."),
                    ToolCallBlock(arguments={"command": "echo accounted"}),
                ],
                usage=_u(1_204, 20_480, 3_072, 52, 12),
            ),
            ModelTurn.text("It printed accounted.", usage=_u(96, 23_552, 310, 27)),
            ModelTurn.error(500, "scripted upstream failure"),
            ModelTurn.text("After the retry.", usage=_u(411, 23_900, 77, 9)),
            ModelTurn(blocks=[TextBlock(text=SLOW)], chunk_delay=0.2, chunk_chars=6,
                      usage=_u(333, 24_100, 64, 300)),
            ModelTurn.text("Resumed.", usage=_u(2_500, 24_500, 128, 6)),
            # The summary a compaction asks for (in the shape Claude Code asks for).
            ModelTurn.text("<analysis>Short.</analysis>\n<summary>The user ran echo.</summary>",
                           usage=_u(30_000, 0, 0, 20)),
            ModelTurn.text("After compaction.", usage=_u(1_500, 0, 800, 5)),
        ],
    )  # fmt: skip


class UsageMismatch(AssertionError):
    """A figure differs from the ledger (the only failure an expected failure may be)."""


@dataclass
class Turned:
    """One turn of the scenario: what the summary says, what the server served meanwhile."""

    scenario: str
    summary: TurnSummary
    served: LedgerSlice


def _figures(usage: Usage) -> dict[str, int | None]:
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
    """The ledger's figures, with the unsplit ones an agent may report instead (the whole
    prompt, the output less the thinking)."""
    output, thinking = usage.output_tokens or 0, usage.thinking_tokens or 0
    return {**_figures(usage), "whole_prompt": usage.prompt_tokens, "answer": output - thinking}


#: The convention's split of the figures (``whole_prompt`` and ``answer`` are outside it).
SPLIT = ("input", "cache_read", "cache_write", "output", "thinking")


def _embedded(
    name: str, server: ModelServer, tmp_path: Path, resume_id: str | None = None
) -> tuple[Any, Any]:
    """The engine and options, the scenario's environment and engine options merged over the
    offline configuration's."""
    extra = dict(ENGINES[name])
    update = {key: extra.pop(key) for key in ("env", "options") if key in extra}
    engine, options = embedded_engine(
        name,
        server.url,
        tmp_path / "agent",
        cwd=str(tmp_path / "workspace"),
        resume_id=resume_id,
        **extra,
    )
    merged = {key: {**getattr(options, key), **value} for key, value in update.items()}
    return engine, options.model_copy(update=merged)


def _serve_from(server: ModelServer, index: int) -> None:
    """The next model call gets the scripted turn ``index`` (whatever the last turn left)."""
    server._next = index  # pyright: ignore[reportPrivateUsage]


async def _settled(server: ModelServer) -> None:
    """Wait (bounded) until every model call received has its ledger entry: a call the agent
    abandoned is entered once the server notices."""
    with anyio.move_on_after(10):
        while {r.seq for r in server.model_requests} - {e.seq for e in server.ledger.entries}:
            await anyio.sleep(0.05)


async def _turn(session: Session, server: ModelServer, scenario: str, prompt: str) -> Turned:
    mark = server.ledger.mark()
    summary: TurnSummary | None
    try:
        summary = await run_turn(session, prompt, timeout=120)
    except TurnError as exc:  # a failed turn's summary is accounted all the same
        summary = exc.summary
    assert summary is not None, scenario
    await _settled(server)
    return Turned(scenario, summary, server.ledger.since(mark))


async def _cancelled(session: Session, server: ModelServer) -> Turned:
    mark = server.ledger.mark()
    before = len(server.model_requests)
    async with session.turn("tell me slowly", timeout=120) as turn:
        async with anyio.create_task_group() as tg:

            async def cancel_mid_stream() -> None:
                while len(server.model_requests) == before:
                    await anyio.sleep(0.05)
                await anyio.sleep(1.0)
                turn.cancel()

            tg.start_soon(cancel_mid_stream)
            async for _ in turn:
                pass
            tg.cancel_scope.cancel()
    await _settled(server)
    return Turned("cancelled", turn.summary, server.ledger.since(mark))


def _check_turn(name: str, turned: Turned, problems: list[str]) -> None:
    summary, served = turned.summary, turned.served
    where = f"{name} {turned.scenario} turn {summary.turn}"
    usage = summary.usage
    main = served.main.usage
    if summary.last_call_usage is not None:
        # The agent reported the last call's tokens beside the turn's cost: kept apart, they
        # are the ledger's last entry (of what was served, for a cancelled turn).
        last = served.main.entries[-1].usage if served.main.entries else main
        ledger, reported = _ledger_figures(last), _figures(summary.last_call_usage)
        known = {k: v for k, v in reported.items() if v is not None}
        if summary.stop_reason == "cancelled":
            if any(v > (ledger[k] or 0) for k, v in known.items()):
                problems.append(f"{where}: ledger {ledger}, cancelled last call {reported}")
        elif known != {k: ledger[k] for k in known}:
            problems.append(f"{where}: ledger's last call {ledger}, last_call_usage {reported}")
    if usage is None or usage.usage_source == "unavailable":
        # Not known, honestly: no token figure, nothing priced from tokens (a cost the agent
        # reported for the turn may stand: its running cost differenced).
        if usage is not None:
            if any(v is not None for v in _figures(usage).values()):
                problems.append(f"{where}: unavailable usage with figures {usage}")
            if usage.cost_usd is not None and usage.cost_source not in ("derived", "reported"):
                problems.append(f"{where}: unavailable usage priced {usage}")
        elif summary.stop_reason != "cancelled" and any(_figures(main).values()):
            # A turn the agent said nothing about: only right when nothing was served (a
            # failed call); a cancelled turn's call may never have reached its usage.
            problems.append(f"{where}: no usage for the tokens served {main}")
        return
    ledger, reported = _ledger_figures(main), _figures(usage)
    known = {k: v for k, v in reported.items() if v is not None}
    if summary.stop_reason == "cancelled":
        # Whatever the agent reported of a cancelled turn was served.
        if any(v > (ledger[k] or 0) for k, v in known.items()):
            problems.append(f"{where}: ledger {ledger}, cancelled turn's usage {reported}")
        return
    if {"whole_prompt", "answer"} & known.keys():
        # Reported without the split (Gemini CLI): both figures the ledger's, no split, no price.
        if {"whole_prompt", "answer"} - known.keys() or known.keys() & set(SPLIT):
            problems.append(f"{where}: split and unsplit figures mixed {reported}")
        elif known != {k: ledger[k] for k in known}:
            problems.append(f"{where}: ledger {ledger}, summary.usage {reported}")
        if usage.cost_usd is not None:
            problems.append(f"{where}: unsplit figures priced {usage}")
        return
    if {"input", "output"} - known.keys() or known != {k: ledger[k] for k in known}:
        problems.append(f"{where}: ledger {ledger}, summary.usage {reported}")
    if usage.cost_source == "estimated":
        expected = PriceCatalog(PRICES).estimate(main, "fake-model")
        if usage.cost_usd != pytest.approx(expected):
            problems.append(f"{where}: cost {usage.cost_usd}, the ledger's priced {expected}")


def _check_session(name: str, session: Session, turns: list[Turned], problems: list[str]) -> None:
    """The session's usage is the sum of its turns'; its unaccounted turns are those not known
    in full."""
    total: Usage | None = None
    unaccounted: list[int] = []
    for turned in turns:
        usage = turned.summary.usage
        if usage is not None:
            total = usage if total is None else total + usage
        if (
            usage is None
            or (usage.input_tokens is None and usage.output_tokens is None)
            or usage.usage_source in ("unavailable", "last_call")
        ):
            assert turned.summary.turn is not None
            unaccounted.append(turned.summary.turn)
    got = session.usage
    assert (got is None) == (total is None), (name, got, total)
    if got is not None and total is not None:
        assert _figures(got) == _figures(total), (name, got, total)
        assert got.cost_usd == pytest.approx(total.cost_usd), (name, got, total)
        assert (got.usage_source, got.cost_source) == (total.usage_source, total.cost_source)
    assert session.unaccounted_turns == tuple(unaccounted), (name, session.unaccounted_turns)
    settled = [t for t in turns if t.summary.stop_reason != "cancelled"]
    if got is not None and settled and not unaccounted:
        # Every turn known in full: the session's tokens are what the server served it (a
        # cancelled turn's are what the agent had of its abandoned call, checked apart).
        served = sum((t.served.main.usage for t in settled), Usage())
        got = sum((t.summary.usage for t in settled if t.summary.usage), Usage())
        known = {k: v for k, v in _figures(got).items() if v is not None}
        if known != {k: _figures(served)[k] for k in known}:
            problems.append(f"{name}: session usage {_figures(got)}, served {_figures(served)}")


async def _resumed(
    name: str,
    server: ModelServer,
    tmp_path: Path,
    resume_id: str,
    turns: list[Turned],
    problems: list[str],
) -> None:
    """The session resumed in a new process: one turn, then a compaction and one more turn
    where the agent can compact."""
    _serve_from(server, RESUMED)
    engine, options = _embedded(name, server, tmp_path, resume_id)
    async with engine.start(options) as session:
        turns.append(await _turn(session, server, "resumed", "what did you run?"))
        if session.can_compact:
            _serve_from(server, COMPACT)
            mark = server.ledger.mark()
            compacted = await session.compact(timeout=120)
            await _settled(server)
            turns.append(Turned("compaction", compacted, server.ledger.since(mark)))
            _serve_from(server, AFTER)
            turns.append(await _turn(session, server, "after compaction", "and now?"))
        _check_session(name, session, turns, problems)
    assert turns[0].summary.ok, turns[0].summary


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
@GEMINI_RESUME_ON_ASYNCIO
async def test_a_sessions_usage_is_what_the_server_served(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    problems: list[str] = []
    async with ModelServer(_script()) as server:
        try:
            engine, options = _embedded(name, server, tmp_path)
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        first: list[Turned] = []
        async with engine.start(options) as session:
            session.cancel_grace = 8.0
            first.append(await _turn(session, server, "tool", "run echo accounted"))
            _serve_from(server, RETRY)
            first.append(await _turn(session, server, "retry", "and again"))
            _serve_from(server, CANCEL)
            first.append(await _cancelled(session, server))
            ids = [t.summary.resume_id for t in first if t.summary.resume_id]
            resume_id = ids[-1] if ids else session.resume_id
            _check_session(name, session, first, problems)
        assert first[0].summary.ok, first[0].summary
        assert [e.turn_index for e in first[0].served.main.entries] == [0, 1], first[0].served
        assert resume_id is not None, name
        second: list[Turned] = []
        if name not in NO_RESUME:
            await _resumed(name, server, tmp_path, resume_id, second, problems)
    for turned in (*first, *second):
        _check_turn(name, turned, problems)
    if problems:
        seen = [
            f"{t.scenario}: {t.summary.stop_reason} {t.summary.usage}" for t in (*first, *second)
        ]
        raise UsageMismatch("\n".join([*problems, "turns:", *seen]))
