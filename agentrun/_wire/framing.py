"""Split an agent's byte output into lines and decode JSON lines.

Agents write one JSON document per line on stdout, but a pipe delivers arbitrary chunks:
a chunk may end inside a line, inside a multi-byte UTF-8 character or between ``\\r`` and
``\\n``.  :class:`LineFramer` reassembles complete lines from such chunks.  It works on bytes
only (decoding happens per complete line in :func:`decode_json_line`): a chunk's lines are
read by iterating an ``io.BytesIO`` view of it and a held partial line is completed with
``bytes.find``, both of which find each newline with ``memchr``, so the per-byte work stays in C.

A line longer than the limit is never held in memory in full: once the limit is passed the
framer keeps only the first :data:`HEAD_BYTES` bytes, counts (and drops) the rest, and
reports a single :class:`LineTooLong` when the line's newline finally arrives.  The lines
after it come through unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Literal, cast

import anyio
import anyio.abc
from pydantic_core import from_json as _from_json

from .._vocabulary.errors import ConfigurationError

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "HEAD_BYTES",
    "JsonProblem",
    "LineFramer",
    "LineStream",
    "LineTooLong",
    "cap_nesting",
    "capped",
    "decode_json_line",
    "iter_lines",
]

#: Default limit for one line: large enough for base64 images and big tool results.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
#: How much of an oversized line is kept in :attr:`LineTooLong.head`.
HEAD_BYTES = 1024
#: Bytes requested per ``receive`` call by :func:`iter_lines`.
READ_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class LineTooLong:
    """A line that exceeded the framer's limit; it was skipped.

    ``size`` is the full length of the line in bytes (without its ``\\n``), ``limit`` the
    limit it broke, and ``head`` its first (at most :data:`HEAD_BYTES`) bytes.
    """

    size: int
    limit: int
    head: bytes


class LineFramer:
    """Incremental, bytes-based line splitter with a per-line size limit.

    :meth:`feed` takes chunks as they arrive and returns the lines they completed;
    :meth:`flush` returns the last, unterminated line at end of input.  Lines are returned
    without the ``\\n`` and without one trailing ``\\r``.  Empty and whitespace-only lines are
    skipped.  A line of more than ``max_line_bytes`` bytes (counted without the ``\\n``)
    becomes one :class:`LineTooLong`; at most ``max_line_bytes`` bytes are ever buffered.
    """

    __slots__ = ("_buf", "_discarding", "_drop_head", "_drop_size", "_limit")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ConfigurationError("max_line_bytes must be at least 1", option="max_line_bytes")
        self._limit = max_line_bytes
        self._buf = bytearray()
        # State of an oversized line being skipped.
        self._discarding = False
        self._drop_size = 0
        self._drop_head = b""

    @property
    def max_line_bytes(self) -> int:
        return self._limit

    @property
    def buffered(self) -> int:
        """Bytes currently held for an incomplete line (never more than the limit)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes | LineTooLong]:
        """Add a chunk of input; return the lines it completed, in order."""
        out: list[bytes | LineTooLong] = []
        if not data:
            return out
        start = 0
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                self._skip(data, len(data))
                return out
            self._skip(data, nl)
            out.append(self._finish_skip())
            start = nl + 1
        elif self._buf:
            nl = data.find(b"\n")
            if nl < 0:
                self._hold(data)
                return out
            if len(self._buf) + nl > self._limit:
                size = len(self._buf) + nl
                head = bytes(self._buf[:HEAD_BYTES])
                if len(head) < HEAD_BYTES:
                    head += data[: min(nl, HEAD_BYTES - len(head))]
                self._buf.clear()
                out.append(LineTooLong(size, self._limit, head))
            else:
                self._buf += data[:nl]
                self._emit(bytes(self._buf), out)
                self._buf.clear()
            start = nl + 1
        # The lines are read from a view of the chunk (no copy), whose iteration finds each
        # newline with memchr; ``split`` compares every byte in a loop of its own, about five
        # instructions a byte. Each line comes with its newline, cut off here.
        lines = BytesIO(data)
        if start:
            lines.seek(start)
        limit = self._limit
        append = out.append
        for line in lines:
            if line[-1] != 10:  # the last, unterminated line: no newline yet
                self._hold(line)
                break
            size = len(line) - 1
            if size > limit:
                append(LineTooLong(size, limit, line[: min(size, HEAD_BYTES)]))
            elif size:
                # :meth:`_emit`, inlined: a chunk often completes many lines.
                line = line[:-2] if line[-2] == 13 else line[:-1]  # 13: b"\r"
                if line and not line.isspace():
                    append(line)
        return out

    def flush(self) -> list[bytes | LineTooLong]:
        """End of input: return the unterminated last line, if any, and reset."""
        out: list[bytes | LineTooLong] = []
        if self._discarding:
            out.append(self._finish_skip())
        elif self._buf:
            self._emit(bytes(self._buf), out)
            self._buf.clear()
        return out

    # -- internals -------------------------------------------------------------------

    @staticmethod
    def _emit(line: bytes, out: list[bytes | LineTooLong]) -> None:
        if line[-1:] == b"\r":
            line = line[:-1]
        if line and not line.isspace():
            out.append(line)

    def _hold(self, data: bytes) -> None:
        """Buffer part of an unterminated line, switching to skip mode past the limit."""
        if len(self._buf) + len(data) <= self._limit:
            self._buf += data
            return
        self._discarding = True
        self._drop_size = len(self._buf)
        self._drop_head = bytes(self._buf[:HEAD_BYTES])
        self._buf.clear()
        self._skip(data, len(data))

    def _skip(self, data: bytes, end: int) -> None:
        """Count ``data[:end]`` as part of the skipped line, keeping only its head."""
        self._drop_size += end
        missing = HEAD_BYTES - len(self._drop_head)
        if missing > 0 and end:
            self._drop_head += data[: min(missing, end)]

    def _finish_skip(self) -> LineTooLong:
        item = LineTooLong(self._drop_size, self._limit, self._drop_head)
        self._discarding = False
        self._drop_size = 0
        self._drop_head = b""
        return item


