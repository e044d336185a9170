"""The first turn on every engine: session start -> the first message with the model's text,
and -> the turn's result, through the library against a hand-written loop of the same agent.

The hand-written loop is made from what the library itself did: one library session per engine
is run first with the process layer watched, which gives the exact argv, environment, working
directory and every line the library wrote to the agent. The loop then starts the same program
and writes only what the protocol needs before the first prompt:

* Claude Code (stream-json): every line the library wrote, at once, without waiting for answers;
* ACP agents: ``initialize``, ``session/new``, the session settings the library chose (a mode,
  a model: the same handshake), ``session/prompt`` (each waiting for its answer, with the new
  session's id);
* Codex app-server: ``initialize``, ``initialized``, ``thread/start``, ``turn/start``;
* one process per turn (``codex exec``, ``opencode run``): the same argv, the library's stdin
  bytes if any, then read to the end.

The requests the library made before its first prompt beyond the protocol's minimum (a mode, a
model, a config option) are listed: the loop makes them too, but each is a round trip to weigh.
A request the agent makes of the client is answered "method not found" by the loop (a text turn
needs none). The first message is the first line (loop) or message (library) carrying the scripted
answer's word, so both sides wait for the same model output.

Rounds alternate which side goes first; each side's median over the rounds is compared. The
model server runs in a process of its own. Target: <= 1.05x on every engine.

Beside the ratios, each side's *own time* is timed at the process layer, where the agent has
nothing to do but wait for the caller: start -> the spawn, and each write's lag behind the last
thing that came before it (the spawn's return, a chunk read from the agent, the previous write)
up to the first line carrying the word; then the result's lag behind the last chunk read. What
lies between is the agent's (its own start, its answers, the model server), which varies between
runs by more than the whole of the caller's own time; this part does not.

    python -m agentrun.offline netns -- python bench/first_turn.py [--rounds 5] [--engines a,b]
        [--steps]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from _common import Row, print_table
from turn_overhead import _server_process  # pyright: ignore[reportPrivateUsage]

from agentrun import ConfigurationError, EngineUnavailableError, MessageType
from agentrun._wire import framing
from agentrun._wire import process as process_layer
from agentrun._wire.spawn import ProcessSpec
from agentrun.offline import Script, embedded_engine

ENGINES = (
    "claude",
    "claude-acp",
    "codex",
    "codex-app-server",
    "codex-acp",
    "opencode",
    "opencode-acp",
    "gemini",
    "qwen",
)
#: The scripted answer; both sides watch for it.
WORD = "zebrafinch"
PROMPT = "Say the word."
SCRIPT = Script(turns=[], exhausted_text=f"{WORD} is the word.")
_ACP_MINIMUM = ("initialize", "session/new")
_APP_SERVER_MINIMUM = ("initialize", "initialized", "thread/start")


@dataclass
class Captured:
    """What the library did to start the agent and send its first prompt."""

    spec: ProcessSpec
    writes: list[bytes] = field(default_factory=list[bytes])


@contextlib.contextmanager
def _watch_processes(into: list[Captured]) -> Iterator[None]:
    """Record every agent process the library starts and every write to it."""
    enter, write = process_layer.AgentProcess.__aenter__, process_layer.AgentProcess.write

    async def watched_enter(self: process_layer.AgentProcess) -> process_layer.AgentProcess:
        into.append(Captured(self.spec))
        return await enter(self)

    async def watched_write(self: process_layer.AgentProcess, data: bytes) -> None:
        for captured in into:
            if captured.spec is self.spec:
                captured.writes.append(bytes(data))
        await write(self, data)

    process_layer.AgentProcess.__aenter__ = watched_enter  # type: ignore[method-assign]
    process_layer.AgentProcess.write = watched_write  # type: ignore[method-assign]
    try:
        yield
    finally:
        process_layer.AgentProcess.__aenter__ = enter  # type: ignore[method-assign]
        process_layer.AgentProcess.write = write  # type: ignore[method-assign]


@dataclass
class Timing:
    first: float
    result: float
    #: The caller's own time (see the module docstring): before the first text, after the last
    #: chunk read to the result.
    own_before: float = 0.0
    own_after: float = 0.0
    #: The caller's CPU (``time.process_time``), start -> result.
    cpu: float = 0.0
    #: The pieces of the own time, in order: start -> spawn, each write's lag, the result's.
    steps: tuple[float, ...] = ()


class Timeline:
    """What happened at the process layer during one first turn, by ``time.perf_counter()``:
    ``spawn`` (asked), ``spawned``, ``write``, ``read`` (a chunk of the agent's output, or its
    end)."""

    #: The library turn being timed (its process layer is watched while set).
    current: Timeline | None = None

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()
        self.cpu = 0.0
        self.events: list[tuple[float, str]] = []

    def mark(self, kind: str) -> None:
        self.events.append((time.perf_counter(), kind))

    def result_reached(self) -> None:
        """Take the caller's CPU so far."""
        self.cpu = time.process_time() - self.cpu_start

    def timing(self, first: float, result: float) -> Timing:
        """The turn's times, with the caller's own share of them."""
        first_at, result_at = self.start + first, self.start + result
        steps: list[float] = []
        last, spawned = self.start, False
        for at, kind in self.events:
            if kind == "spawn" and not spawned:
                steps.append(at - self.start)
            elif kind == "write" and at <= first_at:
                steps.append(at - last)
            if kind == "spawned":
                spawned = True
            last = at
        reads = [at for at, kind in self.events if kind == "read" and at <= result_at]
        own_after = result_at - reads[-1] if reads else 0.0
        return Timing(first, result, sum(steps), own_after, self.cpu, (*steps, own_after))


