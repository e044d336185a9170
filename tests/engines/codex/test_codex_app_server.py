"""Codex app-server: translation of recorded JSON-RPC sessions (snapshots), and the engine
against the real pinned ``codex app-server``, offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import descendants, require_engine
from replay_support import replayed
from repo_paths import FIXTURES as FIXTURE_ROOT
from syrupy.assertion import SnapshotAssertion

from agentrun import (
    Message,
    MessageType,
    PermissionDecision,
    PermissionRequest,
    TurnSummary,
    TurnTimeoutError,
    Usage,
    default_prices,
    replay,
    run_turn,
)
from agentrun.engines.codex import CodexAppServerDriver, CodexAppServerTranslator
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, embedded_engine

FIXTURES = FIXTURE_ROOT / "codex-app-server"
RECORDED = sorted(FIXTURES.glob("*.jsonl"))
SAMPLES = sorted((FIXTURES / "wire-samples").glob("*.jsonl"))


# -- translation ---------------------------------------------------------------------------------


def _feed(translator: CodexAppServerTranslator, *events: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    for event in events:
        out.extend(translator.feed(event))
    return out


def _recv(method: str, **params: Any) -> dict[str, Any]:
    return {"dir": "<-", "msg": {"method": method, "params": params}}


def test_both_direction_spellings_and_a_missing_jsonrpc_field_are_accepted() -> None:
    translator = CodexAppServerTranslator()
    messages = _feed(
        translator,
        {"dir": "->", "msg": {"method": "thread/start", "id": 1, "params": {}}},
        {"dir": "recv", "msg": {"id": 1, "result": {"thread": {"id": "t1"}, "model": "m"}}},
        {"dir": "send", "msg": {"method": "turn/start", "id": 2, "params": {}}, "t": 0.1},
    )
    (init,) = messages
    assert init.type is MessageType.INIT and init.resume_id == "t1"
    assert init.init is not None and init.init.model == "m"
    bad = translator.feed({"direction": "up", "msg": {}})
    assert bad[0].type is MessageType.ERROR


def test_a_late_tail_of_an_ended_turn_is_dropped() -> None:
    translator = CodexAppServerTranslator()
    _feed(
        translator,
        {"dir": "send", "msg": {"method": "turn/start", "id": 2, "params": {}}},
        {"dir": "recv", "msg": {"id": 2, "result": {"turn": {"id": "turn-1"}}}},
    )
    ended = _feed(
        translator, _recv("turn/completed", turn={"id": "turn-1", "status": "interrupted"})
    )
    assert [m.stop_reason for m in ended] == ["cancelled"]
    late = _feed(translator, _recv("item/agentMessage/delta", turnId="turn-1", itemId="x",
                                   delta="stale"))  # fmt: skip
    assert late == []


def test_token_usage_gives_a_gauge_per_call_and_the_turns_own_usage() -> None:
    translator = CodexAppServerTranslator()
    _feed(translator, {"dir": "send", "msg": {"method": "turn/start", "id": 2, "params": {}}})
    last = {"inputTokens": 1300, "cachedInputTokens": 1200, "outputTokens": 20}
    (reading,) = _feed(
        translator,
        _recv("thread/tokenUsage/updated",
              tokenUsage={"last": last, "total": last, "modelContextWindow": 258400}),
    )  # fmt: skip
    assert reading.context is not None
    assert (reading.context.used_tokens, reading.context.size_tokens) == (1300, 258400)
    assert reading.context.size_source == "agent_effective"
    (result,) = _feed(translator, _recv("turn/completed", turn={"id": "t", "status": "completed"}))
    assert result.usage is not None and result.usage.prompt_tokens == 1300


def _usage(total: dict[str, int], last: dict[str, int], turn: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"tokenUsage": {"total": total, "last": last}}
    if turn is not None:
        params["turnId"] = turn
    return _recv("thread/tokenUsage/updated", **params)


def _start_turn(translator: CodexAppServerTranslator, request: int, turn: str) -> None:
    _feed(
        translator,
        {"dir": "send", "msg": {"method": "turn/start", "id": request, "params": {}}},
        {"dir": "recv", "msg": {"id": request, "result": {"turn": {"id": turn}}}},
        _recv("turn/started", turn={"id": turn}),
    )


def _end_turn(translator: CodexAppServerTranslator, turn: str, status: str) -> Message:
    (result,) = _feed(translator, _recv("turn/completed", turn={"id": turn, "status": status}))
    return result


def test_a_repeated_usage_notification_is_counted_once() -> None:
    """Codex repeats ``thread/tokenUsage/updated`` for the same call (around an interrupt): the
    turn's output is what the model served, 25, not 50; one gauge reading, not two."""
    translator = CodexAppServerTranslator()
    _start_turn(translator, 2, "t1")
    call = {"inputTokens": 1000, "outputTokens": 25}
    readings = _feed(translator, _usage(call, call, "t1"), _usage(call, call, "t1"))
    assert len(readings) == 1
    result = _end_turn(translator, "t1", "interrupted")
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1000, 25)


