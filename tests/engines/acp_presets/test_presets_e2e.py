"""End to end: the ``claude-acp`` and ``codex-acp`` presets run their real pinned adapters
(``@agentclientprotocol/claude-agent-acp`` over Claude Code, ``@agentclientprotocol/codex-acp``
over ``codex app-server``) against the embedded model server, offline, each in the mode that
asks for permission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import descendants

from agentrun import SessionOptions, TurnTimeoutError, get_engine
from agentrun._turns.engine import Engine
from agentrun._turns.run import run_turn
from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun._vocabulary.messages import Message, MessageType
from agentrun._vocabulary.permissions import PermissionDecision, PermissionRequest
from agentrun._wire.programs import resolve_node_script
from agentrun.offline import (
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    TextBlock,
    ToolCallBlock,
    offline_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: name -> (npm package, its script, the window the gauge shows, the fill of a 1000 + 2000
#: cached input, 7 output call: the Claude and Codex adapters count the answer in, Qwen not;
#: Gemini CLI sends no usage_update, so it has no gauge)
PRESETS = {
    "claude-acp": ("@agentclientprotocol/claude-agent-acp", "dist/index.js", 1_000_000, 3007),
    "codex-acp": ("@agentclientprotocol/codex-acp", "dist/index.js", 124_518, 3007),
    "qwen": ("@qwen-code/qwen-code", "cli.js", 131_072, 3000),
    "gemini": ("@google/gemini-cli", "bundle/gemini.js", None, None),
}


def _installed(name: str) -> str:
    """``name``, or skip the test when its adapter or Node.js is not installed."""
    try:
        resolve_node_script(PRESETS[name][0], PRESETS[name][1], engine=name)
        get_engine(name).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    return name


@pytest.fixture(params=sorted(PRESETS))
def preset(request: pytest.FixtureRequest) -> str:
    return _installed(str(request.param))


def _session(preset: str, server: ModelServer, tmp_path: Path, **options: Any) -> SessionOptions:
    config = offline_config(preset, server.url, tmp_path / "agent")
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return SessionOptions(
        cwd=str(workspace), env=dict(config.env), inherit_env=False, model=config.model, **options
    )


def _writes(preset: str, name: str) -> ModelTurn:
    """A shell call that creates ``name``: one the adapter's permission mode asks about."""
    arguments: dict[str, Any] = {"command": f"touch {name}"}
    if preset == "codex-acp":
        # Codex's read-only sandbox asks only when the model requests escalation.
        arguments |= {"sandbox_permissions": "require_escalated", "justification": "write it"}
    return ModelTurn(blocks=[ToolCallBlock(tool="shell", arguments=arguments)])


async def _closed_without_leftovers(engine: Engine, options: SessionOptions, body: Any) -> Any:
    before = descendants()
    async with engine.start(options) as session:
        result = await body(session)
    with anyio.fail_after(10):
        while descendants() - before:
            await anyio.sleep(0.1)
    return result


async def test_two_turns_with_usage_and_a_sized_gauge(preset: str, tmp_path: Path) -> None:
    usage = ScriptUsage(input_tokens=1000, cache_read_tokens=2000, output_tokens=7)
    script = Script(turns=[ModelTurn.text("First answer.", usage=usage),
                           ModelTurn.text("Second answer.", usage=usage)])  # fmt: skip
    seen: list[Message] = []
    async with ModelServer(script) as server:
        options = _session(preset, server, tmp_path)

        async def body(session: Any) -> Any:
            first = await run_turn(session, "say hi", timeout=90, on_message=seen.append)
            second = await run_turn(session, "again", timeout=90)
            return first, second

        first, second = await _closed_without_leftovers(get_engine(preset), options, body)
        scripted = [r for r in server.requests if r.turn_index is not None]
    assert seen[0].type is MessageType.INIT, [(m.type.value, m.subtype) for m in seen[:8]]
    assert (first.ok, first.text) == (True, "First answer.")
    assert (second.ok, second.text) == (True, "Second answer.")
    assert [r.turn_index for r in scripted] == [0, 1], "side calls must not eat the script"
    for summary in (first, second):
        if PRESETS[preset][2] is None:
            assert summary.context is None  # nothing reported, nothing invented
        else:
            assert summary.context is not None
            assert (summary.context.size, summary.context.used) == PRESETS[preset][2:]
        assert summary.usage is not None
        if preset == "gemini":
            # Gemini CLI's quota totals: the prompt with its cache reads inside, the answer
            # without its thinking; reported as such, no split invented.
            usage = summary.usage
            assert usage.usage_source == "reported", usage
            assert (usage.input_tokens, usage.output_tokens, usage.answer_tokens) == (None, None, 7)
            assert usage.whole_prompt_tokens, usage
        else:
            assert summary.usage.output_tokens == 7


