"""The Codex exec engine against the real pinned ``codex``, offline (embedded model server).

Run alone: ``.venv/bin/python -m agentrun.offline netns -- .venv/bin/pytest
tests/engines/codex/test_codex_e2e.py``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from agents_support import descendants, require_engine

from agentrun import (
    Message,
    MessageType,
    SessionOptions,
    TurnTimeoutError,
    Usage,
    run_turn,
)
from agentrun.engines.codex import CodexDriver, codex_usage, read_rollout
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


def _u(fresh: int, cached: int, output: int) -> ScriptUsage:
    return ScriptUsage(input_tokens=fresh, cache_read_tokens=cached, output_tokens=output)


def _text(text: str, usage: ScriptUsage) -> ModelTurn:
    return ModelTurn.text(text, usage=usage)


def _sum(usages: list[Usage]) -> tuple[int, int, int]:
    return (
        sum(u.input_tokens or 0 for u in usages),
        sum(u.cache_read_tokens or 0 for u in usages),
        sum(u.output_tokens or 0 for u in usages),
    )


async def test_three_turns_resume_one_thread_with_a_gauge_every_turn(tmp_path: Path) -> None:
    require_engine("codex")
    before = descendants()
    script = Script(
        turns=[
            ModelTurn.shell("echo hi", say="Running it.", usage=_u(1500, 0, 20)),
            _text("It printed hi.", _u(200, 1500, 9)),
            _text("Second answer.", _u(150, 1700, 7)),
            _text("Third answer.", _u(120, 1850, 6)),
        ]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "codex", server.url, tmp_path / "agent", cwd=str(tmp_path)
        )
        readings: list[Message] = []
        async with engine.start(options) as session:
            assert isinstance(session.driver, CodexDriver)
            summaries = []
            for prompt in ("run echo hi", "again", "once more"):
                turn_readings: list[Message] = []
                summaries.append(
                    await run_turn(
                        session,
                        prompt,
                        on_message=lambda m, r=turn_readings: (
                            r.append(m) if m.type is MessageType.CONTEXT_WINDOW else None
                        ),
                        timeout=120,
                    )
                )
                # A sized gauge on every turn, from the agent's own record.
                assert turn_readings, prompt
                last = turn_readings[-1].context
                assert last is not None and last.size_tokens == 258400
                assert last.size_source == "agent_effective" and last.used_tokens
                readings += turn_readings
            thread = session.driver.session_id
            home = session.driver.codex_home
        assert [s.ok for s in summaries] == [True, True, True]
        assert summaries[0].tool_calls[0].name == "exec_command"
        assert summaries[0].tool_calls[0].output == "hi\n"
        assert {s.resume_id for s in summaries} == {thread}
        assert [s.text for s in summaries] == ["It printed hi.", "Second answer.", "Third answer."]
        # Per-turn usage adds up to the thread's total as Codex recorded it.
        from agentrun.engines.codex import find_rollout

        assert thread is not None
        path = find_rollout(home, thread)
        assert path is not None
        rollout = read_rollout(path)
        assert rollout is not None and rollout.thread is not None
        turns = [s.usage for s in summaries if s.usage is not None]
        assert len(turns) == 3
        total = codex_usage(rollout.thread)
        assert _sum(turns) == (total.input_tokens, total.cache_read_tokens, total.output_tokens)
    assert descendants() <= before


async def test_an_interrupted_turn_leaves_the_thread_resumable(tmp_path: Path) -> None:
    require_engine("codex")
    slow = ModelTurn(
        blocks=[ModelTurn.text("x " * 400).blocks[0]], chunk_delay=0.05, chunk_chars=4
    ).model_copy(update={"delay_before": 0.0})
    script = Script(turns=[slow, _text("done", _u(100, 900, 2))])
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "codex", server.url, tmp_path / "agent", cwd=str(tmp_path)
        )
        async with engine.start(options) as session:
            with pytest.raises(TurnTimeoutError) as caught:
                await run_turn(session, "count slowly", timeout=2)
            first = caught.value.summary
            assert first is not None and first.stop_reason == "cancelled"
            driver = session.driver
            assert isinstance(driver, CodexDriver)
            thread = driver.session_id
            assert thread is not None  # printed before the interrupt
            with anyio.fail_after(120):
                second = await run_turn(session, "say done")
        assert second.ok and second.text == "done"
        assert second.resume_id == thread
        # Nothing of the interrupted turn reached the next one.
        assert "x x" not in second.text


async def test_a_new_session_resumes_the_thread_with_the_turns_own_usage(tmp_path: Path) -> None:
    require_engine("codex")
    script = Script(
        turns=[_text("Noted: KIWI.", _u(1000, 0, 10)), _text("It was KIWI.", _u(100, 1000, 7))]
    )
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "codex", server.url, tmp_path / "agent", cwd=str(tmp_path)
        )
        async with engine.start(options) as session:
            first = await run_turn(session, "remember KIWI", timeout=120)
        # As if another library process picked the thread up: no running total known.
        resumed = SessionOptions(**{**options.model_dump(), "resume_id": first.resume_id,
                                    "permission_handler": None})  # fmt: skip
        async with engine.start(resumed) as session:
            second = await run_turn(session, "what was it?", timeout=120)
    assert second.ok and second.text == "It was KIWI." and second.resume_id == first.resume_id
    assert second.usage is not None
    # The rollout gave this turn's own usage, not the thread's running total.
    assert second.usage.output_tokens == 7


async def test_an_http_error_is_a_failed_summary_not_an_exception(tmp_path: Path) -> None:
    require_engine("codex")
    async with ModelServer(Script(turns=[ModelTurn.error(500, "upstream broke")])) as server:
        engine, options = embedded_engine(
            "codex", server.url, tmp_path / "agent", cwd=str(tmp_path)
        )
        async with engine.start(options) as session:
            summary = await run_turn(session, "hi", timeout=120)
    assert not summary.ok and summary.stop_reason == "error"
    assert summary.errors and summary.errors[-1].code == "api_error"


async def test_resuming_an_unknown_thread_is_session_not_found(tmp_path: Path) -> None:
    from agentrun import SessionNotFoundError

    require_engine("codex")
    async with ModelServer() as server:
        engine, options = embedded_engine(
            "codex", server.url, tmp_path / "agent", cwd=str(tmp_path),
            resume_id="01a20000-0000-7000-8000-000000000000",
        )  # fmt: skip
        async with engine.start(options) as session:
            with pytest.raises(SessionNotFoundError) as caught:
                await run_turn(session, "hi", timeout=60)
    assert caught.value.session_id == "01a20000-0000-7000-8000-000000000000"
    assert not server.model_requests


async def test_a_thread_name_resumes_its_thread_and_an_unknown_name_is_refused(
    tmp_path: Path,
) -> None:
    """``codex exec resume <name>`` starts a new thread, without a word, for a name no thread
    has: the engine looks the name up in Codex's own index first and refuses an unknown one
    before anything runs; a name the index resolves resumes that thread."""
    import json

    from agentrun import SessionNotFoundError

    require_engine("codex")
    script = Script(turns=[_text("Noted: FIG.", _u(10, 0, 3)), _text("It was FIG.", _u(10, 0, 3))])
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "codex", server.url, tmp_path / "agent", cwd=str(tmp_path)
        )
        async with engine.start(options) as session:
            first = await run_turn(session, "remember FIG", timeout=120)
        assert first.resume_id is not None
        # What Codex appends when a thread is renamed.
        entry = {
            "id": first.resume_id,
            "thread_name": "fig-notes",
            "updated_at": "2026-01-01T00:00:00Z",
        }
        home = Path(options.env["CODEX_HOME"])
        (home / "session_index.jsonl").write_text(json.dumps(entry) + "\n", encoding="utf-8")
        requests_before = len(server.model_requests)
        unknown = options.model_copy(update={"resume_id": "no-such-session"})
        with pytest.raises(SessionNotFoundError) as caught:
            async with engine.start(unknown) as session:
                await run_turn(session, "hi", timeout=60)
        assert caught.value.session_id == "no-such-session"
        assert len(server.model_requests) == requests_before  # refused before any model call
        named = options.model_copy(update={"resume_id": "fig-notes"})
        async with engine.start(named) as session:
            second = await run_turn(session, "what was it?", timeout=120)
    assert second.ok and second.text == "It was FIG."
    assert second.resume_id == first.resume_id


async def test_tool_ids_are_unique_in_the_session_though_codex_numbers_items_per_process(
    tmp_path: Path,
) -> None:
    """Each ``codex exec`` process numbers its items from ``item_0``: the second turn's shell
    call had the first turn's id (over ``agentrun acp`` it arrived as an update of the first
    turn's call). Ids carry the process's number in the session."""
    require_engine("codex")
    script = Script(
        turns=[ModelTurn.shell("echo one"), _text("one", _u(10, 0, 3)),
               ModelTurn.shell("echo two"), _text("two", _u(10, 0, 3))]
    )  # fmt: skip
    uses: list[list[str]] = []
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "codex", server.url, tmp_path / "agent", cwd=str(tmp_path), hitl=False
        )
        async with engine.start(options) as session:
            for prompt in ("run echo one", "run echo two"):
                messages: list[Message] = []
                summary = await run_turn(session, prompt, timeout=120, on_message=messages.append)
                assert summary.ok, summary.errors
                uses.append(
                    [
                        m.tool.id
                        for m in messages
                        if m.type == MessageType.TOOL_USE and m.tool and m.tool.id
                    ]
                )
    assert all(len(ids) == 1 for ids in uses), uses
    assert uses[0] != uses[1], uses
