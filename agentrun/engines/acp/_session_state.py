"""What an ACP session is, as seen on the wire: the agent, its capabilities, the session's id,
modes, models and config options, and the ``init`` message made of them.

:class:`SessionState` is the lowest layer of :class:`~._state.AcpState`: it reads the answers to
``initialize`` and to the requests that open a session (``session/new`` / ``load`` / ``resume``
/ ``fork``) and to the ``set_*`` requests. The layers above add message blocks
(:mod:`._message_blocks`), tool calls and permissions (:mod:`._tool_calls`), and the updates and
the prompt turn (:mod:`._state`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import ValidationError

from ..._vocabulary.context import Catalog, ContextTracker
from ..._vocabulary.jsonvalues import as_dict as _dict
from ..._vocabulary.messages import (
    InitMeta,
    Message,
    MessageType,
    ProcessMeta,
    UsageSource,
    assemble,
)
from ._schema import (
    AgentCapabilities,
    InitializeResponse,
    Method,
    SessionConfigOption,
    SessionConfigSelectGroup,
    SessionModelState,
    SessionModeState,
    to_wire,
)
from ._usage import LAST_CALL_USAGE

__all__ = ["SESSION_METHODS", "SessionState", "config_values", "not_found"]

# Message kinds as module constants: an enum's attribute look-up costs more than a global's.
_INIT = MessageType.INIT

_log = logging.getLogger("agentrun.acp")

#: The requests that open a session.
SESSION_METHODS = frozenset(
    {Method.SESSION_NEW, Method.SESSION_LOAD, Method.SESSION_RESUME, Method.SESSION_FORK}
)
#: Those during which the agent replays the session's history.
_REPLAYING_METHODS = frozenset({Method.SESSION_LOAD, Method.SESSION_FORK})
#: Agents (by ``agentInfo.name``) that replay a loaded session's history after answering
#: ``session/load``: Gemini CLI 0.61 starts streaming it without waiting for it. What they say
#: from then until the next prompt is history.
REPLAY_AFTER_LOAD = frozenset({"gemini-cli"})


_NO_CAPABILITIES: list[AgentCapabilities] = []


def _no_capabilities() -> AgentCapabilities:
    """The capabilities of an agent that has not answered ``initialize``: one instance for every
    session (nothing changes a capabilities model; ``initialize`` replaces it), made once."""
    if not _NO_CAPABILITIES:
        _NO_CAPABILITIES.append(AgentCapabilities())
    return _NO_CAPABILITIES[0]


def config_values(option: SessionConfigOption) -> list[str]:
    """The values a ``select`` config option offers (groups flattened)."""
    values: list[str] = []
    for item in option.options or []:
        if isinstance(item, SessionConfigSelectGroup):
            values.extend(o.value for o in item.options)
        else:
            values.append(item.value)
    return values


def not_found(code: int, message: str) -> bool:
    """A JSON-RPC error that says the session is unknown."""
    return code == -32602 and "not found" in message.lower()


class SessionState:
    """The session as the agent described it; every method returns the messages that its event
    produces. Pure: no I/O, no clock."""

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
        #: What the agent can do (none of the optional things until ``initialize`` says).
        self.capabilities: AgentCapabilities = _no_capabilities()
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
        #: A session just loaded from an agent that streams its history after the load's
        #: answer (``REPLAY_AFTER_LOAD``): the first prompt waits for that stream to end.
        self.history_after_load: bool = False
        #: When the last ``session/update`` was read (``time.monotonic()``).
        self.last_update_at: float = 0.0
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
        #: The client sent ``session/cancel`` during this prompt.
        self.cancel_requested: bool = False
        #: What the agent said since it reported a system error in this prompt (codex-acp).
        self.system_error: list[str] | None = None
        self._cost_base: float | None = None
        #: The running cost had not moved when the last prompt that spent tokens ended.
        self._cost_late = False
        #: The prompt running is the agent's ``compact`` command.
        self._compacting = False

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
        return "last_call" if self.agent_name in LAST_CALL_USAGE else "prompt"

    @property
    def _estimable(self) -> UsageSource:
        return "unavailable" if self.usage_scope == "last_call" else "reported"

    def _msg(self, replayed: bool | None = None, **fields: Any) -> Message:
        """A message of the translator's own values: validated ones (a model's fields, the
        wire schema's, values checked to be of their field's type), dicts and tuples it built,
        models it made. Assembled as :class:`Message` would validate them, without validating
        them again."""
        fields["replayed"] = self.replaying if replayed is None else replayed
        return assemble(Message, fields)

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

    def saw_update(self) -> None:
        """Note that a ``session/update`` was read now."""
        self.last_update_at = time.monotonic()

    def session_requested(self, method: str) -> None:
        """We asked for a session: a load or fork replays history until its result."""
        if method in _REPLAYING_METHODS:
            self.replaying = True

    def session_ready(
        self, method: str, result: Any, *, session_id: str | None, cwd: str | None
    ) -> list[Message]:
        out = self._flush_all()
        self.replaying = method == Method.SESSION_LOAD and self.agent_name in REPLAY_AFTER_LOAD
        self.history_after_load = self.replaying
        self.saw_update()  # the load's answer starts the history stream's quiet clock
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
                "session_not_found" if not_found(code, message) else str(code),
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
        # Validated values (the agent's answers' models, ids checked to be strings) and a dict
        # built here: assembled, not validated again.
        init = assemble(
            InitMeta,
            {
                "model": self.model,
                "agent_name": self.agent_name,
                "agent_version": self.agent_version,
                "session_id": self.session_id,
                "cwd": self.cwd,
            },
        )
        return assemble(
            Message,
            {
                "type": _INIT,
                "init": init,
                "process": self.process,
                "resume_id": self.session_id,
                "data": data,
            },
        )

    # -- the init ------------------------------------------------------------------------

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

    def _flush_all(self) -> list[Message]:
        """Complete the open message block and announce the tool calls still held back (the
        layers above)."""
        raise NotImplementedError
