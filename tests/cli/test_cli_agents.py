"""The agentrun command with the real pinned agents on the embedded model server: prompts from
stdin and files, Ctrl-C, a closed stdout, a failed turn's reason, the engines view, recording."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from repo_paths import REPO

from agentrun.offline import ModelTurn, Script
from tests.agents_support import require_engine

pytestmark = pytest.mark.agent


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("source", ["stdin", "file"])
def test_the_prompt_comes_from_stdin_or_a_file(source: str, tmp_path: Path) -> None:
    require_engine("claude")
    prompt = f"check the shell, prompt from {source}"
    if source == "stdin":
        done = _cli("run", "-", stdin=prompt + "\n")
    else:
        path = tmp_path / "prompt.md"
        path.write_text(prompt + "\n", encoding="utf-8")
        done = _cli("run", "--prompt-file", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"▶ {prompt}"
    assert "turn 1 ok" in done.stdout


def test_output_schema_prints_the_validated_answer_after_the_turn(tmp_path: Path) -> None:
    require_engine("claude")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["count"],
                                  "properties": {"count": {"type": "integer"}}}))  # fmt: skip
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"blocks": [{"type": "text", "text": '{"count": 3}'}]},
                                  {"blocks": [{"type": "text", "text": "three"}]}]))  # fmt: skip
    args = ("run", "--json", "--engine", "claude", "--script", str(script))
    done = _cli(*args, "--output-schema", str(schema), "count them")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1] == {"type": "output", "turn": 1, "output": {"count": 3}}
    # An answer that does not match is one line on stderr and exit 1.
    done = _cli(*args, "--output-schema", str(schema), "--then", "again", "count them")
    assert done.returncode == 1
    assert "does not match the output schema" in done.stderr, done.stderr


def test_wind_down_reaches_the_turn(tmp_path: Path) -> None:
    # Codex exec takes no input during a turn: the wind-down is a notice, and the turn runs on.
    require_engine("codex")
    script = tmp_path / "script.json"
    turns = Script(turns=[ModelTurn.shell("sleep 1"), ModelTurn.text("done")])
    script.write_text(turns.model_dump_json())
    args = ("run", "--engine", "codex", "--script", str(script), "--timeout", "60")
    done = _cli(*args, "--wind-down", "59.9", "--json", "go")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    notes = [line for line in lines if line.get("subtype") == "wind_down"]
    assert len(notes) == 1 and notes[0]["data"]["steered"] is False, notes
    assert "codex takes no input while a turn runs" in notes[0]["text"]


def test_a_failed_turn_prints_its_reason() -> None:
    require_engine("claude")
    done = _cli("run", "--resume", "BADID", "hi")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    failed = next(i for i, line in enumerate(lines) if "turn 1 failed" in line)
    reason = lines[failed + 1]
    assert reason.startswith("   reason: ") and "BADID" in reason


def test_resuming_an_unknown_codex_thread_name_fails_like_every_engine() -> None:
    """``codex exec resume <name>`` of a name no thread has used to start a fresh thread (exit
    0); it is refused like an unknown id on the other engines: exit 1, the id named, no turn."""
    require_engine("codex")
    done = _cli("run", "--engine", "codex", "--resume", "no-such-session", "hi")
    assert done.returncode == 1, done.stdout
    assert "no-such-session" in done.stderr and "does not know" in done.stderr
    assert "turn 1 ok" not in done.stdout


def test_a_turn_the_agent_cannot_run_says_why_and_fails(tmp_path: Path) -> None:
    require_engine("claude")
    script = tmp_path / "script.json"
    script.write_text(Script.of(ModelTurn.error(401, "invalid x-api-key")).model_dump_json())
    done = _cli("run", "--script", str(script), "hi")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    failed = next(i for i, line in enumerate(lines) if "turn 1 failed" in line)
    reason = lines[failed + 1]
    assert reason.startswith("   reason: Invalid API key") and "[not_authenticated]" in reason
    assert "agentrun: Invalid API key" in done.stderr


def test_a_closed_stdout_ends_quietly() -> None:
    require_engine("claude")
    child = subprocess.Popen(
        [sys.executable, "-m", "agentrun.cli", "run", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    first = json.loads(child.stdout.readline())
    child.stdout.close()  # what `| head -1` does
    err = child.stderr.read().decode()
    child.stderr.close()
    assert child.wait(timeout=120) == 141
    assert first["type"] == "init"
    assert err == ""


def _slow_script(tmp_path: Path) -> Path:
    words = " ".join(f"word{i}" for i in range(40))
    path = tmp_path / "slow.json"
    path.write_text(json.dumps([{"blocks": [{"type": "text", "text": words}],
                                 "chunk_delay": 0.5, "chunk_chars": 6}]))  # fmt: skip
    return path


def test_ctrl_c_cancels_the_turn_exits_130_and_the_json_ends_with_a_cancelled_result(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    child = subprocess.Popen(
        [sys.executable, "-m", "agentrun.cli", "run", "--json",
         "--script", str(_slow_script(tmp_path)), "say many words"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert child.stdout is not None
    seen: list[dict[str, Any]] = []
    for line in child.stdout:
        seen.append(json.loads(line))
        if seen[-1]["type"] == "text_delta":  # mid-turn: the model is still answering
            child.send_signal(signal.SIGINT)
            break
    rest, err = child.communicate(timeout=60)
    messages = seen + [json.loads(line) for line in rest.splitlines()]
    assert child.returncode == 130, err
    assert err.strip().splitlines()[-1] == "agentrun: interrupted"
    assert "Traceback" not in err
    assert messages[-1]["type"] == "result" and messages[-1]["stop_reason"] == "cancelled"
    text = "".join(m.get("text", "") for m in messages if m["type"] == "text_delta")
    assert "word39" not in text  # the answer was cut short


def test_an_interactive_run_says_the_agent_is_starting() -> None:
    require_engine("claude")
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "agentrun.cli", "run", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={k: v for k, v in os.environ.items() if k != "NO_COLOR"},
    )
    os.close(follower)
    err = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    assert child.wait(timeout=120) == 0
    os.close(leader)
    assert err.decode().splitlines()[0] == "starting claude…"


def _pinned() -> dict[str, str]:
    data = json.loads((REPO / "engines/package.json").read_text(encoding="utf-8"))
    return data["dependencies"]


def test_engines_shows_each_program_its_version_and_the_pinned_one() -> None:
    require_engine("claude")
    require_engine("codex")
    started = time.monotonic()
    done = _cli("engines", "--json", "--engine", "claude", "--engine", "codex",
                "--engine", "qwen", "--engine", "replay")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    reports = {r["engine"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert list(reports) == ["claude", "codex", "qwen", "replay"]
    pinned = _pinned()
    claude, codex, qwen = reports["claude"], reports["codex"], reports["qwen"]
    assert claude["package"] == "@anthropic-ai/claude-code"
    assert claude["version"] == claude["pinned"] == pinned["@anthropic-ai/claude-code"]
    assert codex["version"] == codex["pinned"] == pinned["@openai/codex"]
    assert qwen["version"] == qwen["pinned"] == pinned["@qwen-code/qwen-code"]
    assert Path(claude["program"]).is_file() and Path(codex["program"]).is_file()
    assert qwen["node"]["version"].split(".")[0] >= "22"
    assert "node" not in claude
    assert all(r["offline"] for r in (claude, codex, qwen))
    assert "note" in reports["replay"] and "program" not in reports["replay"]
    assert time.monotonic() - started < 120

    table = _cli("engines", "--engine", "claude")
    assert table.returncode == 0
    assert table.stdout.startswith("✓ claude ") and f"{claude['version']} (pinned)" in table.stdout


def test_record_writes_its_metadata_to_the_file_and_its_script_loads_back(tmp_path: Path) -> None:
    require_engine("claude")
    script = Script.of("Recorded, and nothing else.")
    script_path = tmp_path / "script.json"
    script_path.write_text(script.model_dump_json())
    out = tmp_path / "case"
    done = _cli("record", "--engine", "claude", "--out", str(out), "--script", str(script_path),
                "--prompt", "say it")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"recorded 1 turn(s) of claude to {out}.jsonl; metadata in {out}.meta.json"
    ]
    meta = json.loads((tmp_path / "case.meta.json").read_text())
    assert Script.model_validate(meta["script"]) == script
    # The agent's own process, as its session's driver knew it.
    assert meta["argv"] and "--output-format" in meta["argv"], meta["argv"]
    assert isinstance(meta["exit_code"], int)
    # What the server served during the turn: the one scripted answer, whole.
    (turn,) = meta["turns"]
    assert turn["ledger"]["calls"] == 1 and turn["ledger"]["complete"], turn
    assert turn["ledger"]["statuses"] == [200] and turn["ledger"]["usage"]["output_tokens"] > 0
    replayed = _cli("replay", "--engine", "claude", str(tmp_path / "case.jsonl"))
    assert replayed.returncode == 0 and "Recorded, and nothing else." in replayed.stdout
