"""Durable sessions: the journal a session keeps (``SessionOptions(journal=...)``), read back by
``agentrun sessions`` from other processes, resumed and forked on the real pinned agents on the
embedded default, and ``agentrun run --resume`` across runs (kept offline homes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import (
    ConfigurationError,
    EngineUnavailableError,
    JsonlSessionStore,
    Message,
    SessionOptions,
    SessionTotals,
    TurnSummary,
    Usage,
    get_engine,
    run_turn,
)
from agentrun.cli import main
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, embedded_engine
from agentrun.offline._homes import offline_home, remember_home
from agentrun.trajectory import Trajectory, to_atif

_PROGRAM = {"codex-app-server": "codex", "opencode-acp": "opencode"}


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AGENTRUN_SESSIONS_DIR": str(home / "journals"),
        "AGENTRUN_OFFLINE_HOMES": str(home / "homes"),
    }
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )


def _require(engine: str) -> None:
    """Skip unless ``engine``'s agent program is installed."""
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))


def _requests(path: Path) -> str:
    """What the model server of one run received (the requests' JSON bodies)."""
    return "\n".join(json.dumps(json.loads(line)["json"]) for line in path.read_text().splitlines())


def _ids(home: Path) -> list[str]:
    return JsonlSessionStore(home / "journals").ids()


def _resume_ids(home: Path, journal_id: str) -> list[str]:
    records = JsonlSessionStore(home / "journals").records(journal_id)
    return [r["resume_id"] for r in records if r.get("resume_id")]


# -- the journal, written by a session in this process --------------------------------------


@pytest.mark.anyio
@pytest.mark.agent
async def test_a_session_journals_its_prompts_messages_and_summaries(tmp_path: Path) -> None:
    require_engine("claude")
    store = JsonlSessionStore(tmp_path / "journals")
    async with ModelServer() as server:
        engine, options = embedded_engine(
            "claude", server.url, tmp_path / "agent", cwd=str(tmp_path)
        )
        secret = "sk-test-0123456789-do-not-keep"
        options = options.model_copy(
            update={"env": {**options.env, "MY_TOKEN": secret}, "journal": store}
        )
        async with engine.start(options) as session:
            summary = await run_turn(session, "journal this prompt")
            journal_id = session.journal_id
    assert journal_id is not None and store.ids() == [journal_id]
    text = store.path(journal_id).read_text()
    assert secret not in text  # environment values are masked, as in the options' repr
    records = store.records(journal_id)
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "session" and kinds[1] == "turn" and kinds[-2:] == ["summary", "closed"]
    first = records[0]
    assert first["engine"] == "claude" and first["options"]["env"]["MY_TOKEN"] == "***"
    assert records[1]["prompt"] == "journal this prompt"
    messages = [r["message"] for r in records if r["kind"] == "message"]
    assert messages[-1]["type"] == "result" and len(messages) == summary.messages
    assert records[-2]["text"] == summary.text
    assert summary.resume_id in [r.get("resume_id") for r in records]


def test_a_session_without_a_journal_has_no_observer() -> None:
    from agentrun.engines.claude import ClaudeEngine

    session = ClaudeEngine().start(SessionOptions())
    assert session.journal is None and session.observers == () and session.journal_id is None
    journaled = ClaudeEngine().start(SessionOptions(journal=JsonlSessionStore("/nonexistent")))
    assert journaled.journal_id is not None and len(journaled.observers) == 1