class LineStream(AsyncIterator["bytes | LineTooLong"]):
    """Async iterator of framed lines read from a byte stream until end of file.

    Written as a plain iterator class (not an async generator) so that abandoning it
    half-way leaves nothing to finalize in another task.  One consumer at a time.

    :meth:`end_when_idle` ends it before end of file: what is already readable is still
    delivered, then the stream ends as soon as a read would wait (for a program that exited while
    a descendant it detached still holds the pipe open).
    """

    __slots__ = ("_busy", "_chunk", "_done", "_framer", "_idle_end", "_pending", "_read", "_stream")

    #: After :meth:`end_when_idle`, how long a read may wait for more before the stream ends.
    IDLE_READ_SECONDS = 0.05

    def __init__(
        self,
        stream: anyio.abc.ByteReceiveStream,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        chunk_size: int = READ_CHUNK_BYTES,
    ) -> None:
        self._stream = stream
        self._framer = LineFramer(max_line_bytes)
        self._chunk = chunk_size
        self._pending: list[bytes | LineTooLong] = []
        self._done = False
        self._busy = False
        self._idle_end = False
        self._read: anyio.CancelScope | None = None

    @property
    def framer(self) -> LineFramer:
        return self._framer

    def end_when_idle(self) -> None:
        """Deliver what can be read without waiting, then end (see the class docstring)."""
        self._idle_end = True
        if self._read is not None:
            self._read.cancel()

    def __aiter__(self) -> LineStream:
        return self

    async def _receive(self) -> bytes | None:
        """One chunk; ``None`` when the stream ended or went idle after :meth:`end_when_idle`."""
        try:
            if self._idle_end:
                with anyio.move_on_after(self.IDLE_READ_SECONDS):
                    return await self._stream.receive(self._chunk)
                return None
            with anyio.CancelScope() as scope:
                self._read = scope
                return await self._stream.receive(self._chunk)
            self._read = None
            return await self._receive()  # end_when_idle() interrupted the read
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return None
        finally:
            self._read = None

    async def __anext__(self) -> bytes | LineTooLong:
        if self._busy:
            raise anyio.BusyResourceError("reading lines")
        self._busy = True
        try:
            while not self._pending:
                if self._done:
                    raise StopAsyncIteration
                chunk = await self._receive()
                if chunk is None:
                    self._done = True
                    self._pending = self._framer.flush()
                else:
                    self._pending = self._framer.feed(chunk)
                if self._pending:
                    self._pending.reverse()
            return self._pending.pop()
        finally:
            self._busy = False


