"""A fleet of real agents: sessions over every embedded engine under a limit, offline.

The CI case runs a few sessions; ``-m soak`` runs the large one (50 sessions over three engines
with a limit of 8).
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from agents_support import descendants, require_engine

from agentrun import Engine, Fleet, FleetTask
from agentrun.offline import DEFAULT_SHELL_COMMAND, ModelServer, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

ENGINES = ("claude", "opencode", "opencode-acp")


async def _run_fleet(tmp_path: Path, sessions: int, limit: int) -> None:
    require_engine("claude")
    require_engine("opencode")
    before = descendants()
    fds = _open_fds()
    engines: dict[str, Engine] = {}
    tasks: list[FleetTask] = []
    async with AsyncExitStack() as stack:
        for index in range(sessions):
            name = ENGINES[index % len(ENGINES)]
            server = await stack.enter_async_context(ModelServer())
            workspace = tmp_path / f"s{index}" / "workspace"
            workspace.mkdir(parents=True)
            engine, options = embedded_engine(
                name, server.url, tmp_path / f"s{index}" / "agent", cwd=str(workspace)
            )
            label = f"{name}-{index}"
            engines[label] = engine
            tasks.append(
                FleetTask(
                    engine=name,
                    prompts=("run the check",),
                    options=options,
                    name=label,
                    timeout=180,
                )
            )
        fleet = Fleet(limit=limit, engine_factory=lambda task: engines[task.name or ""])
        result = await fleet.run(tasks)

    assert len(result.sessions) == sessions
    for session in result.sessions:
        assert session.ok, session
    for record in result.turns:
        assert record.ok and record.tool_calls == 1, record
        assert DEFAULT_SHELL_COMMAND.split()[-1] in record.text, record
        assert record.usage is not None
        if record.engine == "opencode-acp":
            # A turn of two calls: the agent reports the turn's cost, only the last call's tokens.
            assert record.usage.usage_source == "unavailable" and record.cost_usd is not None
        else:
            assert record.usage.output_tokens, record
        assert record.context_peak is not None and record.context_size_tokens
    assert {r.engine for r in result.turns} == set(ENGINES[: min(sessions, 3)])
    deadline = anyio.current_time() + 10
    while not descendants() <= before and anyio.current_time() < deadline:
        await anyio.sleep(0.1)
    assert descendants() <= before, "agent processes outlived the fleet"
    assert _open_fds() - fds == set(), "file descriptors leaked"
    # Nothing of the runs outside their own directories.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"s{i}" for i in range(sessions))


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


async def test_a_small_fleet_of_real_agents(tmp_path: Path) -> None:
    await _run_fleet(tmp_path, sessions=6, limit=3)


@pytest.mark.soak
@pytest.mark.timeout(900)
async def test_fifty_sessions_over_three_engines_with_a_limit_of_eight(tmp_path: Path) -> None:
    await _run_fleet(tmp_path, sessions=50, limit=8)
