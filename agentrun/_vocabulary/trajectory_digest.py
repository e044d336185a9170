"""The digest of a trajectory another agent continues the work from: :func:`trajectory_digest`
(what :meth:`agentrun.Session.continue_trajectory` seeds the new session with).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from .trajectory_import import from_atif
from .trajectory_load import TrajectorySource, load_trajectory

__all__ = ["trajectory_digest"]

#: Argument names that hold a file path, across agents' tools.
_PATH_KEYS = ("file_path", "filePath", "path", "notebook_path", "filename", "file")
_MAX_DONE = 40
_MAX_TEXT = 1500


def _paths(arguments: Mapping[str, Any]) -> list[str]:
    found = [v for k in _PATH_KEYS if isinstance(v := arguments.get(k), str) and v]
    changes = arguments.get("changes")
    if isinstance(changes, list):
        for change in cast("list[Any]", changes):
            if isinstance(change, dict):
                path = cast("dict[str, Any]", change).get("path")
                if isinstance(path, str) and path:
                    found.append(path)
    return found


def _short(value: Any, limit: int = 120) -> str:
    text = (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    )
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def trajectory_digest(
    source: TrajectorySource,
) -> str:
    """A plain-text digest of a trajectory for another agent to continue the work: the task
    (the prompts, when recorded), what was done (tool calls and their outcome), the files
    touched, where the agent left off, and what is still open."""
    trajectory = load_trajectory(source)
    agent = trajectory.agent
    read = from_atif(trajectory)
    prompts = [t.prompt for t in read.turns if t.prompt]
    done: list[str] = []
    files: list[str] = []
    last_text = ""
    for turn in read.turns:
        for call in turn.summary.tool_calls:
            given: Any = call.input
            arguments = cast("dict[str, Any]", given) if isinstance(given, dict) else {}
            for path in _paths(arguments):
                if path not in files:
                    files.append(path)
            outcome = "no result" if not call.completed else ("failed" if call.is_error else "ok")
            done.append(f"- turn {turn.number}: {call.name or 'tool'} {_short(given)} ({outcome})")
        if turn.summary.text:
            last_text = turn.summary.text
    model = f", model {agent.model_name}" if agent.model_name else ""
    lines = [
        f"Work recorded with {agent.name} {agent.version}{model} over {len(read.turns)} turn(s).",
        "",
        "Task:",
        *(f"- {_short(p, 600)}" for p in prompts),
    ]
    if not prompts:
        lines.append("- not recorded (the trajectory holds no user prompts)")
    lines += ["", "Done:"]
    if len(done) > _MAX_DONE:
        skipped = len(done) - _MAX_DONE
        done = [f"- ({skipped} earlier tool calls left out)", *done[-_MAX_DONE:]]
    lines += done or ["- no tool calls"]
    lines += ["", "Files touched:", *(f"- {f}" for f in files)] if files else []
    if last_text:
        shown = last_text if len(last_text) <= _MAX_TEXT else "…" + last_text[-_MAX_TEXT:]
        lines += ["", "Where it left off (the agent's last answer):", shown]
    last = read.turns[-1].summary if read.turns else None
    lines += ["", "Open:"]
    if last is not None and not last.ok:
        reason = last.errors[-1].message if last.errors else (last.stop_reason or "unfinished")
        lines.append(f"- the last turn did not finish: {_short(reason, 300)}")
    open_calls = [
        c.name or "tool" for t in read.turns for c in t.summary.tool_calls if not c.completed
    ]
    if open_calls:
        lines.append(f"- tool calls without a result: {', '.join(open_calls)}")
    lines.append("- continue the task from where it was left; check the files before changing them")
    return "\n".join(lines)
