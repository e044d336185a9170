"""The metering credential proxy: agents reach the model APIs through it, with a key of its own.

:class:`CredentialProxy` listens on ``127.0.0.1`` (or a Unix socket) and speaks the four model
APIs the model server speaks (Anthropic Messages, OpenAI Responses, Chat Completions, the
Gemini API) by forwarding every request to an upstream: the provider's real URL by default,
any API-compatible URL on request (the embedded :class:`~agentrun.offline.ModelServer` in
tests). On the way it

* **admits only its agent**: each proxy mints a random client key
  (:attr:`CredentialProxy.client_key`) that is the agent's API key. A request that does not
  carry it where its provider's key goes (Anthropic ``x-api-key``, OpenAI ``authorization:
  Bearer``, Gemini ``x-goog-api-key`` or ``?key=``) is refused with a 401 in the provider's
  own error shape: not forwarded, not metered, counted in :attr:`CredentialProxy.unauthorized`.
  So no other process that can reach the port spends the caller's key;
* **swaps the key**: the client key is dropped (with every other key header) and the real one
  put on the upstream request, in the header its provider reads. The real keys come from the
  caller's environment (``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``, ``GEMINI_API_KEY`` or
  ``GOOGLE_API_KEY``) or are given; the agent never needs them. Every answer has every real
  key replaced before the agent sees it (a streamed one too, a key split across its pieces
  included), and so has every error the proxy writes;
* **meters**: every model request (streamed or not) becomes a
  :class:`~agentrun.offline.LedgerEntry` of :attr:`CredentialProxy.ledger` with the usage its
  answer carried, read by the same API dialects that write it in the model server; side
  requests (titles, prompt suggestions) are flagged as the model server flags them;
* **enforces a budget**: once the tokens or the cost metered reach ``max_tokens`` or
  ``max_cost_usd``, every further model call is refused in the provider's own error shape
  (Anthropic 400 ``invalid_request_error``, OpenAI 429 ``insufficient_quota``, Gemini 429
  ``RESOURCE_EXHAUSTED``), which the agents do not retry and the library reads as
  :class:`~agentrun.QuotaExceededError`. Calls already in flight finish;
* **verifies TLS**: an ``https`` upstream's certificate and host name are checked against the
  system's trusted certificates (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set) or, given
  ``ca_file``, those of that PEM file alone (a TLS-inspecting corporate proxy's authority);
  there is no way to turn the check off;
* **fails in words**: an upstream that cannot be reached or stops answering gets the agent a
  502 in the provider's shape with the upstream's words (``Connection refused``, a timeout,
  ``TLS: certificate verify failed: ...``),
  and the words are kept in :attr:`CredentialProxy.failures`. Nothing waits without bound:
  connecting and every read have timeouts.

OAuth logins (Claude.ai / ChatGPT subscriptions) are out of scope: the proxy swaps API keys.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import ssl
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import parse_qsl, urlencode

import anyio
import anyio.abc

from .._vocabulary.errors import ConfigurationError, UsageError
from .._vocabulary.messages import Usage
from .._vocabulary.metering import MeteredUsage, UsageMeter
from .._vocabulary.prices import PriceCatalog, default_prices
from .._vocabulary.sandbox import Sandbox
from .._vocabulary.summary import TurnSummary
from ._dialects import DIALECTS, Dialect
from ._http import BackgroundServer, HttpRequest, Limits, Responder, serve_connection
from ._ledger import ZERO_USAGE, Ledger, LedgerEntry, LedgerSlice
from ._requests import DEFAULT_SIDE_REQUESTS, ApiKind, SideRequest, classify
from ._script import HttpError
from ._upstream import (
    Upstream,
    UpstreamAnswer,
    UpstreamFailure,
    connect,
    exchange,
    tls_context,
)

__all__ = [
    "DEFAULT_UPSTREAMS",
    "KEY_VARIABLES",
    "CredentialProxy",
    "Provider",
    "ProxyClient",
    "usage_disagreement",
]

#: Whose key a request needs: Anthropic, OpenAI (Responses and Chat Completions) or Google.
Provider = Literal["anthropic", "openai", "gemini"]

#: The environment variables a provider's real key is read from, first found wins.
KEY_VARIABLES: dict[Provider, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}

#: Each provider's real API, where the proxy forwards when no upstream is given.
DEFAULT_UPSTREAMS: dict[Provider, str] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
    "gemini": "https://generativelanguage.googleapis.com",
}

#: The port the proxy's Unix socket has inside an agent's sandbox (a network namespace of its
#: own: any port will do).
SANDBOX_PROXY_PORT = 8089

#: What every client key begins with, so one seen in a log says where it belongs.
_CLIENT_KEY_PREFIX = "agentrun-proxy-"
#: The key every agent was given before each proxy minted its own; the proxy refuses it.
_OLD_PLACEHOLDER_KEY = "agentrun-proxy-placeholder-key"


def __getattr__(name: str) -> str:
    if name == "PLACEHOLDER_KEY":
        warnings.warn(
            "PLACEHOLDER_KEY is deprecated: the proxy refuses it; give the agent "
            "CredentialProxy.client_key",
            DeprecationWarning,
            stacklevel=2,
        )
        return _OLD_PLACEHOLDER_KEY
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The dialect whose error shape answers a request of each provider that is no model call.
_SHAPE: dict[Provider, ApiKind] = {
    "anthropic": "anthropic",
    "openai": "responses",
    "gemini": "gemini",
}
#: Headers that carry a key (dropped) or belong to one connection (not forwarded).
_AUTH_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key"})
_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "accept-encoding",
        "expect",
    }
)
_REDACTED = "[redacted key]"
#: Most bytes of an answer that is not a stream the proxy holds (it reads the usage of it).
_MAX_WHOLE_ANSWER = 64 * 1024 * 1024
#: Most bytes of one server-sent event kept while looking for its end.
_MAX_EVENT = 16 * 1024 * 1024


def _provider_of(api: ApiKind, request: HttpRequest) -> Provider:
    if api == "anthropic":
        return "anthropic"
    if api == "gemini":
        return "gemini"
    if api in ("responses", "chat"):
        return "openai"
    if api == "count_tokens":
        return "gemini" if ":" in request.path else "anthropic"
    if request.header("x-api-key") is not None or request.header("anthropic-version"):
        return "anthropic"
    if (
        request.header("x-goog-api-key") is not None
        or request.path.startswith("/v1beta")
        or any(name == "key" for name, _ in parse_qsl(request.query))
    ):
        return "gemini"
    return "openai"


def _known_providers(given: Mapping[str, str], option: str) -> dict[str, str]:
    unknown = sorted(set(given) - set(KEY_VARIABLES))
    if unknown:
        raise ConfigurationError(
            f"{option}: unknown provider {', '.join(unknown)} (known: {', '.join(KEY_VARIABLES)})",
            option=option,
        )
    return dict(given)


def _keys_from_environment() -> dict[str, str]:
    keys: dict[str, str] = {}
    for provider, names in KEY_VARIABLES.items():
        for name in names:
            value = os.environ.get(name, "").strip()
            if value:
                keys[provider] = value
                break
    return keys


def _json_object(body: bytes) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        value: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def _budget_error(provider: Provider, why: str) -> HttpError:
    message = f"agentrun proxy: quota exceeded, the budget is spent ({why})"
    if provider == "anthropic":
        # What Anthropic answers an account without credit: no agent retries a 400.
        return HttpError(status=400, message=message, error_type="invalid_request_error")
    if provider == "openai":
        return HttpError(status=429, message=message, code="insufficient_quota")
    # Gemini CLI retries a 429 for minutes unless its words say nothing is left ("limit: 0").
    message += "; left under the limit: 0"
    return HttpError(status=429, message=message, error_type="RESOURCE_EXHAUSTED")


def _check_budget(max_tokens: int | None, max_cost_usd: float | None) -> None:
    for value in (max_tokens, max_cost_usd):
        if value is not None and not value > 0:
            raise ConfigurationError("a proxy budget must be above 0", option="budget")


def _tokens(usage: Usage) -> int:
    """Every token of ``usage`` a budget counts: input, cache reads and writes, output."""
    return sum(
        figure or 0
        for figure in (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
        )
    )


def _spent(
    spent: LedgerSlice, max_tokens: int | None, max_cost_usd: float | None, prices: PriceCatalog
) -> str | None:
    """Why a budget of ``max_tokens`` / ``max_cost_usd`` is spent by ``spent``, or ``None``."""
    tokens = _tokens(spent.usage)
    if max_tokens is not None and tokens >= max_tokens:
        return f"{tokens} tokens of {max_tokens}"
    if max_cost_usd is not None:
        cost = spent.cost(prices=prices)
        if cost is None:
            return "a model called has no price in the catalog"
        if cost >= max_cost_usd:
            return f"${cost:.4f} of ${max_cost_usd:.4f}"
    return None


def _presented_keys(provider: Provider, request: HttpRequest) -> list[str]:
    """The keys ``request`` carries where ``provider``'s API reads its key."""
    if provider == "anthropic":
        value = request.header("x-api-key")
        return [] if value is None else [value]
    if provider == "openai":
        scheme, _, token = (request.header("authorization") or "").strip().partition(" ")
        return [token.strip()] if scheme.lower() == "bearer" else []
    query = parse_qsl(request.query, keep_blank_values=True)
    keys = [value for name, value in query if name == "key"]
    value = request.header("x-goog-api-key")
    return keys if value is None else [value, *keys]


