"""JsonRpcConnection: two connections back to back, and a scripted raw peer."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agentrun._vocabulary.errors import AgentrunError, LineTooLongError, SessionTerminatedError
from agentrun._wire.framing import LineTooLong
from agentrun._wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    JsonRpcConnection,
    JsonRpcError,
    JsonRpcProblem,
    RequestTimeoutError,
)

pytestmark = pytest.mark.anyio

Item = bytes | LineTooLong


class Recorder:
    """Collects notifications and problems."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, Any]] = []
        self.problems: list[JsonRpcProblem] = []

    def on_notification(self, method: str, params: Any) -> None:
        self.notes.append((method, params))

    def on_problem(self, problem: JsonRpcProblem) -> None:
        self.problems.append(problem)

    def codes(self) -> list[str]:
        return [p.code for p in self.problems]


class Peer:
    """The far end of one connection, speaking raw lines (a scripted agent)."""

    def __init__(self) -> None:
        self.to_conn: MemoryObjectSendStream[Item]
        self.conn_incoming: MemoryObjectReceiveStream[Item]
        self.to_conn, self.conn_incoming = anyio.create_memory_object_stream[Item](1000)
        self._out_send: MemoryObjectSendStream[bytes]
        self._out_recv: MemoryObjectReceiveStream[bytes]
        self._out_send, self._out_recv = anyio.create_memory_object_stream[bytes](1000)

    async def send_line(self, data: bytes) -> None:
        # The connection hands over exactly one line with its newline.
        assert data.endswith(b"\n")
        assert b"\n" not in data[:-1]
        await self._out_send.send(data)

    async def feed(self, obj: Any) -> None:
        await self.to_conn.send(json.dumps(obj).encode())

    async def feed_raw(self, item: Item) -> None:
        await self.to_conn.send(item)

    async def read(self) -> dict[str, Any]:
        with anyio.fail_after(5):
            line = await self._out_recv.receive()
        msg = json.loads(line)
        assert isinstance(msg, dict)
        assert msg["jsonrpc"] == "2.0"
        return msg  # type: ignore[return-value]

    def end_input(self) -> None:
        self.to_conn.close()

    def close(self) -> None:
        for stream in (self.to_conn, self.conn_incoming, self._out_send, self._out_recv):
            stream.close()


@asynccontextmanager
async def peer_connection(
    **kwargs: Any,
) -> AsyncIterator[tuple[JsonRpcConnection, Peer, Recorder]]:
    peer = Peer()
    rec = Recorder()
    kwargs.setdefault("on_notification", rec.on_notification)
    kwargs.setdefault("on_problem", rec.on_problem)
    conn = JsonRpcConnection(peer.send_line, **kwargs)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.run, peer.conn_incoming)
            yield conn, peer, rec
            conn.close()
    finally:
        peer.close()


@asynccontextmanager
async def connected_pair(
    a_kwargs: dict[str, Any], b_kwargs: dict[str, Any]
) -> AsyncIterator[tuple[JsonRpcConnection, JsonRpcConnection]]:
    """Two connections wired back to back through memory streams."""
    a_to_b_send, a_to_b_recv = anyio.create_memory_object_stream[Item](1000)
    b_to_a_send, b_to_a_recv = anyio.create_memory_object_stream[Item](1000)

    async def a_send(data: bytes) -> None:
        assert data.endswith(b"\n")
        await a_to_b_send.send(data[:-1])

    async def b_send(data: bytes) -> None:
        assert data.endswith(b"\n")
        await b_to_a_send.send(data[:-1])

    a = JsonRpcConnection(a_send, **a_kwargs)
    b = JsonRpcConnection(b_send, **b_kwargs)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.run, b_to_a_recv)
            tg.start_soon(b.run, a_to_b_recv)
            yield a, b
            a.close()
            b.close()
    finally:
        for stream in (a_to_b_send, a_to_b_recv, b_to_a_send, b_to_a_recv):
            stream.close()


# -- requests and responses ------------------------------------------------------------


