"""The credential proxy to an upstream over TLS, as to the providers' real APIs, offline.

The embedded model server is put behind TLS on ``127.0.0.1`` by a small terminating relay,
with a certificate for ``localhost`` issued by a certificate authority made for the test; the
proxy forwards to ``https://localhost:PORT`` and trusts that authority through ``ca_file``.
Real agents take turns through it; a certificate the proxy does not trust, or one for another
host name, gets the agent a 502 in words before any request (so any key) is sent."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import pytest
from agents_support import require_engine
from anyio.streams.tls import TLSStream
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from model_client import Reply, exchange, raw_request

from agentrun import ConfigurationError, CredentialProxy, run_turn
from agentrun.offline import ModelServer, ModelTurn, Script, ScriptUsage, embedded_engine

pytestmark = pytest.mark.anyio

#: The caller's real keys: only the upstream may see them.
KEYS = {"anthropic": "sk-ant-real-tls-4f1d", "openai": "sk-real-tls-93ab"}
STREAMED = (
    "/v1/messages",
    {"model": "claude-x", "stream": True, "messages": [], "max_tokens": 10},
)


_AUTHORITY_USAGE = x509.KeyUsage(
    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
    key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
    decipher_only=False,
)  # fmt: skip


class Authority:
    """A throwaway certificate authority, and the server certificates it issues."""

    def __init__(self, directory: Path, name: str = "agentrun test authority") -> None:
        self.directory = directory
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        public = self._key.public_key()
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_AUTHORITY_USAGE, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server's TLS context with a certificate for the DNS name ``host``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        issuer_key = self.certificate.public_key()
        assert isinstance(issuer_key, ec.EllipticCurvePublicKey)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        chain = self.directory / f"{host}.pem"
        chain.write_bytes(
            certificate.public_bytes(serialization.Encoding.PEM)
            + key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(chain)
        return context


@dataclass
class TlsFront:
    """What the TLS relay in front of a model server saw."""

    port: int
    #: Connections whose TLS handshake completed (only these are relayed).
    handshakes: int = 0
    #: Handshakes that failed, in the server's words.
    refused: list[str] = field(default_factory=list[str])
    #: Set to let a ``hold_open`` relay close its connections.
    release: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"


#: How a connection's other side hanging up shows.
_HUNG_UP = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


async def _pipe(tls: TLSStream, port: int) -> None:
    """Relay one connection's bytes to the plain server on ``port`` and back, until the server
    closes (the proxy asks for ``connection: close``)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as plain:
        async with anyio.create_task_group() as tg:

            async def upward() -> None:
                try:
                    async for data in tls:
                        await plain.send(data)
                except _HUNG_UP:
                    tg.cancel_scope.cancel()

            tg.start_soon(upward)
            async for data in plain:
                await tls.send(data)
            tg.cancel_scope.cancel()


