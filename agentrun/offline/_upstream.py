"""The metering proxy's HTTP/1.1 client: one request to an upstream model API, its answer read
as it arrives.

An :class:`Upstream` is a base URL (``http`` or ``https``, a host, a port, a path prefix put
before every forwarded path). :func:`exchange` connects (TLS for ``https``, bounded by a
connect timeout), writes the request with a fixed length and ``connection: close``, and reads
the status line and headers; :meth:`UpstreamAnswer.pipe` then hands the body on as it comes
(fixed length, chunked, or until the upstream closes), each read bounded by an idle timeout.
Anything that keeps the answer from arriving is an :class:`UpstreamFailure` with the words of
the failure (``Connection refused``, a TLS error, a timeout), never a hang.

TLS verifies the upstream's certificate and host name against :func:`tls_context`: the
system's trusted certificates (OpenSSL's defaults, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when
set), or those of a given PEM file in their place. Nothing turns the verification off.
"""

from __future__ import annotations

import math
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.tls import TLSStream

from .._vocabulary.errors import ConfigurationError

__all__ = [
    "Upstream",
    "UpstreamAnswer",
    "UpstreamFailure",
    "connect",
    "exchange",
    "tls_context",
]

#: Bounds on what an upstream's answer head may hold.
_MAX_LINE = 64 * 1024
_MAX_HEADERS = 200
_READ_SIZE = 64 * 1024
#: Most bytes of a file of trusted certificates (a system bundle is about 200 KB).
_MAX_CA_FILE = 16 * 1024 * 1024


class UpstreamFailure(Exception):
    """The upstream could not be reached or stopped answering; ``words`` say how."""

    def __init__(self, words: str) -> None:
        super().__init__(words)
        self.words = words


@dataclass(frozen=True)
class Upstream:
    """Where the proxy forwards: ``scheme://host:port`` and a path prefix (no trailing ``/``)."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Upstream:
        """An upstream of ``url``; anything but an ``http(s)://host[:port][/prefix]`` URL is a
        :class:`ConfigurationError`."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise ConfigurationError(
                f"upstream {url!r} is not a URL: {exc}", option="upstream"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(
                f"upstream {url!r} is not an http:// or https:// URL with a host",
                option="upstream",
            )
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ConfigurationError(
                f"upstream {url!r}: give the base URL only (no query, fragment or credentials)",
                option="upstream",
            )
        default = 443 if parts.scheme == "https" else 80
        return cls(parts.scheme, parts.hostname, port or default, parts.path.rstrip("/"))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass
