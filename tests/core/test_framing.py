"""Tests for the line framer and the JSON line decoder."""

from __future__ import annotations

import json
import tracemalloc

import anyio
import anyio.abc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrun._wire.framing import (
    HEAD_BYTES,
    MAX_NESTING,
    JsonProblem,
    LineFramer,
    LineTooLong,
    cap_nesting,
    decode_json_line,
    iter_lines,
    nested_deeper,
)

# -- a reference model ------------------------------------------------------------------


def reference_lines(stream: bytes, limit: int) -> list[bytes | LineTooLong]:
    """What the framer must produce for ``stream`` fed in one piece and flushed."""
    out: list[bytes | LineTooLong] = []
    for line in stream.split(b"\n"):
        if len(line) > limit:
            out.append(LineTooLong(len(line), limit, line[:HEAD_BYTES]))
            continue
        if line.endswith(b"\r"):
            line = line[:-1]
        if line and not line.isspace():
            out.append(line)
    return out


def run_chunks(chunks: list[bytes], limit: int) -> tuple[list[bytes | LineTooLong], int]:
    framer = LineFramer(limit)
    out: list[bytes | LineTooLong] = []
    most = 0
    for chunk in chunks:
        out.extend(framer.feed(chunk))
        most = max(most, framer.buffered)
    out.extend(framer.flush())
    assert framer.buffered == 0
    return out, most


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks: list[bytes] = []
    prev = 0
    for p in [*points, len(data)]:
        chunks.append(data[prev:p])
        prev = p
    return chunks


# -- unit tests -------------------------------------------------------------------------


def test_basic_lines_crlf_and_blank_lines() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":1}\n\n  \r\n{"b":2}\r\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert framer.feed(b":3}") == []
    assert framer.feed(b"\n") == [b'{"c":3}']
    assert framer.flush() == []


def test_last_line_without_newline_is_returned_by_flush() -> None:
    framer = LineFramer()
    assert framer.feed(b"one\ntwo") == [b"one"]
    assert framer.flush() == [b"two"]
    assert framer.flush() == []


def test_cr_split_from_lf_across_chunks() -> None:
    framer = LineFramer()
    assert framer.feed(b"abc\r") == []
    assert framer.feed(b"\ndef\r") == [b"abc"]
    assert framer.flush() == [b"def"]


def test_line_exactly_at_limit_passes_and_one_more_byte_fails() -> None:
    framer = LineFramer(8)
    assert framer.feed(b"12345678\n") == [b"12345678"]
    assert framer.feed(b"123456789\nok\n") == [LineTooLong(9, 8, b"123456789"), b"ok"]
    # The same across chunk boundaries.
    assert framer.feed(b"1234") == []
    assert framer.feed(b"5678") == []
    assert framer.feed(b"9") == []
    assert framer.feed(b"0\nnext") == [LineTooLong(10, 8, b"1234567890")]
    assert framer.flush() == [b"next"]


def test_oversized_line_reports_full_size_and_head() -> None:
    framer = LineFramer(100)
    big = bytes(range(11, 256)) * 40  # 9800 bytes, no newline
    out: list[bytes | LineTooLong] = []
    for i in range(0, len(big), 7):
        out.extend(framer.feed(big[i : i + 7]))
        assert framer.buffered <= 100
    out.extend(framer.feed(b'\n{"after":true}\n'))
    assert out == [LineTooLong(len(big), 100, big[:HEAD_BYTES]), b'{"after":true}']


def test_oversized_unterminated_line_at_eof() -> None:
    framer = LineFramer(10)
    assert framer.feed(b"ok\n" + b"x" * 50) == [b"ok"]
    assert framer.flush() == [LineTooLong(50, 10, b"x" * 50)]
    assert framer.flush() == []


def test_invalid_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LineFramer(0)