@asynccontextmanager
async def tls_front(
    server: ModelServer, context: ssl.SSLContext, *, hold_open: bool = False
) -> AsyncIterator[TlsFront]:
    """The model server behind TLS on 127.0.0.1: each connection's handshake, then its bytes
    relayed both ways. ``hold_open``: once the server has answered, keep the connection open
    without a TLS close (until ``front.release``), as a middlebox that never answers the
    closing handshake."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    front = TlsFront(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def relay(conn: anyio.abc.SocketStream) -> None:
        async with conn:
            try:
                with anyio.fail_after(30):
                    tls = await TLSStream.wrap(conn, server_side=True, ssl_context=context)
            except (ssl.SSLError, OSError, anyio.BrokenResourceError, TimeoutError) as exc:
                front.refused.append(str(exc))
                return
            front.handshakes += 1
            try:
                await _pipe(tls, server.port)
                if hold_open:
                    await front.release.wait()
                with anyio.move_on_after(30):
                    await tls.aclose()
            except _HUNG_UP:
                pass  # the proxy hung up first: it need not wait for the TLS close

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, relay)
        yield front
        tg.cancel_scope.cancel()


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    directory = tmp_path / "authority"
    directory.mkdir()
    return Authority(directory)


async def _post(proxy: CredentialProxy, client_key: str) -> Reply:
    headers = {"x-api-key": client_key, "anthropic-version": "2023-06-01"}
    with anyio.fail_after(60):
        (reply,) = await exchange(proxy.port, [raw_request(*STREAMED, headers=headers)])
    return reply


def _files_holding(root: Path, secret: str) -> list[Path]:
    """Every file under ``root`` that holds ``secret`` (files of at most 16 MB read)."""
    found: list[Path] = []
    for path in root.rglob("*"):
        readable = path.is_file() and not path.is_symlink() and path.stat().st_size <= 16 << 20
        if readable and secret.encode() in path.read_bytes():
            found.append(path)
    return found


# ------------------------------------------------------------------ real agents over TLS


@pytest.mark.agent
@pytest.mark.parametrize("engine", ["claude", "codex"])
async def test_an_agent_s_turn_through_the_proxy_to_a_tls_upstream(
    engine: str, authority: Authority, tmp_path: Path
) -> None:
    require_engine(engine)
    usage = ScriptUsage(input_tokens=640, cache_read_tokens=0, cache_write_tokens=0,
                        output_tokens=17)  # fmt: skip
    script = Script(turns=[ModelTurn.text("Over TLS.", usage=usage)])
    context = authority.server_context("localhost")
    async with ModelServer(script) as server, tls_front(server, context) as front:
        async with CredentialProxy(front.url, keys=KEYS, ca_file=authority.ca_file) as proxy:
            client = proxy.client("tls")
            agent, options = embedded_engine(
                engine, proxy.url, tmp_path / "agent", api_key=client.key, meter=client
            )
            async with agent.start(options) as session:
                summary = await run_turn(session, "say it", timeout=120)
    assert summary.ok and proxy.failures == [] and front.refused == []
    assert "Over TLS." in (summary.text or "")
    metered = summary.metered
    served = server.ledger.since(0).main
    assert metered is not None and metered.agrees
    assert metered.usage == served.usage and metered.calls == len(served) >= 1
    assert front.handshakes == len(server.requests)  # every request came over TLS
    real = KEYS["anthropic" if engine == "claude" else "openai"]
    for request in server.requests:  # the real key reached the upstream, the agent's did not
        sent = request.headers.get("x-api-key") or request.headers.get("authorization", "")
        assert real in sent and client.key not in sent
    assert real not in str(options.env) and real not in repr(proxy)
    assert _files_holding(tmp_path / "agent", real) == []


# ------------------------------------------------------------------ certificates refused


async def test_an_untrusted_certificate_is_a_502_in_tls_words_before_the_key_is_sent(
    authority: Authority, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    other = Authority(stranger, "another authority")
    # The upstream's certificate is the other authority's; the proxy trusts the first one.
    async with ModelServer(Script.of("never")) as server:
        async with tls_front(server, other.server_context("localhost")) as front:
            async with CredentialProxy(front.url, keys=KEYS, ca_file=authority.ca_file) as proxy:
                reply = await _post(proxy, proxy.client_key)
    _refused_in_tls_words(reply, proxy, front, server, "certificate verify failed")
    assert "unable to get local issuer certificate" in proxy.failures[0]


async def test_the_system_s_trust_alone_refuses_a_private_authority(
    authority: Authority,
) -> None:
    async with ModelServer(Script.of("never")) as server:
        async with tls_front(server, authority.server_context("localhost")) as front:
            async with CredentialProxy(front.url, keys=KEYS) as proxy:
                reply = await _post(proxy, proxy.client_key)
    _refused_in_tls_words(reply, proxy, front, server, "certificate verify failed")


async def test_a_certificate_for_another_host_name_is_refused(authority: Authority) -> None:
    async with ModelServer(Script.of("never")) as server:
        context = authority.server_context("api.example.com")
        async with tls_front(server, context) as front:
            async with CredentialProxy(front.url, keys=KEYS, ca_file=authority.ca_file) as proxy:
                reply = await _post(proxy, proxy.client_key)
    _refused_in_tls_words(reply, proxy, front, server, "Hostname mismatch")
    assert "'localhost'" in proxy.failures[0]


def _refused_in_tls_words(
    reply: Reply, proxy: CredentialProxy, front: TlsFront, server: ModelServer, words: str
) -> None:
    assert reply.status == 502
    message: str = reply.json()["error"]["message"]
    assert words in message and front.url in message
    assert len(proxy.failures) == 1 and words in proxy.failures[0]
    assert [entry.status for entry in proxy.ledger.entries] == [502]
    # The handshake failed before a byte of the request went out: no key was sent.
    assert front.handshakes == 0 and len(front.refused) == 1
    assert server.requests == []


async def test_ssl_cert_file_names_the_authority_trusted_by_default(
    authority: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``ca_file`` the proxy trusts what OpenSSL's defaults trust, so a CA bundle named
    by ``SSL_CERT_FILE`` (the way to reach the command line's proxy too) is honoured."""
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
    async with ModelServer(Script.of("Trusted.")) as server:
        async with tls_front(server, authority.server_context("localhost")) as front:
            async with CredentialProxy(front.url, keys=KEYS) as proxy:
                reply = await _post(proxy, proxy.client_key)
    assert reply.status == 200 and "Trusted." in reply.body.decode()
    assert proxy.failures == [] and front.handshakes == 1
    assert server.requests[0].headers["x-api-key"] == KEYS["anthropic"]


