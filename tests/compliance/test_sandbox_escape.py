"""Every engine's real agent in a sandbox (``SessionOptions(sandbox=...)``), trying to get out.

A scripted model makes the agent run, by a tool call, a script in its workspace that tries to read
a planted file beside the workspace, write to the caller's home and to the host's ``/tmp``, reach
a listener this test runs on the host's loopback, print its environment (and that of the
sandbox's PID 1), signal a process of the host, and leave a background process. Each attempt
fails inside, or stays inside; the workspace edit and the model calls work; and the host shows
no trace. The engines are those of ``AGENTRUN_COMPLIANCE_ENGINES`` (default: all ten); each
runs under bubblewrap and, where podman runs here, in a podman container.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from agentrun import SandboxBackend, TurnSummary
from agentrun._wire.sandbox import podman_unavailable, sandbox_unavailable

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

#: The generic ``acp`` engine runs the agent of this preset, given as a plain command.
GENERIC_ACP_AGENT = "claude-acp"
DONE = "sandboxed work done"


def _engines() -> list[str]:
    from agentrun.offline import EMBEDDED_ENGINES

    chosen = os.environ.get("AGENTRUN_COMPLIANCE_ENGINES")
    every = [*EMBEDDED_ENGINES, "acp"]
    names = [n.strip() for n in chosen.split(",")] if chosen else every
    return [n for n in names if n in every]


def _attempts(
    secret_file: Path, home_file: Path, tmp_file: Path, port: int, victim: int, linger: str
) -> str:
    # Everything is printed into attempts.out inside the sandbox, then shown in one piece: what
    # the test checks is the file, and the model is shown it (Gemini CLI's terminal once handed
    # the model a shell's printout without its last lines, under load).
    return f"""\
