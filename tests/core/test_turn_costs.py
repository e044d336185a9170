"""What a turn costs the caller's event loop, counted (never timed): with hundreds of sessions
these are what stall the loop (see docs/performance.md, "Hundreds of sessions").

* a finished turn leaves no cyclic garbage: with hundreds of turns in flight their objects outlive
  the young collections, and garbage in cycles then waits for a full collection, which pauses the
  whole loop for a time of the order of the heap;
* a turn waiting for its agent holds no exception (a wait inside an ``except`` clause keeps the
  exception, its traceback and frames alive for the whole wait);
* writing a line to the agent passes through the event loop no more often than the pipe's own
  write does.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Awaitable, Generator
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
import pytest
from repo_paths import FAKES

from agentrun import SessionOptions
from agentrun._turns.run import run_turn
from agentrun._vocabulary.messages import Message, MessageType
from agentrun._wire.jsonrpc import JsonRpcConnection
from agentrun._wire.process import ProcessSpec, open_process
from agentrun.engines.acp import AcpEngine

pytestmark = pytest.mark.anyio

FAKE = str(FAKES / "acp_agent.py")
T = TypeVar("T")


def _engine() -> AcpEngine:
    return AcpEngine([sys.executable, FAKE], close_stdin_timeout=2.0, terminate_timeout=2.0)


class _CountingYields(Generic[T]):
    """Await ``awaitable`` and count how often it gives the event loop control."""

    def __init__(self, awaitable: Awaitable[T]) -> None:
        self._awaitable = awaitable
        self.yields = 0

    def __await__(self) -> Generator[Any, Any, T]:
        inner = self._awaitable.__await__()
        sent: Any = None
        while True:
            try:
                item = inner.send(sent)
            except StopIteration as stop:
                return stop.value  # pyright: ignore[reportReturnType]
            self.yields += 1
            sent = yield item


async def test_a_finished_turn_leaves_no_cyclic_garbage(tmp_path: Path) -> None:
    async with _engine().start(SessionOptions(cwd=str(tmp_path))) as session:
        await run_turn(session, "warm up", timeout=30)
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            texts = [(await run_turn(session, f"turn {n}", timeout=30)).text for n in range(3)]
            gc.collect()
            left = sorted(
                {
                    f"{type(o).__module__}.{type(o).__qualname__}"
                    for o in gc.garbage
                    if type(o).__module__.startswith("agentrun")
                }
            )
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert texts == ["echo: turn 0", "echo: turn 1", "echo: turn 2"]
    assert left == []


async def test_a_turn_waiting_for_its_agent_holds_no_exception(tmp_path: Path) -> None:
    deltas: list[Message] = []
    some_came = anyio.Event()

    def on_message(message: Message) -> None:
        if message.type is MessageType.TEXT_DELTA:
            deltas.append(message)
            if len(deltas) == 3:
                some_came.set()

    held: list[anyio.WouldBlock] = []
    async with _engine().start(SessionOptions(cwd=str(tmp_path))) as session:
        await run_turn(session, "warm up", timeout=30)
        async with anyio.create_task_group() as group:
            # "slow" streams a text chunk every 50 ms until it is cancelled.
            group.start_soon(lambda: run_turn(session, "slow", on_message=on_message, timeout=30))
            await some_came.wait()
            await anyio.wait_all_tasks_blocked()  # the turn's tasks wait for the next chunk
            gc.collect()  # what is left is held, not garbage waiting for the collector
            held = [o for o in gc.get_objects() if isinstance(o, anyio.WouldBlock)]
            group.cancel_scope.cancel()
    assert held == []


async def test_writing_a_line_passes_the_event_loop_as_often_as_the_pipe_write() -> None:
    spec = ProcessSpec(argv=(sys.executable, "-c", "import sys; sys.stdin.read()"), stdin="pipe")
    async with open_process(spec) as proc:
        connection = JsonRpcConnection(proc.write)
        stdin = proc._process.stdin  # pyright: ignore[reportPrivateUsage, reportOptionalMemberAccess]
        assert stdin is not None
        raw = _CountingYields(stdin.send(b'{"jsonrpc": "2.0", "method": "ping"}\n'))
        await raw
        through_library = _CountingYields(connection.notify("ping"))
        await through_library
        await proc.close_stdin()
    assert raw.yields >= 1
    assert through_library.yields == raw.yields
