"""The public replay API and ATIF trajectories out and in, over every recorded transcript."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES

import agentrun
from agentrun import ConfigurationError, Message, MessageType, ToolCall, Usage
from agentrun.cli import main
from agentrun.engines._registry import _TRANSLATORS  # pyright: ignore[reportPrivateUsage]
from agentrun.trajectory import Trajectory, from_atif, to_atif, trajectory_digest

#: Where each translator's transcripts live (default: fixtures/<name>/), as the compliance
#: suite reads them.
FIXTURE_DIRS = {"acp": ["acp", "opencode-acp"], "opencode-acp": []}


def _transcripts() -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for name in sorted(_TRANSLATORS):
        for folder in FIXTURE_DIRS.get(name, [name]):
            base = FIXTURES / folder
            if base.is_dir():
                found.extend(
                    (name, p)
                    for p in sorted(base.rglob("*.jsonl"))
                    if not p.name.endswith(".rollout.jsonl")
                )
    return found


TRANSCRIPTS = _transcripts()
IDS = [f"{name}:{path.relative_to(FIXTURES)}" for name, path in TRANSCRIPTS]


def _json(trajectory: Trajectory) -> dict[str, Any]:
    return trajectory.model_dump(mode="json", exclude_none=True)


def test_every_engine_with_fixtures_is_covered() -> None:
    assert len(TRANSCRIPTS) > 100
    assert {"claude", "codex", "opencode", "acp", "codex-app-server"} <= {n for n, _ in TRANSCRIPTS}


@pytest.mark.parametrize("case", TRANSCRIPTS, ids=IDS)
def test_every_fixture_exports_a_valid_atif_document(case: tuple[str, Path]) -> None:
    name, path = case
    turns = agentrun.replay(path, engine=name)
    trajectory = to_atif(turns)
    # The document as another tool reads it: JSON text through the RFC's strict models.
    document = trajectory.model_dump_json(exclude_none=True)
    again = Trajectory.model_validate_json(document)
    assert again.schema_version == "ATIF-v1.8"
    assert [s.step_id for s in again.steps] == list(range(1, len(again.steps) + 1))
    # Every tool result pairs with a tool call of its own step.
    for step in again.steps:
        calls = {c.tool_call_id for c in step.tool_calls or ()}
        for result in step.observation.results if step.observation else ():
            assert result.source_call_id is None or result.source_call_id in calls
    # final_metrics are the turns' usage summed, in ATIF's conventions.
    total = Usage()
    for turn in turns:
        if turn.summary.usage is not None:
            total = total + turn.summary.usage
    final = again.final_metrics
    assert final is not None
    assert final.total_prompt_tokens == total.prompt_tokens  # cached tokens included
    assert final.total_cached_tokens == total.cache_read_tokens
    assert final.total_completion_tokens == total.output_tokens
    assert final.total_cost_usd == total.cost_usd
    assert final.total_steps == len(again.steps)
    # The agent says who it was.
    init = next((m.init for t in turns for m in t.messages if m.init is not None), None)
    if init is not None and init.agent_name:
        assert again.agent.name == init.agent_name
    # Every tool call of the main thread is there.
    uses = [
        m.tool.id
        for t in turns
        for m in t.messages
        if m.type is MessageType.TOOL_USE and m.parent_tool_use_id is None and m.tool
    ]
    calls = [c.tool_call_id for s in again.steps for c in s.tool_calls or ()]
    assert len(calls) == len(uses)
    assert [c for c, u in zip(calls, uses, strict=True) if u is not None] == [
        u for u in uses if u is not None
    ]


@pytest.mark.parametrize("case", TRANSCRIPTS, ids=IDS)
def test_export_import_export_is_stable(case: tuple[str, Path]) -> None:
    name, path = case
    turns = agentrun.replay(path, engine=name)
    first = to_atif(turns)
    read = from_atif(first.model_dump_json(exclude_none=True))
    assert len(read.turns) == len(turns)
    for before, after in zip(turns, read.turns, strict=True):
        # Token and cost figures survive; the context fields repeat the last reading, and
        # only readings of a model call's usage are exported.
        context = {"context_used_tokens", "context_size_tokens"}
        assert (after.summary.usage or Usage()).model_dump(exclude=context) == (
            before.summary.usage or Usage()
        ).model_dump(exclude=context)
        assert after.summary.ok == before.summary.ok
        assert [c.id for c in after.summary.tool_calls] == [
            c.id for c in before.summary.tool_calls if c.id is not None
        ] or not before.summary.tool_calls
    assert _json(to_atif(read.turns)) == _json(first)


# -- replay ------------------------------------------------------------------------------------


def test_replay_reads_a_path_bytes_or_lines_alike() -> None:
    path = FIXTURES / "claude/two_turns.jsonl"
    by_path = agentrun.replay(path, engine="claude")
    by_bytes = agentrun.replay(path.read_bytes(), engine="claude")
    by_lines = agentrun.replay(path.read_text().splitlines(), engine="claude")
    assert [t.number for t in by_path] == [1, 2]
    for other in (by_bytes, by_lines):
        assert [t.messages for t in other] == [t.messages for t in by_path]
        assert [t.summary for t in other] == [t.summary for t in by_path]
    assert all(m.turn == t.number for t in by_path for m in t.messages)


def test_the_cli_prints_what_replay_returns(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "claude/tool_use.jsonl"
    assert main(["replay", "--engine", "claude", str(path), "--summary"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    turns = agentrun.replay(path, engine="claude")
    assert printed == [t.summary.model_dump(mode="json") for t in turns]
    assert main(["replay", "--engine", "claude", str(path), "--atif"]) == 0
    assert json.loads(capsys.readouterr().out) == _json(to_atif(turns))


def test_a_codex_rollout_is_found_beside_the_transcript_or_given(tmp_path: Path) -> None:
    original = FIXTURES / "codex/shell_tool.jsonl"
    rollout = FIXTURES / "codex/shell_tool.rollout.jsonl"
    beside = agentrun.replay(original, engine="codex")
    alone = tmp_path / "shell_tool.jsonl"
    shutil.copy(original, alone)
    without = agentrun.replay(alone, engine="codex")
    given = agentrun.replay(alone, engine="codex", sidecar=rollout)
    from_bytes = agentrun.replay(original.read_bytes(), engine="codex", sidecar=rollout)
    assert [t.summary for t in without] != [t.summary for t in beside]
    assert [t.summary for t in given] == [t.summary for t in beside]
    assert [t.summary for t in from_bytes] == [t.summary for t in beside]


@pytest.mark.parametrize(
    ("source", "engine", "expected"),
    [
        ("MISSING", "claude", "no such transcript"),
        ("DIR", "claude", "is a directory"),
        ("GARBAGE", "claude", "holds no claude events"),
        (b"", "claude", "holds no claude events"),
        ("CLAUDE", "opencode", "holds no opencode events"),
        ("CLAUDE", "no-such-engine", "no translator for engine"),
        ("SIDECAR", "codex", "no such sidecar"),
        ("SIDECAR", "claude", "no such sidecar"),
    ],
)
def test_replay_rejects_bad_input_with_a_typed_error(
    tmp_path: Path, source: str | bytes, engine: str, expected: str
) -> None:
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n\x00\x01\n")
    paths = {
        "MISSING": tmp_path / "missing.jsonl",
        "DIR": tmp_path,
        "GARBAGE": garbage,
        "CLAUDE": FIXTURES / "claude/tool_use.jsonl",
        "SIDECAR": FIXTURES / "claude/tool_use.jsonl",
    }
    given: Any = paths[source] if isinstance(source, str) else source
    sidecar = tmp_path / "missing.rollout.jsonl" if source == "SIDECAR" else None
    with pytest.raises(ConfigurationError, match=expected):
        agentrun.replay(given, engine=engine, sidecar=sidecar)


# -- the mapping -------------------------------------------------------------------------------


def test_prompts_are_user_steps_and_calls_pair_with_their_results() -> None:
    turns = agentrun.replay(FIXTURES / "claude/thinking_tool.jsonl", engine="claude")
    trajectory = to_atif(turns, prompts=["What year is it?"])
    user, first, second = trajectory.steps
    assert (user.source, user.message) == ("user", "What year is it?")
    assert first.source == "agent" and first.reasoning_content == "I should run a command first."
    assert first.tool_calls and first.observation
    (call,) = first.tool_calls
    (result,) = first.observation.results
    assert result.source_call_id == call.tool_call_id == "toolu_offline_0000_01"
    assert call.arguments == {"command": "echo 2026"}
    assert second.message == "The year is 2026." and second.reasoning_content
    # Per-call prompt sizes from the agent's call usage, each on its own call's step.
    assert first.metrics and second.metrics
    assert (first.metrics.prompt_tokens, second.metrics.prompt_tokens) == (12030, 12185)
    read = from_atif(trajectory)
    assert read.turns[0].prompt == "What year is it?"
    assert read.turns[0].summary.text == "The year is 2026."


def test_a_result_the_agent_gave_no_output_has_no_content() -> None:
    # Gemini CLI ends a command's call over ACP with empty content: no output, not "[]".
    turns = agentrun.replay(FIXTURES / "gemini/tool_then_text.jsonl", engine="gemini")
    (step,) = [s for s in to_atif(turns).steps if s.tool_calls]
    assert step.observation is not None and step.tool_calls is not None
    (result,) = step.observation.results
    assert result.source_call_id == step.tool_calls[0].tool_call_id
    assert result.content is None


def test_subagent_work_is_an_embedded_trajectory_referenced_from_its_tool_call() -> None:
    task = ToolCall(id="task_1", name="Task", input={"prompt": "look around"})
    messages = [
        Message(type="init", init={"agent_name": "claude-code", "agent_version": "2"}),
        Message(type="tool_use", tool=task, message_id="m1"),
        Message(type="text", text="Looking.", parent_tool_use_id="task_1", message_id="s1"),
        Message(
            type="tool_use",
            tool=ToolCall(id="sub_ls", name="Bash", input={"command": "ls"}),
            parent_tool_use_id="task_1",
            message_id="s1",
        ),
        Message(
            type="tool_result",
            tool=ToolCall(id="sub_ls", output="a.txt"),
            parent_tool_use_id="task_1",
        ),
        Message(type="tool_result", tool=ToolCall(id="task_1", output="found a.txt")),
        Message(type="text", text="There is a.txt.", message_id="m2"),
        Message(type="result", usage=Usage(input_tokens=5, output_tokens=3)),
    ]
    trajectory = Trajectory.model_validate_json(to_atif(messages).model_dump_json())
    assert trajectory.subagent_trajectories is not None
    (sub,) = trajectory.subagent_trajectories
    assert sub.trajectory_id == "subagent-task_1"
    assert [c.function_name for s in sub.steps for c in s.tool_calls or ()] == ["Bash"]
    step = trajectory.steps[0]
    assert step.observation is not None
    (result,) = step.observation.results
    assert result.source_call_id == "task_1" and result.content == "found a.txt"
    assert result.subagent_trajectory_ref is not None
    assert result.subagent_trajectory_ref[0].trajectory_id == "subagent-task_1"
    # The subagent's messages read back under their parent tool call.
    read = from_atif(trajectory)
    subs = [m for m in read.turns[0].messages if m.parent_tool_use_id == "task_1"]
    assert [m.type for m in subs] == [
        MessageType.TEXT,
        MessageType.TOOL_USE,
        MessageType.TOOL_RESULT,
    ]
    assert _json(to_atif(read.turns)) == _json(trajectory)


def test_compaction_and_handoff_follow_the_context_management_convention() -> None:
    note = Message.compaction(trigger="handoff", before_tokens=9000, after=None)
    messages = [
        Message(type="text", text="Summary of the work.", message_id="m1"),
        Message(type="result", usage=Usage(input_tokens=1, output_tokens=1)),
        note.model_copy(update={"turn": 2}),
        Message(type="text", text="Continuing.", message_id="m2", turn=2),
        Message(type="result", usage=Usage(input_tokens=2, output_tokens=2), turn=2),
    ]
    turns = [messages[:2], messages[2:]]
    trajectory = to_atif(turns)
    system = [s for s in trajectory.steps if s.source == "system"]
    assert len(system) == 1
    assert system[0].extra is not None
    assert system[0].extra["context_management"] == {"type": "compaction", "boundary": "replace"}
    read = from_atif(trajectory)
    (back,) = [m for m in read.turns[1].messages if m.type is MessageType.COMPACTION]
    assert back.data is not None and back.data["trigger"] == "handoff"
    assert trajectory.final_metrics is not None
    assert trajectory.final_metrics.total_prompt_tokens == 3


# -- import of any ATIF document, and the schema ----------------------------------------------

FOREIGN: dict[str, Any] = {
    "schema_version": "ATIF-v1.6",
    "session_id": "run-1",
    "agent": {"name": "some-agent", "version": "0.1", "model_name": "m"},
    "steps": [
        {"step_id": 1, "source": "system", "message": "You are helpful."},
        {"step_id": 2, "source": "user", "message": "Fix src/app.py"},
        {
            "step_id": 3,
            "source": "agent",
            "message": "Reading it.",
            "tool_calls": [
                {
                    "tool_call_id": "c1",
                    "function_name": "read_file",
                    "arguments": {"path": "src/app.py"},
                }
            ],
            "observation": {"results": [{"source_call_id": "c1", "content": "print(1)"}]},
            "metrics": {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40},
        },
        {
            "step_id": 4,
            "source": "agent",
            "message": "Fixed.",
            "metrics": {"prompt_tokens": 130, "completion_tokens": 5, "cost_usd": 0.01},
        },
        {"step_id": 5, "source": "user", "message": "Thanks"},
        {"step_id": 6, "source": "agent", "message": "You're welcome."},
    ],
}


def test_a_foreign_trajectory_reads_as_turns_started_by_its_user_steps() -> None:
    read = from_atif(FOREIGN)
    assert [t.prompt for t in read.turns] == ["Fix src/app.py", "Thanks"]
    first = read.turns[0].summary
    assert first.text == "Fixed." and first.ok
    assert [(c.name, c.output) for c in first.tool_calls] == [("read_file", "print(1)")]
    assert first.usage is not None
    assert first.usage.prompt_tokens == 230 and first.usage.cache_read_tokens == 40
    assert first.usage.output_tokens == 15 and first.usage.cost_usd == 0.01
    assert read.agent_name == "some-agent" and read.session_id == "run-1"
    digest = trajectory_digest(FOREIGN)
    assert "Fix src/app.py" in digest and "src/app.py" in digest.split("Files touched:")[1]
    assert "some-agent 0.1" in digest


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(surprise=1), "surprise"),
        (lambda d: d["steps"][2].update(step_id=9), "sequential"),
        (lambda d: d["steps"][1].update(metrics={"prompt_tokens": 1}), "agent steps only"),
        (
            lambda d: d["steps"][3].update(
                observation={"results": [{"source_call_id": "c1", "content": "x"}]}
            ),
            "not a tool call of the step",
        ),
        (lambda d: d.update(schema_version="ATIF-v9"), "schema_version"),
        (lambda d: d.pop("agent"), "agent"),
        (lambda d: d["steps"][2].update(llm_call_count=0), "llm_call_count 0"),
    ],
)
def test_documents_that_break_the_rfc_are_rejected(change: Any, expected: str) -> None:
    document = json.loads(json.dumps(FOREIGN))
    change(document)
    with pytest.raises(ConfigurationError, match=expected):
        from_atif(document)


def test_a_trajectory_file_that_is_not_json_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("{not json")
    with pytest.raises(ConfigurationError, match="not an ATIF trajectory"):
        from_atif(path)
    with pytest.raises(ConfigurationError, match="cannot read"):
        from_atif(tmp_path / "missing.json")
