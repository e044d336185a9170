"""A fleet through one metering credential proxy: one client (key, ledger tag, meter) per
task, one budget for the fleet.

Real agents (Claude Code and Codex) share one proxy whose upstream is the embedded model
server: each task's turn records carry what the proxy metered for that task alone, and once the
proxy's budget is spent every running task's next call is refused (its turn stops with
``budget``) and no further task starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents_support import require_engine

from agentrun import ConfigurationError, CredentialProxy, Engine, Fleet, FleetTask, SessionOptions
from agentrun.offline import (
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    TextBlock,
    ToolCallBlock,
    embedded_engine,
)

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

KEYS = {"anthropic": "sk-ant-real-fleet-3e1a", "openai": "sk-real-fleet-90bd"}


def _usage(fresh: int, output: int) -> ScriptUsage:
    return ScriptUsage(input_tokens=fresh, cache_read_tokens=0, cache_write_tokens=0,
                       output_tokens=output)  # fmt: skip


def _tasks(
    proxy: CredentialProxy, tmp_path: Path, engines: list[str], **fields: Any
) -> tuple[list[FleetTask], dict[str, Engine]]:
    tasks: list[FleetTask] = []
    made: dict[str, Engine] = {}
    for index, name in enumerate(engines):
        label = f"{name}-{index}"
        client = proxy.client(label)
        engine, options = embedded_engine(
            name, proxy.url, tmp_path / label, api_key=client.key, meter=client, hitl=False
        )
        made[label] = engine
        tasks.append(FleetTask(engine=name, name=label, options=options, **fields))
    return tasks, made


async def test_each_task_s_usage_is_its_own_slice_of_the_ledger(tmp_path: Path) -> None:
    for name in ("claude", "codex"):
        require_engine(name)
    said = ModelTurn(blocks=[TextBlock(text="Metered.")], usage=_usage(700, 30), repeat=8)
    script = Script(turns=[said])
    async with ModelServer(script) as server, CredentialProxy(server.url, keys=KEYS) as proxy:
        tasks, engines = _tasks(
            proxy, tmp_path, ["claude", "codex"], prompts=("say it", "again"), timeout=120
        )
        fleet = Fleet(limit=2, proxy=proxy, engine_factory=lambda t: engines[t.name or ""])
        result = await fleet.run(tasks)
    assert result.ok, result.sessions
    assert len(result.turns) == 4
    for record in result.turns:
        metered = record.metered
        assert metered is not None and metered.client == record.task and metered.agrees
        assert record.usage is not None and metered.calls >= 1
        assert record.usage.output_tokens == metered.usage.output_tokens == 30 * metered.calls
    for task in tasks:
        own = [r.metered for r in result.turns if r.task == task.name and r.metered]
        served = proxy.clients[task.name or ""].ledger.main
        assert sum(m.calls for m in own) == len(served)
        assert sum(m.usage.output_tokens or 0 for m in own) == served.usage.output_tokens
    assert sum(len(c.ledger.main) for c in proxy.clients.values()) == len(server.ledger)


async def test_the_fleet_budget_spent_stops_every_task(tmp_path: Path) -> None:
    for name in ("claude", "codex"):
        require_engine(name)
    loop = ModelTurn(
        blocks=[ToolCallBlock(arguments={"command": "echo again"})],
        usage=_usage(400, 100),
        repeat=40,
    )
    async with (
        ModelServer(Script(turns=[loop])) as server,
        CredentialProxy(server.url, keys=KEYS, max_tokens=1000) as proxy,
    ):
        tasks, engines = _tasks(
            proxy, tmp_path, ["claude", "codex", "claude"], prompts=("keep going",), timeout=120
        )
        fleet = Fleet(limit=2, proxy=proxy, engine_factory=lambda t: engines[t.name or ""])
        result = await fleet.run(tasks)
    first, second, waiting = result.sessions
    # The two running tasks spent the budget together; each was refused its next call.
    for session in (first, second):
        assert not session.ok and session.error is not None and session.error.code == "budget"
    for record in result.turns:
        assert record.stop_reason == "budget" and record.metered is not None
        assert record.metered.refused >= 1 and record.metered.budget_spent is not None
    assert {r.task for r in result.turns} == {first.task, second.task}
    # The third never started: the fleet's budget was spent.
    assert waiting.turns == 0 and waiting.error is not None and waiting.error.code == "budget"
    assert proxy.budget_spent is not None and proxy.refused >= 2
    assert 2 <= len(server.model_requests) <= 3  # a call in flight when it ran out finished


async def test_a_task_not_metered_by_the_fleet_s_proxy_is_refused(tmp_path: Path) -> None:
    proxy = CredentialProxy("http://127.0.0.1:9", keys=KEYS)
    other = CredentialProxy("http://127.0.0.1:9", keys=KEYS)
    unmetered = FleetTask(engine="claude", prompts=("hi",), name="a")
    elsewhere = FleetTask(
        engine="claude", prompts=("hi",), name="b", options=SessionOptions(meter=other.client())
    )
    for task in (unmetered, elsewhere):
        with pytest.raises(ConfigurationError, match="not metered by the fleet's proxy"):
            await Fleet(proxy=proxy).run([task])
    with pytest.raises(ConfigurationError, match="must be a CredentialProxy"):
        Fleet(proxy="http://127.0.0.1:9")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ConfigurationError, match="not with backend='ray'"):
        Fleet(proxy=proxy, backend="ray")
