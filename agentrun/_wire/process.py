"""Start, read, write and reliably stop an agent program.

Every engine that runs a local program goes through :class:`AgentProcess`::

    spec = ProcessSpec(argv=("claude", "-p", "..."), env=merge_env({"FOO": "1"}))
    async with open_process(spec) as proc:
        async for line in proc.lines():
            ...
        code = await proc.wait()

What it guarantees:

* The program leads its own process group (``start_new_session=True``); every signal goes
  to the whole group, so wrappers that spawn the real binary as a child (npm shims) cannot
  leave it behind.
* stderr is always drained by a background task into a bounded ring buffer
  (:meth:`AgentProcess.stderr_tail`), so a chatty program can never block on a full
  stderr pipe and a crash report always has the program's last words.
* stdout is framed into lines of up to ``max_line_bytes`` by :mod:`agentrun._wire.framing`.
* Leaving the ``async with`` block -- normally, by an exception or by cancellation -- runs
  :meth:`AgentProcess.aclose`: shielded from cancellation and bounded in time, it closes
  stdin, waits, sends SIGTERM to the group, waits, sends SIGKILL to the group, waits, and
  finally SIGKILLs whatever is left of the group even if the leader already exited.
* Groups still alive at interpreter exit are SIGKILLed by an ``atexit`` hook.

``__aenter__`` and ``__aexit__`` must run in the same task (the stderr reader lives in a
task group owned by the context manager).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, cast

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.lowlevel import RunVar

from .._vocabulary.env import merge_env, validate_env
from .._vocabulary.errors import (
    AgentrunError,
    ConfigurationError,
    EngineUnavailableError,
    ProcessExitError,
    SendNotSupportedError,
    SessionTerminatedError,
)
from .framing import DEFAULT_MAX_LINE_BYTES, READ_CHUNK_BYTES, LineFramer, LineStream, LineTooLong

__all__ = [
    "MAX_CLOSE_TIMEOUT",
    "AgentProcess",
    "ProcessHost",
    "ProcessSpec",
    "live_process_groups",
    "merge_env",
    "open_process",
    "validate_env",
]

_log = logging.getLogger("agentrun.subprocess")

#: Upper bound for each of the close timeouts of a :class:`ProcessSpec`.
MAX_CLOSE_TIMEOUT = 300.0
#: stderr lines longer than this are passed to ``on_stderr`` truncated.
_STDERR_LINE_LIMIT = 1024 * 1024
_SIGKILL: int = getattr(signal, "SIGKILL", signal.SIGTERM)


# -- the spec -----------------------------------------------------------------------------


def _check_argv(argv: object, engine: str | None) -> tuple[str, ...]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (tuple, list)):
        raise ConfigurationError("argv must be a sequence of strings", option="argv", engine=engine)
    items: list[str] = []
    for i, arg in enumerate(argv):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        if not isinstance(arg, str) or "\0" in arg:
            raise ConfigurationError(
                f"argv[{i}] must be a string without NUL characters", option="argv", engine=engine
            )
        items.append(arg)
    if not items:
        raise ConfigurationError("argv is empty", option="argv", engine=engine)
    if not items[0]:
        raise ConfigurationError("argv[0] is empty", option="argv", engine=engine)
    return tuple(items)


@dataclass(frozen=True)
class ProcessSpec:
    """How to start one agent program and how patiently to stop it."""

    #: Program and arguments; ``argv[0]`` is looked up on the ``PATH`` of ``env``.
    argv: tuple[str, ...]
    cwd: str | None = None
    #: The complete environment (see :func:`merge_env`); ``None`` inherits ``os.environ``.
    env: Mapping[str, str] | None = None
    #: ``"devnull"`` unless the engine streams input: some agents wait forever on an open
    #: stdin pipe.
    stdin: Literal["devnull", "pipe"] = "devnull"
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    stderr_tail_bytes: int = 64 * 1024
    #: Called with each decoded stderr line; exceptions are logged and ignored.
    on_stderr: Callable[[str], None] | None = None
    #: Engine name, used in error messages.
    engine: str | None = None
    #: After stdin is closed, how long the program may take to exit on its own.
    close_stdin_timeout: float = 5.0
    #: After SIGTERM to the group, how long before SIGKILL.
    terminate_timeout: float = 5.0
    #: After SIGKILL, how long to wait for the exit status.
    kill_timeout: float = 5.0
    #: After the program exits, how long to wait for the rest of its stderr.
    stderr_settle_timeout: float = 1.0
    #: After the program exits on its own, how long what it left running in its process group
    #: may live. Such leftovers can hold stdout open, so its reader would never see the end.
    orphan_grace: float = 1.0

    def __post_init__(self) -> None:
        items = _check_argv(self.argv, self.engine)
        object.__setattr__(self, "argv", items)
        if self.stdin not in ("devnull", "pipe"):
            raise ConfigurationError(
                f"stdin must be 'devnull' or 'pipe', not {self.stdin!r}", option="stdin"
            )
        if self.max_line_bytes < 1:
            raise ConfigurationError("max_line_bytes must be at least 1", option="max_line_bytes")
        if self.stderr_tail_bytes < 0:
            raise ConfigurationError(
                "stderr_tail_bytes must not be negative", option="stderr_tail_bytes"
            )
        for name in (
            "close_stdin_timeout",
            "terminate_timeout",
            "kill_timeout",
            "stderr_settle_timeout",
            "orphan_grace",
        ):
            value: object = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 <= value <= MAX_CLOSE_TIMEOUT
            ):
                raise ConfigurationError(
                    f"{name} must be a number of seconds between 0 and {MAX_CLOSE_TIMEOUT:g}",
                    option=name,
                )

    @property
    def program(self) -> str:
        return self.argv[0]


# -- registry of live process groups ------------------------------------------------------

_live_groups: set[int] = set()
_live_lock = threading.Lock()


def live_process_groups() -> frozenset[int]:
    """Process groups started here that have not been reaped yet."""
    with _live_lock:
        return frozenset(_live_groups)


def _register(pgid: int) -> None:
    with _live_lock:
        _live_groups.add(pgid)


def _unregister(pgid: int) -> None:
    with _live_lock:
        _live_groups.discard(pgid)


def _kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; return False when it no longer exists."""
    if sys.platform == "win32":  # pragma: no cover - no process groups there
        try:
            os.kill(pgid, sig)
        except OSError:
            return False
        return True
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # macOS reports EPERM for a group made only of zombies.
        _log.debug("no permission to signal process group %d", pgid)
        return False
    return True