async def test_request_gets_result_and_ids_count_from_one() -> None:
    async with peer_connection() as (conn, peer, _):
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                msg = await peer.read()
                assert msg == {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": 1}}
                await peer.feed({"jsonrpc": "2.0", "id": 1, "result": {"pong": True}})
                msg = await peer.read()
                assert msg["id"] == 2
                assert "params" not in msg
                await peer.feed({"jsonrpc": "2.0", "result": None, "id": 2})

            tg.start_soon(answer)
            assert await conn.request("ping", {"x": 1}) == {"pong": True}
            assert await conn.request("bare") is None
        assert conn.pending_requests == 0


async def test_concurrent_requests_both_directions_with_colliding_ids() -> None:
    async def handler_for(side: str) -> Any:
        async def handler(method: str, params: Any) -> Any:
            # Answer out of order.
            await anyio.sleep(random.random() / 100)
            return {"side": side, "method": method, "n": params["n"]}

        return handler

    async with connected_pair(
        {"on_request": await handler_for("a")}, {"on_request": await handler_for("b")}
    ) as (a, b):
        results: dict[tuple[str, int], Any] = {}

        async def call(conn: JsonRpcConnection, name: str, n: int) -> None:
            results[(name, n)] = await conn.request(f"from_{name}", {"n": n}, timeout=5)

        async with anyio.create_task_group() as tg:
            for n in range(25):
                tg.start_soon(call, a, "a", n)
                tg.start_soon(call, b, "b", n)
        for n in range(25):
            # a's requests are served by b and vice versa, each matched to its own id.
            assert results[("a", n)] == {"side": "b", "method": "from_a", "n": n}
            assert results[("b", n)] == {"side": "a", "method": "from_b", "n": n}


async def test_peer_ids_may_collide_with_ours_and_be_strings() -> None:
    release = anyio.Event()

    async def handler(method: str, params: Any) -> Any:
        await release.wait()
        return {"answered": method}

    result: list[Any] = []
    async with (
        peer_connection(on_request=handler) as (conn, peer, _),
        anyio.create_task_group() as tg,
    ):

        async def ours() -> None:
            result.append(await conn.request("mine"))

        tg.start_soon(ours)
        sent = await peer.read()
        assert sent["id"] == 1
        # The peer uses id 1 too (its own space), plus a string id.
        await peer.feed({"jsonrpc": "2.0", "id": 1, "method": "theirs", "params": {}})
        await peer.feed({"jsonrpc": "2.0", "id": "1", "method": "theirs_str"})
        await peer.feed({"jsonrpc": "2.0", "id": 1, "result": "yours"})
        with anyio.fail_after(5):
            while not result:
                await anyio.sleep(0.001)
        assert result == ["yours"]
        release.set()
        answers = {repr(m["id"]): m for m in (await peer.read(), await peer.read())}
        assert answers["1"]["result"] == {"answered": "theirs"}
        assert answers["'1'"]["result"] == {"answered": "theirs_str"}


async def test_error_response_raises_jsonrpc_error() -> None:
    async with (
        peer_connection(engine="opencode") as (conn, peer, _),
        anyio.create_task_group() as tg,
    ):

        async def answer() -> None:
            msg = await peer.read()
            await peer.feed(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "error": {
                        "code": -32603,
                        "message": "Internal error: fake upstream error 500",
                        "data": {"errorName": "APIError"},
                    },
                }
            )

        tg.start_soon(answer)
        with pytest.raises(JsonRpcError) as info:
            await conn.request("session/prompt", {})
        err = info.value
        assert err.code == INTERNAL_ERROR
        assert err.message == "Internal error: fake upstream error 500"
        assert err.data == {"errorName": "APIError"}
        assert err.method == "session/prompt"
        assert err.engine == "opencode"
        assert isinstance(err, AgentrunError)
        assert "session/prompt" in str(err)
        assert "-32603" in str(err)


# -- ordering ----------------------------------------------------------------------------


