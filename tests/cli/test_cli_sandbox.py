"""``agentrun run --sandbox --approve-all`` with every engine's real agent, the command lines it
refuses, and what ``agentrun engines`` says about sandboxing here."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentrun._wire.sandbox import sandbox_unavailable
from agentrun.offline import EMBEDDED_ENGINES, ModelTurn, Script
from tests.agents_support import require_engine

pytestmark = pytest.mark.agent


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrun.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )


@pytest.mark.parametrize("engine", list(EMBEDDED_ENGINES))
def test_run_sandbox_approve_all_runs_the_tool_inside(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    why = sandbox_unavailable()
    if why is not None:
        pytest.skip(why)
    require_engine(engine)
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(tmp_path / "homes"))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    script = tmp_path / "script.json"
    turns = [ModelTurn.shell("hostname > edited.txt"), ModelTurn.text("done")]
    script.write_text(Script(turns=turns).model_dump_json())
    args = ("run", "--sandbox", "--approve-all", "--engine", engine, "--json")
    done = _cli(*args, "--cwd", str(workspace), "--script", str(script), "go")
    assert done.returncode == 0, done.stderr
    # The tool ran, approved, inside the sandbox (its host name), and its edit is on the host.
    assert (workspace / "edited.txt").read_text() == "agentrun-sandbox\n"


def test_run_sandbox_allow_host_reaches_that_host_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--allow-host localhost``: the agent's ``curl`` reaches a listener on the host's loopback
    through the sandbox's CONNECT proxy by that name; by a name not listed (``127.0.0.1``) the
    proxy refuses it."""
    why = sandbox_unavailable()
    if why is not None:
        pytest.skip(why)
    require_engine("claude")
    monkeypatch.setenv("AGENTRUN_OFFLINE_HOMES", str(tmp_path / "homes"))
    body = b"served-on-the-host"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def answer() -> None:
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = server.accept()
                    with conn:
                        conn.recv(65536)
                        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + body)

        threading.Thread(target=answer, daemon=True).start()
        curl = "curl -sS --noproxy '' -x \"$HTTPS_PROXY\" -p --max-time 20"
        command = f"{curl} http://localhost:{port}/; echo; {curl} http://127.0.0.1:{port}/ 2>&1"
        script = tmp_path / "script.json"
        turns = [ModelTurn.shell(command), ModelTurn.text("done")]
        script.write_text(Script(turns=turns).model_dump_json())
        done = _cli(
            "run", "--sandbox", "--approve-all", "--allow-host", "localhost", "--engine",
            "claude", "--json", "--script", str(script), "fetch",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (result,) = [json.loads(line) for line in done.stdout.splitlines() if '"tool_result"' in line]
    shown = json.dumps(result)
    assert body.decode() in shown
    assert "403" in shown


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--allow-host", "example.com"), "--allow-host needs --sandbox"),
        (("--sandbox", "--live"), "set ANTHROPIC_API_KEY"),
        (("--sandbox", "--allow-host", "pypi.org:443"), "'pypi.org:443' is not a host name"),
        (("--sandbox", "--allow-host", "bad host"), "not a host name"),
    ],
)
def test_sandbox_command_lines_that_cannot_run(args: tuple[str, ...], words: str) -> None:
    """``--sandbox --live`` goes through the metering proxy, which needs the caller's key."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = _cli("run", *args, "hello", env=env)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert done.stdout == ""


def test_engines_says_whether_a_sandbox_can_be_had(tmp_path: Path) -> None:
    done = _cli("engines", "--engine", "claude")
    last = done.stdout.splitlines()[-1]
    why = sandbox_unavailable()
    assert last.startswith("sandbox: available" if why is None else "sandbox: unavailable")
    # Without bwrap on PATH, it says so and why.
    env = {**os.environ, "PATH": str(tmp_path)}
    done = _cli("engines", "--engine", "claude", "--json", env=env)
    report = json.loads(done.stdout)
    assert report["sandbox"] is False
    assert "bwrap" in report["sandbox_problem"]
