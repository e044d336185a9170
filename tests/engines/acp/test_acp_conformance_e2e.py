"""The ACP engine as an ACP client, checked against the latest published schema: every message
between the library and a real pinned ACP agent (both directions: the library's requests,
notifications and answers to the agent's requests, and all the agent sends) is validated by
the zod validators of the ``@agentclientprotocol/sdk`` npm package (:mod:`acp_conformance`).

Each agent runs against the embedded model server, through the library's own paths: a new
session with a tool the agent asks about, the session resumed (``session/load`` or
``session/resume``), forked where the agent can, one opened in plan mode, and one for an id the
agent does not know."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from acp_conformance import assert_conforms, taps_to_records

from agentrun._turns.run import run_turn
from agentrun._turns.session import Session
from agentrun._vocabulary.errors import (
    ConfigurationError,
    EngineUnavailableError,
    ForkNotSupportedError,
    SessionNotFoundError,
)
from agentrun._vocabulary.permissions import approve_all
from agentrun.engines._registry import get_engine
from agentrun.offline import (
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    ToolCallBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

USAGE = ScriptUsage(input_tokens=1000, cache_read_tokens=2000, output_tokens=7)
#: The agents the ACP engine talks to (``opencode acp``, the Claude Code and Codex adapters,
#: Gemini CLI and Qwen Code in their ACP modes).
AGENTS = ["opencode-acp", "claude-acp", "codex-acp", "gemini", "qwen"]
#: Methods the agents send that the schema does not define: the adapters' extension
#: notification (``_`` names are ACP's extension methods) and Qwen Code's own, unprefixed.
AGENT_METHODS_OUTSIDE = frozenset(
    {"_auth/status_update", "qwen/notify/session/mode-update", "craft/drainMidTurnQueue"}
)


def _available(engine: str) -> None:
    try:
        get_engine(engine).check()
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.mark.timeout(400)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("name", AGENTS)
async def test_every_message_with_a_real_agent_validates(name: str, tmp_path: Path) -> None:
    _available(name)
    arguments: dict[str, Any] = {"command": "touch made.txt"}
    if name == "codex-acp":
        arguments |= {"sandbox_permissions": "require_escalated", "justification": "write it"}
    script = Script(turns=[
        ModelTurn(blocks=[ToolCallBlock(tool="shell", arguments=arguments)], usage=USAGE),
        ModelTurn.text("Made it.", usage=USAGE),
    ])  # fmt: skip
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    tapped: list[tuple[str, bytes]] = []

    def tap(direction: str, line: bytes) -> None:
        tapped.append((direction, line))

    async with ModelServer(script) as server:

        def start(**options: Any) -> Session:
            engine, session_options = embedded_engine(
                name, server.url, tmp_path / "agent", cwd=str(workspace), **options
            )
            session = engine.start(session_options)
            session.wire_tap = tap
            return session

        # OpenCode asks about nothing by default: asked to ask, as ``agentrun acp`` does.
        asking = {"opencode.permission": json.dumps({"bash": "ask", "edit": "ask"})}
        async with start(hitl=True, permission_handler=approve_all, options=asking) as first:
            summary = await run_turn(first, "make it", timeout=120)
            assert summary.ok, summary.errors
        assert (workspace / "made.txt").exists()
        resume_id = summary.resume_id
        assert resume_id is not None
        opened: list[str] = ["new"]
        try:
            async with start(resume_id=resume_id) as again:
                assert (await run_turn(again, "again", timeout=120)).ok
            opened.append("resumed")
        except SessionNotFoundError:
            pass  # an agent that keeps no sessions offline (Gemini CLI)
        try:
            async with start(resume_id=resume_id, fork=True) as forked:
                assert (await run_turn(forked, "a copy", timeout=120)).ok
            opened.append("forked")
        except (ForkNotSupportedError, SessionNotFoundError):
            pass
        try:
            async with start(mode="plan") as planning:
                assert (await run_turn(planning, "plan it", timeout=120)).ok
            opened.append("plan")
        except ConfigurationError:  # an agent without a plan mode says so
            pass
        try:
            async with start(resume_id="01a20000-0000-7000-8000-00000000beef") as unknown:
                await run_turn(unknown, "hi", timeout=120)
        except SessionNotFoundError:
            opened.append("not found")
    report = assert_conforms(taps_to_records(tapped), library="client")
    # What the agent sent outside the schema: extension methods (``_``) and vendor ones.
    assert {u.split(" ", 1)[0] for u in report["unknown"]} <= AGENT_METHODS_OUTSIDE, report
    methods = report["methods"]
    for method in ("initialize", "session/new", "session/prompt"):
        assert f"{method} request" in methods and f"{method} response" in methods, methods
    assert methods.get("session/update notification", 0) > 0, methods
    assert "session/request_permission request" in methods, methods
    assert opened[0] == "new" and opened[-1] == "not found", opened
    # The model is chosen through the agent's config option: none still needs the dropped
    # session/set_model.
    assert "session/set_model request" not in methods, methods