def test_hundred_megabyte_line_is_skipped_with_bounded_memory() -> None:
    limit = 1024 * 1024
    chunk = b"y" * (64 * 1024)
    n_chunks = 1600  # 100 MiB
    framer = LineFramer(limit)
    out: list[bytes | LineTooLong] = list(framer.feed(b'{"before":1}\n'))
    tracemalloc.start()
    try:
        for _ in range(n_chunks):
            out.extend(framer.feed(chunk))
        out.extend(framer.feed(b'\n{"after":2}\n'))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == [
        b'{"before":1}',
        LineTooLong(len(chunk) * n_chunks, limit, b"y" * HEAD_BYTES),
        b'{"after":2}',
    ]
    assert peak < 4 * limit, f"framer used {peak} bytes for a 100 MiB line"


# -- properties -------------------------------------------------------------------------

line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))
pieces = st.lists(
    st.one_of(
        line_bytes,
        st.sampled_from([b"\r", b"", b" ", b'{"k": "v"}', b"\xff\xfe"]),
        st.integers(min_value=0, max_value=3000).map(lambda n: b"z" * n),
    ),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(
    lines=pieces,
    end_newline=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=100_000), max_size=30),
    limit=st.sampled_from([1, 5, 32, 1000, 2048, 10_000]),
)
def test_any_chunking_matches_whole_input(
    lines: list[bytes], end_newline: bool, cuts: list[int], limit: int
) -> None:
    data = b"\n".join(lines) + (b"\n" if end_newline else b"")
    expected = reference_lines(data, limit)
    whole, _ = run_chunks([data], limit)
    chunked, most = run_chunks(split_at(data, cuts), limit)
    single_bytes, _ = run_chunks([data[i : i + 1] for i in range(len(data))], limit)
    assert whole == expected
    assert chunked == expected
    assert single_bytes == expected
    assert most <= limit


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(st.sampled_from([b'{"a":1}', b"[2]", b"text"]), max_size=5),
    big=st.integers(min_value=65, max_value=20_000),
    after=st.lists(st.sampled_from([b'{"b":1}', b"[3]", b"tail"]), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=0, max_value=100_000), max_size=20),
)
def test_oversized_line_never_desynchronizes(
    before: list[bytes], big: int, after: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(x + b"\n" for x in [*before, b"q" * big, *after])
    out, most = run_chunks(split_at(data, cuts), 64)
    assert out == [*before, LineTooLong(big, 64, b"q" * min(big, HEAD_BYTES)), *after]
    assert most <= 64


# -- iter_lines -------------------------------------------------------------------------


class ChunkStream(anyio.abc.ByteReceiveStream):
    def __init__(self, chunks: list[bytes], end: type[Exception] = anyio.EndOfStream) -> None:
        self._chunks = list(chunks)
        self._end = end
        self.sizes: list[int] = []

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        self.sizes.append(max_bytes)
        if not self._chunks:
            raise self._end
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        pass


@pytest.mark.anyio
async def test_iter_lines_reads_until_eof() -> None:
    stream = ChunkStream([b'{"a":', b"1}\n\n", b"x" * 100, b"\nlast"])
    got = [line async for line in iter_lines(stream, max_line_bytes=50)]
    assert got == [b'{"a":1}', LineTooLong(100, 50, b"x" * 100), b"last"]
    assert stream.sizes
    assert all(s == 64 * 1024 for s in stream.sizes)


@pytest.mark.anyio
@pytest.mark.parametrize("end", [anyio.ClosedResourceError, anyio.BrokenResourceError])
async def test_iter_lines_treats_closed_stream_as_eof(end: type[Exception]) -> None:
    stream = ChunkStream([b"a\nb"], end=end)
    assert [line async for line in iter_lines(stream)] == [b"a", b"b"]


@pytest.mark.anyio
async def test_iter_lines_rejects_concurrent_consumers() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](1)

    class MemoryBytes(anyio.abc.ByteReceiveStream):
        async def receive(self, max_bytes: int = 65536) -> bytes:
            return await receive.receive()

        async def aclose(self) -> None:
            await receive.aclose()

    lines = iter_lines(MemoryBytes())
    async with anyio.create_task_group() as tg:
        tg.start_soon(lines.__anext__)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(anyio.BusyResourceError):
            await lines.__anext__()
        await send.send(b"one\n")
    await send.aclose()
    receive.close()


# -- decode_json_line -------------------------------------------------------------------