def test_a_resumed_thread_s_restored_total_is_the_baseline_not_the_first_turn_s_usage() -> None:
    """A resumed thread's first turn: Codex first sends the thread's restored total (naming
    an earlier turn), then the turn's own call. The turn used 100 input tokens, not 1,100."""
    translator = CodexAppServerTranslator()
    before = {"inputTokens": 1000, "outputTokens": 10}
    _feed(translator, {"dir": "send", "msg": {"method": "turn/start", "id": 3, "params": {}}})
    assert _feed(translator, _usage(before, before, "old-turn")) == []
    _feed(
        translator,
        _recv("turn/started", turn={"id": "t2"}),
        {"dir": "recv", "msg": {"id": 3, "result": {"turn": {"id": "t2"}}}},
    )
    call = {"inputTokens": 1100, "cachedInputTokens": 1000, "outputTokens": 5}
    total = {"inputTokens": 2100, "cachedInputTokens": 1000, "outputTokens": 15}
    (reading,) = _feed(translator, _usage(total, call, "t2"))
    assert reading.context is not None and reading.context.used_tokens == 1100
    result = _end_turn(translator, "t2", "completed")
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (100, 1000)
    assert result.usage.output_tokens == 5


def test_a_turn_after_failed_retries_reports_only_what_was_served_for_it() -> None:
    """Turn 1 served 400 + 20 tokens. Turn 2's calls all failed; Codex still reports the
    thread's usage with the last successful call's ``last``: turn 2 was served nothing. An
    interrupted turn's late usage moves the baseline without landing in the next turn."""
    translator = CodexAppServerTranslator()
    _start_turn(translator, 2, "t1")
    first = {"inputTokens": 400, "outputTokens": 20}
    _feed(translator, _usage(first, first, "t1"))
    assert _end_turn(translator, "t1", "completed").usage is not None
    _start_turn(translator, 3, "t2")
    _feed(translator, _recv("error", turnId="t2", willRetry=True,
                             error={"message": "Reconnecting... 1/5 (500)"}))  # fmt: skip
    assert _feed(translator, _usage(first, first, "t2")) == []
    failed = _end_turn(translator, "t2", "failed")
    assert failed.usage is None or failed.usage.total_tokens == 0
    _start_turn(translator, 4, "t3")
    late = {"inputTokens": 900, "outputTokens": 30}  # t1's total + 500 / 10 of an earlier call
    _feed(translator, _usage(late, {"inputTokens": 500, "outputTokens": 10}, "t2"))
    now = {"inputTokens": 1500, "outputTokens": 32}
    _feed(translator, _usage(now, {"inputTokens": 600, "outputTokens": 2}, "t3"))
    third = _end_turn(translator, "t3", "completed")
    assert third.usage is not None
    assert (third.usage.input_tokens, third.usage.output_tokens) == (600, 2)


