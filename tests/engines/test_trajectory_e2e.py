"""Trajectories of real agents on the embedded default: a live session's ATIF document, and a
trajectory recorded with Claude Code continued on OpenCode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents_support import require_engine
from repo_paths import FIXTURES

import agentrun
from agentrun import (
    Engine,
    EngineUnavailableError,
    Message,
    MessageType,
    SessionOptions,
    TurnSummary,
    Usage,
    get_engine,
    run_turn,
)
from agentrun._wire.programs import resolve_binary
from agentrun.engines.acp import AcpEngine
from agentrun.offline import EMBEDDED_ENGINES, ModelServer, ModelTurn, Script, embedded_engine
from agentrun.trajectory import Trajectory, from_atif, to_atif

pytestmark = [pytest.mark.anyio, pytest.mark.agent]


#: Every engine of the embedded default, and the generic ``acp`` engine (driving ``opencode
#: acp`` by its command line, as a user of an unlisted ACP agent would).
LIVE_ENGINES = [*sorted(EMBEDDED_ENGINES), "acp"]


def _engine(name: str, url: str, tmp_path: Path) -> tuple[Engine, SessionOptions]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    preset = "opencode-acp" if name == "acp" else name
    try:
        get_engine(preset).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    engine, options = embedded_engine(preset, url, tmp_path / "agent", cwd=str(workspace))
    if name == "acp":
        command = [resolve_binary("opencode"), "acp", "--cwd", str(workspace)]
        return AcpEngine(command), options
    return engine, options


@pytest.mark.parametrize("name", LIVE_ENGINES)
async def test_a_live_session_exports_a_valid_trajectory(name: str, tmp_path: Path) -> None:
    script = Script(turns=[ModelTurn.shell("echo hi", say="Running it."), ModelTurn.text("It printed hi."),
                           ModelTurn.text("Nothing else.")])  # fmt: skip
    prompts = ["run echo hi", "anything else?"]
    turns: list[list[Message]] = []
    summaries: list[TurnSummary] = []
    async with ModelServer(script) as server:
        engine, options = _engine(name, server.url, tmp_path)
        async with engine.start(options) as session:
            for prompt in prompts:
                seen: list[Message] = []
                summaries.append(
                    await run_turn(session, prompt, on_message=seen.append, timeout=120)
                )
                turns.append(seen)
    assert all(s.ok for s in summaries), [s.errors for s in summaries]
    first = to_atif(turns, prompts=prompts)
    document = first.model_dump_json(exclude_none=True)
    trajectory = Trajectory.model_validate_json(document)  # the RFC's models, strict
    assert [s.step_id for s in trajectory.steps] == list(range(1, len(trajectory.steps) + 1))
    assert [s.message for s in trajectory.steps if s.source == "user"] == prompts
    agent_steps = [s for s in trajectory.steps if s.source == "agent"]
    calls = [c for s in agent_steps for c in s.tool_calls or ()]
    assert len(calls) == 1, calls
    (step,) = [s for s in agent_steps if s.tool_calls]
    assert step.observation is not None
    assert step.observation.results[0].source_call_id == calls[0].tool_call_id
    if name == "gemini":
        # Gemini CLI reports a command's end over ACP without its output.
        assert step.observation.results[0].content is None
    else:
        assert "hi" in str(step.observation.results[0].content)
    assert agent_steps[-1].message == "Nothing else."
    assert trajectory.agent.name != "unknown" and trajectory.agent.version != "unknown"
    assert trajectory.session_id
    assert trajectory.session_id in {i for s in summaries for i in (s.session_id, s.resume_id)}
    total = Usage()
    for summary in summaries:
        assert summary.usage is not None
        total = total + summary.usage
    final = trajectory.final_metrics
    assert final is not None
    assert final.total_steps == len(trajectory.steps)
    # Every agent reports the turn's prompt (Gemini CLI as a whole, cache reads inside).
    assert final.total_prompt_tokens
    assert final.total_prompt_tokens == total.prompt_tokens
    assert final.total_completion_tokens == total.output_tokens
    assert final.total_cached_tokens == total.cache_read_tokens
    assert final.total_cost_usd == total.cost_usd
    # Read back, the same turns: prompts, tool calls, usage; and exported again, the same
    # document.
    read = from_atif(document)
    assert [t.prompt for t in read.turns] == prompts
    for before, after in zip(summaries, (t.summary for t in read.turns), strict=True):
        assert after.ok
        assert [c.id for c in after.tool_calls] == [c.id for c in before.tool_calls]
        context = {"context_used_tokens", "context_size_tokens"}
        assert (after.usage or Usage()).model_dump(exclude=context) == (
            before.usage or Usage()
        ).model_dump(exclude=context)
    again = to_atif(read.turns)
    assert again.model_dump(mode="json", exclude_none=True) == first.model_dump(
        mode="json", exclude_none=True
    )


async def test_a_claude_trajectory_continues_on_opencode(tmp_path: Path) -> None:
    require_engine("opencode")
    fixture = FIXTURES / "claude/tool_use.jsonl"
    meta = json.loads(fixture.with_suffix(".meta.json").read_text())
    recorded = to_atif(agentrun.replay(fixture, engine="claude"), prompts=meta["prompts"])
    assert recorded.agent.name == "claude-code"
    script = Script(turns=[ModelTurn.text("Picking up where it was left.")])
    seen: list[Message] = []
    async with ModelServer(script) as server:
        engine, options = embedded_engine("opencode", server.url, tmp_path / "agent")
        async with engine.start(options) as session:
            digest = session.continue_trajectory(recorded)
            summary = await run_turn(session, "Carry on.", on_message=seen.append, timeout=120)
        body = json.dumps(json.loads(server.requests[-1].body))
    assert summary.ok and summary.text == "Picking up where it was left."
    assert "Work recorded with claude-code" in digest and "run echo hi" in digest
    # The model received the digest, whole, and the new request after it.
    for line in filter(None, digest.splitlines()):
        assert json.dumps(line)[1:-1] in body, line
    assert "Carry on." in body
    (note,) = [m for m in seen if m.type is MessageType.COMPACTION]
    assert note.data is not None and note.data["trigger"] == "handoff"
    assert note.data["previous_session_id"] == recorded.session_id
