"""Running an agent program in a bubblewrap sandbox (``SessionOptions.sandbox``).

:func:`sandbox_unavailable` says why no sandbox can be had here (not Linux, no ``bwrap``, user
namespaces refused); :func:`bwrap_argv` builds the command line that runs a program in one;
:class:`SandboxRun` prepares a start (checks, a private directory of Unix sockets) and serves the
host side of its network while the program runs.

The network: the sandbox has a network namespace of its own (only ``lo``). Each allowed port is a
Unix socket in the run's private directory, bound read-only into the sandbox; a relay inside
(:mod:`agentrun._wire._sandbox_relay`, run by this interpreter) listens on ``127.0.0.1:<port>``
there and forwards each connection to the socket. For a host loopback port (``Sandbox.ports``)
the host side of the socket is served here and connects to ``127.0.0.1:<port>``; a
``Sandbox.socket_ports`` entry binds someone else's socket (a proxy's) instead. With
``Sandbox.allow_hosts`` one more socket is served here by :class:`HostGate`, an HTTP ``CONNECT``
proxy to the listed hosts only, and ``HTTPS_PROXY`` / ``HTTP_PROXY`` inside point at its port.

The environment: bubblewrap's own PID 1 inside the sandbox keeps the environment bwrap was
started with, readable in ``/proc/1/environ``; so bwrap is started with exactly the agent's
environment and no argument carries a value of it.

``Sandbox(backend="podman")`` runs the same layout in a podman container (:func:`podman_argv`):
the host's system directories as read-only volumes on an empty root of the run's own (no
image), the same paths inside, ``--network none`` and the same relay. Podman keeps its state
(``--root``, ``--runroot``, ``--tmpdir``, a ``containers.conf``) in a private directory of this
process, never in the system's storage. The agent's environment reaches the container through
a private ``--env-file``; the container is removed by name when the session closes
(:meth:`SandboxRun.stop`), since signals to the local process group reach only podman's client.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from .._vocabulary.errors import ConfigurationError, EngineUnavailableError
from .._vocabulary.sandbox import Sandbox

__all__ = [
    "GATE_PORT_INSIDE",
    "INSIDE_DIR",
    "SYSTEM_PATHS",
    "HostGate",
    "SandboxLayout",
    "SandboxRun",
    "bwrap_argv",
    "check_sandbox",
    "podman_argv",
    "podman_unavailable",
    "sandbox_unavailable",
]

#: Read-only inside when they exist on the host: the system.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Where the run's own files (relay, sockets) appear inside the sandbox.
INSIDE_DIR = "/run/agentrun"
_RELAY = Path(__file__).with_name("_sandbox_relay.py")
_PROBE_TIMEOUT = 10.0
_PODMAN_PROBE_TIMEOUT = 60.0
_PODMAN_PROBE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def sandbox_unavailable() -> str | None:
    """Why a bubblewrap sandbox cannot be had here (``None``: it can). Probed once: a real
    ``bwrap`` starting ``true`` in the namespaces a session uses."""
    if not sys.platform.startswith("linux"):
        return f"sandboxing needs Linux (this is {sys.platform})"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap ('bwrap') is not installed (apt install bubblewrap)"
    true = shutil.which("true") or "/bin/true"
    try:
        done = subprocess.run(
            [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--", true],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={},
            timeout=_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not be run ({exc})"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-300:]
        return (
            f"bwrap cannot create namespaces here ({said or f'exit {done.returncode}'}); "
            "unprivileged user namespaces may be disabled "
            "(sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces)"
        )
    return None


@dataclass(frozen=True)
class PodmanSetup:
    """How podman is run here: the program, its global options (private state, the runtime
    that works on this machine) and the environment of its client."""

    podman: str
    options: tuple[str, ...]
    env: Mapping[str, str]


def _empty_root(directory: str) -> str:
    """An empty container root with the host's top-level symlinks (``/bin -> usr/bin``...)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for system in SYSTEM_PATHS:
        if os.path.islink(system):
            link = os.path.join(directory, system.lstrip("/"))
            if not os.path.lexists(link):
                os.symlink(os.readlink(system), link)
    return directory