@contextlib.contextmanager
def _timeline_hooks() -> Iterator[None]:
    """Mark the spawn, the writes and the chunks read of the library turn being timed."""
    spawn, write, receive = (
        process_layer._spawn,  # pyright: ignore[reportPrivateUsage]
        process_layer.AgentProcess.write,
        framing.LineStream._receive,  # pyright: ignore[reportPrivateUsage]
    )

    async def timed_spawn(spec: ProcessSpec, token: str) -> anyio.abc.Process:
        if (timeline := Timeline.current) is not None:
            timeline.mark("spawn")
        proc = await spawn(spec, token)
        if (timeline := Timeline.current) is not None:
            timeline.mark("spawned")
        return proc

    async def timed_write(self: process_layer.AgentProcess, data: bytes) -> None:
        if (timeline := Timeline.current) is not None:
            timeline.mark("write")
        await write(self, data)

    async def timed_receive(self: framing.LineStream) -> bytes | None:
        chunk = await receive(self)
        if (timeline := Timeline.current) is not None:
            timeline.mark("read")  # a chunk, or the end of the output
        return chunk

    process_layer._spawn = timed_spawn  # pyright: ignore[reportPrivateUsage]
    process_layer.AgentProcess.write = timed_write  # type: ignore[method-assign]
    framing.LineStream._receive = timed_receive  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
    try:
        yield
    finally:
        process_layer._spawn = spawn  # pyright: ignore[reportPrivateUsage]
        process_layer.AgentProcess.write = write  # type: ignore[method-assign]
        framing.LineStream._receive = receive  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]


async def library_turn(name: str, url: str, home: Path) -> Timing:
    engine, options = embedded_engine(name, url, home)
    timeline = Timeline.current = Timeline()
    start = timeline.start
    first: float | None = None
    try:
        async with engine.start(options) as session, session.turn(PROMPT, timeout=120) as turn:
            async for message in turn:
                text = message.type in (MessageType.TEXT, MessageType.TEXT_DELTA)
                if first is None and text and WORD in (message.text or ""):
                    first = time.perf_counter() - start
                if message.type == MessageType.RESULT:
                    result = time.perf_counter() - start
                    timeline.result_reached()
                    break
            else:
                raise RuntimeError(f"{name}: the turn ended without a result")
    finally:
        Timeline.current = None
    if first is None:
        raise RuntimeError(f"{name}: the model's word never arrived")
    return timeline.timing(first, result)


def _kind(name: str, captured: Captured) -> str:
    if name == "claude":
        return "claude"
    if name == "codex-app-server":
        return "app-server"
    if captured.spec.stdin != "pipe" or name in ("codex", "opencode"):
        return "per-turn"
    return "acp"


