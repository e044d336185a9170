"""Claude Code stream-json events to normalized messages (pure; used live and by replay).

Every event type of the pinned CLI is mapped; nothing is dropped silently except pure stream
framing (``content_block_start``/``_stop`` of text and thinking blocks, ``signature_delta``,
plain ``message_stop``, ``ping``), which carries nothing the complete events do not repeat.

Usage and cost of a turn come from the per-result fields: ``model_usage_since_last_result``
(tokens and ``costUSD`` of this result only), else ``result.usage`` and the difference of the
session-cumulative ``total_cost_usd``. ``modelUsage`` and ``total_cost_usd`` accumulate over the
whole session, across ``--resume`` too, and are never used as a turn's figures.

Context readings: one per main-thread model call (``message.id``), from the call's input + cache
tokens (``message_start`` in partial mode, else the first ``assistant`` event of the call). The
window size comes from the catalog until a result reports ``modelUsage.<m>.contextWindow``,
which is remembered for the rest of the session; a refreshed reading is emitted before that
result so the turn's last reading carries the authoritative size.

A line is read in one pass where it can be (:meth:`ClaudeTranslator.feed_line`): parsed, and
checked against the CLI's wire schema (:mod:`._wire`) in pydantic-core; the messages are built
from the values that passed, none validated again. An event the schema does not take is read
value by value (:mod:`._lenient`), as every event was before; both readings make the same
messages of any event the schema takes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from ..._vocabulary.messages import (
    InitMeta,
    Message,
    MessageType,
    PermissionDenial,
    ToolCall,
    Usage,
    assemble,
)
from ..._vocabulary.prices import account_usage
from ..._wire.framing import JsonProblem, decode_json_line
from ._lenient import (
    SESSION_NOT_FOUND,
    SYNTHETIC_MODEL,
    Json,
    LenientTranslator,
)

__all__ = ["SESSION_NOT_FOUND", "ClaudeTranslator"]

_TEXT_DELTA = MessageType.TEXT_DELTA
_THINKING_DELTA = MessageType.THINKING_DELTA
_NO_TOOL: tuple[None, None] = (None, None)
_TOOL_BLOCKS = ("tool_use", "server_tool_use")
#: ``system`` subtypes whose events the translator reads beyond passing them on.
_SYSTEM_READ = frozenset(
    {
        "api_retry",
        "compact_boundary",
        "background_tasks_changed",
        "task_started",
        "permission_denied",
    }
)


def _message(
    kind: MessageType, text: str, message_id: str | None, parent: str | None, raw: Json
) -> Message:
    """A text or thinking message (a block or a delta) of values the schema checked."""
    return assemble(
        Message,
        {
            "type": kind,
            "text": text,
            "message_id": message_id,
            "parent_tool_use_id": parent,
            "raw": raw,
        },
    )


def _summed(per_model: dict[str, Json]) -> Usage:
    """The summed usage of per-model entries that passed the schema (at least one), as the
    lenient reading sums them: each a ``Usage`` added to the total as ``Usage.__add__`` does."""
    inp = out = read = write = thinking = None
    cost: float | None = None
    for e in per_model.values():
        inp = _sum(inp, e.get("inputTokens"))
        out = _sum(out, e.get("outputTokens"))
        read = _sum(read, e.get("cacheReadInputTokens"))
        write = _sum(write, e.get("cacheCreationInputTokens"))
        thinking = _sum(thinking, e.get("thinkingTokens"))
        c: float | None = e.get("costUSD")
        cost = c if cost is None else cost if c is None else round(cost + c, 12)
    return assemble(
        Usage,
        {
            "input_tokens": inp,
            "output_tokens": out,
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "thinking_tokens": thinking,
            "cost_usd": cost,
            "context_used_tokens": None,
            "context_size_tokens": None,
            "usage_source": None,
            "cost_source": None,
        },
    )


def _sum(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


class ClaudeTranslator(LenientTranslator):
    """Claude Code's translator, stateful for one session (the keyword arguments are
    :class:`~._lenient.LenientTranslator`'s). Replay and the live engine feed it lines
    (:meth:`feed_line`) or decoded events (:meth:`feed_wire`); :meth:`feed` and
    :meth:`feed_decoded` read every event value by value."""

    # Declared again here, as the base declares them: this class sets them too.
    session_id: str | None
    model: str | None
    session_not_found: str | None

    @cached_property
    def _view(self) -> Callable[[Any], Json]:
        """The wire schema's validation: its module is loaded and the schema compiled on the
        first event of the first session (importing the engine does neither)."""
        from ._wire import wire_schema

        return wire_schema().validator.validate_python

    def feed_line(self, line: bytes) -> list[Message] | None:
        """The messages of one framed line: decoded as :func:`decode_json_line` decodes it and
        read as :meth:`feed_wire` reads it; ``None`` for a line that is not JSON (the caller's
        decoder says what it is)."""
        ev = decode_json_line(line)
        if isinstance(ev, JsonProblem):
            return None
        return self.feed_wire(ev)

    def feed_wire(self, event: Any) -> list[Message]:
        """:meth:`feed_decoded` of an event checked against Claude Code's wire schema
        (:mod:`._wire`) first: an event it takes is read from the values that passed, none
        validated again; any other event is read the lenient way. What comes out never depends
        on the path."""
        try:
            view = self._view(event)
        except ValidationError:
            return self.feed_decoded(event)
        return _READERS[view["type"]](self, view, event)

    # -- events that passed the wire schema ---------------------------------------------------
    # ``view`` is the event as the schema validated it (the fields read, with their types), ``ev``
    # the event itself (the message's ``raw``, and the values passed on as they are). Each method
    # makes exactly the messages its lenient counterpart makes of such an event; where that one
    # would take a branch the view does not cover, it is called instead.

    def _wire_stream_event(self, view: Json, ev: Json) -> list[Message]:
        event: Json = view["event"]
        etype = event["type"]
        parent: str | None = view.get("parent_tool_use_id")
        message_id: str | None = view.get("api_message_id")
        if etype == "content_block_delta":
            delta: Json = event["delta"]
            dtype = delta["type"]
            if dtype == "text_delta":
                return [_message(_TEXT_DELTA, delta["text"], message_id, parent, ev)]
            if dtype == "thinking_delta":
                return [_message(_THINKING_DELTA, delta["thinking"], message_id, parent, ev)]
            if dtype == "input_json_delta":
                tool_id, name = self._stream_tools.get((message_id or "", event["index"]), _NO_TOOL)
                return [
                    assemble(
                        Message,
                        {
                            "type": MessageType.TOOL_USE_DELTA,
                            "text": delta["partial_json"],
                            "tool": assemble(ToolCall, {"id": tool_id, "name": name}),
                            "message_id": message_id,
                            "parent_tool_use_id": parent,
                            "raw": ev,
                        },
                    )
                ]
            return []  # signature_delta
        if etype == "content_block_start":
            block: Json = event["content_block"]
            if block["type"] not in _TOOL_BLOCKS:
                return []
            tool_id, name = block.get("id"), block.get("name")
            self._stream_tools[(message_id or "", event["index"])] = (tool_id, name)
            return [
                assemble(
                    Message,
                    {
                        "type": MessageType.TOOL_USE_DELTA,
                        "text": "",
                        "tool": assemble(ToolCall, {"id": tool_id, "name": name}),
                        "message_id": message_id,
                        "parent_tool_use_id": parent,
                        "raw": ev,
                    },
                )
            ]
        if etype == "message_start":
            message: Json = event["message"]
            mid: str | None = message["id"] or message_id
            if parent is None and mid is not None:
                reading = self._wire_observe_call(mid, message["usage"], ev)
                return [] if reading is None else [reading]
            return []
        if etype == "message_delta":
            stop: str | None = event["delta"].get("stop_reason")
            if parent is None and stop is not None:
                self._last_stop_reason = stop
            usage: Json | None = event.get("usage")
            output = thinking = None
            if usage is not None:
                output = usage.get("output_tokens")
                details: Json | None = usage.get("output_tokens_details")
                thinking = details.get("thinking_tokens") if details else None
            per_call = assemble(Usage, {"output_tokens": output, "thinking_tokens": thinking})
            if message_id is not None:
                self._call_output[message_id] = per_call
            return [
                assemble(
                    Message,
                    {
                        "type": MessageType.SYSTEM,
                        "subtype": "message_delta",
                        "stop_reason": stop,
                        "usage": None if output is None and thinking is None else per_call,
                        "message_id": message_id,
                        "parent_tool_use_id": parent,
                        "raw": ev,
                    },
                )
            ]
        # content_block_stop, ping, message_stop: only an interrupted call's stop says more.
        if etype == "message_stop" and ev["event"].get("abandoned_blocks") is not None:
            return self._stream_event(ev)
        return []

    def _wire_observe_call(self, message_id: str, usage: Json, raw: Json) -> Message | None:
        """:meth:`_observe_call` of a call whose usage passed the schema."""
        if message_id in self._observed_calls or message_id in self._previous_calls:
            return None
        self._observed_calls.add(message_id)
        prompt = assemble(
            Usage,
            {
                "input_tokens": usage.get("input_tokens"),
                "cache_read_tokens": usage.get("cache_read_input_tokens"),
                "cache_write_tokens": usage.get("cache_creation_input_tokens"),
            },
        )
        return self.tracker.observe_call(prompt, raw=raw)

    def _wire_assistant(self, view: Json, ev: Json) -> list[Message]:
        message: Json = view["message"]
        if message["model"] == SYNTHETIC_MODEL or ev.get("is_api_error_message") is True:
            return self._assistant(ev)
        parent: str | None = view.get("parent_tool_use_id")
        message_id: str = message["id"]
        out: list[Message] = []
        if parent is None:
            reading = self._wire_observe_call(message_id, message["usage"], ev)
            if reading is not None:
                out.append(reading)
        blocks: list[Json] = ev["message"]["content"]
        for index, b in enumerate(message["content"]):
            btype = b["type"]
            if btype == "text":
                out.append(_message(MessageType.TEXT, b["text"], message_id, parent, ev))
            elif btype == "thinking":
                out.append(_message(MessageType.THINKING, b["thinking"], message_id, parent, ev))
            else:
                tool_id: str = b["id"]
                name: str = b["name"]
                self._tool_names[tool_id] = name
                tool = {"id": tool_id, "name": name, "input": blocks[index].get("input")}
                out.append(
                    assemble(
                        Message,
                        {
                            "type": MessageType.TOOL_USE,
                            "tool": assemble(ToolCall, tool),
                            "message_id": message_id,
                            "parent_tool_use_id": parent,
                            "raw": ev,
                        },
                    )
                )
        return out

    def _wire_user(self, view: Json, ev: Json) -> list[Message]:
        parent: str | None = view.get("parent_tool_use_id")
        content: str | list[Json] = view["message"]["content"]
        replayed = ev.get("isReplay") is True
        out: list[Message] = []
        texts: list[str] = []
        if isinstance(content, str):
            texts.append(content)
        else:
            blocks: list[Json] = ev["message"]["content"]
            for index, b in enumerate(content):
                if b["type"] == "text":
                    texts.append(b["text"])
                    continue
                tool_id: str = b["tool_use_id"]
                tool = {
                    "id": tool_id,
                    "name": self._tool_name(tool_id),
                    "output": blocks[index].get("content"),
                    "is_error": b.get("is_error"),
                }
                out.append(
                    assemble(
                        Message,
                        {
                            "type": MessageType.TOOL_RESULT,
                            "tool": assemble(ToolCall, tool),
                            "parent_tool_use_id": parent,
                            "replayed": replayed,
                            "raw": ev,
                        },
                    )
                )
        if texts or not out:
            out.append(self._user_message(ev, texts, parent, replayed))
        return out

    def _wire_system(self, view: Json, ev: Json) -> list[Message]:
        subtype: str = view["subtype"]
        if subtype in _SYSTEM_READ or (subtype == "init" and self._tasks):
            return self._system(ev)
        if subtype != "init":
            data = ev.copy()  # without the two keys the schema found
            del data["type"], data["subtype"]
            return [
                assemble(
                    Message,
                    {
                        "type": MessageType.SYSTEM,
                        "subtype": subtype or None,
                        "data": data,
                        "raw": ev,
                    },
                )
            ]
        self.saw_init = True
        session_id: str | None = view.get("session_id")
        if session_id:
            self.session_id = session_id
        model: str | None = view.get("model")
        if model:
            self.model = model
            self.tracker.set_model(model)
        tools: list[str] | None = view.get("tools")
        init = assemble(
            InitMeta,
            {
                "model": model,
                "agent_name": "claude-code",
                "agent_version": view.get("claude_code_version"),
                "session_id": session_id,
                "cwd": view.get("cwd"),
                "tools": tuple(tools) if tools else None,
                "permission_mode": view.get("permissionMode"),
            },
        )
        return [
            assemble(
                Message,
                {
                    "type": MessageType.INIT,
                    "init": init,
                    "process": self.process,
                    "resume_id": session_id,
                    "raw": ev,
                },
            )
        ]

    def _wire_result(self, view: Json, ev: Json) -> list[Message]:
        out: list[Message] = []
        subtype: str | None = view.get("subtype")
        is_error = ev.get("is_error") is True or (subtype is not None and subtype != "success")
        model_usage: dict[str, Json] = view.get("modelUsage") or {}
        since_last: dict[str, Json] | None = view.get("model_usage_since_last_result")
        self._report_window(out, model_usage, since_last)
        usage = self._with_context(self._wire_turn_usage(view, since_last))
        text: str | None = view.get("result")
        terminal: str | None = view.get("terminal_reason")
        error = (
            self._result_error(
                subtype,
                terminal,
                text,
                view.get("errors") or [],
                view.get("api_error_status"),
            )
            if is_error
            else None
        )
        denials: tuple[PermissionDenial, ...] = ()
        if view.get("permission_denials"):
            raw_denials: list[Json] = ev["permission_denials"]
            denials = tuple(
                assemble(
                    PermissionDenial,
                    {
                        "tool_name": d.get("tool_name"),
                        "tool_use_id": d.get("tool_use_id"),
                        "input": raw_denials[index].get("tool_input"),
                    },
                )
                for index, d in enumerate(view["permission_denials"])
            )
        out.append(
            self._result_message(
                ev,
                subtype=subtype,
                is_error=is_error,
                text=text,
                terminal=terminal,
                stop=view.get("stop_reason"),
                session_id=view.get("session_id"),
                model_usage=model_usage,
                usage=usage,
                denials=denials,
                error=error,
            )
        )
        return out

    def _wire_turn_usage(self, view: Json, since_last: dict[str, Json] | None) -> Usage:
        """:meth:`_turn_usage` of a result that passed the schema."""
        total_cost: float | None = view.get("total_cost_usd")
        previous = self._last_total_cost
        if total_cost is not None:
            self._last_total_cost = total_cost
        model = self.model or next(iter(since_last or {}), None)
        if since_last:
            return account_usage(_summed(since_last), model=model)
        call: Json | None = view.get("usage")
        if call is None:
            usage = assemble(Usage, {})
        else:
            details: Json | None = call.get("output_tokens_details")
            usage = assemble(
                Usage,
                {
                    "input_tokens": call.get("input_tokens"),
                    "output_tokens": call.get("output_tokens"),
                    "cache_read_tokens": call.get("cache_read_input_tokens"),
                    "cache_write_tokens": call.get("cache_creation_input_tokens"),
                    "thinking_tokens": details.get("thinking_tokens") if details else None,
                },
            )
        return self._costed(usage, total_cost, previous, model)


#: The reading of each event kind the schema takes.
_READERS: dict[str, Callable[[ClaudeTranslator, Json, Json], list[Message]]] = {
    "stream_event": ClaudeTranslator._wire_stream_event,  # pyright: ignore[reportPrivateUsage]
    "assistant": ClaudeTranslator._wire_assistant,  # pyright: ignore[reportPrivateUsage]
    "user": ClaudeTranslator._wire_user,  # pyright: ignore[reportPrivateUsage]
    "system": ClaudeTranslator._wire_system,  # pyright: ignore[reportPrivateUsage]
    "result": ClaudeTranslator._wire_result,  # pyright: ignore[reportPrivateUsage]
}
