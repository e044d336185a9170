"""The ACP translator without an agent: recorded sessions (snapshots) and wire shapes of other
ACP agents (claude-code-acp, codex-acp) taken from the wire notes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES
from syrupy.assertion import SnapshotAssertion

from agentrun import MessageType, TurnSummary
from agentrun._vocabulary.messages import Message
from agentrun.engines._registry import get_engine, get_translator
from agentrun.engines._replay import replay_turns
from agentrun.engines.acp import AcpEngine, AcpTranslator

ROOT = FIXTURES
RECORDED = sorted((ROOT / "acp").glob("*.jsonl"))
SAMPLES = sorted((ROOT / "opencode-acp" / "wire-samples").glob("*.jsonl"))


def _replay(path: Path) -> list[dict[str, Any]]:
    turns = replay_turns(path, engine="acp")
    out: list[dict[str, Any]] = []
    for messages in turns:
        summary = TurnSummary.from_messages(messages)
        out.append(
            {
                "messages": [m.model_dump(mode="json", exclude_none=True) for m in messages],
                "summary": summary.model_dump(mode="json", exclude={"duration_s"}),
            }
        )
    return out


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"sample-{p.stem}")
def test_wire_samples(path: Path, snapshot: SnapshotAssertion) -> None:
    assert _replay(path) == snapshot


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_fixtures(path: Path, snapshot: SnapshotAssertion) -> None:
    replayed = _replay(path)
    assert replayed == snapshot
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    # Replay agrees with what the live run reported for each turn.
    for recorded, turn in zip(meta["turns"], replayed, strict=True):
        summary = turn["summary"]
        if "ok" in recorded:
            assert summary["ok"] == recorded["ok"]
        if recorded.get("resume_id"):
            assert summary["resume_id"] == recorded["resume_id"]
        if recorded.get("interrupted"):
            assert summary["stop_reason"] == "cancelled"


def test_fixtures_exist() -> None:
    names = {p.stem for p in RECORDED}
    assert {
        "two_prompts",
        "permission_allow_once",
        "permission_allow_always",
        "permission_reject",
        "permission_cancelled",
        "default_allow",
        "fs_write",
        "cancel",
        "error_500",
        "error_401",
    } <= names
    assert len(SAMPLES) == 5


def _turns(name: str) -> list[TurnSummary]:
    return [TurnSummary.from_messages(t) for t in replay_turns(ROOT / "acp" / name, engine="acp")]


def test_recorded_semantics() -> None:
    two = _turns("two_prompts.jsonl")
    assert [t.text for t in two] == ["Hello from the fake model!", "Hi again!"]
    assert all(t.usage is not None and t.usage.cost_usd is not None for t in two)
    assert two[0].context is not None and two[0].context.size == 200_000
    always = _turns("permission_allow_always.jsonl")
    assert [len(t.tool_calls) for t in always] == [1, 1]
    assert all(t.denials == [] for t in always)
    for name in ("permission_reject.jsonl", "permission_cancelled.jsonl"):
        (rejected,) = _turns(name)
        assert len(rejected.denials) == 1
        assert rejected.tool_calls[0].is_error is True
    (written,) = _turns("fs_write.jsonl")
    assert written.ok and written.tool_calls[0].completed
    cancelled, after = _turns("cancel.jsonl")
    assert cancelled.stop_reason == "cancelled"
    assert after.text == "Fresh answer."
    failed, recovered = _turns("error_500.jsonl")
    assert failed.errors[0].code == "APIError" and not failed.ok
    assert recovered.ok
    (thinking,) = _turns("reasoning.jsonl")
    assert thinking.thinking
    assert thinking.usage is not None
    assert thinking.usage.thinking_tokens == 12
    assert thinking.usage.output_tokens == 20
    planned = replay_turns(ROOT / "acp" / "plan_mode.jsonl", engine="acp")
    plan_init = next(m for m in planned[0] if m.type is MessageType.INIT)
    assert plan_init.data is not None and plan_init.data["mode"] == "plan"
    assert [TurnSummary.from_messages(t).ok for t in planned] == [True, True]
    (loaded,) = _turns("load_second.jsonl")
    assert loaded.text == "You said 42."
    messages = replay_turns(ROOT / "acp" / "load_second.jsonl", engine="acp")[0]
    assert any(m.replayed and m.type is MessageType.TEXT for m in messages)
    init = next(m for m in messages if m.type is MessageType.INIT)
    assert init.data is not None and init.data["mode"] == "plan"


# -- shapes of other agents ------------------------------------------------------------------


def _recv(msg: dict[str, Any]) -> dict[str, Any]:
    return {"dir": "recv", "msg": {"jsonrpc": "2.0", **msg}}


def _send(msg: dict[str, Any]) -> dict[str, Any]:
    return {"dir": "send", "msg": {"jsonrpc": "2.0", **msg}}


def _update(body: dict[str, Any], sid: str = "s1") -> dict[str, Any]:
    return _recv({"method": "session/update", "params": {"sessionId": sid, "update": body}})


def _session(t: AcpTranslator, result: dict[str, Any] | None = None) -> list[Message]:
    out = t.feed(_send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}}))
    out += t.feed(
        _recv(
            {
                "id": 1,
                "result": {
                    "protocolVersion": 1,
                    "agentInfo": {"name": "codex-acp", "version": "0.16.0"},
                },
            }
        )
    )
    out += t.feed(_send({"id": 2, "method": "session/new", "params": {"cwd": "/w"}}))
    out += t.feed(_recv({"id": 2, "result": {"sessionId": "s1", **(result or {})}}))
    out += t.feed(_send({"id": 3, "method": "session/prompt", "params": {"sessionId": "s1"}}))
    return out


def test_repeated_tool_call_is_one_call_with_the_full_input() -> None:
    t = AcpTranslator()
    _session(t)
    first = {
        "sessionUpdate": "tool_call",
        "toolCallId": "toolu_1",
        "title": "Terminal",
        "kind": "execute",
        "status": "pending",
        "rawInput": {},
        "_meta": {"claudeCode": {"toolName": "Bash"}},
    }
    assert t.feed(_update(first)) == []
    second = {**first, "title": "`echo hi`", "rawInput": {"command": "echo hi"}}
    (use,) = t.feed(_update(second))
    assert use.type is MessageType.TOOL_USE and use.tool is not None
    assert (use.tool.name, use.tool.input) == ("Bash", {"command": "echo hi"})
    meta_only = {"sessionUpdate": "tool_call_update", "toolCallId": "toolu_1", "_meta": {}}
    (note,) = t.feed(_update(meta_only))
    assert note.subtype == "tool_call_update"
    done = {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "toolu_1",
        "status": "completed",
        "rawOutput": "hi",
        "content": [{"type": "content", "content": {"type": "text", "text": "```\nhi\n```"}}],
    }
    (result,) = t.feed(_update(done))
    assert result.type is MessageType.TOOL_RESULT and result.tool is not None
    assert result.tool.output == "```\nhi\n```"
    assert result.data is not None and result.data["raw_output"] == "hi"


def test_codex_permission_before_the_tool_call_and_string_ids() -> None:
    t = AcpTranslator()
    _session(t)
    params = {
        "sessionId": "s1",
        "toolCall": {"toolCallId": "call_9", "kind": "execute", "title": "rm -rf build"},
        "options": [
            {"optionId": "approved", "kind": "allow_once", "name": "Yes"},
            {"optionId": "abort", "kind": "reject_once", "name": "No"},
        ],
    }
    assert (
        t.feed(_recv({"id": "9b1d", "method": "session/request_permission", "params": params}))
        == []
    )
    (answer,) = t.feed(
        _send({"id": "9b1d", "result": {"outcome": {"outcome": "selected", "optionId": "abort"}}})
    )
    assert answer.subtype == "permission"
    assert answer.denials is not None
    assert answer.denials[0].tool_use_id == "call_9"
    assert answer.denials[0].tool_name == "rm -rf build"
    assert answer.denials[0].reason == "rejected: No (reject_once)"
    out = t.feed(_update({"sessionUpdate": "usage_update", "used": 4040, "size": 124518}))
    assert out[0].context is not None and out[0].context.used_tokens == 4040
    (result,) = t.feed(_recv({"id": 3, "result": {"stopReason": "cancelled"}}))
    assert result.type is MessageType.RESULT
    assert result.usage is None  # codex-acp reports neither usage nor cost
    assert result.stop_reason == "cancelled"


def test_text_blocks_end_at_a_new_message_a_tool_call_and_the_turn_end() -> None:
    t = AcpTranslator()
    _session(t)

    def chunk(kind: str, text: str, mid: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        if mid is not None:
            body["messageId"] = mid
        return _update(body)

    out: list[Message] = []
    out += t.feed(chunk("agent_thought_chunk", "hmm", None))
    out += t.feed(chunk("agent_message_chunk", "", None))
    out += t.feed(chunk("agent_message_chunk", "One", None))
    out += t.feed(chunk("agent_message_chunk", " two", None))
    out += t.feed(_update({"sessionUpdate": "plan", "entries": [{"content": "a"}]}))
    out += t.feed(chunk("agent_message_chunk", " three", None))
    out += t.feed(
        _update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "c1",
                "title": "read",
                "status": "in_progress",
                "rawInput": {"path": "a"},
            }
        )
    )
    out += t.feed(chunk("agent_message_chunk", "after", "m2"))
    out += t.feed(chunk("agent_message_chunk", "other", "m3"))
    out += t.feed(_recv({"id": 3, "result": {"stopReason": "end_turn"}}))
    kinds = [(str(m.type), m.text) for m in out if not m.is_delta]
    assert kinds == [
        ("thinking", "hmm"),
        ("system", None),
        ("text", "One two three"),
        ("tool_use", None),
        ("text", "after"),
        ("text", "other"),
        ("result", None),
    ]
    summary = TurnSummary.from_messages(out)
    assert summary.text == "after\n\nother"
    assert summary.tool_calls[0].completed is False


def test_codex_acp_terminal_output_in_meta_and_the_tools_own_name() -> None:
    # codex-acp 2.x: the tool's name in the (unstable) "name" field, the command's output only
    # in _meta.terminal_output_delta and its exit code only in _meta.terminal_exit.
    t = AcpTranslator()
    _session(t)
    start = {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_1",
        "name": "exec_command",
        "title": "echo hi",
        "kind": "execute",
        "status": "in_progress",
        "rawInput": {"command": "echo hi", "cwd": "/w"},
        "content": [{"type": "terminal", "terminalId": "call_1"}],
    }
    (use,) = t.feed(_update(start))
    assert use.tool is not None and use.tool.name == "exec_command"
    assert use.tool.title == "echo hi"
    out = t.feed(_update({"sessionUpdate": "tool_call_update", "toolCallId": "call_1",
                          "_meta": {"terminal_output_delta": {"data": "hi\n"}}}))  # fmt: skip
    out += t.feed(
        _update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call_1",
                "status": "completed",
                "_meta": {"terminal_exit": {"exit_code": 0}},
            }
        )
    )
    result = out[-1]
    assert result.type is MessageType.TOOL_RESULT and result.tool is not None
    assert (result.tool.output, result.tool.is_error) == ("hi\n", False)
    assert result.data is not None and result.data["exit_code"] == 0
    summary = TurnSummary.from_messages([use, *out])
    assert summary.tool_calls[0].name == "exec_command"
    assert summary.tool_calls[0].output == "hi\n"


def test_a_failing_terminal_command_is_an_error_result() -> None:
    t = AcpTranslator()
    _session(t)
    t.feed(_update({"sessionUpdate": "tool_call", "toolCallId": "c", "kind": "execute",
                    "status": "in_progress", "rawInput": {"command": "false"}}))  # fmt: skip
    (result,) = t.feed(
        _update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "c",
                "status": "completed",
                "_meta": {"terminal_exit": {"exit_code": 1}},
            }
        )
    )
    assert result.tool is not None and result.tool.is_error is True
    assert result.tool.output == ""


def test_an_adapters_informational_notice_is_not_answer_text() -> None:
    # claude-agent-acp in mode "auto" sends a billing warning as an agent_message_chunk.
    t = AcpTranslator()
    _session(t)
    out = t.feed(
        _update(
            {
                "sessionUpdate": "agent_message_chunk",
                "messageId": "m1",
                "content": {"type": "text", "text": "Hello from the fake model."},
            }
        )
    )
    out += t.feed(
        _update(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "**Warning:** We're changing auto mode."},
                "_meta": {"claudeCode": {"kind": "informational", "level": "warning"}},
            }
        )
    )
    out += t.feed(_recv({"id": 3, "result": {"stopReason": "end_turn"}}))
    notices = [m for m in out if m.subtype == "notice"]
    assert [n.text for n in notices] == ["**Warning:** We're changing auto mode."]
    assert notices[0].data == {"level": "warning"}
    summary = TurnSummary.from_messages(out)
    assert summary.text == "Hello from the fake model."


def test_per_call_usage_in_meta_is_the_prompts_usage_when_it_reports_none() -> None:
    # Qwen Code: each model call's usage on an empty agent_message_chunk (inputTokens counts
    # the cached input), no usage in the prompt's response.
    t = AcpTranslator()
    _session(t)

    def call(input_tokens: int, cached: int, output: int) -> dict[str, Any]:
        usage = {"inputTokens": input_tokens, "outputTokens": output, "thoughtTokens": 0,
                 "totalTokens": input_tokens + output, "cachedReadTokens": cached}  # fmt: skip
        return _update({"sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": ""}, "_meta": {"usage": usage}})  # fmt: skip

    out = t.feed(_update({"sessionUpdate": "agent_message_chunk",
                          "content": {"type": "text", "text": "Ran it."}}))  # fmt: skip
    out += t.feed(call(3000, 2000, 7))
    out += t.feed(call(3100, 2900, 5))
    out += t.feed(_recv({"id": 3, "result": {"stopReason": "end_turn"}}))
    summary = TurnSummary.from_messages(out)
    assert summary.text == "Ran it."
    assert summary.usage is not None
    assert (summary.usage.input_tokens, summary.usage.cache_read_tokens) == (1200, 4900)
    assert (summary.usage.output_tokens, summary.usage.usage_source) == (12, "reported")
    # The next prompt starts from nothing.
    t.feed(_send({"id": 4, "method": "session/prompt", "params": {"sessionId": "s1"}}))
    (second,) = t.feed(_recv({"id": 4, "result": {"stopReason": "end_turn"}}))
    assert second.usage is None


def test_gemini_cli_prompt_totals_are_reported_without_inventing_their_split() -> None:
    # The prompt total holds the cache reads, the output lacks the thoughts: neither is
    # ``input_tokens`` / ``output_tokens``; they are the unsplit figures, nothing priced.
    t = AcpTranslator()
    _session(t)
    quota = {"token_count": {"input_tokens": 24273, "output_tokens": 18}}
    (result,) = t.feed(
        _recv({"id": 3, "result": {"stopReason": "end_turn", "_meta": {"quota": quota}}})
    )
    usage = result.usage
    assert usage is not None
    assert (usage.whole_prompt_tokens, usage.answer_tokens) == (24273, 18)
    split = (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens)
    assert split == (None, None, None)
    assert (usage.thinking_tokens, usage.cost_usd) == (None, None)
    assert (usage.usage_source, usage.cost_source) == ("reported", "unavailable")
    assert usage.prompt_tokens == 24273
    assert result.data is not None
    assert result.data["quota_token_count"] == {"input_tokens": 24273, "output_tokens": 18}


@pytest.mark.parametrize(
    ("cancelled", "answer", "expected"),
    [
        pytest.param(True, "max_turn_requests", "cancelled", id="cancelled-on-the-way"),
        pytest.param(True, "end_turn", "end_turn", id="answered-before-the-cancel"),
        pytest.param(False, "max_turn_requests", "max_turn_requests", id="not-cancelled"),
    ],
)
def test_a_prompt_the_client_cancelled_ends_cancelled(
    cancelled: bool, answer: str, expected: str
) -> None:
    # Gemini CLI answers a cancelled prompt whose loop detection fired on the way
    # max_turn_requests: the library cancelled it, so the result says so (the agent's word kept).
    t = AcpTranslator()
    _session(t)
    if cancelled:
        t.feed(_send({"method": "session/cancel", "params": {"sessionId": "s1"}}))
    (result,) = t.feed(_recv({"id": 3, "result": {"stopReason": answer}}))
    assert result.stop_reason == expected
    if expected != answer:
        assert result.data is not None and result.data["agent_stop_reason"] == answer
    # The next prompt starts afresh.
    t.feed(_send({"id": 4, "method": "session/prompt", "params": {"sessionId": "s1"}}))
    (later,) = t.feed(_recv({"id": 4, "result": {"stopReason": "max_turn_requests"}}))
    assert later.stop_reason == "max_turn_requests"


@pytest.mark.parametrize(
    ("output", "total"),
    [
        # codex-acp, Qwen Code: the total counts the output once, thoughts inside.
        pytest.param(79, 1_300 + 44_032 + 79, id="output-holds-the-thoughts"),
        # OpenCode: the thoughts counted apart from the output.
        pytest.param(67, 1_300 + 44_032 + 67 + 12, id="thoughts-apart"),
    ],
)
def test_thoughts_are_added_only_where_the_output_lacks_them(output: int, total: int) -> None:
    t = AcpTranslator()
    _session(t)
    usage = {
        "inputTokens": 1_300,
        "cachedReadTokens": 44_032,
        "outputTokens": output,
        "thoughtTokens": 12,
        "totalTokens": total,
    }
    (result,) = t.feed(_recv({"id": 3, "result": {"stopReason": "end_turn", "usage": usage}}))
    assert result.usage is not None
    assert (result.usage.output_tokens, result.usage.thinking_tokens) == (79, 12)


def test_cost_is_the_difference_from_before_the_prompt() -> None:
    t = AcpTranslator()
    _session(t)
    t.feed(
        _update(
            {
                "sessionUpdate": "usage_update",
                "used": 10,
                "size": 100,
                "cost": {"amount": 0.5, "currency": "USD"},
            }
        )
    )
    (first,) = t.feed(_recv({"id": 3, "result": {"stopReason": "end_turn"}}))
    assert first.usage is not None and first.usage.cost_usd == 0.5
    t.feed(_send({"id": 4, "method": "session/prompt", "params": {"sessionId": "s1"}}))
    t.feed(
        _update(
            {
                "sessionUpdate": "usage_update",
                "used": 0,
                "size": 100,
                "cost": {"amount": 0.75, "currency": "USD"},
            }
        )
    )
    (second,) = t.feed(_recv({"id": 4, "result": {"stopReason": "end_turn"}}))
    assert second.usage is not None and second.usage.cost_usd == 0.25
    assert second.data is not None and second.data["session_cost_usd"] == 0.75


def test_loaded_session_without_a_reading_has_unknown_turn_cost() -> None:
    t = AcpTranslator()
    t.feed(_send({"id": 1, "method": "session/load", "params": {"sessionId": "old", "cwd": "/w"}}))
    replay = t.feed(
        _update(
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "before"},
            },
            "old",
        )
    )
    assert all(m.replayed for m in replay)
    (text,) = t.feed(_recv({"id": 1, "result": {}}))
    assert text.type is MessageType.TEXT and text.replayed
    (init,) = t.feed(_send({"id": 2, "method": "session/prompt", "params": {"sessionId": "old"}}))
    assert init.type is MessageType.INIT and not init.replayed
    assert init.resume_id == "old"
    t.feed(
        _update(
            {
                "sessionUpdate": "usage_update",
                "used": 5,
                "size": 9,
                "cost": {"amount": 3.0, "currency": "USD"},
            },
            "old",
        )
    )
    (result,) = t.feed(_recv({"id": 2, "result": {"stopReason": "end_turn"}}))
    assert result.usage is None
    assert result.data == {"session_cost_usd": 3.0}


def test_late_answer_of_an_abandoned_prompt_is_ignored() -> None:
    t = AcpTranslator()
    _session(t)
    t.feed(_send({"id": 4, "method": "session/prompt", "params": {"sessionId": "s1"}}))
    assert t.feed(_recv({"id": 3, "result": {"stopReason": "cancelled"}})) == []
    (result,) = t.feed(_recv({"id": 4, "result": {"stopReason": "end_turn"}}))
    assert result.stop_reason == "end_turn"


def test_agent_only_lines_and_stderr() -> None:
    t = AcpTranslator()
    lines = [
        {"dir": "stderr", "raw": "noise"},
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {"protocolVersion": 1, "agentInfo": {"name": "X", "version": "1"}},
        },
        {"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s1", "configOptions": []}},
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {
                "sessionId": "s1",
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "hi"},
                },
            },
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "result": {"stopReason": "end_turn", "usage": {"inputTokens": 3, "outputTokens": 1}},
        },
    ]
    out: list[Message] = []
    for line in lines:
        out.extend(t.feed(line))
    assert [str(m.type) for m in out] == ["init", "text_delta", "text", "result"]
    assert out[0].init is not None and out[0].init.agent_name == "X"
    assert out[-1].usage is not None and out[-1].usage.output_tokens == 1


def test_translator_never_raises_on_odd_input() -> None:
    t = AcpTranslator()
    for event in (
        None,
        3,
        [],
        {"dir": "recv", "msg": None},
        {"dir": "recv", "msg": {"method": 5}},
        {"method": "session/update", "params": {"update": {}}},
        {
            "method": "session/update",
            "params": {"sessionId": "s", "update": {"sessionUpdate": "tool_call"}},
        },
        {"id": 7, "error": "bad"},
    ):
        for message in t.feed(event):
            assert isinstance(message, Message)


def test_registry_names() -> None:
    assert isinstance(get_translator("acp"), AcpTranslator)
    assert isinstance(get_translator("opencode-acp"), AcpTranslator)
    preset = get_engine("opencode-acp")
    assert isinstance(preset, AcpEngine)
    assert preset.engine_name == "opencode-acp"
    assert type(preset).wire_format == "jsonrpc"
