"""A session forked on every engine's real pinned agent, offline (``SessionOptions(fork=True)``,
what ``agentrun sessions fork`` runs; ``tests/cli/test_sessions.py`` forks through the command).

Turn 1 tells the agent a fact; the fork's first model request carries that conversation, in a new
agent session; the source session, resumed afterwards, goes on with turn 1 and without anything
of the fork. An agent that cannot fork refuses with :class:`ForkNotSupportedError` before any
model call, and nothing is forked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_support import live_engine, require_engine

from agentrun import ForkNotSupportedError, TurnSummary, run_turn
from agentrun.offline import ModelServer, ModelTurn, RecordedRequest, Script

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: Every engine: the nine with an embedded configuration and the generic ``acp`` engine.
ENGINES = (
    "claude", "claude-acp", "codex", "codex-app-server", "codex-acp",
    "opencode", "opencode-acp", "gemini", "qwen", "acp",
)  # fmt: skip
#: Engines whose pinned agent cannot fork: they advertise no ACP ``session/fork``.
CANNOT_FORK = {"gemini", "qwen"}

FACT = "The secret word is PINEAPPLE."
FORK_ONLY = "MANGO"
SOURCE_ONLY = "KIWI"


def _program(name: str) -> str:
    return {"codex-app-server": "codex", "opencode-acp": "opencode", "acp": "claude-acp"}.get(
        name, name
    )


def _turn_requests(server: ModelServer, since: int) -> list[RecordedRequest]:
    return [r for r in server.requests[since:] if r.turn_index is not None]


@pytest.mark.parametrize("name", ENGINES)
async def test_a_fork_goes_on_with_the_conversation_and_the_source_is_unchanged(
    name: str, tmp_path: Path
) -> None:
    require_engine(_program(name))
    script = Script(
        turns=[
            ModelTurn.text(f"Noted. {FACT}"),
            ModelTurn.text(f"In the fork: PINEAPPLE, and {FORK_ONLY}."),
            ModelTurn.text(f"Back in the source: PINEAPPLE, and {SOURCE_ONLY}."),
        ]
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    home = tmp_path / "agent"
    async with ModelServer(script) as server:
        engine, options = live_engine(name, server.url, home, cwd=str(workspace))
        async with engine.start(options) as session:
            first = await run_turn(session, f"Remember this: {FACT}", timeout=120)
            source_id = session.resume_id
        assert first.ok, first.errors
        assert source_id is not None

        mark = len(server.requests)
        engine, options = live_engine(
            name, server.url, home, cwd=str(workspace), resume_id=source_id, fork=True
        )
        if name in CANNOT_FORK:
            with pytest.raises(ForkNotSupportedError) as caught:
                async with engine.start(options) as forked:
                    await run_turn(forked, f"What was the word? Say {FORK_ONLY}.", timeout=120)
            assert caught.value.error_code == "fork_not_supported"
            assert caught.value.engine == name
            assert _turn_requests(server, mark) == []  # refused before any model call
            return
        async with engine.start(options) as forked:
            fork_turn = await run_turn(forked, f"What was the word? Say {FORK_ONLY}.", timeout=120)
            fork_id = forked.resume_id
        fork_requests = _turn_requests(server, mark)

        mark = len(server.requests)
        engine, options = live_engine(
            name, server.url, home, cwd=str(workspace), resume_id=source_id
        )
        async with engine.start(options) as resumed:
            source_turn = await run_turn(resumed, f"Say the word with {SOURCE_ONLY}.", timeout=120)
            resumed_id = resumed.resume_id
        source_requests = _turn_requests(server, mark)

    _check_turn(fork_turn, FORK_ONLY)
    _check_turn(source_turn, SOURCE_ONLY)
    # The fork is a new agent session that starts from the source's conversation.
    assert fork_id is not None and fork_id != source_id, (fork_id, source_id)
    assert len(fork_requests) == 1, fork_requests
    assert b"PINEAPPLE" in fork_requests[0].body and b"Remember this" in fork_requests[0].body
    # The source goes on as it was: turn 1 is there, nothing of the fork is.
    assert resumed_id == source_id
    assert len(source_requests) == 1, source_requests
    body = source_requests[0].body
    assert b"Remember this" in body and b"PINEAPPLE" in body
    assert FORK_ONLY.encode() not in body, body


def _check_turn(summary: TurnSummary, word: str) -> None:
    assert summary.ok, summary.errors
    assert word in summary.text, summary.text
