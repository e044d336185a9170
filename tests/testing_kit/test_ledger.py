"""The model server's usage ledger: the tokens each answer reported, as the wire carried them and
in the library's convention; side requests, errors, marks, prices and reading it from threads."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import anyio.from_thread
import pytest
from model_client import Reply, exchange, post, raw_request

from agentrun import Usage
from agentrun._vocabulary.prices import PriceCatalog
from agentrun.offline import (
    LedgerEntry,
    ModelServer,
    ModelTurn,
    Script,
    ScriptUsage,
    StreamError,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)

pytestmark = pytest.mark.anyio

#: Every figure distinct, so a figure read from the wrong field cannot pass.
SCRIPTED = ScriptUsage(
    input_tokens=41,
    cache_read_tokens=1_003,
    cache_write_tokens=207,
    output_tokens=97,
    reasoning_tokens=31,
)

TURN = ModelTurn(
    blocks=[
        ThinkingBlock(text="Let me see."),
        TextBlock(text="Running it."),
        ToolCallBlock(arguments={"command": "ls"}),
    ],
    usage=SCRIPTED,
)

GEMINI_PATH = "/v1beta/models/gem-model:streamGenerateContent?alt=sse"
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": (
        "/v1/messages?beta=true",
        {"model": "claude-x", "stream": True, "messages": [], "max_tokens": 10},
    ),
    "responses": ("/v1/responses", {"model": "resp-model", "stream": True, "input": []}),
    "chat": ("/v1/chat/completions", {"model": "chat-model", "stream": True, "messages": []}),
    "gemini": (GEMINI_PATH, {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
}


def _whole(api: str) -> tuple[str, dict[str, Any]]:
    path, body = REQUESTS[api]
    if api == "gemini":
        return path.replace(":streamGenerateContent?alt=sse", ":generateContent"), body
    return path, {**body, "stream": False}


def _wire_usage(api: str, reply: Reply, streamed: bool) -> dict[str, Any]:
    """The usage object as the client reads it off the wire, for each API."""
    if not streamed:
        body = reply.json()
        return body["usageMetadata"] if api == "gemini" else body["usage"]
    events = reply.sse_json()
    if api == "anthropic":
        return next(e["usage"] for e in events if e["type"] == "message_delta")
    if api == "responses":
        return next(e["response"]["usage"] for e in events if e["type"] == "response.completed")
    if api == "chat":
        return next(e["usage"] for e in events if e.get("usage"))
    return next(e["usageMetadata"] for e in events if "usageMetadata" in e)


def _convention(api: str, wire: dict[str, Any]) -> Usage:
    """The wire usage in the library's convention, by each API's documented meaning."""
    if api == "anthropic":
        return Usage(
            input_tokens=wire["input_tokens"],
            cache_read_tokens=wire["cache_read_input_tokens"],
            cache_write_tokens=wire["cache_creation_input_tokens"],
            output_tokens=wire["output_tokens"],
            thinking_tokens=wire["output_tokens_details"]["thinking_tokens"],
        )
    if api == "responses":
        details = wire["input_tokens_details"]
        return Usage(
            input_tokens=wire["input_tokens"]
            - details["cached_tokens"]
            - details["cache_write_tokens"],
            cache_read_tokens=details["cached_tokens"],
            cache_write_tokens=details["cache_write_tokens"],
            output_tokens=wire["output_tokens"],
            thinking_tokens=wire["output_tokens_details"]["reasoning_tokens"],
        )
    if api == "chat":
        cached = wire["prompt_tokens_details"]["cached_tokens"]
        return Usage(
            input_tokens=wire["prompt_tokens"] - cached,
            cache_read_tokens=cached,
            cache_write_tokens=0,
            output_tokens=wire["completion_tokens"],
            thinking_tokens=wire["completion_tokens_details"]["reasoning_tokens"],
        )
    cached = wire["cachedContentTokenCount"]
    return Usage(
        input_tokens=wire["promptTokenCount"] - cached,
        cache_read_tokens=cached,
        cache_write_tokens=0,
        output_tokens=wire["candidatesTokenCount"] + wire["thoughtsTokenCount"],
        thinking_tokens=wire["thoughtsTokenCount"],
    )


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("api", sorted(REQUESTS))
async def test_each_dialect_enters_the_tokens_its_answer_carried(api: str, streamed: bool) -> None:
    path, body = REQUESTS[api] if streamed else _whole(api)
    async with ModelServer(Script(turns=[TURN])) as server:
        reply = await post(server, path, body)
    assert reply.status == 200
    wire = _wire_usage(api, reply, streamed)
    (entry,) = server.ledger.entries
    assert entry.reported == wire
    assert entry.usage == _convention(api, wire)
    # Whatever the API, the whole prompt and the output are the script's.
    assert entry.usage.prompt_tokens == SCRIPTED.prompt_tokens
    assert entry.usage.output_tokens == SCRIPTED.output_tokens
    assert entry.usage.thinking_tokens == SCRIPTED.reasoning_tokens
    assert (entry.api, entry.status, entry.side_request, entry.turn_index) == (api, 200, None, 0)
    assert entry.model == {"anthropic": "claude-x", "responses": "resp-model",
                           "chat": "chat-model", "gemini": "gem-model"}[api]  # fmt: skip
    assert entry.seq == server.requests[0].seq
    assert entry.complete and entry.received_at <= entry.answered_at


async def test_side_requests_are_flagged_and_kept_apart_from_the_main_calls() -> None:
    title = {
        "model": "chat-model",
        "stream": True,
        "messages": [{"role": "system", "content": "You are a title generator. Be short."}],
    }
    async with ModelServer(Script(turns=[TURN])) as server:
        await post(server, "/v1/chat/completions", title)
        main = await post(server, *REQUESTS["chat"])
    side, call = server.ledger.entries
    assert (side.side_request, side.is_side, side.turn_index) == ("opencode-title", True, None)
    assert (call.side_request, call.is_side) == (None, False)
    everything = server.ledger.since(0)
    assert everything.main.entries == (call,)
    assert everything.side.entries == (side,)
    assert everything.main.usage == _convention("chat", _wire_usage("chat", main, True))
    assert everything.side.usage == side.usage and side.usage.output_tokens
    assert everything.usage == call.usage + side.usage
    assert everything.by_side_request() == {"opencode-title": side.usage}


async def test_errors_are_entries_with_the_status_and_what_they_reported() -> None:
    script = Script(
        turns=[
            ModelTurn.error(503, "down"),
            ModelTurn(blocks=[TextBlock(text="partial"), StreamError()], usage=SCRIPTED),
            ModelTurn(blocks=[TextBlock(text="partial"), StreamError()], usage=SCRIPTED),
            ModelTurn(blocks=[TextBlock(text="partial"), StreamError()], usage=SCRIPTED),
        ]
    )
    async with ModelServer(script) as server:
        failed = await post(server, *REQUESTS["chat"])
        cut_chat = await post(server, *REQUESTS["chat"])
        cut_anthropic = await post(server, *REQUESTS["anthropic"])
        cut_responses = await post(server, *REQUESTS["responses"])
        not_json = await exchange(
            server,
            [b"POST /v1/messages HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"],
        )
        await post(server, "/v1/messages/count_tokens", {"messages": []})
        await exchange(server, [b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"])
    assert (failed.status, not_json[0].status) == (503, 400)
    http_error, chat, anthropic, responses, bad_body = server.ledger.entries
    assert [e.status for e in server.ledger.entries] == [503, 200, 200, 200, 400]
    zero = Usage(input_tokens=0, output_tokens=0, cache_read_tokens=0, cache_write_tokens=0,
                 thinking_tokens=0)  # fmt: skip
    # Nothing reported: no tokens.
    for entry in (http_error, chat, bad_body):
        assert entry.reported is None and entry.usage == zero
    assert '"usage"' not in cut_chat.body.decode()
    assert (http_error.turn_index, bad_body.api, bad_body.model) == (0, "anthropic", None)
    # Anthropic had reported the input in message_start; Responses reports it on failure.
    start = cut_anthropic.sse_json()[0]["message"]["usage"]
    assert anthropic.reported == start and anthropic.usage.output_tokens == 1
    assert anthropic.usage.prompt_tokens == SCRIPTED.prompt_tokens
    failed_usage = next(
        e["response"]["usage"] for e in cut_responses.sse_json() if e["type"] == "response.failed"
    )
    assert responses.reported == failed_usage
    assert responses.usage == _convention("responses", failed_usage)
    # count_tokens and the health check are no model calls.
    assert len(server.requests) == 7 and len(server.ledger) == 5


async def test_an_answer_the_client_abandons_is_an_incomplete_entry() -> None:
    slow = ModelTurn(blocks=[TextBlock(text="x" * 200)], chunk_chars=1, chunk_delay=0.02)
    async with ModelServer(Script(turns=[slow])) as server:
        async with await anyio.connect_tcp("127.0.0.1", server.port) as conn:
            await conn.send(raw_request(*REQUESTS["chat"]))
            await conn.receive()
        with anyio.fail_after(10):
            while not len(server.ledger):
                await anyio.sleep(0.02)
    (entry,) = server.ledger.entries
    assert not entry.complete and entry.status == 200


async def test_a_mark_slices_what_was_served_after_it() -> None:
    script = Script(turns=[TURN, TURN, ModelTurn.text("third", usage=ScriptUsage(output_tokens=5))])
    async with ModelServer(script) as server:
        first = server.ledger.mark()
        await post(server, *REQUESTS["anthropic"])
        second = server.ledger.mark()
        await post(server, *REQUESTS["anthropic"])
        await post(server, *REQUESTS["responses"])
        later = server.ledger.since(second)
    assert (first, second) == (0, 1)
    assert [e.turn_index for e in later.entries] == [1, 2]
    assert [e.turn_index for e in server.ledger.between(first, second).entries] == [0]
    assert later.usage.output_tokens == SCRIPTED.output_tokens + 5
    assert server.ledger.since(0).usage == server.ledger.between(0, 1).usage + later.usage
    assert len(server.ledger.since(3)) == 0


async def test_the_price_catalog_applied_to_a_slice() -> None:
    prices = PriceCatalog(
        {
            "models": {
                "claude-x": {
                    "input": 3.0,
                    "output": 15.0,
                    "cached_input": 0.3,
                    "cache_write": 3.75,
                },
                "resp-model": {"input": 1.25, "output": 10.0, "cached_input": 0.125},
            }
        }
    )
    async with ModelServer(Script(turns=[TURN, TURN])) as server:
        await post(server, *REQUESTS["anthropic"])
        await post(server, *REQUESTS["responses"])
    claude, responses = server.ledger.entries
    both = server.ledger.since(0)
    u = claude.usage
    by_hand = (
        (u.input_tokens or 0) * 3.0
        + (u.cache_read_tokens or 0) * 0.3
        + (u.cache_write_tokens or 0) * 3.75
        + (u.output_tokens or 0) * 15.0
    ) / 1_000_000
    assert by_hand > 0
    assert server.ledger.between(0, 1).cost(prices=prices) == pytest.approx(by_hand, rel=1e-9)
    # Each entry at its own model's prices, or all of them as one model.
    apart = [
        prices.estimate(claude.usage, "claude-x"),
        prices.estimate(responses.usage, "resp-model"),
    ]
    assert both.cost(prices=prices) == pytest.approx(sum(p or 0 for p in apart), rel=1e-9)
    assert None not in apart
    assert both.cost("claude-x", prices=prices) == pytest.approx(
        prices.estimate(claude.usage + responses.usage, "claude-x"), rel=1e-9
    )
    assert both.cost("unknown-model", prices=prices) is None
    assert server.ledger.since(2).cost(prices=prices) == 0.0


def test_the_ledger_is_read_from_threads_while_the_server_runs_in_another() -> None:
    calls, clients = 12, 4
    script = Script(turns=[TURN.model_copy(update={"repeat": calls * clients})])
    seen: list[int] = []
    problems: list[BaseException] = []
    with anyio.from_thread.start_blocking_portal() as portal:
        server = portal.wrap_async_context_manager(ModelServer(script))
        with server as running:
            stop = threading.Event()

            def client() -> None:
                try:
                    for _ in range(calls):
                        portal.call(post, running, *REQUESTS["chat"])
                except BaseException as exc:
                    problems.append(exc)

            def reader() -> None:
                try:
                    while not stop.is_set():
                        mark = running.ledger.mark()
                        piece = running.ledger.since(0)
                        assert len(piece) >= mark
                        assert piece.usage.output_tokens == SCRIPTED.output_tokens * len(piece)
                        seen.append(len(piece))
                except BaseException as exc:
                    problems.append(exc)

            threads = [threading.Thread(target=client) for _ in range(clients)]
            watcher = threading.Thread(target=reader)
            watcher.start()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            stop.set()
            watcher.join()
            entries = running.ledger.entries
    assert problems == []
    assert len(entries) == calls * clients
    assert sorted(e.seq for e in entries) == list(range(calls * clients))
    assert seen == sorted(seen) and seen
    total = running.ledger.since(0).usage
    assert total.output_tokens == SCRIPTED.output_tokens * calls * clients


def test_entries_are_frozen_and_serialize() -> None:
    entry = LedgerEntry.model_validate_json(
        json.dumps(
            {
                "seq": 3,
                "api": "chat",
                "model": "m",
                "status": 200,
                "reported": {"prompt_tokens": 5},
                "usage": {"input_tokens": 5},
                "received_at": "2025-01-01T00:00:00Z",
                "answered_at": "2025-01-01T00:00:01Z",
            }
        )
    )
    assert LedgerEntry.model_validate_json(entry.model_dump_json()) == entry
    with pytest.raises(ValueError, match="frozen"):
        entry.status = 500
