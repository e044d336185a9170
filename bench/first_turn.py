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

    python -m agentrun.offline netns -- python bench/first_turn.py [--rounds 5] [--engines a,b]
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


async def library_turn(name: str, url: str, home: Path) -> Timing:
    engine, options = embedded_engine(name, url, home)
    start = time.perf_counter()
    first: float | None = None
    async with engine.start(options) as session, session.turn(PROMPT, timeout=120) as turn:
        async for message in turn:
            text = message.type in (MessageType.TEXT, MessageType.TEXT_DELTA)
            if first is None and text and WORD in (message.text or ""):
                first = time.perf_counter() - start
            if message.type == MessageType.RESULT:
                result = time.perf_counter() - start
                break
        else:
            raise RuntimeError(f"{name}: the turn ended without a result")
    if first is None:
        raise RuntimeError(f"{name}: the model's word never arrived")
    return Timing(first, result)


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

    async def _line(self, proc: anyio.abc.Process) -> bytes | None:
        assert proc.stdout is not None
        while b"\n" not in self._buffer:
            try:
                self._buffer += await proc.stdout.receive()
            except anyio.EndOfStream:
                if self._buffer:
                    line, self._buffer = self._buffer, b""
                    return line
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    async def run(self) -> Timing:
        spec = self.captured.spec
        self._buffer = b""
        start = time.perf_counter()
        proc = await anyio.open_process(
            list(spec.argv),
            env=dict(spec.env or {}),
            cwd=spec.cwd,
            stdin=subprocess.PIPE if spec.stdin == "pipe" else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            with anyio.fail_after(120):
                first, result = await getattr(self, "_" + self.kind.replace("-", "_"))(proc, start)
        except TimeoutError:
            raise RuntimeError(f"{self.name}: the loop got no result in 120 s") from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the agent and whatever it started
            with anyio.CancelScope(shield=True):
                await proc.wait()
                await proc.aclose()
        return Timing(first, result)

    async def _claude(self, proc: anyio.abc.Process, start: float) -> tuple[float, float]:
        assert proc.stdin is not None
        for chunk in self.captured.writes:
            await proc.stdin.send(chunk)
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
                await proc.stdin.send(chunk)
            await proc.stdin.aclose()
        first: float | None = None
        while (line := await self._line(proc)) is not None:
            if first is None and WORD.encode() in line:
                first = time.perf_counter() - start
        if first is None:
            raise RuntimeError(f"{self.name}: the model's word never arrived")
        return first, time.perf_counter() - start

    async def _send(self, proc: anyio.abc.Process, message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        await proc.stdin.send(json.dumps(message).encode() + b"\n")

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


async def _measure(
    engines: tuple[str, ...], rounds: int, url: str, tmp: Path
) -> tuple[list[Row], dict[str, list[str]]]:
    rows: list[Row] = []
    extras: dict[str, list[str]] = {}
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
        for index in range(rounds):
            order = ("agentrun", "raw") if index % 2 == 0 else ("raw", "agentrun")
            for side in order:
                timing = await (library_turn(name, url, home) if side == "agentrun" else raw.run())
                sides[side].append(timing)
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
    return rows, extras


def measure(rounds: int, engines: tuple[str, ...] = ENGINES) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp, _server(Path(tmp)) as url:
        rows, extras = anyio.run(_measure, engines, rounds, url, Path(tmp))
    for name, methods in extras.items():
        if methods:
            print(f"{name}: before its first prompt the library also sent {', '.join(methods)}")
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
    args = parser.parse_args()
    print_table(measure(args.rounds, tuple(args.engines.split(","))))


if __name__ == "__main__":
    main()
