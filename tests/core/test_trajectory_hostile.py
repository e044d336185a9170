"""Hostile ATIF documents: cyclic and deep subagent references, malformed extras, impossible
figures, documents nested too deep, and trajectories too long for a digest. Each is read into
what it holds, or refused with a ``ConfigurationError``; none raises anything else, and no
digest grows without bound."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from repo_paths import FIXTURES

import agentrun
from agentrun import ConfigurationError, Message, MessageType, Usage
from agentrun._store.trajectory.load import MAX_NESTING
from agentrun.trajectory import (
    DIGEST_MAX_CHARS,
    MAX_SUBAGENT_DEPTH,
    from_atif,
    to_atif,
    trajectory_digest,
)

_AGENT = {"name": "other-tool", "version": "1"}


def _document(steps: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"schema_version": "ATIF-v1.7", "agent": _AGENT, "steps": steps, **fields}


def _delegating(step_id: int, call_id: str, target: str, say: str) -> dict[str, Any]:
    """An agent step that says ``say`` and delegates to the subagent trajectory ``target``."""
    return {
        "step_id": step_id,
        "source": "agent",
        "message": say,
        "tool_calls": [{"tool_call_id": call_id, "function_name": "Task", "arguments": {}}],
        "observation": {
            "results": [
                {
                    "source_call_id": call_id,
                    "content": f"{call_id} done",
                    "subagent_trajectory_ref": [{"trajectory_id": target}],
                }
            ]
        },
    }


def _subagent(trajectory_id: str, steps: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return _document(steps, trajectory_id=trajectory_id, **fields)


def _texts(document: Any) -> list[tuple[str | None, str | None]]:
    """(parent tool call, text) of every text message ``from_atif`` reads."""
    read = from_atif(document)
    return [
        (m.parent_tool_use_id, m.text)
        for t in read.turns
        for m in t.messages
        if m.type is MessageType.TEXT
    ]


# -- subagent references -----------------------------------------------------------------------


def test_a_subagent_that_references_itself_is_read_once() -> None:
    document = _document(
        [
            {"step_id": 1, "source": "user", "message": "delegate"},
            _delegating(2, "c1", "loop", "Delegating."),
        ],
        subagent_trajectories=[_subagent("loop", [_delegating(1, "c2", "loop", "Again.")])],
    )
    assert _texts(document) == [(None, "Delegating."), ("c1", "Again.")]
    read = from_atif(document)
    # The reference back is a tool call with its result, as the document says; not followed.
    assert [(c.id, c.output) for c in read.turns[0].summary.tool_calls] == [
        ("c1", "c1 done"),
        ("c2", "c2 done"),
    ]
    assert "Task" in trajectory_digest(document)


def test_subagents_that_reference_each_other_are_each_read_once() -> None:
    document = _document(
        [_delegating(1, "c1", "a", "Main.")],
        subagent_trajectories=[
            _subagent("a", [_delegating(1, "c2", "b", "In a.")]),
            _subagent("b", [_delegating(1, "c3", "a", "In b.")]),
        ],
    )
    assert _texts(document) == [(None, "Main."), ("c1", "In a."), ("c2", "In b.")]


def test_a_subagent_referenced_many_times_is_read_once_so_nothing_multiplies() -> None:
    # Each level delegates to the next from four tool calls: read per reference, the bottom
    # would be read 4**8 = 65,536 times.
    def fanning(level: int) -> dict[str, Any]:
        calls = [f"c{level}-{k}" for k in range(4)]
        return {
            "step_id": 1,
            "source": "agent",
            "message": f"level {level}",
            "tool_calls": [
                {"tool_call_id": c, "function_name": "Task", "arguments": {}} for c in calls
            ],
            "observation": {
                "results": [
                    {
                        "source_call_id": c,
                        "subagent_trajectory_ref": [{"trajectory_id": f"s{level + 1}"}],
                    }
                    for c in calls
                ]
            },
        }

    subs = [_subagent(f"s{n}", [fanning(n)]) for n in range(1, 8)]
    subs.append(_subagent("s8", [{"step_id": 1, "source": "agent", "message": "bottom"}]))
    document = _document([fanning(0)], subagent_trajectories=subs)
    texts = _texts(document)
    assert [t for _, t in texts] == [*(f"level {n}" for n in range(8)), "bottom"]
    # Each is read under the first call that delegated to it.
    assert texts[1:3] == [("c0-0", "level 1"), ("c1-0", "level 2")]


def _chain(depth: int) -> dict[str, Any]:
    """A main trajectory whose subagent delegates to another, ``depth`` levels deep, each
    subagent embedded in the one that delegates to it (as the RFC embeds them)."""
    innermost = _subagent(f"s{depth}", [{"step_id": 1, "source": "agent", "message": "bottom"}])
    sub = innermost
    for level in range(depth - 1, 0, -1):
        sub = _subagent(
            f"s{level}",
            [_delegating(1, f"c{level + 1}", f"s{level + 1}", f"level {level}")],
            subagent_trajectories=[sub],
        )
    return _document([_delegating(1, "c1", "s1", "top")], subagent_trajectories=[sub])


def test_subagents_are_followed_to_the_depth_bound_and_refused_beyond() -> None:
    texts = _texts(_chain(MAX_SUBAGENT_DEPTH))
    assert texts[-1] == (f"c{MAX_SUBAGENT_DEPTH}", "bottom")
    assert len(texts) == MAX_SUBAGENT_DEPTH + 1
    for read in (from_atif, trajectory_digest):
        with pytest.raises(ConfigurationError, match=f"deeper than {MAX_SUBAGENT_DEPTH}"):
            read(_chain(MAX_SUBAGENT_DEPTH + 1))


# -- extras of the wrong shape -----------------------------------------------------------------


def _library_trajectory() -> dict[str, Any]:
    turns = agentrun.replay(FIXTURES / "claude/thinking_tool.jsonl", engine="claude")
    return to_atif(turns, prompts=["What year is it?"]).model_dump(mode="json", exclude_none=True)


def _own(document: dict[str, Any], index: int) -> dict[str, Any]:
    return document["steps"][index]["extra"]["agentrun"]


#: Each rewrites a piece of ``extra`` (the library's own, or a convention's) into a wrong shape.
MALFORMED: dict[str, Callable[[dict[str, Any]], None]] = {
    "events not a list": lambda d: _own(d, 1).update(events=5),
    "an event not an object": lambda d: _own(d, 1).update(events=[1, "x", None]),
    "an event not a message": lambda d: _own(d, 1).update(events=[{"type": "text", "text": 5}]),
    "events_before not a list": lambda d: _own(d, 1).update(events_before="x"),
    "a message_id not a string": lambda d: _own(d, 1).update(message_id={"id": 1}),
    "a result not an object": lambda d: _own(d, 2).update(result="done"),
    "a result of the wrong shape": lambda d: _own(d, 2).update(result={"usage": "lots"}),
    "a tool call's extras": lambda d: d["steps"][1]["tool_calls"][0].update(
        extra={"kind": [], "status": 5, "title": {"t": 1}}
    ),
    "a result's is_error": lambda d: d["steps"][1]["observation"]["results"][0].update(
        extra={"is_error": "maybe", "tool_call_id": 7}
    ),
    "a reading's size": lambda d: d["steps"][1]["metrics"].update(
        extra={"context_size_tokens": "big", "context_size_source": ["x"]}
    ),
    "a negative reading in an event": lambda d: _own(d, 2).update(
        events=[{"type": "context_window", "context": {"used_tokens": -5}}]
    ),
    "the agentrun extra not an object": lambda d: d["steps"][1]["extra"].update(agentrun=[1]),
}


@pytest.mark.parametrize("change", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_extra_is_left_out_and_the_rest_is_read(
    change: Callable[[dict[str, Any]], None],
) -> None:
    document = _library_trajectory()
    change(document)
    read = from_atif(document)
    (turn,) = read.turns
    summary = turn.summary
    assert turn.prompt == "What year is it?"
    assert summary.thinking and "I should run a command first." in summary.thinking
    assert [(c.name, c.input) for c in summary.tool_calls] == [("Bash", {"command": "echo 2026"})]
    assert summary.tool_calls[0].output is not None and "2026" in str(summary.tool_calls[0].output)
    assert summary.context is None or (summary.context.used or 0) >= 0
    assert "echo 2026" in trajectory_digest(document)
    # What was read exports again into a valid document.
    to_atif(read.turns).model_dump_json()


def test_a_compaction_kept_in_the_wrong_shape_reads_from_the_rfc_convention() -> None:
    note = Message.compaction(trigger="handoff", before_tokens=9000, after=None)
    document = to_atif([[note, Message(type="text", text="Continuing.", message_id="m")]])
    dumped = document.model_dump(mode="json", exclude_none=True)
    (system,) = [s for s in dumped["steps"] if s["source"] == "system"]
    system["extra"]["agentrun"]["compaction"] = 3
    (back,) = [m for m in from_atif(dumped).turns[0].messages if m.type is MessageType.COMPACTION]
    assert back.data == {"trigger": "compaction"}
    assert from_atif(dumped).turns[0].summary.text == "Continuing."


def test_a_foreign_context_management_type_of_the_wrong_shape_is_no_trigger() -> None:
    document = _document(
        [
            {
                "step_id": 1,
                "source": "system",
                "message": "compacted",
                "extra": {"context_management": {"type": ["compaction"]}},
            }
        ]
    )
    (note,) = [m for m in from_atif(document).turns[0].messages if m.type is MessageType.COMPACTION]
    assert note.data == {"trigger": None} and note.text == "compacted"


# -- figures no model call can have ----------------------------------------------------------


@pytest.mark.parametrize("cost", ["NaN", "Infinity", "-Infinity", "-0.5"])
def test_a_cost_that_is_not_finite_or_negative_is_not_reported(cost: str) -> None:
    step = (
        '{"step_id": 1, "source": "agent", "message": "x", '
        f'"metrics": {{"prompt_tokens": 10, "cost_usd": {cost}}}}}'
    )
    text = f'{{"schema_version": "ATIF-v1.7", "agent": {json.dumps(_AGENT)}, "steps": [{step}]}}'
    usage = from_atif(text).turns[0].summary.usage
    assert usage is not None and usage.input_tokens == 10 and usage.cost_usd is None
    # The same figure kept in the library's own result of the turn.
    own = {"agentrun": {"turn": 1, "result": {"usage": {"cost_usd": "@"}}}}
    step = json.dumps({"step_id": 1, "source": "agent", "message": "x", "extra": own})
    text = text.replace(text[text.index('{"step_id"') : -2], step.replace('"@"', cost))
    usage = from_atif(text).turns[0].summary.usage
    assert usage is not None and usage.cost_usd is None


def test_usage_takes_no_nan_or_infinite_figure() -> None:
    for cost in (float("nan"), float("inf"), -float("inf")):
        usage = Usage(cost_usd=cost, input_tokens=3)
        assert (usage.cost_usd, usage.input_tokens) == (None, 3)


def test_negative_token_counts_are_not_reported() -> None:
    metrics = {"prompt_tokens": -5, "completion_tokens": -1, "cached_tokens": -7}
    document = _document([{"step_id": 1, "source": "agent", "message": "x", "metrics": metrics}])
    (turn,) = from_atif(document).turns
    assert turn.summary.context is None
    assert not [m for m in turn.messages if m.type is MessageType.CONTEXT_WINDOW]
    usage = turn.summary.usage
    assert usage is None or usage.is_empty()
    # Cached tokens below zero do not add to the prompt either.
    metrics = {"prompt_tokens": 10, "cached_tokens": -7}
    document = _document([{"step_id": 1, "source": "agent", "message": "x", "metrics": metrics}])
    usage = from_atif(document).turns[0].summary.usage
    assert usage is not None and (usage.input_tokens, usage.cache_read_tokens) == (10, None)


# -- documents nested too deep ----------------------------------------------------------------


def test_a_decoded_document_nested_too_deep_is_refused_like_json_text() -> None:
    deep: list[Any] = []
    for _ in range(MAX_NESTING):
        deep = [deep]
    call = {"tool_call_id": "c", "function_name": "f", "arguments": {"a": deep}}
    document = _document([{"step_id": 1, "source": "agent", "message": "x", "tool_calls": [call]}])
    for source in (document, json.dumps(document)):
        for read in (from_atif, trajectory_digest):
            with pytest.raises(ConfigurationError, match="not an ATIF trajectory"):
                read(source)


def test_a_document_within_the_nesting_bound_reads_and_exports() -> None:
    deep: list[Any] = []
    for _ in range(MAX_NESTING - 20):
        deep = [deep]
    call = {"tool_call_id": "c", "function_name": "f", "arguments": {"a": deep}}
    document = _document([{"step_id": 1, "source": "agent", "message": "x", "tool_calls": [call]}])
    read = from_atif(document)
    assert to_atif(read.turns).model_dump_json()
    assert "turn 1: f" in trajectory_digest(document)


# -- the digest's bound -----------------------------------------------------------------------


def _long_trajectory(turns: int, *, width: int = 600) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for n in range(1, turns + 1):
        call = {
            "tool_call_id": f"c{n}",
            "function_name": "write_file",
            "arguments": {"path": f"src/module_{n}.py", "content": "x" * width},
        }
        steps.append({"step_id": len(steps) + 1, "source": "user", "message": f"prompt {n} " * 60})
        steps.append(
            {
                "step_id": len(steps) + 1,
                "source": "agent",
                "message": f"answer {n}",
                "tool_calls": [call],
                "observation": {"results": [{"source_call_id": f"c{n}", "content": "ok"}]},
            }
        )
    return _document(steps)


def test_the_digest_of_a_long_trajectory_is_bounded_and_says_what_it_left_out() -> None:
    digest = trajectory_digest(_long_trajectory(5000))
    assert len(digest) <= DIGEST_MAX_CHARS
    assert "over 5000 turn(s)" in digest
    task = digest.split("Task:\n")[1].split("\n\n")[0].splitlines()
    assert task[0].startswith("- prompt 1 prompt 1")  # the task as first given
    assert task[-1].startswith("- prompt 5000 ")  # and where it went last
    assert "earlier prompts left out" in task[1]
    assert "- turn 5000: write_file" in digest
    assert "earlier tool calls left out" in digest
    assert "- src/module_5000.py" in digest and "earlier files left out" in digest


def test_the_digest_bound_holds_with_every_field_at_its_longest() -> None:
    document = _long_trajectory(300, width=10_000)
    long = "n" * 100_000
    document["agent"] = {"name": long, "version": long, "model_name": long}
    for step in document["steps"]:
        if step["source"] == "agent":
            step["message"] = long
            call = step["tool_calls"][0]
            call["function_name"] = long
            call["arguments"]["path"] = long + call["tool_call_id"]
            step.pop("observation")  # every call stays open
    step = document["steps"][-1]
    step["extra"] = {"agentrun": {"turn": 300, "result": {"error": {"message": long}}}}
    digest = trajectory_digest(document)
    assert len(digest) <= DIGEST_MAX_CHARS
    assert "tool calls without a result: " in digest and "earlier ones" in digest


def test_a_short_trajectory_digest_leaves_nothing_out() -> None:
    digest = trajectory_digest(_long_trajectory(3))
    assert "left out" not in digest and "earlier ones" not in digest
    assert all(f"prompt {n}" in digest for n in (1, 2, 3))
