"""What every engine's translator shares.

A translator turns one agent's output into normalized :class:`Message` objects. It is pure (no
I/O, no clock), stateful for one session, and used both live (by the engine's process) and
offline (by ``agentrun replay``), so recorded transcripts and real runs go through exactly the
same code. What the agent writes elsewhere than its wire (Codex's rollout file) is read by the
engine live, and by replay from the *sidecar* files a recording keeps beside the transcript; the
translator is handed what was read, never a path.

The contract is :class:`Translator`; everything a caller feeds it goes through one of its
declared methods, never one found by name:

* :meth:`~Translator.feed_line` -- one framed line of the agent's output, as its bytes. This is
  how every reader of lines (replay, the spawn-per-turn base) feeds a translator. The default
  decodes the line (:func:`decode_json_line`) and gives the event to ``feed_decoded``; a
  translator with a wire schema overrides it to parse and check the line against the schema in
  one pass in pydantic-core (:func:`wire_event`) and build its messages from values already
  validated, handing any line the schema does not take (not JSON, an unknown shape, nested too
  deep) to the default, so what comes out never depends on which path a line took.
* :meth:`~Translator.feed_decoded` -- an event the line decoder made (its nesting already cut):
  for readers that decode lines themselves (a JSON-RPC connection, Claude's control traffic).
  The default is :meth:`~Translator.feed`.
* :meth:`~Translator.feed` -- any event object, as a caller holds it (its nesting is cut here).
* :meth:`~Translator.finish` -- the end of the stream.

A translator of a JSON-RPC agent is a :class:`JsonRpcTranslator`: the connection offers it each
received message's bytes before decoding them (:meth:`~JsonRpcTranslator.feed_received`).
:func:`line_feed` is what readers of framed lines use (a line the framer could not hold is its
problem's message, the rest goes to ``feed_line``).
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
    "JsonRpcTranslator",
    "Translator",
    "decode_line",
    "frame_problem_message",
    "line_feed",
    "wire_event",
]

#: How many bytes of an undecodable line are kept in the error message's data.
_KEEP = 4096


@runtime_checkable
class Translator(Protocol):
    """Turns an agent's output into messages; ``finish`` is called at the end of the stream.

    The one translator protocol of every engine, long-lived or spawn-per-turn, live or in
    replay. A translator writes :meth:`feed` and :meth:`finish`; subclass this protocol to
    inherit the defaults of the other members (lines decoded and fed, no sidecar files), and
    override :meth:`feed_line` or :meth:`feed_decoded` only to read them faster.
    """

    #: The sidecar files this translator can use, by the suffix a recording gives them beside
    #: the transcript (``"rollout.jsonl"`` for ``<name>.rollout.jsonl``): files the agent writes
    #: besides its wire output. Empty for agents whose wire says everything.
    sidecars: ClassVar[tuple[str, ...]] = ()

    def feed(self, event: Any) -> list[Message]:
        """The messages of one event object, as the caller holds it (the translator cuts its
        nesting to what every message can serialize, leaving the caller's value as it was)."""
        ...

    def finish(self) -> list[Message]:
        """The messages the end of the stream makes (a turn left running, say)."""
        ...

    def feed_line(self, line: bytes, *, engine: str) -> list[Message]:
        """The messages of one framed line of the agent's output (its bytes, no newline).

        The default decodes it (:func:`decode_json_line`) and gives the event to
        :meth:`feed_decoded`; a line that is not JSON is its problem's ``error`` message, named
        after ``engine`` (the name the caller runs the translator under). Override it to read
        lines faster from their bytes, handing every line the fast path does not take to this
        default."""
        event = decode_json_line(line)
        if isinstance(event, JsonProblem):
            return [frame_problem_message(event, engine=engine)]
        return self.feed_decoded(event)

    def feed_decoded(self, event: Any) -> list[Message]:
        """:meth:`feed` of an event :func:`decode_json_line` made (its nesting already cut, so
        a translator may skip walking it again). The default is :meth:`feed`."""
        return self.feed(event)

    def use_sidecars(self, files: Mapping[str, Sequence[bytes]], events: Sequence[Any]) -> None:
        """Replay, before the first :meth:`feed`: the lines of the sidecar files found beside
        the transcript (by suffix, only those that exist) and the transcript's decoded events,
        which are then fed in this order. The default ignores them."""


class JsonRpcTranslator(Translator):
    """A translator of a JSON-RPC agent's traffic (ACP, ``codex app-server``).

    Live, a JSON-RPC connection reads the agent's messages: it must decode a response to match
    it with its request and a request to answer it, and gives every message it decoded to the
    session, which feeds the translator ``{"dir": "recv", "msg": <message>}`` through
    :meth:`~Translator.feed_decoded`. Before decoding, the connection offers each received
    line's bytes to :meth:`feed_received`: a translator that reads some messages faster from
    their bytes (a notification its wire schema takes) returns their messages there, and the
    connection neither decodes nor dispatches that line. Replay reads the recorded lines
    (``{"dir": ..., "msg": ...}``) through :meth:`~Translator.feed_line` as for any agent."""

    def feed_received(self, line: bytes) -> list[Message] | None:
        """The messages of a message the live connection received (a bare JSON-RPC message's
        bytes), read as ``{"dir": "recv", "msg": <the line decoded>}`` would be; ``None`` to
        leave the line to the connection (decoded, dispatched, then fed). The default leaves
        every line."""
        return None


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


def line_feed(
    translator: Translator, *, engine: str
) -> Callable[[bytes | LineTooLong], list[Message]]:
    """What feeds ``translator`` the items a :class:`~agentrun._wire.framing.LineFramer` yields
    (``engine`` names it in problem messages): a line too long to hold is its problem's
    ``error`` message, every other line goes to :meth:`Translator.feed_line`."""
    feed_line = translator.feed_line

    def from_line(item: bytes | LineTooLong) -> list[Message]:
        if isinstance(item, LineTooLong):
            return [frame_problem_message(item, engine=engine)]
        return feed_line(item, engine=engine)

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
