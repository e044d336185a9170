"""Pruning the kept offline homes removes only homes agentrun made: never a directory of
someone else's, whatever ``--homes`` or ``$AGENTRUN_OFFLINE_HOMES`` names, never through a
symlink, and never a home made before homes carried agentrun's marker (those are listed)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from agentrun.cli import main
from agentrun.offline._homes import offline_home, remember_home

_DAY = 86400.0
_MARKER = ".agentrun-offline-home"
#: Named as agentrun names its homes (time and tag), so only the marker tells them apart.
_HOME_LIKE = "20240101T000000-deadbeef"


def _age_all(top: Path, days: float) -> None:
    """Everything under ``top`` (symlinks themselves, not their targets) last changed ``days``
    ago."""
    then = time.time() - days * _DAY
    for path in [top, *top.rglob("*")]:
        os.utime(path, (then, then), follow_symlinks=False)


def _tree(top: Path, *, leave_out: tuple[str, ...] = ()) -> dict[str, tuple[object, ...]]:
    """What is in ``top`` (but its entries named in ``leave_out``): each path's kind, time, and
    content or link target."""
    seen: dict[str, tuple[object, ...]] = {}
    for path in top.rglob("*"):
        if path.relative_to(top).parts[0] in leave_out:
            continue
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            what: object = ("link", os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            what = "dir"
        else:
            what = path.read_bytes()
        seen[str(path.relative_to(top))] = (what, info.st_mtime_ns)
    return seen


def _kept_home(resume_id: str, *, days: float) -> Path:
    """A home made (and indexed) by agentrun, last used ``days`` ago."""
    with offline_home("claude", resume_id) as home:
        remember_home("claude", resume_id, home)
    _age_all(home, days)
    return home


def _someone_elses(top: Path, outside: Path, a_marked_home: Path) -> None:
    """A directory of someone else's files, two levels deep as homes are, all of it 400 days
    old: a project, directories named like homes (one with a marker that is a symlink, one
    with a file named like the marker that says something else), leftovers named as an
    interrupted pruning leaves them, an ``index``, and symlinks to a real, marked home of
    agentrun's elsewhere (as an engine directory and as a home)."""
    project = top / "projects" / "myproj"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('mine')\n")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / ".lock").write_text("not agentrun's\n")
    for name in (_HOME_LIKE, f".new-{_HOME_LIKE}", f".gone-{_HOME_LIKE}-cafebabe"):
        (top / "projects" / name).mkdir()
        (top / "projects" / name / "notes.txt").write_text("mine\n")
    linked = top / "projects" / "20240102T000000-deadbeef"
    linked.mkdir()
    (linked / _MARKER).symlink_to(a_marked_home / _MARKER)
    forged = top / "projects" / "20240103T000000-deadbeef"
    forged.mkdir()
    (forged / _MARKER).write_text("a file of mine that happens to have this name\n")
    (top / "projects" / "index").mkdir()
    (top / "projects" / "index" / "entry").write_text("myproj-old\n")
    (top / "linked-engine").symlink_to(a_marked_home.parent, target_is_directory=True)
    (top / "projects" / "20240104T000000-deadbeef").symlink_to(a_marked_home)
    outside.mkdir(exist_ok=True)
    (top / "projects" / "myproj" / "to-outside").symlink_to(outside)
    _age_all(top, 400)


def test_prune_never_touches_a_directory_agentrun_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    homes = tmp_path / "homes"
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(homes))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "off")
    marked = _kept_home("elsewhere", days=400)  # agentrun's, but reached only through symlinks
    someone = tmp_path / "someone"
    _someone_elses(someone, tmp_path / "outside", marked)
    before = _tree(someone), _tree(homes), _tree(tmp_path / "outside")

    dry_run = ["--older-than", "0", "--dry-run"]
    assert main(["sessions", "prune", "--homes", str(someone), *dry_run]) == 0
    assert main(["sessions", "prune", "--homes", str(someone), "--older-than", "0"]) == 0
    assert main(["sessions", "prune", "--homes", str(someone), "--older-than", "0", "--json"]) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith(("would remove", "removed"))]
    assert '"removed": true' not in out and "0 homes would be removed" in out
    assert (_tree(someone), _tree(homes), _tree(tmp_path / "outside")) == before
    assert marked.is_dir()


def test_the_automatic_pruning_spares_what_the_variable_names_if_not_agentruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # $AGENTRUN_OFFLINE_HOMES pointed at a project: a run makes its home there, and prunes (the
    # default age, 30 days) only agentrun's own homes, here one of 40 days.
    homes = tmp_path / "homes"
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(homes))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "off")
    marked = _kept_home("elsewhere", days=400)
    project = tmp_path / "project"
    _someone_elses(project, tmp_path / "outside", marked)
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(project))
    old = _kept_home("old", days=40)
    ours = ("claude", ".last-prune")  # what the runs make there
    before = _tree(project, leave_out=ours), _tree(homes)
    monkeypatch.delenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE")
    with offline_home("claude") as new:
        assert not old.exists()  # agentrun's own old home went
        assert new.parent == project / "claude"
    assert (_tree(project, leave_out=ours), _tree(homes)) == before


def test_a_home_without_the_marker_is_listed_and_never_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A home made before homes carried the marker: the same layout, no marker.
    homes = tmp_path / "homes"
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(homes))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "0")  # prune at every new home
    with offline_home("claude", "legacy") as legacy:
        remember_home("claude", "legacy", legacy)
    (legacy / _MARKER).unlink(missing_ok=True)  # (older versions wrote none)
    (legacy / "agent").mkdir()
    (legacy / "agent" / "transcript.jsonl").write_text("{}\n")
    _age_all(legacy, 40)
    young = _kept_home("young", days=2)
    (homes / ".last-prune").unlink()
    with offline_home("claude"):  # the automatic pruning
        assert legacy.is_dir() and not young.exists()
    before = _tree(legacy)

    assert main(["sessions", "prune", "--older-than", "30d"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"kept {legacy} (claude, unused for 40 days): it has no marker of agentrun (a home of "
        "an older version?); delete it by hand if so",
        f"0 homes removed from {homes} (unused for 30 days or more)",
    ]
    assert main(["sessions", "prune", "--older-than", "0", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["path"], r["removed"], r.get("kept")) for r in rows if "kept" in r] == [
        (str(legacy), False, "no_marker")
    ]
    assert _tree(legacy) == before
    # Not listed once younger than the age asked for.
    assert main(["sessions", "prune", "--older-than", "60d"]) == 0
    assert str(legacy) not in capsys.readouterr().out
    # Its index entry stays: it can still be resumed.
    with offline_home("claude", "legacy") as resumed:
        assert resumed == legacy


def test_removing_a_home_follows_no_symlink_out_and_finishes_an_interrupted_pruning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    homes = tmp_path / "homes"
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(homes))
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES_MAX_AGE", "off")
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "keep.txt").write_text("keep\n")
    with offline_home("claude") as home:
        (home / "agent").mkdir()
        (home / "agent" / "to-outside").symlink_to(outside, target_is_directory=True)
        (home / "file-link").symlink_to(outside / "deep" / "keep.txt")
    # A pruning cut short after the home left its name, before the marker went.
    with offline_home("claude") as cut:
        (cut / "agent").mkdir()
        (cut / "agent" / "left.txt").write_text("x\n")
    gone = cut.with_name(f".gone-{cut.name}-0badcafe")
    cut.rename(gone)
    before = _tree(outside)

    assert main(["sessions", "prune", "--older-than", "0"]) == 0
    assert not home.exists() and not gone.exists()
    assert _tree(outside) == before