class UpstreamAnswer:
    """The head of an upstream's answer, and its body to hand on (:meth:`pipe`)."""

    status: int
    #: Header names in lower case, in order.
    headers: list[tuple[str, str]]
    _stream: anyio.abc.ByteStream
    _reader: BufferedByteReceiveStream
    _idle_timeout: float
    _watch: anyio.CancelScope | None = None

    def header(self, name: str) -> str | None:
        value: str | None = None
        for key, val in self.headers:
            if key == name:
                value = val
        return value

    @property
    def length(self) -> int | None:
        """The body's declared length (``None``: chunked or until the upstream closes)."""
        if "chunked" in (self.header("transfer-encoding") or "").lower():
            return None
        text = self.header("content-length")
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    async def pipe(self, sink: Callable[[bytes], Awaitable[None]]) -> None:
        """Hand the body to ``sink`` piece by piece as it arrives; :class:`UpstreamFailure` if
        it stops, or nothing arrives for the idle timeout (the sink's own time not counted)."""
        with anyio.CancelScope() as watch:
            self._watch = watch
            try:
                async for piece in self._pieces():
                    watch.deadline = math.inf
                    await sink(piece)
            finally:
                self._watch = None
        if watch.cancelled_caught:
            raise UpstreamFailure(f"the upstream sent nothing for {self._idle_timeout:g} s")

    async def _pieces(self) -> AsyncIterator[bytes]:
        try:
            if self.status in (204, 304) or 100 <= self.status < 200:
                return
            if "chunked" in (self.header("transfer-encoding") or "").lower():
                async for piece in self._chunked():
                    yield piece
                return
            length = self.length
            if length is not None:
                left = length
                while left > 0:
                    piece = await self._read(min(left, _READ_SIZE))
                    left -= len(piece)
                    yield piece
                return
            while True:
                try:
                    piece = await self._read(_READ_SIZE)
                except UpstreamFailure as failure:
                    if isinstance(failure.__cause__, anyio.EndOfStream):
                        return  # close-delimited: the end of the body
                    raise
                yield piece
        except (anyio.IncompleteRead, anyio.DelimiterNotFound, ValueError) as exc:
            raise UpstreamFailure(f"the upstream's answer broke off: {exc!r}") from None

    async def _read(self, most: int) -> bytes:
        if self._watch is None:
            with anyio.move_on_after(self._idle_timeout):
                return await self._receive(most)
            raise UpstreamFailure(f"the upstream sent nothing for {self._idle_timeout:g} s")
        # One scope watches the whole body: a deadline moved per read costs less than a scope.
        self._watch.deadline = anyio.current_time() + self._idle_timeout
        return await self._receive(most)

    async def _receive(self, most: int) -> bytes:
        try:
            return await self._reader.receive(most)
        except anyio.EndOfStream as end:
            raise UpstreamFailure("the upstream closed the connection") from end
        except (anyio.BrokenResourceError, OSError, ssl.SSLError) as exc:
            raise UpstreamFailure(f"the upstream's answer broke off: {exc}") from None

    async def _line(self) -> bytes:
        if self._watch is None:
            with anyio.move_on_after(self._idle_timeout):
                return await self._receive_line()
            raise UpstreamFailure(f"the upstream sent nothing for {self._idle_timeout:g} s")
        self._watch.deadline = anyio.current_time() + self._idle_timeout
        return await self._receive_line()

    async def _receive_line(self) -> bytes:
        try:
            return await self._reader.receive_until(b"\r\n", _MAX_LINE)
        except anyio.DelimiterNotFound:
            raise UpstreamFailure("the upstream sent a line too long") from None
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            OSError,
            ssl.SSLError,
        ) as exc:
            raise UpstreamFailure(
                f"the upstream's answer broke off: {type(exc).__name__} {exc}".rstrip()
            ) from None

    async def _chunked(self) -> AsyncIterator[bytes]:
        while True:
            size = int((await self._line()).split(b";", 1)[0].strip(), 16)
            if size == 0:
                while await self._line():
                    pass  # trailers
                return
            left = size
            while left > 0:
                piece = await self._read(min(left, _READ_SIZE))
                left -= len(piece)
                yield piece
            if await self._line() != b"":
                raise UpstreamFailure("the upstream's chunked answer is malformed")

    async def aclose(self) -> None:
        # Without waiting for the upstream's TLS close: the answer's framing (or the upstream's
        # own close) has already said where it ends, and an upstream that never answers the
        # closing handshake must not hold the call, its ledger entry or the agent's connection.
        await anyio.aclose_forcefully(self._stream)


def tls_context(ca_file: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """The context that verifies an ``https`` upstream's certificate and host name: against
    the system's trusted certificates (OpenSSL's defaults: ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` when set), or, given ``ca_file``, against the PEM certificates in it
    alone. A ``ca_file`` that cannot be read or holds no certificate is a
    :class:`ConfigurationError`."""
    if ca_file is None:
        return ssl.create_default_context()
    path = Path(ca_file)
    try:
        if path.stat().st_size > _MAX_CA_FILE:
            raise ConfigurationError(
                f"ca_file {str(path)!r} is larger than {_MAX_CA_FILE >> 20} MB: "
                "no file of certificates",
                option="ca_file",
            )
        text = path.read_bytes().decode("ascii")
        # An empty cadata would quietly load the system's certificates instead.
        context = ssl.create_default_context(cadata=text) if text.strip() else None
    except FileNotFoundError:
        raise ConfigurationError(f"ca_file {str(path)!r}: no such file", option="ca_file") from None
    except OSError as exc:  # a directory, no permission (ssl.SSLError handled below)
        if isinstance(exc, ssl.SSLError):
            raise ConfigurationError(
                f"ca_file {str(path)!r} holds no PEM certificate: {_tls_words(exc)}",
                option="ca_file",
            ) from None
        raise ConfigurationError(
            f"ca_file {str(path)!r} cannot be read: {exc.strerror or exc}", option="ca_file"
        ) from None
    except UnicodeDecodeError:
        raise ConfigurationError(
            f"ca_file {str(path)!r} is not PEM text (binary DER? convert it with "
            "`openssl x509 -inform der`)",
            option="ca_file",
        ) from None
    if context is None or not context.cert_store_stats()["x509"]:
        raise ConfigurationError(
            f"ca_file {str(path)!r} holds no PEM certificate", option="ca_file"
        )
    return context


def _tls_words(exc: ssl.SSLError) -> str:
    """A TLS failure in OpenSSL's words, without its source location."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    return str(exc.strerror or exc).split(" (_ssl.c:", 1)[0]


def _words(exc: BaseException) -> str:
    """What went wrong, as the system said it (anyio puts the cause of a failed connect under
    its own "All connection attempts failed", and a TLS failure under a broken stream)."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, ssl.SSLError):  # its errno is OpenSSL's, no system error
        return f"TLS: {_tls_words(cause)}"
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno)
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return str(cause) or type(cause).__name__


