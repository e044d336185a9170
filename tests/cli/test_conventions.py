"""The agentrun command's conventions that need no agent: --version, help for every argument,
one-line errors with exit 2 before anything runs, names that list the valid ones, colour only
where it can be shown, JSON lines without unknown fields, honest replays and renderings."""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES, REPO

from agentrun._cli.main import parser
from agentrun._cli.render import Renderer
from agentrun._vocabulary.messages import Message, MessageType
from agentrun.cli import main
from agentrun.engines._replay import read_events, recognised


def _cli(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def test_version_prints_the_version_and_exits_0() -> None:
    done = _cli("--version")
    assert done.returncode == 0, done.stderr
    from agentrun._version import VERSION

    assert done.stdout.strip() == f"agentrun {VERSION}"


def _actions(p: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found: list[tuple[str, argparse.Action]] = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            choices: dict[str, argparse.ArgumentParser] = action.choices  # type: ignore[assignment]
            for name, child in choices.items():
                found += _actions(child, f"{path} {name}")
        else:
            found.append((path, action))
    return found


def test_every_argument_of_every_command_has_help() -> None:
    actions = _actions(parser(), "agentrun")
    assert len(actions) > 50
    missing = [
        f"{where}: {'/'.join(a.option_strings) or a.dest}"
        for where, a in actions
        if not a.help or a.help == argparse.SUPPRESS
    ]
    assert missing == []


def test_every_command_and_option_is_in_docs_cli_md() -> None:
    text = (REPO / "docs/cli.md").read_text(encoding="utf-8")
    for where, action in _actions(parser(), "agentrun"):
        assert where in text, where
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert option in text, f"{where} {option}"


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, Path]:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"turns": [\n')
    bad_block = tmp_path / "block.json"
    bad_block.write_text(json.dumps([{"blocks": [{"type": "video", "text": "hi"}]}]))
    return {"missing": tmp_path / "none.json", "bad_json": bad_json, "bad_block": bad_block}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "--timeout", "-1", "hi"], "--timeout: must be a positive number"),
        (["run", "--idle-timeout", "nan", "hi"], "--idle-timeout: must be a positive number"),
        (["run", "--script", "{missing}"], "cannot read the script"),
        (["run", "--script", "{bad_json}"], "is not JSON"),
        (["run", "--script", "{bad_block}"], "'video'"),
        (["compare", "--engines", "claude", "--script", "{bad_block}"], "'video'"),
        (["run", "--prompt-file", "{missing}"], "cannot read the prompt file"),
        (["run", "--prompt-file", "{bad_json}", "also a prompt"], "not both"),
        (["run", "--cwd", "{missing}"], "no such directory"),
        (["run", "--option", "permission_mode"], "is not KEY=VALUE"),
        (["record", "--engine", "acp", "--out", "{missing}"], "needs an offline configuration"),
        (["serve", "--port", "70000"], "a port is 0 to 65535"),
        (["run", "--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2_before_anything_runs(
    args: list[str], said: str, scripts: dict[str, Path]
) -> None:
    done = _cli(*(a.format(**{k: str(v) for k, v in scripts.items()}) for a in args))
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # not even the prompt: nothing started
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr


def test_an_empty_prompt_on_stdin_is_refused() -> None:
    done = _cli("run", "-", stdin="  \n")
    assert done.returncode == 2
    assert done.stderr.strip() == "agentrun: the prompt from standard input is empty"


@pytest.mark.parametrize(
    ("args", "listed"),
    [
        (["run", "--engine", "nope"], "known: acp, claude, claude-acp, codex"),
        (["compare", "--engines", "claude,nope"], "known: acp, claude, claude-acp, codex"),
        (["replay", "--engine", "nope", "x.jsonl"], "known: acp, claude, claude-acp, codex"),
        (["engines", "--engine", "nope"], "known: acp, claude, claude-acp, codex"),
        (["run", "--option", "claude.permision_mode=plan"], "known: claude.permission_mode"),
        (["run", "--option", "gemini.mode=plan"], "'acp.<name>' (known: acp.mode"),
    ],
)
def test_an_unknown_name_lists_the_known_ones(args: list[str], listed: str) -> None:
    done = _cli(*args)
    assert done.returncode == 2
    assert listed in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_an_unknown_model_names_the_closest_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "sonet"]) == 1
    assert "sonet: unknown (closest: sonnet" in capsys.readouterr().out


