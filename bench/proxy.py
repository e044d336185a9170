"""What the metering credential proxy adds to a model call: the same Anthropic Messages call to
the embedded model server, directly and through a ``CredentialProxy``, each in a process of its
own (``python -m agentrun.offline serve``; the proxy in a small child interpreter), so the caller
here only sends the request and reads the answer to its end.

Calls alternate between the two paths, each on a fresh connection (as the agents' clients do
after an idle pause; the proxy also opens a fresh connection upstream per call). Two answers:
a streamed one (about 4 KB of text in 80 events) and the same answer whole. Two more rows
put the proxy's own checks beside its CPU per call: the client-key check of one request, and
the redaction of the streamed answer (every piece searched for the real keys).

    python bench/proxy.py [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
from _common import Row, print_table

TEXT = "The proxy passes every byte on. " * 128  # about 4 KB

#: A child interpreter running the proxy in front of the server; prints its port.
PROXY_CHILD = """
import sys, anyio
from agentrun import CredentialProxy

async def main():
    async with CredentialProxy(sys.argv[1], keys={"anthropic": "sk-ant-bench"}) as proxy:
        print(proxy.port, proxy.client_key, flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _process(argv: list[str]) -> Iterator[tuple[int, int, str]]:
    """A child that prints its port on its first line (the proxy: and its client key): its
    port, pid and that line, the child stopped after."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        first = child.stdout.readline().strip()
        yield int(first.rsplit(":", 1)[-1].split()[0]), child.pid, first
    finally:
        child.terminate()
        child.wait(timeout=10)


def _request(streamed: bool, key: str) -> bytes:
    body = json.dumps(
        {"model": "claude-bench", "stream": streamed, "max_tokens": 1000, "messages": []}
    ).encode()
    head = (
        "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"x-api-key: {key}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _call(port: int, request: bytes) -> int:
    received = 0
    async with await anyio.connect_tcp("127.0.0.1", port) as conn:
        await conn.send(request)
        while True:
            try:
                received += len(await conn.receive())
            except anyio.EndOfStream:
                return received


def _checks_per_call(proxy_cpu: float, calls: int) -> list[Row]:
    """The client-key check of one request, and the redaction of one streamed answer (its
    pieces as the proxy received them), against the proxy's CPU per streamed call."""
    from agentrun import CredentialProxy
    from agentrun.offline._http import HttpRequest
    from agentrun.offline._proxy import _StreamScrubber  # pyright: ignore[reportPrivateUsage]

    proxy = CredentialProxy("http://127.0.0.1:9", keys={"anthropic": "sk-ant-bench"})
    request = HttpRequest(
        "POST", "/v1/messages", "HTTP/1.1", [("x-api-key", proxy.client_key)], b"{}"
    )
    admits = proxy._admits  # pyright: ignore[reportPrivateUsage]
    assert admits("anthropic", request)
    rounds = 20_000
    start = time.process_time()
    for _ in range(rounds):
        admits("anthropic", request)
    check = (time.process_time() - start) / rounds
    event = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"' + TEXT[:52].encode() + b'"}}\n\n'
    )
    start = time.process_time()
    for _ in range(calls):
        scrubber = _StreamScrubber([b"sk-ant-bench"], b"[redacted key]")
        for _ in range(80):
            scrubber.feed(event)
        scrubber.close()
    scrub = (time.process_time() - start) / calls
    return [
        Row("proxy key check", "the client-key check of one request",
            "the proxy's CPU per streamed call", check / proxy_cpu, check, 0.0),
        Row("proxy stream scrub", "redacting one streamed answer (80 events)",
            "the proxy's CPU per streamed call", scrub / proxy_cpu, scrub, 0.0),
    ]  # fmt: skip


async def _measure(
    direct: tuple[int, int, str], proxied: tuple[int, int, str], calls: int
) -> list[Row]:
    """Wall time per call through the proxy against the direct call; and the CPU the proxy
    spends per call against the CPU the model server spends answering it."""
    rows: list[Row] = []
    checks: list[Row] = []
    key = proxied[2].split()[1]
    for streamed in (True, False):
        request = _request(streamed, key)
        times: dict[str, list[float]] = {"direct": [], "proxy": []}
        for _ in range(5):  # warm-up
            await _call(direct[0], request)
            await _call(proxied[0], request)
        server_cpu, proxy_cpu = _cpu_seconds(direct[1]), _cpu_seconds(proxied[1])
        for _ in range(calls):
            for name, port in (("direct", direct[0]), ("proxy", proxied[0])):
                start = time.perf_counter()
                await _call(port, request)
                times[name].append(time.perf_counter() - start)
        server_cpu = (_cpu_seconds(direct[1]) - server_cpu) / (2 * calls)
        proxy_cpu = (_cpu_seconds(proxied[1]) - proxy_cpu) / calls
        base = statistics.median(times["direct"])
        median = statistics.median(times["proxy"])
        spread = (max(times["proxy"]) - min(times["proxy"])) / median
        kind = "streamed" if streamed else "whole"
        answer = await _call(proxied[0], request)
        assert answer > 1000, "the proxy refused the call"
        rows.append(
            Row(
                f"proxy {kind}",
                f"Anthropic call via CredentialProxy, {calls} calls",
                f"the same call direct ({base * 1000:.2f} ms)",
                median / base,
                median,
                spread,
            )
        )
        rows.append(
            Row(
                f"proxy CPU {kind}",
                "the proxy's CPU per call",
                "the model server's CPU per call",
                proxy_cpu / server_cpu,
                proxy_cpu,
                0.0,
            )
        )
        if streamed:
            checks = _checks_per_call(proxy_cpu, calls)
    return rows + checks


def measure(calls: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="agentrun-bench-") as tmp:
        script = Path(tmp) / "script.json"
        turn = {"blocks": [{"type": "text", "text": TEXT}], "chunk_chars": 52, "repeat": 100000}
        script.write_text(json.dumps({"turns": [turn]}))
        serve = [sys.executable, "-m", "agentrun.offline", "serve", "--quiet"]
        serve += ["--script", str(script)]
        with _process([*serve, "--port", "0"]) as direct:
            url = f"http://127.0.0.1:{direct[0]}"
            with _process([sys.executable, "-c", PROXY_CHILD, url]) as proxied:
                return anyio.run(_measure, direct, proxied, calls)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    print_table(measure(parser.parse_args().calls))


if __name__ == "__main__":
    main()
