"""The stderr of an agent program: always drained, so that a chatty program never blocks on a full
pipe; its last bytes kept in a ring buffer for crash reports; its lines passed to ``on_stderr``
(and the debug log)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import anyio.abc

from .framing import READ_CHUNK_BYTES, LineFramer, LineTooLong

__all__ = ["StderrCapture"]

_log = logging.getLogger("agentrun.subprocess")

#: stderr lines longer than this are passed to ``on_stderr`` truncated.
_STDERR_LINE_LIMIT = 1024 * 1024


class StderrCapture:
    """What one program writes on stderr: the last ``tail_bytes`` and its lines, as they come."""

    def __init__(
        self, *, tail_bytes: int, on_stderr: Callable[[str], None] | None, program: str
    ) -> None:
        self._limit = tail_bytes
        self._on_stderr = on_stderr
        self._program = program
        self._tail = bytearray()
        self._callback_failed = False

    def tail(self) -> str:
        """The last ``tail_bytes`` of stderr, decoded (undecodable bytes replaced)."""
        data = bytes(self._tail)
        if len(data) >= self._limit:
            # The ring buffer may start inside a UTF-8 sequence: drop continuation bytes.
            i = 0
            while i < min(3, len(data)) and 0x80 <= data[i] <= 0xBF:
                i += 1
            data = data[i:]
        return data.decode("utf-8", errors="replace")

    def _keep_tail(self, chunk: bytes) -> None:
        limit = self._limit
        if limit <= 0:
            return
        tail = self._tail
        if len(chunk) >= limit:
            tail[:] = chunk[-limit:]
            return
        tail += chunk
        excess = len(tail) - limit
        if excess > 0:
            del tail[:excess]

    def _wants_lines(self) -> bool:
        return self._on_stderr is not None or _log.isEnabledFor(logging.DEBUG)

    def _deliver(self, items: list[bytes | LineTooLong], pid: int) -> None:
        callback = self._on_stderr
        for item in items:
            if isinstance(item, LineTooLong):
                text = item.head.decode("utf-8", "replace") + f"... [{item.size} bytes]"
            else:
                text = item.decode("utf-8", "replace")
            _log.debug("[%s %d stderr] %s", self._program, pid, text)
            if callback is None:
                continue
            try:
                callback(text)
            except Exception:
                if not self._callback_failed:
                    self._callback_failed = True
                    _log.warning("on_stderr callback raised; ignoring", exc_info=True)
                else:
                    _log.debug("on_stderr callback raised again", exc_info=True)

    async def drain(self, stream: anyio.abc.ByteReceiveStream | None, pid: int) -> None:
        """Read ``stream`` to its end (or until cancelled), keeping the tail and passing lines on;
        the unterminated last line is passed on too."""
        framer = LineFramer(_STDERR_LINE_LIMIT)
        try:
            while stream is not None:
                try:
                    chunk = await stream.receive(READ_CHUNK_BYTES)
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    break
                except (anyio.BrokenResourceError, OSError):
                    _log.debug("stderr of pid %d broke", pid, exc_info=True)
                    break
                self._keep_tail(chunk)
                if self._wants_lines():
                    self._deliver(framer.feed(chunk), pid)
                elif framer.buffered:
                    framer = LineFramer(_STDERR_LINE_LIMIT)
        finally:
            if self._wants_lines():
                self._deliver(framer.flush(), pid)