def test_retry_notices_are_typed_and_a_failed_turn_carries_its_error() -> None:
    translator = CodexAppServerTranslator()
    _feed(translator, {"dir": "send", "msg": {"method": "turn/start", "id": 2, "params": {}}})
    (retry,) = _feed(translator, _recv("error", error={"message": "Reconnecting... 1/5 (429)"},
                                        willRetry=True))  # fmt: skip
    assert retry.type is MessageType.RETRY
    assert retry.data == {"attempt": 1, "max_attempts": 5}
    assert retry.error is not None and retry.error.status == 429
    (result,) = _feed(
        translator,
        _recv("turn/completed", turn={"id": "t", "status": "failed",
                                       "error": {"message": "high demand",
                                                 "codexErrorInfo": "internalServerError"}}),
    )  # fmt: skip
    assert result.error is not None and result.error.code == "api_error"


def test_an_error_response_to_turn_start_ends_the_turn_with_its_data() -> None:
    translator = CodexAppServerTranslator()
    _feed(translator, {"dir": "send", "msg": {"method": "turn/start", "id": 7, "params": {}}})
    error, result = _feed(
        translator,
        {"dir": "recv", "msg": {"id": 7, "error": {"code": -32600, "message": "bad",
                                                    "data": {"provider": "busy"}}}},
    )  # fmt: skip
    assert error.data == {"data": {"provider": "busy"}}
    assert result.type is MessageType.RESULT and not TurnSummary.from_messages([result]).ok


def _replay(path: Path) -> dict[str, Any]:
    return replayed(path, "codex-app-server")


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"sample-{p.stem}")
def test_wire_samples(path: Path, snapshot: SnapshotAssertion) -> None:
    assert _replay(path) == snapshot


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_fixtures(path: Path, snapshot: SnapshotAssertion) -> None:
    replayed = _replay(path)
    assert replayed == snapshot
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    summaries = [t["summary"] for t in replayed["turns"]]
    for turn, summary in zip(meta["turns"], summaries, strict=True):
        if "ok" in turn:
            assert summary["ok"] == turn["ok"], turn
        if turn.get("interrupted"):
            assert summary["stop_reason"] == "cancelled"
    if path.stem == "approval_declined":
        assert len(summaries[0]["denials"]) == 1


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_fixtures_replay_to_what_the_model_server_served(path: Path) -> None:
    """Each turn's usage, replayed, is what the model server's ledger served during that turn
    when the fixture was recorded (``turns[i].ledger`` of the meta file): every figure equal
    (Responses usage has no cache-write figure), none for a turn whose only call failed (no
    tokens served) or was abandoned by the interrupt (its usage never reached the agent)."""
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    turns = replay(path, engine="codex-app-server")
    assert len(turns) == len(meta["turns"]), path
    assert sum(t["ledger"]["calls"] for t in meta["turns"]) == meta["model_requests"]
    for outcome, turn in zip(meta["turns"], turns, strict=True):
        ledger = outcome["ledger"]
        usage = turn.summary.usage
        if not ledger["complete"] or set(ledger["statuses"]) != {200}:
            assert usage is None, (path.stem, outcome, usage)
            continue
        assert usage is not None and usage.usage_source == "reported", (path.stem, usage)
        assert usage.model_dump(include=set(ledger["usage"])) == ledger["usage"], path.stem
        # The cost, where the catalog prices the model, is the served tokens' price.
        priced = default_prices().estimate(Usage(**ledger["usage"]), meta["session"]["model"])
        assert usage.cost_usd == (None if priced is None else pytest.approx(priced)), usage


# -- the real app-server -------------------------------------------------------------------------


def _u(fresh: int, cached: int, output: int) -> ScriptUsage:
    return ScriptUsage(input_tokens=fresh, cache_read_tokens=cached, output_tokens=output)


