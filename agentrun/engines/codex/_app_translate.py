"""Translate a ``codex app-server`` JSON-RPC session into messages.

Fed every wire message in both directions as ``{"dir": "send"|"recv", "msg": {...}}`` (the
recorder's format; ``"->"`` / ``"<-"`` are accepted too, other keys ignored), live and in replay.
App-server messages carry no ``"jsonrpc"`` field. Mapping:

* ``thread/start`` / ``thread/resume`` result, ``thread/started`` -> ``init`` (thread id, model);
* ``item/agentMessage/delta`` -> ``text_delta``; ``item/completed`` ``agentMessage`` -> ``text``;
* ``item/reasoning/summaryTextDelta`` -> ``thinking_delta``; ``reasoning`` -> ``thinking``;
* ``commandExecution`` / ``fileChange`` / ``mcpToolCall`` / ``webSearch`` items -> ``tool_use``
  at ``item/started`` and ``tool_result`` at ``item/completed`` (the same names and kinds as exec);
* ``thread/tokenUsage/updated`` -> ``context_window`` after every model call: ``used`` from the
  call's ``last`` usage, the *effective* ``modelContextWindow`` (``size_source="agent_effective"``).
  The turn's usage comes from the thread's running ``total``: each notification adds what the
  total grew since the one before, so a notification repeated for the same call (around an
  interrupt) adds nothing and a stale ``last`` (after failed retries) is not counted again. A
  notification of another turn — the restored total Codex sends when a resumed thread's first
  turn starts, the late usage of an interrupted turn — only moves the baseline. With no earlier
  total, the baseline is the first call's ``total - last``. The calls Codex reports while a
  ``contextCompaction`` item of its own (not ``thread/compact/start``) runs inside a turn are the
  summarising call's: the turn's ``data["side_usage"]``, not its usage;
* approvals (``item/commandExecution/requestApproval``, ``item/fileChange/requestApproval`` and
  the older ``execCommandApproval`` / ``applyPatchApproval``): our answer declines -> a
  ``permission_denied`` message with the denial;
* ``error`` notifications: ``willRetry`` -> a ``system`` ``retry`` message; otherwise an error
  that is fatal only when the turn fails;
* ``turn/completed`` -> the turn's ``result`` (``completed``, ``failed`` with its error,
  ``interrupted`` -> ``cancelled``); an error response to ``turn/start`` also ends the turn.

Notifications about other turns (``turnId`` of a turn that already ended) are dropped: a late
tail of an interrupted turn never lands in the next one.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import Unpack

from ..._bases.cumulative import RunningTotals
from ..._bases.translator import AgentTranslator, AgentTranslatorOptions, JsonRpcTranslator
from ..._vocabulary.jsonvalues import as_dict, as_int, as_list, as_object, as_str
from ..._vocabulary.messages import (
    ContextWindow,
    ErrorInfo,
    Message,
    MessageType,
    PermissionDenial,
    Usage,
    assemble,
)
from ..._vocabulary.prices import account_usage
from ..._wire.framing import capped
from ._app_wire import DECODED_HEADS, QUIET, wire_view
from ._translate import codex_usage, retry_notice, tool_messages

__all__ = ["APPROVAL_METHODS", "CodexAppServerTranslator"]

#: The agent's approval requests and whether their answer uses the v2 decision words.
APPROVAL_METHODS: dict[str, bool] = {
    "item/commandExecution/requestApproval": True,
    "item/fileChange/requestApproval": True,
    "execCommandApproval": False,
    "applyPatchApproval": False,
}

#: Notifications that belong to a running turn (dropped outside one).
_TURN_METHODS = frozenset(
    {
        "item/agentMessage/delta",
        "item/reasoning/summaryTextDelta",
        "item/started",
        "item/completed",
        "thread/tokenUsage/updated",
        "error",
        "turn/completed",
    }
)

#: Deltas of a text or a summary of reasoning, and the messages they make.
_DELTAS = {
    "item/agentMessage/delta": MessageType.TEXT_DELTA,
    "item/reasoning/summaryTextDelta": MessageType.THINKING_DELTA,
}

_DIRECTIONS = {"send": "send", "->": "send", "recv": "recv", "<-": "recv"}

_TOOLS: dict[str, tuple[str, str]] = {
    "commandExecution": ("exec_command", "execute"),
    "fileChange": ("apply_patch", "edit"),
    "webSearch": ("web_search", "search"),
}


def _dict(value: object) -> dict[str, Any]:
    return as_dict(value) or {}


#: Each of Codex's token counters: our name, its name.
_COUNTERS = (
    ("input_tokens", "inputTokens"),
    ("cached_input_tokens", "cachedInputTokens"),
    ("cache_write_input_tokens", "cacheWriteInputTokens"),
    ("output_tokens", "outputTokens"),
    ("reasoning_output_tokens", "reasoningOutputTokens"),
)


def _camel_totals(value: object) -> dict[str, int]:
    raw = _dict(value)
    out: dict[str, int] = {}
    for ours, theirs in _COUNTERS:
        number = as_int(raw.get(theirs))
        out[ours] = number if number is not None and number > 0 else 0
    return out


class CodexAppServerTranslator(AgentTranslator, JsonRpcTranslator):
    """Turns one ``codex app-server`` session's wire messages into messages."""

    agent_name = "codex"

    def __init__(self, **options: Unpack[AgentTranslatorOptions]) -> None:
        super().__init__(**options)
        self.thread_id: str | None = None
        #: The running turn's id (from the ``turn/start`` response or ``turn/started``).
        self.turn_id: str | None = None
        self._finished_turns: set[str] = set()
        self._sent: dict[Any, str] = {}
        self._asked: dict[Any, tuple[str, dict[str, Any]]] = {}
        self._in_turn = False
        #: Whether the running turn's id is known (its ``turn/start`` response or
        #: ``turn/started``): token usage of another turn id is never this turn's.
        self._turn_known = False
        #: The thread's running token total as last reported (any turn): the baseline the
        #: next notification is differenced from.
        self._thread_total = RunningTotals()
        self._usage: Usage | None = None
        #: The calls of an auto-compaction inside the running turn (the summarising call):
        #: the turn's side usage, not its usage.
        self._side_usage: Usage | None = None
        self._errors: list[ErrorInfo] = []
        self._denials: list[PermissionDenial] = []
        self._started_tools: set[str] = set()
        # Compaction: the fill before it (while a contextCompaction item runs), the reading
        # after it, and whether the caller asked for it (thread/compact/start).
        self._compacting: tuple[int | None] | None = None
        self._compacted: ContextWindow | None = None
        self._compact_requested = False

    # -- entry -----------------------------------------------------------------------------

    def feed(self, event: Any) -> list[Message]:
        # Nested no deeper than every message can serialize.
        return self.feed_decoded(capped(event))

    def feed_decoded(self, event: Any) -> list[Message]:
        """:meth:`feed` of an event the line decoder made (its nesting already cut)."""
        if isinstance(event, Message):
            return [event]
        record = as_dict(event)
        direction = _DIRECTIONS.get(str(record.get("dir"))) if record is not None else None
        msg = as_dict(record.get("msg")) if record is not None else None
        if direction is None or msg is None:
            return [
                Message.error_message(
                    "codex-app-server: expected {'dir': 'send'|'recv', 'msg': {...}}",
                    code="protocol",
                    raw=event,
                )
            ]
        if direction == "send":
            return self._outgoing(msg)
        return self._incoming(msg)

    def feed_line(self, line: bytes, *, engine: str) -> list[Message]:
        """The messages of one line, read through the wire schema (:mod:`._app_wire`) from its
        bytes; a line the schema leaves is decoded and fed as :class:`AgentTranslator` does.
        The view the schema makes goes through the same code as a decoded message does."""
        if line.startswith(DECODED_HEADS):
            return super().feed_line(line, engine=engine)
        view = wire_view(line)
        if view is None:
            return super().feed_line(line, engine=engine)
        if "ignored" in view:
            return []
        method: str | None = view.get("method")
        if method is not None:
            return self._notification(method, view.get("params") or {}, view)
        msg: dict[str, Any] | None = view.get("response")
        if msg is not None:
            msg_id = msg["id"]
            sent = self._sent.get(msg_id)
            if sent is None:
                return []
            if (
                sent in ("turn/start", "thread/compact/start")
                and as_dict(msg.get("error")) is not None
            ):
                # Its error message keeps the whole response: the decoding path makes it.
                return super().feed_line(line, engine=engine)
            del self._sent[msg_id]
            return self._response(sent, msg)
        msg = view.get("request")
        if msg is not None:
            return self._outgoing(msg)
        # A kind the schema leaves to the decoding path.
        return super().feed_line(line, engine=engine)

    def finish(self) -> list[Message]:
        """The end of the stream: a turn that was running ends without its result."""
        return []

    # -- what we send ----------------------------------------------------------------------

    def _outgoing(self, msg: dict[str, Any]) -> list[Message]:
        method = as_str(msg.get("method"))
        msg_id = msg.get("id")
        if method is not None:
            if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool):
                self._sent[msg_id] = method
            if method in ("turn/start", "thread/compact/start"):
                out = self._turn_begins()
                self._compact_requested = method == "thread/compact/start"
                return out
            return []
        # Our answer to one of the agent's requests.
        if not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool):
            return []
        asked = self._asked.pop(msg_id, None)
        if asked is None:
            return []
        method, params = asked
        if method not in APPROVAL_METHODS:
            return []
        return self._answered(method, params, msg)

    def _turn_begins(self) -> list[Message]:
        out: list[Message] = []
        if not self._init_sent:
            out.append(self._init(self.thread_id))
        self._in_turn = True
        self._turn_known = False
        self.turn_id = None
        self._usage = None
        self._side_usage = None
        self._errors = []
        self._denials = []
        self._started_tools = set()
        return out

    def _answered(self, method: str, params: dict[str, Any], msg: dict[str, Any]) -> list[Message]:
        result = _dict(msg.get("result"))
        decision = result.get("decision")
        if decision in ("accept", "acceptForSession", "approved", "approved_for_session"):
            return []
        is_command = method in ("item/commandExecution/requestApproval", "execCommandApproval")
        name = _TOOLS["commandExecution" if is_command else "fileChange"][0]
        reason = as_str(params.get("reason")) or "declined by the permission callback"
        denial = PermissionDenial(
            tool_name=name,
            tool_use_id=as_str(params.get("itemId")) or as_str(params.get("callId")),
            input=params.get("command") or params.get("fileChanges") or params.get("changes"),
            reason=reason,
        )
        self._denials.append(denial)
        return [
            Message(
                type=MessageType.SYSTEM,
                subtype="permission_denied",
                denials=(denial,),
                data={"method": method, "decision": decision},
            )
        ]

    # -- what the agent sends ----------------------------------------------------------------

    def _incoming(self, msg: dict[str, Any]) -> list[Message]:
        method = as_str(msg.get("method"))
        msg_id = msg.get("id")
        if method is not None:
            params = _dict(msg.get("params"))
            if msg_id is not None:
                if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool):
                    self._asked[msg_id] = (method, params)
                return []
            return self._notification(method, params, msg)
        if not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool):
            return []
        sent = self._sent.pop(msg_id, None)
        if sent is None:
            return []
        return self._response(sent, msg)

    def _response(self, method: str, msg: dict[str, Any]) -> list[Message]:
        error = as_dict(msg.get("error"))
        result = _dict(msg.get("result"))
        if method in ("thread/start", "thread/resume", "thread/fork"):
            thread = _dict(result.get("thread"))
            self.thread_id = as_str(thread.get("id")) or self.thread_id
            model = as_str(result.get("model"))
            if model:
                self._learn_model(model)
            return []
        if method in ("turn/start", "thread/compact/start"):
            if error is not None:
                text = as_str(error.get("message")) or "turn/start failed"
                data = error.get("data")
                info = ErrorInfo(message=text, code="agent_error", fatal=True, data=as_object(data))
                out = [Message.error_message(text, code="agent_error", fatal=True,
                                             data={"data": data} if data is not None else None,
                                             raw=msg)]  # fmt: skip
                return out + self._result("error", info)
            turn = _dict(result.get("turn"))
            self._turn_started(as_str(turn.get("id")))
        return []

    def _turn_started(self, turn_id: str | None) -> None:
        if turn_id is not None and self._in_turn:
            self.turn_id = turn_id
            self._turn_known = True

    def _notification(
        self, method: str, params: dict[str, Any], msg: dict[str, Any]
    ) -> list[Message]:
        turn_id = as_str(params.get("turnId"))
        if method == "thread/tokenUsage/updated" and not self._of_running_turn(turn_id):
            # Another turn's usage (a resumed thread's restored total, an ended turn's tail):
            # not this turn's, but the thread's total moved.
            self._thread_total.prime(_camel_totals(_dict(params.get("tokenUsage")).get("total")))
            return []
        if turn_id is not None and turn_id in self._finished_turns:
            return []  # the tail of a turn that already ended
        if method == "thread/started":
            thread = _dict(params.get("thread"))
            self.thread_id = as_str(thread.get("id")) or self.thread_id
            return []
        if method in QUIET:
            if method == "turn/started":
                self._turn_started(as_str(_dict(params.get("turn")).get("id")))
            return []
        if method == "warning":
            text = as_str(params.get("message")) or "warning"
            return [assemble(Message, {"type": MessageType.SYSTEM, "subtype": "warning",
                                       "text": text, "raw": msg})]  # fmt: skip
        if method not in _TURN_METHODS:
            # A notification of a newer Codex: passed through under its own name.
            return [Message(type=f"codex.{method}", subtype=method, data=params, raw=msg)]
        if not self._in_turn:
            return []
        if method in _DELTAS:
            delta = params.get("delta")
            if isinstance(delta, str):
                item_id = as_str(params.get("itemId"))
                return [assemble(Message, {"type": _DELTAS[method], "text": delta,
                                           "message_id": item_id})]  # fmt: skip
            return []
        if method in ("item/started", "item/completed"):
            return self._item(_dict(params.get("item")), method == "item/completed", msg)
        if method == "thread/tokenUsage/updated":
            return self._token_usage(_dict(params.get("tokenUsage")), msg)
        if method == "error":
            return self._error(params, msg)
        return self._completed(_dict(params.get("turn")))

    def _item(self, item: dict[str, Any], completed: bool, msg: dict[str, Any]) -> list[Message]:
        kind = as_str(item.get("type"))
        item_id = as_str(item.get("id"))
        if kind == "agentMessage":
            text = item.get("text")
            if completed and isinstance(text, str):
                return [assemble(Message, {"type": MessageType.TEXT, "text": text,
                                           "message_id": item_id, "raw": msg})]  # fmt: skip
            return []
        if kind == "reasoning":
            if not completed:
                return []
            parts = [p for p in as_list(item.get("summary")) if isinstance(p, str)]
            if not parts:
                return []
            return [assemble(Message, {"type": MessageType.THINKING, "text": "\n".join(parts),
                                       "message_id": item_id, "raw": msg})]  # fmt: skip
        if kind in _TOOLS or kind == "mcpToolCall":
            return self._tool(kind, item_id, item, completed, msg)
        if kind == "contextCompaction":
            return self._compaction(completed, msg)
        if kind in ("userMessage", None):
            return []
        return [Message(type=f"codex.{kind}", subtype="item", data=item, raw=msg)]

    def _tool(
        self, kind: str, item_id: str | None, item: dict[str, Any], completed: bool,
        msg: dict[str, Any],
    ) -> list[Message]:  # fmt: skip
        if kind == "mcpToolCall":
            name = (
                f"mcp__{as_str(item.get('server')) or 'mcp'}__{as_str(item.get('tool')) or 'tool'}"
            )
            tool_kind, tool_input = "other", item.get("arguments")
            error = item.get("error")
            output = error if error is not None else _dict(item.get("result")).get("content")
            failed = error is not None
        else:
            name, tool_kind = _TOOLS[kind]
            if kind == "commandExecution":
                tool_input = {"command": item.get("command")}
                output = item.get("aggregatedOutput")
                exit_code = as_int(item.get("exitCode"))
                failed = exit_code not in (None, 0)
            elif kind == "fileChange":
                tool_input = {"changes": item.get("changes")}
                output = item.get("changes")
                failed = False
            else:
                tool_input = {"query": item.get("query")}
                output = item.get("action")
                failed = False
        status = as_str(item.get("status"))
        return tool_messages(
            self._started_tools,
            item_id,
            name,
            tool_kind,
            tool_input,
            completed=completed,
            output=output,
            failed=failed or status in ("failed", "declined"),
            status=status,
            exit_code=as_int(item.get("exitCode")),
            raw=msg,
        )

    def _compaction(self, completed: bool, msg: dict[str, Any]) -> list[Message]:
        """A ``contextCompaction`` item: Codex replaces the thread's history with a summary
        (``thread/compact/start``, or its own auto-compaction). Its size comes as a usage
        update with no input, whose total is the new history's."""
        if not completed:
            last = self.tracker.last
            self._compacting = (None if last is None else last.used_tokens,)
            self._compacted = None
            return []
        before = self._compacting[0] if self._compacting is not None else None
        after, self._compacting, self._compacted = self._compacted, None, None
        return [Message.compaction(trigger="manual" if self._compact_requested else "auto",
                                   before_tokens=before, after=after, raw=msg)]  # fmt: skip

    def _of_running_turn(self, turn_id: str | None) -> bool:
        """Whether a notification naming ``turn_id`` belongs to the running turn: one without
        a turn id does; one naming a turn does only once the running turn's id is known and
        equal (no model call of a turn precedes its id)."""
        if not self._in_turn:
            return False
        if turn_id is None:
            return True
        return self._turn_known and turn_id == self.turn_id

    def _token_usage(self, usage: dict[str, Any], msg: dict[str, Any]) -> list[Message]:
        window = as_int(usage.get("modelContextWindow"))
        if window:
            self.tracker.report_size(window, effective=True)
        last = usage.get("last")
        if last is None:
            return []
        totals = _dict(last)
        call_figures = _camel_totals(last)
        grown = self._grown(usage.get("total"), call_figures)
        if self._compacting is not None and not as_int(totals.get("inputTokens")):
            # The history after compaction: no call was made, its size is the total.
            size = as_int(totals.get("totalTokens"))
            if size:
                reading = self.tracker.observe_reported(size, raw=msg)
                self._compacted = reading.context
                return [reading]
        if grown is not None and not any(grown.values()):
            return []  # the same call reported again (or a stale ``last``): nothing new
        served = codex_usage(grown if grown is not None else call_figures)
        if self._compacting is not None and not self._compact_requested:
            # A call while Codex compacts by itself inside a turn: the summarising call.
            side = self._side_usage
            self._side_usage = served if side is None else side + served
        else:
            self._usage = served if self._usage is None else self._usage + served
        reading = self.tracker.observe_call(codex_usage(call_figures), raw=msg)
        return [] if reading is None else [reading]

    def _grown(self, total: object, last: dict[str, int]) -> dict[str, int] | None:
        """What the thread's running total grew by since the last notification (``None``
        without a total). With no earlier total the call is the first known: its ``last``."""
        if as_dict(total) is None:
            return None
        figures = _camel_totals(total)
        if not self._thread_total.known:
            self._thread_total.prime({k: max(v - last.get(k, 0), 0) for k, v in figures.items()})
        grown, _ = self._thread_total.advance(figures)
        return {key: int(value) for key, value in grown.items()}

    def _error(self, params: dict[str, Any], msg: dict[str, Any]) -> list[Message]:
        error = _dict(params.get("error"))
        text = as_str(error.get("message")) or "unknown error"
        info = as_str(error.get("codexErrorInfo"))
        if params.get("willRetry") is True:
            details = as_str(error.get("additionalDetails"))
            return [retry_notice(text, details=details, status=_http_status(error), raw=msg)]
        entry = ErrorInfo(message=text, code=_code(info))
        self._errors.append(entry)
        return [Message.error_message(text, code=entry.code, data={"codex_error_info": info},
                                      raw=msg)]  # fmt: skip

    def _completed(self, turn: dict[str, Any]) -> list[Message]:
        status = as_str(turn.get("status"))
        error = as_dict(turn.get("error"))
        if status == "interrupted":
            return self._result("cancelled", None)
        if status == "failed" or error is not None:
            text = as_str((error or {}).get("message")) or "the turn failed"
            info = ErrorInfo(message=text, code=_code(as_str((error or {}).get("codexErrorInfo"))),
                             fatal=True)  # fmt: skip
            return self._result("error", info)
        return self._result("success", None)

    def _result(self, subtype: str, error: ErrorInfo | None) -> list[Message]:
        if not self._in_turn:
            return []
        self._in_turn = False
        if self.turn_id is not None:
            self._finished_turns.add(self.turn_id)
        stop = {"success": "end_turn", "error": "error", "cancelled": "cancelled"}[subtype]
        # Every value is the library's own (a model it validated, a dict it built).
        fields: dict[str, Any] = {
            "type": MessageType.RESULT,
            "subtype": subtype,
            "usage": account_usage(self._usage, model=self.model),
            "stop_reason": stop,
            "error": error,
            "denials": tuple(self._denials) if self._denials else None,
            "resume_id": self.thread_id,
            "data": {"turn_id": self.turn_id, **({"model": self.model} if self.model else {})},
        }
        side = account_usage(self._side_usage, model=self.model)
        if side is not None:
            data = {**side.model_dump(mode="json", exclude_none=True), "usage_source": "derived"}
            fields["data"]["side_usage"] = data
        return [assemble(Message, fields)]


def _http_status(error: dict[str, Any]) -> int | None:
    """The HTTP status in ``codexErrorInfo: {<kind>: {httpStatusCode: n}}``, if any."""
    for detail in _dict(error.get("codexErrorInfo")).values():
        status = as_int(_dict(detail).get("httpStatusCode"))
        if status is not None:
            return status
    return None


def _code(info: str | None) -> str:
    mapping = {
        "internalServerError": "api_error",
        "contextWindowExceeded": "context_length_exceeded",
        "usageLimitExceeded": "quota_exceeded",
        "unauthorized": "authentication_failed",
    }
    return mapping.get(info or "", "agent_error")
