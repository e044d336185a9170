"""``agentrun sessions``: the journaled sessions (``SessionOptions(journal=...)``, ``agentrun run
--journal``), listed, shown, exported, resumed and forked from any later process.

``list`` shows each session's engine, start time, turns, cost and last context fill; ``show
ID`` its turns; ``export ID`` its journal as JSON lines (``--atif``: an ATIF trajectory);
``resume ID PROMPT`` continues it (the journal has the agent's resume id; on the embedded
default the agent's kept home is found again) and appends to the same journal; ``fork ID
PROMPT`` continues a copy in a new journal, where the agent can fork sessions; ``prune
[--older-than AGE]`` removes the kept offline homes no run has used for that long (never one in
use, never a directory without the marker agentrun writes into each home: those that look like
homes are listed as kept). An unknown or malformed ID is one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, cast

from .._store.jsonl_store import JsonlSessionStore, check_journal_id, new_journal_id
from .._vocabulary.errors import ConfigurationError, ForkNotSupportedError
from .._vocabulary.messages import Message
from .._vocabulary.summary import SessionTotals
from .render import clean

__all__ = ["FORKING_ENGINES", "add_parser", "sessions"]

#: Engines whose agent forks a session (Claude Code ``--fork-session``, ``codex exec fork``,
#: Codex app-server ``thread/fork``, ``opencode run --fork``) or may (an ACP agent that
#: advertises ``session/fork``; one that does not is refused when the session starts).
FORKING_ENGINES = frozenset(
    {
        "claude",
        "codex",
        "codex-app-server",
        "opencode",
        "opencode-acp",
        "acp",
        "claude-acp",
        "codex-acp",
        "qwen",
        "gemini",
    }
)


#: ``list``'s exit status when a journal could not be read (the others are listed all the same).
_UNREADABLE = 2


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser = cast(
        argparse.ArgumentParser,
        sub.add_parser(
            "sessions",
            help="journaled sessions: list, show, export, resume, fork; prune offline homes",
            description="Sessions kept in a journal (agentrun run --journal, "
            "SessionOptions(journal=True)): list them, show or export one, resume or fork one "
            "from this process. The store is $AGENTRUN_SESSIONS_DIR, else "
            "$XDG_DATA_HOME/agentrun/sessions.",
        ),
    )
    parser.add_argument("--dir", help="the journal directory (default: the per-user one)")
    actions = parser.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")
    list_ = actions.add_parser("list", help="every journaled session, oldest first")
    list_.add_argument("--json", action="store_true", help="one JSON object per session")
    show = actions.add_parser("show", help="one session's turns")
    show.add_argument("id", metavar="ID", help="the session's journal id")
    export = actions.add_parser("export", help="one session's journal (JSON lines)")
    export.add_argument("id", metavar="ID", help="the session's journal id")
    export.add_argument("--atif", action="store_true", help="as an ATIF trajectory (JSON)")
    prune = actions.add_parser(
        "prune",
        help="remove the kept offline homes not used for a while (journals stay)",
        description="Remove the agents' homes that offline runs keep for --resume, when no "
        "run has used them for --older-than; a home in use is never removed, nor any "
        "directory without the marker agentrun writes into each home (one that looks like a "
        "home is listed as kept). Journals are not touched.",
    )
    prune.add_argument("--older-than", type=_age, metavar="AGE",
                       help="unused for at least this long: 30d, 12h, 90m, 0 (default: "
                            "$AGENTRUN_OFFLINE_HOMES_MAX_AGE, else 30d)")  # fmt: skip
    prune.add_argument("--dry-run", action="store_true", help="only list what would go")
    prune.add_argument("--homes", metavar="DIR",
                       help="the homes' directory (default: $AGENTRUN_OFFLINE_HOMES, else "
                            "$XDG_CACHE_HOME/agentrun/offline)")  # fmt: skip
    prune.add_argument("--json", action="store_true", help="one JSON object per home")
    for name, what in (("resume", "continue"), ("fork", "continue a copy of")):
        action = actions.add_parser(name, help=f"{what} a session with a new prompt")
        action.add_argument("id", metavar="ID", help="the session's journal id")
        action.add_argument("prompt", metavar="PROMPT", help="the prompt")
        action.add_argument("--json", action="store_true", help="print messages as JSON lines")
        action.add_argument("--live", action="store_true",
                            help="use your real agent configuration")  # fmt: skip
        action.add_argument("--script", metavar="FILE", help="model server script (JSON)")
        action.add_argument("--timeout", type=float, help="seconds for the turn")
        action.add_argument(
            "--dump-requests", metavar="FILE", help="append the model server's requests to FILE"
        )
    return parser


def sessions(args: argparse.Namespace) -> int:
    store = JsonlSessionStore(args.dir)
    command: str = args.sessions_command
    if command == "list":
        return _list(store, as_json=args.json)
    if command == "prune":
        return _prune(args)
    records = store.records(check_journal_id(args.id))
    if command == "show":
        return _show(args.id, records)
    if command == "export":
        return _export(args.id, records, atif=args.atif)
    return _continue(store, args, records, fork=command == "fork")


def _age(text: str) -> float:
    from ..offline._homes import parse_age

    try:
        return parse_age(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("an age: ")) from None


def _days(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{seconds / 60:.0f} minutes"


def _prune(args: argparse.Namespace) -> int:
    from ..offline._homes import (
        DEFAULT_MAX_AGE,
        max_age,
        offline_homes_dir,
        prune_homes,
        unmarked_homes,
    )

    older_than: float | None = args.older_than
    if older_than is None:
        configured = max_age()  # None: automatic pruning is off, not the age
        older_than = DEFAULT_MAX_AGE if configured is None else configured
    directory = Path(args.homes) if args.homes else offline_homes_dir()
    if directory.exists() and not directory.is_dir():
        raise ConfigurationError(f"{directory} is not a directory", option="homes")
    pruned = prune_homes(older_than, dry_run=args.dry_run, directory=directory)
    for home in pruned:
        if args.json:
            row = {"engine": home.engine, "path": str(home.path), "idle_seconds": home.idle}
            print(json.dumps({**row, "removed": not args.dry_run}))
        else:
            verb = "would remove" if args.dry_run else "removed"
            print(f"{verb} {home.path} ({home.engine}, unused for {_days(home.idle)})")
    # Never removed, but never passed over in silence: a person decides.
    for home in unmarked_homes(older_than, directory=directory):
        if args.json:
            row = {"engine": home.engine, "path": str(home.path), "idle_seconds": home.idle}
            print(json.dumps({**row, "removed": False, "kept": "no_marker"}))
        else:
            print(
                f"kept {home.path} ({home.engine}, unused for {_days(home.idle)}): it has no "
                "marker of agentrun (a home of an older version?); delete it by hand if so"
            )
    if not args.json:
        verb = "would be removed" if args.dry_run else "removed"
        count = f"{len(pruned)} home{'' if len(pruned) == 1 else 's'}"
        print(f"{count} {verb} from {directory} (unused for {_days(older_than)} or more)")
    return 0


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    """``value`` when it is a non-empty string (a journal is read from disk: anything else
    there is not what the library wrote), else ``None``."""
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    """``value`` as a finite number, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _session_record(records: list[dict[str, Any]]) -> dict[str, Any]:
    empty: dict[str, Any] = {}
    return next((r for r in records if r.get("kind") == "session"), empty)