@pytest.mark.anyio
@pytest.mark.agent
async def test_three_turns_approvals_and_an_interrupt(tmp_path: Path) -> None:
    require_engine("codex")
    before = descendants()
    slow = ModelTurn(blocks=ModelTurn.text("x " * 400).blocks, chunk_delay=0.05, chunk_chars=4)
    script = Script(
        turns=[
            ModelTurn.shell("echo allowed", usage=_u(1500, 0, 20)),
            ModelTurn.text("It ran.", usage=_u(100, 1500, 4)),
            ModelTurn.shell("echo refused", usage=_u(120, 1600, 20)),
            ModelTurn.text("It was refused.", usage=_u(100, 1750, 5)),
            slow,
            ModelTurn.text("done", usage=_u(100, 1900, 2)),
        ]
    )
    asked: list[PermissionRequest] = []

    async def handler(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        if "refused" in json.dumps(request.input):
            return PermissionDecision.deny("not this one")
        return PermissionDecision.allow_once()

    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "codex-app-server", server.url, tmp_path / "agent", cwd=str(tmp_path),
            hitl=True, permission_handler=handler,
        )  # fmt: skip
        gauges: list[Message] = []

        def see(message: Message) -> None:
            if message.type is MessageType.CONTEXT_WINDOW:
                gauges.append(message)

        async with engine.start(options) as session:
            assert isinstance(session.driver, CodexAppServerDriver)
            first = await run_turn(session, "run echo allowed", on_message=see, timeout=120)
            second = await run_turn(session, "run echo refused", on_message=see, timeout=120)
            with pytest.raises(TurnTimeoutError) as caught:
                await run_turn(session, "count slowly", timeout=2)
            with anyio.fail_after(60):
                fourth = await run_turn(session, "say done", on_message=see, timeout=120)
    assert first.ok and first.tool_calls[0].output == "allowed\n" and not first.denials
    assert second.ok and len(second.denials) == 1 and second.tool_calls[0].is_error
    assert [r.tool_name for r in asked] == ["exec_command", "exec_command"]
    interrupted = caught.value.summary
    assert interrupted is not None and interrupted.stop_reason == "cancelled"
    assert fourth.ok and fourth.text == "done" and "x x" not in fourth.text
    assert {first.resume_id, second.resume_id, fourth.resume_id} == {session.resume_id}
    sized = [g.context for g in gauges if g.context is not None and g.context.size_tokens]
    assert len(sized) >= 4 and all(c.size_source == "agent_effective" for c in sized)
    assert descendants() <= before


@pytest.mark.anyio
@pytest.mark.agent
async def test_a_resumed_thread_s_turns_report_the_tokens_the_model_served(tmp_path: Path) -> None:
    """The real app-server: a thread of one turn, then the thread resumed by a new session.
    Each turn's usage is what the script served for its call (Codex counts cached tokens
    inside its input), not the thread's total so far."""
    require_engine("codex")
    served = [_u(1000, 0, 10), _u(100, 1000, 5), _u(60, 1100, 3)]
    script = Script(
        turns=[
            ModelTurn.text("first", usage=served[0]),
            ModelTurn.text("resumed", usage=served[1]),
            ModelTurn.text("again", usage=served[2]),
        ]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine("codex-app-server", server.url, tmp_path / "agent",
                                          cwd=str(tmp_path))  # fmt: skip
        async with engine.start(options) as session:
            first = await run_turn(session, "one", timeout=120)
        resumed = options.model_copy(update={"resume_id": first.resume_id})
        async with engine.start(resumed) as session:
            second = await run_turn(session, "two", timeout=120)
            third = await run_turn(session, "three", timeout=120)
        assert len(server.model_requests) == 3
    for summary, script_usage in zip((first, second, third), served, strict=True):
        assert summary.ok and summary.usage is not None, summary
        assert summary.usage.input_tokens == script_usage.input_tokens
        assert summary.usage.cache_read_tokens == script_usage.cache_read_tokens
        assert summary.usage.output_tokens == script_usage.output_tokens
