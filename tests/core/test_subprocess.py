"""Tests for the subprocess manager, driven by tests/fakes/fault_program.py."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
import tracemalloc
from pathlib import Path
from typing import cast

import anyio
import pytest
from repo_paths import FAKES, REPO

from agentrun._vocabulary.errors import (
    ConfigurationError,
    EngineUnavailableError,
    ProcessExitError,
    SendNotSupportedError,
    SessionTerminatedError,
)
from agentrun._wire import process as _subprocess
from agentrun._wire.framing import LineTooLong, decode_json_line
from agentrun._wire.process import (
    AgentProcess,
    ProcessSpec,
    live_process_groups,
    merge_env,
    open_process,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

FAULT = str(FAKES / "fault_program.py")
# Short close timeouts keep the escalation tests fast.
QUICK = {"close_stdin_timeout": 0.3, "terminate_timeout": 0.3, "kill_timeout": 2.0}


def fake(mode: str, *args: str, **options: object) -> ProcessSpec:
    merged: dict[str, object] = {**QUICK, **options}
    return ProcessSpec(argv=(sys.executable, FAULT, mode, *args), **merged)  # type: ignore[arg-type]


async def read_json(proc: AgentProcess) -> list[object]:
    items: list[object] = []
    async for line in proc.lines():
        assert isinstance(line, bytes)
        items.append(json.loads(line))
    return items


def is_dead(pid: int) -> bool:
    """True when ``pid`` is gone or a zombie (its reaper may not be us)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_dead(pid: int, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if is_dead(pid):
            return True
        time.sleep(0.02)
    return is_dead(pid)


# -- merge_env --------------------------------------------------------------------------


def test_merge_env_inherits_and_overrides() -> None:
    env = merge_env({"B": "2", "C": "3"}, base={"A": "1", "B": "old"})
    assert env == {"A": "1", "B": "2", "C": "3"}
    assert merge_env({"X": "y"}, inherit=False, base={"A": "1"}) == {"X": "y"}
    assert merge_env(None, inherit=False) == {}
    assert merge_env(None)["PATH"] == os.environ["PATH"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"": "secret-value-1"}, "empty"),
        ({"BAD=NAME": "secret-value-1"}, "'BAD=NAME'"),
        ({"NUL\0NAME": "secret-value-1"}, "'NUL\\x00NAME'"),
        ({"TOKEN": "secret-value-1\0tail"}, "'TOKEN'"),
        ({"NUMBER": 5}, "'NUMBER'"),
    ],
)
def test_merge_env_rejects_bad_entries_without_leaking_values(
    extra: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        merge_env(extra, base={})
    assert info.value.option == "env"
    assert needle in str(info.value)
    assert "secret-value-1" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_process_spec_validation() -> None:
    with pytest.raises(ConfigurationError, match="argv is empty"):
        ProcessSpec(argv=())
    with pytest.raises(ConfigurationError, match="sequence"):
        ProcessSpec(argv="claude")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="terminate_timeout"):
        ProcessSpec(argv=("x",), terminate_timeout=float("inf"))
    with pytest.raises(ConfigurationError, match="kill_timeout"):
        ProcessSpec(argv=("x",), kill_timeout=-1)
    assert ProcessSpec(argv=["a", "b"]).argv == ("a", "b")  # type: ignore[arg-type]


# -- starting ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_missing_binary_raises_engine_unavailable(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-agent")
    with pytest.raises(EngineUnavailableError) as info:
        async with open_process(ProcessSpec(argv=(missing,), engine="claude")):
            pass
    assert missing in str(info.value)
    assert info.value.engine == "claude"
    assert info.value.searched == (missing,)


@pytest.mark.anyio
async def test_non_executable_binary_raises_engine_unavailable(tmp_path: Path) -> None:
    script = tmp_path / "agent"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(EngineUnavailableError, match="not executable"):
        async with open_process(ProcessSpec(argv=(str(script),))):
            pass


