"""The agentrun command: replay, catalog, and the main job (a real agent turn)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from agentrun import TurnSummary, replay
from agentrun._cli.replay import summary_line
from agentrun.cli import main
from tests.agents_support import require_engine


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_replay_summary_is_one_json_object_per_turn() -> None:
    done = _cli(
        "replay", "--engine", "claude", str(FIXTURES / "claude/two_turns.jsonl"), "--summary"
    )
    assert done.returncode == 0, done.stderr
    summaries = [json.loads(line) for line in done.stdout.splitlines()]
    assert [s["turn"] for s in summaries] == [1, 2]
    for s in summaries:
        assert {"text", "thinking", "tool_calls", "usage", "context", "stop_reason", "denials",
                "errors", "resume_id", "model", "ok"} <= set(s)  # fmt: skip
        assert s["ok"] is True
        assert s["context"]["size"] and s["context"]["used"]
    assert summaries[0]["resume_id"] == summaries[1]["resume_id"]


#: Each folder of recorded transcripts and the engine that replays them.
_TRANSCRIPT_ENGINES = {
    "claude": "claude",
    "codex": "codex",
    "codex-app-server": "codex-app-server",
    "opencode": "opencode",
    "opencode-acp": "acp",
    "acp": "acp",
}


def test_the_summary_line_is_json_dumps_of_the_dumped_summary() -> None:
    # summary_line writes what json.dumps(summary.model_dump(mode="json")) writes, without the
    # round of arguments and the cycle check: the same text for every recorded turn.
    summaries = [
        turn.summary
        for folder, engine in _TRANSCRIPT_ENGINES.items()
        for path in sorted((FIXTURES / folder).rglob("*.jsonl"))
        if ".rollout." not in path.name and ".stderr." not in path.name
        for turn in replay(path, engine=engine)
    ]
    summaries.append(
        TurnSummary(
            turn=3,
            output={"é→": [1.5, None, 1e-07, "\u2603\U0001f600", {"k": True}]},
            duration_s=0.25,
            model="m\u00e9",
            stop_reason="end_turn",
        )
    )
    assert len(summaries) > 50
    for summary in summaries:
        assert summary_line(summary) == json.dumps(summary.model_dump(mode="json"))


def test_replay_json_is_normalized_messages(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["replay", "--engine", "claude", str(FIXTURES / "claude/text.jsonl"), "--json"]) == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    types = [m["type"] for m in lines]
    assert types[0] == "init"
    assert types[-1] == "result"
    assert "context_window" in types


def test_replay_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--engine", "claude", "/nonexistent.jsonl"]) == 2
    assert "no such transcript" in capsys.readouterr().err


def test_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "sonnet"]) == 0
    assert "1000000" in capsys.readouterr().out
    assert main(["catalog", "no-such-model"]) == 1


def test_run_refuses_unknown_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--engine", "nope", "hi"]) == 2
    assert "unknown engine" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "says"),
    [(None, "cannot read the output schema"), ("{not json", "is not JSON"),
     ("[1, 2]", "is not a JSON Schema object")],
)  # fmt: skip
def test_run_refuses_a_bad_output_schema_in_one_line(
    content: str | None, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "schema.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert main(["run", "--output-schema", str(path), "hi"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("args", "says"),
    [(["--wind-down", "5"], "wind_down needs a timeout"),
     (["--timeout", "5", "--wind-down", "5"], "must be less than the timeout"),
     (["--timeout", "5", "--wind-down-text", "stop"], "--wind-down-text needs --wind-down"),
     (["--timeout", "5", "--wind-down", "1", "--wind-down-text", " "], "the text is empty")],
)  # fmt: skip
def test_run_refuses_a_bad_wind_down_in_one_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *args, "hi"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.agent
def test_main_job_runs_a_real_claude_turn_on_the_embedded_server() -> None:
    require_engine("claude")
    done = _cli("run", "--json", "Check the shell")
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    types = [m["type"] for m in messages]
    assert types[0] == "init" and types[-1] == "result"
    tools = [m["tool"] for m in messages if m["type"] == "tool_result"]
    assert tools and "hello from agentrun" in str(tools[0]["output"])
    gauges = [m["context"] for m in messages if m["type"] == "context_window"]
    assert gauges, "the context gauge is missing"
    assert gauges[-1]["size_tokens"] == 1_000_000
    assert gauges[-1]["used_tokens"] == 18_662  # the default script's second call


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("DIR", "is a directory"),
        ("/dev/zero", "not a regular file"),
        ("EMPTY", "holds no claude events"),
        ("GARBAGE", "holds no claude events"),
    ],
)
def test_replay_refuses_what_is_not_a_transcript_in_one_line(
    target: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = {"DIR": tmp_path, "EMPTY": tmp_path / "empty.jsonl", "GARBAGE": tmp_path / "g.jsonl"}
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "g.jsonl").write_bytes(b"\x00\xffnot json at all\n[[[\n")
    path = str(paths.get(target, target))
    assert main(["replay", "--engine", "claude", path]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_replay_never_writes_control_characters_from_a_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transcript = tmp_path / "evil.jsonl"
    event = {"type": "assistant", "message": {"id": "m", "role": "assistant", "content": [
        {"type": "text", "text": "\x1b]0;owned\x07\x1b[2Jgotcha"}]}}  # fmt: skip
    transcript.write_text(json.dumps(event) + "\n")
    assert main(["replay", "--engine", "claude", str(transcript)]) == 0
    out = capsys.readouterr().out
    assert "gotcha" in out and "\x1b" not in out and "\x07" not in out