def _reap_live_groups() -> None:
    with _live_lock:
        groups = list(_live_groups)
        _live_groups.clear()
    for pgid in groups:
        _kill_group(pgid, _SIGKILL)


atexit.register(_reap_live_groups)


# -- the process --------------------------------------------------------------------------


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _spawn_error(spec: ProcessSpec, exc: OSError) -> AgentrunError:
    program = spec.program
    if spec.cwd is not None and exc.filename == spec.cwd and not os.path.isdir(spec.cwd):
        return ConfigurationError(
            f"working directory {spec.cwd!r} does not exist or is not a directory",
            option="cwd",
            engine=spec.engine,
        )
    if isinstance(exc, FileNotFoundError):
        reason = "was not found" if os.sep in program else "was not found on PATH"
    elif isinstance(exc, PermissionError):
        reason = "is not executable (permission denied)"
    elif exc.errno == errno.ENOEXEC:
        reason = "is not an executable program (exec format error)"
    else:
        reason = f"could not be started ({exc.strerror or exc})"
    return EngineUnavailableError(
        f"agent program {program!r} {reason}", engine=spec.engine, searched=(program,)
    )


#: Every program started here gets this variable with a token of its own. Its descendants
#: inherit it, so those that leave the process group (``setsid``, ``nohup … &``) are still found
#: and stopped when the program is closed (where ``/proc`` shows environments: Linux).
PROCESS_TREE_ENV = "AGENTRUN_PROCESS_TREE"


def _tree_members(trees: dict[str, int]) -> dict[str, set[int]]:
    """For each ``token -> leader``: the live processes that carry the token in their
    environment or descend from the leader (Linux; elsewhere nothing is found and the process
    group is all that is stopped). One pass over ``/proc`` serves every tree asked about."""
    found: dict[str, set[int]] = {token: set() for token in trees}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    prefix = f"{PROCESS_TREE_ENV}=".encode()
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] == b"Z":
                continue  # a zombie holds nothing; its parent reaps it
            children.setdefault(int(fields[1]), []).append(pid)
            with open(f"/proc/{pid}/environ", "rb") as fh:
                environ = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if prefix in environ:
            for entry in environ.split(b"\0"):
                if entry.startswith(prefix):
                    members = found.get(entry[len(prefix) :].decode("ascii", "replace"))
                    if members is not None:
                        members.add(pid)
    for token, leader in trees.items():
        members = found[token]
        stack = [leader]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in members:
                    members.add(child)
                    stack.append(child)
        members.discard(leader)
    return found