async def connect(
    upstream: Upstream, timeout: float, tls: ssl.SSLContext | None = None
) -> anyio.abc.ByteStream:
    """A connection to ``upstream`` (TLS for ``https``, verified by ``tls``, default
    :func:`tls_context`), or :class:`UpstreamFailure`. ``timeout`` bounds the handshake too."""
    plain: anyio.abc.SocketStream | None = None
    with anyio.move_on_after(timeout):
        try:
            plain = await anyio.connect_tcp(upstream.host, upstream.port)
            if upstream.scheme != "https":
                return plain
            return await TLSStream.wrap(
                plain, hostname=upstream.host, ssl_context=tls or tls_context()
            )
        except BaseException as exc:  # the handshake failed, timed out or was cancelled
            if plain is not None:
                await anyio.aclose_forcefully(plain)
            if isinstance(exc, (OSError, anyio.BrokenResourceError)):  # ssl.SSLError too
                raise UpstreamFailure(f"cannot connect to {upstream.url}: {_words(exc)}") from None
            raise
    if plain is not None:  # connected, but no TLS came back: a plain port, or a stalled one
        raise UpstreamFailure(
            f"cannot connect to {upstream.url}: no answer to the TLS handshake in {timeout:g} s"
            " (does this port speak TLS?)"
        )
    raise UpstreamFailure(f"cannot connect to {upstream.url}: no answer in {timeout:g} s")


async def exchange(
    upstream: Upstream,
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    *,
    connect_timeout: float,
    idle_timeout: float,
    tls: ssl.SSLContext | None = None,
) -> UpstreamAnswer:
    """Send one request (``target``: the path and query after the upstream's prefix) and read
    its answer's head. The caller reads the body and closes the answer."""
    stream = await connect(upstream, connect_timeout, tls)
    try:
        lines = [f"{method} {upstream.prefix}{target} HTTP/1.1", f"host: {upstream.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers]
        lines += [f"content-length: {len(body)}", "connection: close"]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            await stream.send(head + body)
        except (anyio.BrokenResourceError, OSError, ssl.SSLError) as exc:
            raise UpstreamFailure(f"the upstream dropped the request: {exc}") from None
        answer = UpstreamAnswer(0, [], stream, BufferedByteReceiveStream(stream), idle_timeout)
        while True:
            status_line = (await answer._line()).decode("latin-1")  # pyright: ignore[reportPrivateUsage]
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise UpstreamFailure(f"the upstream answered no HTTP: {status_line[:200]!r}")
            answer.status = int(parts[1])
            answer.headers = []
            while line := await answer._line():  # pyright: ignore[reportPrivateUsage]
                name, sep, value = line.decode("latin-1").partition(":")
                if not sep or len(answer.headers) >= _MAX_HEADERS:
                    raise UpstreamFailure("the upstream's answer has malformed headers")
                answer.headers.append((name.strip().lower(), value.strip()))
            if answer.status != 100:
                return answer
    except BaseException:
        await anyio.aclose_forcefully(stream)
        raise