@pytest.mark.anyio
async def test_missing_cwd_is_a_configuration_error(tmp_path: Path) -> None:
    spec = fake("lines", "1", cwd=str(tmp_path / "gone"))
    with pytest.raises(ConfigurationError) as info:
        async with open_process(spec):
            pass
    assert info.value.option == "cwd"


@pytest.mark.anyio
async def test_bad_env_in_spec_is_rejected_before_start() -> None:
    with pytest.raises(ConfigurationError, match="'A=B'"):
        async with open_process(fake("lines", "1", env={"A=B": "x"})):
            pass


@pytest.mark.anyio
async def test_env_and_cwd_reach_the_program(tmp_path: Path) -> None:
    env = merge_env({"AGENTRUN_TEST_VAR": "value 1"})
    async with open_process(fake("env", "AGENTRUN_TEST_VAR", env=env, cwd=str(tmp_path))) as p:
        assert await read_json(p) == [{"env": {"AGENTRUN_TEST_VAR": "value 1"}}]
        assert await p.wait() == 0


@pytest.mark.anyio
async def test_program_leads_its_own_process_group() -> None:
    async with open_process(fake("hang")) as p:
        assert os.getpgid(p.pid) == p.pid
        assert os.getpgid(p.pid) != os.getpgid(0)
        assert p.pid in live_process_groups()
    assert p.pid not in live_process_groups()


# -- reading ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_reads_lines_and_exit_code() -> None:
    async with open_process(fake("lines", "50")) as p:
        assert p.returncode is None
        items = await read_json(p)
        assert await p.wait() == 0
    assert items == [{"i": i} for i in range(50)]
    assert p.returncode == 0


@pytest.mark.anyio
async def test_crash_mid_stream_keeps_messages_and_reports_stderr() -> None:
    async with open_process(fake("crash", "3", engine="claude")) as p:
        items = await read_json(p)
        code = await p.wait()
        error = p.exit_error("claude exited during the turn")
    assert items == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert code == 3
    assert isinstance(error, ProcessExitError)
    assert error.exit_code == 3
    assert error.signal is None
    assert error.engine == "claude"
    assert "fatal: the model server went away" in error.stderr_tail
    assert "fatal: the model server went away" in str(error)
    assert "exit code 3" in str(error)


@pytest.mark.anyio
async def test_last_line_without_newline_is_delivered() -> None:
    async with open_process(fake("no_newline")) as p:
        assert await read_json(p) == [{"a": 1}, {"b": 2}]


@pytest.mark.anyio
async def test_garbage_lines_become_problems_not_exceptions() -> None:
    async with open_process(fake("garbage")) as p:
        decoded = [decode_json_line(line) async for line in p.lines() if isinstance(line, bytes)]
    codes = [getattr(d, "code", d) for d in decoded]
    assert codes == [
        {"n": 1},
        "invalid_utf8",
        "invalid_json",
        "invalid_json",
        "invalid_utf8",
        {"n": 2},
    ]


@pytest.mark.anyio
async def test_hundred_megabyte_line_is_skipped_with_bounded_memory() -> None:
    size = 100 * 1024 * 1024
    limit = 1024 * 1024
    got: list[object] = []
    tracemalloc.start()
    try:
        async with open_process(fake("big_line", str(size), max_line_bytes=limit)) as p:
            async for line in p.lines():
                got.append(line if isinstance(line, LineTooLong) else json.loads(line))
            assert await p.wait() == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == [{"before": 1}, LineTooLong(size, limit, b"x" * 1024), {"after": 2}]
    assert peak < 8 * limit, f"peak {peak} bytes while skipping a 100 MiB line"


@pytest.mark.anyio
async def test_stderr_flood_does_not_block_stdout_and_keeps_tail() -> None:
    seen: list[str] = []
    spec = fake("stderr_flood", str(10 * 1024 * 1024), on_stderr=seen.append)
    with anyio.fail_after(30):
        async with open_process(spec) as p:
            items = await read_json(p)
            assert await p.wait() == 0
            tail = p.stderr_tail()
    assert items[-1] == {"done": True, "progress_lines": len(items) - 1}
    assert len(items) > 5
    assert tail.endswith("TAIL-MARKER\n")
    assert len(tail.encode()) <= 64 * 1024
    assert len(tail) > 60 * 1024
    assert seen[-1] == "TAIL-MARKER"
    assert len(seen) > 100_000


