"""A tool that fails is a failed tool result on every engine, through its real agent.

The model runs a shell command that prints a word and exits 3; every engine must report one
``tool_use`` and one ``tool_result`` for it, the result with ``is_error`` set and the word in its
output. OpenCode's bash tool says ``completed`` for such a command (the exit code is in its
metadata), so an engine that reads only the status reported a failed command as a success.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from agentrun import Message, MessageType

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: Cases an agent cannot pass: it does not say that the command failed.
FAILED_TOOL_XFAIL = {
    "gemini": "Gemini CLI's ACP mode reports a failed shell command as completed, with no output "
    "and no exit code",
}


def _engines() -> list[str]:
    from agentrun.offline import EMBEDDED_ENGINES

    chosen = os.environ.get("AGENTRUN_COMPLIANCE_ENGINES")
    names = [n.strip() for n in chosen.split(",")] if chosen else list(EMBEDDED_ENGINES)
    return [n for n in names if n in EMBEDDED_ENGINES]


@pytest.mark.parametrize("name", _engines())
async def test_a_failed_command_is_a_failed_tool_result(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from agentrun import EngineUnavailableError, run_turn
    from agentrun.offline import ModelServer, ModelTurn, Script, ToolCallBlock, embedded_engine

    reason = FAILED_TOOL_XFAIL.get(name)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))
    word = f"failing-{uuid.uuid4().hex[:10]}"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    call = ToolCallBlock(tool="shell", arguments={"command": f"echo {word}; exit 3"})
    script = Script(turns=[ModelTurn(blocks=[call])], exhausted_text="reported")
    seen: list[Message] = []
    async with ModelServer(script) as server:
        try:
            engine, options = embedded_engine(
                name, server.url, tmp_path / "agent", cwd=str(workspace), hitl=False
            )
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        async with engine.start(options) as session:
            summary = await run_turn(session, "run it", on_message=seen.append, timeout=120)
    assert summary.ok, summary.errors
    uses = [m.tool for m in seen if m.type is MessageType.TOOL_USE]
    results = [m.tool for m in seen if m.type is MessageType.TOOL_RESULT]
    assert len(uses) == 1 and len(results) == 1, [m.type for m in seen]
    use, result = uses[0], results[0]
    assert use is not None and result is not None
    assert result.id == use.id
    assert word in str(result.output), result
    assert result.is_error is True, result