#: Where each provider's key goes, as the refusal of a request without the client key says.
_KEY_PLACE: dict[Provider, str] = {
    "anthropic": "x-api-key",
    "openai": "authorization: Bearer",
    "gemini": "x-goog-api-key or ?key=",
}


def _unauthorized_error(provider: Provider) -> HttpError:
    message = (
        f"agentrun proxy: the request does not carry this proxy's client key "
        f"({_KEY_PLACE[provider]})"
    )
    if provider == "anthropic":
        return HttpError(status=401, message=message, error_type="authentication_error")
    if provider == "openai":
        return HttpError(
            status=401, message=message, error_type="invalid_request_error", code="invalid_api_key"
        )
    return HttpError(status=401, message=message, error_type="UNAUTHENTICATED")


def _redact(data: bytes, keys: Iterable[bytes], redacted: bytes) -> bytes:
    """``data`` with every key in ``keys`` replaced by ``redacted`` (an empty key is none)."""
    for key in keys:
        if key and key in data:
            data = data.replace(key, redacted)
    return data


class _StreamScrubber:
    """Replaces every real key in a stream handed on piece by piece, a key split across pieces
    included: the end of what came so far that could begin a key is held back until the next
    piece shows whether it does (or the stream ends)."""

    def __init__(self, keys: Sequence[bytes], redacted: bytes) -> None:
        self._keys = [key for key in keys if key]
        self._redacted = redacted
        self._longest = max((len(key) for key in self._keys), default=0)
        self._held = b""

    def feed(self, piece: bytes) -> bytes:
        """What of ``piece`` (and of what was held back) can be handed on now."""
        if not self._keys:
            return piece
        data = _redact(self._held + piece if self._held else piece, self._keys, self._redacted)
        keep = self._partial_key_start(data)
        self._held = data[keep:]
        return data[:keep]

    def close(self) -> bytes:
        """What was held back: the stream ended, so no key can be completed."""
        held, self._held = self._held, b""
        return held

    def _partial_key_start(self, data: bytes) -> int:
        """Where the earliest end of ``data`` begins that is the start of a key (else its
        length)."""
        window = max(0, len(data) - self._longest + 1)
        earliest = len(data)
        for key in self._keys:
            at = data.find(key[:1], window)
            while 0 <= at < earliest:
                if key.startswith(data[at:]):
                    earliest = at
                    break
                at = data.find(key[:1], at + 1)
        return earliest