@pytest.mark.anyio
async def test_stderr_callback_errors_are_logged_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    def callback(line: str) -> None:
        calls.append(line)
        raise RuntimeError("callback bug")

    caplog.set_level(logging.WARNING, logger="agentrun.subprocess")
    async with open_process(fake("crash", on_stderr=callback)) as p:
        assert len(await read_json(p)) == 3
        assert await p.wait() == 3
    assert calls == ["starting up", "fatal: the model server went away"]
    assert "on_stderr callback raised" in caplog.text
    assert "fatal: the model server went away" in p.stderr_tail()


@pytest.mark.anyio
async def test_lines_rejects_a_second_concurrent_consumer() -> None:
    async with open_process(fake("hang")) as p, anyio.create_task_group() as tg:
        first = p.lines()
        assert p.lines() is first
        assert await first.__anext__() == b'{"ready": true}'
        tg.start_soon(first.__anext__)
        await anyio.sleep(0.05)
        with pytest.raises(anyio.BusyResourceError):
            await p.lines().__anext__()
        tg.cancel_scope.cancel()


# -- writing ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_write_and_close_stdin_then_graceful_exit_code() -> None:
    async with open_process(fake("echo", "7", "0.1", stdin="pipe")) as p:
        await p.write(b"hello\n")
        await p.write(b"world\n")
        lines = p.lines()
        assert json.loads(await lines.__anext__()) == {"echo": "hello"}
        await p.close_stdin()
        await p.close_stdin()
        with pytest.raises(SessionTerminatedError) as info:
            await p.write(b"late\n")
        assert not isinstance(info.value, ProcessExitError)
        assert [json.loads(x) async for x in lines] == [{"echo": "world"}, {"eof": True}]
        assert await p.wait() == 7


@pytest.mark.anyio
async def test_close_waits_for_graceful_exit_instead_of_killing() -> None:
    spec = fake("echo", "4", "0.2", stdin="pipe", close_stdin_timeout=3.0)
    async with open_process(spec) as p:
        await p.write(b"x\n")
    assert p.returncode == 4


@pytest.mark.anyio
async def test_write_after_exit_raises_process_exit_error() -> None:
    async with open_process(fake("exit_now", "5", stdin="pipe")) as p:
        assert await p.wait() == 5
        with pytest.raises(ProcessExitError) as info:
            await p.write(b"x\n")
    assert info.value.exit_code == 5
    assert "bye" in info.value.stderr_tail


async def write_until_error(p: AgentProcess) -> Exception:
    for _ in range(1000):  # the first writes may still fit in the pipe buffer
        try:
            await p.write(b"x" * 65536)
        except Exception as exc:
            return exc
    raise AssertionError("writing to a dead program never failed")


@pytest.mark.anyio
async def test_write_to_a_program_that_died_raises_process_exit_error() -> None:
    async with open_process(fake("exit_now", "6", stdin="pipe")) as p:
        error = await write_until_error(p)
    assert isinstance(error, ProcessExitError)
    assert error.exit_code == 6
    assert "bye" in error.stderr_tail


@pytest.mark.anyio
async def test_close_is_bounded_while_a_writer_is_blocked_and_a_reader_waits() -> None:
    outcome: dict[str, object] = {}

    async def writer(p: AgentProcess) -> None:
        outcome["write"] = await write_until_error(p)

    async def reader(p: AgentProcess) -> None:
        outcome["lines"] = [line async for line in p.lines()]

    async with open_process(fake("hang", stdin="pipe")) as p:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, p)
            tg.start_soon(reader, p)
            await anyio.sleep(0.2)  # the program never reads stdin: the writer is stuck
            assert "write" not in outcome
            started = time.monotonic()
            await p.aclose()
            elapsed = time.monotonic() - started
    assert isinstance(outcome["write"], SessionTerminatedError)
    assert outcome["lines"] == [b'{"ready": true}']
    assert p.returncode == -signal.SIGTERM
    assert elapsed < 2.0


