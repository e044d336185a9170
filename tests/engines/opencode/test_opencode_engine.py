"""The OpenCode run engine's own logic, without the agent: the command line of each turn, the
options it cannot honour, and the checks made before anything is spawned."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun import ConfigurationError, EngineUnavailableError, SessionOptions, get_engine
from agentrun.engines.opencode import OpenCodeEngine
from agentrun.engines.opencode._argv import build_argv, unsupported_options

BIN = "/opt/opencode"


def _argv(
    options: SessionOptions, *, resume_id: str | None = None, first: bool = True
) -> list[str]:
    return list(build_argv(BIN, options, resume_id=resume_id, first_turn=first).argv)


def test_a_plain_turn_never_carries_the_prompt() -> None:
    assert _argv(SessionOptions()) == [BIN, "run", "--format", "json"]


def test_model_agent_and_plan_mode() -> None:
    assert _argv(SessionOptions(model="fake/m", agent_id="build")) == [
        BIN, "run", "--format", "json", "--model", "fake/m", "--agent", "build",
    ]  # fmt: skip
    assert _argv(SessionOptions(mode="plan"))[-2:] == ["--agent", "plan"]


def test_resume_fork_and_continue_apply_to_the_first_turn_only() -> None:
    forked = SessionOptions(resume_id="ses_1", fork=True)
    assert _argv(forked, resume_id="ses_1")[-3:] == ["--session", "ses_1", "--fork"]
    # Later turns continue the forked session by its own id, without forking again.
    assert _argv(forked, resume_id="ses_2", first=False)[-2:] == ["--session", "ses_2"]
    assert _argv(SessionOptions(continue_last=True))[-1] == "--continue"
    assert "--continue" not in _argv(SessionOptions(continue_last=True), first=False)


def test_values_that_look_like_flags_are_refused_not_passed() -> None:
    options = SessionOptions(options={"opencode.variant": "-x", "opencode.title": "--evil"})
    args = build_argv(BIN, options, resume_id=None, first_turn=True)
    assert "-x" not in args.argv and "--evil" not in args.argv
    assert {name for name, _ in args.unsupported} == {"opencode.variant", "opencode.title"}


def test_hitl_false_auto_approves_and_effort_turns_thinking_on() -> None:
    argv = _argv(SessionOptions(hitl=False, effort="high"))
    assert "--auto" in argv and "--thinking" in argv
    assert argv[argv.index("--variant") + 1] == "high"


def test_options_it_cannot_honour_are_named_with_a_reason() -> None:
    options = SessionOptions(system_prompt="be brief", max_turns=3, add_dirs=["/tmp"])
    named = dict(unsupported_options(options))
    assert set(named) == {"system_prompt", "max_turns", "add_dirs"}
    assert all(reason for reason in named.values())
    assert unsupported_options(SessionOptions()) == []


def test_extra_args_come_last() -> None:
    assert _argv(SessionOptions(extra_args=["--print-logs"]))[-1] == "--print-logs"


def test_the_name_round_trips_and_a_missing_binary_is_reported_before_spawning(
    tmp_path: Path,
) -> None:
    engine = get_engine("opencode")
    assert isinstance(engine, OpenCodeEngine) and engine.name == "opencode"
    with pytest.raises(EngineUnavailableError):
        get_engine("opencode", binary=str(tmp_path / "no-such-opencode")).check()


@pytest.mark.anyio
async def test_a_missing_working_directory_is_a_configuration_error(tmp_path: Path) -> None:
    from agentrun import run_turn

    options = SessionOptions(cwd=str(tmp_path / "missing"))
    with pytest.raises(ConfigurationError):
        async with get_engine("opencode").start(options) as session:
            await run_turn(session, "hi")
