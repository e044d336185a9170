"""Translate ``opencode run --format json`` events into normalized messages.

One ``opencode run`` process is one turn: every line is a complete event (there are no streaming
deltas) and a turn is **all steps until the process exits**. Each LLM call is one step
(``step_start`` ... ``step_finish``); the turn's ``result`` is synthesized by :meth:`finish` from
the steps: usage and cost summed, the stop reason of the last step, the first error event.

Usage convention (see :mod:`agentrun._vocabulary.messages`): OpenCode's ``tokens.input``
already excludes
cached tokens, so it is used as is; its ``tokens.output`` *excludes* reasoning, ours includes it,
so ``output_tokens = output + reasoning`` and ``thinking_tokens = reasoning``.

The translator is pure and serves both the live engine and ``agentrun replay --engine opencode``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import Unpack

from ..._bases.translator import AgentTranslator, AgentTranslatorOptions
from ..._vocabulary.jsonvalues import as_float as _float
from ..._vocabulary.jsonvalues import as_int as _int
from ..._vocabulary.messages import (
    ErrorInfo,
    Message,
    MessageType,
    PermissionDenial,
    ToolCall,
    Usage,
    assemble,
    reported_figure,
)
from ..._vocabulary.prices import account_usage

__all__ = [
    "AGENT_NAME",
    "REJECTED_PERMISSION",
    "STOP_REASONS",
    "OpenCodeTranslator",
    "step_usage",
]

AGENT_NAME = "opencode"

#: OpenCode's ``step_finish.part.reason`` -> our ``stop_reason``.
STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "tool-calls": "tool_use",
    "length": "max_tokens",
    "content-filter": "refusal",
}

# Message kinds as module constants: an enum's attribute look-up costs more than a global's.
_ERROR = MessageType.ERROR
_RESULT = MessageType.RESULT
_SYSTEM = MessageType.SYSTEM
_TEXT = MessageType.TEXT
_THINKING = MessageType.THINKING
_TOOL_RESULT = MessageType.TOOL_RESULT
_TOOL_USE = MessageType.TOOL_USE

#: The tool error text OpenCode uses when a permission was auto-rejected (run mode cannot ask).
REJECTED_PERMISSION = "The user rejected permission to use this specific tool call."


# The helpers below are called for every value of every event: each is one function, not a
# call of a shared accessor inside another.


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}  # pyright: ignore[reportUnknownVariableType]


def _str(value: object) -> str | None:
    """A non-empty string (OpenCode sends empty strings for absent values)."""
    return value if isinstance(value, str) and value else None


_EMPTY: dict[str, Any] = {}


def step_usage(tokens: Mapping[str, Any], cost: object = None) -> Usage:
    """Our :class:`Usage` of one step from ``step_finish.part.tokens`` (and its ``cost``)."""
    value = tokens.get("cache")
    cache: dict[str, Any] = value if isinstance(value, dict) else _EMPTY  # pyright: ignore[reportUnknownVariableType]
    read = reported_figure(_int(cache.get("read")))
    write = reported_figure(_int(cache.get("write")))
    inp = reported_figure(_int(tokens.get("input")))
    output = _int(tokens.get("output"))
    reasoning = _int(tokens.get("reasoning"))
    if output is not None or reasoning is not None:
        total_output: int | None = (output or 0) + (reasoning or 0)
    else:
        total_output = None
    # Each figure as ``Usage``'s rule reports it (usages are assembled, not validated).
    return assemble(
        Usage,
        {
            "input_tokens": inp,
            "output_tokens": reported_figure(total_output),
            "cache_read_tokens": read,
            "cache_write_tokens": write,
            "thinking_tokens": reported_figure(reasoning),
            "cost_usd": reported_figure(cost if type(cost) is float else _float(cost)),
        },
    )


class OpenCodeTranslator(AgentTranslator):
    """Turns the events of one ``opencode run`` process into messages.

    Live, the engine makes one translator per turn (they share the session's
    :class:`ContextTracker`) and calls :meth:`start` first, which returns the turn's ``init``
    message. Without :meth:`start` (replay) the ``init`` message is made from the first event.
    :meth:`finish` synthesizes the turn's ``result``: only when at least one step finished or an
    error event arrived, so a stream without either ends without a result.
    """

    agent_name = AGENT_NAME

    def __init__(self, **options: Unpack[AgentTranslatorOptions]) -> None:
        super().__init__(**options)
        #: The session id seen in the events (``ses_...``).
        self.session_id: str | None = None
        self.steps: int = 0
        self.usage: Usage | None = None
        self.last_reason: str | None = None
        self.errors: list[ErrorInfo] = []
        self.denials: list[PermissionDenial] = []
        self._finished = False
        self._message_id: str | None = None

    # -- events ----------------------------------------------------------------------------

    def _feed_event(self, ev: dict[str, Any]) -> list[Message]:
        session_id = ev.get("sessionID")
        if self.session_id is None and isinstance(session_id, str) and session_id:
            self.session_id = session_id
        init = None if self._init_sent else self._init(self.session_id, raw=ev)
        kind = ev.get("type")
        value = ev.get("part")
        part: dict[str, Any] = value if isinstance(value, dict) else {}  # pyright: ignore[reportUnknownVariableType]
        # Each part returns a list of its own: the init, when due, goes first.
        if kind == "step_start":
            out = self._step_start(ev, part)
        elif kind == "text":
            out = self._block(_TEXT, ev, part)
        elif kind == "step_finish":
            out = self._step_finish(ev, part)
        elif kind == "tool_use":
            out = self._tool(ev, part)
        elif kind == "reasoning":
            out = self._block(_THINKING, ev, part)
        elif kind == "error":
            out = self._error(ev)
        elif isinstance(kind, str) and kind:
            # A newer OpenCode's event kind: pass it through under its own type.
            out = [Message(type=kind, subtype=kind, data=ev, raw=ev)]
        else:
            out = [
                Message.error_message(
                    f"{AGENT_NAME}: event without a type", code="protocol", data=ev, raw=ev
                )
            ]
        if init is not None:
            out.insert(0, init)
        return out

    def _step_start(self, ev: dict[str, Any], part: dict[str, Any]) -> list[Message]:
        message_id = part.get("messageID")
        if isinstance(message_id, str) and message_id:
            self._message_id = message_id
            data: dict[str, Any] = {"step": self.steps + 1, "message_id": message_id}
        else:
            message_id = self._message_id
            data = {"step": self.steps + 1}
            if message_id is not None:
                data["message_id"] = message_id
        # Every value is already what validation returns (a checked string, a fresh dict).
        return [
            assemble(
                Message,
                {
                    "type": _SYSTEM,
                    "subtype": "step_start",
                    "message_id": message_id,
                    "data": data,
                    "raw": ev,
                },
            )
        ]

    def _block(self, kind: MessageType, ev: dict[str, Any], part: dict[str, Any]) -> list[Message]:
        text = part.get("text")
        if not isinstance(text, str):
            return []
        message_id = part.get("messageID")
        if not (isinstance(message_id, str) and message_id):
            message_id = self._message_id
        # Every value is already what validation returns (checked strings).
        return [
            assemble(Message, {"type": kind, "text": text, "message_id": message_id, "raw": ev})
        ]

    def _tool(self, ev: dict[str, Any], part: dict[str, Any]) -> list[Message]:
        # Every value is already what validation returns: checked strings, the agent's values
        # where any value goes (input, output, metadata), dicts made here.
        state = _dict(part.get("state"))
        call_id = _str(part.get("callID")) or _str(part.get("id"))
        name = _str(part.get("tool"))
        status = _str(state.get("status"))
        title = _str(state.get("title"))
        message_id = _str(part.get("messageID")) or self._message_id
        tool_input = state.get("input")
        use = assemble(
            Message,
            {
                "type": _TOOL_USE,
                "tool": assemble(
                    ToolCall, {"id": call_id, "name": name, "input": tool_input, "title": title}
                ),
                "message_id": message_id,
                "raw": ev,
            },
        )
        if status not in ("completed", "error"):
            # Run mode prints tools only once they ended; anything else has no result yet.
            return [use]
        is_error = status == "error"
        output = state.get("error") if is_error else state.get("output")
        data: dict[str, Any] = {}
        metadata = state.get("metadata")
        if metadata is not None:
            data["metadata"] = metadata
        exit_code = _dict(metadata).get("exit")
        if isinstance(exit_code, int) and not isinstance(exit_code, bool) and exit_code != 0:
            is_error = True  # the bash tool "completed" a command that failed
        timing = _dict(state.get("time"))
        if timing:
            data["time"] = timing
        denials: tuple[PermissionDenial, ...] | None = None
        if is_error and isinstance(output, str) and output.strip() == REJECTED_PERMISSION:
            denial = assemble(
                PermissionDenial,
                {"tool_name": name, "tool_use_id": call_id, "input": tool_input, "reason": output},
            )
            self.denials.append(denial)
            denials = (denial,)
        tool = {
            "id": call_id,
            "name": name,
            "output": output,
            "is_error": is_error,
            "title": title,
            "status": status,
        }
        result = assemble(
            Message,
            {
                "type": _TOOL_RESULT,
                "tool": assemble(ToolCall, tool),
                "message_id": message_id,
                "denials": denials,
                "data": data or None,
                "raw": ev,
            },
        )
        return [use, result]

    def _step_finish(self, ev: dict[str, Any], part: dict[str, Any]) -> list[Message]:
        self.steps += 1
        reason = _str(part.get("reason"))
        if reason is not None:
            self.last_reason = reason
        usage = step_usage(_dict(part.get("tokens")), part.get("cost"))
        self.usage = usage if self.usage is None else self.usage + usage
        reading = self.tracker.observe_call(usage, raw=ev)
        return [] if reading is None else [reading]

    def _error(self, ev: dict[str, Any]) -> list[Message]:
        error = _dict(ev.get("error"))
        data = _dict(error.get("data"))
        name = _str(error.get("name")) or "UnknownError"
        text = _str(data.get("message")) or _str(error.get("message")) or "unknown error"
        status = _int(data.get("statusCode"))
        # Every value is already what validation returns (checked strings and integers, the
        # agent's values where any value goes, dicts made here).
        info = assemble(ErrorInfo, {"message": text, "code": name, "status": status, "fatal": True})
        self.errors.append(info)
        extra: dict[str, Any] = {"name": name}
        for key in ("isRetryable", "responseBody", "ref"):
            if key in data:
                extra[key] = data[key]
        # What Message.error_message makes: the same text and code as the result's error, so a
        # summary keeps one record of it.
        shown = assemble(
            ErrorInfo, {"message": text, "code": name, "status": status, "fatal": False}
        )
        return [
            assemble(
                Message,
                {"type": _ERROR, "error": shown, "data": extra, "raw": ev},
            )
        ]

    @property
    def resume_id(self) -> str | None:
        """The session id the next turn continues."""
        return self.session_id

    # -- end of the process ----------------------------------------------------------------

    @property
    def has_outcome(self) -> bool:
        """A result can be synthesized: a step finished or an error was reported."""
        return self.steps > 0 or bool(self.errors)

    def finish(self, *, cancelled: bool = False) -> list[Message]:
        """The turn's ``result`` (once), or nothing when no step finished and no error came.

        ``cancelled``: the turn was interrupted; a ``result`` with ``stop_reason="cancelled"``
        is made in any case.
        """
        if self._finished:
            return []
        self._finished = True
        out: list[Message] = []
        if not self._init_sent:
            out.append(self._init())
        if not cancelled and not self.has_outcome:
            return out
        error = self.errors[0] if self.errors else None
        if cancelled:
            stop_reason = "cancelled"
        elif error is not None:
            stop_reason = "error"
        elif self.last_reason is not None:
            stop_reason = STOP_REASONS.get(self.last_reason, self.last_reason)
        else:
            stop_reason = None
        data: dict[str, Any] = {"steps": self.steps}
        if self.last_reason is not None:
            data["reason"] = self.last_reason
        if self.model:
            data["model"] = self.model
        if len(self.errors) > 1:
            data["errors"] = len(self.errors)
        # Every value is already what validation returns: strings the translator checked or
        # chose, the usage and errors it made, dicts and tuples made here.
        result = {
            "type": _RESULT,
            "subtype": "cancelled" if cancelled else ("error" if error else "success"),
            "usage": account_usage(self.usage, model=self.model),
            "stop_reason": stop_reason,
            "error": error,
            "denials": tuple(self.denials) if self.denials else None,
            "resume_id": self.session_id,
            "data": data,
        }
        out.append(assemble(Message, result))
        return out