async def test_notifications_before_a_response_are_delivered_first() -> None:
    delivered: list[int] = []

    async def on_notification(method: str, params: Any) -> None:
        # A slow consumer: the reader must wait for it before resolving the response.
        if params["n"] % 10 == 0:
            await anyio.sleep(0.005)
        delivered.append(params["n"])

    async with (
        peer_connection(on_notification=on_notification) as (conn, peer, _),
        anyio.create_task_group() as tg,
    ):

        async def script() -> None:
            msg = await peer.read()
            for n in range(100):
                await peer.feed({"jsonrpc": "2.0", "method": "session/update", "params": {"n": n}})
            await peer.feed({"jsonrpc": "2.0", "id": msg["id"], "result": {"stopReason": "x"}})

        tg.start_soon(script)
        result = await conn.request("session/prompt", {})
        # Everything sent before the response has been delivered, in order.
        assert delivered == list(range(100))
        assert result == {"stopReason": "x"}


async def test_notifications_from_a_handler_arrive_before_its_response() -> None:
    got: list[int] = []

    async def serve_prompt(method: str, params: Any) -> Any:
        for n in range(50):
            await b.notify("session/update", {"n": n})
        return {"stopReason": "end_turn"}

    def on_notification(method: str, params: Any) -> None:
        got.append(params["n"])

    async with connected_pair(
        {"on_notification": on_notification}, {"on_request": serve_prompt}
    ) as (
        a,
        b,
    ):
        for _ in range(3):
            got.clear()
            assert await a.request("session/prompt", {}) == {"stopReason": "end_turn"}
            assert got == list(range(50))


async def test_slow_request_handler_does_not_block_reading() -> None:
    seen_later_notification = anyio.Event()

    async def handler(method: str, params: Any) -> Any:
        # Waits for a notification that arrives after this request: it only can if the
        # reader keeps going while the handler runs.
        await seen_later_notification.wait()
        return {"outcome": {"outcome": "selected", "optionId": "once"}}

    def on_notification(method: str, params: Any) -> None:
        seen_later_notification.set()

    async with peer_connection(on_request=handler, on_notification=on_notification) as (
        _,
        peer,
        _,
    ):
        await peer.feed({"jsonrpc": "2.0", "id": 0, "method": "session/request_permission"})
        await peer.feed({"jsonrpc": "2.0", "method": "session/update", "params": {}})
        answer = await peer.read()
        assert answer == {
            "jsonrpc": "2.0",
            "id": 0,
            "result": {"outcome": {"outcome": "selected", "optionId": "once"}},
        }


# -- peer requests: errors -----------------------------------------------------------------


async def test_unknown_method_gets_32601() -> None:
    async def handler(method: str, params: Any) -> Any:
        if method == "known":
            return {}
        raise JsonRpcError.method_not_found(method)

    async with connected_pair({}, {"on_request": handler}) as (a, _):
        assert await a.request("known") == {}
        with pytest.raises(JsonRpcError) as info:
            await a.request("terminal/create", {"command": "ls"})
        assert info.value.code == METHOD_NOT_FOUND
        assert "terminal/create" in info.value.message


async def test_no_handler_answers_method_not_found() -> None:
    async with peer_connection() as (_, peer, rec):
        await peer.feed({"jsonrpc": "2.0", "id": "x", "method": "fs/read_text_file"})
        answer = await peer.read()
        assert answer["id"] == "x"
        assert answer["error"]["code"] == METHOD_NOT_FOUND
        assert rec.problems == []


async def test_handler_exception_gets_32603_and_is_reported() -> None:
    async def handler(method: str, params: Any) -> Any:
        raise RuntimeError("secret path /home/me/.key")

    rec = Recorder()
    async with connected_pair({}, {"on_request": handler, "on_problem": rec.on_problem}) as (a, _):
        with pytest.raises(JsonRpcError) as info:
            await a.request("session/request_permission", {})
        assert info.value.code == INTERNAL_ERROR
        assert info.value.message == "Internal error"  # nothing of the exception leaks
        assert info.value.data is None
        # The connection keeps working afterwards.
        with pytest.raises(JsonRpcError):
            await a.request("again", {})
    assert rec.codes() == ["handler_error", "handler_error"]
    assert isinstance(rec.problems[0].exception, RuntimeError)


