"""Claude Code stream-json events to normalized messages (pure; used live and by replay).

Every event type of the pinned CLI is mapped; nothing is dropped silently except pure stream
framing (``content_block_start``/``_stop`` of text and thinking blocks, ``signature_delta``,
plain ``message_stop``, ``ping``), which carries nothing the complete events do not repeat.

Context readings: one per main-thread model call (``message.id``), from the call's input + cache
tokens (``message_start`` in partial mode, else the first ``assistant`` event of the call). The
window size comes from the catalog until a result reports ``modelUsage.<m>.contextWindow``,
which is remembered for the rest of the session; a refreshed reading is emitted before that
result so the turn's last reading carries the authoritative size.

An event is read value by value from the decoded line: each field is checked as it is read (a
value of a surprising type counts as absent), and the messages of the common events are built
from the checked values without being validated again (``assemble``; a count is checked to be
what ``Usage`` takes, a negative one not reported). Rare events build their messages validated.
Reading the values in Python measured cheaper than validating a typed view of them in
pydantic-core first (the view cost more than the checks it replaced). The messages of checked
values are built in :mod:`._message_builders`, a turn's usage and cost in :mod:`._usage`, a
``Bash`` result's exit code in :mod:`._bash_results`.
"""

from __future__ import annotations

from typing import Any, cast

from ..._bases.translator import Translator
from ..._vocabulary.context import Catalog, ContextTracker
from ..._vocabulary.jsonvalues import as_dict as _obj
from ..._vocabulary.jsonvalues import as_int as _int
from ..._vocabulary.jsonvalues import as_list as _list
from ..._vocabulary.jsonvalues import as_str as _str
from ..._vocabulary.messages import (
    ContextWindow,
    ErrorInfo,
    InitMeta,
    Message,
    MessageType,
    PermissionDenial,
    ProcessMeta,
    ToolCall,
    Usage,
    assemble,
)
from ..._wire.framing import capped
from ._bash_results import bash_exit_code
from ._message_builders import (
    Json,
    background_tasks,
    message_delta,
    permission_denied,
    protocol_error,
    result_denials,
    retry_notice,
    stream_note,
    strings,
    text_message,
    text_of,
    tool_delta,
    user_message,
    without,
)
from ._usage import compaction_apart, cost_figure, reported_window, token_count, turn_usage

__all__ = ["SESSION_NOT_FOUND", "ClaudeTranslator"]

#: ``ErrorInfo.code`` of the result the CLI prints for ``--resume <unknown id>``.
SESSION_NOT_FOUND = "session_not_found"
#: How Claude Code refuses a ``--resume`` id: no saved conversation of that id, or an id that is
#: neither a UUID nor a session title.
UNKNOWN_SESSION_WORDS = ("No conversation found", "does not match any session title")

SYNTHETIC_MODEL = "<synthetic>"

#: terminal_reason -> ErrorInfo.code of a failed result.
TERMINAL_CODES = {
    "api_error": "api_error",
    "prompt_too_long": "prompt_too_long",
    "max_turns": "max_turns",
    "aborted_streaming": "cancelled",
    "aborted_tools": "cancelled",
}

#: A failed result's stop reasons that say why it failed (any other becomes ``"error"``).
FAILED_STOPS_KEPT = frozenset({"max_tokens", "refusal", "model_context_window_exceeded"})

#: What a result passes on as it is, when the CLI sent it.
RESULT_DATA = ("errors", "api_error_status", "api_error_type", "api_error", "result_index")

_TEXT_DELTA = MessageType.TEXT_DELTA
_THINKING_DELTA = MessageType.THINKING_DELTA
_NO_TOOL: tuple[None, None] = (None, None)
_TOOL_BLOCKS = ("tool_use", "server_tool_use")