def test_a_torn_last_line_is_skipped_and_damage_before_it_is_an_error(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    store.append("s1", {"kind": "session", "engine": "claude", "at": "2026-01-01T00:00:00Z"})
    store.append("s1", {"kind": "turn", "turn": 1, "prompt": "hi"})
    store.close("s1")
    with store.path("s1").open("a") as handle:
        handle.write('{"kind": "message", "message": {"type": "te')  # a crash mid-write
    assert [r["kind"] for r in store.records("s1")] == ["session", "turn"]
    done = _cli(tmp_path.parent, "sessions", "--dir", str(tmp_path), "show", "s1")
    assert done.returncode == 0 and "▶ hi" in done.stdout
    with store.path("s1").open("a") as handle:
        handle.write('\n{"kind": "closed"}\n')  # the torn line is now in the middle
    with pytest.raises(ConfigurationError, match="damaged at record 3"):
        store.records("s1")


@pytest.mark.parametrize("bad", ["no-such-session", "../etc/passwd", "a b"])
@pytest.mark.parametrize("action", ["show", "export", "resume", "fork"])
def test_a_bad_session_id_is_one_line_and_exit_2(bad: str, action: str, tmp_path: Path) -> None:
    extra = ["hello"] if action in ("resume", "fork") else []
    done = _cli(tmp_path, "sessions", action, bad, *extra)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("agentrun: ")
    assert done.stdout == ""


# -- agentrun sessions export -------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.agent
async def test_sessions_export_atif_is_the_trajectory_of_what_the_session_did(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    store = JsonlSessionStore(tmp_path / "journals")
    script = Script(turns=[ModelTurn.shell("echo hi", say="Running it."), ModelTurn.text("It printed hi."),
                           ModelTurn.text("Nothing else.")])  # fmt: skip
    prompts = ["run echo hi", "anything else?"]
    turns: list[list[Message]] = []
    summaries: list[TurnSummary] = []
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "claude", server.url, tmp_path / "agent", cwd=str(tmp_path), journal=store
        )
        async with engine.start(options) as session:
            for prompt in prompts:
                seen: list[Message] = []
                summaries.append(await run_turn(session, prompt, on_message=seen.append))
                turns.append(seen)
            journal_id = session.journal_id
    assert journal_id is not None and all(s.ok for s in summaries)
    # From another process, with the store named by --dir.
    directory = ["sessions", "--dir", str(store.directory)]
    exported = _cli(tmp_path, *directory, "export", journal_id, "--atif")
    assert exported.returncode == 0, exported.stderr
    trajectory = Trajectory.model_validate_json(exported.stdout)  # the RFC's models, strict
    # The journal gives back what the caller saw: the same document, with the agent's session.
    expected = to_atif(turns, prompts=prompts)
    assert trajectory.session_id == summaries[0].resume_id != journal_id
    assert json.loads(exported.stdout) == expected.model_dump(mode="json", exclude_none=True)
    assert [s.message for s in trajectory.steps if s.source == "user"] == prompts
    (call,) = [c for s in trajectory.steps for c in s.tool_calls or ()]
    assert call.arguments == {"command": "echo hi"}
    total = Usage()
    for summary in summaries:
        assert summary.usage is not None
        total = total + summary.usage
    assert trajectory.final_metrics is not None
    assert trajectory.final_metrics.total_prompt_tokens == total.prompt_tokens
    assert trajectory.final_metrics.total_cost_usd == total.cost_usd
    # Without --atif: the journal itself, record for record.
    lines = _cli(tmp_path, *directory, "export", journal_id)
    assert [json.loads(line) for line in lines.stdout.splitlines()] == store.records(journal_id)


def _damaged_message(store: JsonlSessionStore) -> None:
    store.append("s1", {"kind": "session", "engine": "claude"})
    store.append("s1", {"kind": "turn", "turn": 1, "prompt": "hi"})
    store.append("s1", {"kind": "message", "message": {"type": "text", "text": ["not", "text"]}})
    store.append("s1", {"kind": "closed", "turns": 1})


def _no_turns(store: JsonlSessionStore) -> None:
    store.append("s1", {"kind": "session", "engine": "claude"})
    store.append("s1", {"kind": "closed", "turns": 0})


def _journal_is_a_directory(store: JsonlSessionStore) -> None:
    store.path("s1").mkdir(parents=True)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_damaged_message, "session s1 is damaged at record 3: not a message (text: "),
        (_no_turns, "session s1 has no turns to export as a trajectory"),
        (_journal_is_a_directory, "cannot read session 's1'"),
    ],
)
def test_sessions_export_of_a_journal_it_cannot_read_is_one_line_and_exit_2(
    make: Any, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = JsonlSessionStore(tmp_path / "journals")
    make(store)
    store.close("s1")
    assert main(["sessions", "--dir", str(store.directory), "export", "s1", "--atif"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"agentrun: {expected}"), err


def test_sessions_export_from_a_directory_that_is_a_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_a_directory = tmp_path / "journals"
    not_a_directory.write_text("")
    assert main(["sessions", "--dir", str(not_a_directory), "export", "s1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("agentrun: cannot read session 's1' in "), err


# -- two processes: the second continues what the first started -----------------------------


def _first_run(home: Path, engine: str) -> str:
    done = _cli(home, "run", "--engine", engine, "--journal", "remember the word PINEAPPLE")
    assert done.returncode == 0, done.stderr
    (journal_id,) = _ids(home)
    return journal_id


@pytest.mark.agent
@pytest.mark.parametrize(
    "engine",
    # ACP: OpenCode's own and three presets (the adapters of Claude Code and Codex, and Gemini
    # CLI, resumed in the minute its session began: see agentrun/engines/acp/_gemini_chats.py).
    [
        "claude", "codex", "codex-app-server", "opencode", "opencode-acp", "claude-acp",
        "codex-acp", "gemini",
    ],
)  # fmt: skip
def test_sessions_resume_continues_a_session_from_another_process(
    engine: str, tmp_path: Path
) -> None:
    _require(engine)
    journal_id = _first_run(tmp_path, engine)
    requests = tmp_path / "second.jsonl"
    done = _cli(
        tmp_path, "sessions", "resume", journal_id, "what was the word?",
        "--dump-requests", str(requests),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "PINEAPPLE" in _requests(requests)  # the agent sent the first turn's context
    assert _ids(tmp_path) == [journal_id]  # the same journal goes on
    resumed = _resume_ids(tmp_path, journal_id)
    assert len(set(resumed)) == 1  # the same agent session
    listed = _cli(tmp_path, "sessions", "list", "--json")
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["id"] == journal_id and row["engine"] == engine and row["turns"] == 2
    exported = _cli(tmp_path, "sessions", "export", journal_id, "--atif")
    assert exported.returncode == 0, exported.stderr
    trajectory = Trajectory.model_validate_json(exported.stdout)  # the RFC's schema, strict
    prompts = [step.message for step in trajectory.steps if step.source == "user"]
    assert prompts[-1] == "what was the word?" and len(prompts) == 2, prompts


#: The model calls of the two processes' turns (one call each); every figure distinct.
CALLS = (
    ScriptUsage(input_tokens=1_204, cache_read_tokens=20_480, cache_write_tokens=3_072,
                output_tokens=52),
    ScriptUsage(input_tokens=96, cache_read_tokens=23_552, cache_write_tokens=310,
                output_tokens=27),
)  # fmt: skip


@pytest.mark.agent
@pytest.mark.parametrize("engine", ["claude", "codex-app-server", "opencode-acp"])
def test_a_resumed_session_goes_on_with_its_totals_in_a_new_process(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require(engine)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {"fake-model": {"input": 3.0, "output": 15.0}}}))
    monkeypatch.setenv("AGENTRUN_PRICE_CATALOG", str(prices))
    scripts = []
    for index, (text, usage) in enumerate(zip(("First.", "Second."), CALLS, strict=True)):
        scripts.append(tmp_path / f"script{index}.json")
        scripts[-1].write_text(Script(turns=[ModelTurn.text(text, usage=usage)]).model_dump_json())
    first = _cli(tmp_path, "run", "--engine", engine, "--journal", "--script", str(scripts[0]),
                 "say one thing")  # fmt: skip
    assert first.returncode == 0, first.stderr
    (journal_id,) = _ids(tmp_path)
    store = JsonlSessionStore(tmp_path / "journals")
    closed = [r for r in store.records(journal_id) if r["kind"] == "closed"]
    assert closed[-1]["totals"]["turns"] == 1, closed
    before = SessionTotals.model_validate(closed[-1]["totals"])
    done = _cli(tmp_path, "sessions", "resume", journal_id, "say another",
                "--script", str(scripts[1]))  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = store.records(journal_id)
    (last,) = [r for r in records if r["kind"] == "closed"][-1:]
    after = SessionTotals.model_validate(last["totals"])
    summary = TurnSummary.model_validate(
        [r for r in records if r["kind"] == "summary"][-1]["summary"]
    )
    # The second process started from the first's totals and added its own turn.
    assert after == before.with_turn(summary.usage, summary.side_usage)
    assert after.turns == 2 and after.usage is not None
    # What the server was scripted to serve, the two calls (figures every API carries).
    assert after.usage.output_tokens == sum(c.output_tokens for c in CALLS), after
    assert after.usage.cache_read_tokens == sum(c.cache_read_tokens for c in CALLS), after
    assert (after.cost_usd is None) == (after.unpriced_turns > 0), after
    listed = _cli(tmp_path, "sessions", "list", "--json")
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert SessionTotals.model_validate(row["totals"]) == after
    assert row["cost_usd"] == after.cost_usd
    show = _cli(tmp_path, "sessions", "show", journal_id)
    assert show.returncode == 0, show.stderr
    line = next(x for x in show.stdout.splitlines() if "totals:" in x)
    assert line.startswith("  totals: 2 turns;"), line
    assert f"{after.usage.output_tokens:,} output tokens" in line, line
    cost = "cost unknown" if after.cost_usd is None else f"${after.cost_usd:.4f}"
    assert cost in line, line


@pytest.mark.agent
@pytest.mark.parametrize("engine", ["claude", "codex-app-server"])
def test_sessions_fork_continues_a_copy_in_a_new_session(engine: str, tmp_path: Path) -> None:
    require_engine(_PROGRAM.get(engine, engine))
    journal_id = _first_run(tmp_path, engine)
    requests = tmp_path / "fork.jsonl"
    done = _cli(
        tmp_path, "sessions", "fork", journal_id, "what was the word?",
        "--dump-requests", str(requests),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "PINEAPPLE" in _requests(requests)
    ids = _ids(tmp_path)  # by name: two journals made in one second are in either order
    assert len(ids) == 2 and journal_id in ids
    original, forked = journal_id, next(i for i in ids if i != journal_id)
    (before,) = set(_resume_ids(tmp_path, original))
    after = _resume_ids(tmp_path, forked)
    assert after[0] == before and after[-1] != before  # the agent made a new session
    show = _cli(tmp_path, "sessions", "show", forked)
    assert f"forked from {journal_id}" in show.stdout
    # The copy's totals are its own turns': what the original spent is the original's.
    assert "totals: 1 turn;" in show.stdout, show.stdout


@pytest.mark.agent
def test_fork_where_the_agent_cannot_is_a_typed_error(tmp_path: Path) -> None:
    from agentrun import ForkNotSupportedError

    assert ForkNotSupportedError.error_code == "fork_not_supported"
    store = JsonlSessionStore(tmp_path / "journals")
    store.append("x1", {"kind": "session", "engine": "toy", "resume_id": "abc"})
    store.close("x1")
    done = _cli(tmp_path, "sessions", "fork", "x1", "hello")
    assert done.returncode == 2 and "toy cannot fork a session" in done.stderr


@pytest.mark.agent
@pytest.mark.parametrize("engine", ["claude", "codex"])
def test_offline_resume_works_across_runs(engine: str, tmp_path: Path) -> None:
    require_engine(engine)
    first = _cli(tmp_path, "run", "--engine", engine, "--json", "remember the word MANGO")
    assert first.returncode == 0, first.stderr
    results: list[dict[str, Any]] = [json.loads(line) for line in first.stdout.splitlines()]
    resume_id = next(m["resume_id"] for m in reversed(results) if m.get("resume_id"))
    requests = tmp_path / "second.jsonl"
    second = _cli(
        tmp_path, "run", "--engine", engine, "--resume", resume_id, "the word?",
        "--dump-requests", str(requests),
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "MANGO" in _requests(requests)


# -- pruning the kept offline homes ---------------------------------------------------------------

_DAY = 86400.0


def _aged(home: Path, days: float) -> None:
    """``home`` last used ``days`` ago (its lock file's time, as a run leaves it)."""
    then = time.time() - days * _DAY
    os.utime(home / ".lock", (then, then))


def _kept(homes: Path, resume_id: str, *, days: float) -> Path:
    with offline_home("claude", resume_id) as home:
        remember_home("claude", resume_id, home)
    _aged(home, days)
    return home


def test_prune_removes_unused_homes_and_never_one_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    homes = tmp_path / "homes"
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(homes))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "off")  # nothing pruned behind our back
    old = _kept(homes, "old", days=40)
    recent = _kept(homes, "recent", days=2)
    with offline_home("claude") as running:  # a session of 40 days that still runs
        _aged(running, 40)
        assert main(["sessions", "prune", "--older-than", "30d", "--dry-run"]) == 0
        assert capsys.readouterr().out.splitlines() == [
            f"would remove {old} (claude, unused for 40 days)",
            f"1 home would be removed from {homes} (unused for 30 days or more)",
        ]
        assert old.is_dir()
        # From another process, as a user would.
        done = _cli(tmp_path, "sessions", "prune", "--older-than", "30d", "--json")
        assert done.returncode == 0, done.stderr
        (row,) = [json.loads(line) for line in done.stdout.splitlines()]
        assert row["path"] == str(old) and row["removed"] and row["idle_seconds"] > 39 * _DAY
        assert not old.exists() and running.is_dir() and recent.is_dir()
        # Its index entry went with it: resuming it gets a fresh home.
        assert sorted(p.name for p in (homes / "claude/index").iterdir()) == ["recent"]
        with offline_home("claude", "old") as fresh, offline_home("claude", "recent") as same:
            assert fresh not in (old, running, recent) and same == recent
        # Not even an age of 0 removes a home in use.
        assert main(["sessions", "prune", "--older-than", "0"]) == 0
        assert running.is_dir() and not recent.exists()
    # Done, it was just used: only an age it has reached removes it. Without --older-than the
    # age is the configured one.
    assert main(["sessions", "prune", "--older-than", "1h"]) == 0 and running.is_dir()
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "0")
    assert main(["sessions", "prune"]) == 0 and not running.exists()


def test_a_new_home_prunes_the_unused_ones_at_most_once_a_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    homes = tmp_path / "homes"
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(homes))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "off")
    first = _kept(homes, "first", days=40)
    monkeypatch.delenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE")  # the default: 30 days
    young = _kept(homes, "young", days=29)
    assert not first.exists() and young.is_dir()
    second = _kept(homes, "second", days=40)
    with offline_home("claude"):
        assert second.is_dir()  # pruned a moment ago: not again for a day
    stamp = homes / ".last-prune"
    yesterday = time.time() - _DAY - 60
    os.utime(stamp, (yesterday, yesterday))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "12h")
    with offline_home("claude"):
        assert not second.exists() and not young.exists()
    with offline_home("claude", "young") as resumed:  # its index entry went too
        assert resumed != young


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--older-than", "3x"], {}, "agentrun sessions prune: argument --older-than: '3x' is"),
        (["--older-than", ""], {}, "agentrun sessions prune: argument --older-than: '' is"),
        (["--older-than=-1d"], {}, "agentrun sessions prune: argument --older-than: '-1d'"),
        (["--homes", "FILE"], {}, "agentrun: FILE is not a directory"),
        (
            [],
            {"AGENTRUN_OFFLINE_HOMES_MAX_AGE": "soon"},
            "agentrun: AGENTRUN_OFFLINE_HOMES_MAX_AGE",
        ),
    ],
)
def test_bad_input_to_prune_is_one_line_and_exit_2(
    args: list[str],
    env: dict[str, str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    homes = tmp_path / "homes"
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(homes))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    kept = _kept(homes, "kept", days=400) if not env else None
    argv = [str(a_file) if a == "FILE" else a for a in args]
    assert main(["sessions", "prune", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(expected.replace("FILE", str(a_file))), err
    assert kept is None or kept.is_dir()


def test_a_bad_max_age_stops_a_run_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(tmp_path / "homes"))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "a month")
    assert main(["run", "hello"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("agentrun: AGENTRUN_OFFLINE_HOMES_MAX_AGE: 'a month' is not an age")
    assert not (tmp_path / "homes").exists()
