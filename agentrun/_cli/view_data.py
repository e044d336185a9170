"""What ``agentrun view`` shows, read from disk: journals, fleet results, compare runs and ATIF
trajectories, turned into plain JSON for the page.

Every source is read through the library's own bounded readers (:class:`JsonlSessionStore`,
:func:`read_records`, :func:`from_atif`); what the page gets is bounded again: a text longer
than :data:`MAX_TEXT_CHARS` is cut with a note of how much more there was, a session keeps at
most :data:`MAX_ITEMS` items. Nothing here is HTML: the page inserts every string as text.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from .._fleets.compare import CompareRun, FilesChanged
from .._fleets.fleet import FleetTurnRecord
from .._store.jsonl_store import (
    MAX_JOURNAL_BYTES,
    JsonlSessionStore,
    default_sessions_dir,
    read_records,
)
from .._vocabulary.errors import ConfigurationError
from .._vocabulary.messages import Message

__all__ = [
    "MAX_ITEMS",
    "MAX_SESSION_CHARS",
    "MAX_TEXT_CHARS",
    "ViewCache",
    "ViewData",
    "clip",
    "load_view",
    "session_view",
    "watched_files",
]

#: The most characters of one text (a tool's output, a message) the page gets.
MAX_TEXT_CHARS = 16 * 1024
#: The most items (prompts, texts, tool calls, ...) of one session the page gets.
MAX_ITEMS = 20_000
#: The characters of a session's texts past which each further text is cut harder.
MAX_SESSION_CHARS = 4 * 1024 * 1024
#: The most bytes a fleet results file or a compare report may hold to be read.
MAX_REPORT_BYTES = MAX_JOURNAL_BYTES


def clip(value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """``value`` as text (JSON for what is not a string), cut at ``limit`` characters with a
    note saying how many more there were."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, indent=1, default=str)
        except (TypeError, ValueError, RecursionError):
            text = repr(value)
    if len(text) <= limit:
        return text
    more = len(text[limit:].encode("utf-8", errors="replace"))
    return f"{text[:limit]}\n… [{more} bytes more]"


@dataclass
class ViewData:
    """Everything the page's run tables need, and the sessions it can open."""

    runs: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    problems: list[str] = field(default_factory=list[str])

    def summary(self) -> dict[str, Any]:
        """The tables' JSON (sessions listed, not included)."""
        listed = [
            {k: v for k, v in s.items() if k != "items"} | {"items": len(s["items"])}
            for s in self.sessions.values()
        ]
        return {"runs": self.runs, "sessions": listed, "problems": self.problems}


#: The most task directories of a fleet's ``journals/`` read.
MAX_FLEET_TASKS = 100_000


def _sources(path: Path) -> list[tuple[Path, str | None]]:
    """The files one path stands for, each with the fleet task its journal belongs to (if
    any). A directory is an ``agentrun fleet`` output directory when it holds ``journals/``
    (then its ``results.jsonl`` and every ``journals/TASK/*.jsonl``; the trajectories there
    are the journals again), else a directory of journals (and results kept beside them)."""
    if not path.is_dir():
        return [(path, None)]
    journals = path / "journals"
    if not journals.is_dir():
        store = JsonlSessionStore(path)
        return [(store.path(journal_id), None) for journal_id in store.ids()]
    files: list[tuple[Path, str | None]] = []
    results = path / "results.jsonl"
    if results.is_file():
        files.append((results, None))
    try:
        task_dirs = sorted(d for d in journals.iterdir() if d.is_dir())[:MAX_FLEET_TASKS]
    except OSError:
        task_dirs = []
    for task_dir in task_dirs:
        store = JsonlSessionStore(task_dir)
        files.extend((store.path(journal_id), task_dir.name) for journal_id in store.ids())
    return files


def watched_files(paths: Iterable[Path]) -> dict[str, tuple[int, int]]:
    """Each file the view reads (a directory's journals included) with its size and change
    time: what changed between two calls is what grew."""
    seen: dict[str, tuple[int, int]] = {}
    for path in paths:
        for candidate, _task in _sources(path):
            try:
                info = candidate.stat()
            except OSError:
                continue
            seen[str(candidate)] = (info.st_size, info.st_mtime_ns)
    return seen


#: What :func:`load_view` read from each file, by the file's size and change time.
ViewCache = dict[str, tuple[tuple[int, int], "ViewData"]]


