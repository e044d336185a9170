"""The metering credential proxy admits only its own agent, and keeps the real keys out of
streamed answers.

Each proxy mints a random client key; a request that does not carry it where its provider reads
its key (no key, the placeholder every agent used to hold, another proxy's key, the right key in
the wrong header) is refused with a 401 in the provider's own error shape, never reaches the
upstream and is not metered. A streamed answer that echoes a real key has it replaced, even when
the key is split across the pieces the upstream sent, at every position."""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from model_client import Reply, exchange, parse_reply, raw_request

from agentrun import CredentialProxy, EngineUnavailableError, TurnSummary
from agentrun._cli.proxied import Meter
from agentrun.offline import EMBEDDED_ENGINES, ModelServer, ModelTurn, Script, offline_config

pytestmark = pytest.mark.anyio

#: The caller's "real" keys, which only the upstream may see.
REAL = {"anthropic": "sk-ant-REAL-0001", "openai": "sk-REAL-0002", "gemini": "AIza-REAL-0003"}
TURN = ModelTurn.text("Hello.")
#: A streamed model call of each API.
STREAMED: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": (
        "/v1/messages?beta=true",
        {"model": "claude-x", "stream": True, "messages": [], "max_tokens": 10},
    ),
    "responses": ("/v1/responses", {"model": "resp-model", "stream": True, "input": []}),
    "chat": ("/v1/chat/completions", {"model": "chat-model", "stream": True, "messages": []}),
    "gemini": (
        "/v1beta/models/gem-model:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}


def auth(api: str, key: str) -> dict[str, str]:
    """The headers that carry ``key`` where the API ``api`` reads its key."""
    if api == "anthropic":
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if api == "gemini":
        return {"x-goog-api-key": key}
    return {"authorization": f"Bearer {key}"}


#: The key every agent was given before each proxy minted its own.
OLD_PLACEHOLDER = "agentrun-proxy-placeholder-key"
#: Where each API's error answer says what kind of error it is.
ERROR_KIND: dict[str, Callable[[Any], Any]] = {
    "anthropic": lambda body: body["error"]["type"],
    "responses": lambda body: body["error"]["code"],
    "chat": lambda body: body["error"]["code"],
    "gemini": lambda body: body["error"]["status"],
}
UNAUTHORIZED_KIND = {
    "anthropic": "authentication_error",
    "responses": "invalid_api_key",
    "chat": "invalid_api_key",
    "gemini": "UNAUTHENTICATED",
}


def _wrong_header(api: str, key: str) -> dict[str, str]:
    """``key`` in a header the API does not read its key from."""
    if api == "anthropic":
        return {"authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"}
    if api == "gemini":
        return {"authorization": f"Bearer {key}"}
    return {"x-api-key": key}


def _headers(case: str, api: str, proxy: CredentialProxy, other: CredentialProxy) -> dict[str, str]:
    if case == "no key":
        return {"anthropic-version": "2023-06-01"} if api == "anthropic" else {}
    if case == "the old placeholder":
        return auth(api, OLD_PLACEHOLDER)
    if case == "another proxy's key":
        return auth(api, other.client_key)
    if case == "a key that only begins like it":
        return auth(api, proxy.client_key[:-1])
    return _wrong_header(api, proxy.client_key)


@pytest.mark.parametrize(
    "case",
    [
        "no key",
        "the old placeholder",
        "another proxy's key",
        "a key that only begins like it",
        "the key in the wrong header",
    ],
)
@pytest.mark.parametrize("api", sorted(STREAMED))
async def test_a_request_without_the_client_key_is_refused_unforwarded_and_unmetered(
    api: str, case: str
) -> None:
    other = CredentialProxy("http://127.0.0.1:9", keys=REAL)
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            headers = _headers(case, api, proxy, other)
            (reply,) = await exchange(proxy.port, [raw_request(*STREAMED[api], headers=headers)])
    assert reply.status == 401
    assert ERROR_KIND[api](reply.json()) == UNAUTHORIZED_KIND[api]
    assert "client key" in reply.body.decode()
    for secret in (*REAL.values(), proxy.client_key, other.client_key):
        assert secret not in reply.body.decode() and secret not in repr(reply.headers)
    assert server.requests == []  # never forwarded
    assert len(proxy.ledger) == 0 and proxy.unauthorized == 1 and proxy.refused == 0


async def test_the_gemini_key_parameter_must_be_the_client_key() -> None:
    path, body = STREAMED["gemini"]
    async with ModelServer(Script(turns=[TURN, TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            wrong = raw_request(f"{path}&key={OLD_PLACEHOLDER}", body)
            right = raw_request(f"{path}&key={proxy.client_key}", body)
            (refused,) = await exchange(proxy.port, [wrong])
            (admitted,) = await exchange(proxy.port, [right])
    assert (refused.status, admitted.status) == (401, 200)
    assert len(server.model_requests) == 1 and len(proxy.ledger) == 1


async def test_calls_that_are_no_model_calls_need_the_client_key_too() -> None:
    async with ModelServer() as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            (health,) = await exchange(
                proxy.port, [b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"]
            )
            counted = raw_request(
                "/v1/messages/count_tokens", {"messages": []}, headers=auth("chat", "x")
            )
            (counting,) = await exchange(proxy.port, [counted])
    assert health.status == 401 and counting.status == 401
    assert server.requests == [] and proxy.unauthorized == 2


async def test_a_refused_request_keeps_the_connection_for_the_next(tmp_path: Path) -> None:
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            refused = raw_request(*STREAMED["chat"], close=False)
            admitted = raw_request(*STREAMED["chat"], headers=auth("chat", proxy.client_key))
            replies = await exchange(proxy.port, [refused, admitted])
    assert [reply.status for reply in replies] == [401, 200]
    assert len(proxy.ledger) == 1


async def _over_socket(where: Path, request: bytes) -> Reply:
    data = b""
    async with await anyio.connect_unix(where) as conn:
        await conn.send(request)
        while True:
            try:
                data += await conn.receive()
            except anyio.EndOfStream:
                break
    reply, _ = parse_reply(data)
    return reply


async def test_the_unix_socket_is_the_owner_s_and_asks_for_the_client_key(
    tmp_path: Path,
) -> None:
    where = tmp_path / "proxy.sock"
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL, socket_path=where) as proxy:
            assert stat.S_IMODE(where.stat().st_mode) == 0o600
            refused = await _over_socket(where, raw_request(*STREAMED["chat"]))
            headers = auth("chat", proxy.client_key)
            admitted = await _over_socket(where, raw_request(*STREAMED["chat"], headers=headers))
    assert (refused.status, admitted.status) == (401, 200)
    assert len(server.model_requests) == 1 and len(proxy.ledger) == 1


def test_each_proxy_mints_its_own_key_and_shows_no_key() -> None:
    first = CredentialProxy("http://127.0.0.1:9", keys=REAL)
    second = CredentialProxy("http://127.0.0.1:9", keys=REAL)
    assert first.client_key != second.client_key
    assert first.client_key.startswith("agentrun-proxy-") and len(first.client_key) > 40
    assert first.placeholder_key == first.client_key  # the former name still answers
    for secret in (*REAL.values(), first.client_key):
        assert secret not in repr(first) and secret not in str(first)


def test_the_old_placeholder_name_is_deprecated() -> None:
    from agentrun.offline import _proxy

    with pytest.warns(DeprecationWarning, match="client_key"):
        assert _proxy.PLACEHOLDER_KEY == OLD_PLACEHOLDER  # pyright: ignore[reportAttributeAccessIssue]


# ---------------------------------------------------------------------------- streamed answers


class SplittingUpstream:
    """A model API that answers every request with one server-sent event, chunked into the
    pieces :attr:`pieces` says: the proxy hands each chunk on as it comes."""

    def __init__(self, pieces: list[bytes] | None = None) -> None:
        self.pieces: list[bytes] = pieces or []

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Listen on a free port; yields the upstream's URL."""
        async with (
            await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(listener.serve, self._answer)
            yield f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
            tg.cancel_scope.cancel()

    async def _answer(self, conn: anyio.abc.SocketStream) -> None:
        async with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await conn.receive()
            head, _, body = head.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += await conn.receive()
            await conn.send(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            )
            for piece in self.pieces:
                await conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            await conn.send(b"0\r\n\r\n")


def _event(text: str) -> bytes:
    return b'data: {"choices":[{"delta":{"content":"' + text.encode() + b'"}}]}\n\n'


async def test_a_key_echoed_in_a_stream_is_replaced_wherever_the_pieces_split_it() -> None:
    """The upstream echoes two real keys (of different lengths) in one event, cut in two at
    every position; then in pieces of one byte each. What the agent gets is the event with
    each key replaced, nothing lost or doubled."""
    echoed = _event(f"your key {REAL['openai']} and {REAL['anthropic']}, twice: {REAL['openai']}")
    expected = echoed.replace(REAL["openai"].encode(), b"[redacted key]").replace(
        REAL["anthropic"].encode(), b"[redacted key]"
    )
    splits = [[echoed[:cut], echoed[cut:]] for cut in range(1, len(echoed))]
    splits.append([echoed[i : i + 1] for i in range(len(echoed))])
    upstream = SplittingUpstream()
    async with upstream.serving() as url, CredentialProxy(url, keys=REAL) as proxy:
        for pieces in splits:
            upstream.pieces = pieces
            request = raw_request(*STREAMED["chat"], headers=auth("chat", proxy.client_key))
            (reply,) = await exchange(proxy.port, [request])
            assert reply.status == 200
            assert reply.body == expected, [len(piece) for piece in pieces]
    assert len(proxy.ledger) == len(splits) and proxy.failures == []


async def test_a_stream_that_only_begins_like_a_key_is_handed_on_whole() -> None:
    """The end of a piece that could begin a key is held back only until the next piece; a
    stream that ends on one has it handed on."""
    almost = REAL["openai"][:-1]
    upstream = SplittingUpstream([_event("x")[:-2], almost.encode(), b"\n\n", almost.encode()])
    async with upstream.serving() as url, CredentialProxy(url, keys=REAL) as proxy:
        request = raw_request(*STREAMED["chat"], headers=auth("chat", proxy.client_key))
        (reply,) = await exchange(proxy.port, [request])
    assert reply.body == b"".join(upstream.pieces)


async def test_the_metered_line_counts_the_turn_s_unauthorized_requests(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            meter = Meter(proxy, as_json=True)
            client = proxy.client("only")
            mark = client.mark()
            await exchange(proxy.port, [raw_request(*STREAMED["chat"])])
            for number in (1, 2):
                summary = TurnSummary(turn=number)
                summary.metered = await client.metered_since(mark, summary)
                await meter.turn(summary)
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (first["proxy"]["unauthorized"], second["proxy"]["unauthorized"]) == (1, 0)
    assert first["proxy"]["calls"] == 0


@pytest.mark.parametrize("agent", sorted(EMBEDDED_ENGINES))
def test_each_offline_configuration_hands_the_agent_the_key_it_is_given(
    agent: str, tmp_path: Path
) -> None:
    key = CredentialProxy("http://127.0.0.1:9", keys=REAL).client_key
    try:
        config = offline_config(
            EMBEDDED_ENGINES[agent], "http://127.0.0.1:9", tmp_path, api_key=key
        )
    except EngineUnavailableError as exc:  # codex-acp asks the pinned Codex for its catalog
        pytest.skip(str(exc))
    written = [path.read_text() for path in config.files]
    assert key in repr(config.env) or any(key in text for text in written)