def _podman_attempt(setup: PodmanSetup, root: str) -> str | None:
    true = shutil.which("true") or "/bin/true"
    volumes = [f"{p}:{p}:ro" for p in SYSTEM_PATHS if os.path.isdir(p) and not os.path.islink(p)]
    argv = [setup.podman, *setup.options, "run", "--rm", "--network", "none"]
    for volume in volumes:
        argv += ["--volume", volume]
    argv += ["--rootfs", root, true]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=dict(setup.env),
            timeout=_PODMAN_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"podman could not be run ({exc})"
    if done.returncode == 0:
        return None
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return said[-1][-300:] if said else f"exit {done.returncode}"


@functools.lru_cache(maxsize=1)
def _podman_setup() -> tuple[PodmanSetup | None, str | None]:
    if not sys.platform.startswith("linux"):
        return None, f"containers need Linux here (this is {sys.platform})"
    podman = shutil.which("podman")
    if podman is None:
        return None, "podman is not installed (apt install podman)"
    state = tempfile.mkdtemp(prefix="agentrun-podman-")
    atexit.register(shutil.rmtree, state, True)
    conf = os.path.join(state, "containers.conf")
    # No default rlimits: podman's (1048576 open files) need CAP_SYS_RESOURCE to set.
    Path(conf).write_text("[containers]\ndefault_ulimits = []\n")
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "CONTAINERS_CONF": conf}
    for name in ("HOME", "XDG_RUNTIME_DIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    options = [
        *("--root", os.path.join(state, "storage"), "--runroot", os.path.join(state, "run")),
        *("--tmpdir", os.path.join(state, "tmp"), "--storage-driver", "vfs"),
        *("--cgroup-manager", "cgroupfs", "--events-backend", "file"),
    ]
    runtimes: list[tuple[str, ...]] = [()]
    runc = shutil.which("runc")
    if runc is not None:
        # crun refuses hybrid cgroup hierarchies (v1 with controllers on v2); runc does not.
        runtimes.append(("--runtime", runc))
    root = _empty_root(os.path.join(state, "probe-root"))
    failures: list[str] = []
    for runtime in runtimes:
        setup = PodmanSetup(podman=podman, options=(*options, *runtime), env=env)
        failed = _podman_attempt(setup, root)
        if failed is None:
            return setup, None
        failures.append(f"{' '.join(runtime) or 'the default runtime'}: {failed}")
    return None, "podman cannot run a container here (" + "; ".join(failures) + ")"


def podman_unavailable() -> str | None:
    """Why a podman sandbox cannot be had here (``None``: it can). Probed once: a real
    ``podman run`` of ``true`` on an empty root with the host's system mounted, in private
    storage, with the default runtime and then ``runc``."""
    with _PODMAN_PROBE_LOCK:  # two first starts in threads make one probe
        return _podman_setup()[1]


def _install_roots(path: str) -> list[str]:
    """What to bind for a program at ``path``: its ``node_modules`` tree, else its folder; both
    as named and as resolved (a program reached through a symlink is run under either name)."""
    roots: list[str] = []
    for name in (os.path.abspath(path), os.path.realpath(path)):
        parts = Path(name).parts
        if "node_modules" in parts:
            root = str(Path(*parts[: parts.index("node_modules") + 1]))
        else:
            root = os.path.dirname(os.path.realpath(name))
        if root not in roots:
            roots.append(root)
    return roots