async def test_a_tool_allowed_and_one_rejected(preset: str, tmp_path: Path) -> None:
    script = Script(turns=[_writes(preset, "allowed.txt"), ModelTurn.text("Created it."),
                           _writes(preset, "refused.txt"), ModelTurn.text("It was refused.")])  # fmt: skip
    asked: list[PermissionRequest] = []

    async def handler(request: PermissionRequest) -> PermissionDecision:
        asked.append(request)
        if len(asked) == 1:
            return PermissionDecision.allow_once()
        return PermissionDecision.deny("not this one")

    async with ModelServer(script) as server:
        options = _session(preset, server, tmp_path, hitl=True, permission_handler=handler)

        async def body(session: Any) -> Any:
            allowed = await run_turn(session, "create allowed.txt", timeout=90)
            refused = await run_turn(session, "create refused.txt", timeout=90)
            return allowed, refused

        allowed, refused = await _closed_without_leftovers(get_engine(preset), options, body)
    workspace = tmp_path / "workspace"
    assert len(asked) == 2, asked
    # Gemini CLI sends no input, only a title naming the command.
    assert "allowed.txt" in f"{asked[0].tool_name} {asked[0].title} {asked[0].input}", asked
    assert allowed.ok and (workspace / "allowed.txt").exists()
    assert allowed.denials == []
    assert len(refused.denials) == 1, refused
    denial = refused.denials[0]
    assert "refused.txt" in f"{denial.tool_name} {denial.input}"
    assert not (workspace / "refused.txt").exists()


async def test_cancel_then_a_clean_turn(preset: str, tmp_path: Path) -> None:
    counting = "Counting: " + " ".join(str(i) for i in range(300))
    slow = ModelTurn(blocks=[TextBlock(text=counting)], chunk_delay=0.05, chunk_chars=6)
    script = Script(turns=[slow, ModelTurn.text("Fresh answer.")])
    async with ModelServer(script) as server:
        options = _session(preset, server, tmp_path)

        async def body(session: Any) -> Any:
            async with session.turn("count slowly", timeout=90) as turn:
                async for message in turn:
                    if message.type is MessageType.TEXT_DELTA:
                        break
            return turn.summary, await run_turn(session, "and now?", timeout=90)

        cancelled, after = await _closed_without_leftovers(get_engine(preset), options, body)
    assert cancelled.stop_reason == "cancelled"
    assert counting.startswith(cancelled.text) and len(cancelled.text) < len(counting)
    assert (after.ok, after.text) == (True, "Fresh answer.")


async def test_a_permission_never_answered_times_out_and_the_session_goes_on(
    preset: str, tmp_path: Path
) -> None:
    script = Script(turns=[_writes(preset, "never.txt"), ModelTurn.text("unreachable"),
                           ModelTurn.text("Next answer.")])  # fmt: skip

    async def never(request: PermissionRequest) -> PermissionDecision:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with ModelServer(script) as server:
        options = _session(preset, server, tmp_path, hitl=True, permission_handler=never)

        async def body(session: Any) -> Any:
            with pytest.raises(TurnTimeoutError) as timed_out:
                await run_turn(session, "create never.txt", timeout=8)
            # The model's answer to the refused call may be served to the timed-out turn or
            # not, depending on the adapter; the next turn gets its own answer either way.
            answer = await run_turn(session, "still there?", timeout=90)
            return timed_out.value, answer

        error, answer = await _closed_without_leftovers(get_engine(preset), options, body)
    assert error.summary is not None and error.summary.stop_reason in ("timeout", "cancelled")
    assert not (tmp_path / "workspace" / "never.txt").exists()
    assert answer.ok and answer.text in ("unreachable", "Next answer.")


def test_presets_are_registered_names() -> None:
    from agentrun import engine_names

    for name in PRESETS:
        assert name in engine_names()
        assert get_engine(name).name == name


def test_a_node_too_old_is_a_clear_engine_error() -> None:
    from agentrun._wire.programs import resolve_node

    with pytest.raises(EngineUnavailableError, match=r"needs Node.js 999 or newer") as raised:
        resolve_node(minimum=999, engine="claude-acp")
    assert raised.value.searched  # where it looked


def test_an_explicit_binary_replaces_the_node_command(tmp_path: Path) -> None:
    program = tmp_path / "claude-agent-acp"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    engine = get_engine("claude-acp", binary=str(program))
    assert engine.command_for(SessionOptions()) == [str(program)]  # type: ignore[attr-defined]


#: The mode the Claude, Codex and Qwen presets start in (the one that asks), and the adapter's own
#: default (which never asks), that a user may still choose.
MODES = {
    "claude-acp": ("default", "auto"),
    "codex-acp": ("read-only", "agent"),
    "qwen": ("default", "auto"),
}


@pytest.fixture(params=sorted(MODES))
def moded(request: pytest.FixtureRequest) -> str:
    return _installed(str(request.param))


@pytest.mark.parametrize("chosen", [False, True], ids=["preset-mode", "user-mode"])
async def test_the_asking_mode_by_default_and_the_users_choice(
    moded: str, chosen: bool, tmp_path: Path
) -> None:
    preset = moded
    asking, own = MODES[preset]
    extra: dict[str, Any] = {"options": {"acp.mode": own}} if chosen else {}
    async with ModelServer(Script(turns=[ModelTurn.text("Hi.")])) as server:
        options = _session(preset, server, tmp_path, **extra)

        async def body(session: Any) -> Any:
            summary = await run_turn(session, "say hi", timeout=90)
            return summary, session.driver.state.mode

        summary, mode = await _closed_without_leftovers(get_engine(preset), options, body)
    assert (summary.ok, summary.text) == (True, "Hi.")
    assert mode == (own if chosen else asking)
