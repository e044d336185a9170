"""OpenCode run engine without the agent: argv building and translation of recorded streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from repo_paths import FIXTURES as FIXTURE_ROOT
from syrupy.assertion import SnapshotAssertion

from agentrun import MessageType, SessionOptions, TurnSummary, Usage
from agentrun._vocabulary.jsonvalues import as_dict, as_float, as_int
from agentrun.engines._registry import get_translator
from agentrun.engines._replay import read_events, translate_events
from agentrun.engines.opencode import (
    OpenCodeEngine,
    OpenCodeTranslator,
    build_argv,
    step_usage,
    unsupported_options,
)

FIXTURES = FIXTURE_ROOT / "opencode"
RECORDED = sorted(FIXTURES.glob("*.jsonl"))
SAMPLES = sorted((FIXTURES / "wire-samples").glob("*.jsonl"))

BIN = "/opt/opencode"


# -- argv ---------------------------------------------------------------------------------------


def test_argv_base_never_carries_the_prompt() -> None:
    args = build_argv(BIN, SessionOptions(), resume_id=None, first_turn=True)
    assert args.argv == (BIN, "run", "--format", "json")
    assert args.unsupported == ()


def test_argv_model_agent_thinking_auto() -> None:
    session = SessionOptions(
        model="fake/fake-model", agent_id="review", thinking_budget=2000, hitl=False
    )
    args = build_argv(BIN, session, resume_id=None, first_turn=True)
    assert args.argv == (
        BIN,
        *("run", "--format", "json", "--model", "fake/fake-model", "--agent", "review"),
        *("--thinking", "--auto"),
    )
    assert [name for name, _ in args.unsupported] == ["thinking_budget"]


def test_argv_plan_mode_is_the_plan_agent() -> None:
    args = build_argv(BIN, SessionOptions(mode="plan"), resume_id=None, first_turn=True)
    assert args.argv[-2:] == ("--agent", "plan")
    conflict = build_argv(
        BIN, SessionOptions(mode="plan", agent_id="build"), resume_id=None, first_turn=True
    )
    assert conflict.argv[-2:] == ("--agent", "build")
    assert [name for name, _ in conflict.unsupported] == ["mode"]


def test_argv_resume_fork_applies_to_the_first_turn_only() -> None:
    session = SessionOptions(resume_id="ses_abc", fork=True)
    first = build_argv(BIN, session, resume_id="ses_abc", first_turn=True)
    assert first.argv[-3:] == ("--session", "ses_abc", "--fork")
    # The fork's own id, captured from turn 1, is simply continued.
    later = build_argv(BIN, session, resume_id="ses_forked", first_turn=False)
    assert later.argv[-2:] == ("--session", "ses_forked")


def test_argv_continue_last_then_the_captured_id() -> None:
    session = SessionOptions(continue_last=True)
    assert build_argv(BIN, session, resume_id=None, first_turn=True).argv[-1] == "--continue"
    later = build_argv(BIN, session, resume_id="ses_x", first_turn=False).argv
    assert "--continue" not in later
    assert later[-2:] == ("--session", "ses_x")


def test_argv_effort_variant_and_flaglike_option_values() -> None:
    args = build_argv(BIN, SessionOptions(effort="high"), resume_id=None, first_turn=True)
    assert args.argv[-3:] == ("--thinking", "--variant", "high")
    bad = build_argv(
        BIN, SessionOptions(options={"opencode.variant": "--auto"}), resume_id=None, first_turn=True
    )
    assert "--variant" not in bad.argv
    assert [name for name, _ in bad.unsupported] == ["opencode.variant"]


def test_unsupported_options_are_listed() -> None:
    async def handler(request: Any) -> Any:
        raise AssertionError

    session = SessionOptions(
        system_prompt="x",
        max_turns=3,
        allowed_tools=("bash",),
        add_dirs=("/tmp",),
        hitl=True,
        permission_handler=handler,
    )
    names = [name for name, _ in unsupported_options(session)]
    assert names == [
        "system_prompt",
        "max_turns",
        "allowed_tools",
        "add_dirs",
        "permission_handler",
    ]
    reason = dict(unsupported_options(session))["permission_handler"]
    assert "ACP" in reason


def test_engine_constructor_and_registry() -> None:
    from agentrun import get_engine

    engine = get_engine("opencode", binary="/nonexistent/opencode", context_window=32000)
    assert isinstance(engine, OpenCodeEngine)
    assert engine.name == "opencode"
    assert engine.context_window == 32000
    assert isinstance(get_translator("opencode"), OpenCodeTranslator)


# -- translation units --------------------------------------------------------------------------


def _event(kind: str, **part: Any) -> dict[str, Any]:
    return {"type": kind, "timestamp": 1, "sessionID": "ses_1", "part": part}


def _finish(reason: str, inp: int, out: int, reasoning: int, read: int, write: int, cost: float):
    tokens = {
        "total": inp + out + reasoning + read + write,
        "input": inp,
        "output": out,
        "reasoning": reasoning,
        "cache": {"read": read, "write": write},
    }
    return _event("step_finish", reason=reason, tokens=tokens, cost=cost, messageID="msg_1")


def test_usage_convention_output_includes_reasoning() -> None:
    usage = step_usage(
        {"input": 900, "output": 8, "reasoning": 12, "cache": {"read": 5, "write": 3}}, 0.5
    )
    assert usage.input_tokens == 900
    assert usage.output_tokens == 20
    assert usage.thinking_tokens == 12
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (5, 3)
    assert usage.cost_usd == 0.5
    assert usage.prompt_tokens == 908


#: A step's figures as an agent may send them: counts, odd numbers, values of other types.
_FIGURE = (
    st.none()
    | st.integers(-5, 10**6)
    | st.integers(2**62, 2**65)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.text(max_size=2)
)


def _reference_step_usage(tokens: dict[str, Any], cost: object) -> Usage:
    """What a step's usage is, by validation: the figures read by the shared accessors, the
    usage validated (which drops a figure below zero)."""
    cache = as_dict(tokens.get("cache")) or {}
    output, reasoning = as_int(tokens.get("output")), as_int(tokens.get("reasoning"))
    both = None if output is None and reasoning is None else (output or 0) + (reasoning or 0)
    return Usage(
        input_tokens=as_int(tokens.get("input")),
        output_tokens=both,
        cache_read_tokens=as_int(cache.get("read")),
        cache_write_tokens=as_int(cache.get("write")),
        thinking_tokens=reasoning,
        cost_usd=as_float(cost),
    )


def _same_usage(got: Usage, expected: Usage) -> None:
    assert got.model_dump_json() == expected.model_dump_json()
    assert got.model_fields_set == expected.model_fields_set
    assert got.model_dump_json(exclude_unset=True) == expected.model_dump_json(exclude_unset=True)


_TOKENS = st.fixed_dictionaries(
    {},
    optional={
        "input": _FIGURE,
        "output": _FIGURE,
        "reasoning": _FIGURE,
        "cache": st.fixed_dictionaries({}, optional={"read": _FIGURE, "write": _FIGURE}) | _FIGURE,
    },
)


@settings(max_examples=300, deadline=None, database=None)
@given(steps=st.lists(st.tuples(_TOKENS, _FIGURE), min_size=1, max_size=4))
def test_step_usages_and_their_sum_are_what_validation_makes(
    steps: list[tuple[dict[str, Any], object]],
) -> None:
    """A step's usage, and the turn's sum of them, are assembled without validation: the same
    values (a figure below zero not reported), the same fields set, as the validated usage and
    :meth:`Usage.__add__` make them."""
    total = expected_total = None
    for tokens, cost in steps:
        usage, expected = step_usage(tokens, cost), _reference_step_usage(tokens, cost)
        _same_usage(usage, expected)
        total = usage if total is None else total + usage
        expected_total = expected if expected_total is None else expected_total + expected
        assert expected_total is not None
        _same_usage(total, expected_total)


def test_steps_are_summed_and_the_last_reason_wins() -> None:
    translator = OpenCodeTranslator(model="fake/fake-model")
    messages = []
    for event in (
        _event("step_start", messageID="msg_1"),
        _finish("tool-calls", 2000, 30, 0, 0, 0, 0.002),
        _event("step_start", messageID="msg_2"),
        _event("text", text="done", messageID="msg_2"),
        _finish("stop", 100, 8, 4, 2000, 10, 0.0003),
    ):
        messages += translator.feed(event)
    messages += translator.finish()
    contexts = [m for m in messages if m.type is MessageType.CONTEXT_WINDOW]
    assert [c.context.used_tokens for c in contexts if c.context] == [2000, 2110]
    result = messages[-1]
    assert result.type is MessageType.RESULT
    assert result.stop_reason == "end_turn"
    assert result.data == {"steps": 2, "reason": "stop", "model": "fake/fake-model"}
    assert result.usage is not None
    assert result.usage.input_tokens == 2100
    assert result.usage.output_tokens == 42
    assert result.usage.thinking_tokens == 4
    assert result.usage.cost_usd == pytest.approx(0.0023)
    assert result.resume_id == "ses_1"
    summary = TurnSummary.from_messages(messages)
    assert summary.ok
    assert summary.text == "done"
    assert summary.context is not None and summary.context.used == 2110


def test_no_step_finish_means_no_result_and_cancel_means_cancelled() -> None:
    translator = OpenCodeTranslator()
    translator.feed(_event("step_start", messageID="m"))
    assert all(m.type is not MessageType.RESULT for m in translator.finish())
    cancelled = OpenCodeTranslator()
    cancelled.feed(_event("step_start", messageID="m"))
    (result,) = cancelled.finish(cancelled=True)
    assert result.stop_reason == "cancelled"


def test_error_event_gives_a_failed_result() -> None:
    translator = OpenCodeTranslator()
    error = {
        "type": "error",
        "sessionID": "ses_1",
        "error": {"name": "APIError", "data": {"message": "boom", "statusCode": 500}},
    }
    messages = translator.feed(error) + translator.finish()
    assert messages[1].type is MessageType.ERROR
    assert messages[1].error is not None and messages[1].error.status == 500
    result = messages[-1]
    assert result.error is not None and result.error.code == "APIError"
    summary = TurnSummary.from_messages(messages)
    assert not summary.ok and summary.has_result


def test_tool_error_and_rejected_permission() -> None:
    translator = OpenCodeTranslator()
    rejected = _event(
        "tool_use",
        type="tool",
        tool="bash",
        callID="call_1",
        state={
            "status": "error",
            "input": {"command": "echo hi"},
            "error": "The user rejected permission to use this specific tool call.",
        },
    )
    use, result = translator.feed(rejected)[1:]
    assert use.type is MessageType.TOOL_USE and use.tool is not None
    assert use.tool.id == result.tool.id == "call_1"  # type: ignore[union-attr]
    assert result.tool is not None and result.tool.is_error is True
    assert result.denials is not None and result.denials[0].tool_name == "bash"


def test_unknown_event_kind_passes_through() -> None:
    translator = OpenCodeTranslator()
    (init, other) = translator.feed({"type": "future_thing", "sessionID": "ses_9", "x": 1})
    assert init.type is MessageType.INIT and init.resume_id == "ses_9"
    assert other.type == "future_thing"


# -- snapshots over recorded streams --------------------------------------------------------------


def _replay(path: Path) -> dict[str, Any]:
    messages = list(translate_events(read_events(path, engine="opencode"), OpenCodeTranslator()))
    summary = TurnSummary.from_messages(messages)
    return {
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in messages],
        "summary": summary.model_dump(mode="json", exclude={"duration_s"}),
    }


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"sample-{p.stem}")
def test_wire_samples(path: Path, snapshot: SnapshotAssertion) -> None:
    assert _replay(path) == snapshot


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_fixtures(path: Path, snapshot: SnapshotAssertion) -> None:
    replayed = _replay(path)
    assert replayed == snapshot
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    # Replay and the live run agree on what the turn produced.
    for turn in meta.get("turns", []):
        if "ok" in turn:
            assert replayed["summary"]["ok"] == turn["ok"]
        if turn.get("resume_id"):
            assert replayed["summary"]["resume_id"] == turn["resume_id"]


def test_fixtures_exist() -> None:
    assert len(SAMPLES) == 6
    names = {p.stem for p in RECORDED}
    assert {"text", "tool_then_text", "error_500", "resume", "fork", "sigint"} <= names
