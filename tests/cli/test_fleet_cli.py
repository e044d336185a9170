"""``agentrun fleet TASKS.jsonl``: real pinned agents on the embedded model server, each task in
its own workspace copy with its own scripted answers, then its check; results as JSON lines, a
journal and an ATIF trajectory per task; bad input named by line number before anything starts;
Ctrl-C leaves a valid results file and says how to resume; ``--resume`` runs only the rest."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentrun._cli.fleet import FleetCommandEvent, TaskResult, _resume_command
from agentrun.offline import ModelTurn, Script
from agentrun.trajectory import Trajectory
from tests.agents_support import require_engine


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
    )


def _write_tasks(path: Path, tasks: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(task) + "\n" for task in tasks), encoding="utf-8")
    return path


def _results(path: Path) -> list[TaskResult]:
    return [TaskResult.model_validate_json(line) for line in path.read_text().splitlines()]


def _script(path: Path, *turns: ModelTurn | str) -> str:
    path.write_text(Script.of(*turns).model_dump_json(), encoding="utf-8")
    return path.name


@pytest.mark.agent
def test_a_fleet_runs_each_task_in_a_copy_checks_it_and_writes_results_journals_trajectories(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    require_engine("codex")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("mine\n")
    maker = _script(
        tmp_path / "maker.json",
        ModelTurn.shell("echo made > made.txt", say="Making the file."),
        "I made made.txt.",
    )
    tasks = _write_tasks(
        tmp_path / "tasks.jsonl",
        [
            {"name": "makes", "engine": "claude", "prompt": "make made.txt",
             "workspace": "repo", "script": maker, "check": "test -f made.txt"},
            {"name": "misses", "engine": "claude", "prompt": "check the shell",
             "workspace": "repo", "check": ["test", "-f", "made.txt"]},
            {"name": "two-turns", "engine": "claude", "prompts": ["check the shell", "again"],
             "labels": {"row": "3"}},
            {"name": "on-codex", "engine": "codex", "prompt": "make made.txt",
             "workspace": "repo", "script": maker, "check": "test -f made.txt"},
            {"name": "slow-check", "engine": "claude", "prompt": "check the shell",
             "check": ["sh", "-c", "echo waiting; sleep 600"], "check_timeout": 1},
        ],
    )  # fmt: skip

    done = _cli(tmp_path, "fleet", str(tasks), "-j", "2", "--out", "out")

    assert done.returncode == 1, done.stderr  # two checks failed
    results = {r.task: r for r in _results(tmp_path / "out" / "results.jsonl")}
    assert sorted(results) == ["makes", "misses", "on-codex", "slow-check", "two-turns"]
    assert {name: r.ok for name, r in results.items()} == {
        "makes": True, "misses": False, "on-codex": True, "slow-check": False, "two-turns": True,
    }  # fmt: skip
    for name in ("makes", "on-codex"):
        check = results[name].check
        assert check is not None and check.ok and check.exit_code == 0
    missed = results["misses"].check
    assert missed is not None and not missed.ok and missed.exit_code == 1
    assert results["misses"].session.ok  # the agent's session itself was fine
    timed_out = results["slow-check"].check
    assert timed_out is not None and timed_out.timed_out and timed_out.exit_code is None
    assert timed_out.output == "waiting\n"  # what it printed before it was stopped
    assert results["two-turns"].check is None
    assert [t.turn for t in results["two-turns"].turns] == [1, 2]
    assert results["two-turns"].turns[0].labels == {"row": "3"}
    # The agents worked in copies: the user's workspace is as it was.
    assert sorted(p.name for p in repo.iterdir()) == ["README"]
    asked = {
        "makes": ["make made.txt"], "misses": ["check the shell"],
        "two-turns": ["check the shell", "again"], "on-codex": ["make made.txt"],
        "slow-check": ["check the shell"],
    }  # fmt: skip
    for name, result in results.items():
        assert result.engine == ("codex" if name == "on-codex" else "claude")
        assert result.trajectory is not None and result.journal_id is not None
        trajectory = Trajectory.model_validate_json((tmp_path / result.trajectory).read_text())
        prompts = [s.message for s in trajectory.steps if s.source == "user"]
        assert prompts == asked[name]
        journal = tmp_path / "out" / "journals" / name / f"{result.journal_id}.jsonl"
        assert journal.is_file()
    # Plain progress lines (standard error is not a terminal), then the summary on stdout.
    lines = done.stderr.splitlines()
    assert "started makes (claude)" in lines
    assert any(line.startswith("failed misses (claude): check exited 1 [fleet: ") for line in lines)
    assert not any("\x1b[" in line for line in lines)
    assert done.stdout.splitlines() == [
        f"5 tasks, 3 passed, 2 failed; results in {Path('out') / 'results.jsonl'}"
    ]
    # No workspace copy is left behind.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "journals", "results.jsonl", "trajectories",
    ]  # fmt: skip


_GOOD = {"name": "ok", "engine": "claude", "prompt": "hi"}


@pytest.mark.parametrize(
    ("second_line", "problem"),
    [
        ("{not json", "not JSON: Expecting property name enclosed in double quotes (column 2)"),
        ('["a list"]', "not a JSON object"),
        (json.dumps({**_GOOD, "name": "b", "promt": "hi"}), "unknown key 'promt' (known: name, "),
        (json.dumps({**_GOOD, "name": "b", "engine": "nope"}), "unknown engine 'nope' (known: "),
        (json.dumps({**_GOOD, "name": "b", "check": ["no-such-program-xyz"]}),
         "check command 'no-such-program-xyz': not found on PATH"),
        (json.dumps({**_GOOD, "name": "b", "check": "no-such-program-xyz --flag"}),
         "check command 'no-such-program-xyz': not found on PATH"),
        (json.dumps({**_GOOD, "name": "b", "check": "./check.sh"}),
         "check command './check.sh': no such executable file"),
        (json.dumps({**_GOOD, "name": "b", "workspace": "nowhere"}),
         "workspace nowhere: no such directory"),
        (json.dumps({**_GOOD, "name": "b", "script": "missing.json"}), "cannot read the script"),
        (json.dumps({**_GOOD, "name": "b", "timeout": -1}), "timeout: Input should be greater"),
        (json.dumps({**_GOOD, "name": "b", "options": {"claude.permision_mode": "plan"}}),
         "unknown engine option"),
        (json.dumps(_GOOD), "task 'ok' is also on line 1"),
        (json.dumps({"name": "b", "engine": "claude"}), "give 'prompt' or 'prompts'"),
    ],
)  # fmt: skip
def test_bad_input_is_named_by_its_line_and_nothing_starts(
    second_line: str, problem: str, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(_GOOD) + "\n" + second_line + "\n")
    done = _cli(tmp_path, "fleet", str(tasks), "--out", "out")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"agentrun: {tasks} line 2: "), line
    assert problem.lower() in line.lower(), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.jsonl"]  # nothing written


def test_an_existing_results_file_is_never_overwritten(tmp_path: Path) -> None:
    tasks = _write_tasks(tmp_path / "tasks.jsonl", [_GOOD])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text("mine\n")
    done = _cli(tmp_path, "fleet", str(tasks), "--out", "out")
    assert done.returncode == 2
    assert "continue it with --resume" in done.stderr
    assert (tmp_path / "out" / "results.jsonl").read_text() == "mine\n"
    resumed = _cli(tmp_path, "fleet", str(tasks), "--resume", "out/results.jsonl")
    assert resumed.returncode == 2
    assert resumed.stderr.splitlines() == [
        "agentrun: out/results.jsonl line 1: not a result line of 'agentrun fleet'"
    ]


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--per-engine", "claude=0"], "--per-engine 'claude=0' is not ENGINE=N (N at least 1)"),
        (["--per-engine", "nope=2"], "--per-engine: unknown engine 'nope' (known: "),
        (["--resume", "out/results.jsonl", "--out", "elsewhere"], "drop --out"),
        (["-j", "0"], "must be at least 1"),
        (["--pool", "0"], "must be at least 1"),
        (["--pool", "two"], "'two' is not a whole number"),
        (["--pool", "2"], "--pool: claude cannot share an agent process between tasks"),
        (["--pool", "2", "--sandbox"], "--pool with --sandbox: a sandbox is made for one"),
        (["--pool", "2", "--live", "--proxy"], "--pool with the proxy: each task reaches it"),
    ],
)
def test_bad_flags_are_one_line_and_nothing_starts(
    flags: list[str], problem: str, tmp_path: Path
) -> None:
    tasks = _write_tasks(tmp_path / "tasks.jsonl", [_GOOD])
    done = _cli(tmp_path, "fleet", str(tasks), *flags)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert problem in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.jsonl"]


def test_pooled_tasks_of_one_engine_must_share_their_script(tmp_path: Path) -> None:
    tasks = _write_tasks(
        tmp_path / "tasks.jsonl",
        [
            {"name": "a", "engine": "claude-acp", "prompt": "hi"},
            {"name": "b", "engine": "claude-acp", "prompt": "hi",
             "script": _script(tmp_path / "b.json", "other")},
        ],
    )  # fmt: skip
    done = _cli(tmp_path, "fleet", str(tasks), "--pool", "2")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "--pool: the claude-acp tasks 'a' and 'b' give different scripts" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "tasks.jsonl"]


def test_the_resume_command_keeps_pool(tmp_path: Path) -> None:
    from agentrun._cli.main import parser

    args = parser().parse_args(["fleet", "tasks.jsonl", "-j", "3", "--pool", "5"])
    words = shlex.split(_resume_command(args, tmp_path / "out" / "results.jsonl"))
    assert words[words.index("--pool") + 1] == "5", words


def _init_pids(journals: Path) -> list[int]:
    pids: list[int] = []
    for journal in sorted(journals.rglob("*.jsonl")):
        for text in journal.read_text().splitlines():
            record = json.loads(text)
            message = record.get("message") or {}
            if record.get("kind") == "message" and message.get("type") == "init":
                pids.append(message["process"]["pid"])
    return pids


@pytest.mark.agent
def test_pool_runs_the_tasks_of_an_engine_on_shared_processes(tmp_path: Path) -> None:
    require_engine("claude-acp")
    words = ("walrus", "zeppelin", "quokka", "gondola")
    script = _script(tmp_path / "words.json", *(f"{word} {word}" for word in words))
    names = [f"t{i}" for i in range(4)]
    tasks = _write_tasks(
        tmp_path / "tasks.jsonl",
        [{"name": n, "engine": "claude-acp", "prompt": "say your word", "script": script}
         for n in names],
    )  # fmt: skip
    done = _cli(tmp_path, "fleet", str(tasks), "-j", "4", "--pool", "2", "--out", "out")
    assert done.returncode == 0, done.stderr
    results = _results(tmp_path / "out" / "results.jsonl")
    assert sorted(r.task for r in results) == names
    assert all(r.ok for r in results), results
    said = [[w for w in words if w in r.turns[0].text] for r in results]
    assert sorted(s[0] for s in said if len(s) == 1) == sorted(words), said  # one each
    pids = _init_pids(tmp_path / "out" / "journals")
    assert len(pids) == 4 and len(set(pids)) == 2, pids  # two tasks on each process
    for pid in set(pids):  # nothing left once the fleet has ended
        assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), pid


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "Z"
    return stat[stat.rindex(")") + 2 :].split()[0]


def _slow(path: Path, delay: float = 0.5) -> str:
    """A model script whose answer takes ``delay`` s a chunk (about 60 chunks)."""
    words = " ".join(f"word{i}" for i in range(60))
    path.write_text(json.dumps([{"blocks": [{"type": "text", "text": words}],
                                 "chunk_delay": delay, "chunk_chars": 6}]))  # fmt: skip
    return path.name


@pytest.mark.agent
def test_ctrl_c_leaves_a_valid_results_file_and_resume_runs_only_the_rest(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    slow = _slow(tmp_path / "slow.json")
    names = ["quick", "slow-1", "slow-2", "slow-3"]
    _write_tasks(
        tmp_path / "tasks.jsonl",
        [{"name": "quick", "engine": "claude", "prompt": "check the shell", "check": "true"}]
        + [{"name": name, "engine": "claude", "prompt": "say many words", "script": slow}
           for name in names[1:]],
    )  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "agentrun.cli", "fleet", "tasks.jsonl", "-j", "2", "--json",
         "--out", "out"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    events: list[FleetCommandEvent] = []
    for line in child.stdout:
        events.append(FleetCommandEvent.model_validate_json(line))
        if events[-1].kind == "task_finished":  # its result line is written by now
            child.send_signal(signal.SIGINT)
            break
    rest, err = child.communicate(timeout=120)
    events += [FleetCommandEvent.model_validate_json(line) for line in rest.splitlines()]
    assert child.returncode == 130, err
    assert "Traceback" not in err
    first = _results(tmp_path / "out" / "results.jsonl")  # every line whole and valid
    done_first = [r.task for r in first]
    assert "quick" in done_first and len(done_first) == len(set(done_first)) < len(names)
    assert events[0].kind == "fleet_started" and events[-1].kind == "interrupted"
    last_line = err.strip().splitlines()[-1]
    assert last_line.startswith("agentrun: interrupted; ")
    resume = last_line.split("resume with: ", 1)[1]
    assert events[-1].resume == resume
    argv = shlex.split(resume)
    assert argv[:2] == ["agentrun", "fleet"] and "--resume" in argv and "-j" in argv

    # The tasks left need no longer be slow: the same words, at once (what is checked is which
    # tasks run again, not how long they take).
    _slow(tmp_path / slow, delay=0.0)
    again = _cli(tmp_path, *argv[1:])
    assert again.returncode == 0, again.stderr
    resumed = [FleetCommandEvent.model_validate_json(line) for line in again.stdout.splitlines()]
    assert resumed[0].kind == "fleet_started"
    assert resumed[0].progress.skipped == len(done_first)
    started = sorted(e.task or "" for e in resumed if e.kind == "task_started")
    assert started == sorted(set(names) - set(done_first))  # nothing done is run again
    final = [r.task for r in _results(tmp_path / "out" / "results.jsonl")]
    assert sorted(final) == sorted(names)  # each task once
    assert final[: len(done_first)] == done_first  # the first run's lines kept as they were


@pytest.mark.agent
def test_on_a_terminal_the_counts_are_redrawn_in_place(tmp_path: Path) -> None:
    require_engine("claude")
    tasks = _write_tasks(
        tmp_path / "tasks.jsonl",
        [{"name": f"t{i}", "engine": "claude", "prompt": "check the shell"} for i in range(2)],
    )
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "agentrun.cli", "fleet", str(tasks), "--out", "out"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env={k: v for k, v in os.environ.items() if k != "TERM"},
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    assert child.wait(timeout=120) == 0
    os.close(leader)
    text = seen.decode()
    assert "\x1b[" in text  # moves the cursor back over the counts to redraw them
    assert "fleet: 2/2 done · 0 running · 0 failed · " in text
    assert "  claude: 0/2 done" in text
    assert "passed t0 (claude)" in text and "passed t1 (claude)" in text


@pytest.mark.agent
def test_fleet_sandbox_runs_each_task_sandboxed(tmp_path: Path) -> None:
    """``fleet --sandbox``: the task's tool runs inside a sandbox (its host name) in the task's
    workspace copy, where the check finds it; with ``--live`` it goes through the metering proxy,
    which needs the provider's key: without it nothing starts."""
    from agentrun._wire.sandbox import sandbox_unavailable

    why = sandbox_unavailable()
    if why is not None:
        pytest.skip(why)
    require_engine("claude")
    maker = _script(tmp_path / "maker.json", ModelTurn.shell("hostname > made.txt"), "Done.")
    tasks = _write_tasks(
        tmp_path / "tasks.jsonl",
        [{"name": "inside", "engine": "claude", "prompt": "make made.txt", "script": maker,
          "check": "grep -qx agentrun-sandbox made.txt"}],
    )  # fmt: skip
    done = _cli(tmp_path, "fleet", str(tasks), "--sandbox", "--out", "out")
    assert done.returncode == 0, done.stderr
    (result,) = _results(tmp_path / "out" / "results.jsonl")
    assert result.ok and result.check is not None and result.check.ok, result
    live = _write_tasks(
        tmp_path / "live.jsonl", [{"name": "inside", "engine": "claude", "prompt": "hi"}]
    )
    without_key = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    refused = subprocess.run(
        [sys.executable, "-m", "agentrun.cli", "fleet", str(live), "--sandbox", "--live",
         "--out", "live"],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path, env=without_key,
    )  # fmt: skip
    assert refused.returncode == 2 and "set ANTHROPIC_API_KEY" in refused.stderr
    assert not (tmp_path / "live" / "results.jsonl").exists()


