"""A caller's callback that raises (``on_message``, ``wire_tap``) surfaces as itself, the same on
every engine: the turn is cancelled in the agent and nothing is left running."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from agents_support import descendants
from repo_paths import FAKES

from agentrun import Engine, Message, SessionOptions, run_turn
from agentrun.engines.acp import AcpEngine
from agentrun.engines.claude import ClaudeEngine

pytestmark = pytest.mark.anyio


def _claude() -> Engine:
    return ClaudeEngine(argv_prefix=[sys.executable, str(FAKES / "claude_fake.py"), "ok"],
                        cancel_grace=2.0, close_stdin_timeout=2.0, terminate_timeout=2.0)  # fmt: skip


def _acp() -> Engine:
    return AcpEngine([sys.executable, str(FAKES / "acp_agent.py")], close_stdin_timeout=2.0,
                     terminate_timeout=2.0)  # fmt: skip


def _toy() -> Engine:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engines" / "toy"))
    from toy_engine import ToyEngine  # pyright: ignore[reportMissingImports]

    return ToyEngine()  # type: ignore[no-any-return]


ENGINES: dict[str, Callable[[], Engine]] = {"claude": _claude, "acp": _acp, "toy": _toy}


class Mine(Exception):
    """The caller's own error."""


@pytest.mark.parametrize("name", sorted(ENGINES))
async def test_a_raising_wire_tap_is_raised_as_itself(name: str, tmp_path: Path) -> None:
    before = descendants()
    options = SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})

    def tap(direction: str, line: bytes) -> None:
        if direction == "recv":
            raise Mine("tap failed")

    session = ENGINES[name]().start(options)
    session.wire_tap = tap
    with pytest.raises(Mine):
        async with session:
            await run_turn(session, "hi", timeout=30)
    assert session.closed
    assert descendants() <= before


@pytest.mark.parametrize("name", sorted(ENGINES))
async def test_a_raising_on_message_is_raised_as_itself(name: str, tmp_path: Path) -> None:
    options = SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})

    def boom(message: Message) -> None:
        raise Mine("callback failed")

    with pytest.raises(Mine):
        async with ENGINES[name]().start(options) as session:
            await run_turn(session, "hi", on_message=boom, timeout=30)


async def test_closing_from_another_task_ends_the_turn_with_session_closed(tmp_path: Path) -> None:
    import anyio

    from agentrun import SessionClosedError

    before = descendants()
    options = SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})
    async with _toy().start(options) as session:
        async with anyio.create_task_group() as tg:

            async def close_soon() -> None:
                await anyio.sleep(0.5)
                await session.aclose()

            tg.start_soon(close_soon)
            with anyio.fail_after(30), pytest.raises(SessionClosedError) as caught:
                await run_turn(session, "slow")
        assert caught.value.summary is not None
        await session.aclose()  # idempotent
        after_close = "the code after aclose runs"
    assert after_close and session.closed
    assert descendants() <= before


async def test_closing_from_inside_the_turn_loop_returns_normally(tmp_path: Path) -> None:
    from agentrun import Session, SessionClosedError

    options = SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})
    seen: list[str] = []

    async def iterate_and_close(session: Session) -> None:
        async with session.turn("slow") as turn:
            async for message in turn:
                seen.append(str(message.type))
                await session.aclose()

    async with _toy().start(options) as session:
        with pytest.raises(SessionClosedError):
            await iterate_and_close(session)
        seen.append("after")
    assert seen[-1] == "after"
