"""``agentrun run --live --upstream URL``: the real pinned agents reach the embedded model server
(standing in for the provider) only through the metering credential proxy. The caller's
"real" key reaches the upstream and nothing else: it is searched for in everything the session
produced. Each turn's usage is the proxy's ledger, and the proxy's ledger is what the upstream
served; a budget spent at the proxy ends the turn; bad input fails before anything starts."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrun._wire.sandbox import sandbox_unavailable
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, ToolCallBlock
from tests.agents_support import require_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: The caller's "real" keys: planted, to be found nowhere but on the upstream's requests.
PLANTED = {
    "ANTHROPIC_API_KEY": "sk-ant-planted-4f1c9e07b2d8",
    "OPENAI_API_KEY": "sk-planted-8a3e51d0c6b9",
    "GEMINI_API_KEY": "AIza-planted-2b7d90e4f135",
}
#: Where each engine's key travels to the upstream.
ANTHROPIC = ("x-api-key", PLANTED["ANTHROPIC_API_KEY"])
OPENAI = ("authorization", f"Bearer {PLANTED['OPENAI_API_KEY']}")
GEMINI = ("x-goog-api-key", PLANTED["GEMINI_API_KEY"])
KEY_HEADER = {
    "claude": ANTHROPIC,
    "claude-acp": ANTHROPIC,
    "codex": OPENAI,
    "codex-app-server": OPENAI,
    "codex-acp": OPENAI,
    "gemini": GEMINI,
    "opencode": OPENAI,
    "opencode-acp": OPENAI,
    "qwen": OPENAI,
}
#: Lets each agent run the shell command below without asking.
NO_ASKING: dict[str, tuple[str, ...]] = {
    "claude": ("--option", "claude.permission_mode=bypassPermissions"),
    "claude-acp": ("--option", "acp.mode=bypassPermissions"),
    "codex-acp": ("--option", "acp.mode=agent-full-access"),
    "gemini": ("--option", "acp.mode=yolo"),
    "qwen": ("--option", "acp.mode=yolo"),
}
#: Agents whose tool results carry no output on their stream (Gemini CLI over ACP).
OUTPUT_NOT_ON_THE_STREAM = frozenset({"gemini"})
#: Agents reporting the whole prompt and the answer without the library's split (Gemini CLI).
UNSPLIT_USAGE = frozenset({"gemini"})
#: The agent's environment, the command lines it can see that hold a planted key (every planted
#: key says "planted"; grep's own line names only the word) with ps's own line to show it ran,
#: and its host name, printed by its own shell. Only those lines: on a busy machine ps lists
#: hundreds of processes, and Claude Code keeps an output past ~30,000 characters in a file,
#: showing the model a preview.
SHOW_ENV = "env; ps -ww -eo args | grep -e planted -e '^ps '; hostname"


def _usage(fresh: int, read: int, write: int, output: int) -> ScriptUsage:
    return ScriptUsage(
        input_tokens=fresh, cache_read_tokens=read, cache_write_tokens=write, output_tokens=output
    )


def _script() -> Script:
    return Script(
        turns=[
            ModelTurn(
                blocks=[ToolCallBlock(arguments={"command": SHOW_ENV})],
                usage=_usage(1_204, 20_480, 3_072, 52),
            ),
            ModelTurn.text("The shell works.", usage=_usage(96, 23_552, 310, 27)),
        ]
    )


async def _agentrun(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "agentrun.cli", *args], env=env, check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _environment(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        **PLANTED,
        "AGENTRUN_OFFLINE_HOMES": str(tmp_path / "homes"),
        "AGENTRUN_SESSIONS_DIR": str(tmp_path / "sessions"),
    }


def _files_holding(root: Path, needle: bytes) -> list[str]:
    found: list[str] = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            found.append(str(path))
    return found


@pytest.mark.parametrize("sandboxed", [False, True], ids=["host", "sandbox"])
@pytest.mark.parametrize("engine", sorted(KEY_HEADER))
async def test_the_real_key_reaches_the_upstream_only_and_usage_is_the_ledger(
    engine: str, sandboxed: bool, tmp_path: Path
) -> None:
    """Sandboxed (``--sandbox``), the agent reaches the proxy only through the Unix socket
    bound into its sandbox: its own shell runs inside (the sandbox's host name)."""
    require_engine(engine)
    if sandboxed and (why := sandbox_unavailable()) is not None:
        pytest.skip(why)
    atif = tmp_path / "session.atif.json"
    asking = ("--sandbox", "--approve-all") if sandboxed else NO_ASKING.get(engine, ())
    async with ModelServer(_script()) as server:
        status, out, err = await _agentrun(
            "run", "--live", "--upstream", server.url, "--engine", engine, "--json",
            "--journal", "--atif", str(atif), *asking, "check the shell",
            env=_environment(tmp_path),
        )  # fmt: skip
    assert status == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    # The agent ran the shell, and its environment and the machine's command lines were printed
    # (as far as the agent keeps a tool's output; Gemini CLI keeps none on its stream, so there
    # the printout is what it sent the model back).
    header, value = KEY_HEADER[engine]
    shown = "".join(json.dumps(line) for line in lines if line.get("type") == "tool_result")
    if engine in OUTPUT_NOT_ON_THE_STREAM:
        shown = server.model_requests[-1].body.decode()
    assert "PATH=" in shown and "ps -ww -eo args" in shown
    # The host name printed on a line of its own (another run's sandbox may be in ps's list).
    assert ("\\nagentrun-sandbox" in shown) is sandboxed
    # The upstream received the planted key on every model call, in the provider's header.
    assert server.model_requests
    assert all(r.headers.get(header) == value for r in server.model_requests)
    # The agent's key was the proxy's client key, which stops at the proxy (the bodies may hold
    # it: the agent's shell printed its environment, which the agent sent the model).
    assert all("agentrun-proxy-" not in f"{r.headers} {r.query}" for r in server.requests)
    # ... and it is nowhere else: output, errors, what the agent sent the model (its shell's
    # printout included), ATIF, journal, the agent's home.
    for planted in PLANTED.values():
        assert planted not in out and planted not in err
        assert all(planted.encode() not in r.body for r in server.model_requests)
        for root in (tmp_path / "homes", tmp_path / "sessions", atif):
            assert _files_holding(root.parent if root.is_file() else root, planted.encode()) == []
    assert atif.exists() and any((tmp_path / "sessions").rglob("*"))
    # Usage: the summary's is the proxy's ledger, and that is what the upstream served.
    (metered,) = [line for line in lines if line["type"] == "metered"]
    result = next(line for line in lines if line["type"] == "result")
    served = server.ledger.since(0).main.usage.model_dump(exclude_none=True)
    assert metered["proxy"]["usage"] == served
    assert metered["proxy"]["calls"] == len(server.ledger.since(0).main) == 2
    assert metered["agrees"] is True and metered["disagreement"] is None
    assert metered["proxy"]["unauthorized"] == 0  # every request the agent made had its key
    last_call = (result.get("data") or {}).get("last_call_usage")
    if last_call is not None:
        # The agent reports the tokens of its last model call only (OpenCode over ACP): apart
        # from the turn's usage, which holds the turn's cost alone.
        assert "input_tokens" not in result["usage"], result["usage"]
        last = server.ledger.since(0).main.entries[-1].usage
        served = last.model_dump(exclude_none=True)
        result = {**result, "usage": last_call}
    if engine in UNSPLIT_USAGE:
        # The whole prompt and the answer less thinking, without the split (Gemini CLI).
        assert result["usage"]["whole_prompt_tokens"] == sum(
            served[name] for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
        )
        answer = served["output_tokens"] - served.get("thinking_tokens", 0)
        assert result["usage"]["answer_tokens"] == answer
        assert "input_tokens" not in result["usage"]
        return
    for name in ("input_tokens", "output_tokens", "cache_read_tokens"):
        assert result["usage"][name] == served[name], name


@pytest.mark.parametrize("sandboxed", [False, True], ids=["host", "sandbox"])
@pytest.mark.parametrize("engine", ["claude", "gemini"])
async def test_a_budget_spent_at_the_proxy_ends_the_turn(
    engine: str, sandboxed: bool, tmp_path: Path
) -> None:
    """The agent is never cancelled: it keeps calling the model (tool call after tool call)
    until the proxy refuses, and the turn ends there; sandboxed too (the proxy on its socket)."""
    require_engine(engine)
    if sandboxed and (why := sandbox_unavailable()) is not None:
        pytest.skip(why)
    sandbox = ("--sandbox", "--approve-all") if sandboxed else NO_ASKING.get(engine, ())
    loop = ModelTurn(
        blocks=[ToolCallBlock(arguments={"command": "echo again"})],
        usage=_usage(400, 0, 0, 100),
        repeat=20,
    )
    async with ModelServer(Script(turns=[loop])) as server:
        status, out, err = await _agentrun(
            "run", "--live", "--upstream", server.url, "--engine", engine, "--json",
            "--proxy-max-tokens", "1000", *sandbox, "keep going",
            env=_environment(tmp_path),
        )  # fmt: skip
    assert status != 0
    lines = [json.loads(line) for line in out.splitlines()]
    (metered,) = [line for line in lines if line["type"] == "metered"]
    # Two calls of 500 tokens spent the budget; the third was refused and never went upstream.
    assert len(server.model_requests) == 2
    assert metered["proxy"]["refused"] >= 1 and metered["budget_spent"] == "1000 tokens of 1000"
    assert "budget is spent" in out + err


async def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_upstream_down_fails_before_the_agent_starts(tmp_path: Path) -> None:
    port = await _free_port()
    with anyio.fail_after(60):
        status, _, err = await _agentrun(
            "run", "--live", "--upstream", f"http://127.0.0.1:{port}", "--engine", "claude",
            "hi", env=_environment(tmp_path),
        )  # fmt: skip
    assert status == 2
    assert f"cannot connect to http://127.0.0.1:{port}: Connection refused" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--upstream", "http://127.0.0.1:9"), "for --live runs"),
        (("--live", "--proxy-max-tokens", "5"), "need --upstream URL or --proxy"),
        (("--live", "--upstream", "ftp://x"), "not an http"),
    ],
)
async def test_proxy_options_are_checked_before_anything_starts(
    args: tuple[str, ...], words: str, tmp_path: Path
) -> None:
    status, _, err = await _agentrun("run", *args, "hi", env=_environment(tmp_path))
    assert status == 2 and words in err


async def test_no_key_in_the_environment_is_a_configuration_error(tmp_path: Path) -> None:
    env: dict[str, Any] = {
        k: v for k, v in _environment(tmp_path).items() if k != "ANTHROPIC_API_KEY"
    }
    async with ModelServer() as server:
        status, _, err = await _agentrun("run", "--live", "--upstream", server.url, "hi", env=env)
    assert status == 2 and "set ANTHROPIC_API_KEY" in err
    assert server.requests == []
