"""The edges of durable sessions: one session at a time in a journal, private journals, a store
that fails, journals damaged on disk, and what ``agentrun sessions`` prints of them."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import (
    ConfigurationError,
    JournalError,
    JournalInUseError,
    JsonlSessionStore,
    Message,
    TurnSummary,
    run_turn,
)
from agentrun.cli import main
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AGENTRUN_SESSIONS_DIR": str(home / "journals"),
        "AGENTRUN_OFFLINE_HOMES": str(home / "homes"),
    }
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,  # a guard against a hang, not an expectation
        check=False,
        env=env,
    )


class _Continuing:
    """A store that goes on with one journal of ``store`` (``SessionOptions(journal=...)`` with
    a ``journal_id``), as ``agentrun sessions resume`` does."""

    def __init__(self, store: JsonlSessionStore, journal_id: str) -> None:
        self.store = store
        self.journal_id = journal_id

    def open(self, journal_id: str) -> None:
        self.store.open(journal_id)

    def append(self, journal_id: str, record: dict[str, Any]) -> None:
        self.store.append(journal_id, record)

    def sync(self, journal_id: str) -> None:
        self.store.sync(journal_id)

    def close(self, journal_id: str) -> None:
        self.store.close(journal_id)

    def records(self, journal_id: str) -> list[dict[str, Any]]:
        return self.store.records(journal_id)

    def ids(self) -> list[str]:
        return self.store.ids()


# -- one session at a time ------------------------------------------------------------------


def test_a_journal_is_held_by_one_store_at_a_time_until_closed(tmp_path: Path) -> None:
    first, second = JsonlSessionStore(tmp_path), JsonlSessionStore(tmp_path)
    first.open("j1")
    first.append("j1", {"kind": "session", "engine": "claude"})
    with pytest.raises(JournalInUseError, match="session j1 is in use"):
        second.open("j1")
    with pytest.raises(JournalInUseError):
        second.append("j1", {"kind": "closed"})
    with pytest.raises(JournalInUseError):  # a second session of the same store
        first.open("j1")
    first.close("j1")
    second.append("j1", {"kind": "closed"})
    second.close("j1")
    assert [r["kind"] for r in first.records("j1")] == ["session", "closed"]
    assert JournalInUseError.error_code == "journal_in_use"
    assert issubclass(JournalInUseError, JournalError)


def test_a_process_that_dies_lets_its_journal_go(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from agentrun import JsonlSessionStore as S\n"
         f"s = S({str(tmp_path)!r}); s.open('j1'); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(JournalInUseError):
            JsonlSessionStore(tmp_path).open("j1")
    finally:
        holder.kill()
        holder.communicate()
    store = JsonlSessionStore(tmp_path)
    store.open("j1")  # the system let the lock go with the process
    store.close("j1")


def _first_run(home: Path) -> str:
    done = _cli(home, "run", "--engine", "claude", "--journal", "remember the word PINEAPPLE")
    assert done.returncode == 0, done.stderr
    (journal_id,) = JsonlSessionStore(home / "journals").ids()
    return journal_id


@pytest.mark.agent
def test_resume_of_a_session_in_use_is_a_clear_error_and_leaves_its_journal(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    journal_id = _first_run(tmp_path)
    store = JsonlSessionStore(tmp_path / "journals")
    before = store.path(journal_id).read_bytes()
    store.open(journal_id)  # a session of another process holds it
    try:
        done = _cli(tmp_path, "sessions", "resume", journal_id, "what was the word?")
    finally:
        store.close(journal_id)
    assert done.returncode == 1, done.stderr
    assert done.stderr == f"agentrun: session {journal_id} is in use (another session is " \
                          "writing its journal)\n"  # fmt: skip
    assert done.stdout == "" and store.path(journal_id).read_bytes() == before
    again = _cli(tmp_path, "sessions", "resume", journal_id, "what was the word?")
    assert again.returncode == 0, again.stderr


@pytest.mark.anyio
@pytest.mark.agent
async def test_a_second_session_on_a_journal_in_use_does_not_start(tmp_path: Path) -> None:
    require_engine("claude")
    store = JsonlSessionStore(tmp_path / "journals")
    async with ModelServer() as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", journal=store)
        async with engine.start(options) as session:
            journal_id = session.journal_id
            assert journal_id is not None
            other = JsonlSessionStore(tmp_path / "journals")
            second = engine.start(
                options.model_copy(update={"journal": _Continuing(other, journal_id)})
            )
            with pytest.raises(JournalInUseError):
                async with second:
                    pass
            assert getattr(second.driver, "pid", "?") is None  # its agent never started
            await run_turn(session, "hello")
    kinds = [r["kind"] for r in store.records(journal_id)]
    assert kinds.count("session") == 1 and kinds[-1] == "closed"


# -- private journals -------------------------------------------------------------------------


def test_journals_are_private_in_a_private_directory(tmp_path: Path) -> None:
    made = JsonlSessionStore(tmp_path / "made" / "journals")
    made.append("j1", {"kind": "session"})
    made.close("j1")
    assert stat.S_IMODE(made.path("j1").stat().st_mode) == 0o600
    assert stat.S_IMODE(made.directory.stat().st_mode) == 0o700
    existing = tmp_path / "existing"
    existing.mkdir()
    existing.chmod(0o755)  # the user's own directory: left as it is
    store = JsonlSessionStore(existing)
    store.append("j2", {"kind": "session"})
    store.close("j2")
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755
    assert stat.S_IMODE(store.path("j2").stat().st_mode) == 0o600


# -- a store that fails -----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.agent
async def test_a_journal_that_cannot_be_written_stops_the_session_before_it_starts(
    tmp_path: Path,
) -> None:
    require_engine("claude")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    async with ModelServer() as server:
        engine, options = embedded_engine(
            "claude", server.url, tmp_path / "agent", journal=JsonlSessionStore(a_file / "j")
        )
        session = engine.start(options)
        with pytest.raises(JournalError, match=r"cannot write session journal .* Not a directory"):
            async with session:
                pass
        assert getattr(session.driver, "pid", "?") is None  # its agent never started
    # The command line: one line, exit 1.
    env_home = tmp_path / "cli"
    env_home.mkdir()
    (env_home / "journals").write_text("")
    done = _cli(env_home, "run", "--journal", "hello")
    assert done.returncode == 1
    assert done.stderr.startswith("agentrun: cannot write session journal ") and (
        done.stderr.count("\n") == 1
    ), done.stderr


class _DiskFills(JsonlSessionStore):
    """The built-in store on a disk that fills up after ``room`` records (a full disk cannot be
    had for a test: the store's own file writes are what fail)."""

    def __init__(self, directory: Path, room: int) -> None:
        super().__init__(directory)
        self.room = room

    def append(self, journal_id: str, record: dict[str, Any]) -> None:
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= 1
        super().append(journal_id, record)


@pytest.mark.anyio
@pytest.mark.agent
async def test_a_store_that_fails_mid_turn_loses_nothing_of_the_turn(tmp_path: Path) -> None:
    require_engine("claude")
    store = _DiskFills(tmp_path / "journals", room=3)  # session, turn, one message
    seen: list[Message] = []
    script = Script(turns=[ModelTurn.text("The answer is 42.")])
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", journal=store)
        session = engine.start(options)
        summaries: list[TurnSummary] = []

        async def one_turn() -> None:
            async with session:
                summaries.append(await run_turn(session, "the answer?", on_message=seen.append))

        with pytest.raises(JournalError) as raised:  # the close says so, the one error
            await one_turn()
    (summary,) = summaries
    assert summary.ok and summary.text == "The answer is 42."
    assert len(seen) == summary.messages  # every message delivered
    (error,) = summary.errors
    assert error.code == "journal" and "No space left on device" in error.message
    assert type(raised.value) is JournalError and "No space left" in str(raised.value)
    journal_id = session.journal_id
    assert journal_id is not None
    records = JsonlSessionStore(tmp_path / "journals").records(journal_id)
    assert [r["kind"] for r in records] == ["session", "turn", "message"]  # a prefix, no holes


# -- what is read from disk --------------------------------------------------------------------


def _journal(directory: Path, journal_id: str, *lines: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{journal_id}.jsonl").write_text("".join(line + "\n" for line in lines))


def test_list_of_only_damaged_journals_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _journal(tmp_path, "bad", '{"kind": "session"', '{"kind": "closed"}')
    for args in (["list"], ["list", "--json"]):
        assert main(["sessions", "--dir", str(tmp_path), *args]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == "agentrun: session bad is damaged at record 1\n"
    _journal(tmp_path, "good", '{"kind": "session", "engine": "claude", "at": "2026-01-01"}')
    assert main(["sessions", "--dir", str(tmp_path), "list", "--json"]) == 2
    out, err = capsys.readouterr()
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["good"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["sessions", "--dir", str(empty), "list"]) == 0
    assert capsys.readouterr().out == f"no journaled sessions in {empty}\n"


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_records_of_the_wrong_types_are_read_as_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _journal(
        tmp_path, "odd",
        json.dumps({"kind": "session", "engine": ["claude"], "at": {"t": 1}, "resume_id": 7}),
        json.dumps({"kind": "turn", "turn": 1, "prompt": "hi"}),
        '{"kind": "summary", "summary": {"ok": true, "usage": {"cost_usd": NaN}, '
        '"context": {"fraction": Infinity}}, "text": "hello"}',
    )  # fmt: skip
    directory = ["sessions", "--dir", str(tmp_path)]
    assert main([*directory, "list", "--json"]) == 0
    (row,) = [_strict(line) for line in capsys.readouterr().out.splitlines()]
    assert row["engine"] is None and row["started"] is None and row["resume_id"] is None
    assert row["cost_usd"] is None and row["context_fill"] is None and row["turns"] == 1
    assert main([*directory, "list"]) == 0
    assert "odd" in capsys.readouterr().out
    assert main([*directory, "show", "odd"]) == 0
    assert "turn 1 ok" in capsys.readouterr().out
    assert main([*directory, "export", "odd"]) == 0
    exported = [_strict(line) for line in capsys.readouterr().out.splitlines()]
    assert exported[2]["summary"]["usage"]["cost_usd"] is None
    assert main([*directory, "fork", "odd", "hello"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "agentrun: session odd names no engine\n"


def test_records_nested_too_deep_are_damage(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    for depth in (200, 100_000):
        deep = '{"kind": "message", "message": ' + "[" * depth + "]" * depth + "}"
        _journal(tmp_path, "deep", deep, '{"kind": "closed"}')
        with pytest.raises(ConfigurationError, match="session deep is damaged at record 1"):
            store.records("deep")


def test_journals_and_records_larger_than_their_bounds_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrun._store import jsonl_store

    monkeypatch.setattr(jsonl_store, "MAX_JOURNAL_BYTES", 400)
    monkeypatch.setattr(jsonl_store, "MAX_RECORD_BYTES", 100)
    store = JsonlSessionStore(tmp_path)
    big = json.dumps({"kind": "message", "text": "x" * 200})
    _journal(tmp_path, "big", big, '{"kind": "closed"}')
    with pytest.raises(ConfigurationError, match="session big is damaged at record 1"):
        store.records("big")
    _journal(tmp_path, "long", *['{"kind": "turn", "prompt": "hello there"}'] * 20)
    with pytest.raises(ConfigurationError, match=r"cannot read session 'long' .* larger than 400"):
        store.records("long")


def test_a_fifo_named_as_a_journal_is_refused_without_waiting(tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    journals.mkdir()
    os.mkfifo(journals / "pipe.jsonl")
    listed = _cli(tmp_path, "sessions", "list")
    assert listed.returncode == 2 and "cannot read session 'pipe'" in listed.stderr
    shown = _cli(tmp_path, "sessions", "show", "pipe")
    assert shown.returncode == 2 and shown.stderr.startswith("agentrun: cannot read session")
    with pytest.raises(JournalError, match="cannot write session journal pipe in "):
        JsonlSessionStore(journals).open("pipe")
    (journals / "full.jsonl").symlink_to("/dev/full")  # a device: never written as a journal
    with pytest.raises(JournalError, match=r"full\.jsonl is not a file"):
        JsonlSessionStore(journals).open("full")


# -- fork: bad input creates nothing ----------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--script", "/no/such/script.json"], "agentrun: "),
        (["--script", "SCRIPT", "--live"], "agentrun: --script is for the embedded model server"),
    ],
)
def test_a_fork_refused_as_bad_input_creates_no_journal(
    extra: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"blocks": [{"type": "text", "text": "hi"}]}]}))
    _journal(
        tmp_path / "journals", "orig",
        json.dumps({"kind": "session", "engine": "claude", "resume_id": "abc"}),
    )  # fmt: skip
    args = [str(script) if a == "SCRIPT" else a for a in extra]
    assert main(["sessions", "--dir", str(tmp_path / "journals"), "fork", "orig", "hi", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(expected) and err.count("\n") == 1, err
    assert JsonlSessionStore(tmp_path / "journals").ids() == ["orig"]


# -- a journal across processes, shown and exported ---------------------------------------------


@pytest.mark.anyio
@pytest.mark.agent
async def test_show_numbers_a_resumed_sessions_turns_and_escapes_the_agents_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_engine("claude")
    store = JsonlSessionStore(tmp_path / "journals")
    script = Script(turns=[ModelTurn.text("first \x1b[2J answer\x07"), ModelTurn.text("second")])
    summaries = []
    async with ModelServer(script) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent", journal=store)
        async with engine.start(options) as session:
            summaries.append(await run_turn(session, "one \x1b]0;title\x07"))
            journal_id = session.journal_id
            assert session.resume_id is not None
            assert session.resume_id == summaries[0].resume_id
        assert journal_id is not None
        # A later session (another process, as `agentrun sessions resume` is) goes on with it.
        resumed = options.model_copy(
            update={"journal": _Continuing(store, journal_id), "resume_id": session.resume_id}
        )
        async with engine.start(resumed) as again:
            summaries.append(await run_turn(again, "two"))
    assert all(s.ok for s in summaries)
    assert main(["sessions", "--dir", str(store.directory), "show", journal_id]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "▶ one \\x1b]0;title\\x07" in out and "first \\x1b[2J answer\\x07" in out
    assert [line.strip() for line in out.splitlines() if line.strip().startswith("turn ")] == [
        "turn 1 ok",
        "turn 2 ok",
    ]
    assert main(["sessions", "--dir", str(store.directory), "export", journal_id, "--atif"]) == 0
    trajectory = json.loads(capsys.readouterr().out)
    # The agent's session id, as `run --atif` writes it, not the journal's.
    assert trajectory["session_id"] == summaries[0].resume_id != journal_id


@pytest.mark.anyio
@pytest.mark.agent
async def test_the_session_span_has_the_agents_conversation_id(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentrun import otel

    require_engine("claude")
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with otel.instrumented(tracer_provider=provider):
        async with ModelServer() as server:
            engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
            async with engine.start(options) as session:
                summary = await run_turn(session, "hello")
    assert summary.resume_id is not None and session.resume_id == summary.resume_id
    (span,) = [s for s in spans.get_finished_spans() if s.name.startswith("agentrun.session")]
    assert (span.attributes or {}).get("gen_ai.conversation.id") == summary.resume_id
