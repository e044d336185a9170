"""Turn overhead on a real agent: the pinned ``claude`` against the embedded model server, driven
by ``run_turn`` and by two minimal hand-written loops that spawn the same binary with the same
argv and environment, write the same stream-json user line and read to the ``result`` line: one
on anyio's process streams, one on plain ``asyncio`` (``create_subprocess_exec``, ``readline``,
``json.loads``), the least an asyncio caller can do.

Turns alternate between the three (first turn with the spawn, then text turns), so both see the
same machine. Reported per turn: wall time and the caller's own CPU time (``time.process_time``;
the agent's CPU is the same on every side and not counted). The model server runs in a process
of its own (``python -m agentrun.offline serve``): its work is no part of what a caller pays,
and in the caller's process it would add the same CPU to every side, pulling the ratios towards
1 (``--server-in-caller`` measures that way, as the earlier rounds did). Targets: wall <= 1.02x
the raw loop's, caller CPU <= 1.5x the plain asyncio loop's.

A fourth side, the floor (:class:`FloorClaude`), is the plain asyncio loop plus what no library
that returns typed messages and a summary can skip; the library is reported against it too.
``--instructions`` counts each side's instructions per text turn under callgrind instead (the
caller alone: the agent and the model server are not traced), the steady reading on a loaded
machine.

    python bench/turn_overhead.py [--turns 15] [--instructions]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import operator
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import cast

import anyio
from _common import Row, callgrind_dumps, print_table

from agentrun import Message, TurnSummary, run_turn
from agentrun._vocabulary.messages import assemble
from agentrun._wire.framing import decode_json_line
from agentrun.engines.claude import ClaudeDriver, ClaudeEngine
from agentrun.offline import ModelServer, Script, embedded_engine


class RawClaude:
    """The least a caller can do: one process, one user line per turn, read to the result."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None) -> None:
        self.argv, self.env, self.cwd = argv, env, cwd
        self.proc: anyio.abc.Process | None = None
        self._buffer = b""

    async def start(self) -> None:
        self.proc = await anyio.open_process(
            self.argv, env=self.env, cwd=self.cwd, start_new_session=True
        )

    async def turn(self, prompt: str) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        await self.proc.stdin.send(_user_line(prompt))
        while True:
            while b"\n" not in self._buffer:
                self._buffer += await self.proc.stdout.receive()
            line, self._buffer = self._buffer.split(b"\n", 1)
            if json.loads(line).get("type") == "result":
                return

    async def close(self) -> None:
        if self.proc is not None:
            await self.proc.aclose()


def _user_line(prompt: str) -> bytes:
    user = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        "parent_tool_use_id": None,
        "session_id": "",
    }
    return json.dumps(user).encode() + b"\n"


class AsyncioClaude:
    """The same on plain asyncio: ``create_subprocess_exec``, ``readline`` and ``json.loads``."""

    #: How each line is decoded.
    decode: Callable[[bytes], object] = staticmethod(json.loads)

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None) -> None:
        self.argv, self.env, self.cwd = argv, env, cwd
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
            limit=64 * 1024 * 1024,
        )

    async def turn(self, prompt: str) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(_user_line(prompt))
        await self.proc.stdin.drain()
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                raise RuntimeError("claude ended before its result")
            event = self.decode(line)
            if isinstance(event, dict) and cast(dict[str, object], event).get("type") == "result":
                return

    async def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()


class FloorClaude(AsyncioClaude):
    """The plain asyncio loop plus the work no library that returns typed messages and a
    :class:`TurnSummary` can skip: each line decoded as the library decodes it
    (``decode_json_line``: strict UTF-8, nesting bounded), the turn's typed messages built from
    fields at hand (``assemble``, no validation: the fields ``run_turn`` delivered on the same
    turn, set beforehand and not counted) and the summary folded by the library's reducer
    (``TurnSummary.from_messages``). No turn object, task, channel, cancel scope or clock, no
    translation, no accounting beyond the fold: whatever ``run_turn`` does, a text turn cannot
    cost the caller less than this."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None) -> None:
        super().__init__(argv, env, cwd)
        #: The coming turn's messages, as classes and the fields set.
        self.messages: list[tuple[type[Message], dict[str, object]]] = []

    decode = staticmethod(decode_json_line)

    async def turn(self, prompt: str) -> None:
        await super().turn(prompt)
        TurnSummary.from_messages([assemble(cls, fields) for cls, fields in self.messages])


_SIDES = ("agentrun", "raw", "asyncio", "floor")


_SCRIPT = Script(turns=[], exhausted_text="fine")


@contextlib.contextmanager
def _server_process(tmp: Path) -> Iterator[str]:
    """The scripted model server in a process of its own; its URL."""
    script = tmp / "script.json"
    script.write_text(_SCRIPT.model_dump_json())
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrun.offline", "serve", "--script", str(script), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the model server did not start: {url!r}")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.asynccontextmanager
async def _server(tmp: Path, in_caller: bool) -> AsyncIterator[str]:
    if in_caller:
        async with ModelServer(_SCRIPT) as server:
            yield server.url
    else:
        with _server_process(tmp) as url:
            yield url


def _marker() -> None:
    """Where callgrind dumps its counts (``--dump-before=functools_reduce``): a C function
    nothing else on a turn's path calls."""
    functools.reduce(operator.add, (0, 0))