def _covered(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


@dataclass(frozen=True)
class SandboxLayout:
    """Everything the command line of one sandboxed start is made of (paths are the host's)."""

    argv: tuple[str, ...]
    cwd: str
    home: str
    read_write: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    #: port -> path of the Unix socket inside the sandbox.
    routes: Mapping[int, str] = field(default_factory=dict[int, str])
    #: Host directory bound at :data:`INSIDE_DIR` (relay and sockets), if any.
    run_dir: str | None = None
    #: The interpreter that runs the relay, and what of it is bound read-only.
    python: str = sys.executable
    python_roots: tuple[str, ...] = ()


def program_roots(argv: Sequence[str], path: str | None) -> list[str]:
    """What to bind read-only for the program: the install roots of ``argv[0]`` and of the
    scripts among its arguments that live in a ``node_modules`` tree (``node <script>``). No
    other argument is followed: a path given to the program (a workspace, a file of the
    caller's) is bound only when the sandbox lists it."""
    roots: list[str] = []
    program = shutil.which(argv[0], path=path) if os.sep not in argv[0] else argv[0]
    candidates = [_install_roots(program)] if program else []
    for arg in argv[1:]:
        if os.path.isabs(arg) and os.path.isfile(arg):
            found = [r for r in _install_roots(arg) if os.path.basename(r) == "node_modules"]
            if found:
                candidates.append(found)
    for found in candidates:
        for root in found:
            if not _covered(root, [*SYSTEM_PATHS, *roots]):
                roots.append(root)
    return roots


def bwrap_argv(layout: SandboxLayout, bwrap: str = "bwrap") -> list[str]:
    """The bubblewrap command line that runs ``layout.argv`` in the sandbox.

    Not ``--die-with-parent``: its signal follows the *thread* that started bwrap, and trio
    starts processes from worker threads that end when idle. bwrap and the sandbox's PID 1 stay
    in the session's process group (no ``--new-session``), so stopping the group stops them,
    and the end of PID 1 ends every process of the sandbox."""
    args = [
        bwrap,
        "--unshare-all",
        # Run by root, bwrap makes no user namespace and would leave the host's capabilities.
        "--cap-drop",
        "ALL",
        "--hostname",
        "agentrun-sandbox",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/var/tmp",
        "--tmpfs",
        "/run",
    ]
    for system in SYSTEM_PATHS:
        if os.path.islink(system):
            args += ["--symlink", os.readlink(system), system]
        elif os.path.isdir(system):
            args += ["--ro-bind", system, system]
    for path in layout.read_only:
        args += ["--ro-bind", path, path]
    if layout.routes:
        for root in layout.python_roots:
            args += ["--ro-bind", root, root]
    if layout.run_dir is not None:
        args += ["--ro-bind", layout.run_dir, INSIDE_DIR]
    for path in (layout.home, layout.cwd, *layout.read_write):
        args += ["--bind", path, path]
    # The sandbox's own root (where the mount points were made) is read-only: a write outside
    # the paths above fails instead of landing in a place nobody looks.
    args += ["--remount-ro", "/", "--chdir", layout.cwd, "--"]
    if layout.routes:
        args += [layout.python, "-I", "-S", f"{INSIDE_DIR}/relay.py"]
        args += [f"{port}={path}" for port, path in sorted(layout.routes.items())]
        args.append("--")
    args += layout.argv
    return args


def podman_argv(
    layout: SandboxLayout, setup: PodmanSetup, name: str, env_file: str, root: str
) -> list[str]:
    """The podman command line that runs ``layout.argv`` in a container named ``name``, on the
    empty root ``root``, with the environment of ``env_file`` (no value on the command line)."""
    args = [setup.podman, *setup.options, "run", "--rm", "--interactive", "--init"]
    args += ["--name", name, "--hostname", "agentrun-sandbox", "--network", "none"]
    args += ["--detach-keys", "", "--log-driver", "none", "--env-file", env_file]
    args += ["--read-only", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    args += ["--cap-drop", "all", "--security-opt", "no-new-privileges"]
    args += ["--user", f"{os.getuid()}:{os.getgid()}"]
    if os.getuid() != 0:
        args += ["--userns", "keep-id"]
    volumes = [f"{p}:{p}:ro" for p in SYSTEM_PATHS if os.path.isdir(p) and not os.path.islink(p)]
    volumes += [f"{path}:{path}:ro" for path in layout.read_only]
    if layout.routes:
        volumes += [f"{r}:{r}:ro" for r in layout.python_roots]
    if layout.run_dir is not None:
        volumes.append(f"{layout.run_dir}:{INSIDE_DIR}:ro")
    volumes += [f"{p}:{p}:rw" for p in dict.fromkeys((layout.home, layout.cwd, *layout.read_write))]
    for volume in volumes:
        args += ["--volume", volume]
    args += ["--workdir", layout.cwd, "--rootfs", root]
    if layout.routes:
        args += [layout.python, "-I", "-S", f"{INSIDE_DIR}/relay.py"]
        args += [f"{port}={path}" for port, path in sorted(layout.routes.items())]
        args.append("--")
    args += layout.argv
    return args


def _env_file_text(env: Mapping[str, str], engine: str | None) -> str:
    lines: list[str] = []
    for key, value in env.items():
        if not key or "=" in key or any(c in key + value for c in "\n\r\0"):
            raise ConfigurationError(
                f"environment variable {key!r} cannot be passed into a container "
                "(a line break or NUL in its name or value)",
                option="sandbox",
                engine=engine,
            )
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def _existing(what: str, path: str, engine: str | None) -> str:
    if not os.path.exists(path):
        raise ConfigurationError(
            f"sandbox {what} {path!r} does not exist", option="sandbox", engine=engine
        )
    return os.path.realpath(path)


def _caller_home() -> str:
    return os.path.realpath(os.path.expanduser("~"))


class SandboxRun:
    """One sandboxed start: checked, laid out, its host-side sockets served while it runs."""

    def __init__(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        cwd: str | None,
        env: Mapping[str, str],
        engine: str | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.engine = engine
        self._argv = tuple(argv)
        self._cwd = cwd
        self._env = dict(env)
        self._dir: str | None = None
        self._listeners: list[tuple[anyio.abc.SocketListener, int]] = []
        self._gate: anyio.abc.SocketListener | None = None
        #: The container's own directory (its empty root, its env file), podman only.
        self._container_dir: str | None = None
        self._container: str | None = None

    def _unavailable(self, why: str) -> EngineUnavailableError:
        return EngineUnavailableError(f"no sandbox: {why}", engine=self.engine)

    def _layout(self) -> SandboxLayout:
        sandbox = self.sandbox
        if sandbox.backend == "docker":
            raise self._unavailable(
                "the docker backend is designed (docs/sandbox.md) but not built yet"
            )
        why = sandbox_unavailable() if sandbox.backend == "bubblewrap" else podman_unavailable()
        if why is not None:
            raise self._unavailable(why)
        cwd = _existing("workspace", self._cwd or os.getcwd(), self.engine)
        home_path = sandbox.home or self._env.get("HOME")
        if not home_path:
            raise ConfigurationError(
                "a sandbox needs a per-session agent home: set Sandbox(home=...) or HOME in env",
                option="sandbox",
                engine=self.engine,
            )
        home = _existing("home", home_path, self.engine)
        caller = _caller_home()
        if _covered(caller, [home]):
            raise ConfigurationError(
                f"the sandbox home {home!r} would expose the caller's own home {caller!r}: "
                "give the agent a home of its own",
                option="sandbox",
                engine=self.engine,
            )
        read_write = tuple(_existing("read_write path", p, self.engine) for p in sandbox.read_write)
        read_only = [_existing("read_only path", p, self.engine) for p in sandbox.read_only]
        roots = program_roots(self._argv, self._env.get("PATH")) if self._argv else []
        for root in roots:
            if not _covered(root, [*read_only, home, cwd]):
                read_only.append(root)
        for port, path in sandbox.socket_ports.items():
            if port in sandbox.ports:
                raise ConfigurationError(
                    f"sandbox port {port} is both a host port and a socket port",
                    option="sandbox",
                    engine=self.engine,
                )
            _existing("socket", path, self.engine)
        python = os.path.realpath(sys.executable)
        python_roots = tuple(
            dict.fromkeys(
                os.path.realpath(p)
                for p in (os.path.dirname(python), sys.base_prefix)
                if not _covered(os.path.realpath(p), SYSTEM_PATHS)
            )
        )
        return SandboxLayout(
            argv=self._argv,
            cwd=cwd,
            home=home,
            read_write=read_write,
            read_only=tuple(read_only),
            python=python,
            python_roots=python_roots,
        )

    async def prepare(self) -> tuple[list[str], dict[str, str]]:
        """Check and lay out the start; bind the host-side sockets. The command line and the
        environment to start (raises :class:`EngineUnavailableError` when no sandbox can be had,
        :class:`ConfigurationError` for a path that does not exist)."""
        layout = await anyio.to_thread.run_sync(self._layout)
        podman = self.sandbox.backend == "podman"
        bwrap = shutil.which("bwrap")
        if bwrap is None and not podman:  # removed since the probe
            raise self._unavailable("bubblewrap ('bwrap') is not installed")
        if podman:
            for path in (layout.cwd, layout.home, *layout.read_write, *layout.read_only):
                if ":" in path:
                    raise ConfigurationError(
                        f"a path with ':' cannot be a container volume: {path!r}",
                        option="sandbox",
                        engine=self.engine,
                    )
        routes: dict[int, str] = {}
        binds: list[str] = []
        extra_env: dict[str, str] = {}
        if self.sandbox.ports or self.sandbox.socket_ports or self.sandbox.allow_hosts:
            self._dir = tempfile.mkdtemp(prefix="agentrun-sandbox-")
            shutil.copyfile(_RELAY, os.path.join(self._dir, "relay.py"))
            try:
                for port in self.sandbox.ports:
                    name = f"port-{port}.sock"
                    listener = await anyio.create_unix_listener(os.path.join(self._dir, name))
                    self._listeners.append((listener, port))
                    routes[port] = f"{INSIDE_DIR}/{name}"
                if self.sandbox.allow_hosts:
                    gate_port = _gate_port(self.sandbox)
                    listener = await anyio.create_unix_listener(
                        os.path.join(self._dir, "gate.sock")
                    )
                    self._gate = listener
                    routes[gate_port] = f"{INSIDE_DIR}/gate.sock"
                    extra_env = _proxy_environment(gate_port)
            except BaseException:
                await self.aclose()
                raise
            for port, path in self.sandbox.socket_ports.items():
                routes[port] = path
                binds.append(path)
        layout = SandboxLayout(
            argv=layout.argv,
            cwd=layout.cwd,
            home=layout.home,
            read_write=layout.read_write,
            read_only=(*layout.read_only, *binds),
            routes=routes,
            run_dir=self._dir,
            python=layout.python,
            python_roots=layout.python_roots,
        )
        env = {**self._env, "TMPDIR": "/tmp", **extra_env}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        if bwrap is not None and not podman:
            return bwrap_argv(layout, bwrap), env
        return await self._podman_start(layout, env)

    async def _podman_start(
        self, layout: SandboxLayout, env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        setup = _podman_setup()[0]
        if setup is None:  # the probe said yes before
            raise self._unavailable(podman_unavailable() or "podman is not available")
        try:
            text = _env_file_text(env, self.engine)
            self._container_dir = tempfile.mkdtemp(prefix="agentrun-container-")
            root = _empty_root(os.path.join(self._container_dir, "root"))
            env_file = os.path.join(self._container_dir, "env")
            descriptor = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(text)
        except BaseException:
            await self.aclose()
            raise
        self._container = f"agentrun-{self.engine or 'agent'}-{os.urandom(6).hex()}"
        return podman_argv(layout, setup, self._container, env_file, root), dict(setup.env)

    async def stop(self) -> None:
        """Remove the run's container, if any (a no-op for bubblewrap: stopping the process
        group stops it). Podman's client is only a client: its end leaves the container."""
        name, self._container = self._container, None
        setup = _podman_setup()[0] if name is not None else None
        if name is None or setup is None:
            return
        with anyio.move_on_after(_PODMAN_PROBE_TIMEOUT, shield=True):
            await anyio.run_process(
                [setup.podman, *setup.options, "rm", "--force", "--ignore", "--time", "0", name],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                env=dict(setup.env),
            )

    async def serve(self, task_group: anyio.abc.TaskGroup) -> None:
        """Serve the host side of every host port (in ``task_group``, until closed)."""
        for listener, port in self._listeners:
            task_group.start_soon(self._serve_one, listener, port, name=f"sandbox port {port}")
        if self._gate is not None:
            gate = HostGate(self.sandbox.allow_hosts)
            task_group.start_soon(gate.serve, self._gate, name="sandbox host gate")

    async def _serve_one(self, listener: anyio.abc.SocketListener, port: int) -> None:
        async def forward(inside: anyio.abc.SocketStream) -> None:
            async with inside:
                try:
                    outside = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    return
                async with outside, anyio.create_task_group() as tg:
                    tg.start_soon(_pipe, inside, outside)
                    tg.start_soon(_pipe, outside, inside)

        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await listener.serve(forward)

    async def aclose(self) -> None:
        """Close the host-side sockets and remove the run's directory."""
        listeners, self._listeners = self._listeners, []
        gate, self._gate = self._gate, None
        if gate is not None:
            listeners.append((gate, 0))
        for listener, _ in listeners:
            with contextlib.suppress(OSError, anyio.ClosedResourceError):
                await listener.aclose()
        await self.stop()
        for directory in (self._dir, self._container_dir):
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
        self._dir = self._container_dir = None


async def check_sandbox(
    sandbox: Sandbox, cwd: str | None, env: Mapping[str, str], engine: str | None = None
) -> None:
    """Raise as a start in ``sandbox`` would (:class:`EngineUnavailableError` where none can be
    had, :class:`ConfigurationError` for a path that does not exist), starting nothing: what a
    session checks when it opens, before an agent that runs per turn has a program to start."""
    run = SandboxRun(sandbox, (), cwd, env, engine=engine)
    await anyio.to_thread.run_sync(run._layout)  # pyright: ignore[reportPrivateUsage]


async def _pipe(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await sink.send_eof()


#: Where the host gate (``allow_hosts``) is inside the sandbox, unless the sandbox uses it.
GATE_PORT_INSIDE = 3128
#: Most bytes of a ``CONNECT`` request's head, and how long the gate waits for it / a host.
_MAX_GATE_HEAD = 8192
_GATE_TIMEOUT = 30.0


def _gate_port(sandbox: Sandbox) -> int:
    taken = {*sandbox.ports, *sandbox.socket_ports}
    return next(p for p in range(GATE_PORT_INSIDE, 65536) if p not in taken)


def _proxy_environment(port: int) -> dict[str, str]:
    """The variables that send a program's HTTP(S) through the gate, except to the loopback
    (the model server or metering proxy, reached directly)."""
    url = f"http://127.0.0.1:{port}"
    loopback = "127.0.0.1,localhost,::1"
    env: dict[str, str] = {}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = loopback
    return env


def _authority(target: str) -> tuple[str, int] | None:
    """``host:port`` of a ``CONNECT`` (``[v6]:port`` for IPv6), or ``None``."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    host = host.removeprefix("[").removesuffix("]").lower().removesuffix(".")
    return (host, int(port)) if host else None


class HostGate:
    """The host side of ``Sandbox.allow_hosts``: an HTTP ``CONNECT`` proxy that opens a tunnel
    to a listed host (any port) and answers every other request ``403`` (a host not listed)
    or ``405`` (not a ``CONNECT``: a plain-HTTP proxy request is not forwarded)."""

    def __init__(self, allow_hosts: Sequence[str]) -> None:
        self.allow_hosts = frozenset(allow_hosts)

    async def serve(self, listener: anyio.abc.SocketListener) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await listener.serve(self._tunnel)

    async def _tunnel(self, inside: anyio.abc.SocketStream) -> None:
        async with inside:
            head = b""
            with anyio.move_on_after(_GATE_TIMEOUT):
                while b"\r\n\r\n" not in head and len(head) <= _MAX_GATE_HEAD:
                    try:
                        head += await inside.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        return
            if b"\r\n\r\n" not in head:
                return
            head, rest = head.split(b"\r\n\r\n", 1)
            method, _, target = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
            target = target.rpartition(" ")[0] or target
            authority = _authority(target) if method == "CONNECT" else None
            if authority is None:
                await self._answer(inside, target, 405, "only CONNECT to an allowed host")
                return
            host, port = authority
            if host not in self.allow_hosts:
                await self._answer(inside, target, 403, f"{host} is not an allowed host")
                return
            try:
                with anyio.fail_after(_GATE_TIMEOUT):
                    outside = await anyio.connect_tcp(host, port)
            except (OSError, TimeoutError) as exc:
                await self._answer(inside, target, 502, f"cannot reach {target}: {exc}")
                return
            async with outside:
                try:
                    await inside.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    if rest:
                        await outside.send(rest)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_pipe, inside, outside)
                    tg.start_soon(_pipe, outside, inside)

    async def _answer(
        self, inside: anyio.abc.SocketStream, target: str, status: int, why: str
    ) -> None:
        reason = {403: "Forbidden", 405: "Method Not Allowed", 502: "Bad Gateway"}[status]
        body = f"agentrun sandbox: {why}\n".encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await inside.send(head.encode() + body)
