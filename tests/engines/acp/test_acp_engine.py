"""The ACP engine against a scripted ACP agent written in Python (tests/fakes/acp_agent.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from repo_paths import FAKES

from agentrun import QuestionAnswer, QuestionRequest, Session, SessionOptions
from agentrun._turns.run import run_turn
from agentrun._vocabulary.errors import (
    ConfigurationError,
    ProcessExitError,
    SessionNotFoundError,
    SessionTerminatedError,
    TurnTimeoutError,
)
from agentrun._vocabulary.messages import Message, MessageType
from agentrun._vocabulary.permissions import (
    PermissionDecision,
    PermissionRequest,
    approve_all,
    deny_all,
)
from agentrun.engines.acp import AcpDriver, AcpEngine, AcpTimeoutError, AcpTranslator
from agentrun.engines.acp._session_core import session_cwd

pytestmark = pytest.mark.anyio


def _acp(session: Session) -> AcpDriver:
    """The ACP driver a session of the ACP engine holds."""
    driver = session.driver
    assert isinstance(driver, AcpDriver)
    return driver


FAKE = str(FAKES / "acp_agent.py")


def engine(*flags: str, **options: Any) -> AcpEngine:
    options.setdefault("close_stdin_timeout", 2.0)
    options.setdefault("terminate_timeout", 2.0)
    return AcpEngine([sys.executable, FAKE, *flags], **options)


def session(tmp_path: Path, **options: Any) -> SessionOptions:
    return SessionOptions(cwd=str(tmp_path), **options)


class Collect:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> None:
        self.messages.append(message)

    def of(self, kind: str) -> list[Message]:
        return [m for m in self.messages if m.type == kind]


async def test_two_turns_usage_cost_and_init(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        first = await run_turn(process, "hello there", on_message=seen)
        second = await run_turn(process, "again", on_message=seen)
    init = seen.of("init")
    assert len(init) == 1
    assert init[0].init is not None
    assert init[0].init.agent_name == "FakeAgent"
    assert init[0].init.agent_version == "0.0.1"
    assert init[0].init.model == "small"
    assert init[0].resume_id == "fake-1"
    assert init[0].process is not None
    assert init[0].process.pid > 0
    assert first.text == "echo: hello there"
    assert second.text == "echo: again"
    assert first.usage is not None
    assert first.usage.input_tokens == 10
    assert first.usage.output_tokens == 7  # 5 output + 2 thought tokens
    assert first.usage.thinking_tokens == 2
    assert first.usage.cache_read_tokens == 990
    assert first.usage.cost_usd == pytest.approx(0.25)
    assert second.usage is not None
    assert second.usage.cost_usd == pytest.approx(0.25)
    assert first.context is not None
    assert (first.context.used, first.context.size) == (1011, 100000)
    assert first.context.used_source == first.context.size_source == "agent"
    assert second.resume_id == "fake-1"
    results = seen.of("result")
    assert results[1].data is not None
    assert results[1].data["session_cost_usd"] == pytest.approx(0.5)
    assert _acp(process).returncode == 0


async def test_unknown_update_is_passed_through(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        summary = await run_turn(process, "unknown", on_message=seen)
    unknown = [m for m in seen.messages if m.subtype == "future_thing"]
    assert len(unknown) == 1
    assert unknown[0].type is MessageType.SYSTEM
    assert unknown[0].data == {"answer": 42}
    assert summary.text == "after the unknown update"


async def test_plan_mode_update_and_thought(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        summary = await run_turn(process, "plan", on_message=seen)
    subtypes = [m.subtype for m in seen.of("system")]
    assert "plan" in subtypes
    assert "current_mode_update" in subtypes
    assert summary.thinking == "thinking it over"
    assert summary.text == "planned"
    assert _acp(process).state.mode == "plan"


async def _permission_turn(tmp_path: Path, **options: Any) -> tuple[Collect, Any]:
    seen = Collect()
    async with engine().start(session(tmp_path, **options)) as process:
        summary = await run_turn(process, "permission", on_message=seen, timeout=20)
    return seen, summary


async def test_a_form_elicitation_is_one_question_per_field(tmp_path: Path) -> None:
    asked: list[QuestionRequest] = []

    async def answer(request: QuestionRequest) -> QuestionAnswer:
        asked.append(request)
        return QuestionAnswer.of({"color": "blue", "count": "3", "tags": ["a", "c"],
                                  "confirm": "yes"})  # fmt: skip

    seen = Collect()
    async with engine().start(session(tmp_path, question_handler=answer)) as process:
        summary = await run_turn(process, "ask", on_message=seen)
    (request,) = asked
    assert request.message == "A few details, please"
    color, count, tags, confirm = request.questions
    assert (color.id, color.text, color.header) == ("color", "Which color?", "Color")
    assert [(o.label, o.description) for o in color.options] == [("red", "Red"), ("blue", "Blue")]
    assert not color.allow_other and not color.multi_select
    assert (count.text, count.options, count.allow_other) == ("How many?", (), True)
    assert tags.multi_select and [o.label for o in tags.options] == ["a", "b", "c"]
    assert [o.label for o in confirm.options] == ["true", "false"]
    # The answers went back typed as the form asked; the agent saw forms advertised.
    content = '{"action": "accept", "content": {"color": "blue", "confirm": true, "count": 3, '
    assert summary.text == f'forms=True {content}"tags": ["a", "c"]}}}}'
    (record,) = summary.questions
    assert record.answers["tags"] == ("a", "c") and not record.refused
    assert len(seen.of("question")) == 1


async def test_without_a_question_callback_an_elicitation_is_declined(tmp_path: Path) -> None:
    async with engine().start(session(tmp_path)) as process:
        summary = await run_turn(process, "ask")
    assert summary.text == 'forms=False {"action": "decline"}'
    (record,) = summary.questions
    assert record.refused


async def test_permission_allow_once(tmp_path: Path) -> None:
    asked: list[PermissionRequest] = []

    async def handler(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        return PermissionDecision.allow_once()

    seen, summary = await _permission_turn(tmp_path, hitl=True, permission_handler=handler)
    assert summary.text == "outcome=yes"
    assert summary.denials == []
    assert asked[0].tool_use_id == "call_1"
    assert asked[0].tool_name == "bash"
    assert asked[0].input == {"command": "touch x"}
    assert [o.kind for o in asked[0].options] == ["allow_once", "allow_always", "reject_once"]
    assert summary.tool_calls[0].is_error is False
    kinds = [m.type for m in seen.messages]
    assert kinds.index(MessageType.TOOL_USE) < kinds.index(MessageType.TOOL_RESULT)


async def test_permission_allow_always(tmp_path: Path) -> None:
    async def handler(request: PermissionRequest) -> PermissionDecision:
        return PermissionDecision.allow_always()

    _, summary = await _permission_turn(tmp_path, hitl=True, permission_handler=handler)
    assert summary.text == "outcome=always"


async def test_permission_denied_records_denial(tmp_path: Path) -> None:
    seen, summary = await _permission_turn(tmp_path, hitl=True, permission_handler=deny_all)
    assert summary.text == "outcome=no"
    assert len(summary.denials) == 1
    assert summary.denials[0].tool_use_id == "call_1"
    assert summary.denials[0].tool_name == "bash"
    assert summary.tool_calls[0].is_error is True
    assert any(m.denials for m in seen.of("system"))


async def test_permission_without_handler_rejects(tmp_path: Path) -> None:
    _, summary = await _permission_turn(tmp_path, hitl=True)
    assert summary.text == "outcome=no"
    assert len(summary.denials) == 1


async def test_permission_hitl_off_approves(tmp_path: Path) -> None:
    _, summary = await _permission_turn(tmp_path, hitl=False, permission_handler=deny_all)
    assert summary.text == "outcome=yes"
    assert summary.denials == []


async def test_permission_handler_raising_rejects(tmp_path: Path) -> None:
    async def handler(request: PermissionRequest) -> PermissionDecision:
        raise RuntimeError("the handler broke")

    seen, summary = await _permission_turn(tmp_path, hitl=True, permission_handler=handler)
    assert summary.text == "outcome=no"
    errors = seen.of("error")
    assert [e.error.code for e in errors if e.error is not None] == ["permission_callback"]
    assert summary.denials and summary.denials[0].tool_use_id == "call_1"
    assert summary.ok


async def test_permission_with_no_matching_option_is_cancelled(tmp_path: Path) -> None:
    async def handler(request: PermissionRequest) -> PermissionDecision:
        return PermissionDecision(allow=True, option_id="not-offered")

    _, summary = await _permission_turn(tmp_path, hitl=True, permission_handler=handler)
    assert summary.text == "outcome=cancelled"
    assert summary.denials[0].reason == "the permission request was cancelled"


async def test_pending_permission_is_cancelled_with_the_turn(tmp_path: Path) -> None:
    waiting = anyio.Event()

    async def handler(request: PermissionRequest) -> PermissionDecision:
        waiting.set()
        await anyio.sleep(60)
        return PermissionDecision.allow_once()

    seen = Collect()
    async with engine().start(session(tmp_path, hitl=True, permission_handler=handler)) as p:
        with pytest.raises(TurnTimeoutError) as caught:
            await run_turn(p, "permission", on_message=seen, timeout=1.5)
        assert caught.value.summary is not None
        # A timed-out turn says so on every engine, whatever the agent answered last.
        assert caught.value.summary.stop_reason == "cancelled"
        again = await run_turn(p, "still there?", timeout=10)
    assert waiting.is_set()
    assert [m.text for m in seen.of("text")][-1] == "outcome=cancelled"
    assert again.text == "echo: still there?"


async def test_hang_on_session_new_times_out(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(AcpTimeoutError) as caught:
        async with engine("--hang-new", session_timeout=0.5).start(session(tmp_path)):
            pass
    assert caught.value.method == "session/new"
    assert time.monotonic() - started < 8


async def test_crash_mid_prompt(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        with pytest.raises(ProcessExitError) as caught:
            await run_turn(process, "crash", on_message=seen, timeout=20)
        with pytest.raises(SessionTerminatedError, match="the agent is gone"):
            await run_turn(process, "anyone?", timeout=5)
    error = caught.value
    assert error.exit_code == 3
    assert "crashed on purpose" in error.stderr_tail
    assert [m.text for m in seen.of("text_delta")] == ["partial answer"]
    assert [m.text for m in seen.of("text")] == ["partial answer"]
    assert error.summary is not None
    assert error.summary.text == "partial answer"


async def test_fs_access(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("line 1\nline 2\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (root / "link").symlink_to(outside)
    async with engine(fs_access=True).start(SessionOptions(cwd=str(root))) as process:
        inside = await run_turn(process, f"read {root / 'notes.txt'}")
        escape = await run_turn(process, f"read {root / '..' / 'secret.txt'}")
        via_link = await run_turn(process, f"read {root / 'link'}")
        written = await run_turn(process, f"write {root / 'sub' / 'new.txt'}")
        refused = await run_turn(process, f"write {outside}")
    assert inside.text == 'ok {"content": "line 1\\nline 2\\n"}'
    assert escape.text.startswith("error -32602:")
    assert "outside" in escape.text
    assert via_link.text.startswith("error -32602:")
    assert written.text == "ok null"
    assert (root / "sub" / "new.txt").read_text() == "written by the fake agent\n"
    assert refused.text.startswith("error -32602:")
    assert outside.read_text() == "secret"


async def test_fs_is_off_by_default(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    async with engine().start(session(tmp_path)) as process:
        summary = await run_turn(process, f"read {tmp_path / 'notes.txt'}")
    assert summary.text.startswith("error -32601:")


async def test_cancel_then_continue(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        with anyio.move_on_after(0.6):
            await run_turn(process, "slow", on_message=seen)
        cancelled_turn = list(seen.messages)
        seen.messages.clear()
        summary = await run_turn(process, "next one", on_message=seen, timeout=10)
    assert any(m.type is MessageType.TEXT_DELTA for m in cancelled_turn)
    assert summary.text == "echo: next one"
    assert all(m.message_id != "slow" for m in seen.messages)
    assert summary.ok


async def test_an_agent_slow_to_honour_a_cancel_is_fenced_until_it_answers(
    tmp_path: Path,
) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        with anyio.move_on_after(0.5):
            await run_turn(process, "stubborn", on_message=seen)
        seen.messages.clear()
        summary = await run_turn(process, "next one", on_message=seen, timeout=10)
    assert summary.text == "echo: next one"
    assert all(m.message_id != "stubborn" for m in seen.messages)


async def test_an_agent_that_never_answers_a_cancel_ends_the_session(tmp_path: Path) -> None:
    seen = Collect()
    async with engine(cancel_grace=0.5).start(session(tmp_path)) as process:
        with anyio.move_on_after(0.5):
            await run_turn(process, "deaf", on_message=seen)
        seen.messages.clear()
        with pytest.raises(SessionTerminatedError, match="did not end an interrupted turn"):
            await run_turn(process, "next one", on_message=seen, timeout=10)
        assert _acp(process).returncode is not None
    assert all(m.message_id != "deaf" for m in seen.messages)


async def test_session_close_ends_an_agent_that_ignores_end_of_input(tmp_path: Path) -> None:
    # codex-acp ignores stdin EOF but advertises session/close: closing must not wait out the
    # whole close_stdin_timeout.
    async with engine("--stay", "--close", close_stdin_timeout=10.0).start(
        session(tmp_path)
    ) as process:
        await run_turn(process, "hello", timeout=10)
        t0 = time.monotonic()
        await process.aclose()
        took = time.monotonic() - t0
    assert took < 5
    assert _acp(process).returncode == 0


async def test_the_stream_starts_with_init(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        await run_turn(process, "hello", on_message=seen)
    assert seen.messages[0].type is MessageType.INIT


async def test_timeout_cancels_and_reports_the_cancelled_result(tmp_path: Path) -> None:
    async with engine().start(session(tmp_path)) as process:
        with pytest.raises(TurnTimeoutError) as caught:
            await run_turn(process, "slow", timeout=0.5)
        summary = await run_turn(process, "after", timeout=10)
    partial = caught.value.summary
    assert partial is not None
    assert partial.stop_reason == "cancelled"
    assert partial.text.startswith("0 ")
    assert summary.text == "echo: after"


async def test_prompt_error_is_a_failed_result(tmp_path: Path) -> None:
    async with engine().start(session(tmp_path)) as process:
        failed = await run_turn(process, "error")
        ok = await run_turn(process, "fine")
    assert not failed.ok
    assert failed.has_result
    assert failed.errors[0].code == "APIError"
    assert failed.errors[0].message == "Internal error: upstream said no"
    assert ok.ok


async def test_load_replays_history_outside_the_turn(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path, resume_id="fake-7")) as process:
        summary = await run_turn(process, "hello", on_message=seen)
    replayed = [m for m in seen.messages if m.replayed]
    assert [m.text for m in replayed if m.type is MessageType.TEXT] == ["earlier answer"]
    assert [m.text for m in replayed if m.subtype == "user_message"] == ["earlier question"]
    assert _acp(process).replayed == [m.model_copy(update={"turn": None}) for m in replayed]
    assert summary.text == "echo: hello"
    assert summary.usage is not None
    assert summary.usage.cost_usd == pytest.approx(0.25)  # 1.25 - 1.0 reported by the load
    assert summary.resume_id == "fake-7"
    init = seen.of("init")[0]
    assert init.data is not None
    assert init.data["session_method"] == "session/load"


async def test_resume_without_replay(tmp_path: Path) -> None:
    seen = Collect()
    eng = engine(resume_with="resume")
    async with eng.start(session(tmp_path, resume_id="fake-7")) as process:
        await run_turn(process, "hello", on_message=seen)
    assert not any(m.replayed for m in seen.messages)


async def test_unknown_resume_id(tmp_path: Path) -> None:
    with pytest.raises(SessionNotFoundError):
        async with engine().start(session(tmp_path, resume_id="nope")):
            pass


async def test_model_and_mode_selection(tmp_path: Path) -> None:
    sent: list[bytes] = []
    process = engine().start(session(tmp_path, model="large", mode="plan"))
    process.wire_tap = lambda direction, line: sent.append(line) if direction == "send" else None
    async with process:
        summary = await run_turn(process, "hi")
    wire = b"\n".join(sent)
    assert b'"session/set_model"' in wire
    assert b'"modelId":"large"' in wire
    assert b'"session/set_mode"' in wire
    assert summary.model == "large"
    assert _acp(process).state.mode == "plan"


async def test_unadvertised_model_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="'huge' is not offered"):
        async with engine().start(session(tmp_path, model="huge")):
            pass
    with pytest.raises(ConfigurationError, match="no model selection"):
        async with engine("--no-modes").start(session(tmp_path, model="large")):
            pass
    with pytest.raises(ConfigurationError, match="mode"):
        async with engine("--no-modes").start(session(tmp_path, mode="plan")):
            pass


async def test_unsupported_options_are_reported(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path, system_prompt="be brief", max_turns=3)) as p:
        await run_turn(p, "hi", on_message=seen)
    notes = [m for m in seen.of("system") if m.subtype == "unsupported_option"]
    assert len(notes) == 1
    assert notes[0].data is not None
    assert [o["option"] for o in notes[0].data["options"]] == ["system_prompt", "max_turns"]


async def test_agent_that_ignores_end_of_input_is_stopped(tmp_path: Path) -> None:
    started = time.monotonic()
    eng = engine("--stay", close_stdin_timeout=0.5, terminate_timeout=0.5)
    async with eng.start(session(tmp_path)) as process:
        await run_turn(process, "hi")
    assert _acp(process).returncode is not None
    assert time.monotonic() - started < 10


async def test_wire_tap_replays_to_the_same_messages(tmp_path: Path) -> None:
    import json

    wire: list[dict[str, Any]] = []
    seen = Collect()

    def tap(direction: str, line: bytes) -> None:
        if direction in ("send", "recv"):
            wire.append({"dir": direction, "msg": json.loads(line)})

    process = engine().start(session(tmp_path, hitl=True, permission_handler=approve_all))
    process.wire_tap = tap
    async with process:
        for prompt in ("hello", "permission", "plan"):
            await run_turn(process, prompt, on_message=seen)
    translator = AcpTranslator()
    replayed: list[Message] = []
    for event in wire:
        replayed.extend(translator.feed(event))
    replayed.extend(translator.finish())

    def shape(messages: list[Message]) -> list[dict[str, Any]]:
        out = []
        for m in messages:
            d = m.model_dump(mode="json", exclude={"turn", "process"})
            if d.get("init"):
                d["process"] = None
            out.append(d)
        return out

    assert shape(replayed) == shape(seen.messages)


async def test_fork_opens_a_new_session_with_replayed_history(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path, resume_id="fake-9", fork=True)) as process:
        summary = await run_turn(process, "hi", on_message=seen)
    assert summary.resume_id == _acp(process).session_id
    assert summary.resume_id == "fake-1"  # the fork's own id, not fake-9
    assert [m.text for m in seen.messages if m.replayed and m.type is MessageType.TEXT] == [
        "forked history"
    ]
    assert summary.text == "echo: hi"


async def test_updates_after_the_result_never_reach_the_next_turn(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path)) as process:
        first = await run_turn(process, "late", on_message=seen)
        await anyio.sleep(0.3)
        second = await run_turn(process, "next", on_message=seen)
    assert first.text == ""
    assert second.text == "echo: next"
    assert all(m.message_id != "stale" for m in seen.messages)


async def test_continue_last_without_session_list_starts_a_new_session(tmp_path: Path) -> None:
    seen = Collect()
    async with engine().start(session(tmp_path, continue_last=True)) as process:
        await run_turn(process, "hi", on_message=seen)
    notes = [m for m in seen.of("system") if m.subtype == "unsupported_option"]
    assert notes and notes[0].data is not None
    assert [o["option"] for o in notes[0].data["options"]] == ["continue_last"]


async def test_an_agent_interrupted_while_starting_stops_as_promptly_as_a_started_one(
    tmp_path: Path,
) -> None:
    # The agent takes 4 s to start and does not see the end of its input meanwhile. Interrupted
    # while it starts, it has nothing to finish: it is stopped at once rather than after the
    # grace an opened session gets to exit on end of input (the close timeouts are 5 s here).
    slow = engine("--slow-start", close_stdin_timeout=5.0, terminate_timeout=5.0)

    async def interrupted_while_starting() -> float:
        with anyio.move_on_after(0.5):
            async with slow.start(session(tmp_path)):
                raise AssertionError("the session cannot open within 0.5 s")
        return time.monotonic()

    start = time.monotonic()
    early = await interrupted_while_starting() - (start + 0.5)

    async with slow.start(session(tmp_path)) as process:
        with anyio.move_on_after(0.5) as scope:
            await run_turn(process, "slow")
        assert scope.cancelled_caught
        interrupted = time.monotonic()
    late = time.monotonic() - interrupted
    assert _acp(process).returncode is not None
    # Generous slack: each is a fraction of a second; before, the early one took the 3.5 s left
    # of the agent's start.
    assert early < 3 * late + 0.5, (early, late)


async def test_an_oversized_answer_to_the_prompt_ends_the_turn_not_the_session(
    tmp_path: Path,
) -> None:
    async with engine(max_line_bytes=100_000).start(session(tmp_path)) as process:
        seen = Collect()
        summary = await run_turn(process, "huge answer", on_message=seen, timeout=20)
        errors = seen.of("error")
        assert [e.error.code for e in errors if e.error is not None] == ["line_too_long"]
        results = seen.of("result")
        assert len(results) == 1 and results[0].error is not None
        assert results[0].error.code == "line_too_long"
        assert summary.has_result and not summary.ok
        # The session goes on.
        again = await run_turn(process, "still there?", timeout=20)
        assert again.ok and again.text == "echo: still there?"


async def test_an_oversized_request_of_the_agent_is_answered_with_an_error(
    tmp_path: Path,
) -> None:
    async with engine(max_line_bytes=100_000).start(session(tmp_path)) as process:
        seen = Collect()
        summary = await run_turn(process, "huge ask", on_message=seen, timeout=20)
        assert [e.error.code for e in seen.of("error") if e.error is not None] == ["line_too_long"]
        # The agent heard that its request was refused, and finished its turn.
        assert summary.ok
        assert summary.text.startswith("answered {")
        assert '"code": -32600' in summary.text
        again = await run_turn(process, "next", timeout=20)
        assert again.ok and again.text == "echo: next"


async def test_a_received_message_is_walked_for_its_nesting_once_by_the_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The connection's decoder cuts a received line's nesting; the translator is handed the
    # decoded message and must not walk it again (only the library's own sent values are).
    from agentrun._wire import framing
    from agentrun.engines.acp import _translate as acp_translate

    walked: list[object] = []

    def counting(value: object, limit: int = framing.MAX_NESTING) -> object:
        walked.append(value)
        return framing.capped(value, limit)

    monkeypatch.setattr(acp_translate, "capped", counting)
    async with engine().start(session(tmp_path)) as process:
        summary = await run_turn(process, "hello there")
    assert summary.text == "echo: hello there"
    directions = {v.get("dir") for v in walked if isinstance(v, dict)}  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    assert walked and directions == {"send"}


async def test_an_unknown_session_is_looked_for_on_every_page_of_the_agents_list(
    tmp_path: Path,
) -> None:
    """An agent that refuses an id with a bare internal error (``opencode acp``) is asked for
    its sessions; a listing in pages (``nextCursor``) was "cannot say" past the first page, so
    an unknown id was a ``ProtocolError``. Every page is read: an id on none of them is
    ``SessionNotFoundError``; one on the last page stays a ``ProtocolError`` (the agent has it
    but would not load it)."""
    from agentrun import ProtocolError

    paged = engine("--paged-list")
    with pytest.raises(SessionNotFoundError) as caught:
        async with paged.start(session(tmp_path, resume_id="ses_gone")):
            pass
    assert caught.value.session_id == "ses_gone"
    with pytest.raises(ProtocolError):
        async with paged.start(session(tmp_path, resume_id="fake-5")):
            pass


def test_a_relative_cwd_reaches_the_agent_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    assert session_cwd(SessionOptions(cwd="work")) == str(tmp_path / "work")
    assert session_cwd(SessionOptions()) == str(tmp_path)
