"""Fan-out compare: the same prompt on several engines (or models), side by side.

Each run gets its own copy of the workspace — for a git repository a copy of the whole work tree
(uncommitted changes included) with a copy of its ``.git``, so an agent's commits, tags, branches
and config land in the copy and never in the user's repository; a plain copy otherwise; an empty
directory when there is none — so the agents cannot see or undo each other's changes, and the run
starts in the same subdirectory the workspace names. Named pipes, sockets and device files are not
copied (each run reports them in ``CompareRun.skipped``). The runs go through one :class:`Fleet`;
what each changed is measured by comparing the copy's files before and after (content hashes),
so the same figure is reported whatever the agent did to git.

Offline (the default), every run talks to a model server of its own with the same script:
no account is needed and the agents answer deterministically. ``live=True`` uses each agent's
own configuration and credentials.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field

from .._turns.engine import Engine
from .._vocabulary.errors import ConfigurationError
from .._vocabulary.messages import ErrorInfo, Usage
from .._vocabulary.metering import MeteredUsage
from .._vocabulary.options import SessionOptions
from .._vocabulary.sandbox import Sandbox
from ..offline._proxy import CredentialProxy
from .fleet import Fleet, FleetEvent, FleetTask

__all__ = [
    "CompareRun",
    "FileDiff",
    "FilesChanged",
    "Workspace",
    "WorkspaceSnapshot",
    "compare",
    "compare_table",
    "copy_workspace",
    "prepare_workspace",
    "snapshot_workspace",
    "workspace_changes",
]

#: Directories never copied, nor hashed when measuring what a run changed (a git repository's
#: own ``.git`` is copied separately).
_SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})


#: The most changed paths a :class:`FilesChanged` lists; the others are counted in ``more``.
MAX_LISTED_CHANGES = 100
#: A file larger than this (before or after the run) is named among the diffs, not diffed; a
#: snapshot keeps the text of files up to this size.
MAX_DIFF_FILE_BYTES = 64 * 1024
#: What a snapshot keeps of the workspace's file contents at most (for the diffs).
MAX_SNAPSHOT_TEXT_BYTES = 4 * 1024 * 1024
#: The most characters of one file's unified diff kept (the rest: ``more_bytes``).
MAX_DIFF_CHARS = 8 * 1024
#: The most characters of all of one run's diffs, counted as JSON (escapes included), so a
#: result line stays well under what a reader of results accepts.
MAX_DIFFS_JSON_CHARS = 96 * 1024


class FileDiff(BaseModel):
    """The unified diff of one added or modified file, or why there is none."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    path: str
    status: Literal["added", "modified"]
    #: ``diff -u`` text (``a/PATH``, ``b/PATH``), cut at :data:`MAX_DIFF_CHARS`.
    diff: str = ""
    #: UTF-8 bytes of the diff cut off.
    more_bytes: int = 0
    #: Why it is not diffed: ``"binary"``, ``"too large"`` (over :data:`MAX_DIFF_FILE_BYTES`),
    #: ``"not kept"`` (the snapshot's budget was spent), ``"unreadable"``, ``"not a regular
    #: file"`` or ``"diff limit reached"`` (the run's diffs hold :data:`MAX_DIFFS_JSON_CHARS`).
    skipped: str | None = None


