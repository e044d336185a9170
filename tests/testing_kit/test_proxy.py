"""The metering credential proxy in front of the embedded model server: every API, streamed and
whole, passed on byte for byte with the real key swapped in and metered as the server served it;
side requests, budgets, a missing key, an unreachable upstream, a taken port, a Unix socket."""

from __future__ import annotations

import json
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from model_client import Reply, exchange, parse_reply, raw_request

from agentrun import ConfigurationError, CredentialProxy, SessionOptions, TurnSummary, Usage
from agentrun._vocabulary.metering import mismatch_error
from agentrun._vocabulary.prices import PriceCatalog
from agentrun.offline import (
    Ledger,
    LedgerEntry,
    LedgerSlice,
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    usage_disagreement,
)

pytestmark = pytest.mark.anyio

#: The "real" keys the upstream must receive (the agent holds the proxy's client key).
REAL = {"anthropic": "sk-ant-REAL-0001", "openai": "sk-REAL-0002", "gemini": "AIza-REAL-0003"}


def auth(api: str, key: str) -> dict[str, str]:
    """The headers that carry ``key`` where the API ``api`` reads its key."""
    if api == "anthropic":
        return {"x-api-key": key, "anthropic-version": "2023-06-01"}
    if api == "gemini":
        return {"x-goog-api-key": key}
    return {"authorization": f"Bearer {key}"}


#: The header each provider's key travels in, and how.
EXPECTED_KEY = {
    "anthropic": ("x-api-key", REAL["anthropic"]),
    "responses": ("authorization", f"Bearer {REAL['openai']}"),
    "chat": ("authorization", f"Bearer {REAL['openai']}"),
    "gemini": ("x-goog-api-key", REAL["gemini"]),
}

SCRIPTED = ScriptUsage(
    input_tokens=41, cache_read_tokens=1_003, cache_write_tokens=207, output_tokens=97,
    reasoning_tokens=31,
)  # fmt: skip
TURN = ModelTurn(
    blocks=[
        ThinkingBlock(text="Let me see."),
        TextBlock(text="Running it."),
        ToolCallBlock(arguments={"command": "ls"}),
    ],
    usage=SCRIPTED,
)
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


def _request(api: str, streamed: bool) -> tuple[str, dict[str, Any]]:
    path, body = STREAMED[api]
    if streamed:
        return path, body
    if api == "gemini":
        return path.replace(":streamGenerateContent?alt=sse", ":generateContent"), body
    return path, {**body, "stream": False}


async def _post(proxy: CredentialProxy, api: str, path: str, body: Any) -> Reply:
    headers = auth(api, proxy.client_key)
    (reply,) = await exchange(proxy.port, [raw_request(path, body, headers=headers)])
    return reply


async def _raw_exchange(conn: anyio.abc.ByteStream, request: bytes) -> bytes:
    """Send ``request`` and read everything until the other side closes."""
    data = b""
    async with conn:
        await conn.send(request)
        while True:
            try:
                data += await conn.receive()
            except anyio.EndOfStream:
                return data


def _same_answer(direct: Reply, proxied: Reply) -> None:
    """What the agent got through the proxy is what the server sent (its headers aside)."""
    assert proxied.status == direct.status
    assert proxied.body == direct.body


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("api", sorted(STREAMED))
async def test_each_api_is_passed_on_with_the_real_key_and_metered(
    api: str, streamed: bool
) -> None:
    path, body = _request(api, streamed)
    async with ModelServer(Script(turns=[TURN])) as alone:
        (direct,) = await exchange(alone.port, [raw_request(path, body, headers=auth(api, "x"))])
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            proxied = await _post(proxy, api, path, body)
    _same_answer(direct, proxied)
    (through,) = server.requests
    header, value = EXPECTED_KEY[api]
    assert through.headers[header] == value
    assert proxy.client_key not in repr(through.headers) and through.body == direct_body(body)
    assert through.path == path.partition("?")[0]
    (entry,) = proxy.ledger.entries
    (served,) = server.ledger.entries
    assert entry.usage == served.usage and entry.usage.output_tokens == SCRIPTED.output_tokens
    assert (entry.api, entry.model, entry.status, entry.complete) == (api, served.model, 200, True)
    assert entry.side_request is None


def direct_body(body: Any) -> bytes:
    return json.dumps(body).encode()