def iter_lines(
    stream: anyio.abc.ByteReceiveStream, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> LineStream:
    """Iterate over the lines of ``stream`` (``async for line in iter_lines(stream)``).

    Reads chunks of up to 64 KiB until end of file; ``EndOfStream``,
    ``ClosedResourceError`` and ``BrokenResourceError`` all count as end of file.
    """
    return LineStream(stream, max_line_bytes=max_line_bytes)


@dataclass(frozen=True, slots=True)
class JsonProblem:
    """Why a line could not be decoded; ``raw`` is the line itself."""

    code: Literal["invalid_json", "invalid_utf8"]
    detail: str
    raw: bytes


#: How deep decoded JSON may nest before the deeper parts are replaced by :data:`NESTING_MARKER`:
#: far beyond what agents send, well within what a message can serialize.
MAX_NESTING = 100
NESTING_MARKER = f"[agentrun: nested deeper than {MAX_NESTING} levels; cut here]"


def cap_nesting(value: object, limit: int = MAX_NESTING) -> object:
    """``value`` with every container deeper than ``limit`` replaced by the marker (iterative:
    no recursion limit applies)."""
    if not isinstance(value, (dict, list)):
        return value
    root = cast(object, value)
    stack: list[tuple[Any, int]] = [(root, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        container, depth = pop()
        if depth >= limit:
            # Its containers are the ones too deep (a value is replaced, none added: the
            # container can be written while it is iterated).
            if isinstance(container, dict):
                for key, child in cast("dict[Any, Any]", container).items():
                    if isinstance(child, (dict, list)):
                        container[key] = NESTING_MARKER
            else:
                for index, child in enumerate(cast("list[Any]", container)):
                    if isinstance(child, (dict, list)):
                        container[index] = NESTING_MARKER
            continue
        children = (
            cast("dict[Any, Any]", container).values()
            if isinstance(container, dict)
            else cast("list[Any]", container)
        )
        depth += 1
        for child in children:
            if isinstance(child, (dict, list)):
                push((child, depth))  # pyright: ignore[reportUnknownArgumentType]
    return cast(object, value)


#: Every byte but the ones that tell a JSON text's nesting: its brackets and the quotes that
#: say which brackets are inside strings.
_NOT_NESTING = bytes(sorted(set(range(256)) - set(b'[]{}"')))
#: Braces read as square brackets: only the nesting counts, not the kind of container.
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")


def nested_deeper(line: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether the JSON text ``line`` (one the decoder took) has containers nested deeper than
    ``limit``, i.e. whether :func:`cap_nesting` would cut its decoded value; read from the bytes.

    No more than ``limit`` opening brackets settle it at once (two counts). Beyond that the
    brackets outside strings are kept (when a backslash comes before a quote, escaped
    backslashes and then escaped quotes are dropped first, so every quote left opens or closes a
    string) and the innermost pairs are taken away until none are left: as many rounds as the
    value nests. A long line of many shallow containers (a list of objects) costs a few passes
    over its brackets, not a walk of every value in it.
    """
    if line.count(b"{") + line.count(b"[") <= limit:
        return False
    if b'\\"' in line:  # else no quote is escaped (nor follows an escaped backslash)
        line = line.replace(b"\\\\", b"").replace(b'\\"', b"")
    # A string without brackets is left as two quotes; two quotes side by side are either that
    # or the end of one string and the start of the next (which merges their brackets, still
    # inside a string): taken away at once, they leave few strings to split on.
    shape = line.translate(_AS_SQUARE, _NOT_NESTING).replace(b'""', b"")
    brackets = b"".join(shape.split(b'"')[::2]) if b'"' in shape else shape
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return bool(brackets)


def capped(value: object, limit: int = MAX_NESTING) -> object:
    """``value`` itself when no container in it is deeper than ``limit``, else a copy of it with
    the deeper containers replaced by the marker (the caller's value is never changed). For
    values a translator is given as they are, not decoded by :func:`decode_json_line`."""
    if not isinstance(value, (dict, list)):
        return value
    root = cast(object, value)
    stack: list[tuple[Any, int]] = [(root, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        container, depth = pop()
        children = (
            cast("dict[Any, Any]", container).values()
            if isinstance(container, dict)
            else cast("list[Any]", container)
        )
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return cap_nesting(_copy_containers(root, limit + 1), limit)
                push((child, depth + 1))  # pyright: ignore[reportUnknownArgumentType]
    return root


def _copy_containers(value: object, levels: int) -> object:
    """A copy of the containers of ``value`` down to ``levels`` deep (deeper ones are shared:
    :func:`cap_nesting` replaces them without looking inside)."""
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, int]] = [(root, 0, 1)]
    while stack:
        parent, key, depth = stack.pop()
        item = parent[key]
        if depth > levels:
            continue
        if isinstance(item, dict):
            new: Any = dict(cast("dict[Any, Any]", item))
            keys: Any = new.keys()
        elif isinstance(item, list):
            new = list(cast("list[Any]", item))
            keys = range(len(new))
        else:
            continue
        parent[key] = new
        for k in list(keys):
            if isinstance(new[k], (dict, list)):
                stack.append((new, k, depth + 1))
    return root[0]


def decode_json_line(line: bytes) -> object | JsonProblem:
    """Decode one line as JSON; return a :class:`JsonProblem` instead of raising.

    The line must be strict UTF-8 (``json.loads`` on bytes would also guess UTF-16/32 and
    let encoded surrogates through, so the text is decoded first). Containers nested deeper than
    :data:`MAX_NESTING` are cut (:func:`cap_nesting`), so every message made of the value can be
    serialized; the check runs only on lines with that many brackets at all.

    The bytes are parsed directly (no intermediate text: faster, and a large line is not held
    three times); a line that parser refuses (invalid UTF-8, a lone surrogate escape, very deep
    nesting) takes the standard library's path, which decides what it is.
    """
    try:
        value = _from_json(line)
    except ValueError:
        return _decode_json_line_slowly(line)
    if nested_deeper(line):
        value = cap_nesting(value)
    return value


#: A ``\\uD800`` to ``\\uDFFF`` escape: JSON text may spell half a surrogate pair alone, which no
#: UTF-8 text can hold.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: object) -> object:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD, so
    every message made of it can be written as UTF-8 JSON. The decoder made the containers:
    they are changed in place."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    stack: list[Any] = [value]
    while stack:
        container = stack.pop()
        if isinstance(container, dict):
            items = list(cast("dict[Any, Any]", container).items())
            container.clear()
            for key, child in items:
                if isinstance(child, str):
                    child = _LONE_SURROGATE.sub("\ufffd", child)
                elif isinstance(child, (dict, list)):
                    stack.append(child)
                fixed = _LONE_SURROGATE.sub("\ufffd", key) if isinstance(key, str) else key
                container[fixed] = child
        elif isinstance(container, list):
            entries = cast("list[Any]", container)
            for index, child in enumerate(entries):
                if isinstance(child, str):
                    entries[index] = _LONE_SURROGATE.sub("\ufffd", child)
                elif isinstance(child, (dict, list)):
                    stack.append(child)
    return value


def _decode_json_line_slowly(line: bytes) -> object | JsonProblem:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return JsonProblem("invalid_utf8", f"{exc.reason} at byte {exc.start}", line)
    try:
        value = json.loads(text)
        if nested_deeper(line):
            value = cap_nesting(value)
        if _SURROGATE_ESCAPE.search(line) is not None:
            value = _without_lone_surrogates(value)
        return value
    except json.JSONDecodeError as exc:
        return JsonProblem("invalid_json", f"{exc.msg} at char {exc.pos}", line)
    except (ValueError, RecursionError) as exc:  # e.g. nesting too deep
        return JsonProblem("invalid_json", f"{type(exc).__name__}: {exc}", line)
