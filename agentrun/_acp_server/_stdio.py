"""The server's own standard input and output as non-blocking byte streams.

Reading waits for the descriptor to become readable (``anyio.wait_readable``), so reading is
cancellable under asyncio and trio alike and never holds a worker thread; writing waits for it
to become writable, so a client that stops reading never blocks the event loop.
"""

from __future__ import annotations

import contextlib
import os

import anyio
import anyio.abc

__all__ = ["FdReader", "FdWriter"]


class FdReader(anyio.abc.ByteReceiveStream):
    """Bytes from a file descriptor; ``EndOfStream`` at end of file."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        self.restore()

    def restore(self) -> None:
        """Give the descriptor back as it was (the parent shell may share it)."""
        with contextlib.suppress(OSError):
            os.set_blocking(self._fd, self._was_blocking)


class FdWriter:
    """Whole lines to a file descriptor, in order."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
        self._lock = anyio.Lock()

    async def send_line(self, data: bytes) -> None:
        async with self._lock:
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self._fd, view)
                except BlockingIOError:
                    await anyio.wait_writable(self._fd)
                    continue
                except (BrokenPipeError, ConnectionResetError) as exc:
                    raise anyio.BrokenResourceError from exc
                view = view[written:]

    def restore(self) -> None:
        with contextlib.suppress(OSError):
            os.set_blocking(self._fd, self._was_blocking)
