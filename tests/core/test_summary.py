"""TurnSummary as a pure reducer."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentrun import (
    ContextWindow,
    ErrorInfo,
    InitMeta,
    Message,
    PermissionDenial,
    ToolCall,
    TurnSummary,
    Usage,
)
from agentrun._vocabulary.summary import ContextSummary, ToolCallSummary
from agentrun.testing._scripted_engine import result, text, tool_result, tool_use

STREAM = [
    Message(type="init", init=InitMeta(model="m-1", session_id="s-1"), resume_id="s-1"),
    Message(type="thinking", text="hmm"),
    text("Let me check."),
    tool_use("t1", "Bash", {"command": "ls"}),
    Message(type="text", text="subagent chatter", parent_tool_use_id="t1"),
    Message(
        type="context_window",
        context=ContextWindow(used_tokens=900, size_tokens=1000, used_source="call_usage"),
    ),
    tool_result("t1", "x.txt"),
    tool_use("t2", "Write", {"path": "y"}),
    tool_result("t2", "denied", is_error=True),
    Message(type="system", subtype="permission_denied", denials=(PermissionDenial(tool_use_id="t2", reason="no"),)),
    Message(type="thinking", text="ok"),
    text("Here is x.txt."),
    Message(
        type="result",
        stop_reason="end_turn",
        usage=Usage(input_tokens=3, output_tokens=9, cost_usd=0.01),
        denials=(PermissionDenial(tool_name="Write", tool_use_id="t2", input={"path": "y"}),),
    ),
]  # fmt: skip


def test_summary_of_a_full_turn() -> None:
    s = TurnSummary.from_messages(STREAM)
    assert s.text == "Here is x.txt."
    assert s.thinking == "hmm\n\nok"
    assert [(t.id, t.name, t.output, t.is_error) for t in s.tool_calls] == [
        ("t1", "Bash", "x.txt", False),
        ("t2", "Write", "denied", True),
    ]
    assert s.context is not None and s.context.fraction == 0.9
    assert s.usage is not None
    assert (s.usage.cost_usd, s.usage.context_used_tokens, s.usage.context_size_tokens) == (
        0.01,
        900,
        1000,
    )
    assert len(s.denials) == 1
    assert s.denials[0].model_dump(exclude_none=True) == {
        "tool_name": "Write",
        "tool_use_id": "t2",
        "input": {"path": "y"},
        "reason": "no",
    }
    assert (s.model, s.session_id, s.resume_id, s.stop_reason, s.ok) == (
        "m-1",
        "s-1",
        "s-1",
        "end_turn",
        True,
    )


def test_json_field_names_are_stable() -> None:
    data = TurnSummary.from_messages(STREAM).model_dump(mode="json")
    for key in ("text", "thinking", "tool_calls", "usage", "context", "stop_reason", "denials",
                "errors", "resume_id", "model", "ok"):  # fmt: skip
        assert key in data
    assert set(data["tool_calls"][0]) >= {"id", "name", "input", "output", "is_error"}
    assert set(data["context"]) == {"used", "size", "fraction", "used_source", "size_source"}


def test_result_text_wins_and_errors_fail_the_turn() -> None:
    s = TurnSummary.from_messages(
        [
            text("partial"),
            Message(
                type="result",
                text="API Error: 500",
                error=ErrorInfo(message="API Error: 500", status=500, fatal=True),
            ),
        ]
    )
    assert s.text == "API Error: 500"
    assert not s.ok and s.errors[0].status == 500


def test_what_a_retried_call_streamed_is_not_repeated_in_the_text() -> None:
    retry = Message.retry_notice("stream disconnected", attempt=1, max_attempts=5)
    s = TurnSummary.from_messages(
        [
            text("I'll list the files."),
            tool_use("t1", "Bash", {"command": "ls"}),
            tool_result("t1", "x.txt"),
            Message(type="thinking", text="the listing shows"),
            text("Partial answ"),
            retry,  # the call failed mid-stream; the agent calls the model again
            Message(type="thinking", text="the listing shows x"),
            text("Partial answer, complete."),
            Message(type="result", stop_reason="end_turn"),
        ]
    )
    assert s.text == "Partial answer, complete."
    assert s.all_text == "I'll list the files.\n\nPartial answer, complete."
    assert s.thinking == "the listing shows x"
    assert s.retries == 1 and s.ok and s.errors == []
    # A retry right after tool activity takes nothing away.
    again = TurnSummary.from_messages([text("Before."), tool_use("t1", "Bash"),
                                       tool_result("t1", ""), retry, text("After.")])  # fmt: skip
    assert again.all_text == "Before.\n\nAfter." and again.retries == 1


def test_replayed_history_never_counts() -> None:
    s = TurnSummary.from_messages(
        [Message(type="text", text="old", replayed=True), text("new"), result()]
    )
    assert s.text == "new" and s.messages == 2


def test_tool_result_without_use_still_recorded() -> None:
    s = TurnSummary.from_messages(
        [Message(type="tool_result", tool=ToolCall(id="z", name="read", output="data"))]
    )
    assert [(t.id, t.completed) for t in s.tool_calls] == [("z", True)]
    assert not s.ok and not s.has_result


@given(st.integers(min_value=0, max_value=len(STREAM)))
def test_incremental_equals_batch(cut: int) -> None:
    incremental = TurnSummary()
    for message in STREAM[:cut]:
        incremental.add(message)
    for message in STREAM[cut:]:
        incremental.add(message)
    assert incremental == TurnSummary.from_messages(STREAM)


def test_parts_the_fold_builds_are_what_validation_builds() -> None:
    """The empty summary, its context reading and its tool entries are assembled without the
    validator: the same fields, the same fields set, the same private state as validated ones."""
    empty = TurnSummary.from_messages([])
    assert vars(empty) == vars(TurnSummary())
    assert list(vars(empty)) == list(vars(TurnSummary()))
    assert empty.model_fields_set == TurnSummary().model_fields_set == set()
    assert empty == TurnSummary()
    assert empty.tool_calls is not TurnSummary.from_messages([]).tool_calls
    s = TurnSummary.from_messages(STREAM)
    reading = STREAM[5].context
    assert reading is not None
    fraction = reading.fraction
    assert fraction is not None
    validated = ContextSummary(
        used=reading.used_tokens,
        size=reading.size_tokens,
        fraction=round(fraction, 6),
        used_source=reading.used_source,
        size_source=reading.size_source,
    )
    assert s.context is not None
    assert vars(s.context) == vars(validated)
    assert s.context.model_fields_set == validated.model_fields_set
    entry = TurnSummary.from_messages([tool_use("t9", "Bash", {"command": "ls"})]).tool_calls[0]
    made = ToolCallSummary(id="t9", name="Bash", input={"command": "ls"})
    assert vars(entry) == vars(made)
    assert list(vars(entry)) == list(vars(made))
    assert entry.model_fields_set == made.model_fields_set


# -- the JSON form loads back ---------------------------------------------------------------------


def _recorded_summaries() -> list[tuple[str, TurnSummary]]:
    """The summary of every turn of every recorded transcript, replayed by its engine."""
    from repo_paths import FIXTURES

    from agentrun.engines._registry import _TRANSLATORS  # pyright: ignore[reportPrivateUsage]
    from agentrun.engines._replay import replay_turns

    folders = {"acp": ["acp", "opencode-acp"], "opencode-acp": []}  # as the compliance suite
    found: list[tuple[str, TurnSummary]] = []
    for engine in sorted(_TRANSLATORS):
        for folder in folders.get(engine, [engine]):
            for path in sorted((FIXTURES / folder).rglob("*.jsonl")):
                if ".rollout." in path.name or ".stderr." in path.name:
                    continue
                for number, turn in enumerate(replay_turns(path, engine=engine), start=1):
                    name = f"{path.relative_to(FIXTURES)}#{number}"
                    found.append((name, TurnSummary.from_messages(turn)))
    return found


def test_every_recorded_turns_summary_loads_back_from_its_json_equal() -> None:
    summaries = _recorded_summaries()
    # Every kind of content is among them, so the round trip is tried on each.
    assert len(summaries) > 100
    for has in (
        lambda s: s.tool_calls and any(t.completed for t in s.tool_calls),
        lambda s: s.usage is not None and s.usage.cost_usd is not None,
        lambda s: s.context is not None,
        lambda s: s.errors,
        lambda s: s.side_usage is not None,
        lambda s: s.thinking,
        lambda s: s.denials,
        lambda s: not s.has_result,
        lambda s: s.retries,
    ):
        assert any(has(s) for _, s in summaries)
    for name, summary in summaries:
        dumped = summary.model_dump_json()
        loaded = TurnSummary.model_validate_json(dumped)
        assert loaded == summary, name
        assert loaded.model_dump_json() == dumped, name
        assert (loaded.text, loaded.all_text, loaded.thinking) == (
            summary.text,
            summary.all_text,
            summary.thinking,
        ), name
        assert TurnSummary.model_validate(summary.model_dump(mode="json")) == summary, name
        assert TurnSummary.model_validate(summary.model_dump()) == summary, name


def test_a_loaded_summary_folds_on_and_compares_by_what_it_says() -> None:
    unfinished = STREAM[:4]  # a tool call still running, text said before it
    loaded = TurnSummary.model_validate_json(
        TurnSummary.from_messages(unfinished).model_dump_json()
    )
    rest = [tool_result("t1", "x.txt"), text("Done.")]
    for message in rest:
        loaded.add(message)
    assert loaded == TurnSummary.from_messages([*unfinished, *rest])
    assert loaded.tool_calls[0].completed and loaded.text == "Done."
    # Equal only when it says the same.
    whole = TurnSummary.from_messages(STREAM)
    form = whole.model_dump(mode="json")
    for name, other in (("text", "else"), ("all_text", "else"), ("thinking", "else")):
        assert TurnSummary.model_validate({**form, name: other}) != whole, name


def test_a_json_form_with_a_text_that_is_not_a_string_or_an_unknown_key_is_refused() -> None:
    import pytest
    from pydantic import ValidationError

    form = TurnSummary.from_messages(STREAM).model_dump(mode="json")
    for bad in ({**form, "text": 5}, {**form, "thinking": None}, {**form, "texts": "x"}):
        with pytest.raises(ValidationError):
            TurnSummary.model_validate(bad)