exec 3>&1 >attempts.out 2>&1
cat '{secret_file}' >/dev/null 2>&1 && echo READ-ESCAPED || echo READ-BLOCKED
(echo x > '{home_file}') 2>/dev/null && echo HOME-ESCAPED || echo HOME-BLOCKED
(echo x > '{tmp_file}') 2>/dev/null && echo TMP-WRITTEN || echo TMP-BLOCKED
(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo NET-ESCAPED || echo NET-BLOCKED
kill -9 {victim} 2>/dev/null && echo KILL-ESCAPED || echo KILL-BLOCKED
echo "PID1=$(tr '\\0' ' ' < /proc/1/cmdline)"
echo ENV-BEGIN; env; tr '\\0' '\\n' < /proc/1/environ; echo ENV-END
setsid sleep {linger} >/dev/null 2>&1 </dev/null 3>&- &
echo edited > edited.txt && echo EDIT-DONE
cat attempts.out >&3
"""


def _lingering(linger: str) -> bool:
    wanted = f"sleep\0{linger}\0".encode()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().endswith(wanted):
                return True
        except OSError:
            continue
    return False


def _around(seen: str) -> list[str]:
    """Where the agent sent back the tool's output (for a failure's message)."""
    return [seen[max(0, m.start() - 200) : m.start() + 800] for m in re.finditer("attempts", seen)][
        -3:
    ]


def _sent_to_model(server: Any) -> str:
    return "\n".join(r.body.decode("utf-8", "replace") for r in server.requests)


async def _run_sandboxed(
    name: str,
    script: Any,
    workspace: Path,
    tmp_path: Path,
    listener: anyio.abc.Listener[anyio.abc.SocketStream],
    record: Any,
    backend: SandboxBackend = "bubblewrap",
) -> tuple[TurnSummary, str]:
    """One turn of ``name``'s agent, sandboxed, against ``script``; the turn and every request
    body the model server received."""
    from agentrun import EngineUnavailableError, Sandbox, run_turn
    from agentrun.engines.acp import AcpEngine
    from agentrun.offline import ModelServer, embedded_engine

    turn: TurnSummary | None = None
    async with ModelServer(script) as server, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, record)
        try:
            engine, options = embedded_engine(
                GENERIC_ACP_AGENT if name == "acp" else name,
                server.url,
                tmp_path / "agent",
                cwd=str(workspace),
                hitl=False,
                sandbox=Sandbox(backend=backend),
            )
        except EngineUnavailableError as exc:
            pytest.skip(str(exc))
        # The caller's environment is offered: the sandbox must not pass it on.
        options = options.model_copy(update={"inherit_env": True})
        if name == "acp":
            assert isinstance(engine, AcpEngine)
            engine = AcpEngine(engine.command_for(options))
            # As its preset does: the mode that asks (and hitl=False approves), not Claude's
            # auto mode, whose classifier would take the scripted model turns.
            options = options.model_copy(update={"options": {"acp.mode": "default"}})
        async with engine.start(options) as session:
            turn = await run_turn(session, "run attempts.sh", timeout=180)
        tg.cancel_scope.cancel()
    assert turn is not None
    return turn, _sent_to_model(server)


@pytest.mark.parametrize("backend", ["bubblewrap", "podman"])
@pytest.mark.parametrize("name", _engines())
async def test_a_sandboxed_agent_cannot_get_out(
    name: str, backend: SandboxBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrun.offline import ModelTurn, Script, TextBlock, ToolCallBlock

    why = sandbox_unavailable() if backend == "bubblewrap" else podman_unavailable()
    if why is not None:
        pytest.skip(why)
    token = uuid.uuid4().hex[:12]
    secret_value = f"caller-secret-{token}"
    monkeypatch.setenv("AGENTRUN_TEST_CALLER_SECRET", secret_value)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    other_project = tmp_path / "other-project"
    other_project.mkdir()
    secret_file = other_project / "id_rsa"
    secret_file.write_text(secret_value)
    home_file = Path(os.path.expanduser("~")) / f"agentrun-escape-{token}"
    tmp_file = Path("/tmp") / f"agentrun-escape-{token}"
    linger = f"3000.{uuid.uuid4().int % 10**9:09d}"
    connections: list[str] = []

    async def record(stream: anyio.abc.SocketStream) -> None:
        connections.append("connected")
        await stream.aclose()

    victim = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
    try:
        (workspace / "attempts.sh").write_text(
            _attempts(secret_file, home_file, tmp_file, port, victim.pid, linger)
        )
        script = Script(
            turns=[
                ModelTurn(
                    blocks=[ToolCallBlock(tool="shell", arguments={"command": "bash attempts.sh"})]
                ),
                ModelTurn(blocks=[TextBlock(text=DONE)]),
            ],
            exhausted_text=DONE,
        )
        turn, seen = await _run_sandboxed(
            name, script, workspace, tmp_path, listener, record, backend
        )
        assert turn.ok, turn.errors
        assert DONE in turn.text
        # What the tool printed went back to the model: every attempt was tried and failed.
        printed = (workspace / "attempts.out").read_text()
        for marker in ("READ-BLOCKED", "HOME-BLOCKED", "NET-BLOCKED", "KILL-BLOCKED", "EDIT-DONE"):
            assert marker in printed, f"{marker} missing from the printout: {printed[:2000]}"
        assert "ENV-BEGIN" in printed and "ENV-END" in printed
        if backend == "podman":  # the container's init (--init) is the agent's PID 1
            assert "PID1=/run/podman-init" in printed, printed[:2000]
        assert "-ESCAPED" not in printed and "-ESCAPED" not in seen
        # The printout went back to the model.
        assert "READ-BLOCKED" in seen, _around(seen)
        for shown in (printed, seen):
            assert secret_value not in shown, "the caller's environment or a planted file leaked"
        # The host: the workspace edit is there, nothing else is.
        assert (workspace / "edited.txt").read_text() == "edited\n"
        assert not home_file.exists()
        assert not tmp_file.exists()
        assert connections == []
        assert victim.poll() is None, "a process outside the sandbox was killed"
        assert not _lingering(linger), "a background process outlived the session"
    finally:
        victim.kill()
        victim.wait()
        await listener.aclose()
        home_file.unlink(missing_ok=True)
        tmp_file.unlink(missing_ok=True)


@pytest.mark.parametrize("unavailable", [False, True], ids=["unknown_path", "no_sandbox"])
@pytest.mark.parametrize("name", _engines())
async def test_a_sandbox_that_cannot_be_had_fails_the_start_with_one_typed_error(
    name: str, unavailable: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentrun._wire.sandbox as sandbox_module
    from agentrun import ConfigurationError, EngineUnavailableError, Sandbox
    from agentrun.engines.acp import AcpEngine
    from agentrun.offline import embedded_engine

    try:
        engine, options = embedded_engine(
            GENERIC_ACP_AGENT if name == "acp" else name,
            "http://127.0.0.1:9",
            tmp_path / "agent",
            cwd=str(tmp_path),
            hitl=False,
            sandbox=Sandbox(read_write=() if unavailable else (str(tmp_path / "nowhere"),)),
        )
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    if name == "acp":
        assert isinstance(engine, AcpEngine)
        engine = AcpEngine(engine.command_for(options))
    expected: type[Exception] = ConfigurationError
    if unavailable:
        monkeypatch.setattr(sandbox_module, "sandbox_unavailable", lambda: "user namespaces off")
        expected = EngineUnavailableError
    with pytest.raises(expected) as caught:
        async with engine.start(options):
            pytest.fail("the session started")
    assert ("user namespaces off" if unavailable else "nowhere") in str(caught.value)