async def test_handler_jsonrpc_error_is_sent_as_is() -> None:
    async def handler(method: str, params: Any) -> Any:
        raise JsonRpcError.invalid_params("no such file", {"path": params["path"]})

    async with connected_pair({}, {"on_request": handler}) as (a, _):
        with pytest.raises(JsonRpcError) as info:
            await a.request("fs/read_text_file", {"path": "/nope"})
        assert info.value.code == INVALID_PARAMS
        assert info.value.data == {"path": "/nope"}


async def test_unencodable_handler_result_gets_32603() -> None:
    async def handler(method: str, params: Any) -> Any:
        return {"x": object()}

    rec = Recorder()
    async with connected_pair({}, {"on_request": handler, "on_problem": rec.on_problem}) as (a, _):
        with pytest.raises(JsonRpcError) as info:
            await a.request("m")
        assert info.value.code == INTERNAL_ERROR
    assert rec.codes() == ["handler_error"]


async def test_peer_cancel_request_cancels_handler() -> None:
    started = anyio.Event()
    cancelled = anyio.Event()

    async def handler(method: str, params: Any) -> Any:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    async with peer_connection(on_request=handler, cancel_method="$/cancel_request") as (
        _,
        peer,
        rec,
    ):
        await peer.feed({"jsonrpc": "2.0", "id": "req-1", "method": "session/request_permission"})
        with anyio.fail_after(5):
            await started.wait()
        await peer.feed(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "req-1"}}
        )
        answer = await peer.read()
        assert answer["id"] == "req-1"
        assert answer["error"]["code"] == REQUEST_CANCELLED
        assert cancelled.is_set()
        assert rec.notes == []  # consumed by the connection


async def test_duplicate_peer_request_id_is_reported_and_ignored() -> None:
    release = anyio.Event()
    calls: list[str] = []

    async def handler(method: str, params: Any) -> Any:
        calls.append(method)
        await release.wait()
        return method

    async with peer_connection(on_request=handler) as (_, peer, rec):
        await peer.feed({"jsonrpc": "2.0", "id": 7, "method": "first"})
        await peer.feed({"jsonrpc": "2.0", "id": 7, "method": "second"})
        with anyio.fail_after(5):
            while not rec.problems:
                await anyio.sleep(0.001)
        release.set()
        assert (await peer.read())["result"] == "first"
        assert calls == ["first"]
        assert rec.codes() == ["protocol"]


# -- problems ------------------------------------------------------------------------------


async def test_malformed_lines_are_reported_and_reading_continues() -> None:
    async with peer_connection() as (conn, peer, rec):
        async with anyio.create_task_group() as tg:

            async def script() -> None:
                msg = await peer.read()
                await peer.feed_raw(b"not json at all")
                await peer.feed_raw(b'{"a": "\xff\xfe"}')
                await peer.feed_raw(b"[1, 2, 3]")
                await peer.feed_raw(b'{"jsonrpc": "2.0", "foo": 1}')
                await peer.feed_raw(b'{"jsonrpc": "2.0", "method": 5}')
                await peer.feed_raw(LineTooLong(size=10_000_000, limit=1000, head=b'{"jsonrpc"'))
                await peer.feed({"jsonrpc": "2.0", "id": 99, "result": {}})
                await peer.feed(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": -32700, "message": "Parse error"},
                    }
                )
                await peer.feed({"jsonrpc": "2.0", "id": 1, "method": 3})
                await peer.feed({"jsonrpc": "2.0", "id": [1], "method": "x"})
                await peer.feed({"jsonrpc": "2.0", "method": "session/update", "params": {"ok": 1}})
                await peer.feed({"jsonrpc": "2.0", "id": msg["id"], "result": "done"})

            tg.start_soon(script)
            assert await conn.request("go") == "done"
        assert rec.codes() == [
            "invalid_json",
            "invalid_utf8",
            "protocol",
            "protocol",
            "protocol",
            "line_too_long",
            "protocol",
            "protocol",
            "protocol",
            "protocol",
        ]
        assert rec.problems[0].raw == b"not json at all"
        assert rec.problems[5].raw == b'{"jsonrpc"'
        assert "99" in rec.problems[6].detail
        assert "Parse error" in rec.problems[7].detail
        assert rec.notes == [("session/update", {"ok": 1})]


