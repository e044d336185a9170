"""The state of one ACP session as the translator sees it: ``session/update`` kinds and the prompt
turn, on top of the session's description, message blocks and tool calls.

* ``usage_update`` -> ``context_window`` (``used`` and ``size``, both source ``agent``; a ``used``
  of 0, which OpenCode reports after a cancelled or failed prompt, is "unknown"). Its ``cost`` is
  cumulative for the session: the turn's ``cost_usd`` is the difference from the value before
  the prompt.
* Plans, available commands, mode / config / session-info updates, notices, compaction and kinds
  this version does not know -> ``system`` with ``subtype`` = the ACP kind and the update in
  ``data`` (never dropped).
* ``session/prompt`` result -> ``result`` (stop reason, usage, this turn's cost, the session
  total in ``data["session_cost_usd"]``); a JSON-RPC error -> a failed ``result`` with
  ``error.code`` = ``data.errorName`` or the JSON-RPC code.
"""

from __future__ import annotations

from typing import Any, Final, cast

from pydantic import ValidationError

from ..._vocabulary.jsonvalues import as_dict as _dict
from ..._vocabulary.jsonvalues import as_object
from ..._vocabulary.messages import ErrorInfo, Message, MessageType, Usage, assemble
from ..._vocabulary.prices import account_usage, estimate_cost
from ._message_blocks import BlockKind
from ._meta import quota_usage, side_usage, system_error
from ._schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    PromptResponse,
    SessionConfigOption,
    ToolCallProgress,
    ToolCallStart,
    UnknownUpdate,
    UsageUpdate,
    UserMessageChunk,
    parse_session_notification,
    to_wire,
)
from ._schema.wire import (
    TEXT_CHUNK_TAGS,
    TOOL_CALL_TAGS,
    WireCommandsUpdate,
    WireTextChunk,
    WireToolCall,
    WireUpdate,
    WireUsageUpdate,
)
from ._session_state import not_found
from ._tool_calls import ToolCalls
from ._usage import prompt_usage, usage_of, usage_of_quota

__all__ = ["AcpState"]

# Message kinds as module constants: an enum's attribute look-up costs more than a global's.
_RESULT = MessageType.RESULT
_SYSTEM = MessageType.SYSTEM


#: The block each text chunk kind streams into.
_CHUNK_KINDS: Final[dict[str, BlockKind]] = {
    "agent_message_chunk": "text",
    "agent_thought_chunk": "thinking",
    "user_message_chunk": "user",
}