def _messages(writes: list[bytes]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for chunk in writes:
        out.extend(json.loads(line) for line in chunk.splitlines() if line.strip())
    return out


def extra_requests(name: str, captured: Captured) -> list[str]:
    """Methods the library sent before its first prompt beyond the protocol's minimum."""
    kind = _kind(name, captured)
    if kind not in ("acp", "app-server"):
        return []
    minimum, prompt = (
        (_ACP_MINIMUM, "session/prompt") if kind == "acp" else (_APP_SERVER_MINIMUM, "turn/start")
    )
    extra: list[str] = []
    for message in _messages(captured.writes):
        method = message.get("method")
        if method == prompt:
            break
        if method is not None and method not in minimum:
            extra.append(method)
    return extra


class RawLoop:
    """A hand-written first turn: the captured program, the protocol's minimum, read to the end."""

    def __init__(self, name: str, captured: Captured) -> None:
        self.name, self.captured, self.kind = name, captured, _kind(name, captured)
        self._buffer = b""
        self._next_id = 10_000
        self._timeline = Timeline()

    async def _line(self, proc: anyio.abc.Process) -> bytes | None:
        assert proc.stdout is not None
        while b"\n" not in self._buffer:
            try:
                self._buffer += await proc.stdout.receive()
                self._timeline.mark("read")
            except anyio.EndOfStream:
                self._timeline.mark("read")
                if self._buffer:
                    line, self._buffer = self._buffer, b""
                    return line
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    async def run(self) -> Timing:
        spec = self.captured.spec
        self._buffer = b""
        self._timeline = timeline = Timeline()
        start = timeline.start
        timeline.mark("spawn")
        proc = await anyio.open_process(
            list(spec.argv),
            env=dict(spec.env or {}),
            cwd=spec.cwd,
            stdin=subprocess.PIPE if spec.stdin == "pipe" else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        timeline.mark("spawned")
        try:
            with anyio.fail_after(120):
                first, result = await getattr(self, "_" + self.kind.replace("-", "_"))(proc, start)
            timeline.result_reached()
        except TimeoutError:
            raise RuntimeError(f"{self.name}: the loop got no result in 120 s") from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the agent and whatever it started
            with anyio.CancelScope(shield=True):
                await proc.wait()
                await proc.aclose()
        return timeline.timing(first, result)

    async def _write(self, proc: anyio.abc.Process, data: bytes) -> None:
        assert proc.stdin is not None
        self._timeline.mark("write")
        await proc.stdin.send(data)

    async def _claude(self, proc: anyio.abc.Process, start: float) -> tuple[float, float]:
        for chunk in self.captured.writes:
            await self._write(proc, chunk)
        first: float | None = None
        while (line := await self._line(proc)) is not None:
            if first is None and WORD.encode() in line:
                first = time.perf_counter() - start
            if json.loads(line).get("type") == "result":
                assert first is not None
                return first, time.perf_counter() - start
        raise RuntimeError("claude ended before its result")

    async def _per_turn(self, proc: anyio.abc.Process, start: float) -> tuple[float, float]:
        if proc.stdin is not None:
            for chunk in self.captured.writes:
                await self._write(proc, chunk)
            await proc.stdin.aclose()
        first: float | None = None
        while (line := await self._line(proc)) is not None:
            if first is None and WORD.encode() in line:
                first = time.perf_counter() - start
        if first is None:
            raise RuntimeError(f"{self.name}: the model's word never arrived")
        return first, time.perf_counter() - start

    async def _send(self, proc: anyio.abc.Process, message: dict[str, Any]) -> None:
        await self._write(proc, json.dumps(message).encode() + b"\n")

    async def _request(
        self,
        proc: anyio.abc.Process,
        method: str,
        params: Any,
        watch: list[float],
        start: float,
        until: str | None = None,
    ) -> Any:
        """Send a request and read to its answer (or to the notification ``until``), answering
        the agent's own requests."""
        self._next_id += 1
        ident = self._next_id
        await self._send(proc, {"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while (line := await self._line(proc)) is not None:
            if not watch and WORD.encode() in line:
                watch.append(time.perf_counter() - start)
            message = json.loads(line)
            if "method" in message and "id" in message:
                await self._send(
                    proc,
                    {"jsonrpc": "2.0", "id": message["id"],
                     "error": {"code": -32601, "message": "not handled"}},
                )  # fmt: skip
            elif message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{self.name}: {method} failed: {message['error']}")
                if until is None:
                    return message.get("result")
            elif until is not None and message.get("method") == until:
                return None
        raise RuntimeError(f"{self.name} ended during {method}")

    def _captured_params(self, method: str) -> Any:
        for message in _messages(self.captured.writes):
            if message.get("method") == method:
                return message.get("params")
        raise RuntimeError(f"{self.name}: the library sent no {method}")

    def _settings(self) -> list[tuple[str, dict[str, Any]]]:
        """The session settings (mode, model, config options) the library sent before its first
        prompt: part of the same handshake, so the loop sends them too."""
        out: list[tuple[str, dict[str, Any]]] = []
        for message in _messages(self.captured.writes):
            method = message.get("method")
            if method == "session/prompt":
                break
            if method in ("session/set_mode", "session/set_model", "session/set_config_option"):
                out.append((method, message["params"]))
        return out

    async def _acp(self, proc: anyio.abc.Process, start: float) -> tuple[float, float]:
        first: list[float] = []
        await self._request(proc, "initialize", self._captured_params("initialize"), first, start)
        opened = await self._request(
            proc, "session/new", self._captured_params("session/new"), first, start
        )
        session = opened["sessionId"]
        for method, params in self._settings():
            await self._request(proc, method, {**params, "sessionId": session}, first, start)
        params = {**self._captured_params("session/prompt"), "sessionId": session}
        await self._request(proc, "session/prompt", params, first, start)
        return first[0], time.perf_counter() - start

    async def _app_server(self, proc: anyio.abc.Process, start: float) -> tuple[float, float]:
        first: list[float] = []
        await self._request(proc, "initialize", self._captured_params("initialize"), first, start)
        await self._send(proc, {"jsonrpc": "2.0", "method": "initialized"})
        opened = await self._request(
            proc, "thread/start", self._captured_params("thread/start"), first, start
        )
        params = {**self._captured_params("turn/start"), "threadId": opened["thread"]["id"]}
        await self._request(proc, "turn/start", params, first, start, until="turn/completed")
        return first[0], time.perf_counter() - start


#: Engine -> side -> the medians of (own time before the first text, own time after the last
#: read, start -> result, the caller's CPU to the result), seconds.
OwnTimes = dict[str, dict[str, tuple[float, ...]]]


async def _measure(
    engines: tuple[str, ...], rounds: int, url: str, tmp: Path, steps: bool = False
) -> tuple[list[Row], dict[str, list[str]], OwnTimes]:
    rows: list[Row] = []
    extras: dict[str, list[str]] = {}
    own: OwnTimes = {}
    for name in engines:
        home = tmp / name
        captured: list[Captured] = []
        try:
            with _watch_processes(captured):
                await library_turn(name, url, home)
        except (ConfigurationError, EngineUnavailableError) as exc:
            print(f"{name}: skipped ({exc})")
            continue
        agent = captured[0]
        extras[name] = extra_requests(name, agent)
        raw = RawLoop(name, agent)
        await raw.run()  # the loop's own warm-up, as the library had its capture run
        sides: dict[str, list[Timing]] = {"agentrun": [], "raw": []}
        with _timeline_hooks():
            for index in range(rounds):
                order = ("agentrun", "raw") if index % 2 == 0 else ("raw", "agentrun")
                for side in order:
                    timing = await (
                        library_turn(name, url, home) if side == "agentrun" else raw.run()
                    )
                    sides[side].append(timing)
        own[name] = {
            side: tuple(
                statistics.median(getattr(t, pick) for t in timings)
                for pick in ("own_before", "own_after", "result", "cpu")
            )
            for side, timings in sides.items()
        }
        if steps:
            for side, timings in sides.items():
                count = min(len(t.steps) for t in timings)
                pieces = [statistics.median(t.steps[i] for t in timings) for i in range(count)]
                shown = " ".join(f"{piece * 1e3:.2f}" for piece in pieces)
                print(f"{name} {side}: own time by step (ms; spawn, each write, result): {shown}")
        for label, pick in (("first message", "first"), ("result", "result")):
            ours = [getattr(t, pick) for t in sides["agentrun"]]
            theirs = [getattr(t, pick) for t in sides["raw"]]
            median = statistics.median(ours)
            rows.append(
                Row(
                    f"first turn: start -> {label}",
                    f"{name}, {rounds} interleaved rounds",
                    "hand-written loop",
                    median / statistics.median(theirs),
                    median,
                    (max(ours) - min(ours)) / median,
                    "<= 1.05x",
                )
            )
    return rows, extras, own


def measure(rounds: int, engines: tuple[str, ...] = ENGINES, steps: bool = False) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp, _server(Path(tmp)) as url:
        rows, extras, own = anyio.run(_measure, engines, rounds, url, Path(tmp), steps)
    for name, methods in extras.items():
        if methods:
            print(f"{name}: before its first prompt the library also sent {', '.join(methods)}")
    print("the caller's own time, medians (ms): before the first text + after the last read")
    for name, sides in own.items():
        ours, theirs = sides["agentrun"], sides["raw"]
        gap = (ours[0] + ours[1]) - (theirs[0] + theirs[1])
        print(
            f"  {name}: library {ours[0] * 1e3:.1f} + {ours[1] * 1e3:.1f}, "
            f"loop {theirs[0] * 1e3:.1f} + {theirs[1] * 1e3:.1f}: "
            f"{gap * 1e3:+.1f} ms = {gap / theirs[2] * 100:+.1f} % of the loop's turn; "
            f"the caller's CPU to the result: library {ours[3] * 1e3:.1f}, "
            f"loop {theirs[3] * 1e3:.1f} ms"
        )
    return rows


@contextlib.contextmanager
def _server(tmp: Path) -> Iterator[str]:
    # turn_overhead's server process, with this benchmark's script.
    import turn_overhead

    saved = turn_overhead._SCRIPT  # pyright: ignore[reportPrivateUsage]
    turn_overhead._SCRIPT = SCRIPT  # pyright: ignore[reportPrivateUsage]
    try:
        with _server_process(tmp) as url:
            yield url
    finally:
        turn_overhead._SCRIPT = saved  # pyright: ignore[reportPrivateUsage]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument(
        "--steps", action="store_true", help="print each side's own time step by step"
    )
    args = parser.parse_args()
    print_table(measure(args.rounds, tuple(args.engines.split(",")), args.steps))


if __name__ == "__main__":
    main()