class ClaudeTranslator(Translator):
    """Claude Code's translator, stateful for one session. ``process`` (set by the engine) is
    attached to ``init`` messages; ``resumed`` says the session continues an earlier one (its
    cumulative cost then cannot be used as the first turn's cost)."""

    def __init__(
        self,
        *,
        model: str | None = None,
        context_window_tokens: int | None = None,
        catalog: Catalog | None = None,
        process: ProcessMeta | None = None,
        resumed: bool = False,
    ) -> None:
        self.tracker: ContextTracker = ContextTracker(
            model=model, override=context_window_tokens, catalog=catalog
        )
        self.process = process
        self.resumed = resumed
        self.session_id: str | None = None
        self.model: str | None = model
        #: True once a ``system/init`` was seen (a failed ``--resume`` prints none).
        self.saw_init: bool = False
        #: Set when a result said the resumed session does not exist.
        self.session_not_found: str | None = None
        self._last_total_cost: float | None = None
        #: The CLI compacted by itself since the last result (``compact_boundary``, ``auto``).
        self._compacted_by_itself = False
        #: Background tasks now running, by id (``background_tasks_changed``), and the tool
        #: call that started each (``task_started``, which may come after).
        self._tasks: dict[str, Json] = {}
        self._task_tools: dict[str, str] = {}
        #: Model calls whose context reading was made, this turn and the previous one (a late
        #: repeat of the previous turn's call is still recognised); older ids are forgotten at
        #: each result, so a long session keeps a flat memory.
        self._observed_calls: set[str] = set()
        self._previous_calls: set[str] = set()
        #: Tool names by tool-use id, for naming tool results: this turn's and the previous
        #: turn's, and those of background tasks still running (their results come later).
        self._tool_names: dict[str, str] = {}
        self._previous_tool_names: dict[str, str] = {}
        #: (message id, block index) -> (tool id, tool name) for input_json deltas.
        self._stream_tools: dict[tuple[str, int], tuple[str | None, str | None]] = {}
        self._last_stop_reason: str | None = None

    # -- protocol ----------------------------------------------------------------------------

    def feed(self, event: Any) -> list[Message]:
        # Nested no deeper than every message can serialize.
        return self.feed_decoded(capped(event))

    def feed_decoded(self, event: Any) -> list[Message]:
        """:meth:`feed` of an event the line decoder made (its nesting already cut)."""
        if not isinstance(event, dict):
            return protocol_error(
                "a stream-json line was not a JSON object", {"value": event}, event
            )
        ev: Json = event  # pyright: ignore[reportUnknownVariableType]
        kind = ev.get("type")
        # The kinds in the order of how often the CLI sends them.
        if kind == "stream_event":
            return self._stream_event(ev)
        if kind == "assistant":
            return self._assistant(ev)
        if kind == "system":
            return self._system(ev)
        if kind == "result":
            return self._result(ev)
        if kind == "user":
            return self._user(ev)
        if kind in ("control_response", "control_request", "control_cancel_request"):
            return [
                Message(
                    type=MessageType.SYSTEM, subtype=str(kind), data=without(ev, "type"), raw=ev
                )
            ]
        if isinstance(kind, str) and kind:
            # A newer CLI's event kind: pass it through under its own type string.
            return [Message(type=kind, subtype=_str(ev.get("subtype")), data=ev, raw=ev)]
        return protocol_error("an event had no 'type'", {"event": ev}, ev)

    def finish(self) -> list[Message]:
        return []

    # -- system --------------------------------------------------------------------------------

    def _system(self, ev: Json) -> list[Message]:
        subtype = ev.get("subtype")
        if not isinstance(subtype, str):
            subtype = ""
        if subtype == "init":
            if self._tasks:
                # Still running from an earlier turn: this turn's summary says so too.
                return [self._init(ev), background_tasks(self._tasks, self._task_tools, ev)]
            return [self._init(ev)]
        if subtype == "api_retry":
            return [retry_notice(ev)]
        if subtype == "compact_boundary":
            return self._compacted(ev)
        if subtype == "background_tasks_changed":
            self._tasks = {}
            for item in _list(ev.get("tasks")):
                task = _obj(item) or {}
                task_id = _str(task.get("task_id"))
                if task_id is not None:
                    self._tasks[task_id] = task
            return [background_tasks(self._tasks, self._task_tools, ev)]
        if subtype == "task_started":
            task_id, tool_use_id = _str(ev.get("task_id")), _str(ev.get("tool_use_id"))
            if task_id is not None and tool_use_id is not None:
                self._task_tools[task_id] = tool_use_id
            if task_id in self._tasks:
                return [background_tasks(self._tasks, self._task_tools, ev)]
        data = without(ev, "type", "subtype")
        if subtype == "permission_denied":
            return [permission_denied(ev, data)]
        return [
            assemble(
                Message,
                {"type": MessageType.SYSTEM, "subtype": subtype or None, "data": data, "raw": ev},
            )
        ]

    def _compacted(self, ev: Json) -> list[Message]:
        """``/compact`` (or the CLI's own auto-compaction) replaced the conversation with a
        summary: the gauge drops to the size the CLI reports after it."""
        meta = _obj(ev.get("compact_metadata")) or {}
        before = _int(meta.get("pre_tokens"))
        if before is None and self.tracker.last is not None:
            before = self.tracker.last.used_tokens
        after = _int(meta.get("post_tokens"))
        out: list[Message] = []
        reading: ContextWindow | None = None
        if after is not None:
            gauge = self.tracker.observe_reported(after, raw=ev)
            reading = gauge.context
            out.append(gauge)
        trigger = _str(meta.get("trigger"))
        if trigger == "auto":
            self._compacted_by_itself = True
        out.insert(0, Message.compaction(trigger=trigger, before_tokens=before, after=reading,
                                         raw=ev))  # fmt: skip
        return out

    def _init(self, ev: Json) -> Message:
        self.saw_init = True
        session_id = _str(ev.get("session_id"))
        if session_id:
            self.session_id = session_id
        model = _str(ev.get("model"))
        if model:
            self.model = model
            self.tracker.set_model(model)
        tools = strings(ev.get("tools"))
        init = assemble(
            InitMeta,
            {
                "model": model,
                "agent_name": "claude-code",
                "agent_version": _str(ev.get("claude_code_version")),
                "session_id": session_id,
                "cwd": _str(ev.get("cwd")),
                "tools": tools or None,
                "permission_mode": _str(ev.get("permissionMode")),
            },
        )
        return assemble(
            Message,
            {
                "type": MessageType.INIT,
                "init": init,
                "process": self.process,
                "resume_id": session_id,
                "raw": ev,
            },
        )

    # -- assistant -------------------------------------------------------------------------------

    def _assistant(self, ev: Json) -> list[Message]:
        message = _obj(ev.get("message")) or {}
        parent = _str(ev.get("parent_tool_use_id"))
        message_id = _str(message.get("id"))
        content = message.get("content")
        blocks = _list(content)
        if message.get("model") == SYNTHETIC_MODEL or ev.get("is_api_error_message") is True:
            texts = [_str(b.get("text")) for b in (_obj(x) for x in blocks) if b is not None]
            text = "\n".join(t for t in texts if t)
            keys = ("error", "api_error_status", "api_error_type", "api_error")
            data = {k: ev[k] for k in keys if k in ev}
            return [
                Message(
                    type=MessageType.ERROR,
                    error=ErrorInfo(
                        message=text or "claude: API error",
                        code="api_error",
                        status=_int(ev.get("api_error_status")),
                    ),
                    message_id=message_id,
                    parent_tool_use_id=parent,
                    data=data or None,
                    raw=ev,
                )
            ]
        out: list[Message] = []
        if parent is None and message_id is not None:
            reading = self._observe_call(message_id, _obj(message.get("usage")), ev)
            if reading is not None:
                out.append(reading)
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        for block in blocks:
            b = _obj(block)
            if b is None:
                continue
            out.append(self._block(b, message_id, parent, ev))
        return out

    def _block(self, b: Json, message_id: str | None, parent: str | None, ev: Json) -> Message:
        btype = b.get("type")
        if btype == "text":
            return text_message(MessageType.TEXT, text_of(b.get("text")), message_id, parent, ev)
        if btype == "thinking":
            return text_message(
                MessageType.THINKING, text_of(b.get("thinking")), message_id, parent, ev
            )
        if btype == "tool_use" or btype == "server_tool_use":
            tool_id = _str(b.get("id"))
            name = _str(b.get("name"))
            if tool_id is not None and name is not None:
                self._tool_names[tool_id] = name
            return assemble(
                Message,
                {
                    "type": MessageType.TOOL_USE,
                    "tool": assemble(
                        ToolCall, {"id": tool_id, "name": name, "input": b.get("input")}
                    ),
                    "message_id": message_id,
                    "parent_tool_use_id": parent,
                    "raw": ev,
                },
            )
        # redacted_thinking and block kinds a newer CLI adds.
        return Message(
            type=MessageType.SYSTEM,
            subtype=f"assistant_block:{btype}",
            message_id=message_id,
            parent_tool_use_id=parent,
            data={"block": b},
            raw=ev,
        )

    def _observe_call(self, message_id: str, usage: Json | None, raw: Any) -> Message | None:
        """The context reading of one main-thread model call, once per message id."""
        if message_id in self._observed_calls or message_id in self._previous_calls:
            return None
        if usage is None:
            return None
        self._observed_calls.add(message_id)
        prompt = assemble(
            Usage,
            {
                "input_tokens": token_count(usage.get("input_tokens")),
                "cache_read_tokens": token_count(usage.get("cache_read_input_tokens")),
                "cache_write_tokens": token_count(usage.get("cache_creation_input_tokens")),
            },
        )
        return self.tracker.observe_call(prompt, raw=raw)

    # -- user ------------------------------------------------------------------------------------

    def _user(self, ev: Json) -> list[Message]:
        message = _obj(ev.get("message")) or {}
        parent = _str(ev.get("parent_tool_use_id"))
        content = message.get("content")
        replayed = ev.get("isReplay") is True
        out: list[Message] = []
        texts: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        blocks = _list(content) or []
        # The event's ``tool_use_result`` belongs to its tool result when there is only one.
        results = sum(1 for b in blocks if (_obj(b) or {}).get("type") == "tool_result")
        for block in blocks:
            b = _obj(block)
            if b is None:
                continue
            if b.get("type") == "tool_result":
                tool_id = _str(b.get("tool_use_id"))
                is_error = b.get("is_error")
                name = self._tool_name(tool_id)
                tool = {
                    "id": tool_id,
                    "name": name,
                    "output": b.get("content"),
                    "is_error": is_error if isinstance(is_error, bool) else None,
                }
                exit_code = (
                    bash_exit_code(b, ev.get("tool_use_result") if results == 1 else None)
                    if name == "Bash"
                    else None
                )
                fields: Json = {
                    "type": MessageType.TOOL_RESULT,
                    "tool": assemble(ToolCall, tool),
                    "parent_tool_use_id": parent,
                    "replayed": replayed,
                    "raw": ev,
                }
                if exit_code is not None:
                    fields["data"] = {"exit_code": exit_code}  # as Codex's shell results say it
                out.append(assemble(Message, fields))
            elif isinstance(b.get("text"), str):
                texts.append(cast(str, b["text"]))
        if texts or not out:
            out.append(user_message(ev, texts, parent, replayed))
        return out

    # -- stream_event ----------------------------------------------------------------------------

    def _stream_event(self, ev: Json) -> list[Message]:
        got = ev.get("event")
        if not isinstance(got, dict):
            return protocol_error("stream_event without an event object", {"event": ev}, ev)
        event: Json = got  # pyright: ignore[reportUnknownVariableType]
        parent = ev.get("parent_tool_use_id")
        if not isinstance(parent, str):
            parent = None
        message_id = ev.get("api_message_id")
        if not isinstance(message_id, str):
            message_id = None
        # The kinds in the order of how often the CLI sends them.
        etype = event.get("type")
        if etype == "content_block_delta":
            delta: Json | None = _obj(event.get("delta"))
            if delta is not None and delta.get("type") == "text_delta":
                # The most frequent event of all, read here without a further call.
                text = delta.get("text")
                fields = {
                    "type": _TEXT_DELTA,
                    "text": text if isinstance(text, str) else "",
                    "message_id": message_id,
                    "parent_tool_use_id": parent,
                    "raw": ev,
                }
                return [assemble(Message, fields)]
            return self._delta(event, message_id, parent, ev)
        if etype == "content_block_start":
            block = _obj(event.get("content_block")) or {}
            index = _int(event.get("index"))
            if block.get("type") in _TOOL_BLOCKS and index is not None:
                tool = _str(block.get("id")), _str(block.get("name"))
                self._stream_tools[(message_id or "", index)] = tool
                return [tool_delta("", tool, message_id, parent, ev)]
            return []
        if etype == "content_block_stop" or etype == "ping":
            return []
        if etype == "message_start":
            message = _obj(event.get("message")) or {}
            mid = _str(message.get("id")) or message_id
            if parent is None and mid is not None:
                reading = self._observe_call(mid, _obj(message.get("usage")), ev)
                return [] if reading is None else [reading]
            return []
        if etype == "message_stop":
            abandoned = event.get("abandoned_blocks")
            if abandoned is None:
                return []
            data = {"abandoned_blocks": abandoned}
            return [stream_note("message_stop", message_id, parent, data, ev)]
        if etype == "message_delta":
            note = message_delta(event, message_id, parent, ev)
            if parent is None and note.stop_reason is not None:
                self._last_stop_reason = note.stop_reason
            return [note]
        return [stream_note(f"stream_event:{etype}", message_id, parent, {"event": event}, ev)]

    def _delta(
        self, event: Json, message_id: str | None, parent: str | None, ev: Json
    ) -> list[Message]:
        """A ``content_block_delta`` other than a text delta (read by :meth:`_stream_event`)."""
        delta = _obj(event.get("delta")) or {}
        dtype = delta.get("type")
        if dtype == "input_json_delta":
            index = _int(event.get("index"))
            tool = self._stream_tools.get((message_id or "", index or 0), _NO_TOOL)
            return [tool_delta(text_of(delta.get("partial_json")), tool, message_id, parent, ev)]
        if dtype == "thinking_delta":
            return [
                text_message(
                    _THINKING_DELTA, text_of(delta.get("thinking")), message_id, parent, ev
                )
            ]
        if dtype == "signature_delta":
            return []
        subtype = f"content_block_delta:{dtype}"
        return [stream_note(subtype, message_id, parent, {"delta": delta}, ev)]

    # -- result ----------------------------------------------------------------------------------

    def _result(self, ev: Json) -> list[Message]:
        out: list[Message] = []
        subtype = _str(ev.get("subtype"))
        is_error = ev.get("is_error") is True or (subtype is not None and subtype != "success")
        model_usage = _obj(ev.get("modelUsage")) or {}
        since_last = _obj(ev.get("model_usage_since_last_result"))
        self._report_window(out, model_usage, since_last)
        usage = self._turn_usage(ev, since_last, self._context_fill())
        summarising: Usage | None = None
        if self._compacted_by_itself and since_last:
            # The summarising call counts with the turn's calls since the last result: apart,
            # as the turn's side usage.
            usage, summarising = compaction_apart(
                usage, _obj(ev.get("usage")), model=self.model or next(iter(since_last), None)
            )
        self._compacted_by_itself = False
        text = _str(ev.get("result"))
        terminal = _str(ev.get("terminal_reason"))
        error = (
            self._result_error(
                subtype,
                terminal,
                text,
                [e for e in _list(ev.get("errors")) if isinstance(e, str)],
                _int(ev.get("api_error_status")),
            )
            if is_error
            else None
        )
        denials = result_denials(ev.get("permission_denials"))
        out.append(
            self._result_message(
                ev,
                subtype=subtype,
                is_error=is_error,
                text=text,
                terminal=terminal,
                stop=_str(ev.get("stop_reason")),
                session_id=_str(ev.get("session_id")),
                model_usage=model_usage,
                usage=usage,
                denials=denials,
                error=error,
                side_usage=summarising,
            )
        )
        return out

    def _report_window(
        self, out: list[Message], model_usage: dict[str, Any], since_last: dict[str, Any] | None
    ) -> None:
        """The window the CLI reports with a result: authoritative for the rest of the session
        (a refreshed reading joins ``out``)."""
        window = reported_window(model_usage, self.model) or reported_window(
            since_last or {}, self.model
        )
        if window is not None:
            self.tracker.report_size(window)
            refreshed = self.tracker.refresh()
            if refreshed is not None:
                out.append(refreshed)

    def _context_fill(self) -> Json:
        """The usage fields of the context fill of the latest reading (none before any)."""
        last = self.tracker.last
        if last is None:
            return {}
        return {"context_used_tokens": last.used_tokens, "context_size_tokens": last.size_tokens}

    def _result_error(
        self,
        subtype: str | None,
        terminal: str | None,
        text: str | None,
        errors: list[str],
        status: int | None,
    ) -> ErrorInfo:
        """The error of a failed turn's result (values already checked by either reader); an
        unknown session before any ``init`` is the typed not-found."""
        code = TERMINAL_CODES.get(terminal or "", subtype or "error")
        joined = "; ".join(errors)
        said = joined + (text or "")
        if not self.saw_init and any(words in said for words in UNKNOWN_SESSION_WORDS):
            code = SESSION_NOT_FOUND
            self.session_not_found = joined or text
        return assemble(
            ErrorInfo,
            {
                "message": text or joined or f"claude turn ended with {subtype or 'an error'}",
                "code": code,
                "status": status,
                "fatal": True,
            },
        )

    def _result_message(
        self,
        ev: Json,
        *,
        subtype: str | None,
        is_error: bool,
        text: str | None,
        terminal: str | None,
        stop: str | None,
        session_id: str | None,
        model_usage: dict[str, Any],
        usage: Usage,
        denials: tuple[PermissionDenial, ...],
        error: ErrorInfo | None,
        side_usage: Usage | None = None,
    ) -> Message:
        """The turn's ``result`` of values already read and checked (by either reader), and the
        end of the turn's state. Every value is of its field's type: assembled, not validated."""
        session_id = session_id or self.session_id
        if session_id:
            self.session_id = session_id
        data: Json = {
            "subtype": subtype,
            "is_error": is_error,
            "terminal_reason": terminal,
            "num_turns": ev.get("num_turns"),
            "model": self.model or next(iter(model_usage), None),
            "session_cost_usd": ev.get("total_cost_usd"),
        }
        for key in RESULT_DATA:
            if ev.get(key) is not None:
                data[key] = ev[key]
        if side_usage is not None:
            data["side_usage"] = side_usage.model_dump(mode="json", exclude_none=True)
        if stop is None and not is_error:
            stop = self._last_stop_reason
        if is_error and stop not in FAILED_STOPS_KEPT:
            # A failed turn says so like every engine's: the model call's own stop (the CLI's
            # synthetic "stop_sequence" with "Not logged in", say) is not why the turn ended.
            stop = "error"
        if TERMINAL_CODES.get(terminal or "") == "cancelled":
            # An interrupted turn says so like every engine's, whatever the last call said.
            stop = "cancelled"
        result = assemble(
            Message,
            {
                "type": MessageType.RESULT,
                "subtype": subtype,
                "text": None if is_error else text,
                "usage": usage,
                "stop_reason": stop
                if stop is not None
                else (None if is_error else self._last_stop_reason),
                "denials": denials or None,
                "error": error,
                "resume_id": None if self.session_not_found else session_id,
                "data": data,
                "raw": ev,
            },
        )
        self._last_stop_reason = None
        self._stream_tools.clear()
        self._forget_older_turns()
        return result

    def _forget_older_turns(self) -> None:
        """At a result: keep the ids this turn and the next can still refer to, nothing older."""
        self._previous_calls = self._observed_calls
        self._observed_calls = set()
        if not self._tasks:
            # Nothing runs in the background: only this turn's names are kept.
            self._previous_tool_names = self._tool_names
            self._tool_names = {}
            return
        running = {
            _str(task.get("tool_use_id")) or self._task_tools.get(task_id)
            for task_id, task in self._tasks.items()
        }
        kept = {
            tool_id: name
            for tool_id, name in self._previous_tool_names.items()
            if tool_id in running
        }
        kept.update(self._tool_names)
        self._previous_tool_names = kept
        self._tool_names = {}

    def _tool_name(self, tool_id: str | None) -> str | None:
        if tool_id is None:
            return None
        name = self._tool_names.get(tool_id)
        return name if name is not None else self._previous_tool_names.get(tool_id)

    @property
    def remembered_ids(self) -> int:
        """How many model-call and tool-use ids the translator holds (bounded by two turns'
        worth and the running background tasks, however long the session)."""
        return (
            len(self._observed_calls)
            + len(self._previous_calls)
            + len(self._tool_names)
            + len(self._previous_tool_names)
        )

    def _turn_usage(self, ev: Json, since_last: Json | None, context: Json) -> Usage:
        """The turn's usage (with ``context``, its context fill) and its cost."""
        # A session total below zero is nonsense (a broken or hostile agent): not reported, and
        # not what the next result's cost is measured from.
        total_cost = cost_figure(ev.get("total_cost_usd"))
        previous = self._last_total_cost
        if total_cost is not None:
            self._last_total_cost = total_cost
        model = self.model or next(iter(since_last or {}), None)
        return turn_usage(
            ev,
            since_last,
            context,
            model=model,
            total_cost=total_cost,
            previous_total=previous,
            resumed=self.resumed,
        )