@pytest.mark.anyio
async def test_write_needs_a_stdin_pipe() -> None:
    async with open_process(fake("stdin_probe")) as p:
        with pytest.raises(SendNotSupportedError):
            await p.write(b"x")
        assert await read_json(p) == [{"stdin": ""}]


# -- stopping ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_cancelled_reader_leaves_no_orphan() -> None:
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        async with open_process(fake("hang")) as p:
            assert await p.lines().__anext__() == b'{"ready": true}'
            async for _ in p.lines():
                pass
    elapsed = time.monotonic() - started
    assert scope.cancelled_caught
    assert p.returncode == -signal.SIGTERM
    assert wait_dead(p.pid)
    assert elapsed < 3.0


@pytest.mark.anyio
async def test_exception_in_body_propagates_unchanged_and_stops_program() -> None:
    started: list[AgentProcess] = []

    async def body() -> None:
        async with open_process(fake("hang")) as p:
            started.append(p)
            await p.lines().__anext__()
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await body()
    assert started[0].returncode == -signal.SIGTERM


@pytest.mark.anyio
async def test_sigterm_ignored_escalates_to_sigkill_within_bounds() -> None:
    async with open_process(fake("ignore_term")) as p:
        assert await p.lines().__anext__() == b'{"ready": true}'
        started = time.monotonic()
        await p.aclose()
        elapsed = time.monotonic() - started
        error = p.exit_error("agent stopped")
    assert p.returncode == -signal.SIGKILL
    assert error.signal == signal.SIGKILL
    assert error.exit_code is None
    assert "SIGKILL" in str(error)
    # close_stdin_timeout + terminate_timeout, plus scheduling slack.
    assert 0.55 <= elapsed < 2.5


@pytest.mark.anyio
async def test_aclose_is_idempotent_and_concurrent_safe() -> None:
    async with open_process(fake("hang")) as p:
        await p.lines().__anext__()
        async with anyio.create_task_group() as tg:
            tg.start_soon(p.aclose)
            tg.start_soon(p.aclose)
        assert p.returncode == -signal.SIGTERM
        await p.aclose()
    assert p.closed


@pytest.mark.anyio
async def test_grandchild_is_killed_with_its_parent() -> None:
    async with open_process(fake("grandchild")) as p:
        line = await p.lines().__anext__()
        assert isinstance(line, bytes)
        grandchild = json.loads(line)["grandchild"]
        assert not is_dead(grandchild)
        assert os.getpgid(grandchild) == p.pid
    assert wait_dead(grandchild)


@pytest.mark.anyio
async def test_grandchild_is_killed_after_its_parent_exited() -> None:
    async with open_process(fake("orphan", orphan_grace=30)) as p:
        line = await p.lines().__anext__()
        assert isinstance(line, bytes)
        grandchild = json.loads(line)["grandchild"]
        assert await p.wait() == 0
        assert not is_dead(grandchild)
    assert wait_dead(grandchild)
    assert p.pid not in live_process_groups()


@pytest.mark.anyio
async def test_leftover_child_holding_stdout_cannot_keep_the_reader_waiting() -> None:
    # The program exits; a child it left behind holds stdout open. Without the orphan reaper
    # the reader would never see the end of the stream.
    with anyio.fail_after(10):
        async with open_process(fake("orphan_stdout", orphan_grace=0.2)) as p:
            lines = [line async for line in p.lines()]
            assert p.returncode == 0
    assert len(lines) == 1
    assert isinstance(lines[0], bytes)
    assert wait_dead(json.loads(lines[0])["grandchild"])


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.mark.anyio
async def test_exit_is_seen_from_the_process_when_a_detached_child_holds_stdout() -> None:
    # A child that left the process group (setsid) keeps stdout open after the program exits:
    # the lines must end anyway, and closing must release the pipes.
    before = open_fds()
    with anyio.fail_after(10):
        async with open_process(fake("detached_stdout", orphan_grace=0.2)) as p:
            lines = [line async for line in p.lines()]
            assert p.returncode == 0
    grandchild = json.loads(cast(bytes, lines[0]))["grandchild"]
    try:
        assert len(lines) == 1
        assert open_fds() <= before
        # It left the process group, yet closing stopped it too.
        assert wait_dead(grandchild)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)


