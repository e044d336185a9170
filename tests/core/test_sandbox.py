"""The sandbox value, its bubblewrap command line, and real sandboxed programs (no agent)."""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import anyio
import anyio.abc
import pytest

import agentrun._wire.sandbox as sandbox_module
from agentrun import (
    ConfigurationError,
    EngineUnavailableError,
    Sandbox,
    SandboxBackend,
    SessionOptions,
)
from agentrun._wire.process import ProcessSpec, open_process
from agentrun._wire.sandbox import (
    INSIDE_DIR,
    SandboxLayout,
    bwrap_argv,
    podman_unavailable,
    sandbox_unavailable,
)

pytestmark = pytest.mark.anyio

needs_bwrap = pytest.mark.skipif(
    sandbox_unavailable() is not None, reason=f"no sandbox here: {sandbox_unavailable()}"
)
needs_podman = pytest.mark.skipif(
    podman_unavailable() is not None, reason=f"no podman here: {podman_unavailable()}"
)
#: Each backend, skipped (with the probe's reason) where it cannot run.
BACKENDS = [
    pytest.param("bubblewrap", marks=needs_bwrap),
    pytest.param("podman", marks=needs_podman),
]


# -- the value -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"read_write": ("relative/dir",)}, "not an absolute path"),
        ({"read_only": ("/x\0y",)}, "NUL"),
        ({"home": "home"}, "not an absolute path"),
        ({"ports": (0,)}, "not a TCP port"),
        ({"ports": (70000,)}, "not a TCP port"),
        ({"socket_ports": {8080: "sock"}}, "not an absolute path"),
        ({"allow_hosts": ("evil host",)}, "not a host name"),
        ({"allow_hosts": ("https://pypi.org",)}, "'https://pypi.org' is not a host name"),
        ({"allow_hosts": ("pypi.org:443",)}, "'pypi.org:443' is not a host name"),
        ({"allow_hosts": ("*.npmjs.org",)}, "not a host name"),
        ({"allow_hosts": ("-bad.example",)}, "not a host name"),
        ({"allow_hosts": ("300.1.1.1",)}, "not a host name"),
        ({"allow_hosts": ("",)}, "not a host name"),
        ({"backend": "firejail"}, "backend"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_bad_sandbox_values_are_refused(fields: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        Sandbox(**fields)  # pyright: ignore[reportArgumentType]


def test_allowed_hosts_are_names_or_addresses() -> None:
    sandbox = Sandbox(allow_hosts=("PyPI.org.", "localhost", "10.0.0.1", "[::1]", "pypi.org"))
    assert sandbox.allow_hosts == ("pypi.org", "localhost", "10.0.0.1", "::1")


def test_a_sandbox_is_a_session_option() -> None:
    options = SessionOptions(sandbox=Sandbox(ports=(8080, 8080), read_only=("/data/../srv",)))
    assert options.sandbox is not None
    assert options.sandbox.ports == (8080,)
    assert options.sandbox.read_only == ("/srv",)
    assert options.sandbox.with_ports(9090).ports == (8080, 9090)
    with pytest.raises(ConfigurationError, match="sandbox"):
        SessionOptions(sandbox={"ports": (-1,)})


# -- the command line ------------------------------------------------------------------------


def _layout(**changes: object) -> SandboxLayout:
    fields: dict[str, object] = {
        "argv": ("agent", "--flag"),
        "cwd": "/work/project",
        "home": "/state/agent",
        "read_write": ("/data/out",),
        "read_only": ("/opt/agent/node_modules",),
    }
    fields.update(changes)
    return SandboxLayout(**fields)  # pyright: ignore[reportArgumentType]


def _pairs(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == option]


def test_the_command_line_isolates_everything() -> None:
    argv = bwrap_argv(_layout(), "/usr/bin/bwrap")
    assert argv[0] == "/usr/bin/bwrap"
    assert "--unshare-all" in argv
    assert _pairs(argv, "--cap-drop") == ["ALL"]
    # No --share-net; no --new-session (signals to the session's group must reach the agent);
    # no --die-with-parent (trio starts processes from worker threads that end when idle).
    for option in ("--share-net", "--new-session", "--die-with-parent"):
        assert option not in argv
    assert argv[argv.index("--") + 1 :] == ["agent", "--flag"]
    assert _pairs(argv, "--bind") == ["/state/agent", "/work/project", "/data/out"]
    assert "/opt/agent/node_modules" in _pairs(argv, "--ro-bind")
    assert _pairs(argv, "--chdir") == ["/work/project"]
    # /tmp is private, and made before the binds that may lie below it.
    assert argv.index("/tmp") < argv.index("/work/project")
    # The root is made read-only after every mount point was made.
    remount = argv.index("--remount-ro")
    assert argv[remount + 1] == "/" and remount > max(
        i for i, a in enumerate(argv) if a == "--bind"
    )
    # Nobody's home is bound as such.
    assert os.path.expanduser("~") not in argv


def test_a_port_runs_the_relay_before_the_agent() -> None:
    layout = _layout(
        routes={4000: f"{INSIDE_DIR}/port-4000.sock", 5000: "/run/proxy.sock"},
        run_dir="/tmp/agentrun-sandbox-x",
        python="/opt/python/bin/python3",
        python_roots=("/opt/python",),
    )
    argv = bwrap_argv(layout)
    tail = argv[argv.index("--") + 1 :]
    assert tail == [
        "/opt/python/bin/python3",
        "-I",
        "-S",
        f"{INSIDE_DIR}/relay.py",
        f"4000={INSIDE_DIR}/port-4000.sock",
        "5000=/run/proxy.sock",
        "--",
        "agent",
        "--flag",
    ]
    binds = _pairs(argv, "--ro-bind")
    assert "/opt/python" in binds and "/tmp/agentrun-sandbox-x" in binds


def test_without_ports_there_is_no_relay() -> None:
    argv = bwrap_argv(_layout())
    assert argv[argv.index("--") + 1 :] == ["agent", "--flag"]


# -- availability ----------------------------------------------------------------------------


def test_unavailable_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox_unavailable.cache_clear()
    try:
        monkeypatch.setattr(sys, "platform", "darwin")
        assert "Linux" in (sandbox_unavailable() or "")
        sandbox_unavailable.cache_clear()
        monkeypatch.setattr(sys, "platform", "linux")
        monkeypatch.setenv("PATH", "/nonexistent")
        assert "bwrap" in (sandbox_unavailable() or "")
    finally:
        monkeypatch.undo()
        sandbox_unavailable.cache_clear()


async def test_no_sandbox_means_no_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where no sandbox can be had, asking for one raises at start and runs nothing."""
    monkeypatch.setattr(sandbox_module, "sandbox_unavailable", lambda: "user namespaces are off")
    marker = tmp_path / "ran"
    spec = ProcessSpec(
        argv=("sh", "-c", f"touch {marker}"),
        cwd=str(tmp_path),
        env={"HOME": str(tmp_path)},
        sandbox=Sandbox(),
    )
    with pytest.raises(EngineUnavailableError, match="user namespaces are off"):
        async with open_process(spec):
            pass
    assert not marker.exists()


@pytest.mark.parametrize(
    ("sandbox", "error", "words"),
    [
        (Sandbox(backend="docker"), EngineUnavailableError, "docker backend"),
        (Sandbox(read_write=("/nonexistent/agentrun",)), ConfigurationError, "does not exist"),
        (Sandbox(read_only=("/nonexistent/agentrun",)), ConfigurationError, "does not exist"),
        (Sandbox(home="/nonexistent/agentrun"), ConfigurationError, "does not exist"),
        (Sandbox(home="/"), ConfigurationError, "caller's own home"),
    ],
)
async def test_bad_sandboxes_fail_at_start(
    sandbox: Sandbox, error: type[Exception], words: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    spec = ProcessSpec(
        argv=("sh", "-c", f"touch {marker}"),
        cwd=str(tmp_path),
        env={"HOME": str(tmp_path)},
        sandbox=sandbox,
    )
    with pytest.raises(error, match=words):
        async with open_process(spec):
            pass
    assert not marker.exists()


# -- real sandboxes --------------------------------------------------------------------------


async def _run(spec: ProcessSpec) -> tuple[int, str]:
    async with open_process(spec) as proc:
        lines = [line for line in [item async for item in proc.lines()] if isinstance(line, bytes)]
        code = await proc.wait()
    return code, b"\n".join(lines).decode()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_environment_is_the_agents_only(
    backend: SandboxBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the caller's — neither the program's nor bubblewrap's own PID 1's."""
    secret = f"caller-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTRUN_TEST_SECRET", secret)
    home = tmp_path / "home"
    home.mkdir()
    spec = ProcessSpec(
        argv=(
            "sh",
            "-c",
            "env; tr '\\0' '\\n' < /proc/1/environ; echo pid=$$; grep CapEff /proc/$$/status",
        ),
        cwd=str(tmp_path),
        env={"HOME": str(home), "AGENT_SETTING": "on"},
        sandbox=Sandbox(backend=backend),
    )
    code, out = await _run(spec)
    assert code == 0, out
    assert "AGENT_SETTING=on" in out
    assert secret not in out
    # A PID namespace of its own: the program is not the host's pid.
    # (bwrap's PID 1 and the program; podman's init, its runtime's helpers, the program.)
    pid = re.search(r"^pid=(\d+)$", out, re.MULTILINE)
    assert pid is not None and int(pid.group(1)) <= 10, out
    # No capability, even when the caller is root (bwrap then makes no user namespace).
    assert "CapEff:\t0000000000000000" in out, out


@needs_bwrap
async def test_files_network_and_processes_stay_inside(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    secret = tmp_path / "other" / "secret"
    secret.parent.mkdir()
    secret.write_text("s3cret")
    linger = f"3000.{uuid.uuid4().int % 10**9:09d}"
    leaked_tmp = Path("/tmp") / f"agentrun-core-{uuid.uuid4().hex}"
    served: list[bytes] = []

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            served.append(await stream.receive())
            await stream.send(b"pong\n")

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as allowed:
        denied = await anyio.create_tcp_listener(local_host="127.0.0.1")
        ok_port = allowed.extra(anyio.abc.SocketAttribute.local_port)
        no_port = denied.extra(anyio.abc.SocketAttribute.local_port)
        script = f"""
cat {secret} 2>/dev/null && echo READ-ESCAPED || echo READ-BLOCKED
echo x > {leaked_tmp} && echo TMP-PRIVATE
echo x > {home}/state && echo HOME-WRITTEN
echo x > workspace-file && echo CWD-WRITTEN
(echo x > /etc/agentrun-x) 2>/dev/null && echo ETC-ESCAPED || echo ETC-BLOCKED
(exec 3<>/dev/tcp/127.0.0.1/{no_port}) 2>/dev/null && echo NET-ESCAPED || echo NET-BLOCKED
exec 3<>/dev/tcp/127.0.0.1/{ok_port}; echo ping >&3; head -n1 <&3
setsid sleep {linger} >/dev/null 2>&1 </dev/null &
"""
        spec = ProcessSpec(
            argv=("bash", "-c", script),
            cwd=str(workspace),
            env={"HOME": str(home)},
            sandbox=Sandbox(ports=(ok_port,)),
        )
        code, out = -1, ""
        async with anyio.create_task_group() as tg:
            tg.start_soon(allowed.serve, answer)
            code, out = await _run(spec)
            tg.cancel_scope.cancel()
        await denied.aclose()
    assert code == 0, out
    for marker in ("READ-BLOCKED", "TMP-PRIVATE", "HOME-WRITTEN", "CWD-WRITTEN"):
        assert marker in out
    for marker in ("ETC-BLOCKED", "NET-BLOCKED", "pong"):
        assert marker in out
    assert served == [b"ping\n"]
    assert not leaked_tmp.exists()
    assert (home / "state").exists() and (workspace / "workspace-file").exists()
    wanted = f"sleep\0{linger}\0".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                assert not (entry / "cmdline").read_bytes().endswith(wanted)
            except OSError:
                continue


@needs_bwrap
async def test_a_socket_port_leads_to_a_host_unix_socket(tmp_path: Path) -> None:
    """How the metering proxy will be reached: 127.0.0.1:<port> inside, a Unix socket outside."""
    home = tmp_path / "home"
    home.mkdir()
    socket_path = tmp_path / "proxy.sock"
    served: list[bytes] = []

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            served.append(await stream.receive())
            await stream.send(b"from the proxy\n")

    async with await anyio.create_unix_listener(socket_path) as proxy:
        script = "exec 3<>/dev/tcp/127.0.0.1/4711; echo hello >&3; head -n1 <&3"
        spec = ProcessSpec(
            argv=("bash", "-c", script),
            cwd=str(tmp_path),
            env={"HOME": str(home)},
            sandbox=Sandbox(socket_ports={4711: str(socket_path)}),
        )
        code, out = -1, ""
        async with anyio.create_task_group() as tg:
            tg.start_soon(proxy.serve, answer)
            code, out = await _run(spec)
            tg.cancel_scope.cancel()
    assert code == 0, out
    assert out.strip() == "from the proxy"
    assert served == [b"hello\n"]


@needs_bwrap
async def test_allowed_hosts_are_reached_through_the_gate_only(tmp_path: Path) -> None:
    """``allow_hosts``: a ``CONNECT`` through the proxy named by ``HTTPS_PROXY`` inside reaches a
    listed host (``localhost``, the host's loopback); the same listener by a name not listed
    is refused (403), a request that is no ``CONNECT`` too (405), and a direct connection finds
    no network at all."""
    home = tmp_path / "home"
    home.mkdir()
    served: list[bytes] = []

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            served.append(await stream.receive())
            await stream.send(b"pong\n")

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        script = f"""
gate=${{HTTPS_PROXY#http://127.0.0.1:}}
echo "proxy=$HTTPS_PROXY no_proxy=$NO_PROXY"
ask() {{
  exec 3<>/dev/tcp/127.0.0.1/$gate
  printf "$1 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n" >&3
  head -n1 <&3
}}
ask "CONNECT 127.0.0.1:{port}"
ask "GET http://localhost:{port}/"
exec 3<>/dev/tcp/127.0.0.1/$gate
printf "CONNECT localhost:{port} HTTP/1.1\\r\\n\\r\\n" >&3
head -n2 <&3
echo ping >&3
head -n1 <&3
(exec 4<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo DIRECT-ESCAPED || echo DIRECT-BLOCKED
"""
        spec = ProcessSpec(
            argv=("bash", "-c", script),
            cwd=str(tmp_path),
            env={"HOME": str(home)},
            sandbox=Sandbox(allow_hosts=("localhost",)),
        )
        code, out = -1, ""
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, answer)
            code, out = await _run(spec)
            tg.cancel_scope.cancel()
    assert code == 0, out
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    assert lines[0] == "proxy=http://127.0.0.1:3128 no_proxy=127.0.0.1,localhost,::1"
    assert lines[1] == "HTTP/1.1 403 Forbidden"
    assert lines[2] == "HTTP/1.1 405 Method Not Allowed"
    assert lines[3] == "HTTP/1.1 200 Connection established"
    assert lines[4:] == ["pong", "DIRECT-BLOCKED"]
    assert served == [b"ping\n"]


# -- the podman backend ----------------------------------------------------------------------


def test_without_podman_the_probe_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = sandbox_module.shutil.which
    monkeypatch.setattr(
        sandbox_module.shutil,
        "which",
        lambda name, *a, **k: None if name == "podman" else real_which(name, *a, **k),  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType]
    )
    sandbox_module._podman_setup.cache_clear()  # pyright: ignore[reportPrivateUsage]
    try:
        assert podman_unavailable() == "podman is not installed (apt install podman)"
    finally:
        sandbox_module._podman_setup.cache_clear()  # pyright: ignore[reportPrivateUsage]


