"""Moving items through anyio memory streams without a needless trip through the event loop.

``send`` and ``receive`` of a memory object stream always checkpoint, even when the item can move
at once. On the per-message path (the reader to the turn, the turn to its consumer) that is one
event-loop iteration per message for nothing; these take the immediate path first.
"""

from __future__ import annotations

from typing import TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["receive_soon", "send_soon"]

T = TypeVar("T")


async def send_soon(stream: MemoryObjectSendStream[T], item: T) -> None:
    """Send ``item``; wait only when the stream is full."""
    try:
        stream.send_nowait(item)
    except anyio.WouldBlock:
        await stream.send(item)


async def receive_soon(stream: MemoryObjectReceiveStream[T]) -> T:
    """The next item; wait only when none is buffered."""
    try:
        return stream.receive_nowait()
    except anyio.WouldBlock:
        return await stream.receive()
