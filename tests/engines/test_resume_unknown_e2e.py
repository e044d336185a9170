"""Resuming a session the agent does not know is :class:`SessionNotFoundError` on every engine
that can resume, through its real pinned agent: the documented typed error naming the id,
whether the agent refuses it when the session opens (the ACP agents' ``session/load`` /
``session/resume``) or on the first turn (the spawn-per-turn agents, Claude Code), and whether
the id is malformed or merely unknown. No model call is made for it.

Before, the ACP agents' refusals (JSON-RPC internal errors, the reason in ``data.details`` or
nowhere) were ``ProtocolError``, Codex app-server's a bare ``JsonRpcError``, and Claude Code's
refusal of a malformed id a failed turn; `codex exec` started a new thread for an id that is
not a UUID (a thread name to it) when no thread had that name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun import EngineUnavailableError, SessionNotFoundError, SessionOptions, run_turn
from agentrun.offline import EMBEDDED_ENGINES, ModelServer, Script, embedded_engine

# One backend: what is checked is the agent's refusal, not the event loop.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.agent,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
]

#: An id of no session anywhere, and one shaped like each agent's own (a UUID).
UNKNOWN_IDS = ("no-such-id", "01a20000-0000-7000-8000-00000000beef")


@pytest.mark.parametrize("name", sorted(EMBEDDED_ENGINES))
async def test_resuming_an_unknown_session_is_session_not_found(name: str, tmp_path: Path) -> None:
    async with ModelServer(Script(exhausted_text="no model call was expected")) as server:
        for unknown in UNKNOWN_IDS:
            try:
                engine, options = embedded_engine(
                    name, server.url, tmp_path / unknown, cwd=str(tmp_path), resume_id=unknown
                )
            except EngineUnavailableError as exc:
                pytest.skip(str(exc))
            assert isinstance(options, SessionOptions)
            with pytest.raises(SessionNotFoundError) as caught:
                async with engine.start(options) as session:
                    await run_turn(session, "hello", timeout=60)
            assert caught.value.session_id == unknown, (name, unknown)
            assert caught.value.error_code == "session_not_found"
        assert server.model_requests == []
