"""Compaction on the real pinned agents, offline: Claude Code's ``/compact`` and Codex
app-server's ``thread/compact/start`` each become one ``compaction`` message with the fill
before and after, the gauge drops, and the session goes on; the context policy's compact action
does it by itself after a turn that fills the context."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents_support import require_engine

from agentrun import ContextPolicy, Message, MessageType, run_turn
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


def _script() -> Script:
    full = ScriptUsage(input_tokens=10, cache_read_tokens=200_000, output_tokens=5)
    return Script(
        turns=[
            ModelTurn.text("First answer.", usage=full),
            # The summary the agent asks for when it compacts (in the shape Claude Code asks
            # for; without it Claude Code asks twice).
            ModelTurn.text("<analysis>Short.</analysis>\n<summary>The user said hi.</summary>",
                           usage=ScriptUsage(input_tokens=200_000, output_tokens=20)),
            ModelTurn.text("After compaction.", usage=ScriptUsage(input_tokens=3_000,
                                                                  output_tokens=5)),
        ]
    )  # fmt: skip


@pytest.mark.parametrize("name", ["claude", "codex-app-server"])
async def test_compact_drops_the_gauge_and_the_session_goes_on(name: str, tmp_path: Path) -> None:
    require_engine({"codex-app-server": "codex"}.get(name, name))
    async with ModelServer(_script()) as server:
        engine, options = embedded_engine(name, server.url, tmp_path / "agent")
        seen: list[Message] = []
        async with engine.start(options) as session:
            assert session.can_compact
            first = await run_turn(session, "hi", on_message=seen.append, timeout=120)
            compacted = await session.compact(on_message=seen.append, timeout=120)
            after = await run_turn(session, "and now?", on_message=seen.append, timeout=120)
    assert first.context is not None and first.context.used is not None
    before = first.context.used
    assert before >= 200_000
    (compaction,) = [m for m in seen if m.type is MessageType.COMPACTION]
    assert compaction.turn == 2 and compaction.data is not None
    assert compaction.data["trigger"] == "manual"
    assert compaction.data["before_tokens"] >= 200_000
    dropped = compaction.data["after_tokens"]
    assert dropped is not None and 0 < dropped < before // 10
    assert compacted.ok and compacted.context is not None
    assert compacted.context.used == dropped  # the gauge drops with it
    assert after.ok and after.text == "After compaction."


async def test_the_compact_action_compacts_claude_after_a_full_turn(tmp_path: Path) -> None:
    require_engine("claude")
    async with ModelServer(_script()) as server:
        engine, options = embedded_engine("claude", server.url, tmp_path / "agent")
        # Claude Code reports a window of 1,000,000: 200,000 tokens are 20 % of it.
        policy = ContextPolicy(thresholds=(0.15,), action="compact", compact_at=0.15)
        options = options.model_copy(update={"context_policy": policy})
        seen: list[Message] = []
        async with engine.start(options) as session:
            summary = await run_turn(session, "hi", on_message=seen.append, timeout=120)
            assert summary.text == "First answer." and session.turns == 2
            nxt = await run_turn(session, "and now?", on_message=seen.append, timeout=120)
    kinds = [(m.turn, str(m.type)) for m in seen
             if m.type in (MessageType.CONTEXT_THRESHOLD, MessageType.COMPACTION)]  # fmt: skip
    assert kinds == [(1, "context_threshold"), (2, "compaction")]
    assert nxt.text == "After compaction."