async def test_side_requests_are_metered_apart() -> None:
    title = {
        "model": "chat-model",
        "stream": True,
        "messages": [{"role": "system", "content": "You are a title generator. Be short."}],
    }
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            await _post(proxy, "chat", "/v1/chat/completions", title)
            await _post(proxy, "chat", *STREAMED["chat"])
    side, main = proxy.ledger.entries
    assert (side.side_request, main.side_request) == ("opencode-title", None)
    metered = proxy.ledger.since(0)
    assert metered.main.usage == server.ledger.since(0).main.usage
    assert metered.side.usage == server.ledger.since(0).side.usage


@pytest.mark.parametrize(
    ("api", "status", "shape"),
    [
        ("anthropic", 400, "invalid_request_error"),
        ("responses", 429, "insufficient_quota"),
        ("chat", 429, "insufficient_quota"),
        ("gemini", 429, "RESOURCE_EXHAUSTED"),
    ],
)
async def test_a_spent_budget_refuses_in_the_provider_s_error_shape(
    api: str, status: int, shape: str
) -> None:
    async with ModelServer(Script(turns=[TURN, TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL, max_tokens=100) as proxy:
            first = await _post(proxy, api, *STREAMED[api])
            refused = await _post(proxy, api, *STREAMED[api])
    assert first.status == 200
    assert refused.status == status and shape in refused.body.decode()
    assert "budget is spent" in refused.body.decode()
    assert len(server.model_requests) == 1  # the refused call never left the proxy
    assert [e.status for e in proxy.ledger.entries] == [200, status]
    assert proxy.refused == 1 and proxy.budget_spent is not None


async def test_a_cost_budget_counts_at_the_catalog_s_prices() -> None:
    prices = PriceCatalog(
        {"models": {"chat-model": {"input": 1000.0, "cached_input": 0.0, "output": 1000.0}}}
    )
    async with ModelServer(Script(turns=[TURN, TURN])) as server:
        async with CredentialProxy(
            server.url,
            keys=REAL,
            max_cost_usd=0.1,
            prices=prices,
        ) as proxy:
            assert proxy.budget_spent is None
            await _post(proxy, "chat", *STREAMED["chat"])
            refused = await _post(proxy, "chat", *STREAMED["chat"])
    assert refused.status == 429 and proxy.spent_cost_usd is not None
    assert proxy.spent_cost_usd >= 0.1


async def test_no_key_for_the_provider_is_a_401_in_its_shape() -> None:
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys={"openai": REAL["openai"]}) as proxy:
            reply = await _post(proxy, "anthropic", *STREAMED["anthropic"])
    assert reply.status == 401
    assert reply.json()["error"]["type"] == "authentication_error"
    assert "ANTHROPIC_API_KEY" in reply.json()["error"]["message"]
    assert server.model_requests == []


async def test_the_upstream_down_is_a_502_with_its_words() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens there once closed
    async with CredentialProxy(f"http://127.0.0.1:{closed}", keys=REAL) as proxy:
        with anyio.fail_after(30):
            reply = await _post(proxy, "responses", *STREAMED["responses"])
    assert reply.status == 502
    message = reply.json()["error"]["message"]
    assert "Connection refused" in message and f"127.0.0.1:{closed}" in message
    assert proxy.failures and "Connection refused" in proxy.failures[0]
    assert [e.status for e in proxy.ledger.entries] == [502]


async def test_an_upstream_that_stalls_mid_stream_is_cut_with_its_words() -> None:
    stalling = ModelTurn(blocks=[TextBlock(text="slow " * 20)], chunk_chars=5, chunk_delay=30)
    async with ModelServer(Script(turns=[stalling])) as server:
        async with CredentialProxy(server.url, keys=REAL, idle_timeout=0.5) as proxy:
            with anyio.fail_after(30):
                data = await _raw_exchange(
                    await anyio.connect_tcp("127.0.0.1", proxy.port),
                    raw_request(*STREAMED["chat"], headers=auth("chat", proxy.client_key)),
                )
    # What came before the stall was passed on, then the connection closed: no last chunk.
    assert data.startswith(b"HTTP/1.1 200") and b'"role":"assistant"' in data
    assert not data.endswith(b"0\r\n\r\n")
    assert proxy.failures == ["the upstream sent nothing for 0.5 s"]
    (entry,) = proxy.ledger.entries
    assert not entry.complete and entry.reported is None


async def test_the_proxy_s_port_taken_is_a_configuration_error() -> None:
    async with ModelServer() as server:
        with pytest.raises(ConfigurationError, match=r"cannot listen on 127\.0\.0\.1"):
            async with CredentialProxy(server.url, keys=REAL, port=server.port):
                pass


async def test_a_key_the_upstream_echoes_is_redacted() -> None:
    echo = ModelTurn.error(401, f"Incorrect API key provided: {REAL['openai']}")
    async with ModelServer(Script(turns=[echo])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            reply = await _post(proxy, "chat", *STREAMED["chat"])
    assert reply.status == 401
    assert REAL["openai"] not in reply.body.decode() and "[redacted key]" in reply.body.decode()
    assert REAL["openai"] not in repr(proxy)


async def test_the_gemini_key_parameter_is_dropped() -> None:
    path, body = STREAMED["gemini"]
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            raw = raw_request(f"{path}&key={proxy.client_key}", body)
            (reply,) = await exchange(proxy.port, [raw])
    assert reply.status == 200
    (through,) = server.requests
    assert through.query == "alt=sse"
    assert through.headers["x-goog-api-key"] == REAL["gemini"]


async def test_a_unix_socket_serves_the_same(tmp_path: Path) -> None:
    where = tmp_path / "proxy.sock"
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL, socket_path=where) as proxy:
            data = await _raw_exchange(
                await anyio.connect_unix(where),
                raw_request(*STREAMED["chat"], headers=auth("chat", proxy.client_key)),
            )
    reply, _ = parse_reply(data)
    assert reply.status == 200 and len(proxy.ledger) == 1
    assert not where.exists()  # the socket is removed when the proxy stops


def test_a_bad_upstream_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="not an http"):
        CredentialProxy("ftp://example.com", keys=REAL)