def load_view(paths: Iterable[Path], cache: ViewCache | None = None) -> ViewData:
    """Read every path: a directory of journals, a journal, fleet results (JSON lines of turn
    records), a compare report (``agentrun compare --json``) or an ATIF trajectory. What
    cannot be read is a problem listed on the page, never an exception. With a ``cache`` (the
    same dictionary from call to call), a file whose size and change time are those of the last
    call is not read again."""
    cache = {} if cache is None else cache
    data = ViewData()
    seen: set[str] = set()
    for path in paths:
        # Each file says what it is: a journal, fleet results, a compare report, a trajectory.
        for file, task in _sources(path):
            part = _cached(file, cache, task)
            seen.add(str(file))
            data.runs.extend(dict(row) for row in part.runs)
            data.sessions.update(part.sessions)
            data.problems.extend(part.problems)
    for stale in set(cache) - seen:
        del cache[stale]
    _link_fleet_rows(data)
    return data


def _cached(file: Path, cache: ViewCache, task: str | None = None) -> ViewData:
    try:
        info = file.stat()
        key = (info.st_size, info.st_mtime_ns)
    except OSError:
        key = (-1, -1)
    hit = cache.get(str(file))
    if hit is not None and hit[0] == key and key[0] >= 0:
        return hit[1]
    part = ViewData()
    try:
        _load_file(file, part, task)
    except ConfigurationError as exc:
        part.problems.append(f"{file}: {exc}")
    except (OSError, ValidationError, ValueError, RecursionError) as exc:
        part.problems.append(f"{file}: {type(exc).__name__}: {str(exc)[:300]}")
    cache[str(file)] = (key, part)
    return part


def session_view(data: ViewData, session_id: str) -> dict[str, Any] | None:
    return data.sessions.get(session_id)


def _load_file(path: Path, data: ViewData, task: str | None = None) -> None:
    """One file: a journal, fleet results or ``agentrun fleet`` results (``.jsonl``, told
    apart by the first record), a compare report or an ATIF trajectory (``.json``). ``task``:
    the fleet task a journal belongs to (its title)."""
    raw = _read_bounded(path)
    text = raw.decode("utf-8", errors="replace")
    if path.suffix == ".jsonl":
        records = read_records(text.split("\n"), source=str(path))
        if records and records[0].get("kind") == "session":
            _add_journal(path.stem, records, data, source=str(path), title=task)
        elif records and _is_task_result(records[0]):
            _add_task_results(records, data, source=str(path))
        else:
            _add_fleet(records, data, source=str(path))
        return
    document = json.loads(text)
    if isinstance(document, list):
        for row in cast("list[Any]", document):
            run = CompareRun.model_validate(row)
            _add_compare(run, data, source=str(path))
    elif isinstance(document, dict) and "steps" in document:
        _add_atif(path, raw, data)
    else:
        raise ConfigurationError(
            "neither a journal, fleet results, a compare report nor an ATIF trajectory",
            option="path",
        )