class AcpState(ToolCalls):
    """The state of one ACP session as seen on the wire; every method returns the messages
    that its event produces. Pure: no I/O, no clock."""

    # -- session/update ------------------------------------------------------------------

    def update(self, params: Any) -> list[Message]:
        try:
            note = parse_session_notification(params)
        except ValidationError:
            return [
                self.error("session/update without a session id", "protocol", {"params": params})
            ]
        return self._updated(self._update(note.update, (_dict(params) or {}).get("update")))

    def wire_update(self, update: WireUpdate, raw: dict[str, Any]) -> list[Message]:
        """:meth:`update` of an update the wire schema validated from the line's bytes
        (:mod:`._schema.wire`): the same messages, made from its values without validating
        them again. ``raw`` is the update object as the agent wrote it."""
        kind = update["session_update"]
        if kind in TEXT_CHUNK_TAGS:
            chunk = cast("WireTextChunk", update)
            out = self._text_chunk(
                _CHUNK_KINDS[kind],
                chunk["content"]["text"],
                chunk.get("messageId"),
                chunk.get("_meta"),
                raw,
            )
        elif kind == "usage_update":
            usage = cast("WireUsageUpdate", update)
            cost = usage.get("cost")
            out = self._usage_values(
                usage["used"],
                usage["size"],
                None if cost is None else (cost["amount"], cost["currency"]),
                raw,
            )
        elif kind in TOOL_CALL_TAGS:
            call = cast("WireToolCall", update)
            if kind == "tool_call":
                out, tool = self._tool_started(call["toolCallId"])
            else:
                out, tool = self._tool_updated(call["toolCallId"])
            self._merge_values(
                tool,
                title=call.get("title"),
                kind=call.get("kind"),
                status=call.get("status"),
                raw_input=call.get("rawInput"),
                raw_output=call.get("rawOutput"),
                content=call.get("content"),
                locations=call.get("locations"),
                name=call.get("name"),
                meta=call.get("_meta"),
            )
            out.extend(self._progress(tool, raw))
        else:
            # The commands as their models dump them to the wire (see WireCommand), taken as
            # they are.
            listed = cast("WireCommandsUpdate", update).get("availableCommands", [])
            self.commands = frozenset(c["name"].lstrip("/") for c in listed)
            out = [
                self._msg(
                    type=_SYSTEM,
                    subtype="available_commands_update",
                    data={"availableCommands": listed},
                    raw=raw,
                )
            ]
        return self._updated(out)

    def _updated(self, out: list[Message]) -> list[Message]:
        if self.history_after_load:  # only then is the time of each update wanted
            self.saw_update()
        if not self.in_prompt and not self.replaying:
            # Said outside any prompt (between turns): complete at once, so that nothing of it
            # is carried into the next turn's blocks.
            out.extend(self._flush_all())
        return out

    def _update(self, update: Any, raw: Any) -> list[Message]:
        if isinstance(update, AgentMessageChunk):
            if self.system_error is not None:
                text = getattr(update.content, "text", None)
                if isinstance(text, str):
                    self.system_error.append(text)
            return self._chunk("text", update, raw)
        if isinstance(update, AgentThoughtChunk):
            return self._chunk("thinking", update, raw)
        if isinstance(update, UserMessageChunk):
            return self._chunk("user", update, raw)
        if isinstance(update, ToolCallStart):
            return self._tool_call(update, raw)
        if isinstance(update, ToolCallProgress):
            return self._tool_update(update, raw)
        if isinstance(update, UsageUpdate):
            return self._usage(update, raw)
        if isinstance(update, ConfigOptionUpdate):
            self.config_options: list[SessionConfigOption] = list(update.config_options)
            self.tracker.set_model(self.model)
        elif isinstance(update, CurrentModeUpdate):
            self.mode_set(update.current_mode_id)
        elif isinstance(update, AvailableCommandsUpdate):
            self.commands: frozenset[str] = frozenset(
                c.name.lstrip("/") for c in update.available_commands
            )
        if isinstance(update, UnknownUpdate):
            subtype = update.session_update or "unknown"
            data = dict(update.raw)
            if update.error is not None:
                data["validation_error"] = update.error
        else:
            subtype = str(getattr(update, "session_update", "unknown"))
            data = to_wire(update)
        data.pop("sessionUpdate", None)
        if subtype == "session_info_update" and self.in_prompt and system_error(data):
            self.system_error = []  # what the agent says next is the error's words
        return [self._msg(type=_SYSTEM, subtype=subtype, data=data, raw=raw)]

    # -- usage -----------------------------------------------------------------------------

    def _usage(self, update: UsageUpdate, raw: Any) -> list[Message]:
        cost = update.cost
        return self._usage_values(
            update.used,
            update.size,
            None if cost is None else (cost.amount, cost.currency),
            raw,
        )

    def _usage_values(
        self, used: int, size: int, cost: tuple[float, str] | None, raw: Any
    ) -> list[Message]:
        """A ``usage_update`` (validated: the model's or the wire schema's values); ``cost`` is
        its amount and currency."""
        if cost is not None:
            amount, currency = cost
            self.cost_currency: str | None = currency
            if currency.upper() == "USD":
                self.session_cost: float | None = round(amount, 9)
        message = self.tracker.observe_reported(
            used if used > 0 else None, size if size > 0 else None, raw=raw
        )
        if self.replaying:
            message = message.model_copy(update={"replayed": True})
        return [message]

    # -- the prompt turn -----------------------------------------------------------------

    def prompt_started(self, text: str | None = None) -> list[Message]:
        out: list[Message] = []
        if self.replaying:  # the history an agent replayed after its load result ends here
            out.extend(self._flush_all())
            self.replaying = False
        out.extend(self._init_once())
        self.in_prompt = True
        self.call_usage: list[dict[str, Any]] = []
        self.system_error = None
        self.cancel_requested = False
        #: The prompt runs the agent's ``compact`` command.
        self._compacting = text is not None and text.strip() == "/compact"
        #: Tool calls seen before this prompt (a prompt that starts none makes one model call).
        self._tools_before = len(self.tools)
        if self._cost_late:
            # The running cost had not moved when the last turn ended: what it moves by now
            # is that turn's and this one's together, so this turn's is not derived from it.
            self._cost_base = None
            self._cost_late = False
        elif self.session_cost is not None:
            self._cost_base = self.session_cost
        else:
            self._cost_base = 0.0 if self._fresh else None
        return out

    def _turn_data(self) -> tuple[float | None, dict[str, Any]]:
        data: dict[str, Any] = {}
        cost: float | None = None
        if self.session_cost is not None:
            data["session_cost_usd"] = self.session_cost
            if self._cost_base is not None:
                cost = round(self.session_cost - self._cost_base, 9)
        elif self.cost_currency is not None:
            data["cost_currency"] = self.cost_currency
        if self.model is not None:
            data["model"] = self.model
        return cost, data

    def prompt_finished(self, result: Any) -> list[Message]:
        out = self._flush_all()
        fields = _dict(result) or {}
        try:
            response = PromptResponse.model_validate(fields)
            stop_reason: str | None = response.stop_reason
            reported = response.usage
        except ValidationError:
            stop = fields.get("stopReason")
            stop_reason = stop if isinstance(stop, str) else None
            reported = None
        reported = prompt_usage(reported, self.call_usage)
        cost, data = self._turn_data()
        moved = cost != 0.0
        if reported is not None:
            cost = self._side_calls_apart(fields.get("_meta"), cost, data)
        quota = quota_usage(fields.get("_meta")) if reported is None else None
        turn_usage = usage_of(reported, cost)
        spent = _tokens(turn_usage) or "side_usage" in data
        if not moved and spent and self.session_cost:
            # Tokens were spent but the running cost, which has counted earlier ones, has not
            # moved (claude-agent-acp reports a compaction's cost with the next prompt): not
            # known for this turn, nor for the next, which differences from here. (A running
            # cost that never moved is a free model's: its zero stands.)
            cost = None
            self._cost_late = True
            turn_usage = usage_of(reported, None)
        if self._compacting and turn_usage is not None and not _tokens(turn_usage) and spent:
            # The compaction's calls are only in the side calls' rows, with whatever else the
            # agent called meanwhile (a title): the turn's own tokens are not known.
            turn_usage = Usage(cost_usd=turn_usage.cost_usd)
            data["usage_scope"] = "side_calls"
        if quota is not None:
            # Figures without the convention's split: as they came, in fields of their own.
            data["quota_token_count"] = quota
            turn_usage = usage_of_quota(quota, turn_usage)
        scope = self.usage_scope
        if scope == "last_call" and self._one_call(stop_reason):
            # The agent reports the last model call, and the prompt made only that one: its
            # tokens are the prompt's, of the scope of the prompt's cost.
            scope = "prompt"
        if scope == "last_call" and reported is not None and turn_usage is not None:
            # The tokens are the last model call's, the cost the whole prompt's: one usage
            # holds one scope, the turn's (its cost; its tokens are not known). The call's
            # figures are kept apart, never priced.
            data["last_call_usage"] = turn_usage.model_dump(
                mode="json", exclude_none=True, exclude={"cost_usd"}
            ) | {"usage_source": "last_call"}
            turn_usage = Usage(cost_usd=turn_usage.cost_usd)
        usage = account_usage(
            turn_usage,
            model=self.model,
            tokens="reported",
            # A session's running cost differenced; with no cost, an estimate only from the
            # whole prompt's tokens (not from an agent's last call alone).
            cost="derived"
            if cost is not None
            else (self._estimable if scope == "last_call" else "reported"),
        )
        if reported is not None:
            data.setdefault("usage_scope", scope)
            if reported.total_tokens is not None:
                data["total_tokens"] = reported.total_tokens
        if self.cancel_requested and stop_reason not in (None, "cancelled", "end_turn"):
            # The client cancelled and the agent stopped on something else on the way (Gemini
            # CLI's loop detection answers max_turn_requests): the prompt was cancelled.
            data["agent_stop_reason"] = stop_reason
            stop_reason = "cancelled"
        failure: ErrorInfo | None = None
        if self.system_error is not None and stop_reason == "end_turn":
            # codex-acp ends a failed turn as if it had answered: the turn failed.
            words = "".join(self.system_error).strip()[:2000]
            failure = ErrorInfo(
                message=words or "the agent reported a system error", code="api_error", fatal=True
            )
            stop_reason = "error"
        self._end_prompt()
        # A validated stop reason and usage, a dict built here: assembled, not validated again.
        out.append(
            assemble(
                Message,
                {
                    "type": _RESULT,
                    "stop_reason": stop_reason,
                    "usage": usage,
                    "resume_id": self.session_id,
                    "error": failure,
                    "data": data or None,
                    "raw": result,
                },
            )
        )
        return out

    def _one_call(self, stop_reason: str | None) -> bool:
        """Whether the prompt made one model call: it answered (not cancelled, not stopped on
        the way) and started no tool call (a tool's result is sent in another call)."""
        return (
            stop_reason == "end_turn"
            and not self.cancel_requested
            and not self._compacting
            and len(self.tools) == self._tools_before
        )

    def _side_calls_apart(
        self, meta: Any, cost: float | None, data: dict[str, Any]
    ) -> float | None:
        """Put the side calls' tokens (and their cost at catalog prices) in
        ``data["side_usage"]`` and return the turn's cost without them (the session's running
        cost counts them; the turn's usage does not)."""
        side = side_usage(meta, self.model)
        if not side:
            return cost
        total = Usage()
        side_cost: float | None = 0.0
        for model, counts in side:
            usage = Usage(
                input_tokens=counts.get("input_tokens"),
                cache_read_tokens=counts.get("cache_read_tokens"),
                cache_write_tokens=counts.get("cache_write_tokens"),
                output_tokens=counts.get("output_tokens"),
            )
            total = total + usage
            priced = estimate_cost(usage, model or self.model)
            side_cost = None if priced is None or side_cost is None else side_cost + priced
        if side_cost is not None:
            side_cost = round(side_cost, 9)
            if cost is not None:
                cost = round(max(0.0, cost - side_cost), 9)
        total = total.model_copy(
            update={
                "cost_usd": side_cost,
                "usage_source": "derived",
                "cost_source": "unavailable" if side_cost is None else "estimated",
            }
        )
        data["side_usage"] = total.model_dump(mode="json", exclude_none=True)
        return cost

    def prompt_failed(self, code: int, message: str, data: Any) -> list[Message]:
        out = self._flush_all()
        extra = _dict(data) or {}
        name = extra.get("errorName")
        if isinstance(name, str) and name:
            error_code = name
        elif not_found(code, message):
            error_code = "session_not_found"
        else:
            error_code = str(code)
        cost, turn_data = self._turn_data()
        turn_data["jsonrpc_error"] = {"code": code, "message": message, "data": data}
        self._end_prompt()
        out.append(
            Message(
                type=_RESULT,
                usage=None
                if cost is None
                else account_usage(Usage(cost_usd=cost), model=self.model, cost="derived"),
                error=ErrorInfo(
                    message=message,
                    code=error_code,
                    fatal=True,
                    data=as_object(data),
                ),
                resume_id=self.session_id,
                data=turn_data,
            )
        )
        return out

    def _end_prompt(self) -> None:
        self.in_prompt: bool = False
        if self.session_cost is not None:
            self._cost_base = self.session_cost

    def finish(self) -> list[Message]:
        """Complete open blocks and announce pending calls (end of a stream or a turn)."""
        return [*self._flush_all(), *self._init_once()]


def _tokens(usage: Usage | None) -> int:
    """The tokens a usage holds (0 for none)."""
    if usage is None:
        return 0
    return sum(
        n or 0
        for n in (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
        )
    )
