"""ACP wire traffic -> normalized messages, for the live engine and for replay alike.

:class:`AcpTranslator` reads one session's JSON-RPC traffic in both directions, as the live
engine sees it and as the recorder writes it: lines of ``{"dir": "send"|"recv", "msg": {...}}``
(``"stderr"`` lines are ignored), or bare JSON-RPC messages, which are taken as received from the
agent. The live engine feeds it every line it writes and reads, so a recorded session replays into
exactly the messages the live run produced (except the few the engine adds itself: unsupported
options, permission-callback failures, transport problems).

The translator matches requests with their responses and hands each event to the session's
:class:`~._state.AcpState`, built in layers, one concern each:

* :mod:`._session_state` -- ``initialize`` and the session's opening (``session/new`` / ``load``
  / ``resume`` / ``fork``): the ``init`` message (``resume_id`` = the session id), sent with the
  first prompt so that it shows the model and mode the session options selected. Updates that
  arrive while ``session/load`` or ``session/fork`` is pending are the agent replaying history:
  they are marked ``replayed=True`` (never counted in a summary).
* :mod:`._message_blocks` -- text, thought and user-message chunks -> deltas and complete
  messages (OpenCode's thought ``messageId`` is a part id, ``prt_...``, kept as is).
* :mod:`._tool_calls` -- tool calls and permission requests -> ``tool_use``, ``tool_result``,
  ``permission``.
* :mod:`._state` -- the other ``session/update`` kinds (usage, plans, modes, unknown kinds) and
  the prompt turn's ``result``.
* :mod:`._usage` and :mod:`._meta` -- a prompt's usage in the library's conventions, and what
  the preset agents put in ``_meta``.
"""

from __future__ import annotations

from typing import Any, cast

from ..._bases.translator import JsonRpcTranslator, wire_event
from ..._vocabulary.context import Catalog
from ..._vocabulary.jsonvalues import as_dict as _dict
from ..._vocabulary.messages import Message, ProcessMeta
from ..._wire.framing import capped
from ..._wire.jsonrpc import INTERNAL_ERROR
from ._schema import Method
from ._schema.wire import (
    WireLine,
    WireNotification,
    WireParams,
    wire_line_schema,
    wire_notification_schema,
)
from ._session_state import SESSION_METHODS, config_values
from ._state import AcpState

__all__ = ["AcpState", "AcpTranslator", "config_values"]


class AcpTranslator(JsonRpcTranslator):
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
        # Nested no deeper than every message can serialize.
        return self.feed_decoded(capped(event))

    def feed_line(self, line: bytes, *, engine: str) -> list[Message]:
        """A transcript line that is a received ``session/update`` the wire schema takes
        (:mod:`._schema.wire`) is parsed and validated in one pass, its messages made from its
        values; every other line is decoded and fed as every translator does."""
        if b"session/update" in line and not self._bare:
            event = wire_event(wire_line_schema(), line)
            if event is not None:
                out = self._wire_update(cast("WireLine", event)["msg"]["params"], line)
                if out is not None:
                    return out
        return super().feed_line(line, engine=engine)

    def feed_received(self, line: bytes) -> list[Message] | None:
        """:meth:`feed_line`'s schema, for a line the live engine received from the agent (a
        bare JSON-RPC message, read as :meth:`feed` reads ``{"dir": "recv", "msg": ...}`` of it
        decoded); ``None`` for every line the schema does not take."""
        if b"session/update" not in line or self._bare:
            return None
        event = wire_event(wire_notification_schema(), line)
        if event is None:
            return None
        return self._wire_update(cast("WireNotification", event)["params"], line)

    def _wire_update(self, params: WireParams, line: bytes) -> list[Message] | None:
        if params["update"]["session_update"] == "available_commands_update" and (
            b"NaN" in line or b"Infinity" in line
        ):
            # A command's values are kept as its model dumps them to the wire, where a
            # number that is not finite is null: such a line is read by the models.
            return None
        state = self.state
        if state.init_pending and not state.in_prompt and not state.replaying:
            state.before_init.extend(state.wire_update(params["update"], params["raw"]))
            return []
        return state.wire_update(params["update"], params["raw"])

    def feed_decoded(self, event: Any) -> list[Message]:
        """:meth:`feed` of an event the line decoder made (its nesting already cut)."""
        # (The accessors of jsonvalues, inlined: this runs for every line that is decoded.)
        if not isinstance(event, dict):
            return [self.state.error("a line was not a JSON object", "protocol", {"value": event})]
        entry: dict[str, Any] = event  # pyright: ignore[reportUnknownVariableType]
        if "dir" in entry and ("msg" in entry or "raw" in entry):
            direction = entry.get("dir")
            value = entry.get("msg")
            if (direction != "send" and direction != "recv") or not isinstance(value, dict):
                return []
            msg: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
        else:
            direction, msg = "recv", entry
            self._bare = True
        if direction == "send":
            return self._outgoing(msg)
        return self._incoming(msg)

    def finish(self) -> list[Message]:
        return self.state.finish()

    def prompt_answer_lost(self, size: int, limit: int) -> list[Message]:
        """The answer to the pending ``session/prompt`` was a line of ``size`` bytes, over the
        framer's ``limit``: the prompt ends with a failed ``result`` (``error.code``
        ``"line_too_long"``)."""
        request_id, self._prompt_id = self._prompt_id, None
        if request_id is None:
            return []
        self._sent.pop(request_id, None)
        return self.state.prompt_failed(
            INTERNAL_ERROR,
            f"the answer to session/prompt was a line of {size} bytes, over the limit of "
            f"{limit} bytes",
            {"errorName": "line_too_long", "size": size, "limit": limit},
        )

    # -- client -> agent -------------------------------------------------------------------

    def _outgoing(self, msg: dict[str, Any]) -> list[Message]:
        method = msg.get("method")
        params = msg.get("params")
        request_id = msg.get("id")
        if type(request_id) is not int and type(request_id) is not str:
            request_id = _request_id(request_id)
        if isinstance(method, str):
            if request_id is not None:
                self._sent[request_id] = (method, params)
                if method == Method.SESSION_PROMPT:
                    self._prompt_id = request_id
                    return self.state.prompt_started(_prompt_text(params))
                if method in SESSION_METHODS:
                    self.state.session_requested(method)
            elif method == Method.SESSION_CANCEL and self.state.in_prompt:
                self.state.cancel_requested = True
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
        request_id = msg.get("id")
        if type(request_id) is not int and type(request_id) is not str:
            request_id = _request_id(request_id)
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
            if method in SESSION_METHODS:
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
        if method in SESSION_METHODS:
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


def _prompt_text(params: Any) -> str | None:
    """The text of a ``session/prompt`` request's prompt (its text blocks joined)."""
    blocks = (_dict(params) or {}).get("prompt")
    if not isinstance(blocks, list):
        return None
    texts: list[str] = []
    for block in cast("list[Any]", blocks):
        text = (_dict(block) or {}).get("text")
        if isinstance(text, str):
            texts.append(text)
    return "".join(texts) if texts else None
