"""The real pinned ``opencode run`` through the engine, offline against the model server.

Run inside the loopback-only namespace::

    .venv/bin/python -m agentrun.offline netns -- .venv/bin/pytest tests/engines/opencode/test_opencode_e2e.py

One session covers the whole life cycle in four processes (OpenCode starts in about a second,
more on a loaded machine): a tool turn whose prompt must reach the model verbatim, a 500 error
as a failed turn, a turn cancelled mid-stream, and a turn that continues the same session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from agentrun import MessageType, SessionOptions, run_turn
from agentrun.engines.opencode import OpenCodeDriver, OpenCodeEngine
from agentrun.offline import ModelServer, RecordedRequest, opencode_offline
from agentrun.offline._script import Script, Text, ToolCall, Turn, Usage

pytestmark = [pytest.mark.agent, pytest.mark.anyio]

PROMPT = '--help is not a flag here\nHe said "hi" and left.\nünïcødé ✓  two  spaces\ttab  '


def _binary() -> str:
    try:
        return OpenCodeEngine().resolve_binary()
    except Exception:
        pytest.skip(
            "opencode is not installed; run: npm install --prefix engines --no-audit --no-fund"
        )


def _user_texts(request: RecordedRequest) -> list[str]:
    body = request.json if isinstance(request.json, dict) else {}
    texts: list[str] = []
    for message in cast("list[dict[str, Any]]", body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            parts = cast("list[dict[str, Any]]", content)
            texts.append("".join(str(p.get("text", "")) for p in parts))
    return texts


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def test_session_lifecycle(tmp_path: Path) -> None:
    binary = _binary()
    script = Script(
        turns=[
            Turn(
                blocks=[
                    Text(text="Running it."),
                    ToolCall(tool="shell", arguments={"command": "echo hi"}, id="call_e2e"),
                ],
                usage=Usage(input_tokens=2000, output_tokens=30),
            ),
            Turn(
                blocks=[Text(text="The command printed: hi")],
                usage=Usage(input_tokens=100, cache_read_tokens=2000, output_tokens=8),
            ),
            Turn.error(500, "scripted upstream error 500", repeat=6),
            Turn(
                blocks=[Text(text="A long answer that keeps streaming. " * 20)],
                chunk_chars=4,
                chunk_delay=0.2,
            ),
            Turn.text("Still here.", usage=Usage(input_tokens=50, cache_read_tokens=2200)),
        ]
    )
    async with ModelServer(script) as server:
        config = opencode_offline(server.url, tmp_path)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        session = SessionOptions(
            model=config.model, env=dict(config.env), inherit_env=False, cwd=str(workspace)
        )
        engine = OpenCodeEngine(binary=binary)
        async with engine.start(session) as process:
            assert isinstance(process.driver, OpenCodeDriver)

            # Turn 1: tool call + text, two steps summed; the prompt reaches the model verbatim.
            seen: list[Any] = []
            first = await run_turn(process, PROMPT, on_message=seen.append, timeout=60)
            assert first.ok, first
            assert seen[0].type is MessageType.INIT
            assert seen[0].process is not None and seen[0].process.pid > 0
            assert first.text == "The command printed: hi"
            (tool,) = first.tool_calls
            assert tool.id == "call_e2e" and tool.name == "bash" and tool.completed
            assert tool.output == "hi\n" and tool.is_error is False
            assert first.usage is not None
            assert first.usage.input_tokens == 2100
            assert first.usage.output_tokens == 38
            assert first.usage.cache_read_tokens == 2000
            assert first.context is not None
            assert (first.context.used, first.context.size) == (2100, 200_000)
            assert first.stop_reason == "end_turn"
            session_id = first.resume_id
            assert session_id is not None and session_id.startswith("ses_")
            assert process.resume_id == session_id
            calls = list(server.model_requests)
            assert _user_texts(calls[0]) == [PROMPT]

            # Turn 2: a 500 (retried quickly, then reported) is a failed turn, not an exception.
            with anyio.fail_after(30):
                failed = await run_turn(process, "fail please")
            assert not failed.ok and failed.has_result
            assert any(e.status == 500 for e in failed.errors)
            assert failed.resume_id == session_id
            assert "--session" in process.driver.argv and session_id in process.driver.argv

            # Turn 3: cancelled mid-stream; the process group is gone afterwards.
            async with process.turn("tell me a long story") as turn:
                async for message in turn:
                    if message.type is MessageType.TEXT or message.subtype == "step_start":
                        await anyio.sleep(0.5)
                        break
            pid = process.driver.pid
            assert pid is not None
            assert turn.summary.stop_reason == "cancelled"
            with anyio.fail_after(10):
                while _alive(pid):
                    await anyio.sleep(0.05)

            # Turn 4: the same session continues.
            last = await run_turn(process, "are you still there?", timeout=60)
            assert last.ok, last
            assert last.text == "Still here."
            assert last.resume_id == session_id
            assert process.driver.argv[process.driver.argv.index("--session") + 1] == session_id
            assert _user_texts(server.model_requests[-1])[0] == PROMPT


async def test_nothing_of_a_cancelled_turn_reaches_the_next(tmp_path: Path) -> None:
    """A turn whose model call hangs is cancelled; OpenCode had already stored its prompt in
    the session, and ``--session`` sends the stored conversation to the model. The next turn's
    model call must not carry the cancelled prompt, nor its answer come back as the next
    turn's text."""
    binary = _binary()
    script = Script(
        turns=[
            Turn.text("first answer"),
            Turn(blocks=[Text(text="LATE words of the cancelled turn")], delay_before=60),
            Turn.text("answer to the third prompt"),
        ]
    )
    async with ModelServer(script) as server:
        config = opencode_offline(server.url, tmp_path)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        session = SessionOptions(
            model=config.model, env=dict(config.env), inherit_env=False, cwd=str(workspace)
        )
        async with OpenCodeEngine(binary=binary).start(session) as process:
            first = await run_turn(process, "first prompt", timeout=120)
            assert first.ok, first

            async def hung_turn() -> None:
                await run_turn(process, "cancelled prompt", timeout=180)

            with anyio.fail_after(150):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(hung_turn)
                    while len(server.model_requests) < 2:  # the hung call reached the model
                        await anyio.sleep(0.05)
                    await anyio.sleep(0.5)
                    tg.cancel_scope.cancel()

            third = await run_turn(process, "third prompt", timeout=120)
            assert third.ok, third
            assert third.resume_id == first.resume_id
        third_call = server.model_requests[-1]
    assert third.text == "answer to the third prompt"
    assert "LATE" not in (third.text or "")
    assert _user_texts(third_call) == ["first prompt", "third prompt"]