def _overview(journal_id: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    first = _session_record(records)
    fill: float | None = None
    resume_id = _text(first.get("resume_id"))
    for record in records:
        resume_id = _text(record.get("resume_id")) or resume_id
        if record.get("kind") != "summary":
            continue
        summary = _obj(record.get("summary"))
        fraction = _number(_obj(summary.get("context")).get("fraction"))
        if fraction is not None:
            fill = fraction
    totals = SessionTotals.from_journal(records)
    return {
        "id": journal_id,
        "engine": _text(first.get("engine")),
        "started": _text(first.get("at")),
        "turns": sum(1 for r in records if r.get("kind") == "turn"),
        "cost_usd": totals.cost_usd,
        "context_fill": fill,
        "resume_id": resume_id,
        "totals": {
            **totals.model_dump(mode="json", exclude_none=True),
            "cost_usd": totals.cost_usd,
        },
    }


def _totals_line(totals: dict[str, Any]) -> str:
    """``sessions show``'s line of the session's totals."""
    usage, side = _obj(totals.get("usage")), _obj(totals.get("side_usage"))
    parts = [f"{totals['turns']} turn{'' if totals['turns'] == 1 else 's'}"]
    tokens = [
        f"{usage[key]:,} {name}"
        for key, name in (
            ("input_tokens", "input"),
            ("cache_read_tokens", "cache read"),
            ("cache_write_tokens", "cache write"),
            ("output_tokens", "output"),
        )
        if isinstance(usage.get(key), int)
    ]
    if tokens:
        parts.append(", ".join(tokens) + " tokens")
    side_tokens = sum(
        v for k in ("input_tokens", "output_tokens") if isinstance(v := side.get(k), int)
    )
    if side_tokens:
        parts.append(f"{side_tokens:,} side tokens")
    if totals["unaccounted_turns"]:
        parts.append(f"tokens not known in full for {totals['unaccounted_turns']}")
    cost = totals["cost_usd"]
    if cost is None:
        parts.append(f"cost unknown ({totals['unpriced_turns']} unpriced)")
    else:
        parts.append(f"${cost:.4f}")
    return "totals: " + "; ".join(parts)


def _list(store: JsonlSessionStore, *, as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    ids = store.ids()
    unreadable = 0
    for journal_id in ids:
        try:
            rows.append(_overview(journal_id, store.records(journal_id)))
        except ConfigurationError as exc:  # one damaged journal does not hide the others
            unreadable += 1
            print(f"agentrun: {clean(str(exc))}", file=sys.stderr)
    status = _UNREADABLE if unreadable else 0
    if as_json:
        for row in rows:
            print(json.dumps(row, allow_nan=False))
        return status
    if not ids:
        print(f"no journaled sessions in {clean(str(store.directory))}")
        return 0
    if not rows:
        return status
    print(f"{'ID':<24} {'ENGINE':<17} {'STARTED':<20} {'TURNS':>5} {'COST':>9} {'CONTEXT':>7}")
    for row in rows:
        cost = "-" if row["cost_usd"] is None else f"${row['cost_usd']:.4f}"
        fill = "-" if row["context_fill"] is None else f"{row['context_fill']:.0%}"
        print(
            f"{row['id']:<24} {clean(row['engine'] or '?'):<17} {clean(row['started'] or '?'):<20} "
            f"{row['turns']:>5} {cost:>9} {fill:>7}"
        )
    return status


def _show(journal_id: str, records: list[dict[str, Any]]) -> int:
    row = _overview(journal_id, records)
    engine, started = clean(row["engine"] or "?"), clean(row["started"] or "?")
    print(f"session {journal_id}: {engine}, started {started}")
    if row["resume_id"]:
        print(f"  resume id: {clean(row['resume_id'])}")
    print(f"  {_totals_line(row['totals'])}")
    # Numbered in the journal's order: each process that resumed the session counted from 1.
    number = 0
    for record in records:
        kind = record.get("kind")
        if kind == "turn":
            number += 1
            print(f"▶ {clean(str(record.get('prompt', '')))}")
        elif kind == "summary":
            summary = _obj(record.get("summary"))
            error = _text(record.get("error")) or "no result"
            state = "ok" if summary.get("ok") is True else f"failed ({clean(error)})"
            text = clean(str(record.get("text") or "").strip())
            if text:
                print("  " + text.replace("\n", "\n  "))
            print(f"  turn {number} {state}")
        elif kind == "fork":
            print(f"  forked from {clean(str(record.get('from')))}")
    return 0


def _turn_messages(
    journal_id: str, records: list[dict[str, Any]]
) -> tuple[list[list[Message]], list[str]]:
    """Each turn's messages and prompt; a message record that holds no message is a
    :class:`ConfigurationError` naming it."""
    from pydantic import ValidationError

    turns: list[list[Message]] = []
    prompts: list[str] = []
    for index, record in enumerate(records, start=1):
        kind = record.get("kind")
        if kind == "turn":
            turns.append([])
            prompts.append(str(record.get("prompt", "")))
        elif kind == "message" and turns:
            try:
                turns[-1].append(Message.model_validate(record.get("message")))
            except ValidationError as exc:
                problem = exc.errors()[0]
                where = ".".join(str(p) for p in problem["loc"]) or "message"
                raise ConfigurationError(
                    f"session {journal_id} is damaged at record {index}: not a message "
                    f"({where}: {problem['msg']})",
                    option="session",
                ) from None
    return turns, prompts


def _export(journal_id: str, records: list[dict[str, Any]], *, atif: bool) -> int:
    if atif:
        from .._store.trajectory import to_atif

        turns, prompts = _turn_messages(journal_id, records)
        if not turns:
            # An ATIF document has at least one step; a session that ran no turn has none.
            raise ConfigurationError(
                f"session {journal_id} has no turns to export as a trajectory", option="session"
            )
        # The agent's session id (its ``init``'s, else the journal's resume id), as ``run
        # --atif`` writes it; the journal's own id is not the agent's.
        trajectory = to_atif(turns, prompts=prompts)
        resume_id = _overview(journal_id, records)["resume_id"]
        if trajectory.session_id is None and resume_id is not None:
            trajectory = to_atif(turns, prompts=prompts, session_id=resume_id)
        print(trajectory.model_dump_json(exclude_none=True, indent=2))
        return 0
    for record in records:
        print(json.dumps(record, allow_nan=False))
    return 0


class _SameJournal:
    """A store that keeps appending to one journal: a resumed session goes on in its journal,
    a forked one begins its own with ``first`` (its ``fork`` record), written once the session
    holds the journal: a fork that does not start leaves no journal."""

    def __init__(
        self, store: JsonlSessionStore, journal_id: str, first: dict[str, Any] | None = None
    ) -> None:
        self.store = store
        self.journal_id = journal_id
        self._first = first

    def open(self, journal_id: str) -> None:
        self.store.open(self.journal_id)
        first, self._first = self._first, None
        if first is not None:
            self.store.append(self.journal_id, first)

    def append(self, journal_id: str, record: dict[str, Any]) -> None:
        self.store.append(self.journal_id, record)

    def sync(self, journal_id: str) -> None:
        self.store.sync(self.journal_id)

    def close(self, journal_id: str) -> None:
        self.store.close(self.journal_id)

    def records(self, journal_id: str) -> list[dict[str, Any]]:
        return self.store.records(self.journal_id)

    def ids(self) -> list[str]:
        return self.store.ids()


def _continue(
    store: JsonlSessionStore, args: argparse.Namespace, records: list[dict[str, Any]], *, fork: bool
) -> int:
    import anyio

    from .run import run

    row = _overview(args.id, records)
    engine: str | None = row["engine"]
    if not engine:
        what = "names no engine" if _session_record(records) else "has no session record"
        raise ConfigurationError(f"session {args.id} {what}", option="session")
    if not row["resume_id"]:
        raise ConfigurationError(
            f"session {args.id} has no resume id (the agent never reported one)",
            option="session",
        )
    if fork and engine not in FORKING_ENGINES:
        raise ForkNotSupportedError(f"{engine} cannot fork a session", engine=engine)
    options = _obj(_session_record(records).get("options"))
    cwd = _text(options.get("cwd"))
    target = new_journal_id() if fork else args.id
    first = {"kind": "fork", "from": args.id, "resume_id": row["resume_id"]} if fork else None
    run_args = argparse.Namespace(
        engine=engine,
        model=_text(options.get("model")),
        cwd=cwd if cwd is not None and Path(cwd).is_dir() else None,
        json=args.json,
        live=args.live,
        resume=row["resume_id"],
        fork=fork,
        then=[],
        script=args.script,
        option=[f"{k}={v}" for k, v in _obj(options.get("options")).items()],
        timeout=args.timeout,
        idle_timeout=None,
        tool_timeout=None,
        stall_after=None,
        binary=_text(options.get("binary")),
        prompt=args.prompt,
        prompt_file=None,
        dump_requests=args.dump_requests,
        journal_store=_SameJournal(store, target, first),
    )
    status = anyio.run(run, run_args)
    if fork and store.path(target).exists():
        print(f"forked session: {target}", file=sys.stderr)
    return status