def _kill_trees(trees: dict[str, int]) -> dict[str, int]:
    """SIGKILL every process of each tree; how many were signalled, per tree."""
    killed: dict[str, int] = {}
    for token, members in _tree_members(trees).items():
        killed[token] = 0
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, _SIGKILL)
                killed[token] += 1
    return killed


class _TreeKiller:
    """Stops the trees of closing programs, one ``/proc`` scan (in a worker thread) for all the
    closes waiting at the time: many sessions closing at once cost a few scans rather than one
    each, and never more than one scanning thread competes with the event loop for the GIL."""

    def __init__(self) -> None:
        #: Closes waiting for a scan that has not started yet: token -> leader.
        self._unscanned: dict[str, int] = {}
        #: Results of finished scans for the closes still waiting: token -> processes killed.
        self._killed: dict[str, int] = {}
        self._waiting: set[str] = set()
        #: Set when the scan under way ends (None: no scan under way).
        self._scan_done: anyio.Event | None = None

    async def kill(self, token: str, leader: int) -> int:
        """Kill the tree of ``token``/``leader``; how many processes were signalled."""
        self._waiting.add(token)
        self._unscanned[token] = leader
        try:
            while token not in self._killed:
                if self._scan_done is not None:
                    await self._scan_done.wait()
                else:
                    await self._scan()
            return self._killed[token]
        finally:
            self._waiting.discard(token)
            self._unscanned.pop(token, None)
            self._killed.pop(token, None)

    async def _scan(self) -> None:
        trees, self._unscanned = self._unscanned, {}
        self._scan_done = done = anyio.Event()
        killed = dict.fromkeys(trees, 0)
        try:
            # Not abandoned on cancel: once started, the scan serves every tree it took.
            killed.update(await anyio.to_thread.run_sync(_kill_trees, trees))
        finally:
            self._killed.update((t, n) for t, n in killed.items() if t in self._waiting)
            self._scan_done = None
            done.set()


_TREE_KILLER: RunVar[_TreeKiller] = RunVar("agentrun_tree_killer")


async def _kill_tree(token: str, leader: int) -> int:
    """SIGKILL every process of the tree (see :class:`_TreeKiller`); how many were signalled."""
    try:
        killer = _TREE_KILLER.get()
    except LookupError:
        killer = _TreeKiller()
        _TREE_KILLER.set(killer)
    return await killer.kill(token, leader)


async def _spawn(spec: ProcessSpec, tree_token: str) -> anyio.abc.Process:
    env = dict(os.environ) if spec.env is None else validate_env(spec.env)
    env[PROCESS_TREE_ENV] = tree_token
    stdin = subprocess.PIPE if spec.stdin == "pipe" else subprocess.DEVNULL
    proc: anyio.abc.Process | None = None
    try:
        # Shielded so that a cancellation cannot strike after the fork and lose the handle.
        with anyio.CancelScope(shield=True):
            proc = await anyio.open_process(
                list(spec.argv),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.cwd,
                env=env,
                start_new_session=True,
            )
    except OSError as exc:
        raise _spawn_error(spec, exc) from exc
    assert proc is not None
    return proc


