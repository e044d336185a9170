"""ACP wire traffic -> normalized messages, for the live engine and for replay alike.

:class:`AcpTranslator` reads one session's JSON-RPC traffic in both directions, as the live
engine sees it and as the recorder writes it: lines of ``{"dir": "send"|"recv", "msg": {...}}``
(``"stderr"`` lines are ignored), or bare JSON-RPC messages, which are taken as received from the
agent. The live engine feeds it every line it writes and reads, so a recorded session replays into
exactly the messages the live run produced (except the few the engine adds itself: unsupported
options, permission-callback failures, transport problems).

What becomes what:

* ``initialize`` result: agent name, version and capabilities (kept for ``init``).
* ``session/new`` / ``load`` / ``resume`` / ``fork`` result: the ``init`` message (``resume_id`` =
  the session id), sent with the first prompt so that it shows the model and mode the session
  options selected. Updates that arrive while ``session/load`` or ``session/fork`` is pending
  are the agent replaying history: they are marked ``replayed=True`` (never counted in a
  summary).
* ``agent_message_chunk`` -> ``text_delta`` per chunk, and one complete ``text`` per message
  once it ends (a chunk of another message or kind, a tool call, or the end of the turn).
  ``agent_thought_chunk`` likewise -> ``thinking_delta`` / ``thinking`` (OpenCode's thought
  ``messageId`` is a part id, ``prt_...``, kept as is). ``user_message_chunk`` (replay) ->
  a complete ``system`` message ``user_message`` with the text.
* ``tool_call`` -> ``tool_use``; ``tool_call_update`` with status ``completed`` / ``failed`` ->
  ``tool_result`` with the same id (``failed`` -> ``is_error``). Other updates of an announced
  call -> ``system`` ``tool_call_update`` with the update in ``data``. A ``tool_call`` whose
  ``rawInput`` is still a placeholder (empty, or only ``cwd`` as OpenCode sends it) is announced
  once its input arrives, its status moves past ``pending``, a permission request names it, or
  anything else is said (so ``tool_use`` carries the real input); a repeated ``tool_call`` with
  the same id (claude-code-acp) is merged into one call.
* ``usage_update`` -> ``context_window`` (``used`` and ``size``, both source ``agent``; a
  ``used`` of 0, which OpenCode reports after a cancelled or failed prompt, is "unknown"). Its
  ``cost`` is cumulative for the session: the turn's ``cost_usd`` is the difference from the
  value before the prompt.
* Plans, available commands, mode / config / session-info updates, notices, compaction and
  kinds this version does not know -> ``system`` with ``subtype`` = the ACP kind and the update
  in ``data`` (never dropped).
* ``session/request_permission`` and our answer -> ``system`` ``permission`` (outcome in
  ``data``), with ``denials`` when the answer was not an allow option.
* ``session/prompt`` result -> ``result`` (stop reason, usage, this turn's cost, the session
  total in ``data["session_cost_usd"]``); a JSON-RPC error -> a failed ``result`` with
  ``error.code`` = ``data.errorName`` or the JSON-RPC code.

Usage: ``inputTokens`` is non-cached input (as OpenCode reports it); ``outputTokens`` excludes
thought tokens (``totalTokens`` = input + output + thought + cached), so ``output_tokens`` =
``outputTokens + thoughtTokens`` (the library's convention). OpenCode reports only the last model
call of the prompt: ``data["usage_scope"]`` says ``"last_call"`` for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from pydantic import ValidationError

from ..._bases.translator import Translator
from ..._vocabulary.context import Catalog, ContextTracker
from ..._vocabulary.jsonvalues import as_dict as _dict
from ..._vocabulary.jsonvalues import as_object
from ..._vocabulary.messages import (
    ErrorInfo,
    InitMeta,
    Message,
    MessageType,
    PermissionDenial,
    ProcessMeta,
    ToolCall,
    Usage,
    UsageSource,
)
from ..._vocabulary.prices import account_usage
from ._schema import (
    AgentCapabilities,
    AgentMessageChunk,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    InitializeResponse,
    Method,
    PromptResponse,
    SessionConfigOption,
    SessionConfigSelectGroup,
    SessionModelState,
    SessionModeState,
    TextContent,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdateFields,
    UnknownUpdate,
    UsageUpdate,
    UserMessageChunk,
    parse_session_notification,
    to_wire,
)
from ._schema import Usage as AcpUsage

__all__ = ["AcpState", "AcpTranslator", "config_values"]

_log = logging.getLogger("agentrun.acp")

#: Agents whose prompt ``usage`` covers only the last model call of the prompt.
_LAST_CALL_USAGE = frozenset({"OpenCode"})
_SESSION_METHODS = frozenset(
    {Method.SESSION_NEW, Method.SESSION_LOAD, Method.SESSION_RESUME, Method.SESSION_FORK}
)
_REPLAYING_METHODS = frozenset({Method.SESSION_LOAD, Method.SESSION_FORK})
_DONE = frozenset({"completed", "failed"})

BlockKind = Literal["text", "thinking", "user"]


def config_values(option: SessionConfigOption) -> list[str]:
    """The values a ``select`` config option offers (groups flattened)."""
    values: list[str] = []
    for item in option.options or []:
        if isinstance(item, SessionConfigSelectGroup):
            values.extend(o.value for o in item.options)
        else:
            values.append(item.value)
    return values


@dataclass
class _Block:
    kind: BlockKind
    message_id: str | None
    replayed: bool
    parts: list[str] = field(default_factory=list[str])


@dataclass
class ToolState:
    """What is known about one tool call, merged over its updates."""

    id: str
    name: str | None = None
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    input: Any = None
    raw_output: Any = None
    content: list[Any] | None = None
    locations: list[Any] | None = None
    announced: bool = False
    finished: bool = False
    replayed: bool = False
    #: Output an agent streams in ``_meta.terminal_output_delta`` (codex-acp), and the exit code
    #: from ``_meta.terminal_exit``.
    terminal_output: list[str] = field(default_factory=list[str])
    exit_code: int | None = None


def _placeholder_input(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        keys = set(cast("dict[str, Any]", value))
        return keys <= {"cwd"}
    return False


def _text_of(content: list[Any] | None) -> str | None:
    if not content:
        return None
    texts: list[str] = []
    for item in content:
        entry = _dict(item)
        if entry is None or entry.get("type") != "content":
            continue
        inner = _dict(entry.get("content"))
        if inner is not None and inner.get("type") == "text" and isinstance(inner.get("text"), str):
            texts.append(inner["text"])
    return "".join(texts) if texts else None


class AcpState:
    """The state of one ACP session as seen on the wire; every method returns the messages
    that its event produces. Pure: no I/O, no clock."""

    def __init__(
        self,
        *,
        engine: str = "acp",
        model: str | None = None,
        context_window_tokens: int | None = None,
        catalog: Catalog | None = None,
        deltas: bool = True,
    ) -> None:
        self.engine = engine
        self.deltas = deltas
        self.tracker: ContextTracker = ContextTracker(
            model=model, override=context_window_tokens, catalog=catalog
        )
        self.protocol_version: int | None = None
        self.agent_name: str | None = None
        self.agent_version: str | None = None
        self.capabilities: AgentCapabilities = AgentCapabilities()
        self.auth_methods: list[dict[str, Any]] = []
        #: The slash commands the agent advertises (``available_commands_update``).
        self.commands: frozenset[str] = frozenset()
        self.session_id: str | None = None
        self.session_method: str | None = None
        self.cwd: str | None = None
        self.config_options: list[SessionConfigOption] = []
        self.modes: SessionModeState | None = None
        self.models: SessionModelState | None = None
        self.process: ProcessMeta | None = None
        self.replaying: bool = False
        self.in_prompt: bool = False
        #: The session's cumulative cost as last reported (``usage_update.cost``).
        self.session_cost: float | None = None
        self.cost_currency: str | None = None
        self._fresh = False
        self._init_pending = False
        #: Session updates held back until the ``init`` goes out (see ``init_pending``).
        self.before_init: list[Message] = []
        #: Per-call usage an agent sends in a chunk's ``_meta.usage`` (Qwen Code), this prompt.
        self.call_usage: list[dict[str, Any]] = []
        self._cost_base: float | None = None
        self._block: _Block | None = None
        self.tools: dict[str, ToolState] = {}
        self._unannounced: list[str] = []

    # -- what the session is -----------------------------------------------------------

    @property
    def model(self) -> str | None:
        """The current model id the agent advertises (config option or ``models``)."""
        for option in self.config_options:
            if (option.category == "model" or option.id == "model") and isinstance(
                option.current_value, str
            ):
                return option.current_value
        if self.models is not None:
            return self.models.current_model_id
        return None

    @property
    def mode(self) -> str | None:
        """The current mode id (config option ``mode`` or ``modes``)."""
        for option in self.config_options:
            if (option.category == "mode" or option.id == "mode") and isinstance(
                option.current_value, str
            ):
                return option.current_value
        if self.modes is not None:
            return self.modes.current_mode_id
        return None

    @property
    def usage_scope(self) -> str:
        return "last_call" if self.agent_name in _LAST_CALL_USAGE else "prompt"

    @property
    def _estimable(self) -> UsageSource:
        return "unavailable" if self.usage_scope == "last_call" else "reported"

    def _msg(self, replayed: bool | None = None, **fields: Any) -> Message:
        return Message(replayed=self.replaying if replayed is None else replayed, **fields)

    def error(self, text: str, code: str, data: Any = None, *, fatal: bool = False) -> Message:
        message = Message.error_message(
            f"{self.engine}: {text}", code=code, fatal=fatal, data=_dict(data)
        )
        return message.model_copy(update={"replayed": self.replaying})

    # -- handshake -----------------------------------------------------------------------

    def initialized(self, result: Any) -> list[Message]:
        try:
            response = InitializeResponse.model_validate(result)
        except ValidationError as exc:
            return [
                self.error(
                    f"unexpected initialize result ({exc.error_count()} problems)",
                    "protocol",
                    {"result": result},
                )
            ]
        self.protocol_version = response.protocol_version
        self.capabilities = response.agent_capabilities
        self.auth_methods = [to_wire(m) for m in response.auth_methods]
        if response.agent_info is not None:
            self.agent_name = response.agent_info.name
            self.agent_version = response.agent_info.version
        return []

    def session_requested(self, method: str) -> None:
        """We asked for a session: a load or fork replays history until its result."""
        if method in _REPLAYING_METHODS:
            self.replaying = True

    def session_ready(
        self, method: str, result: Any, *, session_id: str | None, cwd: str | None
    ) -> list[Message]:
        out = self._flush_all()
        self.replaying = False
        fields = _dict(result) or {}
        sid = fields.get("sessionId")
        self.session_id = sid if isinstance(sid, str) else session_id
        self.session_method = method
        self.cwd = cwd
        self._fresh = method == Method.SESSION_NEW
        self._apply_state(fields)
        # ``init`` goes out with the first prompt, so that it shows the model and mode the
        # session options selected after the session was opened.
        self._init_pending = True
        return out

    def session_failed(self, method: str, code: int, message: str, data: Any) -> list[Message]:
        out = self._flush_all()
        self.replaying = False
        out.append(
            self.error(
                f"{method} failed: {message}",
                "session_not_found" if _not_found(code, message) else str(code),
                {"code": code, "message": message, "data": data},
                fatal=True,
            )
        )
        return out

    def _apply_state(self, fields: dict[str, Any]) -> None:
        try:
            if fields.get("configOptions") is not None:
                self.config_options = [
                    SessionConfigOption.model_validate(o) for o in fields["configOptions"]
                ]
            if fields.get("modes") is not None:
                self.modes = SessionModeState.model_validate(fields["modes"])
            if fields.get("models") is not None:
                self.models = SessionModelState.model_validate(fields["models"])
        except (ValidationError, TypeError):
            _log.warning("acp: could not read the session's modes/models/config options")
        self.tracker.set_model(self.model)

    def config_changed(self, result: Any) -> list[Message]:
        """The result of ``session/set_config_option`` (the full option list)."""
        self._apply_state(_dict(result) or {})
        return []

    def mode_set(self, mode_id: Any) -> list[Message]:
        if isinstance(mode_id, str) and self.modes is not None:
            self.modes = self.modes.model_copy(update={"current_mode_id": mode_id})
        return []

    def model_set(self, model_id: Any) -> list[Message]:
        if isinstance(model_id, str) and self.models is not None:
            self.models = self.models.model_copy(update={"current_model_id": model_id})
            self.tracker.set_model(model_id)
        return []

    def init_message(self) -> Message:
        data: dict[str, Any] = {
            "protocol_version": self.protocol_version,
            "session_method": self.session_method,
            "agent_capabilities": to_wire(self.capabilities),
        }
        if self.auth_methods:
            data["auth_methods"] = self.auth_methods
        if self.config_options:
            data["config_options"] = [to_wire(o) for o in self.config_options]
        if self.modes is not None:
            data["modes"] = to_wire(self.modes)
        if self.models is not None:
            data["models"] = to_wire(self.models)
        if self.mode is not None:
            data["mode"] = self.mode
        return Message(
            type=MessageType.INIT,
            init=InitMeta(
                model=self.model,
                agent_name=self.agent_name,
                agent_version=self.agent_version,
                session_id=self.session_id,
                cwd=self.cwd,
            ),
            process=self.process,
            resume_id=self.session_id,
            data=data,
        )

    # -- session/update ------------------------------------------------------------------

    def update(self, params: Any) -> list[Message]:
        try:
            note = parse_session_notification(params)
        except ValidationError:
            return [
                self.error("session/update without a session id", "protocol", {"params": params})
            ]
        out = self._update(note.update, (_dict(params) or {}).get("update"))
        if not self.in_prompt and not self.replaying:
            # Said outside any prompt (between turns): complete at once, so that nothing of it
            # is carried into the next turn's blocks.
            out.extend(self._flush_all())
        return out

    def _update(self, update: Any, raw: Any) -> list[Message]:
        if isinstance(update, AgentMessageChunk):
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
            self.config_options = list(update.config_options)
            self.tracker.set_model(self.model)
        elif isinstance(update, CurrentModeUpdate):
            self.mode_set(update.current_mode_id)
        elif isinstance(update, AvailableCommandsUpdate):
            self.commands = frozenset(c.name.lstrip("/") for c in update.available_commands)
        if isinstance(update, UnknownUpdate):
            subtype = update.session_update or "unknown"
            data = dict(update.raw)
            if update.error is not None:
                data["validation_error"] = update.error
        else:
            subtype = str(getattr(update, "session_update", "unknown"))
            data = to_wire(update)
        data.pop("sessionUpdate", None)
        return [self._msg(type=MessageType.SYSTEM, subtype=subtype, data=data, raw=raw)]

    def _chunk(
        self,
        kind: BlockKind,
        chunk: AgentMessageChunk | AgentThoughtChunk | UserMessageChunk,
        raw: Any,
    ) -> list[Message]:
        content = chunk.content
        if not isinstance(content, TextContent):
            # Images, resources, audio: passed on whole, not part of a text block.
            out = self._announce_pending()
            out.append(
                self._msg(
                    type=MessageType.SYSTEM,
                    subtype=chunk.session_update,
                    message_id=chunk.message_id,
                    data=to_wire(chunk),
                    raw=raw,
                )
            )
            return out
        meta = chunk.meta
        notice = None
        if meta and kind == "text":
            call_usage = _dict(meta.get("usage"))
            if call_usage is not None and not content.text:
                # One model call's usage on an empty chunk (Qwen Code), not text.
                self.call_usage.append(call_usage)
                return []
            notice = _dict(meta.get("claudeCode"))
        if notice is not None and notice.get("kind") == "informational":
            # A notice from the adapter (a billing or mode warning), not the model's answer.
            out = self._announce_pending()
            out.append(
                self._msg(
                    type=MessageType.SYSTEM,
                    subtype="notice",
                    text=content.text,
                    data={"level": notice.get("level")},
                    raw=raw,
                )
            )
            return out
        out: list[Message] = []
        block = self._block
        if block is None or block.kind != kind or block.message_id != chunk.message_id:
            out.extend(self._flush_block())
            out.extend(self._announce_pending())
            block = self._block = _Block(kind, chunk.message_id, self.replaying)
        else:
            out.extend(self._announce_pending())
        block.parts.append(content.text)
        if content.text and kind != "user" and self.deltas:
            delta = MessageType.TEXT_DELTA if kind == "text" else MessageType.THINKING_DELTA
            out.append(
                self._msg(type=delta, text=content.text, message_id=chunk.message_id, raw=raw)
            )
        return out

    def _flush_block(self) -> list[Message]:
        block, self._block = self._block, None
        if block is None:
            return []
        text = "".join(block.parts)
        if not text:
            return []
        if block.kind == "user":
            return [
                self._msg(
                    block.replayed,
                    type=MessageType.SYSTEM,
                    subtype="user_message",
                    text=text,
                    message_id=block.message_id,
                )
            ]
        kind = MessageType.TEXT if block.kind == "text" else MessageType.THINKING
        return [self._msg(block.replayed, type=kind, text=text, message_id=block.message_id)]

    # -- tool calls ----------------------------------------------------------------------

    def _merge(self, tool: ToolState, fields: ToolCallUpdateFields) -> None:
        if fields.title is not None:
            tool.title = fields.title
            if tool.name is None:
                tool.name = fields.title
        if fields.kind is not None:
            tool.kind = fields.kind
        if fields.status is not None:
            tool.status = fields.status
        if fields.raw_input is not None and not (
            _placeholder_input(fields.raw_input) and not _placeholder_input(tool.input)
        ):
            tool.input = fields.raw_input
        if fields.raw_output is not None:
            tool.raw_output = fields.raw_output
        if fields.content is not None:
            tool.content = [to_wire(c) for c in fields.content]
        if fields.locations is not None:
            tool.locations = [to_wire(loc) for loc in fields.locations]
        named = (fields.model_extra or {}).get("name")
        if isinstance(named, str) and named:
            tool.name = named  # the tool's own name beats its human title
        meta = fields.meta or {}
        claude = _dict(meta.get("claudeCode"))
        if claude is not None and isinstance(claude.get("toolName"), str):
            tool.name = claude["toolName"]
        delta = _dict(meta.get("terminal_output_delta"))
        if delta is not None and isinstance(delta.get("data"), str):
            tool.terminal_output.append(delta["data"])
        exited = _dict(meta.get("terminal_exit"))
        if exited is not None and isinstance(exited.get("exit_code"), int):
            tool.exit_code = exited["exit_code"]

    def _ready(self, tool: ToolState) -> bool:
        return tool.status not in (None, "pending") or not _placeholder_input(tool.input)

    def _tool_call(self, update: ToolCallStart, raw: Any) -> list[Message]:
        out = self._flush_block()
        tool = self.tools.get(update.tool_call_id)
        if tool is None:
            tool = self.tools[update.tool_call_id] = ToolState(
                update.tool_call_id, replayed=self.replaying
            )
        # Calls announced earlier come first, in the order the agent started them.
        out.extend(self._announce_pending(but=tool.id))
        self._merge(tool, update)
        out.extend(self._progress(tool, raw))
        return out

    def _tool_update(self, update: ToolCallProgress, raw: Any) -> list[Message]:
        tool = self.tools.get(update.tool_call_id)
        out: list[Message] = []
        if tool is None:
            tool = self.tools[update.tool_call_id] = ToolState(
                update.tool_call_id, replayed=self.replaying
            )
            out.extend(self._flush_block())
        self._merge(tool, update)
        out.extend(self._progress(tool, raw))
        return out

    def _progress(self, tool: ToolState, raw: Any) -> list[Message]:
        out: list[Message] = []
        if not tool.announced:
            if self._ready(tool) or tool.status in _DONE:
                out.extend(self._announce(tool, raw))
            elif tool.id not in self._unannounced:
                self._unannounced.append(tool.id)
        elif not (tool.status in _DONE and not tool.finished):
            data = dict(_dict(raw) or {})
            data.pop("sessionUpdate", None)
            out.append(
                self._msg(
                    type=MessageType.SYSTEM,
                    subtype="tool_call_update",
                    tool=self._tool_model(tool),
                    data=data,
                    raw=raw,
                )
            )
        if tool.status in _DONE and not tool.finished:
            tool.finished = True
            out.append(self._result_of(tool, raw))
        return out

    def _tool_model(
        self, tool: ToolState, *, output: Any = None, error: bool | None = None
    ) -> ToolCall:
        return ToolCall(
            id=tool.id,
            name=tool.name,
            input=tool.input,
            output=output,
            is_error=error,
            title=tool.title,
            kind=tool.kind,
            status=tool.status,
        )

    def _announce(self, tool: ToolState, raw: Any = None) -> list[Message]:
        tool.announced = True
        if tool.id in self._unannounced:
            self._unannounced.remove(tool.id)
        data: dict[str, Any] = {}
        if tool.locations:
            data["locations"] = tool.locations
        if tool.content:
            data["content"] = tool.content
        return [
            self._msg(
                tool.replayed,
                type=MessageType.TOOL_USE,
                tool=self._tool_model(tool),
                data=data or None,
                raw=raw,
            )
        ]

    def _announce_pending(self, but: str | None = None) -> list[Message]:
        out: list[Message] = []
        for tool_id in [t for t in self._unannounced if t != but]:
            out.extend(self._announce(self.tools[tool_id]))
        return out

    def _result_of(self, tool: ToolState, raw: Any) -> Message:
        text = _text_of(tool.content)
        if text is not None:
            output: Any = text
        elif tool.raw_output is not None:
            output = tool.raw_output
        elif tool.terminal_output or tool.exit_code is not None:
            # The content only points at a terminal; the agent streamed its output in _meta.
            output = "".join(tool.terminal_output)
        else:
            output = tool.content
        data: dict[str, Any] = {}
        if tool.exit_code is not None:
            data["exit_code"] = tool.exit_code
        if tool.raw_output is not None:
            data["raw_output"] = tool.raw_output
        if tool.content:
            data["content"] = tool.content
        return self._msg(
            tool.replayed,
            type=MessageType.TOOL_RESULT,
            tool=self._tool_model(
                tool, output=output, error=tool.status == "failed" or bool(tool.exit_code)
            ),
            data=data or None,
            raw=raw,
        )

    def _flush_all(self) -> list[Message]:
        return [*self._flush_block(), *self._announce_pending()]

    # -- usage -----------------------------------------------------------------------------

    def _usage(self, update: UsageUpdate, raw: Any) -> list[Message]:
        if update.cost is not None:
            self.cost_currency = update.cost.currency
            if update.cost.currency.upper() == "USD":
                self.session_cost = round(update.cost.amount, 9)
        used = update.used if update.used > 0 else None
        size = update.size if update.size > 0 else None
        message = self.tracker.observe_reported(used, size, raw=raw)
        if self.replaying:
            message = message.model_copy(update={"replayed": True})
        return [message]

    # -- permissions ---------------------------------------------------------------------

    def permission_requested(self, params: Any) -> list[Message]:
        """The agent asks; the call it names is announced first (with its best input)."""
        fields = _dict(params) or {}
        call = _dict(fields.get("toolCall")) or {}
        tool_id = call.get("toolCallId")
        out = self._flush_block()
        if isinstance(tool_id, str) and tool_id in self.tools:
            tool = self.tools[tool_id]
            if not tool.announced:
                if _placeholder_input(tool.input) and not _placeholder_input(call.get("rawInput")):
                    tool.input = call.get("rawInput")
                out.extend(self._announce_pending(but=tool_id))
                out.extend(self._announce(tool))
        return out

    def permission_answered(self, params: Any, result: Any) -> list[Message]:
        fields = _dict(params) or {}
        call = _dict(fields.get("toolCall")) or {}
        options = [_dict(o) for o in cast("list[Any]", fields.get("options") or [])]
        outcome = _dict((_dict(result) or {}).get("outcome")) or {}
        option_id = outcome.get("optionId")
        chosen = next(
            (o for o in options if o is not None and o.get("optionId") == option_id), None
        )
        kind = chosen.get("kind") if chosen is not None else None
        allowed = (
            outcome.get("outcome") == "selected"
            and isinstance(kind, str)
            and (kind.startswith("allow"))
        )
        tool_id = call.get("toolCallId") if isinstance(call.get("toolCallId"), str) else None
        tool = self.tools.get(tool_id) if tool_id is not None else None
        name = tool.name if tool is not None else None
        if name is None and isinstance(call.get("title"), str):
            name = call["title"]
        data: dict[str, Any] = {
            "tool_call_id": tool_id,
            "title": call.get("title"),
            "kind": call.get("kind"),
            "outcome": outcome.get("outcome") or "invalid",
            "option_id": option_id,
            "option_kind": kind,
            "allowed": allowed,
        }
        denials = None
        if not allowed:
            if outcome.get("outcome") == "selected" and chosen is not None:
                reason = f"rejected: {chosen.get('name') or option_id} ({kind})"
            else:
                reason = "the permission request was cancelled"
            tool_input = call.get("rawInput")
            if tool is not None and not _placeholder_input(tool.input):
                tool_input = tool.input
            denials = (
                PermissionDenial(
                    tool_name=name, tool_use_id=tool_id, input=tool_input, reason=reason
                ),
            )
        return [
            self._msg(type=MessageType.SYSTEM, subtype="permission", data=data, denials=denials)
        ]

    # -- the prompt turn -----------------------------------------------------------------

    @property
    def init_pending(self) -> bool:
        """The session is open and its ``init`` waits for the first prompt."""
        return self._init_pending

    def _init_once(self) -> list[Message]:
        if not self._init_pending:
            return []
        self._init_pending = False
        held, self.before_init = self.before_init, []
        return [self.init_message(), *held]

    def prompt_started(self) -> list[Message]:
        out = self._init_once()
        self.in_prompt = True
        self.call_usage = []
        if self.session_cost is not None:
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
        if reported is None and self.call_usage:
            reported = _summed_call_usage(self.call_usage)
        if reported is None:
            reported = _quota_usage(fields.get("_meta"))
        cost, data = self._turn_data()
        usage = account_usage(
            _usage_of(reported, cost),
            model=self.model,
            # A session's running cost differenced; with no cost, an estimate only from the
            # whole prompt's tokens (not from an agent's last call alone).
            cost="derived" if cost is not None else self._estimable,
        )
        if reported is not None:
            data["usage_scope"] = self.usage_scope
            if reported.total_tokens is not None:
                data["total_tokens"] = reported.total_tokens
        self._end_prompt()
        out.append(
            Message(
                type=MessageType.RESULT,
                stop_reason=stop_reason,
                usage=usage,
                resume_id=self.session_id,
                data=data or None,
                raw=result,
            )
        )
        return out

    def prompt_failed(self, code: int, message: str, data: Any) -> list[Message]:
        out = self._flush_all()
        extra = _dict(data) or {}
        name = extra.get("errorName")
        if isinstance(name, str) and name:
            error_code = name
        elif _not_found(code, message):
            error_code = "session_not_found"
        else:
            error_code = str(code)
        cost, turn_data = self._turn_data()
        turn_data["jsonrpc_error"] = {"code": code, "message": message, "data": data}
        self._end_prompt()
        out.append(
            Message(
                type=MessageType.RESULT,
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
        self.in_prompt = False
        if self.session_cost is not None:
            self._cost_base = self.session_cost

    def finish(self) -> list[Message]:
        """Complete open blocks and announce pending calls (end of a stream or a turn)."""
        return [*self._flush_all(), *self._init_once()]


def _not_found(code: int, message: str) -> bool:
    return code == -32602 and "not found" in message.lower()


def _summed_call_usage(calls: list[dict[str, Any]]) -> AcpUsage:
    """A prompt's usage from its calls' ``_meta.usage`` (Gemini's convention, as Qwen Code sends
    it: ``inputTokens`` counts cached input, ``outputTokens`` excludes thought tokens)."""

    def total(key: str) -> int | None:
        values = [v for c in calls if isinstance(v := c.get(key), int) and v >= 0]
        return sum(values) if values else None

    prompt, cached = total("inputTokens"), total("cachedReadTokens")
    uncached = None if prompt is None else max(0, prompt - (cached or 0))
    return AcpUsage(
        input_tokens=uncached,
        output_tokens=total("outputTokens"),
        thought_tokens=total("thoughtTokens"),
        cached_read_tokens=cached,
        total_tokens=total("totalTokens"),
    )


def _quota_usage(meta: Any) -> AcpUsage | None:
    """Gemini CLI's prompt totals in the response's ``_meta.quota.token_count``."""
    quota = _dict((_dict(meta) or {}).get("quota"))
    count = _dict((quota or {}).get("token_count"))
    if count is None:
        return None
    numbers = {k: v for k, v in count.items() if isinstance(v, int) and v >= 0}
    if "input_tokens" not in numbers and "output_tokens" not in numbers:
        return None
    return AcpUsage(
        input_tokens=numbers.get("input_tokens"), output_tokens=numbers.get("output_tokens")
    )


def _usage_of(reported: AcpUsage | None, cost: float | None) -> Usage | None:
    if reported is None:
        return None if cost is None else Usage(cost_usd=cost)
    thought = reported.thought_tokens
    output = reported.output_tokens
    if output is not None and thought is not None:
        output += thought
    return Usage(
        input_tokens=reported.input_tokens,
        output_tokens=output,
        cache_read_tokens=reported.cached_read_tokens,
        cache_write_tokens=reported.cached_write_tokens,
        thinking_tokens=thought,
        cost_usd=cost,
    )


class AcpTranslator(Translator):
    """Turns one session's ACP traffic into messages (see the module docstring).

    ``feed`` takes one decoded line: ``{"dir": "send"|"recv"|"stderr", "msg": {...}}`` or a bare
    JSON-RPC message (taken as received from the agent; responses are then recognised by their
    shape). ``process`` is put on the ``init`` message.
    """

    def __init__(
        self,
        *,
        engine: str = "acp",
        model: str | None = None,
        context_window_tokens: int | None = None,
        catalog: Catalog | None = None,
        deltas: bool = True,
        process: ProcessMeta | None = None,
    ) -> None:
        self.state: AcpState = AcpState(
            engine=engine,
            model=model,
            context_window_tokens=context_window_tokens,
            catalog=catalog,
            deltas=deltas,
        )
        self.state.process = process
        self._sent: dict[Any, tuple[str, Any]] = {}
        self._asked: dict[Any, tuple[str, Any]] = {}
        self._prompt_id: Any = None
        self._bare = False

    @property
    def prompt_pending(self) -> bool:
        """True from a ``session/prompt`` request until its response."""
        return self._prompt_id is not None

    def feed(self, event: Any) -> list[Message]:
        entry = _dict(event)
        if entry is None:
            return [self.state.error("a line was not a JSON object", "protocol", {"value": event})]
        if "dir" in entry and ("msg" in entry or "raw" in entry):
            direction = entry.get("dir")
            msg = _dict(entry.get("msg"))
            if direction not in ("send", "recv") or msg is None:
                return []
        else:
            direction, msg = "recv", entry
            self._bare = True
        if direction == "send":
            return self._outgoing(msg)
        return self._incoming(msg)

    def finish(self) -> list[Message]:
        return self.state.finish()

    # -- client -> agent -------------------------------------------------------------------

    def _outgoing(self, msg: dict[str, Any]) -> list[Message]:
        method = msg.get("method")
        params = msg.get("params")
        request_id = _request_id(msg.get("id"))
        if isinstance(method, str):
            if request_id is not None:
                self._sent[request_id] = (method, params)
                if method == Method.SESSION_PROMPT:
                    self._prompt_id = request_id
                    return self.state.prompt_started()
                if method in _SESSION_METHODS:
                    self.state.session_requested(method)
            return []
        # Our answer to one of the agent's requests.
        asked = self._asked.pop(request_id, None) if request_id is not None else None
        if asked is not None and asked[0] == Method.SESSION_REQUEST_PERMISSION:
            return self.state.permission_answered(asked[1], msg.get("result"))
        return []

    # -- agent -> client -------------------------------------------------------------------

    def _incoming(self, msg: dict[str, Any]) -> list[Message]:
        method = msg.get("method")
        state = self.state
        request_id = _request_id(msg.get("id"))
        if isinstance(method, str):
            params = msg.get("params")
            if "id" in msg:
                if request_id is not None:
                    self._asked[request_id] = (method, params)
                if method == Method.SESSION_REQUEST_PERMISSION:
                    return state.permission_requested(params)
                return []
            if method == Method.SESSION_UPDATE:
                if (
                    self._bare
                    and not state.in_prompt
                    and not state.replaying
                    and (state.session_id is not None)
                ):
                    return [*state.prompt_started(), *state.update(params)]
                if state.init_pending and not state.in_prompt and not state.replaying:
                    # Updates between the session's opening and its first prompt (commands,
                    # modes the options selected) follow the init, which goes out with it.
                    state.before_init.extend(state.update(params))
                    return []
                return state.update(params)
            return []
        if "id" not in msg:
            return []
        sent = self._sent.pop(request_id, None) if request_id is not None else None
        error = _dict(msg.get("error"))
        result = msg.get("result")
        if sent is None:
            sent = (self._guess(result, error), None)
        method, params = sent
        if method == Method.SESSION_PROMPT and (request_id != self._prompt_id and not self._bare):
            return []  # the late answer to a prompt we stopped waiting for
        if error is not None:
            code = error.get("code")
            code = code if isinstance(code, int) else -32603
            text = error.get("message")
            text = text if isinstance(text, str) else repr(text)
            if method == Method.SESSION_PROMPT:
                self._prompt_id = None
                return state.prompt_failed(code, text, error.get("data"))
            if method in _SESSION_METHODS:
                return state.session_failed(method, code, text, error.get("data"))
            if method == Method.INITIALIZE:
                return [
                    state.error(
                        f"initialize failed: {text}", str(code), {"error": error}, fatal=True
                    )
                ]
            return [state.error(f"{method} failed: {text}", str(code), {"error": error})]
        p = _dict(params) or {}
        if method == Method.INITIALIZE:
            return state.initialized(result)
        if method in _SESSION_METHODS:
            sid = p.get("sessionId") if method != Method.SESSION_FORK else None
            cwd = p.get("cwd")
            return state.session_ready(
                method,
                result,
                session_id=sid if isinstance(sid, str) else None,
                cwd=cwd if isinstance(cwd, str) else None,
            )
        if method == Method.SESSION_PROMPT:
            self._prompt_id = None
            return state.prompt_finished(result)
        if method == Method.SESSION_SET_CONFIG_OPTION:
            return state.config_changed(result)
        if method == Method.SESSION_SET_MODE:
            return state.mode_set(p.get("modeId"))
        if method == Method.SESSION_SET_MODEL:
            return state.model_set(p.get("modelId"))
        return []

    def _guess(self, result: Any, error: dict[str, Any] | None) -> str:
        """The method of a response we did not see the request of (agent-only logs)."""
        fields = _dict(result)
        if fields is not None:
            if "agentCapabilities" in fields or "protocolVersion" in fields:
                return Method.INITIALIZE
            if "stopReason" in fields:
                return Method.SESSION_PROMPT
            if "sessionId" in fields:
                return Method.SESSION_NEW
            if "configOptions" in fields:
                return Method.SESSION_SET_CONFIG_OPTION
            return "unknown"
        if error is not None and self.state.in_prompt:
            return Method.SESSION_PROMPT
        return "unknown"


def _request_id(value: object) -> int | str | None:
    """A JSON-RPC id usable as a key (ids are numbers or strings; anything else is ignored)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None
    return value
