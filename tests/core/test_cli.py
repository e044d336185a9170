"""The agentrun command: replay, catalog, and the main job (a real agent turn)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from repo_paths import FIXTURES

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
