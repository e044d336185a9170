"""The channel of the per-message hops: the errors and order of an anyio memory object stream."""

from __future__ import annotations

import anyio
import pytest

from agentrun._turns.channel import channel, receive_soon, send_soon


@pytest.mark.anyio
async def test_items_arrive_in_order_and_the_end_after_the_buffer() -> None:
    send, receive = channel[int](4)
    for i in range(3):
        send.send_nowait(i)
    send.close()
    assert [await receive_soon(receive) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(anyio.EndOfStream):
        await receive.receive()
    with pytest.raises(anyio.ClosedResourceError):
        send.send_nowait(3)


@pytest.mark.anyio
async def test_a_waiting_receiver_wakes_for_an_item_and_for_the_end() -> None:
    send, receive = channel[str](1)
    got: list[str] = []

    async def consume() -> None:
        try:
            while True:
                got.append(await receive.receive())
        except anyio.EndOfStream:
            got.append("end")

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.sleep(0.01)
        await send_soon(send, "a")
        await anyio.sleep(0.01)
        await send_soon(send, "b")
        await anyio.sleep(0.01)
        send.close()
    assert got == ["a", "b", "end"]


@pytest.mark.anyio
async def test_a_full_channel_holds_the_sender_until_there_is_room() -> None:
    send, receive = channel[int](2)
    sent: list[int] = []
    received: list[int] = []

    async def produce() -> None:
        for i in range(5):
            await send.send(i)
            sent.append(i)

    async with anyio.create_task_group() as tg:
        tg.start_soon(produce)
        await anyio.sleep(0.01)
        assert sent == [0, 1]  # the third waits for room
        with pytest.raises(anyio.WouldBlock):
            send.send_nowait(9)
        for _ in range(5):
            received.append(await receive.receive())
    assert received == [0, 1, 2, 3, 4]
    assert sent == [0, 1, 2, 3, 4]


@pytest.mark.anyio
async def test_closing_the_receiver_breaks_waiting_and_later_senders() -> None:
    send, receive = channel[int](1)
    send.send_nowait(0)
    outcome: list[str] = []

    async def produce() -> None:
        try:
            await send.send(1)
        except anyio.BrokenResourceError:
            outcome.append("broken")

    async with anyio.create_task_group() as tg:
        tg.start_soon(produce)
        await anyio.sleep(0.01)
        receive.close()
    assert outcome == ["broken"]
    with pytest.raises(anyio.BrokenResourceError):
        send.send_nowait(2)
    with pytest.raises(anyio.ClosedResourceError):
        receive.receive_nowait()


@pytest.mark.anyio
async def test_a_cancelled_wait_loses_nothing() -> None:
    send, receive = channel[int](2)
    with anyio.move_on_after(0.01):
        await receive.receive()
    send.send_nowait(7)
    assert await receive.receive() == 7
