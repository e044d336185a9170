"""Cancelling a turn through the real pinned agents: at its very start, a few milliseconds in,
mid-stream; every cancelled or timed-out turn says ``stop_reason == "cancelled"``; the session
goes on with a clean turn that carries nothing of the cancelled one.

Before these fixes a cancel at the start of a turn of a long-lived agent (Claude Code, Codex
app-server, an ACP agent) waited for the end of a turn the agent never began, killed the agent
after the engine's cancel timeout, and every later turn raised ``SessionTerminatedError``; and
Claude's cancelled turns said ``stop_reason`` ``None`` or ``"tool_use"``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from agents_support import require_engine

from agentrun import Message, SessionOptions, Turn, TurnTimeoutError, run_turn
from agentrun.offline import (
    EMBEDDED_ENGINES,
    ModelServer,
    ModelTurn,
    Script,
    TextBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

OLD_WORDS = ("walrus", "zeppelin", "marmalade")
CLEAN = "a clean answer of its own"
#: The sessions' cancel grace here: an agent acknowledging an interrupt takes seconds on a busy
#: machine, and this test is about the session surviving, not about the grace (which
#: tests/core/test_hard_timeouts.py bounds).
GRACE = 8.0
#: The grace plus stopping an agent. A cancel that waited for a turn the agent never began took
#: 10 s and more, then ended the session.
CANCEL_BOUND = 15.0


def _slow_old_turn() -> ModelTurn:
    return ModelTurn(
        blocks=[TextBlock(text=" ".join(OLD_WORDS * 30))], chunk_delay=0.2, chunk_chars=6
    )


async def _clean_turn_after(session: object, server: ModelServer) -> None:
    server._next = len(server._queue)  # pyright: ignore[reportPrivateUsage]  (the old answer)
    seen: list[Message] = []
    clean = await run_turn(session, "say something new", on_message=seen.append, timeout=120)  # type: ignore[arg-type]
    assert clean.ok, clean.errors
    assert CLEAN in clean.text
    said = " ".join(m.text or "" for m in seen).lower()
    assert not [w for w in OLD_WORDS if w in said], said


@pytest.mark.parametrize("delay", [0.0, 0.003, 0.02, "mid_stream"])
@pytest.mark.parametrize("name", ["claude", "codex-app-server", "opencode-acp"])
async def test_a_cancel_at_any_moment_leaves_the_session_usable(
    name: str, delay: float | str, tmp_path: Path
) -> None:
    require_engine(EMBEDDED_ENGINES[name])
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with ModelServer(Script(turns=[_slow_old_turn()], exhausted_text=CLEAN)) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent", cwd=str(workspace))
        assert isinstance(options, SessionOptions)
        async with engine.start(options) as session:
            session.cancel_grace = GRACE
            for _ in range(2):  # a cancelled first turn, and a cancelled later one
                started = anyio.current_time()
                if isinstance(delay, float):
                    with anyio.move_on_after(delay):
                        await run_turn(session, "tell me about walruses")
                else:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(run_turn, session, "tell me about walruses")
                        while len(server.model_requests) == 0:
                            await anyio.sleep(0.05)
                        await anyio.sleep(1.0)
                        tg.cancel_scope.cancel()
                assert anyio.current_time() - started < CANCEL_BOUND
                await _clean_turn_after(session, server)
                server._queue.append((0, _slow_old_turn()))  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize(
    "name", ["claude", "codex", "codex-app-server", "opencode", "opencode-acp"]
)
async def test_a_timed_out_or_cancelled_turn_says_cancelled(name: str, tmp_path: Path) -> None:
    require_engine(EMBEDDED_ENGINES[name])
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    script = Script(turns=[_slow_old_turn(), _slow_old_turn()], exhausted_text=CLEAN)
    async with ModelServer(script) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent", cwd=str(workspace))
        assert isinstance(options, SessionOptions)
        async with engine.start(options) as session:
            # A timeout, once the answer streams.
            with pytest.raises(TurnTimeoutError) as caught:
                await run_turn(session, "tell me about walruses", timeout=8)
            assert caught.value.summary is not None
            assert caught.value.summary.stop_reason == "cancelled"
            assert not caught.value.summary.ok
            # The caller's own cancel, in the streaming form: the summary says the same.
            turns: list[Turn] = []

            async def consume() -> None:
                async with session.turn("tell me more about walruses") as turn:
                    turns.append(turn)
                    async for _ in turn:
                        pass

            asked = len(server.model_requests)
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                while len(server.model_requests) == asked:
                    await anyio.sleep(0.05)
                await anyio.sleep(1.0)
                tg.cancel_scope.cancel()
            (turn,) = turns
            assert turn.summary.stop_reason == "cancelled"
            assert not turn.summary.ok
            await _clean_turn_after(session, server)
