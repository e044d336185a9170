"""Fan-out compare: workspace copies, change detection, the report; for real on every embedded
engine through the ``agentrun compare`` command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from agents_support import descendants, require_engine

from agentrun import CompareRun, ConfigurationError, compare
from agentrun._fleets.compare import (
    FilesChanged,
    _changes,
    _snapshot,
    compare_table,
    prepare_workspace,
)
from agentrun.cli import main
from agentrun.offline import Script, default_script

pytestmark = pytest.mark.anyio


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout


def test_a_git_workspace_becomes_a_detached_worktree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("a\n")
    _git(repo, "add", "a.txt")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    copy = prepare_workspace(repo, tmp_path / "copy")
    assert (copy / "a.txt").read_text() == "a\n"
    assert (copy / ".git").is_file()  # a worktree, not a clone
    assert _git(copy, "rev-parse", "HEAD") == _git(repo, "rev-parse", "HEAD")
    (copy / "a.txt").write_text("changed\n")
    assert (repo / "a.txt").read_text() == "a\n"


def test_a_plain_workspace_is_copied_and_none_is_empty(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "node_modules").mkdir(parents=True)
    (src / "keep.txt").write_text("k")
    (src / "node_modules" / "big.js").write_text("x")
    copy = prepare_workspace(src, tmp_path / "copy")
    assert (copy / "keep.txt").read_text() == "k"
    assert not (copy / "node_modules").exists()
    empty = prepare_workspace(None, tmp_path / "empty")
    assert empty.is_dir() and not any(empty.iterdir())
    with pytest.raises(ConfigurationError, match="not a directory"):
        prepare_workspace(tmp_path / "missing", tmp_path / "x")


def test_changes_are_measured_by_content(tmp_path: Path) -> None:
    (tmp_path / "same.txt").write_text("1")
    (tmp_path / "edit.txt").write_text("1")
    (tmp_path / "gone.txt").write_text("1")
    before = _snapshot(tmp_path)
    (tmp_path / "edit.txt").write_text("2")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "new.txt").write_text("3")
    changed = _changes(before, _snapshot(tmp_path))
    assert changed == FilesChanged(
        added=["sub/new.txt"], modified=["edit.txt"], deleted=["gone.txt"]
    )
    assert changed.stat() == "+1 ~1 -1"
    assert FilesChanged().stat() == "-"


def test_the_table_shows_every_run() -> None:
    runs = [
        CompareRun(engine="claude", model="m", ok=True, text="all good " * 20, tool_calls=2),
        CompareRun(engine="opencode", ok=False),
    ]
    table = compare_table(runs)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["engine", "model", "ok"]
    assert lines[1].split()[:4] == ["claude", "m", "yes", "2"]
    assert lines[2].split()[:3] == ["opencode", "-", "no"]
    assert lines[3].startswith("claude (m): all good") and lines[3].endswith("…")


async def test_bad_arguments_are_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown engine"):
        await compare("hi", ["nope"], scratch=tmp_path)
    with pytest.raises(ConfigurationError, match="empty"):
        await compare("  ", ["claude"], scratch=tmp_path)
    with pytest.raises(ConfigurationError, match="at least one"):
        await compare("hi", [], scratch=tmp_path)
    with pytest.raises(ConfigurationError, match="twice"):
        await compare("hi", ["claude", "claude"], scratch=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.agent
def test_compare_runs_every_embedded_engine_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_engine("claude")
    require_engine("opencode")
    script = tmp_path / "script.json"
    command = "echo made by the agent > made.txt"
    script.write_text(default_script(command).model_dump_json())
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "README").write_text("a project\n")
    before = descendants()

    code = main(
        [
            "compare",
            "--engines",
            "claude,opencode,opencode-acp",
            "--cwd",
            str(workspace),
            "--script",
            str(script),
            "--json",
            "--timeout",
            "120",
            "run the command",
        ]
    )
    out = capsys.readouterr().out
    runs = [CompareRun.model_validate(r) for r in json.loads(out)]
    assert code == 0, out
    assert [r.engine for r in runs] == ["claude", "opencode", "opencode-acp"]
    for run in runs:
        assert run.ok, run
        assert run.tool_calls == 1
        assert run.files_changed.added == ["made.txt"], run
        assert run.usage is not None and run.usage.output_tokens
        assert run.duration_s is not None and run.duration_s > 0
        assert run.context_peak is not None and 0 < run.context_peak < 1
        assert run.text
    # Each agent worked on its own copy: the source is untouched.
    assert sorted(p.name for p in workspace.iterdir()) == ["README"]
    assert descendants() <= before
    assert Script.model_validate_json(script.read_text()).turns  # the script file is intact
