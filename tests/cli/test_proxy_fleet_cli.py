"""``agentrun fleet`` and ``agentrun compare`` with ``--live --upstream URL``: every agent reaches
the embedded model server (standing in for the provider) through one metering credential
proxy, each with a client of its own. Each result shows the proxy's figures for its task
beside its summary's; the proxy's budget, once spent, stops every task; bad input fails before
anything starts."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from agents_support import require_engine

from agentrun._wire.sandbox import sandbox_unavailable
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, TextBlock, ToolCallBlock

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

PLANTED = {
    "ANTHROPIC_API_KEY": "sk-ant-planted-fleet-61d0",
    "OPENAI_API_KEY": "sk-planted-fleet-c2",
}
ENGINES = ("claude", "codex")


def _usage(fresh: int, output: int) -> ScriptUsage:
    return ScriptUsage(input_tokens=fresh, cache_read_tokens=0, cache_write_tokens=0,
                       output_tokens=output)  # fmt: skip


def _environment(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        **PLANTED,
        "AGENTRUN_OFFLINE_HOMES": str(tmp_path / "homes"),
        "AGENTRUN_SESSIONS_DIR": str(tmp_path / "sessions"),
    }


async def _agentrun(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "agentrun.cli", *args], env=env, check=False, cwd=cwd
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _tasks_file(tmp_path: Path, names: list[tuple[str, str]]) -> Path:
    path = tmp_path / "tasks.jsonl"
    lines = [
        {"name": name, "engine": engine, "prompt": "go", "timeout": 120} for name, engine in names
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _sandboxing(sandboxed: bool) -> tuple[str, ...]:
    if sandboxed and (why := sandbox_unavailable()) is not None:
        pytest.skip(why)
    return ("--sandbox",) if sandboxed else ()


@pytest.mark.parametrize("sandboxed", [False, True], ids=["host", "sandbox"])
async def test_a_fleet_s_results_show_each_task_s_metered_usage(
    sandboxed: bool, tmp_path: Path
) -> None:
    for engine in ENGINES:
        require_engine(engine)
    sandbox = _sandboxing(sandboxed)
    said = ModelTurn(blocks=[TextBlock(text="Metered.")], usage=_usage(900, 40), repeat=6)
    tasks = _tasks_file(tmp_path, [(engine, engine) for engine in ENGINES])
    async with ModelServer(Script(turns=[said])) as server:
        status, _, err = await _agentrun(
            "fleet", str(tasks), "--live", "--upstream", server.url, *sandbox,
            "--out", str(tmp_path / "out"), env=_environment(tmp_path), cwd=tmp_path,
        )  # fmt: skip
    assert status == 0, err
    results = [
        json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    ]
    assert sorted(r["task"] for r in results) == sorted(ENGINES)
    calls = 0
    for result in results:
        (turn,) = result["turns"]
        metered = turn["metered"]
        assert metered["client"] == result["task"] and metered["agrees"] is True
        assert turn["usage"]["output_tokens"] == metered["usage"]["output_tokens"]
        assert metered["usage"]["output_tokens"] == 40 * metered["calls"]
        calls += metered["calls"]
    assert calls == len(server.ledger.since(0).main)  # every call the upstream served, once
    assert all(r.headers.get("x-api-key") != PLANTED["OPENAI_API_KEY"] for r in server.requests)


async def test_the_fleet_s_proxy_budget_stops_every_task(tmp_path: Path) -> None:
    for engine in ENGINES:
        require_engine(engine)
    loop = ModelTurn(
        blocks=[ToolCallBlock(arguments={"command": "echo again"})],
        usage=_usage(400, 100),
        repeat=40,
    )
    tasks = _tasks_file(tmp_path, [("a", "claude"), ("b", "codex"), ("c", "claude")])
    async with ModelServer(Script(turns=[loop])) as server:
        status, out, err = await _agentrun(
            "fleet", str(tasks), "--live", "--upstream", server.url, "-j", "2",
            "--proxy-max-tokens", "1000", "--out", str(tmp_path / "out"), "--json",
            env=_environment(tmp_path), cwd=tmp_path,
        )  # fmt: skip
    assert status == 1, err
    results = [
        json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    ]
    # The two running tasks were refused their next call; the third never started (not a
    # result: a resume runs it, with a budget of its own).
    assert sorted(r["task"] for r in results) == ["a", "b"]
    for result in results:
        assert result["session"]["error"]["code"] == "budget"
        (turn,) = result["turns"]
        assert turn["stop_reason"] == "budget" and turn["metered"]["refused"] >= 1
    assert 2 <= len(server.model_requests) <= 3
    finished = [json.loads(line) for line in out.splitlines()]
    assert any(e["kind"] == "fleet_finished" for e in finished)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["host", "sandbox"])
async def test_compare_runs_every_agent_through_one_proxy(sandboxed: bool, tmp_path: Path) -> None:
    for engine in ENGINES:
        require_engine(engine)
    sandbox = _sandboxing(sandboxed)
    said = ModelTurn(blocks=[TextBlock(text="Compared.")], usage=_usage(800, 30), repeat=6)
    async with ModelServer(Script(turns=[said])) as server:
        status, out, err = await _agentrun(
            "compare", "--engines", ",".join(ENGINES), "--live", "--upstream", server.url,
            *sandbox, "--json", "say it", env=_environment(tmp_path), cwd=tmp_path,
        )  # fmt: skip
    assert status == 0, err
    runs = json.loads(out)
    assert [r["engine"] for r in runs] == list(ENGINES)
    for run in runs:
        assert run["ok"] and run["metered"]["agrees"] and run["metered"]["client"] == run["engine"]
        assert run["usage"]["output_tokens"] == run["metered"]["usage"]["output_tokens"]
    assert sum(r["metered"]["calls"] for r in runs) == len(server.ledger.since(0).main)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (("fleet", "TASKS", "--live", "--proxy-max-tokens", "5"), "need --upstream URL or --proxy"),
        (("fleet", "TASKS", "--upstream", "http://127.0.0.1:9"), "for --live runs"),
        (("compare", "--engines", "claude", "--proxy-max-cost", "1", "hi"), "need --upstream"),
        (("compare", "--engines", "claude", "--upstream", "http://127.0.0.1:9", "hi"), "--live"),
        (("compare", "--engines", "codex", "--live", "--sandbox", "hi"), "set OPENAI_API_KEY"),
    ],
)
async def test_bad_proxy_options_fail_before_anything_starts(
    command: tuple[str, ...], words: str, tmp_path: Path
) -> None:
    tasks = _tasks_file(tmp_path, [("a", "claude")])
    argv = [str(tasks) if word == "TASKS" else word for word in command]
    env = {k: v for k, v in _environment(tmp_path).items() if k != "OPENAI_API_KEY"}
    if command[0] == "fleet":
        argv += ["--out", str(tmp_path / "out")]
    status, _, err = await _agentrun(*argv, env=env, cwd=tmp_path)
    assert status == 2 and words in err, err
    assert not (tmp_path / "out" / "results.jsonl").exists()
