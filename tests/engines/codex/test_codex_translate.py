"""Codex exec without the agent: argv building, translation, running totals, rollout files,
and snapshots of every recorded stream (with its rollout beside it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from replay_support import replayed
from repo_paths import FIXTURES as FIXTURE_ROOT
from syrupy.assertion import SnapshotAssertion

from agentrun import MessageType, SessionOptions, TurnSummary
from agentrun._bases.cumulative import RunningTotals
from agentrun.engines._replay import replay_turns
from agentrun.engines.codex import (
    CodexExecTranslator,
    build_exec_argv,
    codex_usage,
    find_rollout,
    read_rollout,
)
from agentrun.engines.codex._argv import PROMPT_ARG_LIMIT
from agentrun.engines.codex._rollout import read_rollout_turns

FIXTURES = FIXTURE_ROOT / "codex"


def _transcripts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.jsonl") if not p.name.endswith(".rollout.jsonl"))


RECORDED = _transcripts(FIXTURES)
SAMPLES = _transcripts(FIXTURES / "wire-samples")
BIN = "/opt/codex"


# -- argv ---------------------------------------------------------------------------------------


def test_first_turn_and_resumed_turns_keep_the_prompt_after_the_separator() -> None:
    first = build_exec_argv(BIN, SessionOptions(), "-rf everything", thread_id=None)
    assert first.argv == (BIN, "exec", "--json", "--", "-rf everything")
    assert first.stdin is None
    later = build_exec_argv(BIN, SessionOptions(), "next", thread_id="t-1")
    assert later.argv == (BIN, "exec", "resume", "--json", "--", "t-1", "next")


def test_options_map_to_flags_and_config_overrides() -> None:
    options = SessionOptions(
        model="gpt-5.5",
        effort="max",
        hitl=False,
        add_dirs=("/data",),
        options={
            "codex.profile": "ci",
            "codex.ephemeral": "true",
            "codex.skip_git_repo_check": "yes",
            "codex.config.model_context_window": "100000",
        },
        extra_args=("--strict-config",),
    )
    argv = build_exec_argv(BIN, options, "go", thread_id=None).argv
    assert argv[:3] == (BIN, "exec", "--json")
    assert argv[3:5] == ("-m", "gpt-5.5")
    configs = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert configs == [
        'approval_policy="never"',
        'sandbox_mode="danger-full-access"',
        'model_reasoning_effort="xhigh"',
        'sandbox_workspace_write.writable_roots=["/data"]',
        "model_context_window=100000",
    ]
    assert argv[argv.index("-p") + 1] == "ci"
    assert argv[argv.index("--add-dir") + 1] == "/data"
    assert "--ephemeral" in argv and "--skip-git-repo-check" in argv
    assert argv[-3:] == ("--strict-config", "--", "go")
    # resume takes no --profile / --add-dir: the -c overrides carry the settings.
    resumed = build_exec_argv(BIN, options, "go", thread_id="t").argv
    assert "-p" not in resumed and "--add-dir" not in resumed
    assert resumed.count("-c") == 5


def test_hitl_true_is_read_only_and_said_unsupported() -> None:
    args = build_exec_argv(BIN, SessionOptions(hitl=True, max_turns=3), "x", thread_id=None)
    assert 'sandbox_mode="read-only"' in args.argv
    assert [name for name, _ in args.unsupported] == ["max_turns", "hitl"]
    plan = build_exec_argv(BIN, SessionOptions(mode="plan"), "x", thread_id=None)
    assert 'sandbox_mode="read-only"' in plan.argv and plan.unsupported == ()


def test_resume_fork_and_continue_last() -> None:
    resume = build_exec_argv(BIN, SessionOptions(resume_id="abc"), "p", thread_id=None).argv
    assert resume[1:3] == ("exec", "resume") and resume[-2:] == ("abc", "p")
    fork = build_exec_argv(BIN, SessionOptions(resume_id="abc", fork=True), "p", thread_id=None)
    assert fork.argv[1:3] == ("exec", "fork")
    # After the fork the captured (new) thread is resumed.
    after = build_exec_argv(BIN, SessionOptions(resume_id="abc", fork=True), "p", thread_id="new")
    assert after.argv[1:3] == ("exec", "resume") and after.argv[-2:] == ("new", "p")
    last = build_exec_argv(BIN, SessionOptions(continue_last=True), "p", thread_id=None).argv
    assert last[1:4] == ("exec", "resume", "--last")


@pytest.mark.parametrize("prompt", ["-", "x" * (PROMPT_ARG_LIMIT + 1)])
def test_a_dash_or_huge_prompt_goes_through_stdin(prompt: str) -> None:
    args = build_exec_argv(BIN, SessionOptions(), prompt, thread_id=None)
    assert args.argv[-2:] == ("--", "-")
    assert args.stdin == prompt.encode()


# -- translation --------------------------------------------------------------------------------


def _feed(translator: CodexExecTranslator, *events: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for event in events:
        out.extend(translator.feed(event))
    return out


STARTED = {"type": "thread.started", "thread_id": "thr-1"}
TOTALS = {
    "input_tokens": 1200,
    "cached_input_tokens": 1000,
    "cache_write_input_tokens": 0,
    "output_tokens": 12,
    "reasoning_output_tokens": 2,
}


def test_usage_follows_the_library_convention() -> None:
    usage = codex_usage(TOTALS)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (200, 1000, 12)
    assert usage.thinking_tokens == 2 and usage.prompt_tokens == 1200
    # Nonsense never goes negative.
    assert codex_usage({"input_tokens": 5, "cached_input_tokens": 9}).input_tokens == 0


def test_the_duplicated_web_search_id_pairs_use_and_result() -> None:
    line = (
        '{"type":"item.completed","item":{"id":"item_0","type":"web_search",'
        '"id":"ws_1","query":"q","action":{"type":"search","query":"q"}}}'
    )
    event = json.loads(line)  # the decoder keeps the last "id"
    translator = CodexExecTranslator()
    use, result = _feed(translator, STARTED, event)[1:]
    assert use.type is MessageType.TOOL_USE and result.type is MessageType.TOOL_RESULT
    assert (
        use.tool.id == result.tool.id == "t1.ws_1"
    )  # the process number, then the id the lines carry
    assert use.tool.name == "web_search" and use.tool.kind == "search"


def test_retry_notices_are_not_errors_and_a_failed_turn_reports_its_error_once() -> None:
    translator = CodexExecTranslator()
    retry = _feed(translator, STARTED, {"type": "error", "message": "Reconnecting... 2/5 (503)"})
    notice = retry[-1]
    assert notice.type is MessageType.RETRY
    assert notice.data == {"attempt": 2, "max_attempts": 5}
    assert notice.error is not None and notice.error.status == 503
    message = "Reconnecting... 1/1 (unexpected status 503 Service Unavailable: transient, url: x)"
    (again,) = _feed(translator, {"type": "error", "message": message})
    assert again.error is not None and again.error.status == 503
    failed = _feed(
        translator,
        {"type": "error", "message": "boom"},
        {"type": "turn.failed", "error": {"message": "boom"}},
    )
    assert [m.type for m in failed] == [MessageType.ERROR]
    summary = TurnSummary.from_messages([*retry, *failed, *translator.finish()])
    assert not summary.ok and summary.stop_reason == "error"
    assert [e.message for e in summary.errors] == ["boom"]


def test_an_error_line_without_turn_failed_is_not_fatal() -> None:
    translator = CodexExecTranslator(totals=RunningTotals({}))
    messages = _feed(
        translator,
        STARTED,
        {"type": "error", "message": "something odd"},
        {"type": "item.completed", "item": {"id": "i1", "type": "agent_message", "text": "ok"}},
        {"type": "turn.completed", "usage": TOTALS},
    )
    summary = TurnSummary.from_messages([*messages, *translator.finish()])
    assert summary.ok and summary.text == "ok"
    assert [(e.message, e.fatal) for e in summary.errors] == [("something odd", False)]


def test_a_stream_without_an_outcome_has_no_result() -> None:
    translator = CodexExecTranslator()
    messages = _feed(translator, STARTED, {"type": "turn.started"})
    messages += translator.finish()
    assert not any(m.type is MessageType.RESULT for m in messages)


def test_a_failed_command_is_an_error_result() -> None:
    translator = CodexExecTranslator()
    item = {
        "id": "item_1",
        "type": "command_execution",
        "command": "bash -lc 'exit 3'",
        "aggregated_output": "broken\n",
        "exit_code": 3,
        "status": "failed",
    }
    started = _feed(
        translator,
        STARTED,
        {"type": "item.started", "item": {**item, "exit_code": None, "status": "in_progress"}},
    )
    completed = _feed(translator, {"type": "item.completed", "item": item})
    assert [m.type for m in started[1:]] == [MessageType.TOOL_USE]
    (result,) = completed
    assert result.tool.is_error and result.tool.output == "broken\n"
    assert result.data == {"exit_code": 3}


def test_running_totals_give_each_turn_its_own_usage() -> None:
    totals = RunningTotals({})  # a fresh thread starts from zero
    first = CodexExecTranslator(totals=totals)
    _feed(first, STARTED, {"type": "turn.completed", "usage": TOTALS})
    (result,) = [m for m in first.finish() if m.type is MessageType.RESULT]
    assert result.usage.input_tokens == 200 and result.data is None  # no scope: its own
    second = CodexExecTranslator(totals=totals)
    bigger = {**TOTALS, "input_tokens": 2300, "cached_input_tokens": 2100, "output_tokens": 20}
    _feed(second, STARTED, {"type": "turn.completed", "usage": bigger})
    (result,) = [m for m in second.finish() if m.type is MessageType.RESULT]
    assert (result.usage.input_tokens, result.usage.cache_read_tokens) == (0, 1100)
    assert result.usage.output_tokens == 8


def test_an_unknown_prior_total_is_said_cumulative() -> None:
    translator = CodexExecTranslator()  # resumed by a new process: no prior total, no rollout
    _feed(translator, STARTED, {"type": "turn.completed", "usage": TOTALS})
    (result,) = [m for m in translator.finish() if m.type is MessageType.RESULT]
    assert result.data["usage_scope"] == "thread_cumulative"


def test_totals_that_go_back_never_make_negative_usage() -> None:
    totals = RunningTotals({"input_tokens": 5000, "output_tokens": 90})
    figures, scope = totals.advance({"input_tokens": 100, "output_tokens": 3})
    assert figures == {"input_tokens": 100, "output_tokens": 3} and scope == "derived"


def test_unknown_events_and_items_pass_through() -> None:
    translator = CodexExecTranslator()
    messages = _feed(
        translator,
        STARTED,
        {"type": "x.future", "n": 1},
        {"type": "item.completed", "item": {"id": "i", "type": "hologram", "x": 1}},
        {"type": "item.completed"},
        [1, 2],
    )
    assert [m.type for m in messages[1:]] == [
        "x.future",
        "codex.hologram",
        MessageType.ERROR,
        MessageType.ERROR,
    ]


# -- rollout files ------------------------------------------------------------------------------


def test_the_rollout_gives_the_effective_window_and_the_turn_usage() -> None:
    rollout = read_rollout(FIXTURES / "resume_second.rollout.jsonl")
    assert rollout is not None
    assert rollout.context_window == 258400 and rollout.model == "fake-model"
    assert rollout.turn is not None and rollout.turn["input_tokens"] == 1100
    assert rollout.thread is not None and rollout.thread["input_tokens"] == 2100
    turns = read_rollout_turns(FIXTURES / "resume_second.rollout.jsonl")
    assert len(turns) == 2 and turns[0].turn is not None and turns[0].turn["input_tokens"] == 1000


def test_find_rollout_looks_under_sessions(tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "2026" / "11" / "23"
    folder.mkdir(parents=True)
    target = folder / "rollout-2026-11-23T00-00-00-abc-123.jsonl"
    target.write_text("{}\n")
    assert find_rollout(tmp_path, "abc-123") == target
    assert find_rollout(tmp_path, "nope") is None
    assert find_rollout(tmp_path, "../../etc") is None
    assert read_rollout(tmp_path / "missing.jsonl") is None


def test_replay_uses_the_rollout_beside_a_resumed_transcript() -> None:
    (turn,) = replay_turns(FIXTURES / "resume_second.jsonl", engine="codex")
    summary = TurnSummary.from_messages(turn)
    assert summary.usage is not None and summary.usage.prompt_tokens == 1100  # the turn's own
    assert summary.context is not None and summary.context.size_source == "agent_effective"


def test_replay_splits_an_interrupted_recording_into_its_turns() -> None:
    first, second = replay_turns(FIXTURES / "interrupt.jsonl", engine="codex")
    assert TurnSummary.from_messages(first).stop_reason == "cancelled"
    assert TurnSummary.from_messages(second).text == "done"


# -- snapshots ------------------------------------------------------------------------------------


def _replay(path: Path) -> dict[str, Any]:
    return replayed(path, "codex")


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
        # Replay and the live run agree on what each turn produced.
        if "ok" in turn:
            assert summary["ok"] == turn["ok"], turn
        if turn.get("resume_id"):
            assert summary["resume_id"] == turn["resume_id"]
        if turn.get("interrupted"):
            assert summary["stop_reason"] == "cancelled"


def test_fixtures_exist() -> None:
    assert len(RECORDED) >= 15 and len(SAMPLES) >= 7


def test_reading_a_rollout_skips_records_without_changing_what_it_finds() -> None:
    # The reader never decodes model inputs and outputs, and takes a session's id without
    # decoding its instructions: the facts must be those of decoding every record.
    import json as _json

    from agentrun.engines.codex._rollout import read_rollout_turns, rollout_turns

    rollouts = sorted(FIXTURES.glob("*.rollout.jsonl"))
    assert rollouts
    for path in rollouts:
        every = [_json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        assert read_rollout_turns(path) == rollout_turns(every), path.name
