"""Fan-out compare: the same prompt on several engines (or models), side by side.

Each run gets its own copy of the workspace — a detached git worktree of ``HEAD`` when the
workspace is a git repository, a plain copy otherwise, an empty directory when there is none —
so the agents cannot see or undo each other's changes. The runs go through one :class:`Fleet`;
what each changed is measured by comparing the copy's files before and after (content hashes),
so the same figure is reported whatever the agent did to git.

Offline (the default), every run talks to a model server of its own with the same script:
no account is needed and the agents answer deterministically. ``live=True`` uses each agent's
own configuration and credentials.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .._turns.engine import Engine
from .._vocabulary.errors import ConfigurationError
from .._vocabulary.messages import ErrorInfo, Usage
from .._vocabulary.options import SessionOptions
from .fleet import Fleet, FleetEvent, FleetTask

__all__ = ["CompareRun", "FilesChanged", "compare", "compare_table", "prepare_workspace"]

#: Directories never hashed when measuring what a run changed.
_SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})


class FilesChanged(BaseModel):
    """What a run changed in its copy of the workspace."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    added: list[str] = Field(default_factory=list[str])
    modified: list[str] = Field(default_factory=list[str])
    deleted: list[str] = Field(default_factory=list[str])

    @property
    def count(self) -> int:
        return len(self.added) + len(self.modified) + len(self.deleted)

    def stat(self) -> str:
        """``+added ~modified -deleted`` (``-`` when nothing changed)."""
        if not self.count:
            return "-"
        return f"+{len(self.added)} ~{len(self.modified)} -{len(self.deleted)}"


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
    error: ErrorInfo | None = None


def _is_git_repo(path: Path) -> bool:
    try:
        done = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "true"


def prepare_workspace(source: str | Path | None, dest: str | Path) -> Path:
    """A private copy of ``source`` at ``dest``: a detached worktree of ``HEAD`` for a git
    repository, a copy otherwise, an empty directory when ``source`` is ``None``."""
    dest = Path(dest)
    if source is None:
        dest.mkdir(parents=True)
        return dest
    source = Path(source).resolve()
    if not source.is_dir():
        raise ConfigurationError(f"workspace {str(source)!r} is not a directory", option="cwd")
    if _is_git_repo(source):
        done = subprocess.run(
            ["git", "-C", str(source), "worktree", "add", "--detach", str(dest), "HEAD"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode == 0:
            return dest
        # An empty repository (no HEAD) or a git that refuses: fall back to a copy.
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns(*_SKIP_DIRS))
    return dest


def _remove_workspace(source: str | Path | None, dest: Path) -> None:
    if source is not None and (dest / ".git").is_file():
        subprocess.run(
            ["git", "-C", str(source), "worktree", "remove", "--force", str(dest)],
            capture_output=True,
            timeout=120,
            check=False,
        )
    shutil.rmtree(dest, ignore_errors=True)


def _snapshot(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        for name in names:
            path = Path(directory) / name
            try:
                if path.is_symlink():
                    digest = "link:" + os.readlink(path)
                else:
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
            files[path.relative_to(root).as_posix()] = digest
    return files


def _changes(before: dict[str, str], after: dict[str, str]) -> FilesChanged:
    return FilesChanged(
        added=sorted(set(after) - set(before)),
        modified=sorted(p for p in before.keys() & after.keys() if before[p] != after[p]),
        deleted=sorted(set(before) - set(after)),
    )


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
) -> list[CompareRun]:
    """Run ``prompt`` once per engine and model, each in its own copy of ``workspace`` under the
    ``scratch`` directory, and report them side by side (in the order given).

    Each agent works in a private copy, so by default its tool uses are approved
    (``hitl=False``); ``hitl=None`` keeps each agent's own permission policy, ``True`` denies
    what would need a person (a comparison has nobody to ask).
    ``script`` is a :class:`~agentrun.offline.Script` for the offline model servers (default:
    the built-in one). Raises :class:`ConfigurationError` for an unknown engine or an engine
    with no embedded configuration before anything starts.
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
    scratch = Path(scratch)
    variants = [(engine, model) for engine in engines for model in (models or (None,))]
    labels = [engine if model is None else f"{engine}:{model}" for engine, model in variants]
    if len(set(labels)) != len(labels):
        raise ConfigurationError("an engine and model pair is named twice", option="engines")

    async with AsyncExitStack() as stack:
        engines_by_task: dict[str, Engine] = {}
        tasks: list[FleetTask] = []
        copies: list[Path] = []
        for index, ((engine_name, model), label) in enumerate(zip(variants, labels, strict=True)):
            copy = prepare_workspace(workspace, scratch / f"run-{index}" / "workspace")
            copies.append(copy)
            if not keep_workspaces:
                stack.callback(_remove_workspace, workspace, copy)
            if live:
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
                    scratch / f"run-{index}" / "agent",
                    cwd=str(copy),
                    model=model,
                    hitl=hitl,
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
        before = [_snapshot(copy) for copy in copies]
        fleet = Fleet(
            limit=len(tasks), engine_factory=lambda task: engines_by_task[task.name or ""]
        )
        result = await fleet.run(tasks, on_event=on_event)

        turns = {record.task: record for record in result.turns}
        runs: list[CompareRun] = []
        for label, (engine_name, model), session, copy, snap in zip(
            labels, variants, result.sessions, copies, before, strict=True
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
                    files_changed=_changes(snap, _snapshot(copy)),
                    workspace=str(copy) if keep_workspaces else None,
                    error=error,
                )
            )
        return runs


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
                str(usage.prompt_tokens or 0) if usage else "-",
                str(usage.output_tokens or 0) if usage else "-",
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
    return "\n".join(lines) + "\n"
