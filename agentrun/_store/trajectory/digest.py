"""The digest of a trajectory another agent continues the work from: :func:`trajectory_digest`
(what :meth:`agentrun.Session.continue_trajectory` seeds the new session with).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from .import_ import from_atif
from .load import TrajectorySource, load_trajectory
from .turns import ReplayedTurn

__all__ = ["DIGEST_MAX_CHARS", "trajectory_digest"]

#: The most characters a digest has, however long the trajectory: each part keeps its most
#: recent entries within a share of it and says how many earlier ones it left out.
DIGEST_MAX_CHARS = 16_000

#: Argument names that hold a file path, across agents' tools.
_PATH_KEYS = ("file_path", "filePath", "path", "notebook_path", "filename", "file")
#: The shares of :data:`DIGEST_MAX_CHARS` (the headings and the fixed lines take the rest).
_TASK_CHARS = 4_000
_DONE_CHARS = 6_000
_MAX_DONE = 40
_FILES_CHARS = 2_000
_OPEN_CHARS = 600
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


def _fitting(lines: list[str], budget: int, most: int | None = None) -> int:
    """How many of the last of ``lines`` fit in ``budget`` characters (each with its newline),
    at most ``most``."""
    count = used = 0
    for line in reversed(lines):
        if (most is not None and count == most) or used + len(line) + 1 > budget:
            break
        count += 1
        used += len(line) + 1
    return count


def _recent(lines: list[str], budget: int, noun: str, most: int | None = None) -> list[str]:
    """The last of ``lines`` that fit in ``budget`` characters (at most ``most`` of them),
    after a line that says how many earlier ``noun`` were left out."""
    kept = _fitting(lines, budget, most)
    left_out = len(lines) - kept
    shown = lines[left_out:]
    return [f"- ({left_out} earlier {noun} left out)", *shown] if left_out else shown


def _asked(turn: ReplayedTurn) -> str:
    """A turn's prompt as the digest shows it: its text, then where each image or audio part
    of it is (``[audio: media/request.mp3]``)."""
    media = [
        f"[{part.get('type')}: {cast('dict[str, Any]', source).get('path')}]"
        for part in turn.prompt_content or ()
        if part.get("type") != "text" and isinstance(source := part.get("source"), dict)
    ]
    return " ".join([turn.prompt or "", *media]).strip()


def trajectory_digest(
    source: TrajectorySource,
) -> str:
    """A plain-text digest of a trajectory for another agent to continue the work: the task
    (the prompts, when recorded), what was done (tool calls and their outcome), the files
    touched, where the agent left off, and what is still open. At most
    :data:`DIGEST_MAX_CHARS` characters: a long trajectory keeps its first prompt and its most
    recent prompts, tool calls and files, and says how many it left out."""
    trajectory = load_trajectory(source)
    agent = trajectory.agent
    read = from_atif(trajectory)
    prompts = [asked for t in read.turns if (asked := _asked(t))]
    done: list[str] = []
    files: list[str] = []
    seen_files: set[str] = set()
    last_text = ""
    for turn in read.turns:
        for call in turn.summary.tool_calls:
            given: Any = call.input
            arguments = cast("dict[str, Any]", given) if isinstance(given, dict) else {}
            for path in _paths(arguments):
                if path not in seen_files:
                    seen_files.add(path)
                    files.append(f"- {_short(path, 200)}")
            outcome = "no result" if not call.completed else ("failed" if call.is_error else "ok")
            name = _short(call.name or "tool", 60)
            done.append(f"- turn {turn.number}: {name} {_short(given)} ({outcome})")
        if turn.summary.text:
            last_text = turn.summary.text
    model = f", model {_short(agent.model_name, 80)}" if agent.model_name else ""
    lines = [
        f"Work recorded with {_short(agent.name, 80)} {_short(agent.version, 40)}{model} over "
        f"{len(read.turns)} turn(s).",
        "",
        "Task:",
    ]
    if prompts:
        # The first prompt states the task; the latest say where it went.
        first = f"- {_short(prompts[0], 600)}"
        later = [f"- {_short(p, 600)}" for p in prompts[1:]]
        lines += [first, *_recent(later, _TASK_CHARS - len(first), "prompts")]
    else:
        lines.append("- not recorded (the trajectory holds no user prompts)")
    lines += ["", "Done:"]
    lines += _recent(done, _DONE_CHARS, "tool calls", _MAX_DONE) or ["- no tool calls"]
    if files:
        lines += ["", "Files touched:", *_recent(files, _FILES_CHARS, "files")]
    if last_text:
        shown = last_text if len(last_text) <= _MAX_TEXT else "…" + last_text[-_MAX_TEXT:]
        lines += ["", "Where it left off (the agent's last answer):", shown]
    last = read.turns[-1].summary if read.turns else None
    lines += ["", "Open:"]
    if last is not None and not last.ok:
        reason = last.errors[-1].message if last.errors else (last.stop_reason or "unfinished")
        lines.append(f"- the last turn did not finish: {_short(reason, 300)}")
    open_calls = [
        _short(c.name or "tool", 60)
        for t in read.turns
        for c in t.summary.tool_calls
        if not c.completed
    ]
    if open_calls:
        kept = _fitting(open_calls, _OPEN_CHARS)
        earlier = len(open_calls) - kept
        more = f"{earlier} earlier ones, " if earlier else ""
        lines.append(f"- tool calls without a result: {more}{', '.join(open_calls[earlier:])}")
    lines.append("- continue the task from where it was left; check the files before changing them")
    return "\n".join(lines)