class AgentProcess:
    """A running agent program; use it through ``async with open_process(spec) as proc``."""

    def __init__(self, spec: ProcessSpec) -> None:
        self._spec = spec
        self._process: anyio.abc.Process | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._tg_stack: contextlib.AsyncExitStack | None = None
        self._stderr_scope: anyio.CancelScope | None = None
        self._stderr_done: anyio.Event | None = None
        self._close_done: anyio.Event | None = None
        self._write_lock: anyio.Lock | None = None
        self._tail = bytearray()
        self._lines: LineStream | None = None
        self._entered = False
        self._closing = False
        self._stdin_closed = spec.stdin != "pipe"
        self._callback_failed = False
        self._exited_alone = False
        self._tree_token = os.urandom(8).hex()

    # -- context manager -------------------------------------------------------------

    async def __aenter__(self) -> AgentProcess:
        if self._entered:
            raise RuntimeError("a AgentProcess can only be started once")
        self._entered = True
        self._stderr_scope = anyio.CancelScope()
        self._stderr_done = anyio.Event()
        self._close_done = anyio.Event()
        self._write_lock = anyio.Lock()
        proc = await _spawn(self._spec, self._tree_token)
        self._process = proc
        _register(proc.pid)
        _log.debug("started %s as pid %d", self._spec.program, proc.pid)
        try:
            self._tg_stack = contextlib.AsyncExitStack()
            tg = await self._tg_stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            tg.start_soon(self._drain_stderr, name=f"agentrun stderr reader (pid {proc.pid})")
            tg.start_soon(self._reap_orphans, name=f"agentrun orphan reaper (pid {proc.pid})")
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            await self._abort_start()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            tg, self._tg = self._tg, None
            stack, self._tg_stack = self._tg_stack, None
            if tg is not None:
                # The stderr reader has finished (aclose waited for it); exiting the group
                # does not see the caller's exception, so that propagates unchanged.
                tg.cancel_scope.cancel()
            if stack is not None:
                await stack.aclose()

    async def _abort_start(self) -> None:
        # Same as leaving the block; aclose() is shielded, so the program is always stopped.
        await self.__aexit__(None, None, None)

    # -- properties ------------------------------------------------------------------

    def _require(self) -> anyio.abc.Process:
        if self._process is None:
            raise RuntimeError("the process has not been started (use 'async with')")
        return self._process

    @property
    def spec(self) -> ProcessSpec:
        return self._spec

    @property
    def argv(self) -> tuple[str, ...]:
        return self._spec.argv

    @property
    def pid(self) -> int:
        return self._require().pid

    @property
    def returncode(self) -> int | None:
        """Exit status, ``None`` while running; negative means killed by that signal."""
        return None if self._process is None else self._process.returncode

    @property
    def closed(self) -> bool:
        return self._closing

    # -- stdout ----------------------------------------------------------------------

    def lines(self) -> LineStream:
        """The framed lines of stdout, until end of file.

        Every call returns the same iterator (one consumer at a time; a concurrent read
        raises ``anyio.BusyResourceError``), so a later call continues where the last one
        stopped.
        """
        proc = self._require()
        if self._lines is None:
            assert proc.stdout is not None
            self._lines = LineStream(proc.stdout, max_line_bytes=self._spec.max_line_bytes)
            if self._exited_alone:
                self._lines.end_when_idle()
        return self._lines

    # -- stdin -----------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Write to the program's stdin (``stdin="pipe"`` only).

        Raises :class:`ProcessExitError` if the program has exited, and
        :class:`SessionTerminatedError` if stdin was closed.
        """
        proc = self._require()
        if proc.stdin is None:
            raise SendNotSupportedError(
                "the process was started with stdin='devnull'", engine=self._spec.engine
            )
        assert self._write_lock is not None
        async with self._write_lock:
            if proc.returncode is not None:
                raise self.exit_error(f"{self._spec.program} has exited")
            if self._stdin_closed:
                raise SessionTerminatedError(
                    f"stdin of {self._spec.program} is closed", engine=self._spec.engine
                )
            try:
                await proc.stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                # The reading end is gone: usually the program died. Give it a moment to
                # be reaped so the error can carry its exit status.
                with anyio.move_on_after(self._spec.stderr_settle_timeout):
                    await proc.wait()
                if proc.returncode is not None:
                    raise self.exit_error(
                        f"{self._spec.program} exited while being written to"
                    ) from exc
                raise SessionTerminatedError(
                    f"stdin of {self._spec.program} is closed", engine=self._spec.engine
                ) from exc

    async def close_stdin(self) -> None:
        """Close stdin (the program sees end of file). Idempotent; never raises."""
        if self._stdin_closed or self._process is None:
            self._stdin_closed = True
            return
        self._stdin_closed = True
        stdin = self._process.stdin
        if stdin is None:
            return
        assert self._write_lock is not None
        # Let a write in progress finish, but not forever: a program that does not read
        # its stdin must not block the close.
        with anyio.move_on_after(self._spec.close_stdin_timeout):
            async with self._write_lock:
                await self._close_stream(stdin)
                return
        await self._close_stream(stdin)

    @staticmethod
    async def _close_stream(stream: anyio.abc.AsyncResource) -> None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stream.aclose()

    # -- stderr ----------------------------------------------------------------------

    def stderr_tail(self) -> str:
        """The last ``stderr_tail_bytes`` of stderr, decoded (undecodable bytes replaced)."""
        data = bytes(self._tail)
        if len(data) >= self._spec.stderr_tail_bytes:
            # The ring buffer may start inside a UTF-8 sequence: drop continuation bytes.
            i = 0
            while i < min(3, len(data)) and 0x80 <= data[i] <= 0xBF:
                i += 1
            data = data[i:]
        return data.decode("utf-8", errors="replace")

    def _keep_tail(self, chunk: bytes) -> None:
        limit = self._spec.stderr_tail_bytes
        if limit <= 0:
            return
        tail = self._tail
        if len(chunk) >= limit:
            tail[:] = chunk[-limit:]
            return
        tail += chunk
        excess = len(tail) - limit
        if excess > 0:
            del tail[:excess]

    def _wants_lines(self) -> bool:
        return self._spec.on_stderr is not None or _log.isEnabledFor(logging.DEBUG)

    def _deliver_stderr(self, items: list[bytes | LineTooLong]) -> None:
        callback = self._spec.on_stderr
        for item in items:
            if isinstance(item, LineTooLong):
                text = item.head.decode("utf-8", "replace") + f"... [{item.size} bytes]"
            else:
                text = item.decode("utf-8", "replace")
            _log.debug("[%s %d stderr] %s", self._spec.program, self.pid, text)
            if callback is None:
                continue
            try:
                callback(text)
            except Exception:
                if not self._callback_failed:
                    self._callback_failed = True
                    _log.warning("on_stderr callback raised; ignoring", exc_info=True)
                else:
                    _log.debug("on_stderr callback raised again", exc_info=True)

    async def _drain_stderr(self) -> None:
        assert self._process is not None
        assert self._stderr_done is not None
        assert self._stderr_scope is not None
        stream = self._process.stderr
        framer = LineFramer(_STDERR_LINE_LIMIT)
        try:
            with self._stderr_scope:
                while stream is not None:
                    try:
                        chunk = await stream.receive(READ_CHUNK_BYTES)
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        break
                    except (anyio.BrokenResourceError, OSError):
                        _log.debug("stderr of pid %d broke", self.pid, exc_info=True)
                        break
                    self._keep_tail(chunk)
                    if self._wants_lines():
                        self._deliver_stderr(framer.feed(chunk))
                    elif framer.buffered:
                        framer = LineFramer(_STDERR_LINE_LIMIT)
        finally:
            try:
                if self._wants_lines():
                    self._deliver_stderr(framer.flush())
            finally:
                self._stderr_done.set()

    # -- waiting and errors ----------------------------------------------------------

    async def _reap_orphans(self) -> None:
        """Once the program has exited by itself, stop what it left behind in its group."""
        proc = self._require()
        await proc.wait()
        await anyio.sleep(self._spec.orphan_grace)
        if not self._closing:
            self.send_signal_group(_SIGKILL)
        # The exit is seen from the process, not from the end of its output: a descendant that
        # left the group (setsid, nohup) may hold stdout open for ever. What the program wrote is
        # still read; then its lines end.
        self._exited_alone = True
        if self._lines is not None:
            self._lines.end_when_idle()

    async def wait(self) -> int:
        """Wait for the program to exit and return its status.

        Also waits (up to ``stderr_settle_timeout``) for the end of stderr, so that
        :meth:`stderr_tail` and :meth:`exit_error` see the program's last output.
        """
        proc = self._require()
        code = await proc.wait()
        assert self._stderr_done is not None
        with anyio.move_on_after(self._spec.stderr_settle_timeout):
            await self._stderr_done.wait()
        return code

    def exit_error(self, message: str) -> ProcessExitError:
        """A :class:`ProcessExitError` with the exit status and the stderr tail."""
        code = self.returncode
        exit_code: int | None = None
        signum: int | None = None
        if code is None:
            text = f"{message} (still running)"
        elif code < 0:
            signum = -code
            text = f"{message} (killed by {_signal_name(signum)})"
        else:
            exit_code = code
            text = f"{message} (exit code {code})"
        return ProcessExitError(
            text,
            exit_code=exit_code,
            signal=signum,
            stderr_tail=self.stderr_tail(),
            engine=self._spec.engine,
        )

    def send_signal_group(self, sig: int) -> None:
        """Send ``sig`` to the program's whole process group (no error if it is gone)."""
        _kill_group(self._require().pid, sig)

    # -- closing ---------------------------------------------------------------------

    async def _exited_within(self, seconds: float) -> bool:
        proc = self._require()
        if proc.returncode is None:
            with anyio.move_on_after(seconds):
                await proc.wait()
        return proc.returncode is not None

    async def aclose(self) -> None:
        """Stop the program and everything in its process group; idempotent.

        Shielded from cancellation and bounded: close stdin and wait, together at most
        ``close_stdin_timeout``; SIGTERM the group, wait ``terminate_timeout``; SIGKILL the
        group, wait ``kill_timeout``; then SIGKILL the group once more for children that
        outlived the leader, collect the rest of stderr (``stderr_settle_timeout``) and
        close the pipes.  A program that survives SIGKILL (uninterruptible sleep) is left in
        the registry for the ``atexit`` reaper instead of blocking the caller.
        """
        if self._process is None:
            return
        assert self._close_done is not None
        with anyio.CancelScope(shield=True):
            if self._closing:
                await self._close_done.wait()
                return
            self._closing = True
            try:
                await self._shutdown(self._process)
            finally:
                self._close_done.set()

    async def _shutdown(self, proc: anyio.abc.Process) -> None:
        spec = self._spec
        pid = proc.pid
        # One grace budget covers closing stdin (a blocked writer may hold the lock) and
        # the program's own exit.
        with anyio.move_on_after(spec.close_stdin_timeout):
            await self.close_stdin()
            await proc.wait()
        if proc.returncode is None:
            _log.debug(
                "pid %d still running %.3gs after close; SIGTERM", pid, spec.close_stdin_timeout
            )
            self.send_signal_group(signal.SIGTERM)
            if not await self._exited_within(spec.terminate_timeout):
                _log.info("pid %d ignored SIGTERM for %.3gs; SIGKILL", pid, spec.terminate_timeout)
                self.send_signal_group(_SIGKILL)
                if not await self._exited_within(spec.kill_timeout):
                    _log.warning("pid %d did not exit %.3gs after SIGKILL", pid, spec.kill_timeout)
        # Children that outlived the leader still carry its process group id.
        self.send_signal_group(_SIGKILL)
        # Descendants that left the group still carry the tree's token.
        with anyio.move_on_after(spec.kill_timeout):
            killed = await _kill_tree(self._tree_token, pid)
            if killed:
                _log.info("pid %d: stopped %d descendants outside its process group", pid, killed)
        assert self._stderr_done is not None
        with anyio.move_on_after(spec.stderr_settle_timeout):
            await self._stderr_done.wait()
        assert self._stderr_scope is not None
        self._stderr_scope.cancel()
        with anyio.move_on_after(spec.kill_timeout):
            await self._stderr_done.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    await self._close_stream(stream)
        _release_pipes(proc)
        if proc.returncode is not None:
            _unregister(pid)
        _log.debug("pid %d closed with status %s", pid, proc.returncode)


