"""A Codex thread's rollout file: what ``codex exec`` writes beside its stdout.

Codex records every thread in ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*-<thread>.jsonl``:
the model, the effective context window, each model call's usage, each turn's own usage and
the thread's running total, aborted turns and errors. stdout says none of that, so the ``codex``
engine reads the rollout after each process exited (:func:`find_rollout`, :func:`read_rollout`)
and hands the translator the :class:`Rollout` of the turn; replay hands it the lines of the
``<name>.rollout.jsonl`` sidecar a recording keeps, which :func:`rollout_turns` and
:func:`rollout_records` parse without any I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..._vocabulary.jsonvalues import as_dict, as_int, as_str

__all__ = [
    "USAGE_FIELDS",
    "Rollout",
    "codex_totals",
    "find_rollout",
    "find_thread_named",
    "read_rollout",
    "read_rollout_turns",
    "rollout_records",
    "rollout_turns",
]

#: The usage fields of Codex's totals (exec ``turn.completed.usage``, rollout records).
USAGE_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
)


def _dict(value: object) -> dict[str, Any]:
    return as_dict(value) or {}


def codex_totals(value: object) -> dict[str, int]:
    """Codex's usage fields as non-negative integers (missing fields are 0)."""
    raw = _dict(value)
    out: dict[str, int] = {}
    for key in USAGE_FIELDS:
        number = as_int(raw.get(key))
        out[key] = number if number is not None and number > 0 else 0
    return out


@dataclass(frozen=True)
class Rollout:
    """What a thread's rollout file says about its latest turn."""

    thread_id: str | None = None
    turn_id: str | None = None
    model: str | None = None
    #: The effective window Codex reports (95 % of the model's).
    context_window: int | None = None
    #: The last model call's usage, this turn's usage, and the thread's running total.
    last_call: dict[str, int] | None = None
    turn: dict[str, int] | None = None
    thread: dict[str, int] | None = None
    aborted: bool = False
    error: str | None = None