class FilesChanged(BaseModel):
    """What a run changed in its copy of the workspace: paths relative to the copy's top,
    at most :data:`MAX_LISTED_CHANGES` of them listed (``more`` counts the rest), and a unified
    diff per added or modified text file."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    added: list[str] = Field(default_factory=list[str])
    modified: list[str] = Field(default_factory=list[str])
    deleted: list[str] = Field(default_factory=list[str])
    #: Changed paths not listed (over :data:`MAX_LISTED_CHANGES`).
    more: int = 0
    diffs: list[FileDiff] = Field(default_factory=list[FileDiff])

    @property
    def count(self) -> int:
        return len(self.added) + len(self.modified) + len(self.deleted) + self.more

    def stat(self) -> str:
        """``+added ~modified -deleted`` (``-`` when nothing changed)."""
        if not self.count:
            return "-"
        more = f" +{self.more} more" if self.more else ""
        return f"+{len(self.added)} ~{len(self.modified)} -{len(self.deleted)}{more}"


class CompareRun(BaseModel):
    """One engine (and model) of a comparison: the machine-readable report row."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    engine: str
    model: str | None = None
    ok: bool
    text: str = ""
    usage: Usage | None = None
    cost_usd: float | None = None
    #: The turn's wall time (from the prompt to the result).
    duration_s: float | None = None
    tool_calls: int = 0
    context_peak: float | None = None
    files_changed: FilesChanged = Field(default_factory=FilesChanged)
    workspace: str | None = None
    #: Files of the workspace that were not copied (``"path (named pipe)"``): named pipes,
    #: sockets, device files and files that could not be read.
    skipped: list[str] = Field(default_factory=list[str])
    error: ErrorInfo | None = None
    #: What the metering proxy counted for the run, beside ``usage`` (``compare(proxy=...)``);
    #: left out of the JSON when there is none.
    metered: MeteredUsage | None = Field(default=None, exclude_if=lambda value: value is None)


def _git(cwd: Path, *args: str) -> str | None:
    """``git -C cwd args``'s output, or ``None`` when git is missing or the command failed."""
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass
class Workspace:
    """A run's private copy of a workspace."""

    #: The copy (for a git repository: of its top-level directory).
    root: Path
    #: Where the run starts: the same subdirectory of the copy that the workspace named.
    cwd: Path
    #: What was not copied (``"path (named pipe)"``), relative to ``root``.
    skipped: list[str] = field(default_factory=list[str])


def copy_workspace(source: str | Path | None, dest: str | Path) -> Workspace:
    """A private copy of ``source`` at ``dest``.

    In a git repository the whole work tree is copied (uncommitted and untracked files included,
    not ``node_modules``/``.venv``/``__pycache__``) with a copy of the repository's ``.git``, so
    git commands in the copy never reach the original; ``cwd`` is the copy's counterpart of
    ``source`` (a subdirectory of the repository stays one). Otherwise ``source`` is copied the
    same way without ``.git``; ``None`` gives an empty directory. Named pipes, sockets, device
    files and unreadable files are not copied but listed in ``skipped``. The source is only read.
    """
    dest = Path(dest)
    if source is None:
        dest.mkdir(parents=True)
        return Workspace(dest, dest)
    source = Path(source).resolve()
    if not source.is_dir():
        raise ConfigurationError(f"workspace {str(source)!r} is not a directory", option="cwd")
    top = _git(source, "rev-parse", "--show-toplevel")
    if top is None or _git(source, "rev-parse", "--is-inside-work-tree") != "true":
        skipped: list[str] = []
        _copy_tree(source, dest, skipped, _SKIP_DIRS)
        return Workspace(dest, dest, skipped)
    top_path = Path(top).resolve()
    skipped = []
    git_dir = _git(source, "rev-parse", "--absolute-git-dir")
    common = _git(source, "rev-parse", "--path-format=absolute", "--git-common-dir")
    own_git = top_path / ".git"
    if (
        git_dir is not None
        and own_git.is_dir()
        and not own_git.is_symlink()
        and Path(git_dir).resolve() == own_git.resolve()
        and common is not None
        and Path(common).resolve() == own_git.resolve()
    ):
        # The usual repository: its .git, copied whole (refs, objects, config, index, stash).
        _copy_tree(own_git, dest / ".git", skipped, frozenset(), relative_to=top_path)
        _copy_tree(top_path, dest, skipped, _SKIP_DIRS)
    else:
        # A linked worktree or a submodule, whose .git points elsewhere: an independent clone
        # detached at the same commit, with no remote leading back to the original.
        _clone(top_path, dest)
        _copy_tree(top_path, dest, skipped, _SKIP_DIRS)
        head = _git(top_path, "rev-parse", "--verify", "-q", "HEAD")
        if head is not None:
            _git(dest, "update-ref", "--no-deref", "HEAD", head)
            _git(dest, "reset", "-q")
    cwd = dest / source.relative_to(top_path)
    cwd.mkdir(parents=True, exist_ok=True)
    return Workspace(dest, cwd, skipped)