async def test_observer_sees_each_decoded_message_once_before_dispatch() -> None:
    order: list[str] = []

    async def observe(msg: Any) -> None:
        await anyio.sleep(0)
        order.append(f"seen {msg.get('method') or msg.get('id')}")

    def note(method: str, params: Any) -> None:
        order.append(f"delivered {method}")

    async with peer_connection(on_message=observe, on_notification=note) as (conn, peer, rec):
        async with anyio.create_task_group() as tg:

            async def script() -> None:
                msg = await peer.read()
                await peer.feed_raw(b"not json at all")
                await peer.feed({"jsonrpc": "2.0", "method": "session/update", "params": {}})
                await peer.feed({"jsonrpc": "2.0", "id": msg["id"], "result": "done"})

            tg.start_soon(script)
            assert await conn.request("go") == "done"
    assert order == ["seen session/update", "delivered session/update", "seen 1"]
    assert rec.codes() == ["invalid_json"]


@pytest.mark.parametrize("awaited", [False, True], ids=["plain", "async"])
async def test_a_line_taker_sees_each_line_first_and_what_it_takes_goes_no_further(
    awaited: bool,
) -> None:
    order: list[str] = []

    def take(line: bytes) -> bool:
        taken = b'"take"' in line
        order.append(f"{'took' if taken else 'passed'} {json.loads(line).get('method')}")
        return taken

    async def take_later(line: bytes) -> bool:
        await anyio.sleep(0)
        return take(line)

    def observe(msg: Any) -> None:
        order.append(f"seen {msg.get('method') or msg.get('id')}")

    def note(method: str, params: Any) -> None:
        order.append(f"delivered {method}")

    taker = take_later if awaited else take
    async with peer_connection(on_line=taker, on_message=observe, on_notification=note) as (
        conn,
        peer,
        rec,
    ):
        async with anyio.create_task_group() as tg:

            async def script() -> None:
                msg = await peer.read()
                await peer.feed({"jsonrpc": "2.0", "method": "take", "params": {}})
                await peer.feed({"jsonrpc": "2.0", "method": "other", "params": {}})
                await peer.feed({"jsonrpc": "2.0", "id": msg["id"], "result": "done"})

            tg.start_soon(script)
            assert await conn.request("go") == "done"
    assert order == [
        "took take",
        "passed other",
        "seen other",
        "delivered other",
        "passed None",
        "seen 1",
    ]
    assert rec.problems == []


async def test_notification_callback_error_is_reported_and_reading_continues() -> None:
    rec = Recorder()

    def on_notification(method: str, params: Any) -> None:
        if params.get("boom"):
            raise ValueError("bad update")
        rec.notes.append((method, params))

    async with (
        peer_connection(on_notification=on_notification, on_problem=rec.on_problem) as (
            conn,
            peer,
            _,
        ),
        anyio.create_task_group() as tg,
    ):

        async def script() -> None:
            msg = await peer.read()
            await peer.feed({"jsonrpc": "2.0", "method": "u", "params": {"boom": True}})
            await peer.feed({"jsonrpc": "2.0", "method": "u", "params": {"n": 1}})
            await peer.feed({"jsonrpc": "2.0", "id": msg["id"], "result": 1})

        tg.start_soon(script)
        assert await conn.request("go") == 1
    assert rec.codes() == ["callback_error"]
    assert isinstance(rec.problems[0].exception, ValueError)
    assert rec.notes == [("u", {"n": 1})]


