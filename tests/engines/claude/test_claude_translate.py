"""Claude Code: argv building and translation of recorded streams (no agent is run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES as FIXTURE_ROOT
from syrupy.assertion import SnapshotAssertion

from agentrun._vocabulary.errors import ConfigurationError
from agentrun._vocabulary.messages import Message, MessageType, Usage
from agentrun._vocabulary.options import SessionOptions
from agentrun._vocabulary.summary import TurnSummary
from agentrun.engines._registry import get_engine, get_translator
from agentrun.engines.claude import ClaudeEngine, ClaudeTranslator, build_argv
from agentrun.engines.claude._argv import needs_sandbox_env

FIXTURES = FIXTURE_ROOT / "claude"
SAMPLES = FIXTURES / "wire-samples"
BASE = [
    "claude",
    "-p",
    "--verbose",
    "--output-format",
    "stream-json",
    "--input-format",
    "stream-json",
]

# -- argv --------------------------------------------------------------------------------------


def test_argv_default_is_streaming_input_with_partial_messages() -> None:
    assert build_argv(SessionOptions(), "claude") == [*BASE, "--include-partial-messages"]
    assert build_argv(SessionOptions(partial_messages=False), "claude") == BASE


def test_argv_maps_every_session_option() -> None:
    session = SessionOptions(
        model="claude-sonnet-4-5-20250929",
        agent_id="reviewer",
        system_prompt="be brief",
        append_system_prompt="-- and kind",
        max_turns=3,
        thinking_budget=2048,
        effort="high",
        add_dirs=("/srv/a", "/srv/b"),
        allowed_tools=("Bash(git *)", "Edit"),
        extra_args=("--debug",),
        partial_messages=False,
    )
    assert build_argv(session, "/bin/claude") == [
        "/bin/claude",
        *BASE[1:],
        "--model",
        "claude-sonnet-4-5-20250929",
        "--agent",
        "reviewer",
        "--system-prompt",
        "be brief",
        "--append-system-prompt",
        "-- and kind",
        "--max-turns",
        "3",
        "--max-thinking-tokens",
        "2048",
        "--effort",
        "high",
        "--add-dir",
        "/srv/a",
        "--add-dir",
        "/srv/b",
        "--allowedTools",
        "Bash(git *),Edit",
        "--debug",
    ]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, []),
        ({"hitl": False}, ["--permission-mode", "bypassPermissions"]),
        ({"hitl": True}, ["--permission-prompt-tool", "stdio"]),
        ({"mode": "plan", "hitl": False}, ["--permission-mode", "plan"]),
        (
            {"mode": "plan", "hitl": True},
            ["--permission-mode", "plan", "--permission-prompt-tool", "stdio"],
        ),
        (
            {"options": {"claude.permission_mode": "acceptEdits"}, "hitl": False},
            ["--permission-mode", "acceptEdits"],
        ),
    ],
)
def test_argv_permissions(options: dict[str, Any], expected: list[str]) -> None:
    argv = build_argv(SessionOptions(partial_messages=False, **options), "claude")
    assert argv[len(BASE) :] == expected


def test_argv_resume_fork_continue() -> None:
    tail = build_argv(SessionOptions(resume_id="abc", fork=True, partial_messages=False), "c")[
        len(BASE) :
    ]
    assert tail == ["--resume", "abc", "--fork-session"]
    tail = build_argv(SessionOptions(continue_last=True, partial_messages=False), "c")[len(BASE) :]
    assert tail == ["--continue"]


def test_argv_prefix_and_bad_values() -> None:
    argv = build_argv(SessionOptions(partial_messages=False), ["python", "fake.py"])
    assert argv[:2] == ["python", "fake.py"]
    with pytest.raises(ConfigurationError):
        build_argv(SessionOptions(options={"claude.permission_mode": "yolo"}), "c")
    with pytest.raises(ConfigurationError):
        SessionOptions(model="--dangerously-skip-permissions")


def test_root_needs_is_sandbox_only_for_bypass() -> None:
    assert needs_sandbox_env(SessionOptions(hitl=False), is_root=True)
    assert not needs_sandbox_env(SessionOptions(hitl=False), is_root=False)
    assert not needs_sandbox_env(SessionOptions(hitl=True), is_root=True)
    assert not needs_sandbox_env(SessionOptions(mode="plan", hitl=False), is_root=True)


def test_registry_builds_engine_and_translator() -> None:
    engine = get_engine("claude", binary="/nonexistent/claude")
    assert isinstance(engine, ClaudeEngine)
    assert engine.name == "claude"
    assert isinstance(get_translator("claude"), ClaudeTranslator)


# -- unit translations ------------------------------------------------------------------------


def _feed(*events: dict[str, Any], translator: ClaudeTranslator | None = None) -> list[Message]:
    t = translator or ClaudeTranslator()
    out: list[Message] = []
    for event in events:
        out += t.feed(event)
    return out


def _result(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "ok",
        "session_id": "s1",
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    base.update(extra)
    return base


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), -float("inf"), -0.5])
def test_a_cost_that_is_no_amount_is_not_reported(cost: float) -> None:
    """A NaN, infinite or negative ``total_cost_usd`` (JSON text may hold ``NaN`` and
    ``Infinity``) is not reported, as :class:`Usage` validation would have it: the usage is
    assembled without validation, so the translator applies the rule itself."""
    result = _feed(_result(total_cost_usd=cost), translator=ClaudeTranslator())[-1]
    assert result.usage is not None and result.usage.cost_usd is None
    assert result.usage == Usage.model_validate(result.usage.model_dump())


def test_cost_is_per_result_never_the_session_total() -> None:
    t = ClaudeTranslator()
    first = _feed(_result(total_cost_usd=0.5), translator=t)[-1]
    second = _feed(_result(total_cost_usd=0.75), translator=t)[-1]
    assert first.usage is not None and first.usage.cost_usd == 0.5
    assert second.usage is not None and second.usage.cost_usd == 0.25
    resumed = ClaudeTranslator(resumed=True)
    third = _feed(_result(total_cost_usd=0.9), translator=resumed)[-1]
    assert third.usage is not None and third.usage.cost_usd is None
    since = {"m": {"inputTokens": 3, "outputTokens": 4, "costUSD": 0.01, "thinkingTokens": 1}}
    fourth = _feed(
        _result(total_cost_usd=9.0, model_usage_since_last_result=since), translator=resumed
    )[-1]
    assert fourth.usage is not None
    assert (fourth.usage.cost_usd, fourth.usage.input_tokens, fourth.usage.thinking_tokens) == (
        0.01,
        3,
        1,
    )


def test_context_reading_once_per_main_thread_call() -> None:
    usage = {"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5}

    def assistant(mid: str, block: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
        return {
            "type": "assistant",
            "parent_tool_use_id": parent,
            "message": {"id": mid, "model": "claude-opus-5-5", "content": [block], "usage": usage},
        }

    msgs = _feed(
        {"type": "system", "subtype": "init", "model": "claude-sonnet-4-5-20250929"},
        assistant("m1", {"type": "text", "text": "a"}),
        assistant("m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}),
        assistant("m2", {"type": "text", "text": "sub"}, parent="toolu_x"),
    )
    readings = [m for m in msgs if m.type is MessageType.CONTEXT_WINDOW]
    assert len(readings) == 1
    assert readings[0].context is not None
    assert readings[0].context.used_tokens == 115


def test_error_result_is_never_success() -> None:
    msgs = _feed(
        _result(
            is_error=True,
            result="API Error: 500",
            api_error_status=500,
            terminal_reason="api_error",
        )
    )
    result = msgs[-1]
    assert result.error is not None
    assert (result.error.fatal, result.error.status, result.error.code) == (True, 500, "api_error")
    assert not TurnSummary.from_messages(msgs).ok


def test_unknown_types_pass_through() -> None:
    msgs = _feed({"type": "brand_new", "x": 1}, {"type": "system", "subtype": "novel", "y": 2})
    assert msgs[0].type == "brand_new"
    assert (msgs[1].type, msgs[1].subtype, msgs[1].data) == (MessageType.SYSTEM, "novel", {"y": 2})


# -- snapshots over recorded streams ----------------------------------------------------------


def _norm(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


def _replay(path: Path) -> dict[str, Any]:
    """Every line through one translator; turns split at each result."""
    translator = ClaudeTranslator()
    turns: list[list[Message]] = [[]]
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        for message in translator.feed(json.loads(line)):
            turns[-1].append(message)
            if message.type is MessageType.RESULT:
                turns.append([])
    if not turns[-1] and len(turns) > 1:
        turns.pop()
    summaries = []
    for number, messages in enumerate(turns, 1):
        summary = TurnSummary.from_messages(m.model_copy(update={"turn": number}) for m in messages)
        summaries.append(summary.model_dump(mode="json"))
    return {
        "messages": [[_norm(m) for m in messages] for messages in turns],
        "summaries": summaries,
    }


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_wire_samples(path: Path, snapshot: SnapshotAssertion) -> None:
    assert _replay(path) == snapshot


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_recorded_fixtures(path: Path, snapshot: SnapshotAssertion) -> None:
    assert _replay(path) == snapshot


def test_fixture_semantics() -> None:
    """The values a reader checks by eye in the snapshots, asserted explicitly."""

    def last(name: str) -> dict[str, Any]:
        return _replay(FIXTURES / f"{name}.jsonl")["summaries"][-1]

    text = last("text")
    assert text["ok"] and text["text"] == "Hello from the offline model."
    assert text["context"]["used"] == 12 + 8192 + 2048
    assert text["context"]["size"] == 1_000_000 and text["context"]["size_source"] == "agent"
    assert text["usage"]["output_tokens"] == 9
    for name, status in (("http_500", 500), ("http_429", 429), ("http_401", 401)):
        failed = last(name)
        assert not failed["ok"]
        assert failed["errors"][-1]["status"] == status and failed["errors"][-1]["fatal"]
    assert last("http_400_prompt_too_long")["errors"][-1]["code"] == "prompt_too_long"
    assert last("max_turns")["errors"][-1]["code"] == "max_turns"
    thinking = last("thinking")
    assert thinking["usage"]["thinking_tokens"] == 16 and thinking["usage"]["output_tokens"] == 57
    denied = last("tool_denied_callback")
    assert denied["ok"] and denied["denials"][0]["tool_name"] == "Bash"
    assert last("tool_denied_policy")["denials"][0]["reason"]
    assert not last("tool_approved_callback")["denials"]
    interrupted = _replay(FIXTURES / "interrupt.jsonl")["summaries"]
    assert interrupted[0]["errors"][-1]["code"] == "cancelled"
    assert interrupted[1]["ok"] and interrupted[1]["text"] == "Fresh answer."
    assert last("resume_unknown")["errors"][-1]["code"] == "session_not_found"
    # A Bash result's exit code, where Claude Code tells it: "Exit code 3" of a failure, 0 of a
    # success; unknown for grep's 1 that Claude Code took as success ("No matches found").
    results = [m for m in _replay(FIXTURES / "tool_exit_codes.jsonl")["messages"][0]
               if m["type"] == "tool_result"]  # fmt: skip
    assert [m.get("data") for m in results] == [{"exit_code": 3}, None, {"exit_code": 0}]
    assert [m["tool"].get("is_error", False) for m in results] == [True, False, False]
    for name in ("tool_use", "thinking_tool", "tool_approved_callback"):
        (result,) = [m for m in _replay(FIXTURES / f"{name}.jsonl")["messages"][0]
                     if m["type"] == "tool_result"]  # fmt: skip
        assert result["data"] == {"exit_code": 0}, name
    for name in ("tool_denied_callback", "tool_denied_policy"):  # refused: it never ran
        for m in _replay(FIXTURES / f"{name}.jsonl")["messages"][0]:
            assert m["type"] != "tool_result" or "data" not in m, name
    assert last("sigterm")["has_result"] is False


def _turn_with_fresh_ids(events: list[str], n: int) -> list[Any]:
    """The recorded turn again, its model-call and tool-use ids made unique to turn ``n``."""
    return [
        json.loads(
            line.replace("msg_offline_", f"msg_t{n}_").replace("toolu_offline_", f"toolu_t{n}_")
        )
        for line in events
    ]


def test_a_long_session_keeps_a_flat_memory() -> None:
    """1,200 turns of a recorded tool turn (two model calls and a tool call each, ids fresh per
    turn): the translator holds the ids of the last two turns only, and its memory does not grow
    with the number of turns."""
    import gc
    import tracemalloc

    recorded = (FIXTURES / "tool_use.jsonl").read_text(encoding="utf-8").splitlines()
    translator = ClaudeTranslator()
    results = 0

    def run(turns: range) -> None:
        nonlocal results
        for n in turns:
            for event in _turn_with_fresh_ids(recorded, n):
                results += sum(m.type is MessageType.RESULT for m in translator.feed(event))

    run(range(200))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        run(range(200, 1200))
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert results == 1200
    grown = sum(
        stat.size_diff
        for stat in after.compare_to(before, "filename")
        if "agentrun" in stat.traceback[0].filename
    )
    # Keeping every id costs ~220 bytes a turn (~220 kB here); a flat translator, next to none.
    assert grown < 20_000, grown
    assert len(translator._observed_calls) + len(translator._previous_calls) <= 4  # pyright: ignore[reportPrivateUsage]
    assert translator.remembered_ids <= 8