class _EventUsage:
    """Reads the usage of a server-sent event stream as it passes, piece by piece."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._pending = b""
        self.usage: dict[str, Any] | None = None

    def feed(self, piece: bytes) -> None:
        self._pending += piece.replace(b"\r\n", b"\n")
        while True:
            end = self._pending.find(b"\n\n")
            if end < 0:
                if len(self._pending) > _MAX_EVENT:
                    self._pending = b""  # an event this long carries no usage we can read
                return
            self._event(self._pending[:end])
            self._pending = self._pending[end + 2 :]

    def close(self) -> None:
        if self._pending.strip():
            self._event(self._pending)
        self._pending = b""

    def _event(self, block: bytes) -> None:
        if b"usage" not in block:
            return  # every usage object's name says so (usage, usageMetadata): no need to parse
        data = b"\n".join(
            line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
        )
        event = _json_object(data) if data and data != b"[DONE]" else None
        if event is not None:
            self.usage = self._dialect.event_usage(event, self.usage)


class CredentialProxy(BackgroundServer):
    """The metering credential proxy. Use it as an async context manager::

        async with CredentialProxy(upstream=server.url, keys={"anthropic": real_key}) as proxy:
            env = claude_offline(proxy.url, tmp_path, api_key=proxy.client_key).env
            ...
            assert proxy.ledger.since(0).usage == ...

    ``upstream``: one base URL for every provider, a mapping by provider, or ``None`` for the
    providers' real APIs (:data:`DEFAULT_UPSTREAMS`); a forwarded path keeps its own ``/v1``,
    after the upstream's path prefix. ``keys``: the real key of each provider (default: from
    :data:`KEY_VARIABLES` in the environment). The agent's key is :attr:`client_key`, minted
    for this proxy alone; requests without it are refused. ``port=0`` picks a free port;
    ``socket_path`` listens on a Unix socket there instead (for a sandbox to reach; the socket
    is the owner's alone, mode 0600, and asks for the client key all the same).
    ``max_tokens`` (every token a call processed: input, cache reads and writes, output) and
    ``max_cost_usd`` (at the prices of ``prices``, default the library's catalog; a model
    without a price is refused while a cost budget is set) bound what the calls through this
    proxy may spend. ``ca_file``: a PEM file of the certificates an ``https`` upstream's must
    chain to, in place of the system's (default: the system's, which ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` also set); an upstream's certificate is always verified, host name
    included. A ``ca_file`` that cannot be read or holds no certificate is a
    :class:`~agentrun.ConfigurationError`.
    """

    def __init__(
        self,
        upstream: str | Mapping[str, str] | None = None,
        *,
        keys: Mapping[str, str] | None = None,
        port: int = 0,
        socket_path: str | os.PathLike[str] | None = None,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
        prices: PriceCatalog | None = None,
        side_requests: Sequence[SideRequest] = DEFAULT_SIDE_REQUESTS,
        connect_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        given: dict[str, str] = (
            dict.fromkeys(DEFAULT_UPSTREAMS, upstream)
            if isinstance(upstream, str)
            else {**DEFAULT_UPSTREAMS, **_known_providers(upstream or {}, "upstream")}
        )
        self._upstreams: dict[Provider, Upstream] = {
            cast(Provider, provider): Upstream.parse(url) for provider, url in given.items()
        }
        self._ca_file = Path(ca_file) if ca_file is not None else None
        #: Made once (reading the trusted certificates costs milliseconds), and only if needed.
        self._tls: ssl.SSLContext | None = None
        if ca_file is not None or any(u.scheme == "https" for u in self._upstreams.values()):
            self._tls = tls_context(ca_file)
        chosen = _known_providers(keys, "keys") if keys is not None else _keys_from_environment()
        self._keys: dict[Provider, str] = {cast(Provider, p): k for p, k in chosen.items() if k}
        self._client_key = _CLIENT_KEY_PREFIX + secrets.token_urlsafe(32)
        #: Each client's key and its client (``None``: the proxy's own :attr:`client_key`).
        self._client_keys: list[tuple[bytes, str | None]] = [(self._client_key.encode(), None)]
        self._clients: dict[str, ProxyClient] = {}
        self._scrubbed = [key.encode() for key in self._keys.values()]
        _check_budget(max_tokens, max_cost_usd)
        for value in (connect_timeout, idle_timeout):
            if not value > 0:
                raise ConfigurationError("a proxy timeout must be above 0", option="timeout")
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self._prices = prices
        self._side_requests = tuple(side_requests)
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout
        self._port = port
        self._socket_path = Path(socket_path) if socket_path is not None else None
        self._listener: anyio.abc.Listener[Any] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._seq = 0
        #: Every model request forwarded or refused, with the usage its answer carried.
        self.ledger: Ledger = Ledger()
        #: What went wrong reaching the upstream, in its own words (keys redacted).
        self.failures: list[str] = []
        #: Unexpected exceptions raised while handling a connection (should stay empty).
        self.errors: list[Exception] = []
        #: Model calls refused because the budget was spent.
        self.refused: int = 0
        #: Requests refused because they did not carry :attr:`client_key`.
        self.unauthorized: int = 0
        self._in_flight = 0
        self._quiet: anyio.Event | None = None
        self._in_flight_of: dict[str | None, int] = {}
        self._quiet_of: dict[str | None, anyio.Event] = {}

    def __repr__(self) -> str:  # never the keys, nor the client key
        providers = ", ".join(sorted(self._keys))
        trusted = f", ca_file={str(self._ca_file)!r}" if self._ca_file is not None else ""
        return (
            f"CredentialProxy(upstreams={self.upstreams!r}{trusted}, "
            f"keys for: {providers or 'none'})"
        )

    # ------------------------------------------------------------------ what callers read

    @property
    def prices(self) -> PriceCatalog:
        """The prices the cost budget and the metered cost are counted at."""
        return self._prices or default_prices()

    @property
    def upstreams(self) -> dict[Provider, str]:
        """Where each provider's requests go."""
        return {provider: upstream.url for provider, upstream in self._upstreams.items()}

    @property
    def client_key(self) -> str:
        """The key to give the agent: random, this proxy's alone, and the only key it admits
        (in the header the request's provider reads its key from). Not a secret worth the
        caller's key: it spends only through this proxy, within its budget, while it runs."""
        return self._client_key

    def client(
        self,
        name: str | None = None,
        *,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
    ) -> ProxyClient:
        """A new client of this proxy for one session: a key of its own (give it to the agent),
        its calls tagged with ``name`` in the ledger (default ``client-1``, ``client-2``, ...),
        and, with ``max_tokens`` / ``max_cost_usd``, a budget of its own within the proxy's.
        It is the session's meter too: ``SessionOptions(meter=client)`` checks each turn's
        usage against the proxy's figures. A name given twice, or a budget not above 0, is a
        :class:`~agentrun.ConfigurationError`."""
        if name is None:
            name = f"client-{len(self._clients) + 1}"
            while name in self._clients:
                name += "+"
        if not isinstance(name, str) or not name.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigurationError(
                "a proxy client's name must be a non-empty string", option="name"
            )
        if name in self._clients:
            raise ConfigurationError(
                f"the proxy already has a client named {name!r}", option="name"
            )
        _check_budget(max_tokens, max_cost_usd)
        key = _CLIENT_KEY_PREFIX + secrets.token_urlsafe(32)
        client = ProxyClient(self, name, key, max_tokens=max_tokens, max_cost_usd=max_cost_usd)
        self._clients[name] = client
        self._client_keys.append((key.encode(), name))
        return client

    @property
    def clients(self) -> dict[str, ProxyClient]:
        """The clients made with :meth:`client`, by name."""
        return dict(self._clients)

    @property
    def placeholder_key(self) -> str:
        """The former name of :attr:`client_key`."""
        return self._client_key

    @property
    def port(self) -> int:
        if self._listener is None or self._socket_path is not None:
            raise UsageError("the proxy is not listening on a TCP port")
        return int(self._listener.extra(anyio.abc.SocketAttribute.local_port))

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the base URL to give the agent."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def socket_path(self) -> Path | None:
        """The Unix socket the proxy listens on (``None``: a loopback TCP port)."""
        return self._socket_path

    def route(self, sandbox: Sandbox | bool | None = None) -> tuple[str, Sandbox | bool | None]:
        """The base URL an agent reaches the proxy at, and its ``sandbox`` with the way there:
        on a TCP port, :attr:`url` and ``sandbox`` as given; on a Unix socket (a sandboxed
        agent), ``http://127.0.0.1:8089`` inside a sandbox that binds the socket there
        (``sandbox`` ``None`` or ``False`` is a :class:`~agentrun.ConfigurationError`: only a
        sandbox reaches a socket)."""
        path = self._socket_path
        if path is None:
            return self.url, sandbox
        if not sandbox:
            raise ConfigurationError(
                "the proxy listens on a Unix socket, which only a sandboxed agent reaches",
                option="sandbox",
            )
        base = sandbox if isinstance(sandbox, Sandbox) else Sandbox()
        ports = {**base.socket_ports, SANDBOX_PROXY_PORT: str(path)}
        return (
            f"http://127.0.0.1:{SANDBOX_PROXY_PORT}",
            base.model_copy(update={"socket_ports": ports}),
        )

    def has_key(self, provider: str) -> bool:
        """Whether the proxy holds a real key for ``provider``."""
        return provider in self._keys

    async def check_upstream(self, provider: str) -> None:
        """Connect to ``provider``'s upstream once (and hang up): a
        :class:`~agentrun.ConfigurationError` with the upstream's words when it cannot be
        reached, within the connect timeout."""
        upstream = self._upstreams[cast(Provider, provider)]
        try:
            stream = await connect(upstream, self._connect_timeout, self._tls)
        except UpstreamFailure as failure:
            raise ConfigurationError(failure.words, option="upstream") from None
        await anyio.aclose_forcefully(stream)  # no wait for a TLS close the upstream owes

    async def settled(self, most: float = 10.0) -> None:
        """Wait (``most`` seconds at most) until no model call is being answered, so the ledger
        holds every call an agent has seen the end of."""
        if not self._in_flight:
            return
        if self._quiet is None:
            self._quiet = anyio.Event()
        with anyio.move_on_after(most):
            await self._quiet.wait()

    async def client_settled(self, client: str | None, most: float = 10.0) -> None:
        """:meth:`settled` for the calls of one client only (the other sessions sharing the
        proxy may go on calling)."""
        if not self._in_flight_of.get(client):
            return
        quiet = self._quiet_of.get(client)
        if quiet is None:
            quiet = self._quiet_of[client] = anyio.Event()
        with anyio.move_on_after(most):
            await quiet.wait()

    @property
    def spent_tokens(self) -> int:
        """Every token the metered calls processed: input, cache reads and writes, output."""
        return _tokens(self.ledger.since(0).usage)

    @property
    def spent_cost_usd(self) -> float | None:
        """What the metered calls cost at the catalog's prices (``None``: a model unpriced)."""
        return self.ledger.since(0).cost(prices=self.prices)

    @property
    def budget_spent(self) -> str | None:
        """Why further model calls are refused, or ``None`` while the budget lasts."""
        if self.max_tokens is None and self.max_cost_usd is None:
            return None
        return _spent(self.ledger.since(0), self.max_tokens, self.max_cost_usd, self.prices)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Listen and serve inside ``task_group`` (cancel the group to stop). A port or socket
        path that cannot be taken is a :class:`~agentrun.ConfigurationError`."""
        try:
            if self._socket_path is not None:
                listener: anyio.abc.Listener[Any] = await anyio.create_unix_listener(
                    self._socket_path
                )
                # Only the owner may connect (the client key is asked for all the same: a
                # process of the owner's that can connect here could read the caller anyway).
                self._socket_path.chmod(0o600)
            else:
                listener = await anyio.create_tcp_listener(
                    local_host="127.0.0.1", local_port=self._port
                )
        except OSError as exc:
            where = self._socket_path or f"127.0.0.1:{self._port}"
            raise ConfigurationError(
                f"the proxy cannot listen on {where}: {exc.strerror or exc}", option="port"
            ) from None
        self._listener = listener
        task_group.start_soon(self._accept_loop, listener, task_group)

    def _closed(self) -> None:
        if self._socket_path is not None:
            self._socket_path.unlink(missing_ok=True)

    async def _accept_loop(
        self, listener: anyio.abc.Listener[Any], tg: anyio.abc.TaskGroup
    ) -> None:
        try:
            await listener.serve(self._connection, tg)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return

    async def _connection(self, conn: anyio.abc.SocketStream) -> None:
        await serve_connection(conn, self._handle, Limits(), self.errors)

    # ------------------------------------------------------------------ one request

    def _scrub(self, data: bytes) -> bytes:
        return _redact(data, self._scrubbed, _REDACTED.encode())

    def _admits(self, provider: Provider, request: HttpRequest) -> tuple[bool, str | None]:
        """Whether ``request`` carries a client key where ``provider`` reads its key (compared
        in constant time with every client's), and whose."""
        admitted, client = False, None
        for presented in _presented_keys(provider, request):
            given = presented.encode("utf-8", "surrogateescape")
            for key, name in self._client_keys:
                if hmac.compare_digest(given, key):
                    admitted, client = True, name
        return admitted, client

    def _budget_spent_for(self, client: str | None) -> str | None:
        """Why a call of ``client`` is refused: the proxy's budget, or the client's own."""
        why = self.budget_spent
        own = self._clients.get(client) if client is not None else None
        if why is None and own is not None and (spent := own.own_budget_spent) is not None:
            why = f"the budget of {client}: {spent}"
        return why

    def _account(
        self,
        seq: int,
        api: ApiKind,
        received_at: datetime,
        *,
        model: str | None,
        status: int,
        side: SideRequest | None,
        dialect: Dialect | None = None,
        reported: dict[str, Any] | None = None,
        complete: bool = True,
        client: str | None = None,
        refusal: Literal["budget", "no_key", "upstream"] | None = None,
    ) -> None:
        usage = ZERO_USAGE
        if dialect is not None and reported is not None:
            usage = dialect.normalized(reported)
        self.ledger.append(
            LedgerEntry(
                seq=seq,
                api=api,
                model=model,
                status=status,
                side_request=side.name if side is not None else None,
                reported=reported,
                usage=usage,
                received_at=received_at,
                answered_at=datetime.now(timezone.utc),
                complete=complete,
                client=client,
                refusal=refusal,
            )
        )

    async def _refuse(
        self, out: Responder, shape: Dialect, err: HttpError, seq: int, keep: bool
    ) -> None:
        body, headers = shape.error_answer(err, f"req_proxy_{seq:06d}")
        await out.send_json(err.status, body, keep, headers=list(headers.items()))

    def _forwarded_headers(self, request: HttpRequest, provider: Provider) -> list[tuple[str, str]]:
        headers = [
            (name, value)
            for name, value in request.headers
            if name not in _AUTH_HEADERS and name not in _HOP_HEADERS
        ]
        key = self._keys[provider]
        if provider == "anthropic":
            headers.append(("x-api-key", key))
        elif provider == "openai":
            headers.append(("authorization", f"Bearer {key}"))
        else:
            headers.append(("x-goog-api-key", key))
        headers.append(("accept-encoding", "identity"))  # the usage is read on the way
        return headers

    async def _handle(self, request: HttpRequest, out: Responder) -> bool:
        model_call = classify(request.method, request.path) in DIALECTS
        self._in_flight += model_call
        try:
            return await self._answer(request, out)
        finally:
            self._in_flight -= model_call
            if not self._in_flight and self._quiet is not None:
                self._quiet.set()
                self._quiet = None

    async def _answer(self, request: HttpRequest, out: Responder) -> bool:
        received_at = datetime.now(timezone.utc)
        keep = request.keep_alive
        api = classify(request.method, request.path)
        provider = _provider_of(api, request)
        dialect = DIALECTS.get(api)
        shape = dialect or DIALECTS[_SHAPE[provider]]
        admitted, client = self._admits(provider, request)
        if not admitted:
            # Not the agent's: refused before anything is counted or forwarded.
            self.unauthorized += 1
            body, headers = shape.error_answer(_unauthorized_error(provider), "req_proxy_refused")
            await out.send_json(401, body, keep, headers=list(headers.items()))
            return keep
        if dialect is None:
            return await self._admitted(request, out, api, provider, shape, client, received_at)
        self._in_flight_of[client] = self._in_flight_of.get(client, 0) + 1
        try:
            return await self._admitted(request, out, api, provider, shape, client, received_at)
        finally:
            self._in_flight_of[client] -= 1
            if not self._in_flight_of[client]:
                quiet = self._quiet_of.pop(client, None)
                if quiet is not None:
                    quiet.set()

    async def _admitted(
        self,
        request: HttpRequest,
        out: Responder,
        api: ApiKind,
        provider: Provider,
        shape: Dialect,
        client: str | None,
        received_at: datetime,
    ) -> bool:
        """Answer a request that carried a client key (``client``'s)."""
        keep = request.keep_alive
        dialect = DIALECTS.get(api)
        payload = _json_object(request.body)
        seq, self._seq = self._seq, self._seq + 1
        model = shape.model_of(request.path, payload) if dialect and payload is not None else None
        side = None
        if dialect is not None and payload is not None:
            side = next((r for r in self._side_requests if r.match(api, payload)), None)

        refusal: HttpError | None = None
        refused_for: Literal["budget", "no_key", "upstream"] | None = None
        if dialect is not None and (why := self._budget_spent_for(client)) is not None:
            refusal, refused_for = _budget_error(provider, why), "budget"
            self.refused += 1
        elif provider not in self._keys:
            refused_for = "no_key"
            names = " or ".join(KEY_VARIABLES[provider])
            refusal = HttpError(
                status=401,
                message=f"agentrun proxy: no API key for {provider} (set {names})",
                error_type="authentication_error" if provider == "anthropic" else None,
            )
        if refusal is None:
            query = [(k, v) for k, v in parse_qsl(request.query, keep_blank_values=True)]
            kept = urlencode([(k, v) for k, v in query if k != "key"])
            target = request.path + (f"?{kept}" if kept else "")
            try:
                answer = await exchange(
                    self._upstreams[provider],
                    request.method,
                    target,
                    self._forwarded_headers(request, provider),
                    request.body,
                    connect_timeout=self._connect_timeout,
                    idle_timeout=self._idle_timeout,
                    tls=self._tls,
                )
            except UpstreamFailure as failure:
                words = self._scrub(failure.words.encode()).decode()
                self.failures.append(words)
                print(f"agentrun proxy: {words}", file=sys.stderr)
                refusal = HttpError(status=502, message=f"agentrun proxy: {words}")
                refused_for = "upstream"
            else:
                return await self._relay(
                    answer, out, keep, seq, api, received_at, model, side, dialect, client
                )
        complete = False
        try:
            await self._refuse(out, shape, refusal, seq, keep)
            complete = True
        finally:
            if dialect is not None:
                self._account(
                    seq, api, received_at, model=model, status=refusal.status, side=side,
                    complete=complete, client=client, refusal=refused_for,
                )  # fmt: skip
        return keep

    async def _relay(
        self,
        answer: UpstreamAnswer,
        out: Responder,
        keep: bool,
        seq: int,
        api: ApiKind,
        received_at: datetime,
        model: str | None,
        side: SideRequest | None,
        dialect: Dialect | None,
        client: str | None,
    ) -> bool:
        """Pass the upstream's answer on and enter its usage in the ledger."""
        # The body goes on as it came: a content-encoding the upstream chose despite
        # ``identity`` stays (the agent decodes it; its usage then cannot be read).
        headers = [
            (k, v) for k, v in answer.headers if k not in _HOP_HEADERS or k == "content-encoding"
        ]
        events = "text/event-stream" in (answer.header("content-type") or "").lower()
        reported: dict[str, Any] | None = None
        complete = False
        try:
            if events:
                reader = _EventUsage(dialect) if dialect is not None else None
                scrubber = _StreamScrubber(self._scrubbed, _REDACTED.encode())
                await out.start(answer.status, headers, chunked=True, keep_alive=keep)

                async def relay(piece: bytes) -> None:
                    await out.write(scrubber.feed(piece))
                    if reader is not None:
                        reader.feed(piece)

                await answer.pipe(relay)
                await out.write(scrubber.close())
                await out.finish()
                if reader is not None:
                    reader.close()
                    reported = reader.usage
            else:
                whole = bytearray()

                async def keep_piece(piece: bytes) -> None:
                    whole.extend(piece)
                    if len(whole) > _MAX_WHOLE_ANSWER:
                        raise UpstreamFailure("the upstream's answer is too large")

                await answer.pipe(keep_piece)
                body = self._scrub(bytes(whole))
                if dialect is not None:
                    parsed = _json_object(body)
                    reported = dialect.answer_usage(parsed) if parsed is not None else None
                await out.start(answer.status, headers, length=len(body), keep_alive=keep)
                await out.write(body)
            complete = True
        except UpstreamFailure as failure:
            words = self._scrub(failure.words.encode()).decode()
            self.failures.append(words)
            print(f"agentrun proxy: {words}", file=sys.stderr)
            keep = False  # the answer was cut: the agent sees the connection close
        finally:
            await answer.aclose()
            if dialect is not None:
                self._account(
                    seq, api, received_at, model=model, status=answer.status, side=side,
                    dialect=dialect, reported=reported, complete=complete, client=client,
                )  # fmt: skip
        return keep


def usage_disagreement(
    usage: Usage | None, served: LedgerSlice, *, prices: PriceCatalog | None = None
) -> str | None:
    """How a turn's ``usage`` (as the agent reported it) differs from what the proxy metered
    for the turn's main calls (``served``), or ``None`` when every figure the agent reported
    is the proxy's. An agent that reports no figures disagrees when tokens were metered. A
    cost the agent reported itself (``cost_source`` ``reported``) disagrees when it is more
    than 1 % off the proxy's tokens at the catalog's prices (``prices``, default the
    library's); a model without a price is not compared."""
    main = served.main
    metered = main.usage
    if usage is not None and usage.usage_source == "last_call" and main.entries:
        metered = main.entries[-1].usage
    names = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    known: dict[str, int] = {}
    if usage is not None and usage.usage_source != "unavailable":
        known = {n: getattr(usage, n) for n in names if getattr(usage, n) is not None}
        # Figures without their split (Gemini CLI's): the whole prompt, the output less thinking.
        if usage.whole_prompt_tokens is not None:
            known["whole_prompt_tokens"] = usage.whole_prompt_tokens
        if usage.answer_tokens is not None:
            known["answer_tokens"] = usage.answer_tokens
    if not known:
        spent = {n: getattr(metered, n) for n in names if getattr(metered, n)}
        return f"the agent reported no token figures; the proxy metered {spent}" if spent else None
    proxy = {n: getattr(metered, n) for n in names}
    proxy["whole_prompt_tokens"] = metered.prompt_tokens
    proxy["answer_tokens"] = (metered.output_tokens or 0) - (metered.thinking_tokens or 0)
    wrong = [
        f"{name} {value} (proxy {proxy[name]})"
        for name, value in known.items()
        if value != proxy[name]
    ]
    if usage is not None and usage.cost_source == "reported" and usage.cost_usd is not None:
        priced = main.cost(prices=prices) if usage.usage_source != "last_call" else None
        if priced is not None and abs(usage.cost_usd - priced) > max(1e-6, priced / 100):
            wrong.append(f"cost ${usage.cost_usd:.6f} (proxy ${priced:.6f} at catalog prices)")
    return "the agent reported " + ", ".join(wrong) if wrong else None


class ProxyClient(UsageMeter):
    """One session's way through a :class:`CredentialProxy` (:meth:`CredentialProxy.client`):
    its own key (:attr:`key`, for the agent), its calls tagged :attr:`name` in the proxy's
    ledger, optionally a budget of its own, and the session's meter
    (``SessionOptions(meter=client)``): when a turn ends, what the proxy metered for this
    client during it is set beside the summary's usage (``TurnSummary.metered``)."""

    def __init__(
        self,
        proxy: CredentialProxy,
        name: str,
        key: str,
        *,
        max_tokens: int | None = None,
        max_cost_usd: float | None = None,
    ) -> None:
        self.proxy = proxy
        self.name = name
        self._key = key
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd

    def __repr__(self) -> str:  # never the key
        return f"ProxyClient(name={self.name!r})"

    @property
    def key(self) -> str:
        """The key to give this session's agent (admitted by the proxy, tagged :attr:`name`)."""
        return self._key

    @property
    def ledger(self) -> LedgerSlice:
        """Every call of this client metered so far."""
        return self.proxy.ledger.since(0).of_client(self.name)

    @property
    def own_budget_spent(self) -> str | None:
        """Why this client's own budget refuses its calls, or ``None`` (the proxy's aside)."""
        if self.max_tokens is None and self.max_cost_usd is None:
            return None
        return _spent(self.ledger, self.max_tokens, self.max_cost_usd, self.proxy.prices)

    @property
    def budget_spent(self) -> str | None:
        """Why this client's calls are refused (the proxy's budget or its own), or ``None``."""
        return self.proxy._budget_spent_for(self.name)  # pyright: ignore[reportPrivateUsage]

    def mark(self) -> int:
        return self.proxy.ledger.mark()

    async def metered_since(self, mark: int, summary: TurnSummary) -> MeteredUsage:
        proxy = self.proxy
        await proxy.client_settled(self.name)
        served = proxy.ledger.since(mark).of_client(self.name)
        answered = LedgerSlice(entries=tuple(e for e in served.entries if e.refusal is None))
        # Where the agent reported only the last call's tokens, those are what it said.
        said = summary.last_call_usage or summary.usage
        disagreement = usage_disagreement(said, answered, prices=proxy.prices)
        side = served.side
        return MeteredUsage(
            client=self.name,
            usage=served.main.usage,
            calls=len(answered.main),
            side_usage=side.usage if side.entries else None,
            side_calls=len(answered.side),
            cost_usd=served.cost(prices=proxy.prices),
            refused=sum(1 for e in served.entries if e.refusal == "budget"),
            agrees=disagreement is None,
            disagreement=disagreement,
            budget_spent=self.budget_spent,
        )