async def test_async_problem_callback_and_default_logging(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    async def on_problem(problem: JsonRpcProblem) -> None:
        await anyio.sleep(0)
        seen.append(problem.code)

    async with peer_connection(on_problem=on_problem) as (_, peer, _):
        await peer.feed_raw(b"garbage")
        await peer.feed({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        await peer.read()
    assert seen == ["invalid_json"]

    peer = Peer()
    conn = JsonRpcConnection(peer.send_line)  # no callbacks at all
    try:
        await peer.feed_raw(b"garbage")
        await peer.feed({"jsonrpc": "2.0", "method": "dropped"})
        peer.end_input()
        with caplog.at_level("WARNING", logger="agentrun.jsonrpc"):
            await conn.run(peer.conn_incoming)
    finally:
        peer.close()
    assert "invalid_json" in caplog.text


async def test_oversized_response_fails_its_request() -> None:
    async with peer_connection() as (conn, peer, rec):
        async with anyio.create_task_group() as tg:

            async def script() -> None:
                msg = await peer.read()
                head = b'{"jsonrpc":"2.0","id":%d,"result":{"content":"aaaa' % msg["id"]
                await peer.feed_raw(LineTooLong(size=99_000_000, limit=64_000_000, head=head))

            tg.start_soon(script)
            with pytest.raises(LineTooLongError) as info:
                await conn.request("fs/huge")
            assert info.value.size == 99_000_000
        assert rec.codes() == ["line_too_long"]
        assert conn.pending_requests == 0


# -- ending ----------------------------------------------------------------------------------


async def test_pending_requests_fail_on_end_of_input() -> None:
    peer = Peer()
    conn = JsonRpcConnection(peer.send_line)
    errors: list[BaseException] = []
    try:
        async with anyio.create_task_group() as tg:

            async def call(n: int) -> None:
                try:
                    await conn.request("session/prompt", {"n": n})
                except ConnectionClosedError as exc:
                    errors.append(exc)

            tg.start_soon(conn.run, peer.conn_incoming)
            for n in range(3):
                tg.start_soon(call, n)
            for _ in range(3):
                await peer.read()
            assert conn.pending_requests == 3
            peer.end_input()
        assert len(errors) == 3
        assert all(isinstance(e, SessionTerminatedError) for e in errors)
        assert all(e.reason == "end of input" for e in errors)  # type: ignore[attr-defined]
        assert conn.closed
        with pytest.raises(ConnectionClosedError):
            await conn.request("late")
        with pytest.raises(ConnectionClosedError):
            await conn.notify("late")
    finally:
        peer.close()


async def test_close_fails_pending_and_stops_run() -> None:
    peer = Peer()
    conn = JsonRpcConnection(peer.send_line)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.run, peer.conn_incoming)

            async def closer() -> None:
                await peer.read()
                conn.close("shutting down")

            tg.start_soon(closer)
            with pytest.raises(ConnectionClosedError) as info:
                await conn.request("session/prompt")
            assert info.value.reason == "shutting down"
            assert info.value.method == "session/prompt"
        # run() returned by itself although the input never ended.
        conn.close()  # idempotent
    finally:
        peer.close()


async def test_requests_sent_before_run_starts() -> None:
    peer = Peer()
    conn = JsonRpcConnection(peer.send_line)
    result: list[Any] = []
    try:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                result.append(await conn.request("early"))

            tg.start_soon(call)
            msg = await peer.read()
            await peer.feed({"jsonrpc": "2.0", "id": msg["id"], "result": "ok"})
            peer.end_input()
            await conn.run(peer.conn_incoming)
        assert result == ["ok"]
    finally:
        peer.close()


async def test_handlers_are_cancelled_at_end_of_input() -> None:
    cancelled = anyio.Event()

    async def handler(method: str, params: Any) -> Any:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    peer = Peer()
    conn = JsonRpcConnection(peer.send_line, on_request=handler)
    try:
        await peer.feed({"jsonrpc": "2.0", "id": 0, "method": "session/request_permission"})
        peer.end_input()
        with anyio.fail_after(5):
            await conn.run(peer.conn_incoming)
        assert cancelled.is_set()
    finally:
        peer.close()


async def test_run_only_once() -> None:
    peer = Peer()
    conn = JsonRpcConnection(peer.send_line)
    try:
        peer.end_input()
        await conn.run(peer.conn_incoming)
        with pytest.raises(RuntimeError):
            await conn.run(peer.conn_incoming)
    finally:
        peer.close()


async def test_write_failure_raises_connection_closed() -> None:
    async def broken(data: bytes) -> None:
        raise anyio.BrokenResourceError

    conn = JsonRpcConnection(broken)
    with pytest.raises(ConnectionClosedError) as info:
        await conn.request("initialize", {})
    assert isinstance(info.value.__cause__, anyio.BrokenResourceError)
    assert conn.pending_requests == 0
    with pytest.raises(ConnectionClosedError):
        await conn.notify("session/cancel", {})


# -- timeouts and cancellation ----------------------------------------------------------------


async def test_request_timeout_and_late_response_is_dropped_quietly() -> None:
    async with peer_connection(cancel_method="$/cancel_request") as (conn, peer, rec):
        with pytest.raises(RequestTimeoutError) as info:
            await conn.request("slow", {}, timeout=0.05)
        assert isinstance(info.value, AgentrunError) and not isinstance(info.value, OSError)
        assert info.value.method == "slow"
        assert conn.pending_requests == 0
        request = await peer.read()
        cancel = await peer.read()
        assert cancel == {
            "jsonrpc": "2.0",
            "method": "$/cancel_request",
            "params": {"requestId": request["id"]},
        }
        # The answer arrives after all: it is dropped without a problem report.
        await peer.feed({"jsonrpc": "2.0", "id": request["id"], "result": "late"})
        await peer.feed({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        await peer.read()  # the ping was answered, so the late result was processed
        assert rec.problems == []


async def test_cancelled_request_is_forgotten() -> None:
    async with peer_connection() as (conn, peer, rec):
        with anyio.move_on_after(0.05):
            await conn.request("slow")
        assert conn.pending_requests == 0
        request = await peer.read()
        await peer.feed({"jsonrpc": "2.0", "id": request["id"], "result": "late"})
        # Works normally afterwards.
        async with anyio.create_task_group() as tg:

            async def answer() -> None:
                msg = await peer.read()
                assert "$/cancel_request" not in json.dumps(msg)  # no cancel_method set
                await peer.feed({"jsonrpc": "2.0", "id": msg["id"], "result": "fine"})

            tg.start_soon(answer)
            assert await conn.request("next", timeout=5) == "fine"
        assert rec.problems == []


# -- encoding ---------------------------------------------------------------------------------


class _Params(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    session_id: str
    message_id: str | None = None
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


async def test_pydantic_params_are_sent_by_alias_without_nones() -> None:
    async with peer_connection() as (conn, peer, _):
        await conn.notify(
            "session/cancel", _Params.model_validate({"sessionId": "ses_1", "_meta": {"k": "é"}})
        )
        line = await peer.read()
        assert line == {
            "jsonrpc": "2.0",
            "method": "session/cancel",
            "params": {"sessionId": "ses_1", "_meta": {"k": "é"}},
        }
        with pytest.raises(TypeError):
            await conn.request("bad", {"x": object()})
        assert conn.pending_requests == 0


async def test_writes_are_one_line_each_under_concurrency() -> None:
    chunks: list[bytes] = []

    async def slow_send(data: bytes) -> None:
        # Yield in the middle of a write; the lock must keep lines whole.
        half = len(data) // 2
        chunks.append(data[:half])
        await anyio.sleep(0)
        chunks.append(data[half:])

    conn = JsonRpcConnection(slow_send)
    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(conn.notify, "n", {"text": "x\ny" * n})
    lines = b"".join(chunks).split(b"\n")
    assert lines[-1] == b""
    decoded = [json.loads(line) for line in lines[:-1]]
    assert sorted(len(d["params"]["text"]) for d in decoded) == [3 * n for n in range(20)]
