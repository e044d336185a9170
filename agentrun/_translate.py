"""What every engine's translator shares.

A translator turns one agent's decoded wire events into normalized :class:`Message` objects. It
is pure (no I/O, no clock), stateful for one session, and used both live (by the engine's
process) and offline (by ``agentrun replay``), so recorded transcripts and real runs go through
exactly the same code.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ._framing import JsonProblem, LineTooLong, decode_json_line
from ._messages import Message

__all__ = ["Translator", "decode_line", "frame_problem_message"]

#: How many bytes of an undecodable line are kept in the error message's data.
_KEEP = 4096


@runtime_checkable
class Translator(Protocol):
    """Turns decoded wire events into messages. ``finish`` is called at end of stream."""

    def feed(self, event: Any) -> list[Message]: ...

    def finish(self) -> list[Message]: ...


def frame_problem_message(problem: LineTooLong | JsonProblem, *, engine: str) -> Message:
    """The ``error`` message for a line that could not be framed or decoded. Not fatal: the
    stream goes on. The raw bytes (or the head of an oversized line) stay in ``data``."""
    if isinstance(problem, LineTooLong):
        return Message.error_message(
            f"{engine}: output line of {problem.size} bytes exceeds the limit of "
            f"{problem.limit} bytes; skipped",
            code="line_too_long",
            data={"size": problem.size, "limit": problem.limit, "head": _text(problem.head)},
        )
    return Message.error_message(
        f"{engine}: {problem.detail}",
        code=problem.code,
        data={"raw": _text(problem.raw[:_KEEP]), "size": len(problem.raw)},
        raw=problem.raw,
    )


def decode_line(item: bytes | LineTooLong, *, engine: str) -> tuple[Any, Message | None]:
    """Decode one framed line: ``(event, None)`` or ``(None, error message)``."""
    if isinstance(item, LineTooLong):
        return None, frame_problem_message(item, engine=engine)
    decoded = decode_json_line(item)
    if isinstance(decoded, JsonProblem):
        return None, frame_problem_message(decoded, engine=engine)
    return decoded, None


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")
