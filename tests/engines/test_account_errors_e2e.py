"""A turn the agent cannot run at all, on the real pinned agents, offline: the model server
answers 401 or 402 with its API's error body (or the agent has no key at all), each agent
reports that in its own way, and ``run_turn`` raises the typed error with the agent's words
rather than returning an empty summary. A failure of another kind (a 500) stays a failed
summary."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_support import require_engine

from agentrun import (
    AgentAccountError,
    Engine,
    Message,
    MessageType,
    NotAuthenticatedError,
    QuotaExceededError,
    SessionOptions,
    run_turn,
)
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: The program each engine runs.
PROGRAM = {"codex-app-server": "codex", "opencode-acp": "opencode", "claude-acp": "claude"}
#: What each agent says about a rejected key (lower case), so the error carries its words.
WORDS_401 = {
    "claude": "invalid api key",
    "codex": "401 unauthorized",
    "codex-app-server": "401 unauthorized",
    "opencode": "invalid x-api-key",
    "opencode-acp": "invalid x-api-key",
    "claude-acp": "authentication required",
    "qwen": "invalid x-api-key",
}


def _engine(
    name: str, url: str, tmp_path: Path, drop: str | None = None
) -> tuple[Engine, SessionOptions]:
    require_engine(PROGRAM.get(name, name))
    engine, options = embedded_engine(name, url, tmp_path / "agent")
    if drop is not None:
        env = {key: value for key, value in options.env.items() if key != drop}
        options = SessionOptions.model_validate({**options.model_dump(), "env": env})
    return engine, options


@pytest.mark.parametrize("name", sorted(WORDS_401))
async def test_a_rejected_key_raises_not_authenticated_with_the_agents_words(
    name: str, tmp_path: Path
) -> None:
    script = Script(turns=[ModelTurn.error(401, "invalid x-api-key")] * 4)
    async with ModelServer(script) as server:
        engine, options = _engine(name, server.url, tmp_path)
        async with engine.start(options) as session:
            with pytest.raises(NotAuthenticatedError) as caught:
                await run_turn(session, "hi", timeout=120)
    error = caught.value
    assert isinstance(error, AgentAccountError) and error.__cause__ is None
    assert error.error_code == "not_authenticated" and error.engine == name
    assert WORDS_401[name] in error.message.lower(), error.message
    summary = error.summary
    assert summary is not None and not summary.ok
    assert summary.errors and summary.errors[-1].code == "not_authenticated", summary.errors
    assert all(e.message for e in summary.errors)


@pytest.mark.parametrize("name", ["claude", "codex", "qwen"])
async def test_no_credit_raises_quota_exceeded(name: str, tmp_path: Path) -> None:
    script = Script(turns=[ModelTurn.error(402, "Your credit balance is too low")] * 4)
    async with ModelServer(script) as server:
        engine, options = _engine(name, server.url, tmp_path)
        async with engine.start(options) as session:
            with pytest.raises(QuotaExceededError) as caught:
                await run_turn(session, "hi", timeout=120)
    assert caught.value.error_code == "quota_exceeded"
    assert "credit balance is too low" in caught.value.message.lower()


@pytest.mark.parametrize(
    ("name", "key", "words"),
    [
        ("claude", "ANTHROPIC_API_KEY", "not logged in"),
        ("codex", "FAKE_OPENAI_API_KEY", "fake_openai_api_key"),
        ("claude-acp", "ANTHROPIC_API_KEY", "authentication required"),
    ],
)
async def test_no_key_at_all_raises_not_authenticated(
    name: str, key: str, words: str, tmp_path: Path
) -> None:
    async with ModelServer(Script(turns=[ModelTurn.text("Never sent.")])) as server:
        engine, options = _engine(name, server.url, tmp_path, drop=key)
        async with engine.start(options) as session:
            with pytest.raises(NotAuthenticatedError) as caught:
                await run_turn(session, "hi", timeout=120)
        if name != "claude-acp":  # its adapter may call the model before it finds no key
            assert server.model_requests == [], "the agent called the model without a key"
    assert words in caught.value.message.lower(), caught.value.message


async def test_the_stream_delivers_the_error_then_raises_it(tmp_path: Path) -> None:
    script = Script(turns=[ModelTurn.error(401, "invalid x-api-key")])
    async with ModelServer(script) as server:
        engine, options = _engine("claude", server.url, tmp_path)
        async with engine.start(options) as session:
            seen: list[Message] = []
            turn = session.turn("hi", timeout=120)

            async def stream() -> None:
                async with turn:
                    async for message in turn:
                        seen.append(message)

            with pytest.raises(NotAuthenticatedError) as caught:
                await stream()
    last = seen[-1]
    assert last.type is MessageType.ERROR and last.error is not None
    assert last.error.code == "not_authenticated" and last.error.fatal
    assert last.error.message == caught.value.message
    assert caught.value.summary is turn.summary


@pytest.mark.parametrize("name", ["claude", "codex", "codex-app-server", "claude-acp", "codex-acp"])
async def test_a_server_error_stays_a_failed_summary(name: str, tmp_path: Path) -> None:
    script = Script(turns=[ModelTurn.error(500, "scripted upstream error")] * 4)
    async with ModelServer(script) as server:
        engine, options = _engine(name, server.url, tmp_path)
        async with engine.start(options) as session:
            summary = await run_turn(session, "hi", timeout=120)
    assert not summary.ok and summary.errors, summary
    assert summary.stop_reason != "end_turn", summary
    assert all(e.message for e in summary.errors)
    assert not {e.code for e in summary.errors} & {"not_authenticated", "quota_exceeded"}


@pytest.mark.parametrize("drop", [None, "ANTHROPIC_API_KEY"], ids=["http_401", "no_key"])
async def test_claude_without_an_account_is_one_error_and_an_error_stop(
    drop: str | None, tmp_path: Path
) -> None:
    """Claude Code says "Not logged in" (or "Invalid API key") in a synthetic message with
    ``stop_reason: stop_sequence``, then on its result: one failure, one record of it (the
    agent's, under the typed code), and a stop reason that says the turn failed."""
    script = Script(turns=[ModelTurn.error(401, "invalid x-api-key")] * 4)
    async with ModelServer(script) as server:
        engine, options = _engine("claude", server.url, tmp_path, drop=drop)
        async with engine.start(options) as session:
            with pytest.raises(NotAuthenticatedError) as caught:
                await run_turn(session, "hi", timeout=120)
    summary = caught.value.summary
    assert summary is not None
    assert [(e.code, e.message) for e in summary.errors] == [
        ("not_authenticated", caught.value.message)
    ], summary.errors
    assert summary.errors[0].data == {"agent_code": "api_error"}
    assert summary.stop_reason == "error" and not summary.ok
