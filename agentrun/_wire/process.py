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

import contextlib
import logging
import os
import signal
from dataclasses import replace
from types import TracebackType
from typing import cast

import anyio
import anyio.abc
import anyio.lowlevel

from .._vocabulary.env import merge_env, validate_env
from .._vocabulary.errors import ProcessExitError, SendNotSupportedError, SessionTerminatedError
from . import process_tree
from .framing import LineStream
from .process_tree import SIGKILL as _SIGKILL
from .process_tree import kill_group as _kill_group
from .process_tree import live_process_groups
from .process_tree import register as _register
from .process_tree import unregister as _unregister
from .sandbox import SandboxRun
from .spawn import MAX_CLOSE_TIMEOUT, ProcessSpec
from .spawn import spawn as _spawn
from .stderr import StderrCapture

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


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
        self._stderr = StderrCapture(
            tail_bytes=spec.stderr_tail_bytes, on_stderr=spec.on_stderr, program=spec.program
        )
        self._lines: LineStream | None = None
        self._entered = False
        self._closing = False
        self._stdin_closed = spec.stdin != "pipe"
        self._exited_alone = False
        #: How long closing waits for the program to exit on end of input before SIGTERM.
        self._stdin_grace = spec.close_stdin_timeout
        self._tree_token = os.urandom(8).hex()
        self._sandbox: SandboxRun | None = None

    # -- context manager -------------------------------------------------------------

    async def __aenter__(self) -> AgentProcess:
        if self._entered:
            raise RuntimeError("a AgentProcess can only be started once")
        self._entered = True
        self._stderr_scope = anyio.CancelScope()
        self._stderr_done = anyio.Event()
        self._close_done = anyio.Event()
        # Taken without a trip through the event loop when free: the write itself yields once.
        self._write_lock = anyio.Lock(fast_acquire=True)
        spec = self._spec
        if spec.sandbox is not None:
            self._sandbox = SandboxRun(
                spec.sandbox, spec.argv, spec.cwd, spec.env or {}, engine=spec.engine
            )
            try:
                argv, env = await self._sandbox.prepare()
                proc = await _spawn(replace(spec, argv=tuple(argv), env=env), self._tree_token)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._sandbox.aclose()
                raise
        else:
            proc = await _spawn(spec, self._tree_token)
        self._process = proc
        _register(proc.pid)
        _log.debug("started %s as pid %d", self._spec.program, proc.pid)
        try:
            self._tg_stack = contextlib.AsyncExitStack()
            tg = await self._tg_stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            tg.start_soon(self._drain_stderr, name=f"agentrun stderr reader (pid {proc.pid})")
            tg.start_soon(self._reap_orphans, name=f"agentrun orphan reaper (pid {proc.pid})")
            if self._sandbox is not None:
                await self._sandbox.serve(tg)
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
            if self._sandbox is not None:
                with anyio.CancelScope(shield=True):
                    await self._sandbox.aclose()

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
        return self._stderr.tail()

    async def _drain_stderr(self) -> None:
        assert self._process is not None
        assert self._stderr_done is not None
        assert self._stderr_scope is not None
        try:
            with self._stderr_scope:
                await self._stderr.drain(self._process.stderr, self.pid)
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

    def skip_stdin_grace(self, skip: bool = True) -> None:
        """While set, closing goes on to SIGTERM without waiting for the program to exit on end
        of input (a program stopped while it starts has nothing to finish, and may not read its
        input yet: the grace would only be waited out). ``skip=False`` restores the grace."""
        self._stdin_grace = 0.0 if skip else self._spec.close_stdin_timeout

    async def aclose(self) -> None:
        """Stop the program and everything in its process group; idempotent.

        Shielded from cancellation and bounded: close stdin and wait, together at most
        ``close_stdin_timeout`` (none after :meth:`skip_stdin_grace`); SIGTERM the group, wait
        ``terminate_timeout``; SIGKILL the group, wait ``kill_timeout``; then SIGKILL the group
        once more for children that outlived the leader, collect the rest of stderr
        (``stderr_settle_timeout``) and close the pipes.  A program that survives SIGKILL
        (uninterruptible sleep) is left in the registry for the ``atexit`` reaper instead of
        blocking the caller.
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
        with anyio.move_on_after(self._stdin_grace):
            await self.close_stdin()
            await proc.wait()
        if proc.returncode is None:
            _log.debug("pid %d still running %.3gs after close; SIGTERM", pid, self._stdin_grace)
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
            killed = await process_tree.kill_tree(self._tree_token, pid)
            if killed:
                _log.info("pid %d: stopped %d descendants outside its process group", pid, killed)
            if self._sandbox is not None:
                # A container outlives its client (podman's): removed by name.
                await self._sandbox.stop()
                # bwrap exits as soon as the program does, while the sandbox's PID 1 (which
                # carries the token too) may still be ending the rest: wait until all is gone.
                while await process_tree.tree_alive(self._tree_token, pid):
                    await process_tree.kill_tree(self._tree_token, pid)
                    await anyio.sleep(0.01)
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
    its program in ``EngineDriver.start`` but stops it from ``shutdown``, which runs elsewhere
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