async def test_session_not_found_is_typed_without_a_resume_id(tmp_path: Path) -> None:
    """OpenCode printing ``Session not found`` and exiting is :class:`SessionNotFoundError`
    whenever it happens, not only when the caller passed ``resume_id`` (here the id reaches it
    through ``extra_args``), as the engine's docstring says."""
    from agentrun import SessionNotFoundError

    binary = _binary()
    async with ModelServer(Script(turns=[Turn.text("unused")])) as server:
        config = opencode_offline(server.url, tmp_path)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        session = SessionOptions(
            model=config.model,
            env=dict(config.env),
            inherit_env=False,
            cwd=str(workspace),
            extra_args=("--session", "ses_0000000000000000000000unknown"),
        )
        async with OpenCodeEngine(binary=binary).start(session) as process:
            with pytest.raises(SessionNotFoundError) as caught:
                await run_turn(process, "hello", timeout=120)
        assert server.model_requests == []
    assert caught.value.session_id is None
    assert "Session not found" in caught.value.message


async def test_resuming_an_unknown_session_is_session_not_found(tmp_path: Path) -> None:
    """``--session`` with an id OpenCode does not know: the documented typed error, naming it."""
    from agentrun import SessionNotFoundError

    binary = _binary()
    async with ModelServer(Script(turns=[Turn.text("unused")])) as server:
        config = opencode_offline(server.url, tmp_path)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        session = SessionOptions(
            model=config.model,
            env=dict(config.env),
            inherit_env=False,
            cwd=str(workspace),
            resume_id="ses_0000000000000000000000unknown",
        )
        async with OpenCodeEngine(binary=binary).start(session) as process:
            with pytest.raises(SessionNotFoundError) as caught:
                await run_turn(process, "hello", timeout=120)
        assert server.model_requests == []
    assert caught.value.session_id == "ses_0000000000000000000000unknown"