def _release_pipes(proc: anyio.abc.Process) -> None:
    """Close the OS pipes now. On asyncio, closing the streams does not release the pipe fds
    while a detached descendant still holds the other end; closing the transport does."""
    inner = getattr(proc, "_process", None)
    transport = getattr(inner, "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()


def open_process(spec: ProcessSpec) -> AgentProcess:
    """Start ``spec`` on ``async with``; the program is stopped when the block ends.

    Raises :class:`~agentrun.EngineUnavailableError` if the program cannot be started and
    :class:`~agentrun.ConfigurationError` for a bad working directory or environment.
    """
    return AgentProcess(spec)


class ProcessHost:
    """Keeps a :class:`AgentProcess` open in a task of its own.

    A managed process must be entered and left by the same task. A long-lived engine starts
    its program in ``Session._start`` but stops it from ``_shutdown``, which runs elsewhere
    (under the caller's shielded close); the host bridges the two::

        host = ProcessHost(spec)
        proc = await host.start(task_group)   # the program runs; proc is usable from any task
        ...
        await host.aclose()                   # bounded: the managed close escalates as usual
    """

    def __init__(self, spec: ProcessSpec) -> None:
        self.spec = spec
        self.process: AgentProcess | None = None
        self._release = anyio.Event()
        self._released = anyio.Event()

    async def start(self, task_group: anyio.abc.TaskGroup) -> AgentProcess:
        """Start the program in a new task of ``task_group``; return once it runs."""
        return cast(AgentProcess, await task_group.start(self._hold))

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[AgentProcess]) -> None:
        try:
            async with open_process(self.spec) as proc:
                self.process = proc
                task_status.started(proc)
                await self._release.wait()
        finally:
            self._released.set()

    async def aclose(self) -> None:
        """Close stdin, then stop the program (stdin EOF, SIGTERM, SIGKILL, each bounded)."""
        if self.process is None:
            return
        await self.process.close_stdin()
        self._release.set()
        await self._released.wait()
