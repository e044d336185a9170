"""Translate ``codex exec --json`` events (and what the thread's rollout file says) into messages.

One ``codex exec`` process runs one turn: ``thread.started`` (the thread id, the resume id),
``turn.started``, items (``item.started`` / ``item.updated`` / ``item.completed``), then
``turn.completed`` (usage) or ``turn.failed`` (error). Items map as:

=====================  ==========================================================================
``agent_message``      ``text`` (complete; exec streams no deltas)
``reasoning``          ``thinking`` (the reasoning summary)
``command_execution``  ``tool_use`` ``exec_command`` (kind ``execute``) + ``tool_result`` with the
                       aggregated output; a non-zero exit or ``status: failed`` is ``is_error``
``file_change``        ``tool_use`` ``apply_patch`` (kind ``edit``) + ``tool_result``
``mcp_tool_call``      ``tool_use`` ``mcp__<server>__<tool>`` + ``tool_result`` (its content)
``web_search``         ``tool_use`` ``web_search`` (kind ``search``) + ``tool_result``
``todo_list``          ``system`` ``plan`` (entries with ``content`` and ``status``)
``error``              ``system`` ``warning`` (Codex's non-fatal notices)
=====================  ==========================================================================

Codex numbers the items of each process from ``item_0``, so the same ids come back every turn;
an item id here is the process's number in the session and Codex's id (``t2.item_1``: the second
turn's), unique in the session and the same live and in replay (:attr:`process`).

A web-search line carries the ``"id"`` key twice (the item id, then the search's own ``ws_…``
id); JSON decoding keeps the last, and so does this translator: the started and completed lines
carry the same search id, so the tool result pairs with its use.

Top-level ``error`` lines are not always fatal: ``Reconnecting... n/m (reason)`` is a retry
notice (a ``system`` ``retry`` message with ``attempt``, ``max`` and ``reason``); any other error
is kept and becomes the turn's error when ``turn.failed`` repeats it, or a non-fatal ``error``
message at the end otherwise. The outcome comes only from ``turn.completed`` / ``turn.failed``:
a stream without either has no result.

Usage. ``turn.completed.usage`` is the thread's running total (OpenAI convention: cached and
cache-write tokens inside ``input_tokens``, reasoning inside ``output_tokens``). The turn's own
usage is, best first: the rollout's ``turn_token_usage`` for this turn (the agent's own record),
the difference from the previous total (:class:`~agentrun._bases.cumulative.RunningTotals`, kept per
session across processes), or, when neither is known, the running total itself, marked
``data["usage_scope"] == "thread_cumulative"`` on the result. Codex reports no cost.

Context window. stdout has none; the thread's rollout file
(``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*-<thread>.jsonl``) records ``token_count`` with the
last model call's usage and ``model_context_window``: the *effective* window (95 % of the
model's), reported with ``size_source="agent_effective"``. Without a rollout the window comes
from the catalog and ``used`` stays unknown. The translator reads no file: the engine reads the
rollout (:mod:`._rollout`) and hands over its facts; replay hands over the lines of the
recording's ``rollout.jsonl`` sidecar.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from typing_extensions import Unpack

from ..._bases.cumulative import RunningTotals
from ..._bases.translator import AgentTranslator, AgentTranslatorOptions
from ..._vocabulary.jsonvalues import as_dict, as_int, as_list, as_str
from ..._vocabulary.messages import (
    ContextWindow,
    ErrorInfo,
    Message,
    MessageType,
    ToolCall,
    Usage,
    assemble,
)
from ..._vocabulary.prices import account_usage
from ._rollout import Rollout, codex_totals, rollout_records, rollout_turns

__all__ = ["AGENT_NAME", "CodexExecTranslator", "codex_usage"]

AGENT_NAME = "codex"

_RETRY = re.compile(r"^Reconnecting\.{3}\s*(\d+)/(\d+)\s*(?:\((.*)\))?\s*$", re.DOTALL)

#: What Codex says on a full context, mapped to a stable error code.
_ERROR_CODES = (
    ("ran out of room in the model's context window", "context_length_exceeded"),
    ("high demand", "api_error"),
    ("exceeded retry limit", "rate_limit"),
    ("Quota exceeded", "quota_exceeded"),
    ("401 Unauthorized", "authentication_failed"),
    ("stream disconnected", "stream_error"),
    ("Incomplete response returned", "max_tokens"),
)


_STATUS = re.compile(r"(?:\bstatus:?\s*|^)([45]\d{2})\b")


def retry_notice(
    text: str, *, details: str | None = None, status: int | None = None, raw: Any = None
) -> Message:
    """The ``retry`` message of an error Codex will retry: ``Reconnecting... n/m (reason)``
    gives the attempt and the maximum; the reason (or ``details``) the HTTP status."""
    match = _RETRY.match(text)
    reason = (match.group(3) if match is not None else None) or details or text
    if status is None:
        found = _STATUS.search(reason)
        status = int(found.group(1)) if found is not None else None
    code = _error_code(reason)
    return Message.retry_notice(
        text if details is None else f"{text} ({details})",
        attempt=int(match.group(1)) if match is not None else None,
        max_attempts=int(match.group(2)) if match is not None else None,
        code="api_error" if code == "agent_error" else code,
        status=status,
        raw=raw,
    )


def _dict(value: object) -> dict[str, Any]:
    return as_dict(value) or {}


def codex_usage(totals: Mapping[str, int | float]) -> Usage:
    """Our :class:`Usage` from Codex's fields: input without the cached and cache-write parts,
    output with reasoning (as Codex counts it)."""
    cached = int(totals.get("cached_input_tokens", 0))
    written = int(totals.get("cache_write_input_tokens", 0))
    prompt = int(totals.get("input_tokens", 0))
    # What ``Usage(...)`` makes of these integers (a negative count: not reported), without
    # running its validator on every field of every call's usage.
    return assemble(
        Usage,
        {
            "input_tokens": max(prompt - cached - written, 0),
            "cache_read_tokens": _count(cached),
            "cache_write_tokens": _count(written),
            "output_tokens": _count(int(totals.get("output_tokens", 0))),
            "thinking_tokens": _count(int(totals.get("reasoning_output_tokens", 0))),
        },
    )


def _count(value: int) -> int | None:
    return value if value >= 0 else None


def _error_code(message: str) -> str:
    for needle, code in _ERROR_CODES:
        if needle in message:
            return code
    return "agent_error"


def tool_messages(
    started: set[str],
    item_id: str | None,
    name: str,
    kind: str,
    tool_input: Any,
    *,
    completed: bool,
    output: Any,
    failed: bool,
    status: str | None,
    exit_code: int | None,
    raw: Any,
) -> list[Message]:
    """A Codex tool item as messages, in both modes: its ``tool_use`` the first time the item
    is seen (``started`` remembers which), its ``tool_result`` when it completed."""
    out: list[Message] = []
    if item_id is None or item_id not in started:
        if item_id is not None:
            started.add(item_id)
        out.append(
            Message(
                type=MessageType.TOOL_USE,
                tool=ToolCall(id=item_id, name=name, input=tool_input, kind=kind),
                raw=raw,
            )
        )
    if completed:
        out.append(
            Message(
                type=MessageType.TOOL_RESULT,
                tool=ToolCall(
                    id=item_id, name=name, output=output, is_error=failed, kind=kind, status=status
                ),
                data={"exit_code": exit_code} if exit_code is not None else None,
                raw=raw,
            )
        )
    return out


# -- the translator --------------------------------------------------------------------------------


class CodexExecTranslator(AgentTranslator):
    """Turns the events of one ``codex exec --json`` process into messages.

    Live, the engine makes one per turn, sharing the session's :class:`ContextTracker` and
    :class:`RunningTotals`; it calls :meth:`start` first and, after the process exited,
    :meth:`attach_rollout` before :meth:`finish`. In replay, ``init`` is made from
    ``thread.started`` and :meth:`use_sidecars` takes the lines of the recording's
    ``<name>.rollout.jsonl`` when there is one.
    """

    agent_name = AGENT_NAME
    sidecars: ClassVar[tuple[str, ...]] = ("rollout.jsonl",)

    def __init__(
        self,
        *,
        totals: RunningTotals | None = None,
        process: int = 1,
        **options: Unpack[AgentTranslatorOptions],
    ) -> None:
        super().__init__(**options)
        #: The number of this ``codex exec`` process in the session (1 for the first turn's):
        #: it makes Codex's per-process item ids unique in the session. Replay counts the
        #: processes of the transcript.
        self.process: int = process
        self.totals: RunningTotals = totals if totals is not None else RunningTotals()
        #: The thread id from ``thread.started``.
        self.thread_id: str | None = None
        #: The running total from ``turn.completed`` (``None`` until it arrives).
        self.completed: dict[str, int] | None = None
        self.failure: ErrorInfo | None = None
        self.rollout: Rollout | None = None
        #: Replay: the rollout facts of the transcript's turns, in order (see use_sidecars).
        self._sidecar_turns: list[Rollout] = []
        self._pending_errors: list[ErrorInfo] = []
        self._started_tools: set[str] = set()
        self._init_sent = False
        self._finished = False
        #: A ``thread.started`` was seen: another one means the next process of a recording.
        self._process_started = False

    def _next_process(self) -> list[Message]:
        """A recorded transcript of several turns: a new process starts where the last ended.
        The previous turn is finished; one whose process printed no outcome was interrupted
        (the live engine reported it cancelled)."""
        out = self.finish(cancelled=not self.has_outcome and not self._finished)
        self.completed = self.failure = None
        self._pending_errors = []
        self._started_tools = set()
        self._init_sent = self._finished = False
        self.process += 1
        if self._sidecar_turns:
            self._sidecar_turns.pop(0)
        self.rollout = self._sidecar_turns[0] if self._sidecar_turns else None
        return out

    @property
    def resume_id(self) -> str | None:
        return self.thread_id

    @property
    def has_outcome(self) -> bool:
        """``turn.completed`` or ``turn.failed`` arrived."""
        return self.completed is not None or self.failure is not None

    def use_sidecars(self, files: Mapping[str, Sequence[bytes]], events: Sequence[Any]) -> None:
        """Replay: the rollout's lines, when the recording kept them. The transcript's turns
        (one per ``thread.started``) are the rollout's last ones (a resumed thread's rollout
        also holds the turns earlier processes ran)."""
        lines = files.get("rollout.jsonl")
        if lines is None:
            return
        processes = sum(1 for e in events if _dict(e).get("type") == "thread.started")
        turns = rollout_turns(rollout_records(lines))
        if processes <= 0 or not turns:
            return
        self._sidecar_turns = turns[-processes:]
        self.attach_rollout(self._sidecar_turns[0])

    def attach_rollout(self, rollout: Rollout | None) -> None:
        """The thread's rollout, read after the process exited (before :meth:`finish`)."""
        self.rollout = rollout
        if rollout is not None and rollout.model and not self.model:
            self._learn_model(rollout.model)

    # -- events ----------------------------------------------------------------------------

    def _feed_event(self, ev: dict[str, Any]) -> list[Message]:
        kind = ev.get("type")
        if kind == "thread.started":
            return self._thread_started(ev)
        if kind == "turn.started":
            return []
        if kind in ("item.started", "item.updated", "item.completed"):
            item = as_dict(ev.get("item"))
            if item is None:
                return [Message.error_message(f"{AGENT_NAME}: {kind} without an item",
                                              code="protocol", raw=ev)]  # fmt: skip
            return self._item(str(kind), item, ev)
        if kind == "turn.completed":
            self.completed = codex_totals(ev.get("usage"))
            return []
        if kind == "turn.failed":
            return self._failed(ev)
        if kind == "error":
            return self._error(ev)
        if isinstance(kind, str) and kind:
            return [Message(type=kind, subtype=kind, data=ev, raw=ev)]
        return [Message.error_message(f"{AGENT_NAME}: event without a type", code="protocol",
                                      data=ev, raw=ev)]  # fmt: skip

    def _thread_started(self, ev: dict[str, Any]) -> list[Message]:
        out: list[Message] = []
        if self._process_started:
            out.extend(self._next_process())
        self._process_started = True
        thread_id = as_str(ev.get("thread_id"))
        if thread_id:
            self.thread_id = thread_id
        if not self._init_sent:
            out.append(self._init(self.thread_id, raw=ev))
        return out

    def _item(self, kind: str, item: dict[str, Any], ev: dict[str, Any]) -> list[Message]:
        item_type = item.get("type")
        item_id = as_str(item.get("id"))
        if item_id is not None:
            item_id = f"t{self.process}.{item_id}"
        completed = kind == "item.completed"
        if item_type == "agent_message":
            text = item.get("text")
            if not completed or not isinstance(text, str):
                return []
            return [Message(type=MessageType.TEXT, text=text, message_id=item_id, raw=ev)]
        if item_type == "reasoning":
            text = item.get("text")
            if not completed or not isinstance(text, str):
                return []
            return [Message(type=MessageType.THINKING, text=text, message_id=item_id, raw=ev)]
        if item_type == "command_execution":
            return self._tool(
                item_id, "exec_command", "execute", {"command": item.get("command")}, item, ev,
                completed, output=item.get("aggregated_output"),
                failed=item.get("status") == "failed"
                or as_int(item.get("exit_code")) not in (None, 0),
            )  # fmt: skip
        if item_type == "file_change":
            return self._tool(
                item_id, "apply_patch", "edit", {"changes": item.get("changes")}, item, ev,
                completed, output=item.get("changes"), failed=item.get("status") == "failed",
            )  # fmt: skip
        if item_type == "mcp_tool_call":
            server = as_str(item.get("server")) or "mcp"
            tool = as_str(item.get("tool")) or "tool"
            error = item.get("error")
            result = _dict(item.get("result"))
            output = error if error is not None else result.get("content", item.get("result"))
            return self._tool(
                item_id, f"mcp__{server}__{tool}", "other", item.get("arguments"), item, ev,
                completed, output=output,
                failed=error is not None or item.get("status") == "failed",
            )  # fmt: skip
        if item_type == "web_search":
            return self._tool(
                item_id, "web_search", "search", {"query": item.get("query")}, item, ev,
                completed, output=item.get("action"), failed=item.get("status") == "failed",
            )  # fmt: skip
        if item_type == "todo_list":
            entries = [
                {
                    "content": as_str(entry.get("text")) or "",
                    "status": "completed" if entry.get("completed") is True else "pending",
                }
                for entry in (as_dict(e) or {} for e in as_list(item.get("items")))
            ]
            return [
                Message(
                    type=MessageType.SYSTEM,
                    subtype="plan",
                    message_id=item_id,
                    data={"entries": entries, "final": completed},
                    raw=ev,
                )
            ]
        if item_type == "error":
            text = as_str(item.get("message")) or "warning"
            return [Message(type=MessageType.SYSTEM, subtype="warning", text=text, raw=ev)]
        # An item type of a newer Codex: pass it through under its own name.
        name = item_type if isinstance(item_type, str) and item_type else "unknown_item"
        return [Message(type=f"codex.{name}", subtype=kind, data=item, raw=ev)]

    def _tool(
        self,
        item_id: str | None,
        name: str,
        kind: str,
        tool_input: Any,
        item: dict[str, Any],
        ev: dict[str, Any],
        completed: bool,
        *,
        output: Any,
        failed: bool,
    ) -> list[Message]:
        return tool_messages(
            self._started_tools,
            item_id,
            name,
            kind,
            tool_input,
            completed=completed,
            output=output,
            failed=failed,
            status=as_str(item.get("status")),
            exit_code=as_int(item.get("exit_code")),
            raw=ev,
        )

    def _error(self, ev: dict[str, Any]) -> list[Message]:
        text = as_str(ev.get("message")) or "unknown error"
        if _RETRY.match(text):
            return [retry_notice(text, raw=ev)]
        # Fatal only if turn.failed repeats it; decided there or at the end.
        self._pending_errors.append(ErrorInfo(message=text, code=_error_code(text)))
        return []

    def _failed(self, ev: dict[str, Any]) -> list[Message]:
        error = _dict(ev.get("error"))
        text = as_str(error.get("message")) or "the turn failed"
        self.failure = ErrorInfo(message=text, code=_error_code(text), fatal=True)
        self._pending_errors = [e for e in self._pending_errors if e.message != text]
        return [Message.error_message(text, code=self.failure.code, fatal=True, raw=ev)]

    # -- end of the process ----------------------------------------------------------------

    def finish(self, *, cancelled: bool = False) -> list[Message]:
        """Context reading, leftover errors, then the turn's ``result`` (when there is an
        outcome, or the turn was cancelled)."""
        if self._finished:
            return []
        self._finished = True
        out: list[Message] = []
        if not self._init_sent:
            out.append(self._init(self.thread_id))
        out.extend(
            Message.error_message(e.message, code=e.code, raw=None) for e in self._pending_errors
        )
        reading = self._context()
        if reading is not None:
            out.append(reading)
        if not cancelled and not self.has_outcome:
            return out
        usage, scope = self._turn_usage()
        data: dict[str, Any] = {}
        if scope is not None:
            data["usage_scope"] = scope
        if self.model:
            data["model"] = self.model
        failure = self.failure
        if cancelled:
            stop_reason, subtype = "cancelled", "cancelled"
        elif failure is not None:
            stop_reason = "max_tokens" if failure.code == "max_tokens" else "error"
            subtype = "error"
        else:
            stop_reason, subtype = "end_turn", "success"
        out.append(
            Message(
                type=MessageType.RESULT,
                subtype=subtype,
                usage=usage,
                stop_reason=stop_reason,
                error=None if cancelled else failure,
                resume_id=self.thread_id,
                data=data or None,
            )
        )
        return out

    def _context(self) -> Message | None:
        rollout = self.rollout
        tracker = self.tracker
        if rollout is not None and rollout.context_window:
            tracker.report_size(rollout.context_window, effective=True)
        if rollout is not None and rollout.last_call is not None:
            reading = tracker.observe_call(codex_usage(rollout.last_call))
            if reading is not None:
                return reading
        size, source = tracker.size()
        if size is None:
            return None
        # No call usage on stdout: the window alone, ``used`` unknown (never invented).
        return Message.context_window(ContextWindow(size_tokens=size, size_source=source))

    def _turn_usage(self) -> tuple[Usage | None, str | None]:
        rollout = self.rollout
        if rollout is not None and rollout.thread is not None:
            # The agent's own record of the thread total: the next turn differences from it.
            recorded_thread = rollout.thread
        else:
            recorded_thread = None
        if rollout is not None and rollout.turn is not None:
            self.totals.prime(recorded_thread or self.completed or rollout.turn)
            return account_usage(codex_usage(rollout.turn), model=self.model), None
        if self.completed is None:
            if recorded_thread is not None:
                self.totals.prime(recorded_thread)
            return None, None
        figures, scope = self.totals.advance(self.completed)
        if scope == "cumulative":
            # The thread's running total, not this turn's: no cost is estimated from it.
            usage = account_usage(codex_usage(figures), model=self.model, cost="unavailable")
            return usage, "thread_cumulative"
        return account_usage(codex_usage(figures), model=self.model, tokens="derived"), None
