"""Where ``agentrun run`` writes — its kept home, ``--atif``, ``--dump-requests`` — is checked
before the turn starts: a place that cannot be written is one line and exit 2, with nothing
started. One that stops being writable while the turn runs costs no traceback and no other
output: one line per file, and exit 1 (the turn had started)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agents_support import require_engine

from agentrun.offline import ModelTurn, Script
from agentrun.trajectory import Trajectory


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={
            **os.environ,
            "AGENTRUN_OFFLINE_HOMES": str(tmp_path / "homes"),
            "AGENTRUN_SESSIONS_DIR": str(tmp_path / "journals"),
            **env,
        },
    )


@pytest.mark.parametrize("option", ["--atif", "--dump-requests"])
@pytest.mark.parametrize("where", ["in-a-missing-directory", "a-directory"])
def test_an_output_that_cannot_be_written_is_refused_before_the_turn(
    option: str, where: str, tmp_path: Path
) -> None:
    if where == "a-directory":
        path, problem = tmp_path, "it is a directory"
    else:
        path = tmp_path / "nowhere" / "out.json"
        problem = f"no such directory {path.parent}"
    done = _cli(tmp_path, "run", option, str(path), "hi")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # no turn ran
    assert done.stderr.splitlines() == [f"agentrun: {option} {path}: {problem}"]
    assert not (tmp_path / "homes").exists()  # nothing was started


@pytest.mark.parametrize("where", ["under-a-file", "a-dangling-symlink"])
def test_a_homes_directory_that_cannot_be_made_is_refused_before_the_turn(
    where: str, tmp_path: Path
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    if where == "under-a-file":
        homes = a_file / "homes"
    else:
        homes = tmp_path / "link"
        homes.symlink_to(tmp_path / "nowhere" / "homes")
    done = _cli(tmp_path, "run", "hi", AGENTRUN_OFFLINE_HOMES=str(homes))
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    said = (
        f"agentrun: cannot make an offline home in {homes / 'claude'} ($AGENTRUN_OFFLINE_HOMES): "
    )
    assert line.startswith(said), line
    assert a_file.read_text() == "mine\n" and not (tmp_path / "nowhere").exists()


@pytest.mark.agent
def test_outputs_are_written_after_the_turn_and_one_lost_meanwhile_is_one_line_and_exit_1(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    work = tmp_path / "work"
    out = work / "out"
    out.mkdir(parents=True)
    script = tmp_path / "script.json"
    files = ("--atif", str(out / "t.json"), "--dump-requests", str(out / "requests.jsonl"))
    # The agent may change files in its working directory without asking.
    run = ("run", "--cwd", str(work), "--option", "claude.permission_mode=bypassPermissions")

    script.write_text(Script.of(ModelTurn.text("Nothing to do.")).model_dump_json())
    done = _cli(tmp_path, *run, "--script", str(script), *files, "hello")
    assert done.returncode == 0, done.stderr
    trajectory = Trajectory.model_validate_json((out / "t.json").read_text())
    assert [s.message for s in trajectory.steps if s.source == "user"] == ["hello"]
    requests = (out / "requests.jsonl").read_text().splitlines()
    assert requests and all(json.loads(line)["path"] for line in requests)

    # The agent itself removes the directory while the turn runs.
    removal = Script(turns=[ModelTurn.shell("rm -r out"), ModelTurn.text("Removed.")])
    script.write_text(removal.model_dump_json())
    done = _cli(tmp_path, *run, "--script", str(script), *files, "clean up")
    assert not out.exists()
    assert done.returncode == 1, done.stderr
    assert "turn 1 ok" in done.stdout and "Removed." in done.stdout  # the turn is shown
    assert done.stderr.splitlines() == [
        f"agentrun: cannot write the trajectory to {out / 't.json'}: No such file or directory",
        f"agentrun: cannot write the requests to {out / 'requests.jsonl'}: "
        "No such file or directory",
    ]