# -- colour -----------------------------------------------------------------------------------


def _on_a_terminal(*args: str, **env: str) -> bytes:
    """What the command writes when its standard output is a terminal."""
    leader, follower = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    child = subprocess.Popen(
        [sys.executable, "-m", "agentrun.cli", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**environ, **env},
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    child.wait(timeout=60)
    os.close(leader)
    return out


@pytest.mark.parametrize(
    ("env", "coloured"),
    [
        ({"TERM": "xterm"}, True),
        ({"TERM": "dumb"}, False),
        ({"TERM": "xterm", "NO_COLOR": "1"}, False),
    ],
)
def test_colour_only_on_a_terminal_that_shows_it(env: dict[str, str], coloured: bool) -> None:
    out = _on_a_terminal(
        "replay", "--engine", "claude", str(FIXTURES / "claude/tool_use.jsonl"), **env
    )
    assert b"turn 1" in out and b"Traceback" not in out
    assert (b"\x1b[" in out) is coloured


# -- JSON lines -------------------------------------------------------------------------------


def _nulls(value: Any, where: str = "") -> list[str]:
    if isinstance(value, dict):
        out: list[str] = []
        for key, item in value.items():
            if key in ("data", "input", "output"):  # the agent's own JSON: kept as it came
                continue
            out += [f"{where}.{key}"] if item is None else _nulls(item, f"{where}.{key}")
        return out
    return []


def test_json_lines_leave_unknown_fields_out_and_keep_every_known_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = FIXTURES / "claude/tool_use.jsonl"
    assert main(["replay", "--engine", "claude", "--json", str(path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [n for line in lines for n in _nulls(line)] == []
    # Nothing meaningful is lost: each line reads back as the message it was.
    for line in lines:
        message = Message.model_validate(line)
        assert message.model_dump(mode="json", exclude_none=True) == line
    assert any(line.get("replayed") is False for line in lines)
    tools = [line["tool"] for line in lines if line["type"] == "tool_result"]
    assert tools and tools[0]["is_error"] is False


# -- replay: a transcript of another engine ----------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "transcript"),
    [
        ("codex", "claude/text.jsonl"),
        ("opencode", "claude/tool_use.jsonl"),
        ("claude", "codex/shell_tool.jsonl"),
        ("claude", "opencode/text.jsonl"),
        ("opencode", "codex/http_401.jsonl"),
        ("codex", "opencode/error_401.jsonl"),
        ("codex-app-server", "acp/two_prompts.jsonl"),
    ],
)
def test_replay_refuses_a_transcript_of_another_engine(engine: str, transcript: str) -> None:
    done = _cli("replay", "--engine", engine, str(FIXTURES / transcript))
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"holds no {engine} events" in done.stderr and len(done.stderr.splitlines()) == 1


def _transcripts() -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        engine = (
            "acp" if folder.name in ("gemini", "qwen", "claude-acp", "codex-acp") else folder.name
        )
        for path in sorted(folder.glob("*.jsonl")):
            if not path.name.endswith(".rollout.jsonl"):
                found.append((engine, path))
    return found


def test_every_recorded_transcript_is_recognised_as_its_own_engines() -> None:
    transcripts = _transcripts()
    assert len(transcripts) > 80
    assert [
        str(p) for engine, p in transcripts if not recognised(read_events(p, engine=engine), engine)
    ] == []


# -- rendering ---------------------------------------------------------------------------------


def test_an_acp_tool_call_without_input_shows_its_title_not_null() -> None:
    done = _cli("replay", "--engine", "gemini", str(FIXTURES / "gemini/tool_then_text.jsonl"))
    assert done.returncode == 0, done.stderr
    tools = [line for line in done.stdout.splitlines() if line[:1] in "→←"]
    assert tools == ["→ echo hello from agentrun (execute)", "← completed (no output)"]


def test_a_failed_codex_turn_reads_as_failed_with_its_reason_and_an_honest_gauge() -> None:
    done = _cli("replay", "--engine", "codex", str(FIXTURES / "codex/http_401.jsonl"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "context context" not in out and "? /" not in out
    assert "context window of 258,400 tokens (fill unknown)" in out
    assert "turn 1 failed" in out
    assert "   reason: unexpected status 401 Unauthorized" in out


def _rendered(*messages: Message) -> str:
    import io

    out = io.StringIO()
    renderer = Renderer(out, colour=False)
    for message in messages:
        renderer.message(message)
    return out.getvalue()


@pytest.mark.parametrize(
    ("quiet", "shown"), [(1.001, "1s"), (2.46, "2.5s"), (12.6, "13s"), (125.2, "2m 05s")]
)
def test_a_stall_reads_in_sensibly_rounded_seconds(quiet: float, shown: str) -> None:
    stall = Message(
        type=MessageType.STALL,
        text=f"claude has been quiet for {quiet:g}s (waiting for the agent)",
        data={"quiet_s": quiet, "waiting_for": "agent", "open_tools": []},
    )
    assert _rendered(stall) == f"… claude has been quiet for {shown} (waiting for the agent)\n"


@pytest.mark.parametrize(
    ("stop", "has_result", "reason"),
    [
        ("max_turns", True, "the agent reached its turn limit"),
        ("cancelled", True, "the turn was cancelled"),
        (None, True, "the agent reported a failure without giving a reason"),
        (None, False, "the turn ended without a result from the agent"),
    ],
)
def test_a_failed_turn_without_an_error_still_says_why(
    stop: str | None, has_result: bool, reason: str
) -> None:
    import io

    from agentrun._vocabulary.summary import TurnSummary

    summary = TurnSummary(turn=1, ok=False, stop_reason=stop, has_result=has_result)
    out = io.StringIO()
    Renderer(out, colour=False).summary(summary)
    assert out.getvalue().splitlines()[1] == f"   reason: {reason}"


def test_a_turns_summary_shows_figures_reported_without_their_split() -> None:
    import io

    from agentrun import Usage
    from agentrun._vocabulary.summary import TurnSummary

    usage = Usage(whole_prompt_tokens=24_354, answer_tokens=38, usage_source="reported")
    out = io.StringIO()
    Renderer(out, colour=False).summary(TurnSummary(turn=1, ok=True, usage=usage))
    text = out.getvalue()
    assert "prompt 24354 (cache not told apart)" in text
    assert "answer 38 (thinking not counted)" in text


def test_a_turns_summary_shows_the_last_calls_tokens_apart_from_the_turns_cost() -> None:
    import io

    from agentrun import Usage
    from agentrun._vocabulary.summary import TurnSummary

    usage = Usage(cost_usd=0.0092, usage_source="unavailable", cost_source="derived")
    last = Usage(input_tokens=406, cache_read_tokens=23_552, output_tokens=27,
                 usage_source="last_call")  # fmt: skip
    out = io.StringIO()
    summary = TurnSummary(turn=1, ok=True, usage=usage, last_call_usage=last)
    Renderer(out, colour=False).summary(summary)
    (line,) = [line for line in out.getvalue().splitlines() if "usage:" in line]
    assert line == (
        "   usage: cost $0.009200, cost derived, the turn's tokens not reported "
        "(its last model call: in 406, out 27, cache read 23552)"
    )