async def test_a_podman_sandbox_that_cannot_be_had_fails_with_the_probes_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_module, "podman_unavailable", lambda: "storage fails here")
    marker = tmp_path / "ran"
    spec = ProcessSpec(
        argv=("sh", "-c", f"touch {marker}"),
        cwd=str(tmp_path),
        env={"HOME": str(tmp_path)},
        sandbox=Sandbox(backend="podman"),
    )
    with pytest.raises(EngineUnavailableError, match="storage fails here"):
        async with open_process(spec):
            pass
    assert not marker.exists()


@needs_podman
async def test_a_value_podman_cannot_carry_fails_the_start(tmp_path: Path) -> None:
    """An env file has one variable a line: a line break in a value is refused, not split."""
    marker = tmp_path / "ran"
    spec = ProcessSpec(
        argv=("sh", "-c", f"touch {marker}"),
        cwd=str(tmp_path),
        env={"HOME": str(tmp_path), "TWO_LINES": "a\nINJECTED=1"},
        sandbox=Sandbox(backend="podman"),
    )
    with pytest.raises(ConfigurationError, match="TWO_LINES"):
        async with open_process(spec):
            pass
    assert not marker.exists()


def _running(command_end: bytes) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().endswith(command_end):
                return True
        except OSError:
            continue
    return False


@needs_podman
async def test_closing_removes_a_container_whose_program_ignores_signals(tmp_path: Path) -> None:
    """Killing podman's client leaves its container running: closing removes it by name."""
    home = tmp_path / "home"
    home.mkdir()
    linger = f"3000.{uuid.uuid4().int % 10**9:09d}"
    spec = ProcessSpec(
        argv=("sh", "-c", f"trap '' TERM INT HUP; echo started; exec sleep {linger}"),
        cwd=str(tmp_path),
        env={"HOME": str(home)},
        sandbox=Sandbox(backend="podman"),
        close_stdin_timeout=0.2,
        terminate_timeout=0.2,
    )
    async with open_process(spec) as proc:
        async for line in proc.lines():
            if line == b"started":
                break
        assert _running(f"sleep\0{linger}\0".encode())
    assert not _running(f"sleep\0{linger}\0".encode()), "the container outlived the session"