@pytest.mark.anyio
async def test_closes_at_once_share_their_scans_and_stop_every_detached_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Twelve programs close, each leaving a grandchild outside its process group. The first
    # scan of /proc is held until the other eleven closes wait: one more scan serves them all,
    # and every grandchild is stopped.
    scans: list[int] = []
    closing: list[int] = []
    kill_trees = _subprocess._kill_trees  # pyright: ignore[reportPrivateUsage]
    kill_tree = _subprocess._kill_tree  # pyright: ignore[reportPrivateUsage]

    def held_scan(trees: dict[str, int]) -> dict[str, int]:
        scans.append(len(trees))
        deadline = time.monotonic() + 10
        while len(scans) == 1 and len(closing) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        return kill_trees(trees)

    async def counted_close(token: str, leader: int) -> int:
        closing.append(leader)
        return await kill_tree(token, leader)

    monkeypatch.setattr(_subprocess, "_kill_trees", held_scan)
    monkeypatch.setattr(_subprocess, "_kill_tree", counted_close)
    grandchildren: list[int] = []

    async def one() -> None:
        async with open_process(fake("detached_stdout", orphan_grace=0.2)) as p:
            lines = [line async for line in p.lines()]
        grandchildren.append(json.loads(cast(bytes, lines[0]))["grandchild"])

    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for _ in range(12):
                    tg.start_soon(one)
        assert scans == [1, 11]
        assert all(wait_dead(pid) for pid in grandchildren)
    finally:
        for pid in grandchildren:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.anyio
async def test_a_close_cancelled_while_waiting_for_a_scan_leaves_nothing_behind() -> None:
    killer = _subprocess._TreeKiller()  # pyright: ignore[reportPrivateUsage]
    async with anyio.create_task_group() as tg:
        # The first close scans; the second, cancelled while it waits, leaves no record.
        tg.start_soon(killer.kill, "first", 2**22 + 1)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await killer.kill("second", 2**22 + 2)
    assert await killer.kill("third", 2**22 + 3) == 0
    assert not killer._waiting and not killer._killed and not killer._unscanned  # pyright: ignore[reportPrivateUsage]


@pytest.mark.anyio
async def test_caller_cancellation_during_close_still_stops_everything() -> None:
    with anyio.CancelScope() as scope:
        async with open_process(fake("ignore_term")) as p:
            await p.lines().__anext__()
            scope.cancel()
            await anyio.sleep(10)
    assert p.returncode == -signal.SIGKILL
    assert wait_dead(p.pid)


@pytest.mark.anyio
async def test_cancellation_while_starting_stops_the_program() -> None:
    p = open_process(fake("hang"))
    with anyio.CancelScope() as scope:
        scope.cancel()
        async with p:
            raise AssertionError("the body must not run")
    assert scope.cancelled_caught
    assert p.returncode is not None
    assert wait_dead(p.pid)
    assert p.pid not in live_process_groups()


def test_atexit_reaper_kills_leftover_groups(tmp_path: Path) -> None:
    # A child interpreter starts a program, then exits without closing it.
    marker = tmp_path / "pid"
    code = f"""
import anyio, sys, os
from agentrun._wire.process import ProcessSpec, AgentProcess
async def main():
    p = AgentProcess(ProcessSpec(argv=(sys.executable, {FAULT!r}, "grandchild")))
    await p.__aenter__()
    line = await p.lines().__anext__()
    with open({str(marker)!r}, "w") as f:
        f.write(str(p.pid) + " " + line.decode())
anyio.run(main)
"""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, timeout=30, check=False
    )
    assert marker.exists(), result.stderr.decode()
    pid_text, line = marker.read_text().split(" ", 1)
    grandchild = json.loads(line)["grandchild"]
    assert wait_dead(int(pid_text))
    assert wait_dead(grandchild)