@pytest.mark.agent
def test_a_task_s_workspace_changes_and_diffs_are_on_its_result_line_and_its_page(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("mine\n")
    hostile = "\x1b[31m</script><script>alert(1)</script>"
    editor = _script(
        tmp_path / "editor.json",
        ModelTurn.shell(
            r"printf 'mine\nyours\n' > README && printf '\033[31m</script><script>alert(1)</script>\n' > '<script>x.txt'"
        ),
        "Edited.",
    )
    tasks = _write_tasks(
        tmp_path / "tasks.jsonl",
        [
            {"name": "edits", "engine": "claude", "prompt": "edit README", "workspace": "repo",
             "script": editor, "check": "touch checked.txt && test -f '<script>x.txt'"},
        ],
    )  # fmt: skip

    done = _cli(tmp_path, "fleet", str(tasks), "--out", "out")

    assert done.returncode == 0, done.stderr
    (result,) = _results(tmp_path / "out" / "results.jsonl")
    changes = result.changes
    assert changes is not None
    # What the check wrote (checked.txt) is not the agent's change: measured before it ran.
    assert (changes.added, changes.modified, changes.deleted) == (["<script>x.txt"], ["README"], [])
    diffs = {d.path: d for d in changes.diffs}
    assert diffs["README"].diff == "--- a/README\n+++ b/README\n@@ -1 +1,2 @@\n mine\n+yours\n"
    assert diffs["<script>x.txt"].diff.endswith(f"@@ -0,0 +1 @@\n+{hostile}\n")

    # The task's page shows them, as data the page inserts as text.
    from agentrun._cli.view import export_view

    html = export_view([tmp_path / "out"], tmp_path / "report.html").read_text()
    island = re.search(r'<script type="application/json" id="agentrun-data">(.*?)</script>', html)
    assert island is not None
    assert "<" not in island.group(1) and "\x1b" not in island.group(1)
    data = json.loads(island.group(1))
    (row,) = [r for r in data["runs"] if r["task"] == "edits"]
    session = data["all_sessions"][row["session"]]
    (item,) = [i for i in session["items"] if i["k"] == "diff"]
    assert (item["added"], item["modified"], item["deleted"]) == (["<script>x.txt"], ["README"], [])
    shown = {d["path"]: d for d in item["diffs"]}
    assert shown["<script>x.txt"]["diff"].endswith(f"+{hostile}\n")
    assert shown["README"]["diff"] == diffs["README"].diff
