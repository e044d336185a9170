"""What every engine's translator shares.

A translator turns one agent's decoded wire events into normalized :class:`Message` objects. It
is pure (no I/O, no clock), stateful for one session, and used both live (by the engine's
process) and offline (by ``agentrun replay``), so recorded transcripts and real runs go through
exactly the same code. What the agent writes elsewhere than its wire (Codex's rollout file) is
read by the engine live, and by replay from the *sidecar* files a recording keeps beside the
transcript; the translator is handed what was read, never a path.

A translator may also take a framed line's bytes (``feed_line``): the line is parsed and checked
against the agent's wire schema in one pass in pydantic-core (:func:`wire_event`), and the
translator builds its messages from values that are already validated. A line the schema does not
take (not JSON, an unknown shape, nested too deep) is decoded and fed as before, so what comes out
never depends on which path a line took. :func:`line_feed` is what callers use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypedDict, runtime_checkable

from .._vocabulary.context import ContextTracker
from .._vocabulary.messages import Message, MessageType, ProcessMeta
from .._wire.framing import MAX_NESTING, JsonProblem, LineTooLong, capped, decode_json_line

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "AgentTranslator",
    "AgentTranslatorOptions",
    "Translator",
    "decode_line",
    "decoded_feed",
    "frame_problem_message",
    "line_feed",
    "wire_event",
]

#: How many bytes of an undecodable line are kept in the error message's data.
_KEEP = 4096


@runtime_checkable
class Translator(Protocol):
    """Turns decoded wire events into messages; ``finish`` is called at the end of the stream.

    The one translator protocol of every engine, long-lived or spawn-per-turn, live or in
    replay. Subclass it to inherit the defaults of the optional members (no sidecar files).
    """

    #: The sidecar files this translator can use, by the suffix a recording gives them beside
    #: the transcript (``"rollout.jsonl"`` for ``<name>.rollout.jsonl``): files the agent writes
    #: besides its wire output. Empty for agents whose wire says everything.
    sidecars: ClassVar[tuple[str, ...]] = ()

    def feed(self, event: Any) -> list[Message]: ...

    def finish(self) -> list[Message]: ...

    def use_sidecars(self, files: Mapping[str, Sequence[bytes]], events: Sequence[Any]) -> None:
        """Replay, before the first :meth:`feed`: the lines of the sidecar files found beside
        the transcript (by suffix, only those that exist) and the transcript's decoded events,
        which are then fed in this order. The default ignores them."""


class AgentTranslatorOptions(TypedDict, total=False):
    """The keyword arguments every :class:`AgentTranslator` takes (subclasses pass them on with
    ``**options: Unpack[AgentTranslatorOptions]``)."""

    model: str | None
    tracker: ContextTracker | None
    agent_version: str | None
    cwd: str | None


class AgentTranslator(Translator):
    """What a translator of one named agent keeps about the session (model, context tracker,
    agent version, working directory) and the ``init`` message it makes of them."""

    #: The agent's name in ``init`` messages (``"codex"``, ``"opencode"``).
    agent_name: ClassVar[str] = "agent"
    #: The model, once known (the caller's choice or what the agent reported).
    model: str | None
    tracker: ContextTracker
    agent_version: str | None
    cwd: str | None

    def __init__(
        self,
        *,
        model: str | None = None,
        tracker: ContextTracker | None = None,
        agent_version: str | None = None,
        cwd: str | None = None,
    ) -> None:
        self.model = model
        self.tracker = tracker if tracker is not None else ContextTracker(model=model)
        self.agent_version = agent_version
        self.cwd = cwd
        self._init_sent = False

    def feed(self, event: Any) -> list[Message]:
        """Messages of one decoded event: a problem the framer reported passes through, a value
        that is not a JSON object is a ``protocol`` error, an object goes to :meth:`_feed_event`
        (nested no deeper than every message can serialize)."""
        return self.feed_decoded(capped(event))

    def feed_decoded(self, event: Any) -> list[Message]:
        """:meth:`feed` of an event :func:`decode_json_line` made (already cut to the nesting
        every message can serialize, so it is not walked again)."""
        if isinstance(event, dict):
            return self._feed_event(event)  # pyright: ignore[reportUnknownArgumentType]
        if isinstance(event, Message):
            return [event]
        return [Message.not_an_object(self.agent_name, event)]

    def _feed_event(self, ev: dict[str, Any]) -> list[Message]:
        """Messages of one event object (subclasses translate here; this passes it through)."""
        return [Message(type=MessageType.SYSTEM, subtype=str(ev.get("type", "event")), raw=ev)]

    def _learn_model(self, model: str) -> None:
        """The agent named its model: keep it and size the context window for it."""
        self.model = model
        self.tracker.set_model(model)

    def start(
        self,
        *,
        process: ProcessMeta | None = None,
        resume_id: str | None = None,
        permission_mode: str | None = None,
    ) -> list[Message]:
        """The turn's ``init`` message (a live engine, before any event)."""
        return [self._init(resume_id, process=process, permission_mode=permission_mode)]

    def _init(
        self,
        session_id: str | None = None,
        *,
        process: ProcessMeta | None = None,
        permission_mode: str | None = None,
        raw: Any = None,
    ) -> Message:
        self._init_sent = True
        return Message.init_message(
            self.agent_name,
            model=self.model,
            version=self.agent_version,
            session_id=session_id,
            cwd=self.cwd,
            permission_mode=permission_mode,
            process=process,
            raw=raw,
        )


def decoded_feed(translator: Translator) -> Callable[[Any], list[Message]]:
    """What feeds ``translator`` the events :func:`decode_json_line` made: its ``feed_decoded``
    (which does not walk them again for their nesting, the decoder cut it) when it has one, else
    its ``feed``."""
    feed: Callable[[Any], list[Message]] | None = getattr(translator, "feed_decoded", None)
    return feed if feed is not None else translator.feed


def line_feed(
    translator: Translator, *, engine: str
) -> Callable[[bytes | LineTooLong], list[Message]]:
    """What feeds ``translator`` one framed line (``engine`` names it in problem messages).

    A translator with a ``feed_line(line: bytes) -> list[Message] | None`` is given the line's
    bytes first: it validates them against its wire schema in one pass and returns its messages,
    or ``None`` when the schema does not take the line. Every other line is decoded
    (:func:`decode_json_line`) and fed to :func:`decoded_feed`; a line that cannot be framed or
    decoded is its problem's ``error`` message."""
    feed = decoded_feed(translator)
    fast: Callable[[bytes], list[Message] | None] | None = getattr(translator, "feed_line", None)

    def from_line(item: bytes | LineTooLong) -> list[Message]:
        if isinstance(item, LineTooLong):
            return [frame_problem_message(item, engine=engine)]
        if fast is not None:
            out = fast(item)
            if out is not None:
                return out
        event = decode_json_line(item)
        if isinstance(event, JsonProblem):
            return [frame_problem_message(event, engine=engine)]
        return feed(event)

    return from_line


def wire_event(schema: TypeAdapter[Any], line: bytes) -> Any | None:
    """``line`` parsed and validated by ``schema`` in one pass from its bytes, or ``None`` when
    the schema does not take it: not JSON (or not strict UTF-8), a shape the schema refuses, or
    more brackets than :data:`MAX_NESTING` (whose containers the decoder may have to cut). A
    ``None`` sends the line down the decoding path, which decides what it is."""
    if line.count(b"{") + line.count(b"[") > MAX_NESTING:
        return None
    try:
        return schema.validate_json(line)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return None


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
