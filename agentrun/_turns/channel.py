"""Moving messages between tasks with as few trips through the event loop as possible.

``send`` and ``receive`` of an anyio memory object stream always checkpoint, even when the item
can move at once, and a receive that has to wait checkpoints *before* it waits: one event-loop
iteration per message for nothing on the per-message path (the reader to the turn, the turn to
its consumer). :func:`channel` makes the bounded one-consumer queue these hops need, with the
same errors as a memory object stream (``WouldBlock``, ``EndOfStream``, ``ClosedResourceError``,
``BrokenResourceError``) but whose ``send`` and ``receive`` wait only when they must.
:func:`send_soon` and :func:`receive_soon` take the immediate path first on either kind.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar

import anyio

__all__ = ["Receiver", "Sender", "channel", "receive_soon", "send_soon"]

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)
T_co = TypeVar("T_co", covariant=True)


class _SendsNowait(Protocol[T_contra]):
    def send_nowait(self, item: T_contra, /) -> None: ...

    async def send(self, item: T_contra, /) -> None: ...


class _ReceivesNowait(Protocol[T_co]):
    def receive_nowait(self) -> T_co: ...

    async def receive(self) -> T_co: ...


# The waits below are outside the ``except`` clauses on purpose: a coroutine suspended inside
# one holds the exception, its traceback and frames (a reference cycle) for as long as it waits,
# which with hundreds of turns in flight is what the cyclic garbage collector then walks.


async def send_soon(stream: _SendsNowait[T], item: T) -> None:
    """Send ``item``; wait only when the stream is full."""
    if isinstance(stream, Sender):
        await stream.send(item)
        return
    try:
        stream.send_nowait(item)
        return
    except anyio.WouldBlock:
        pass
    await stream.send(item)


async def receive_soon(stream: _ReceivesNowait[T]) -> T:
    """The next item; wait only when none is buffered."""
    if isinstance(stream, Receiver):
        return await stream.receive()
    try:
        return stream.receive_nowait()
    except anyio.WouldBlock:
        pass
    return await stream.receive()


class _State(Generic[T]):
    __slots__ = ("items", "readable", "receive_closed", "send_closed", "size", "writable")

    def __init__(self, size: int) -> None:
        self.items: deque[T] = deque()
        self.size = size
        self.send_closed = False
        self.receive_closed = False
        #: Set when the waiting receiver may go on (an item came, or the sender closed).
        self.readable: anyio.Event | None = None
        #: Set when waiting senders may go on (room was made, or the receiver closed).
        self.writable: anyio.Event | None = None

    def wake_receiver(self) -> None:
        if self.readable is not None:
            self.readable.set()
            self.readable = None

    def wake_senders(self) -> None:
        if self.writable is not None:
            self.writable.set()
            self.writable = None


class Sender(Generic[T]):
    """The sending end of a :func:`channel`."""

    __slots__ = ("_state",)

    def __init__(self, state: _State[T]) -> None:
        self._state = state

    @property
    def buffered(self) -> int:
        """How many items wait for the receiver."""
        return len(self._state.items)

    def send_nowait(self, item: T) -> None:
        state = self._state
        if state.send_closed:
            raise anyio.ClosedResourceError
        if state.receive_closed:
            raise anyio.BrokenResourceError
        if len(state.items) >= state.size:
            raise anyio.WouldBlock
        state.items.append(item)
        state.wake_receiver()

    async def send(self, item: T) -> None:
        """Send ``item``, waiting (without a checkpoint first) while the channel is full."""
        state = self._state
        while len(state.items) >= state.size and not (state.send_closed or state.receive_closed):
            if state.writable is None:
                state.writable = anyio.Event()
            await state.writable.wait()
        self.send_nowait(item)

    def close(self) -> None:
        """No more items: the receiver ends (``EndOfStream``) once it took what is buffered."""
        self._state.send_closed = True
        self._state.wake_receiver()


class Receiver(Generic[T]):
    """The receiving end of a :func:`channel` (one task receives)."""

    __slots__ = ("_state",)

    def __init__(self, state: _State[T]) -> None:
        self._state = state

    def receive_nowait(self) -> T:
        state = self._state
        if state.receive_closed:
            raise anyio.ClosedResourceError
        if state.items:
            item = state.items.popleft()
            state.wake_senders()
            return item
        if state.send_closed:
            raise anyio.EndOfStream
        raise anyio.WouldBlock

    async def receive(self) -> T:
        """The next item, waiting (without a checkpoint first) while none is buffered."""
        state = self._state
        while not (state.items or state.send_closed or state.receive_closed):
            if state.readable is None:
                state.readable = anyio.Event()
            await state.readable.wait()
        return self.receive_nowait()

    def close(self) -> None:
        """Nothing more is received: senders fail (``BrokenResourceError``)."""
        state = self._state
        state.receive_closed = True
        state.items.clear()
        state.wake_senders()


class channel(tuple[Sender[T], Receiver[T]]):
    """``send, receive = channel[Item](size)``: a bounded queue of ``size`` items from any number
    of senders to one receiver."""

    __slots__ = ()

    def __new__(cls, size: int) -> channel[T]:
        state = _State[T](size)
        return super().__new__(cls, (Sender(state), Receiver(state)))