async def _post_as(proxy: CredentialProxy, key: str, api: str, path: str, body: Any) -> Reply:
    (reply,) = await exchange(proxy.port, [raw_request(path, body, headers=auth(api, key))])
    return reply


async def test_each_client_meters_its_own_calls_and_a_disagreement_is_reported() -> None:
    """Two sessions share the proxy, each with a client of its own: each turn's slice holds
    its own client's calls only, whatever the other one called meanwhile."""
    async with ModelServer(Script(turns=[TURN, TURN, TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            first, second = proxy.client("first"), proxy.client("second")
            assert first.key != second.key != proxy.client_key
            assert first.key not in repr(first) and first.key not in repr(proxy)
            mark = first.mark()
            await _post_as(proxy, first.key, "chat", *STREAMED["chat"])
            await _post_as(proxy, second.key, "chat", *STREAMED["chat"])
            served = proxy.ledger.since(0)
            assert [e.client for e in served.entries] == ["first", "second"]
            alone = served.of_client("first").main.usage
            agreeing = await first.metered_since(mark, TurnSummary(turn=1, usage=alone))
            wrong = alone.model_copy(update={"output_tokens": 1})
            mark = second.mark()
            await _post_as(proxy, first.key, "chat", *STREAMED["chat"])
            disagreeing = await first.metered_since(mark, TurnSummary(turn=2, usage=wrong))
    assert (agreeing.client, agreeing.calls, agreeing.agrees) == ("first", 1, True)
    assert agreeing.usage == alone and agreeing.disagreement is None
    assert disagreeing.agrees is False and disagreeing.calls == 1
    assert disagreeing.disagreement == (
        f"the agent reported output_tokens 1 (proxy {SCRIPTED.output_tokens})"
    )
    error = mismatch_error(disagreeing)
    assert error is not None and error.code == "usage_mismatch" and not error.fatal


async def test_a_client_s_own_budget_refuses_its_calls_only() -> None:
    async with ModelServer(Script(turns=[TURN, TURN, TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            small = proxy.client("small", max_tokens=1)
            other = proxy.client("other")
            mark = small.mark()
            assert (await _post_as(proxy, small.key, "chat", *STREAMED["chat"])).status == 200
            refused = await _post_as(proxy, small.key, "chat", *STREAMED["chat"])
            assert (await _post_as(proxy, other.key, "chat", *STREAMED["chat"])).status == 200
            metered = await small.metered_since(mark, TurnSummary(turn=1))
    assert refused.status == 429 and b"the budget of small" in refused.body
    assert metered.refused == 1 and metered.calls == 1
    assert metered.budget_spent is not None and "the budget of small" in metered.budget_spent
    assert other.budget_spent is None and len(server.model_requests) == 2
    assert [e.refusal for e in proxy.ledger.entries] == [None, "budget", None]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.client("a", max_tokens=0), "budget must be above 0"),
        (lambda p: p.client("a", max_cost_usd=-1.0), "budget must be above 0"),
        (lambda p: (p.client("a"), p.client("a")), "already has a client named 'a'"),
        (lambda p: p.client(" "), "non-empty"),
    ],
)
def test_bad_client_arguments_are_configuration_errors(make: Any, words: str) -> None:
    proxy = CredentialProxy("http://127.0.0.1:9", keys=REAL)
    with pytest.raises(ConfigurationError, match=words):
        make(proxy)


def test_a_meter_that_is_no_usage_meter_is_refused_by_the_session_options() -> None:
    with pytest.raises(ConfigurationError, match="meter"):
        SessionOptions(meter="the proxy")  # pyright: ignore[reportArgumentType]


def test_no_figures_for_metered_tokens_is_a_disagreement() -> None:
    assert usage_disagreement(None, LedgerSlice()) is None  # nothing metered, nothing said
    ledger = Ledger()
    ledger.append(
        LedgerEntry(
            seq=0, api="chat", model="m", status=200, usage=Usage(input_tokens=5, output_tokens=2),
            received_at=datetime.now(timezone.utc), answered_at=datetime.now(timezone.utc),
        )
    )  # fmt: skip
    said = usage_disagreement(Usage(usage_source="unavailable"), ledger.since(0))
    assert said == (
        "the agent reported no token figures; the proxy metered "
        "{'input_tokens': 5, 'output_tokens': 2}"
    )


def test_a_reported_cost_off_the_catalog_s_price_is_a_disagreement() -> None:
    prices = PriceCatalog({"models": {"m": {"input": 1_000_000.0, "output": 1_000_000.0}}})
    ledger = Ledger()
    ledger.append(
        LedgerEntry(
            seq=0, api="chat", model="m", status=200, usage=Usage(input_tokens=5, output_tokens=2),
            received_at=datetime.now(timezone.utc), answered_at=datetime.now(timezone.utc),
        )
    )  # fmt: skip
    figures = {"input_tokens": 5, "output_tokens": 2, "cost_source": "reported"}
    right = Usage(**figures, cost_usd=7.0)  # pyright: ignore[reportArgumentType]
    wrong = Usage(**figures, cost_usd=7.5)  # pyright: ignore[reportArgumentType]
    assert usage_disagreement(right, ledger.since(0), prices=prices) is None
    said = usage_disagreement(wrong, ledger.since(0), prices=prices)
    assert said == "the agent reported cost $7.500000 (proxy $7.000000 at catalog prices)"


async def test_calls_that_are_no_model_calls_pass_with_the_key_unmetered() -> None:
    async with ModelServer(Script(turns=[TURN])) as server:
        async with CredentialProxy(server.url, keys=REAL) as proxy:
            counted = await _post(proxy, "anthropic", "/v1/messages/count_tokens", {"messages": []})
            bearer = f"authorization: Bearer {proxy.client_key}"
            get = f"GET /health HTTP/1.1\r\n{bearer}\r\nConnection: close\r\n\r\n"
            (health,) = await exchange(proxy.port, [get.encode()])
    assert counted.status == 200 and "input_tokens" in counted.json()
    assert health.status == 200 and health.json() == {"status": "ok"}
    counting, _ = server.requests
    assert counting.headers["x-api-key"] == REAL["anthropic"]
    assert len(proxy.ledger) == 0 and server.model_requests == []


def test_figures_without_their_split_are_held_against_the_metered_whole() -> None:
    # Gemini CLI's whole prompt (cache reads inside) and output without thoughts.
    ledger = Ledger()
    metered = Usage(
        input_tokens=5, cache_read_tokens=20, output_tokens=9, thinking_tokens=4
    )  # the whole prompt 25, the answer 5
    ledger.append(
        LedgerEntry(
            seq=0, api="gemini", model="m", status=200, usage=metered,
            received_at=datetime.now(timezone.utc), answered_at=datetime.now(timezone.utc),
        )
    )  # fmt: skip
    right = Usage(whole_prompt_tokens=25, answer_tokens=5, usage_source="reported")
    assert usage_disagreement(right, ledger.since(0)) is None
    wrong = Usage(whole_prompt_tokens=25, answer_tokens=9, usage_source="reported")
    said = usage_disagreement(wrong, ledger.since(0))
    assert said == "the agent reported answer_tokens 9 (proxy 5)"
