"""What the metering credential proxy adds to a model call: the same Anthropic Messages call to
the embedded model server, directly and through a ``CredentialProxy``, each in a process of its
own (``python -m agentrun.offline serve``; the proxy in a small child interpreter), so the caller
here only sends the request and reads the answer to its end.

Calls alternate between the two paths, each on a fresh connection (as the agents' clients do
after an idle pause; the proxy also opens a fresh connection upstream per call). Two answers:
a streamed one (about 4 KB of text in 80 events) and the same answer whole. Two more rows
put the proxy's own checks beside its CPU per call: the client-key check of one request, and
the redaction of the streamed answer (every piece searched for the real keys). One more row
times the streamed call through the proxy to an upstream over TLS (a relay in front of the
server, certificate from an authority made here, ``ca_file``) against the same relay without
TLS: what the handshake and the encryption add per call.

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
    ca_file = sys.argv[2] if len(sys.argv) > 2 else None
    keys = {"anthropic": "sk-ant-bench"}
    async with CredentialProxy(sys.argv[1], keys=keys, ca_file=ca_file) as proxy:
        print(proxy.port, proxy.client_key, flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


#: A child relaying each connection to the server's port (argv[1]), behind TLS when given a
#: certificate chain (argv[2]); prints its port.
RELAY_CHILD = """
import ssl, sys, anyio, anyio.abc
from anyio.streams.tls import TLSStream

HUNG_UP = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)

async def main(target, chain):
    context = None
    if chain:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(chain)

    async def relay(conn):
        async with conn:
            try:
                front = conn
                if context is not None:
                    front = await TLSStream.wrap(conn, server_side=True, ssl_context=context)
                async with await anyio.connect_tcp("127.0.0.1", target) as plain:
                    async with anyio.create_task_group() as tg:
                        async def upward():
                            try:
                                async for data in front:
                                    await plain.send(data)
                            except HUNG_UP:
                                pass
                        tg.start_soon(upward)
                        async for data in plain:
                            await front.send(data)
                        tg.cancel_scope.cancel()
                with anyio.move_on_after(5):
                    await front.aclose()
            except HUNG_UP:
                pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    print(listener.extra(anyio.abc.SocketAttribute.local_port), flush=True)
    await listener.serve(relay)

anyio.run(main, int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "")
"""


def _authority(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate authority's PEM file, and a chain (certificate and key) for
    ``localhost`` it issued."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentrun bench authority")])
    usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    ca_file, chain = directory / "ca.pem", directory / "localhost.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    chain.write_bytes(
        leaf.public_bytes(pem)
        + key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_file, chain


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
    assert admits("anthropic", request)[0]
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


async def _measure_tls(
    plain: tuple[int, int, str], tls: tuple[int, int, str], calls: int
) -> list[Row]:
    """The streamed call through the proxy to a relay over TLS, against the same relay in
    plain TCP (the relay's own hop in both)."""
    paths = {"plain": (plain[0], _request(True, plain[2].split()[1])),
             "tls": (tls[0], _request(True, tls[2].split()[1]))}  # fmt: skip
    times: dict[str, list[float]] = {"plain": [], "tls": []}
    for port, request in paths.values():  # warm-up
        for _ in range(5):
            await _call(port, request)
    for _ in range(calls):
        for name, (port, request) in paths.items():
            start = time.perf_counter()
            await _call(port, request)
            times[name].append(time.perf_counter() - start)
    answer = await _call(*paths["tls"])
    assert answer > 1000, "the proxy refused the call over TLS"
    base, median = statistics.median(times["plain"]), statistics.median(times["tls"])
    spread = (max(times["tls"]) - min(times["tls"])) / median
    return [
        Row(
            "proxy streamed TLS",
            f"the streamed call via the proxy to an upstream over TLS, {calls} calls",
            f"the same upstream relay in plain TCP ({base * 1000:.2f} ms)",
            median / base,
            median,
            spread,
        )
    ]


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
                rows = anyio.run(_measure, direct, proxied, calls)
            ca_file, chain = _authority(Path(tmp))
            relay = [sys.executable, "-c", RELAY_CHILD, str(direct[0])]
            with _process(relay) as plain_relay, _process([*relay, str(chain)]) as tls_relay:
                plain_url = f"http://localhost:{plain_relay[0]}"
                tls_url = f"https://localhost:{tls_relay[0]}"
                plain_proxy = [sys.executable, "-c", PROXY_CHILD, plain_url]
                tls_proxy = [sys.executable, "-c", PROXY_CHILD, tls_url, str(ca_file)]
                with _process(plain_proxy) as plain, _process(tls_proxy) as tls:
                    return rows + anyio.run(_measure_tls, plain, tls, calls)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    print_table(measure(parser.parse_args().calls))


if __name__ == "__main__":
    main()