def _read_bounded(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigurationError(f"{path} is not a file", option="path")
        with open(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_REPORT_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_REPORT_BYTES:
        raise ConfigurationError(f"larger than {MAX_REPORT_BYTES} bytes", option="path")
    return raw


# -- run rows --------------------------------------------------------------------------------


def _usage_fields(usage: dict[str, Any] | None) -> dict[str, Any]:
    usage = usage or {}
    return {
        key: usage.get(key)
        for key in (
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "thinking_tokens",
        )
    }


def _row(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "kind": "",
        "source": "",
        "task": "",
        "engine": "",
        "model": None,
        "ok": False,
        "turns": 0,
        "cost_usd": None,
        "duration_s": None,
        "context_peak": None,
        "tool_calls": 0,
        "session": None,
        "check": None,
        "error": None,
        "per_turn": [],
    }
    row.update(_usage_fields(None))
    row.update(fields)
    return row


def _add_fleet(records: list[dict[str, Any]], data: ViewData, *, source: str) -> None:
    by_task: dict[str, list[FleetTurnRecord]] = {}
    for index, raw in enumerate(records):
        try:
            record = FleetTurnRecord.model_validate(raw)
        except ValidationError:
            data.problems.append(f"{source}: line {index + 1} is not a fleet turn record")
            continue
        by_task.setdefault(record.task, []).append(record)
    for task, turns in by_task.items():
        usage: dict[str, Any] = {}
        for turn in turns:
            if turn.usage is None:
                continue
            for key, value in _usage_fields(turn.usage.model_dump()).items():
                if value is not None:
                    usage[key] = (usage.get(key) or 0) + value
        errors = [e.message for t in turns for e in t.errors]
        costs = [t.cost_usd for t in turns if t.cost_usd is not None]
        peaks = [t.context_peak for t in turns if t.context_peak is not None]
        data.runs.append(
            _row(
                kind="fleet",
                source=source,
                task=clip(task, 200),
                engine=clip(turns[0].engine, 100),
                model=clip(turns[-1].model, 200) if turns[-1].model else None,
                ok=all(t.ok for t in turns),
                turns=len(turns),
                cost_usd=sum(costs) if costs else None,
                duration_s=sum(t.duration_s or 0.0 for t in turns),
                context_peak=max(peaks) if peaks else None,
                tool_calls=sum(t.tool_calls for t in turns),
                error=clip(errors[-1], 500) if errors else None,
                per_turn=[
                    {
                        "turn": t.turn,
                        "cost_usd": t.cost_usd,
                        "duration_s": t.duration_s,
                        "text": clip(t.text, 300),
                    }
                    for t in turns
                ],
                **usage,
            )
        )


#: The most listed paths and diffs of one run's changes the page shows.
MAX_CHANGED_PATHS = 500


def _changes_item(changed: FilesChanged) -> dict[str, Any]:
    """A run's workspace changes as a page item: the paths, and each file's diff (cut at
    :data:`MAX_TEXT_CHARS` with a note of how many bytes more there were)."""
    listed = [
        [clip(p, 300) for p in paths[:MAX_CHANGED_PATHS]]
        for paths in (changed.added, changed.modified, changed.deleted)
    ]
    diffs: list[dict[str, Any]] = []
    for one in changed.diffs[:MAX_CHANGED_PATHS]:
        text = clip(one.diff)
        if one.more_bytes:
            text += f"\n… [{one.more_bytes} bytes more]"
        diffs.append(
            {
                "path": clip(one.path, 300),
                "status": one.status,
                "diff": text,
                "skipped": clip(one.skipped, 100) if one.skipped else None,
            }
        )
    return {
        "k": "diff",
        "added": listed[0],
        "modified": listed[1],
        "deleted": listed[2],
        "more": changed.count - sum(len(paths) for paths in listed),
        "diffs": diffs,
    }


def _is_task_result(record: dict[str, Any]) -> bool:
    """A line of ``agentrun fleet``'s results file (a task, its session and its check)."""
    return {"task", "line", "session"} <= record.keys()


def _add_task_results(records: list[dict[str, Any]], data: ViewData, *, source: str) -> None:
    from .fleet import TaskResult

    for index, raw in enumerate(records):
        try:
            result = TaskResult.model_validate(raw)
        except ValidationError:
            data.problems.append(f"{source}: line {index + 1} is not a result of agentrun fleet")
            continue
        turns = result.turns
        session = result.session
        usage: dict[str, Any] = {}
        for turn in turns:
            if turn.usage is None:
                continue
            for key, value in _usage_fields(turn.usage.model_dump()).items():
                if value is not None:
                    usage[key] = (usage.get(key) or 0) + value
        costs = [t.cost_usd for t in turns if t.cost_usd is not None]
        peaks = [t.context_peak for t in turns if t.context_peak is not None]
        check = result.check
        error: str | None = None
        if session.error is not None:
            error = f"{session.error.code}: {session.error.message}"
        elif not session.ok:
            errors = [e.message for t in turns for e in t.errors]
            error = errors[-1] if errors else "the session did not end ok"
        elif check is not None and not check.ok:
            ended = "timed out" if check.timed_out else f"exited {check.exit_code}"
            error = f"check {ended}: {check.output[-400:]}"
        model = session.model or (turns[-1].model if turns else None)
        data.runs.append(
            _row(
                kind="fleet",
                source=source,
                task=clip(result.task, 200),
                engine=clip(result.engine, 100),
                model=clip(model, 200) if model else None,
                ok=result.ok,
                check=None if check is None else ("passed" if check.ok else "failed"),
                turns=len(turns) or session.turns,
                cost_usd=session.cost_usd
                if session.cost_usd is not None
                else (sum(costs) if costs else None),
                duration_s=session.duration_s,
                context_peak=max(peaks) if peaks else None,
                tool_calls=sum(t.tool_calls for t in turns),
                error=clip(error, 500) if error else None,
                journal=result.journal_id,
                changes=None if result.changes is None else _changes_item(result.changes),
                per_turn=[
                    {
                        "turn": t.turn,
                        "cost_usd": t.cost_usd,
                        "duration_s": t.duration_s,
                        "text": clip(t.text, 300),
                    }
                    for t in turns
                ],
                **usage,
            )
        )


def _add_compare(run: CompareRun, data: ViewData, *, source: str) -> None:
    label = run.engine if run.model is None else f"{run.engine}:{run.model}"
    session_id = f"compare:{source}:{label}"
    items: list[dict[str, Any]] = [
        {"k": "text", "text": clip(run.text)},
        _changes_item(run.files_changed),
    ]
    if run.error is not None:
        items.append({"k": "error", "text": clip(run.error.message), "code": run.error.code})
    data.sessions[session_id] = {
        "id": session_id,
        "title": f"compare {label}",
        "engine": clip(run.engine, 100),
        "model": clip(run.model, 200) if run.model else None,
        "items": items,
        "context": [],
        "truncated": 0,
    }
    data.runs.append(
        _row(
            kind="compare",
            source=source,
            task=clip(label, 200),
            engine=clip(run.engine, 100),
            model=clip(run.model, 200) if run.model else None,
            ok=run.ok,
            turns=1,
            cost_usd=run.cost_usd,
            duration_s=run.duration_s,
            context_peak=run.context_peak,
            tool_calls=run.tool_calls,
            session=session_id,
            error=clip(run.error.message, 500) if run.error else None,
            per_turn=[{"turn": 1, "cost_usd": run.cost_usd, "duration_s": run.duration_s}],
            **_usage_fields(run.usage.model_dump() if run.usage else None),
        )
    )


def _add_atif(path: Path, raw: bytes, data: ViewData) -> None:
    from .._store.trajectory.import_ import from_atif

    read = from_atif(raw)
    session_id = f"atif:{path}"
    builder = _SessionBuilder(session_id, f"trajectory {path.name}", read.agent_name, read.model)
    for turn in read.turns:
        builder.prompt(turn.number, turn.prompt)
        for message in turn.messages:
            builder.message(message)
        builder.summary(turn.number, turn.summary.model_dump(mode="json"))
    data.sessions[session_id] = builder.done()
    _add_session_row(data, builder, kind="atif", source=str(path))


def _add_journal(
    journal_id: str,
    records: list[dict[str, Any]],
    data: ViewData,
    *,
    source: str,
    title: str | None = None,
) -> None:
    head = records[0] if records else {}
    engine = str(head.get("engine") or "?")
    builder = _SessionBuilder(journal_id, title or journal_id, engine, None)
    builder.started = str(head.get("at") or "")
    for record in records:
        kind = record.get("kind")
        if kind == "turn":
            builder.prompt(_int(record.get("turn")), record.get("prompt"))
        elif kind == "message":
            try:
                message = Message.model_validate(record.get("message"))
            except ValidationError:
                continue
            builder.message(message)
        elif kind == "summary":
            summary = record.get("summary")
            if isinstance(summary, dict):
                builder.summary(_int(record.get("turn")), cast("dict[str, Any]", summary))
        elif kind == "closed":
            builder.closed = True
    data.sessions[journal_id] = builder.done()
    _add_session_row(data, builder, kind="journal", source=source, fleet_task=title)


def _add_session_row(
    data: ViewData,
    builder: _SessionBuilder,
    *,
    kind: str,
    source: str,
    fleet_task: str | None = None,
) -> None:
    summaries = builder.summaries
    usage: dict[str, Any] = {}
    for s in summaries:
        for key, value in _usage_fields(s.get("usage")).items():
            if isinstance(value, (int, float)):
                usage[key] = (usage.get(key) or 0) + value
    costs = [c for s in summaries if isinstance(c := _dict(s.get("usage")).get("cost_usd"), float)]
    fills = [f for _turn, f in builder.context if f is not None]
    errors = [_dict(e) for s in summaries for e in _list(s.get("errors")) if isinstance(e, dict)]
    data.runs.append(
        _row(
            kind=kind,
            source=source,
            task=builder.title,
            engine=builder.engine,
            model=builder.model,
            ok=bool(summaries) and all(s.get("ok") for s in summaries),
            turns=len(summaries),
            cost_usd=sum(costs) if costs else None,
            duration_s=sum(_float(s.get("duration_s")) for s in summaries) if summaries else None,
            context_peak=max(fills) if fills else None,
            tool_calls=sum(len(_list(s.get("tool_calls"))) for s in summaries),
            session=builder.session_id,
            error=clip(errors[-1].get("message"), 500) if errors else None,
            per_turn=[
                {
                    "turn": s.get("turn"),
                    "cost_usd": _dict(s.get("usage")).get("cost_usd"),
                    "duration_s": s.get("duration_s"),
                    "text": clip(s.get("text"), 300),
                }
                for s in summaries
            ],
            running=not builder.closed and kind == "journal",
            started=builder.started,
            fleet_task=fleet_task,
            **usage,
        )
    )


def _link_fleet_rows(data: ViewData) -> None:
    """A fleet row opens its journaled session and stands for it. ``agentrun fleet``'s result
    names its journal; a ``FleetResult.to_jsonl()`` file holds no journal id, so its row opens
    the journaled session whose turns took the same time and said the same (the journal's
    summaries carry both)."""
    by_key: dict[tuple[str, str], str] = {}
    for row in data.runs:
        if row["kind"] == "journal":
            by_key[(row["engine"], _turns_key(row["per_turn"]))] = row["session"]
    linked: set[str] = set()
    for row in data.runs:
        named = row.get("journal")
        # The task's changes go to its session's page, not to the table's rows.
        changes = row.pop("changes", None)
        if row["kind"] == "fleet" and named is not None:
            if named in data.sessions and named not in linked:
                row["session"] = named
                linked.add(named)
                if changes is not None:
                    # A new dictionary: the journal's own (cached from call to call) is kept.
                    session = data.sessions[named]
                    data.sessions[named] = session | {"items": [*session["items"], changes]}
        elif row["kind"] == "fleet" and row["session"] is None:
            session = by_key.get((row["engine"], _turns_key(row["per_turn"])))
            if session is not None and session not in linked:
                row["session"] = session
                row["running"] = data.sessions[session].get("closed") is False
                linked.add(session)
    # The fleet's row stands for its journal (it has the task's name); a task's journal of an
    # attempt an interrupt cut short (the resume ran it again) is no result either.
    finished = {r["task"] for r in data.runs if r["kind"] == "fleet"}
    data.runs = [
        r
        for r in data.runs
        if r["kind"] != "journal"
        or (r["session"] not in linked and r.get("fleet_task") not in finished)
    ]
    for row in data.runs:
        if row.get("fleet_task") is not None and not row["running"]:
            # Its session ended, its result is not written: its check runs, or the fleet was
            # interrupted before the result (a resume runs the task again).
            row["pending"] = True


def _turns_key(turns: list[dict[str, Any]]) -> str:
    return json.dumps([(t.get("duration_s"), t.get("text")) for t in turns])


def _dict(value: Any) -> dict[str, Any]:
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return cast("list[Any]", value) if isinstance(value, list) else []


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


# -- a session as a conversation -------------------------------------------------------------


class _SessionBuilder:
    """Messages in, conversation items out: texts, thinking, tool calls paired with their
    results, permission decisions, errors, the context gauge after each model call, and per
    turn its usage, cost and the ledger check."""

    def __init__(self, session_id: str, title: str, engine: str, model: str | None) -> None:
        self.session_id = session_id
        self.title = clip(title, 200)
        self.engine = clip(engine, 100)
        self.model: str | None = clip(model, 200) if model else None
        self.items: list[dict[str, Any]] = []
        self.truncated = 0
        self.summaries: list[dict[str, Any]] = []
        self.context: list[tuple[int, float | None]] = []
        self.started = ""
        self.closed = False
        self._tools: dict[str, dict[str, Any]] = {}
        self._call_output_tokens: dict[int, int] = {}
        self._budget = MAX_SESSION_CHARS

    def _text(self, value: Any) -> str:
        """``value`` clipped: at :data:`MAX_TEXT_CHARS`, or at a tenth of that once the
        session's texts hold :data:`MAX_SESSION_CHARS`."""
        limit = MAX_TEXT_CHARS if self._budget > 0 else MAX_TEXT_CHARS // 10
        text = clip(value, limit)
        self._budget -= len(text)
        return text

    def _add(self, item: dict[str, Any]) -> dict[str, Any]:
        if len(self.items) >= MAX_ITEMS:
            self.truncated += 1
        else:
            self.items.append(item)
        return item

    def prompt(self, turn: int, text: str | None) -> None:
        self._add({"k": "prompt", "turn": turn, "text": self._text(text)})

    def message(self, message: Message) -> None:
        kind = str(message.type)
        turn = message.turn or 0
        if message.is_delta or message.replayed:
            return
        if kind == "init" and message.init is not None and message.init.model:
            self.model = self.model or clip(message.init.model, 200)
        elif kind in ("text", "thinking"):
            self._add({"k": kind, "turn": turn, "text": self._text(message.text)})
        elif kind == "tool_use" and message.tool is not None:
            tool = self._add(
                {
                    "k": "tool",
                    "turn": turn,
                    "id": clip(message.tool.id, 200),
                    "name": clip(message.tool.name or message.tool.title or "tool", 200),
                    "input": self._text(message.tool.input),
                    "output": None,
                    "is_error": None,
                }
            )
            if message.tool.id:
                self._tools[message.tool.id] = tool
        elif kind == "tool_result" and message.tool is not None:
            tool = self._tools.get(message.tool.id or "")
            if tool is None:
                tool = self._add(
                    {
                        "k": "tool",
                        "turn": turn,
                        "id": clip(message.tool.id, 200),
                        "name": clip(message.tool.name or "tool", 200),
                        "input": "",
                    }
                )
            tool["output"] = self._text(message.tool.output)
            tool["is_error"] = bool(message.tool.is_error)
        elif kind == "context_window" and message.context is not None:
            fraction = message.context.fraction
            if self.context and self.context[-1] == (turn, fraction):
                return  # the same reading again (the agent's own, after the call's)
            self.context.append((turn, fraction))
            self._add(
                {
                    "k": "context",
                    "turn": turn,
                    "used": message.context.used_tokens,
                    "size": message.context.size_tokens,
                    "fraction": fraction,
                }
            )
        elif kind == "error" and message.error is not None:
            self._add(
                {
                    "k": "error",
                    "turn": turn,
                    "text": self._text(message.error.message),
                    "code": clip(message.error.code, 100) if message.error.code else None,
                }
            )
        elif kind == "system" and message.subtype == "message_delta" and message.usage:
            output = message.usage.output_tokens
            if output is not None:
                self._call_output_tokens[turn] = self._call_output_tokens.get(turn, 0) + output
        if kind == "system" and message.subtype == "permission" and not message.denials:
            data = message.data or {}
            self._add(
                {
                    "k": "permission",
                    "turn": turn,
                    "tool": clip(data.get("title") or "tool", 200),
                    "decision": "allowed" if data.get("allowed") else "asked",
                    "reason": clip(data.get("option_kind") or "", 200),
                }
            )
        if message.denials:
            for denial in message.denials:
                self._add(
                    {
                        "k": "permission",
                        "turn": turn,
                        "tool": clip(denial.tool_name or "tool", 200),
                        "decision": "denied",
                        "reason": clip(denial.reason or "", 2000),
                    }
                )
        if kind == "question" and message.text:
            self._add({"k": "question", "turn": turn, "text": self._text(message.text)})

    def summary(self, turn: int, summary: dict[str, Any]) -> None:
        self.summaries.append(summary)
        usage = _dict(summary.get("usage"))
        calls = self._call_output_tokens.get(turn)
        reported = usage.get("output_tokens")
        ledger: dict[str, Any] | None = None
        if calls is not None and isinstance(reported, int):
            ledger = {"calls_output_tokens": calls, "turn_output_tokens": reported}
        errors = [clip(_dict(e).get("message"), 500) for e in _list(summary.get("errors"))]
        self._add(
            {
                "k": "usage",
                "turn": turn,
                "ok": bool(summary.get("ok")),
                "usage": {
                    k: v for k, v in usage.items() if isinstance(v, (int, float, str)) or v is None
                },
                "cost_usd": usage.get("cost_usd"),
                "duration_s": summary.get("duration_s"),
                "stop_reason": clip(summary.get("stop_reason"), 100),
                "ledger": ledger,
                "errors": errors,
            }
        )

    def done(self) -> dict[str, Any]:
        return {
            "id": self.session_id,
            "title": self.title,
            "engine": self.engine,
            "model": self.model,
            "items": self.items,
            "context": [[t, f] for t, f in self.context],
            "truncated": self.truncated,
            "closed": self.closed,
        }


def default_paths() -> list[Path]:
    return [default_sessions_dir()]
