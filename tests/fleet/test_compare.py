"""Fan-out compare: workspace copies, change detection, the report; for real on every embedded
engine through the ``agentrun compare`` command."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import anyio
import pytest
from agents_support import descendants, require_engine

from agentrun import (
    CompareRun,
    ConfigurationError,
    FleetEvent,
    TurnSummary,
    Usage,
    UsageSource,
    compare,
)
from agentrun._fleets.compare import (
    MAX_DIFF_CHARS,
    MAX_DIFF_FILE_BYTES,
    MAX_DIFFS_JSON_CHARS,
    MAX_LISTED_CHANGES,
    FileDiff,
    FilesChanged,
    compare_table,
    copy_workspace,
    prepare_workspace,
    snapshot_workspace,
    workspace_changes,
)
from agentrun._wire.sandbox import sandbox_unavailable
from agentrun.cli import main
from agentrun.offline import Script, default_script

pytestmark = pytest.mark.anyio


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout


def _tree_hash(root: Path) -> dict[str, str]:
    """Every entry below ``root`` (``.git`` included): type, mode and content or link target."""
    entries: dict[str, str] = {}
    for directory, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(directory) / name
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                what = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(info.st_mode):
                what = "link:" + os.readlink(path)
            else:
                what = f"type:{stat.S_IFMT(info.st_mode)}"
            entries[path.relative_to(root).as_posix()] = f"{oct(info.st_mode)} {what}"
    return entries


def _repo(path: Path) -> Path:
    """A repository with a commit, a staged and an unstaged change, an untracked file and a
    subdirectory ``pkg``."""
    (path / "pkg").mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.name", "owner")
    _git(path, "config", "user.email", "owner@example.com")
    (path / "a.txt").write_text("a\n")
    (path / "pkg" / "mod.py").write_text("x = 1\n")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "first")
    (path / "a.txt").write_text("a, changed\n")
    (path / "staged.txt").write_text("staged\n")
    _git(path, "add", "staged.txt")
    (path / "pkg" / "untracked.txt").write_text("new\n")
    return path


_AGENT_GIT = (
    "git tag x && git branch y && git config user.name z && echo > file && "
    "git add -A && git commit -qm agent && git gc -q --prune=now"
)


def test_a_git_workspace_is_an_independent_copy_the_agent_cannot_reach_through(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path / "repo")
    status = _git(repo, "status", "--porcelain")
    before = _tree_hash(repo)  # git status may refresh the index: hash after it

    copied = copy_workspace(repo / "pkg", tmp_path / "copy")
    assert copied.root == tmp_path / "copy" and copied.cwd == tmp_path / "copy" / "pkg"
    assert (copied.root / ".git").is_dir()  # a repository of its own, not a worktree
    # The uncommitted state came along: same HEAD, same changes, same untracked file.
    assert _git(copied.root, "rev-parse", "HEAD") == _git(repo, "rev-parse", "HEAD")
    assert _git(copied.root, "status", "--porcelain") == status
    assert (copied.cwd / "untracked.txt").read_text() == "new\n"

    subprocess.run(["sh", "-c", _AGENT_GIT], cwd=copied.cwd, check=True, capture_output=True)
    assert "x" in _git(copied.root, "tag", "-l").split()
    assert _tree_hash(repo) == before  # files, refs, objects, config: untouched


def test_a_linked_worktree_is_copied_into_a_repository_of_its_own(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    _git(repo, "commit", "-qm", "staged")
    _git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    (tmp_path / "linked" / "a.txt").write_text("edited in the worktree\n")
    before = _tree_hash(repo), _tree_hash(tmp_path / "linked")

    copied = copy_workspace(tmp_path / "linked", tmp_path / "copy")
    assert (copied.root / ".git").is_dir()
    assert _git(copied.root, "rev-parse", "HEAD") == _git(tmp_path / "linked", "rev-parse", "HEAD")
    assert _git(copied.root, "status", "--porcelain").split() == ["M", "a.txt"]
    assert _git(copied.root, "remote") == ""  # nothing to push back to
    subprocess.run(["sh", "-c", _AGENT_GIT], cwd=copied.cwd, check=True, capture_output=True)
    assert (_tree_hash(repo), _tree_hash(tmp_path / "linked")) == before


def test_pipes_sockets_and_devices_are_skipped_and_named(tmp_path: Path) -> None:
    for kind, workspace in (("plain", tmp_path / "plain"), ("git", _repo(tmp_path / "git"))):
        workspace.mkdir(exist_ok=True)
        (workspace / "sub").mkdir()
        os.mkfifo(workspace / "sub" / "pipe")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(workspace / "sock"))
        try:
            os.symlink("/dev/null", workspace / "null-link")
            (workspace / "kept.txt").write_text("k")
            copied = copy_workspace(workspace, tmp_path / f"copy-{kind}")
        finally:
            listener.close()
        assert sorted(copied.skipped) == ["sock (socket)", "sub/pipe (named pipe)"], kind
        assert (copied.cwd / "kept.txt").read_text() == "k"
        assert os.readlink(copied.cwd / "null-link") == "/dev/null"
        assert not (copied.cwd / "sub" / "pipe").exists()
        # A pipe a run makes is never opened when measuring the changes.
        os.mkfifo(copied.cwd / "made-by-agent")
        assert "made-by-agent" in snapshot_workspace(copied.root).digests
    table = compare_table([CompareRun(engine="claude", ok=True, skipped=copied.skipped)])
    assert table.splitlines()[-1] == (
        "not copied into the runs' workspaces: sock (socket), sub/pipe (named pipe)"
    )


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
    before = snapshot_workspace(tmp_path)
    (tmp_path / "edit.txt").write_text("2")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "new.txt").write_text("3\n")
    changed = workspace_changes(before)
    assert changed == FilesChanged(
        added=["sub/new.txt"],
        modified=["edit.txt"],
        deleted=["gone.txt"],
        diffs=[
            FileDiff(
                path="edit.txt",
                status="modified",
                diff="--- a/edit.txt\n+++ b/edit.txt\n@@ -1 +1 @@\n-1\n+2\n",
            ),
            FileDiff(
                path="sub/new.txt",
                status="added",
                diff="--- /dev/null\n+++ b/sub/new.txt\n@@ -0,0 +1 @@\n+3\n",
            ),
        ],
    )
    assert changed.stat() == "+1 ~1 -1"
    assert FilesChanged().stat() == "-"


def test_changes_and_diffs_are_bounded(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("b" * (MAX_DIFF_FILE_BYTES + 1))
    (tmp_path / "long.txt").write_text("")
    (tmp_path / "image.bin").write_bytes(b"\x89PNG\0\0")
    before = snapshot_workspace(tmp_path)
    (tmp_path / "big.txt").write_text("c" * (MAX_DIFF_FILE_BYTES + 1))
    (tmp_path / "image.bin").write_bytes(b"\x89PNG\0\1")
    long_text = "".join(f"line {n}\n" for n in range(5000))
    (tmp_path / "long.txt").write_text(long_text)
    for index in range(MAX_LISTED_CHANGES + 20):
        (tmp_path / f"new-{index:04}.txt").write_text(f"{index}\n" * 2000)
    changed = workspace_changes(before)
    # Listed up to the bound, the rest counted.
    listed = len(changed.added) + len(changed.modified) + len(changed.deleted)
    assert listed == MAX_LISTED_CHANGES and changed.more == 23
    assert changed.count == MAX_LISTED_CHANGES + 23
    assert changed.stat().endswith(" +23 more")
    diffs = {d.path: d for d in changed.diffs}
    # Oversized and binary files are named, not diffed.
    assert diffs["big.txt"].skipped == "too large" and not diffs["big.txt"].diff
    assert diffs["image.bin"].skipped == "binary" and not diffs["image.bin"].diff
    # One file's diff is cut, with how much more there was.
    whole = "--- a/long.txt\n+++ b/long.txt\n@@ -0,0 +1,5000 @@\n" + "".join(
        f"+line {n}\n" for n in range(5000)
    )
    assert diffs["long.txt"].diff == whole[:MAX_DIFF_CHARS]
    assert diffs["long.txt"].more_bytes == len(whole.encode()) - MAX_DIFF_CHARS
    # All of a run's diffs together stay within their bound; the files past it are named.
    spent = sum(len(json.dumps(d.diff)) for d in changed.diffs)
    assert spent <= MAX_DIFFS_JSON_CHARS
    assert any(d.skipped == "diff limit reached" for d in changed.diffs)
    assert len(changed.model_dump_json()) < 2 * MAX_DIFFS_JSON_CHARS


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


def test_the_table_marks_tokens_that_are_not_the_turns() -> None:
    def run(engine: str, source: UsageSource) -> CompareRun:
        usage = Usage(input_tokens=406, cache_read_tokens=100, output_tokens=27)
        return CompareRun(
            engine=engine, ok=True, usage=usage.model_copy(update={"usage_source": source})
        )

    lines = compare_table(
        [run("claude", "reported"), run("opencode-acp", "last_call")]
    ).splitlines()
    assert lines[1].split()[5:7] == ["506", "27"]
    assert "506 (last call)" in lines[2] and "27 (last call)" in lines[2]
    gemini = CompareRun(engine="gemini", ok=True, usage=Usage(usage_source="unavailable"))
    assert compare_table([gemini]).splitlines()[1].split()[5:7] == ["-", "-"]


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
        assert run.usage is not None
        if run.engine == "opencode-acp":
            # Its turn of two calls: the agent reports the turn's cost, the last call's tokens.
            assert run.usage.usage_source == "unavailable" and run.cost_usd is not None, run
        else:
            assert run.usage.output_tokens, run
        assert run.duration_s is not None and run.duration_s > 0
        assert run.context_peak is not None and 0 < run.context_peak < 1
        assert run.text
    # Each agent worked on its own copy: the source is untouched.
    assert sorted(p.name for p in workspace.iterdir()) == ["README"]
    assert descendants() <= before
    assert Script.model_validate_json(script.read_text()).turns  # the script file is intact


@pytest.mark.agent
def test_compare_sandbox_runs_each_agent_sandboxed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compare --sandbox``: each agent's tool runs inside a sandbox (its host name) and still
    writes its own copy of the workspace; ``--live`` with it goes through the metering proxy,
    which needs the provider's key before anything starts."""
    why = sandbox_unavailable()
    if why is not None:
        pytest.skip(why)
    require_engine("claude")
    require_engine("codex")
    script = tmp_path / "script.json"
    script.write_text(default_script("hostname > made.txt").model_dump_json())
    code = main(
        [
            "compare", "--engines", "claude,codex", "--sandbox", "--script", str(script),
            "--json", "--keep", "--timeout", "120", "run the command",
        ]
    )  # fmt: skip
    runs = [CompareRun.model_validate(r) for r in json.loads(capsys.readouterr().out)]
    assert code == 0, runs
    made = [(Path(r.workspace or "/nonexistent") / "made.txt") for r in runs]
    written = [path.read_text() if path.is_file() else None for path in made]
    shutil.rmtree(made[0].parents[2], ignore_errors=True)  # --keep's scratch
    for run in runs:
        assert run.ok and run.files_changed.added == ["made.txt"], run
    assert written == ["agentrun-sandbox\n"] * len(runs)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert main(["compare", "--engines", "claude", "--sandbox", "--live", "hi"]) == 2
    assert "set ANTHROPIC_API_KEY" in capsys.readouterr().err


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


