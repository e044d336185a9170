"""When loading a Gemini CLI session would erase it: its chat file is named after the minute the
load happens in (Gemini CLI 0.61 starts a fresh recording in that file before it reads the
session; see agentrun/engines/acp/_gemini_chats.py). The end-to-end resume is in
tests/cli/test_sessions.py and tests/engines/test_session_totals_e2e.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from agentrun.engines.acp._gemini_chats import minute_of_its_file

SESSION = "5e9459d3-0cb1-4a7f-a1a5-ebfa98c24f5c"
BEGAN = datetime(2026, 11, 29, 9, 27, 16, tzinfo=timezone.utc)


def _chat_file(home: Path, minute: datetime, session: str = SESSION) -> Path:
    chats = home / ".gemini" / "tmp" / "workspace" / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    path = chats / f"session-{minute:%Y-%m-%dT%H-%M}-{session[:8]}.jsonl"
    path.write_text("{}\n")
    return path


def test_a_load_in_the_minute_the_session_began_would_reuse_its_file(tmp_path: Path) -> None:
    _chat_file(tmp_path, BEGAN)
    env = {"HOME": str(tmp_path)}
    assert minute_of_its_file(env, SESSION, BEGAN + timedelta(seconds=40))
    # The same minute in another time zone is the same minute (the file names are UTC).
    local = (BEGAN + timedelta(seconds=3)).astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert minute_of_its_file(env, SESSION, local)


def test_a_load_in_a_later_minute_or_of_another_session_is_safe(tmp_path: Path) -> None:
    _chat_file(tmp_path, BEGAN)
    _chat_file(tmp_path, BEGAN + timedelta(minutes=5), "9d9654f7-0000-4000-8000-000000000000")
    env = {"HOME": str(tmp_path)}
    assert not minute_of_its_file(env, SESSION, BEGAN + timedelta(seconds=44))
    assert not minute_of_its_file(env, SESSION, BEGAN + timedelta(minutes=5))


def test_gemini_cli_home_wins_over_home_and_no_home_is_safe(tmp_path: Path) -> None:
    _chat_file(tmp_path / "gemini-home", BEGAN)
    env = {"HOME": str(tmp_path / "elsewhere"), "GEMINI_CLI_HOME": str(tmp_path / "gemini-home")}
    assert minute_of_its_file(env, SESSION, BEGAN)
    assert not minute_of_its_file({"HOME": str(tmp_path / "elsewhere")}, SESSION, BEGAN)
    assert not minute_of_its_file({}, SESSION, BEGAN)
