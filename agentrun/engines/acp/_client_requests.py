"""The agent's requests to the client: permission requests, form elicitations and, with
``fs_access``, text files confined to the session's working directory (:mod:`._fs`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
from pydantic import ValidationError

from ..._bases.jsonrpc_session import RequestHandlerTable
from ..._vocabulary.jsonvalues import as_object
from ..._vocabulary.messages import Message, MessageType
from ..._vocabulary.options import SessionOptions
from ..._vocabulary.permissions import PermissionDecision, PermissionOption, PermissionRequest
from ..._vocabulary.questions import QuestionAnswer, QuestionRequest
from ..._wire.jsonrpc import JsonRpcError
from ._elicitation import elicitation_question, elicitation_value
from ._fs import WorkspaceFiles
from ._schema import Method, RequestPermissionRequest
from ._translate import AcpTranslator

__all__ = ["ClientRequests", "RequestsHost"]


class RequestsHost(Protocol):
    """What :class:`ClientRequests` uses of the ACP driver that holds it."""

    @property
    def engine_name(self) -> str: ...

    @property
    def options(self) -> SessionOptions: ...

    @property
    def acp_translator(self) -> AcpTranslator: ...

    @property
    def turn_running(self) -> bool:
        """Whether a turn runs (else nobody can be asked)."""
        ...

    async def deliver(self, messages: list[Message]) -> None:
        """Hand messages to the running turn, in order with the agent's own."""
        ...

    async def ask_permission(
        self, request: PermissionRequest, *, hitl: bool | None
    ) -> tuple[PermissionDecision, list[Message]]: ...

    async def ask_question(
        self, request: QuestionRequest
    ) -> tuple[QuestionAnswer, list[Message]]: ...


class ClientRequests:
    """Answers the agent's requests, for the ACP driver that holds it (``host``)."""

    def __init__(self, host: RequestsHost, *, files: WorkspaceFiles | None) -> None:
        self._host = host
        self._files = files
        #: The caller's decisions still awaited: cancelled when the turn is interrupted.
        self._waiting: set[anyio.CancelScope] = set()

    def table(self) -> RequestHandlerTable:
        """The agent's requests this answers, by method."""
        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            Method.SESSION_REQUEST_PERMISSION: self._permission,
            Method.ELICITATION_CREATE: self._elicit,
        }
        files = self._files
        if files is not None:
            handlers[Method.FS_READ_TEXT_FILE] = files.read
            handlers[Method.FS_WRITE_TEXT_FILE] = files.write
        return handlers

    def cancel_waiting(self) -> None:
        """Answer every request still waiting for the caller ``cancelled``."""
        for scope in list(self._waiting):
            scope.cancel()

    async def _permission(self, params: Any) -> dict[str, Any]:
        try:
            request = RequestPermissionRequest.model_validate(params)
        except ValidationError as exc:
            raise JsonRpcError.invalid_params(f"{exc.error_count()} problems") from None
        cancelled: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
        if not self._host.turn_running:
            return cancelled  # no turn is running: nobody can be asked
        options = tuple(
            PermissionOption(option_id=o.option_id, kind=str(o.kind), name=o.name)
            for o in request.options
        )
        call = request.tool_call
        known = self._host.acp_translator.state.tools.get(call.tool_call_id)
        tool_input = call.raw_input
        if known is not None and known.input not in (None, {}):
            tool_input = known.input
        ask = PermissionRequest(
            tool_name=(known.name if known is not None else None) or call.title,
            tool_use_id=call.tool_call_id,
            input=tool_input,
            title=call.title,
            kind=None if call.kind is None else str(call.kind),
            options=options,
            engine=self._host.engine_name,
            raw=params,
        )
        chosen: PermissionOption | None = None
        scope = anyio.CancelScope()
        self._waiting.add(scope)
        try:
            with scope:
                chosen = await self._decide(ask, options)
        finally:
            self._waiting.discard(scope)
        if chosen is None:
            return cancelled
        return {"outcome": {"outcome": "selected", "optionId": chosen.option_id}}

    async def _elicit(self, params: Any) -> dict[str, Any]:
        """A form elicitation: one question per field of the requested schema; the answers go
        back as the form's content, a refusal as ``decline``."""
        data = as_object(params) or {}
        schema = as_object(data.get("requestedSchema")) or {}
        fields = as_object(schema.get("properties")) or {}
        if not self._host.turn_running or not fields:
            return {"action": "decline"}  # no turn is running, or no form: nothing to answer
        kinds = {name: str((as_object(f) or {}).get("type")) for name, f in fields.items()}
        request = QuestionRequest(
            questions=tuple(
                elicitation_question(name, as_object(field) or {}) for name, field in fields.items()
            ),
            tool_use_id=data.get("toolCallId") if isinstance(data.get("toolCallId"), str) else None,
            message=data.get("message") if isinstance(data.get("message"), str) else None,
            engine=self._host.engine_name,
            raw=params,
        )
        answer: QuestionAnswer | None = None
        scope = anyio.CancelScope()
        self._waiting.add(scope)
        try:
            with scope:
                answer, notes = await self._host.ask_question(request)
                await self._host.deliver(notes)
        finally:
            self._waiting.discard(scope)
        if answer is None:
            return {"action": "cancel"}
        if answer.refused:
            return {"action": "decline"}
        content = {
            name: elicitation_value(kinds.get(name, "string"), values)
            for name, values in answer.answers.items()
            if values
        }
        return {"action": "accept", "content": content}

    async def _decide(
        self, ask: PermissionRequest, options: tuple[PermissionOption, ...]
    ) -> PermissionOption | None:
        session = self._host.options
        if session.hitl is False:
            allows = [o for o in options if o.kind == "allow_once"]
            allows = allows or [o for o in options if o.kind == "allow_always"]
            return allows[0] if allows else None
        # Asked with a handler, or denied without one; the translator records a denial from the
        # answer on the wire, so the shared flow's own denial note is dropped.
        decision, notes = await self._host.ask_permission(ask, hitl=True)
        await self._host.deliver([n for n in notes if n.type is not MessageType.SYSTEM])
        chosen = decision.choose(options)
        if chosen is None and not decision.allow:
            chosen = next((o for o in options if o.kind.startswith("reject")), None)
        return chosen