async def test_https_to_a_port_without_tls_says_the_handshake_went_unanswered() -> None:
    """The model server in plain HTTP waits for a request line that a TLS hello never ends."""
    async with ModelServer(Script.of("never")) as server:
        plain_port = f"https://localhost:{server.port}"
        async with CredentialProxy(plain_port, keys=KEYS, connect_timeout=0.5) as proxy:
            reply = await _post(proxy, proxy.client_key)
    assert reply.status == 502
    (failure,) = proxy.failures
    assert failure == (
        f"cannot connect to {plain_port}: no answer to the TLS handshake in 0.5 s "
        "(does this port speak TLS?)"
    )
    assert failure in reply.json()["error"]["message"]
    assert server.requests == []


async def test_check_upstream_refuses_an_untrusted_certificate_in_words(
    authority: Authority,
) -> None:
    async with ModelServer(Script.of("never")) as server:
        async with tls_front(server, authority.server_context("localhost")) as front:
            async with CredentialProxy(front.url, keys=KEYS) as proxy:
                with pytest.raises(ConfigurationError, match="certificate verify failed"):
                    await proxy.check_upstream("anthropic")
                async with CredentialProxy(
                    front.url, keys=KEYS, ca_file=authority.ca_file
                ) as trusting:
                    await trusting.check_upstream("anthropic")
    assert front.handshakes == 1


# ------------------------------------------------------------------ the upstream's TLS close


async def test_an_upstream_that_never_closes_its_tls_does_not_hold_the_agent(
    authority: Authority,
) -> None:
    """The answer is whole once its framing says so: the proxy does not wait for the
    upstream's TLS close, so the ledger has the call and the agent's next request on the same
    connection is answered."""
    script = Script(turns=[ModelTurn.text("One."), ModelTurn.text("Two.")])
    context = authority.server_context("localhost")
    async with ModelServer(script) as server:
        async with tls_front(server, context, hold_open=True) as front:
            async with CredentialProxy(front.url, keys=KEYS, ca_file=authority.ca_file) as proxy:
                headers = {"x-api-key": proxy.client_key, "anthropic-version": "2023-06-01"}
                requests = [
                    raw_request(*STREAMED, headers=headers, close=False),
                    raw_request(*STREAMED, headers=headers),
                ]
                try:
                    with anyio.fail_after(60):  # a proxy waiting for the TLS close waits here
                        replies = await exchange(proxy.port, requests)
                finally:
                    front.release.set()  # else the proxy could not close either
    assert [reply.status for reply in replies] == [200, 200]
    assert ["One." in reply.body.decode() for reply in replies] == [True, False]
    assert [entry.complete for entry in proxy.ledger.entries] == [True, True]
    assert proxy.failures == [] and front.handshakes == 2


# ------------------------------------------------------------------ the authority given


def test_a_ca_file_that_does_not_exist_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ca.pem"
    with pytest.raises(ConfigurationError, match=r"no-such-ca\.pem") as raised:
        CredentialProxy("https://localhost:9", keys=KEYS, ca_file=missing)
    assert raised.value.option == "ca_file"


@pytest.mark.parametrize(
    "content",
    [b"", b"not a certificate\n", b"-----BEGIN CERTIFICATE-----\nbm90IGRlcg==\n"
     b"-----END CERTIFICATE-----\n", b"\x30\x82\x01\x0a\xff"],
    ids=["empty", "text", "broken-pem", "der"],
)  # fmt: skip
def test_a_ca_file_that_is_no_pem_certificate_is_a_configuration_error(
    content: bytes, tmp_path: Path
) -> None:
    bad = tmp_path / "bad-ca.pem"
    bad.write_bytes(content)
    with pytest.raises(ConfigurationError, match=r"bad-ca\.pem") as raised:
        CredentialProxy("https://localhost:9", keys=KEYS, ca_file=bad)
    assert raised.value.option == "ca_file"


def test_a_ca_file_that_is_a_directory_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ca_file") as raised:
        CredentialProxy("https://localhost:9", keys=KEYS, ca_file=tmp_path)
    assert raised.value.option == "ca_file"


def test_the_ca_file_is_shown_but_no_key(authority: Authority) -> None:
    proxy = CredentialProxy("https://localhost:9", keys=KEYS, ca_file=authority.ca_file)
    assert str(authority.ca_file) in repr(proxy)
    assert not any(key in repr(proxy) for key in KEYS.values())