def test_decode_valid_json() -> None:
    assert decode_json_line(b'{"type": "x", "n": [1, 2.5, null]}') == {
        "type": "x",
        "n": [1, 2.5, None],
    }
    assert decode_json_line('{"t": "é→😀"}'.encode()) == {"t": "é→😀"}


@pytest.mark.parametrize(
    "line",
    [b"[SandboxDebug] starting", b'{"a": 1', b"{} trailing", b"\x00{}", b"{'a': 1}"],
)
def test_decode_non_json_text(line: bytes) -> None:
    problem = decode_json_line(line)
    assert isinstance(problem, JsonProblem)
    assert problem.code == "invalid_json"
    assert problem.raw == line
    assert problem.detail


@pytest.mark.parametrize(
    "line",
    [b'{"a": "\xff"}', b"\xc3\x28", b'"\xed\xa0\x80"', b"\xff\xfe{\x00}\x00", b"\x80garbage"],
)
def test_decode_invalid_utf8(line: bytes) -> None:
    problem = decode_json_line(line)
    assert isinstance(problem, JsonProblem)
    assert problem.code == "invalid_utf8"
    assert problem.raw == line
    assert "byte" in problem.detail


def test_decode_deeply_nested_input_does_not_raise() -> None:
    line = b"[" * 200_000 + b"]" * 200_000
    problem = decode_json_line(line)
    assert isinstance(problem, JsonProblem)
    assert problem.code == "invalid_json"


def test_decode_round_trips_framed_lines() -> None:
    docs = [{"i": i, "text": "x" * i} for i in range(50)]
    data = b"".join(json.dumps(d).encode() + b"\r\n" for d in docs)
    out, _ = run_chunks(split_at(data, list(range(0, len(data), 97))), 1 << 20)
    assert [decode_json_line(line) for line in out if isinstance(line, bytes)] == docs


# -- nested_deeper: the decoder's nesting check, read from the bytes -------------------------

#: Strings full of what could mislead a reading of the bytes: brackets, quotes, backslashes
#: (escaped by the encoder) and text after them.
_TRICKY_TEXT = st.text(alphabet='[]{}"\\/n\u00e9', max_size=6)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TRICKY_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_TRICKY_TEXT, children, max_size=4)
    ),
    max_leaves=60,
)


def _depth(value: object) -> int:
    """How deep ``value``'s containers nest (the value itself is level 1; a scalar is 0)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)  # pyright: ignore[reportUnknownArgumentType]
    return 0


@settings(max_examples=400)
@given(value=_JSON_VALUES, limit=st.integers(0, 6), compact=st.booleans(), ascii=st.booleans())
def test_nested_deeper_says_what_cap_nesting_would_cut(
    value: object, limit: int, compact: bool, ascii: bool
) -> None:
    separators = (",", ":") if compact else None
    line = json.dumps(value, separators=separators, ensure_ascii=ascii).encode()
    deeper = nested_deeper(line, limit)
    assert deeper == (_depth(value) > limit)
    cut = cap_nesting(json.loads(line), limit) if limit else None
    if limit:
        assert deeper == (cut != value)


def _lists(levels: int) -> object:
    value: object = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "deeper"),
    [
        # Brackets inside strings are no nesting, whichever way they lean.
        ({"a": "[" * 300}, False),
        ({"a": "]" * 300, "b": _lists(MAX_NESTING - 1)}, False),
        ({"a": "]" * 300, "b": _lists(MAX_NESTING)}, True),
        # An escaped quote does not end a string; an escaped backslash before a quote does.
        ({"a": 'x"', "b": "\\", "c": '\\"[[', "d": _lists(MAX_NESTING)}, True),
        (["\\\\", '\\"[[[', _lists(MAX_NESTING - 1)], False),
        # Many containers, none deep: the case the check is quick for.
        ([{"k": [i]} for i in range(400)], False),
        (_lists(MAX_NESTING), False),
        (_lists(MAX_NESTING + 1), True),
    ],
)
def test_nested_deeper_reads_strings_and_escapes(value: object, deeper: bool) -> None:
    assert (_depth(value) > MAX_NESTING) == deeper
    for separators in ((",", ":"), None):
        line = json.dumps(value, separators=separators).encode()
        assert nested_deeper(line) == deeper