def find_rollout(codex_home: str | Path, thread_id: str) -> Path | None:
    """The rollout file of ``thread_id`` under ``$CODEX_HOME/sessions`` (the newest if several)."""
    if not re.fullmatch(r"[0-9A-Za-z-]+", thread_id):
        return None
    sessions = Path(codex_home) / "sessions"
    try:
        found = list(sessions.glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
    except OSError:
        return None
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


#: How much of ``session_index.jsonl`` (its newest end) a thread name is looked up in.
SESSION_INDEX_BYTES = 16 * 1024 * 1024


def find_thread_named(
    codex_home: str | Path, name: str, *, max_bytes: int = SESSION_INDEX_BYTES
) -> str | None:
    """The thread ``codex exec resume <name>`` would take ``name`` for, or ``None``.

    Codex appends each thread's names to ``$CODEX_HOME/session_index.jsonl`` (``{"id",
    "thread_name", "updated_at"}``; a thread's newest line holds its current name) and resolves a
    name to the newest thread of that current name whose rollout file exists. Only the last
    ``max_bytes`` of the index are read."""
    if not name.strip():
        return None
    path = Path(codex_home) / "session_index.jsonl"
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError:
        return None
    seen: set[str] = set()
    for line in reversed(data.splitlines()):
        try:
            entry = as_dict(json.loads(line))
        except ValueError:
            continue
        thread = as_str((entry or {}).get("id"))
        if entry is None or thread is None or thread in seen:
            continue
        seen.add(thread)  # the newest line of a thread is its current name
        if entry.get("thread_name") == name and find_rollout(codex_home, thread) is not None:
            return thread
    return None


def read_rollout(path: str | Path, *, max_bytes: int = 256 * 1024 * 1024) -> Rollout | None:
    """The facts of the latest turn in a rollout file; ``None`` if it cannot be read."""
    turns = read_rollout_turns(path, max_bytes=max_bytes)
    return turns[-1] if turns else None


def read_rollout_turns(path: str | Path, *, max_bytes: int = 256 * 1024 * 1024) -> list[Rollout]:
    """The facts of every turn in a rollout file, oldest first (empty if unreadable)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes)
    except OSError:
        return []
    return rollout_turns(rollout_records(data.splitlines()))


#: Rollout records nothing here reads (model inputs and outputs, world snapshots): often most of
#: the file, so they are recognised by their leading ``"type"`` and never decoded.
_SKIPPED_RECORDS = (b"response_item", b"world_state", b"compacted")
_TYPE_KEY = b'"type":"'
#: A session's metadata carries the whole instructions; only its id is needed.
_SESSION_META_ID = re.compile(rb'"payload":\{.*?"id":"([^"\\]*)"')


def rollout_records(lines: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    """The records of a rollout's lines that :func:`rollout_turns` reads, decoded."""
    for line in lines:
        at = line.find(_TYPE_KEY, 0, 256)
        if at >= 0:
            # The top-level "type" comes before the payload in every record Codex writes.
            start = at + len(_TYPE_KEY)
            kind = line[start : line.find(b'"', start)]
            if kind in _SKIPPED_RECORDS:
                continue
            if kind == b"session_meta":
                found = _SESSION_META_ID.search(line, 0, 4096)
                if found is not None:
                    thread = found.group(1).decode("utf-8", "replace")
                    yield {"type": "session_meta", "payload": {"id": thread}}
                    continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield cast("dict[str, Any]", value)


class _TurnFacts:
    __slots__ = ("aborted", "error", "last_call", "model", "thread", "turn", "turn_id", "window")

    def __init__(self, turn_id: str | None, model: str | None, window: int | None) -> None:
        self.turn_id = turn_id
        self.model = model
        self.window = window
        self.last_call: dict[str, int] | None = None
        self.turn: dict[str, int] | None = None
        self.thread: dict[str, int] | None = None
        self.aborted = False
        self.error: str | None = None


def rollout_turns(records: Iterable[dict[str, Any]]) -> list[Rollout]:
    """Every turn's facts from decoded rollout records, oldest first."""
    thread_id: str | None = None
    model: str | None = None
    window: int | None = None
    thread: dict[str, int] | None = None
    turns: list[_TurnFacts] = []
    for record in records:
        kind = record.get("type")
        payload = _dict(record.get("payload"))
        current = turns[-1] if turns else None
        if kind == "session_meta":
            thread_id = as_str(payload.get("id")) or thread_id
        elif kind == "turn_context":
            model = as_str(payload.get("model")) or model
            if current is not None:
                current.model = model
        elif kind == "token_usage_record":
            thread = codex_totals(payload.get("thread_token_usage"))
            if current is not None:
                current.thread = thread
                if as_str(payload.get("turn_id")) == current.turn_id:
                    current.turn = codex_totals(payload.get("turn_token_usage"))
        elif kind == "event_msg":
            event = as_str(payload.get("type"))
            if event == "task_started":
                window = as_int(payload.get("model_context_window")) or window
                turns.append(_TurnFacts(as_str(payload.get("turn_id")), model, window))
            elif current is None:
                continue
            elif event == "token_count":
                info = _dict(payload.get("info"))
                window = as_int(info.get("model_context_window")) or window
                current.window = window
                last = info.get("last_token_usage")
                if last is not None:
                    current.last_call = codex_totals(last)
                    full = as_int(_dict(last).get("total_tokens"))
                    if full and not any(current.last_call.values()):
                        # Context exhausted: Codex records no parts, only the full window.
                        current.last_call["input_tokens"] = full
                if info.get("total_token_usage") is not None:
                    thread = current.thread = codex_totals(info.get("total_token_usage"))
            elif event == "turn_aborted":
                current.aborted = True
            elif event == "task_complete":
                current.error = as_str(_dict(payload.get("error")).get("message"))
    return [
        Rollout(
            thread_id=thread_id,
            turn_id=t.turn_id,
            model=t.model,
            context_window=t.window,
            last_call=t.last_call,
            turn=t.turn,
            thread=t.thread,
            aborted=t.aborted,
            error=t.error,
        )
        for t in turns
    ]