@pytest.mark.agent
async def test_compare_in_a_repository_subdirectory_leaves_nothing_behind(tmp_path: Path) -> None:
    """Real agents run git in their copies: the user's repository is byte-for-byte unchanged,
    each agent ran in the same subdirectory of its copy, the pipe in the repository was skipped,
    and no process, file descriptor or file of the runs is left."""
    require_engine("claude")
    require_engine("opencode")
    repo = _repo(tmp_path / "repo")
    os.mkfifo(repo / "pkg" / "pipe")
    _git(repo, "status")  # let git refresh its index before the hash
    before = _tree_hash(repo)
    scratch = tmp_path / "scratch"
    command = f"pwd && {_AGENT_GIT} && git tag -l && git config user.name"
    summaries: dict[str, TurnSummary] = {}

    def seen(event: FleetEvent) -> None:
        if event.kind == "turn_finished" and event.summary is not None:
            summaries[event.task] = event.summary

    procs, fds = descendants(), _open_fds()
    runs = await compare(
        "run the command",
        ["claude", "opencode"],
        workspace=repo / "pkg",
        scratch=scratch,
        script=default_script(command),
        timeout=120,
        on_event=seen,
    )
    for run in runs:
        assert run.ok, run
        assert run.skipped == ["pkg/pipe (named pipe)"]
        assert run.files_changed.added == ["pkg/file"], run
        (call,) = summaries[run.engine].tool_calls
        output = json.dumps(call.output)
        # In its copy's pkg/, where the agent's tag, branch, config and commit all landed.
        assert f"scratch/run-{runs.index(run)}/workspace/pkg" in output, output
        assert "\\nx" in output or "x\\n" in output, output
        assert "z" in output, output
    assert _tree_hash(repo) == before
    assert list(scratch.iterdir()) == []
    deadline = anyio.current_time() + 10
    while descendants() - procs and anyio.current_time() < deadline:
        await anyio.sleep(0.1)
    assert descendants() - procs == set(), "agent processes outlived the compare"
    assert _open_fds() - fds == set(), "file descriptors leaked"


def test_snapshots_of_copies_of_one_workspace_share_their_contents(tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.txt").write_text("the same text\n")
    shared: dict[str, bytes] = {}
    one = snapshot_workspace(tmp_path / "one", shared)
    two = snapshot_workspace(tmp_path / "two", shared)
    assert one.contents["a.txt"] is two.contents["a.txt"]
    assert len(shared) == 1