async def _measure(
    turns: int, server_in_caller: bool, marked: bool = False
) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {
        side: {"first_wall": [], "first_cpu": [], "wall": [], "cpu": []} for side in _SIDES
    }
    with tempfile.TemporaryDirectory() as tmp:
        async with _server(Path(tmp), server_in_caller) as url:
            engine, options = embedded_engine("claude", url, Path(tmp) / "agent")
            assert isinstance(engine, ClaudeEngine)
            options = options.model_copy(update={"partial_messages": False})
            probe = engine.start(options).driver
            assert isinstance(probe, ClaudeDriver)
            argv = engine.command(options)
            raw = RawClaude(argv, dict(probe.env), options.cwd)
            plain = AsyncioClaude(argv, dict(probe.env), options.cwd)
            floor = FloorClaude(argv, dict(probe.env), options.cwd)
            session = engine.start(options)
            delivered: list[Message] = []

            async def agentrun_turn(prompt: str) -> None:
                delivered.clear()
                await run_turn(session, prompt, on_message=delivered.append, timeout=120)

            for index in range(turns):
                for side in _SIDES:
                    if side == "floor":
                        # What run_turn delivered on this turn, as fields at hand.
                        floor.messages = [
                            (type(m), {n: getattr(m, n) for n in m.__pydantic_fields_set__})
                            for m in delivered
                        ]
                    if marked:
                        _marker()
                    wall, cpu = time.perf_counter(), time.process_time()
                    if index == 0 and side == "agentrun":
                        await session.__aenter__()
                    if index == 0 and side == "raw":
                        await raw.start()
                    if index == 0 and side == "asyncio":
                        await plain.start()
                    if index == 0 and side == "floor":
                        await floor.start()
                    if side == "agentrun":
                        await agentrun_turn(f"turn {index}")
                    elif side == "raw":
                        await raw.turn(f"turn {index}")
                    elif side == "asyncio":
                        await plain.turn(f"turn {index}")
                    else:
                        await floor.turn(f"turn {index}")
                    key = "first_" if index == 0 else ""
                    out[side][key + "wall"].append(time.perf_counter() - wall)
                    out[side][key + "cpu"].append(time.process_time() - cpu)
                    if marked:
                        _marker()
            await session.__aexit__(None, None, None)
            await raw.close()
            await plain.close()
            await floor.close()
    return out


def _callgrind_child(turns: int) -> None:
    anyio.run(_measure, turns, False, True)


def count_instructions(turns: int) -> dict[str, list[int]]:
    """Instructions of each side's text turns, in the caller alone (callgrind; the agent and
    the model server are processes of their own and not traced): ``side -> per turn``."""
    counts = callgrind_dumps(
        [__file__, "--callgrind-child", "--turns", str(turns)], "--dump-before=functools_reduce"
    )
    # A dump at each marker: the start-up, then (turn, gap) for each side's turn in order (the
    # last gap goes to the final dump, not globbed).
    expected = 2 * turns * len(_SIDES)
    if len(counts) != expected:
        raise SystemExit(f"expected {expected} dumps, got {len(counts)}: another reduce call?")
    per_side: dict[str, list[int]] = {side: [] for side in _SIDES}
    for index in range(1, turns):  # text turns only
        for position, side in enumerate(_SIDES):
            per_side[side].append(counts[2 + 2 * (index * len(_SIDES) + position) - 1])
    return per_side


_BASELINES = {
    "raw": "raw loop",
    "asyncio": "plain asyncio loop",
    "floor": "floor (asyncio + decode, typed messages, fold)",
}


def measure(turns: int, *, server_in_caller: bool = False) -> list[Row]:
    data = anyio.run(_measure, turns, server_in_caller)  # asyncio: the plain loop needs it
    rows: list[Row] = []
    for label, side, key, baseline, target in (
        ("text turn wall", "agentrun", "wall", "raw", "<= 1.02x"),
        ("text turn caller CPU", "agentrun", "cpu", "raw", ""),
        ("text turn wall, asyncio", "agentrun", "wall", "asyncio", ""),
        ("text turn caller CPU, asyncio", "agentrun", "cpu", "asyncio", "<= 1.5x"),
        ("text turn caller CPU, floor", "agentrun", "cpu", "floor", ""),
        ("  floor text turn caller CPU", "floor", "cpu", "asyncio", ""),
    ):
        ours, theirs = data[side][key], data[baseline][key]
        median = statistics.median(ours)
        spread = (max(ours) - min(ours)) / median if median else 0.0
        rows.append(
            Row(
                f"turn overhead {label}",
                f"claude, {'run_turn' if side == 'agentrun' else side}, {len(ours)} turns",
                _BASELINES[baseline],
                median / statistics.median(theirs),
                median,
                spread,
                target,
            )
        )
    return rows


def print_instructions(turns: int) -> None:
    counts = count_instructions(turns)
    medians = {side: statistics.median(values) for side, values in counts.items()}
    print(f"instructions per text turn (callgrind, caller only, {turns - 1} text turns):")
    for side in _SIDES:
        values = counts[side]
        print(
            f"{side:9} median {medians[side] / 1e6:.3f}M (min {min(values) / 1e6:.3f}M, "
            f"max {max(values) / 1e6:.3f}M) | {medians[side] / medians['asyncio']:.2f}x asyncio "
            f"| {medians[side] / medians['floor']:.2f}x floor"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument(
        "--server-in-caller",
        action="store_true",
        help="run the model server in the caller's event loop (the earlier rounds' reading)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count each side's instructions per text turn under callgrind instead (slow)",
    )
    parser.add_argument("--callgrind-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind_child:
        _callgrind_child(args.turns)
    elif args.instructions:
        print_instructions(args.turns)
    else:
        print_table(measure(args.turns, server_in_caller=args.server_in_caller))


if __name__ == "__main__":
    main()