def prepare_workspace(source: str | Path | None, dest: str | Path) -> Path:
    """A private copy of ``source`` at ``dest`` (see :func:`copy_workspace`); the directory a
    run starts in."""
    return copy_workspace(source, dest).cwd


def _clone(top: Path, dest: Path) -> None:
    done = subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", "--no-checkout", str(top), str(dest)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        # An empty repository, or a git that refuses: a repository of the copy's own.
        dest.mkdir(parents=True, exist_ok=True)
        _git(dest, "init", "-q")
        return
    _git(dest, "remote", "remove", "origin")


_SPECIAL = (
    (stat.S_ISFIFO, "named pipe"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


def _copy_tree(
    source: Path,
    dest: Path,
    skipped: list[str],
    skip_dirs: frozenset[str],
    *,
    relative_to: Path | None = None,
) -> None:
    """Copy ``source`` into ``dest`` (created if missing): directories, regular files (with
    their modes) and symbolic links (as links); anything else is named in ``skipped``."""
    base = relative_to or source
    dest.mkdir(parents=True, exist_ok=True)
    try:
        entries = sorted(os.scandir(source), key=lambda e: e.name)
    except OSError as exc:
        skipped.append(f"{_relative(source, base)}/ (cannot be read: {exc.strerror})")
        return
    for entry in entries:
        path = Path(entry.path)
        target = dest / entry.name
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(path), target)
            elif stat.S_ISDIR(info.st_mode):
                if entry.name not in skip_dirs:
                    _copy_tree(path, target, skipped, skip_dirs, relative_to=base)
            elif stat.S_ISREG(info.st_mode):
                shutil.copy2(path, target, follow_symlinks=False)
            else:
                kind = next((name for test, name in _SPECIAL if test(info.st_mode)), "special")
                skipped.append(f"{_relative(path, base)} ({kind})")
        except OSError as exc:
            skipped.append(f"{_relative(path, base)} (cannot be copied: {exc.strerror or exc})")
    with contextlib.suppress(OSError):
        shutil.copystat(source, dest, follow_symlinks=False)
        # The copy stays the run's to change and to remove, whatever the source's modes were.
        os.chmod(dest, stat.S_IMODE(os.lstat(dest).st_mode) | stat.S_IRWXU)


def _relative(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def _remove_tree(path: Path) -> None:
    """Remove ``path`` entirely, even where a run made directories read-only."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    for directory, dirs, _ in os.walk(path):
        for name in dirs:
            child = os.path.join(directory, name)
            if not os.path.islink(child):
                with contextlib.suppress(OSError):
                    os.chmod(child, stat.S_IMODE(os.lstat(child).st_mode) | stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class WorkspaceSnapshot:
    """A copy's files at one moment: a digest per path, and the text of the small ones."""

    root: Path
    digests: dict[str, str] = field(default_factory=dict[str, str])
    #: The contents of regular files up to :data:`MAX_DIFF_FILE_BYTES`, within
    #: :data:`MAX_SNAPSHOT_TEXT_BYTES` in all (what a diff starts from).
    contents: dict[str, bytes] = field(default_factory=dict[str, bytes])
    #: Regular files over :data:`MAX_DIFF_FILE_BYTES`.
    large: set[str] = field(default_factory=set[str])


def snapshot_workspace(root: Path, shared: dict[str, bytes] | None = None) -> WorkspaceSnapshot:
    """What ``root`` holds now (``.git``, ``node_modules``, ``.venv``, ``__pycache__`` left
    out): taken before a run starts, then given to :func:`workspace_changes` after it.
    Snapshots given the same ``shared`` dictionary hold each content once (many copies of
    one workspace cost the memory of one)."""
    snap = WorkspaceSnapshot(root)
    kept = 0
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(names):
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            try:
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    digest = "link:" + os.readlink(path)
                elif stat.S_ISREG(mode):
                    data = path.read_bytes()
                    digest = hashlib.sha256(data).hexdigest()
                    if len(data) > MAX_DIFF_FILE_BYTES:
                        snap.large.add(relative)
                    elif kept + len(data) <= MAX_SNAPSHOT_TEXT_BYTES:
                        if shared is not None:
                            data = shared.setdefault(digest, data)
                        snap.contents[relative] = data
                        kept += len(data)
                else:
                    # A pipe or socket a run made: never opened (reading a pipe would block).
                    digest = f"special:{stat.S_IFMT(mode)}"
            except OSError:
                continue
            snap.digests[relative] = digest
    return snap


def workspace_changes(before: WorkspaceSnapshot, root: Path | None = None) -> FilesChanged:
    """What changed in ``root`` (by default the snapshot's) since ``before``: the paths added,
    modified and deleted, and a bounded unified diff per added or modified text file."""
    after = snapshot_workspace(before.root if root is None else root)
    old, new = before.digests, after.digests
    added = sorted(set(new) - set(old))
    modified = sorted(p for p in old.keys() & new.keys() if old[p] != new[p])
    deleted = sorted(set(old) - set(new))
    total = len(added) + len(modified) + len(deleted)
    # Over the bound, the files the run edited are listed first, then those it made.
    room = MAX_LISTED_CHANGES
    kept: dict[str, list[str]] = {}
    for name, paths in (("modified", modified), ("added", added), ("deleted", deleted)):
        kept[name] = paths[:room]
        room -= len(kept[name])
    listed = [kept["added"], kept["modified"], kept["deleted"]]
    diffs: list[FileDiff] = []
    budget = MAX_DIFFS_JSON_CHARS
    statuses: tuple[tuple[Literal["added", "modified"], list[str]], ...] = (
        ("modified", listed[1]),
        ("added", listed[0]),
    )
    for status, paths in statuses:
        for path in paths:
            one = _file_diff(path, status, before, after, budget)
            budget -= len(json.dumps(one.diff)) + len(json.dumps(path))
            diffs.append(one)
    diffs.sort(key=lambda d: d.path)
    return FilesChanged(
        added=listed[0],
        modified=listed[1],
        deleted=listed[2],
        more=total - sum(len(paths) for paths in listed),
        diffs=diffs,
    )


def _file_diff(
    path: str,
    status: Literal["added", "modified"],
    before: WorkspaceSnapshot,
    after: WorkspaceSnapshot,
    budget: int,
) -> FileDiff:
    def skipped(reason: str) -> FileDiff:
        return FileDiff(path=path, status=status, skipped=reason)

    if budget <= 0:
        return skipped("diff limit reached")
    snaps = (before, after) if status == "modified" else (after,)
    for snap in snaps:
        if snap.digests.get(path, "").startswith(("link:", "special:")):
            return skipped("not a regular file")
    if any(path in snap.large for snap in snaps):
        return skipped("too large")
    if any(path not in snap.contents for snap in snaps):
        return skipped("not kept")
    old_bytes = before.contents.get(path, b"") if status == "modified" else b""
    new_bytes = after.contents[path]
    if b"\0" in old_bytes or b"\0" in new_bytes:
        return skipped("binary")
    try:
        old_text = old_bytes.decode("utf-8")
        new_text = new_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return skipped("binary")
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile="/dev/null" if status == "added" else f"a/{path}",
        tofile=f"b/{path}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    cut = text[:MAX_DIFF_CHARS]
    # The run's budget counts the diff as JSON writes it (a control character takes six).
    while cut and len(json.dumps(cut)) > budget:
        cut = cut[: max(0, len(cut) * budget // len(json.dumps(cut)) - 1)]
    if not cut and text:
        return skipped("diff limit reached")
    more = len(text[len(cut) :].encode("utf-8"))
    return FileDiff(path=path, status=status, diff=cut, more_bytes=more)


async def compare(
    prompt: str,
    engines: Sequence[str],
    *,
    models: Sequence[str | None] = (None,),
    workspace: str | Path | None = None,
    live: bool = False,
    timeout: float | None = None,
    hitl: bool | None = False,
    scratch: str | Path,
    keep_workspaces: bool = False,
    script: Any = None,
    on_event: Callable[[FleetEvent], Any] | None = None,
    sandbox: Sandbox | bool | None = None,
    proxy: CredentialProxy | None = None,
) -> list[CompareRun]:
    """Run ``prompt`` once per engine and model, each in its own copy of ``workspace`` under the
    ``scratch`` directory, and report them side by side (in the order given).

    Each agent works in a private copy, so by default its tool uses are approved
    (``hitl=False``); ``hitl=None`` keeps each agent's own permission policy, ``True`` denies
    what would need a person (a comparison has nobody to ask).
    ``script`` is a :class:`~agentrun.offline.Script` for the offline model servers (default:
    the built-in one). Raises :class:`ConfigurationError` for an unknown engine or an engine
    with no embedded configuration before anything starts.
    ``sandbox`` (``True`` or a :class:`~agentrun.Sandbox`) runs each agent sandboxed, its copy
    of the workspace and its own home the only files it may write.
    ``proxy`` (a running :class:`~agentrun.CredentialProxy`, with ``live``) runs every agent
    in its embedded configuration pointed at the proxy, each with a client of its own
    (named as its row; the runs' ``metered`` figures), all under the proxy's one budget;
    a live sandboxed agent needs it (``live`` and ``sandbox`` without it is a
    :class:`ConfigurationError`), and a proxy on a Unix socket needs ``sandbox``.
    """
    if not prompt.strip():
        raise ConfigurationError("the prompt is empty", option="prompt")
    if not engines:
        raise ConfigurationError("name at least one engine", option="engines")
    from ..engines._registry import engine_names

    known = set(engine_names())
    for name in engines:
        if name not in known:
            raise ConfigurationError(f"unknown engine {name!r}", option="engines")
    if sandbox and live and proxy is None:
        raise ConfigurationError(
            "a live sandboxed agent reaches its model API through the metering proxy only: "
            "give proxy= (agentrun compare --live --sandbox starts one)",
            option="sandbox",
        )
    if proxy is not None and not live:
        raise ConfigurationError(
            "proxy= is for live runs (the embedded model server needs no key)", option="proxy"
        )
    scratch = Path(scratch)
    variants = [(engine, model) for engine in engines for model in (models or (None,))]
    labels = [engine if model is None else f"{engine}:{model}" for engine, model in variants]
    if len(set(labels)) != len(labels):
        raise ConfigurationError("an engine and model pair is named twice", option="engines")

    async with AsyncExitStack() as stack:
        engines_by_task: dict[str, Engine] = {}
        tasks: list[FleetTask] = []
        copies: list[Workspace] = []
        for index, ((engine_name, model), label) in enumerate(zip(variants, labels, strict=True)):
            run_dir = scratch / f"run-{index}"
            if not keep_workspaces:
                # Everything of the run (its copy, the agent's offline configuration) goes.
                stack.callback(_remove_tree, run_dir)
            copied = await anyio.to_thread.run_sync(
                copy_workspace, workspace, run_dir / "workspace"
            )
            copies.append(copied)
            copy = copied.cwd
            if proxy is not None:
                from ..offline import embedded_engine

                client = proxy.client(label)
                url, routed = proxy.route(sandbox)
                engine, options = embedded_engine(
                    engine_name,
                    url,
                    run_dir / "agent",
                    cwd=str(copy),
                    model=model,
                    hitl=hitl,
                    sandbox=routed,
                    api_key=client.key,
                    meter=client,
                )
            elif live:
                from ..engines._registry import get_engine

                engine = get_engine(engine_name)
                engine.check()
                options = SessionOptions(cwd=str(copy), model=model, hitl=hitl)
            else:
                from ..offline import ModelServer, embedded_engine

                server = await stack.enter_async_context(ModelServer(script))
                engine, options = embedded_engine(
                    engine_name,
                    server.url,
                    run_dir / "agent",
                    cwd=str(copy),
                    model=model,
                    hitl=hitl,
                    sandbox=sandbox,
                )
            engines_by_task[label] = engine
            tasks.append(
                FleetTask(
                    engine=engine_name,
                    prompts=(prompt,),
                    options=options,
                    name=label,
                    timeout=timeout,
                )
            )
        contents: dict[str, bytes] = {}
        before = [
            await anyio.to_thread.run_sync(snapshot_workspace, copy.root, contents)
            for copy in copies
        ]
        fleet = Fleet(
            limit=len(tasks),
            engine_factory=lambda task: engines_by_task[task.name or ""],
            proxy=proxy,
        )
        result = await fleet.run(tasks, on_event=on_event)

        changes = {
            label: await anyio.to_thread.run_sync(workspace_changes, snap)
            for label, snap in zip(labels, before, strict=True)
        }
        turns = {record.task: record for record in result.turns}
        runs: list[CompareRun] = []
        for label, (engine_name, model), session, copy in zip(
            labels, variants, result.sessions, copies, strict=True
        ):
            turn = turns.get(label)
            error = session.error
            if error is None and turn is not None and turn.errors and not turn.ok:
                error = turn.errors[-1]
            runs.append(
                CompareRun(
                    engine=engine_name,
                    model=(turn.model if turn is not None else None) or model,
                    ok=session.ok,
                    text=turn.text if turn is not None else "",
                    usage=turn.usage if turn is not None else None,
                    cost_usd=turn.cost_usd if turn is not None else None,
                    duration_s=turn.duration_s if turn is not None else None,
                    tool_calls=turn.tool_calls if turn is not None else 0,
                    context_peak=turn.context_peak if turn is not None else None,
                    files_changed=changes[label],
                    workspace=str(copy.cwd) if keep_workspaces else None,
                    skipped=copy.skipped,
                    error=error,
                    metered=turn.metered if turn is not None else None,
                )
            )
        return runs


def _tokens(usage: Usage | None, figure: int | None) -> str:
    """A token figure of the table: ``-`` when nobody knows the turn's tokens, marked ``(last
    call)`` where the agent reported only the turn's last model call (not comparable with the
    other rows' turn totals)."""
    if usage is None or usage.usage_source == "unavailable":
        return "-"
    text = str(figure or 0)
    return f"{text} (last call)" if usage.usage_source == "last_call" else text


def compare_table(runs: Sequence[CompareRun], *, text_width: int = 48) -> str:
    """The side-by-side table ``agentrun compare`` prints."""
    header = ("engine", "model", "ok", "tools", "files", "in", "out", "cost", "wall", "context")
    rows: list[tuple[str, ...]] = [header]
    for run in runs:
        usage = run.usage
        rows.append(
            (
                run.engine,
                run.model or "-",
                "yes" if run.ok else f"no ({run.error.code})" if run.error else "no",
                str(run.tool_calls),
                run.files_changed.stat(),
                _tokens(usage, usage.prompt_tokens if usage else None),
                _tokens(usage, usage.output_tokens if usage else None),
                "-" if run.cost_usd is None else f"${run.cost_usd:.4f}",
                "-" if run.duration_s is None else f"{run.duration_s:.1f}s",
                "-" if run.context_peak is None else f"{run.context_peak:.1%}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    for run in runs:
        answer = " ".join(run.text.split())
        if len(answer) > text_width:
            answer = answer[: text_width - 1] + "…"
        lines.append(f"{run.engine} ({run.model or 'default model'}): {answer or '-'}")
    for run in runs:
        metered = run.metered
        if metered is not None:
            verdict = "agrees" if metered.agrees else f"DISAGREES: {metered.disagreement}"
            lines.append(
                f"{run.engine} ({run.model or 'default model'}) metered at the proxy: "
                f"{metered.calls} calls, in {metered.usage.prompt_tokens or 0}, "
                f"out {metered.usage.output_tokens or 0} ({verdict})"
            )
    skipped = next((run.skipped for run in runs if run.skipped), None)
    if skipped:
        more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        shown = ", ".join(skipped[:5]) + more
        lines.append(f"not copied into the runs' workspaces: {shown}")
    return "\n".join(lines) + "\n"
