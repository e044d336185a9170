"""The session options an ACP agent is told after its session opens: model, mode, config options
and reasoning effort, each with the ids the agent advertised; what it cannot take becomes one
``system`` note ``unsupported_option`` on the first turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..._vocabulary.errors import ConfigurationError
from ..._vocabulary.messages import Message, MessageType
from ..._vocabulary.options import SessionOptions
from ..._wire.jsonrpc import JsonRpcError
from ._schema import Method, SessionConfigOption
from ._session_state import config_values
from ._translate import AcpTranslator

__all__ = ["SessionSettings", "SettingsHost"]


class _SettingsEngine(Protocol):
    @property
    def request_timeout(self) -> float: ...

    @property
    def default_mode(self) -> str | None: ...

    @property
    def reports_context_fill(self) -> bool: ...


class SettingsHost(Protocol):
    """What :class:`SessionSettings` uses of the ACP driver that holds it."""

    @property
    def engine_name(self) -> str: ...

    @property
    def engine(self) -> _SettingsEngine: ...

    @property
    def options(self) -> SessionOptions: ...

    @property
    def session_id(self) -> str | None: ...

    @property
    def acp_translator(self) -> AcpTranslator: ...

    async def call(self, method: str, params: Any, timeout: float) -> Any:
        """A request to the agent; timeouts and a dead agent are typed errors."""
        ...


class SessionSettings:
    """Applies the session options, for the ACP driver that holds it (``host``)."""

    def __init__(self, host: SettingsHost) -> None:
        self._host = host

    def _option(self, category: str) -> SessionConfigOption | None:
        for option in self._host.acp_translator.state.config_options:
            if option.category == category or option.id == category:
                return option
        return None

    async def _set(self, method: str, params: dict[str, Any], option: str) -> None:
        try:
            await self._host.call(
                method,
                {"sessionId": self._host.session_id, **params},
                self._host.engine.request_timeout,
            )
        except JsonRpcError as exc:
            raise ConfigurationError(
                f"{self._host.engine_name}: {method} failed for {option}: {exc.message}",
                option=option,
                engine=self._host.engine_name,
            ) from exc

    def _not_offered(self, option: str, value: str, offered: Sequence[str]) -> ConfigurationError:
        listed = ", ".join(repr(v) for v in offered) or "none"
        return ConfigurationError(
            f"{self._host.engine_name}: {option} {value!r} is not offered by the agent (offered: "
            f"{listed})",
            option=option,
            engine=self._host.engine_name,
        )

    async def _select_model(self, model: str) -> None:
        state = self._host.acp_translator.state
        option = self._option("model")
        if option is not None:
            values = config_values(option)
            if model not in values:
                raise self._not_offered("model", model, values)
            if option.current_value != model:
                await self._set(
                    Method.SESSION_SET_CONFIG_OPTION,
                    {"configId": option.id, "value": model},
                    "model",
                )
            return
        if state.models is not None:
            ids = [m.model_id for m in state.models.available_models]
            if model not in ids:
                raise self._not_offered("model", model, ids)
            if state.models.current_model_id != model:
                await self._set(Method.SESSION_SET_MODEL, {"modelId": model}, "model")
            return
        raise ConfigurationError(
            f"{self._host.engine_name}: the agent offers no model selection (model {model!r})",
            option="model",
            engine=self._host.engine_name,
        )

    def _mode_ids(self) -> tuple[SessionConfigOption | None, list[str]]:
        option = self._option("mode")
        if option is not None:
            return option, config_values(option)
        modes = self._host.acp_translator.state.modes
        return None, [] if modes is None else [m.id for m in modes.available_modes]

    async def _select_mode(self, mode_id: str, option_name: str) -> None:
        option, ids = self._mode_ids()
        if mode_id not in ids:
            raise self._not_offered(option_name, mode_id, ids)
        if mode_id == self._host.acp_translator.state.mode:
            return
        if option is not None:
            await self._set(
                Method.SESSION_SET_CONFIG_OPTION,
                {"configId": option.id, "value": mode_id},
                option_name,
            )
        else:
            await self._set(Method.SESSION_SET_MODE, {"modeId": mode_id}, option_name)

    async def configure(self) -> list[Message]:
        """Tell the agent the session options it takes; the note of those it cannot take."""
        session = self._host.options
        unsupported: list[tuple[str, str]] = []
        if session.model is not None:
            await self._select_model(session.model)
        _, mode_ids = self._mode_ids()
        raw_mode = session.option("acp", "mode")
        if raw_mode is not None:
            await self._select_mode(raw_mode, "acp.mode")
        elif session.agent_id is not None:
            if session.agent_id in mode_ids:
                await self._select_mode(session.agent_id, "agent_id")
            else:
                unsupported.append(("agent_id", "the agent offers no mode with that id"))
        if raw_mode is None and session.mode == "plan" and session.agent_id is None:
            plan = next((m for m in mode_ids if m.lower() == "plan"), None)
            plan = plan or next((m for m in mode_ids if "plan" in m.lower()), None)
            if plan is None:
                raise self._not_offered("mode", "plan", mode_ids)
            await self._select_mode(plan, "mode")
        elif raw_mode is None and session.agent_id is None and self._host.engine.default_mode:
            if self._host.engine.default_mode in mode_ids:
                await self._select_mode(self._host.engine.default_mode, "default_mode")
            else:
                unsupported.append(("default_mode", "the agent offers no such mode"))
        for key, value in sorted(session.options.items()):
            if key.startswith("acp.config."):
                await self._set_config(key.removeprefix("acp.config."), value, key)
        if session.effort is not None:
            level = self._option("thought_level")
            wanted = {"max": ("max", "xhigh")}.get(session.effort, (session.effort,))
            value = next(
                (v for v in wanted if level is not None and v in config_values(level)), None
            )
            if level is not None and value is not None:
                await self._set_config(level.id, value, "effort")
            else:
                unsupported.append(("effort", "the agent offers no matching reasoning level"))
        unsupported.extend(self._unsupported())
        if not unsupported:
            return []
        names = ", ".join(name for name, _ in unsupported)
        return [
            Message(
                type=MessageType.SYSTEM,
                subtype="unsupported_option",
                text=f"{self._host.engine_name} ignores: {names}",
                data={"options": [{"option": n, "reason": r} for n, r in unsupported]},
            )
        ]

    async def _set_config(self, config_id: str, value: str, option_name: str) -> None:
        option = next(
            (o for o in self._host.acp_translator.state.config_options if o.id == config_id), None
        )
        if option is None:
            offered = [o.id for o in self._host.acp_translator.state.config_options]
            raise self._not_offered(option_name, config_id, offered)
        if option.type == "boolean":
            flag = value.lower() in ("1", "true", "yes", "on")
            await self._set(
                Method.SESSION_SET_CONFIG_OPTION,
                {"configId": config_id, "value": flag, "type": "boolean"},
                option_name,
            )
            return
        values = config_values(option)
        if values and value not in values:
            raise self._not_offered(option_name, value, values)
        await self._set(
            Method.SESSION_SET_CONFIG_OPTION, {"configId": config_id, "value": value}, option_name
        )

    def _unsupported(self) -> list[tuple[str, str]]:
        s = self._host.options
        caps = self._host.acp_translator.state.capabilities.session_capabilities
        out: list[tuple[str, str]] = []
        if s.system_prompt is not None:
            out.append(("system_prompt", "ACP has no system prompt"))
        if s.append_system_prompt is not None:
            out.append(("append_system_prompt", "ACP has no system prompt"))
        if s.max_turns is not None:
            out.append(("max_turns", "ACP has no step limit"))
        if s.thinking_budget is not None:
            out.append(("thinking_budget", "ACP has no thinking budget"))
        if s.allowed_tools:
            out.append(("allowed_tools", "answer permission requests instead"))
        if s.context_policy is not None and not self._host.engine.reports_context_fill:
            out.append(("context_policy", "the agent does not report how full its context is"))
        if s.add_dirs and caps.additional_directories is None:
            out.append(("add_dirs", "the agent does not take additional directories"))
        if (
            s.continue_last
            and s.resume_id is None
            and self._host.session_id is not None
            and (caps.list is None)
        ):
            out.append(("continue_last", "the agent cannot list sessions; a new one was started"))
        return out
