"""The agent asks: its permission requests as ``session/request_permission`` requests to the
client, its questions as ``elicitation/create`` form requests when the client takes them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from .._vocabulary.jsonvalues import as_dict, as_list
from .._vocabulary.messages import ToolCall
from .._vocabulary.permissions import PermissionDecision, PermissionOption, PermissionRequest
from .._vocabulary.questions import QuestionAnswer, QuestionRequest
from .._wire.jsonrpc import ConnectionClosedError, JsonRpcError
from ._sessions import AcpSession, ServerState
from ._updates import tool_kind, tool_title

_PERMISSION_KINDS = frozenset({"allow_once", "allow_always", "reject_once", "reject_always"})
_DEFAULT_OPTIONS = (
    PermissionOption(option_id="allow_once", kind="allow_once", name="Allow"),
    PermissionOption(option_id="allow_always", kind="allow_always", name="Always allow"),
    PermissionOption(option_id="reject_once", kind="reject_once", name="Reject"),
)


class AskingServer(ServerState):
    """Handlers for the engine's permission requests and questions that ask the ACP client."""

    def _permission_handler(
        self, session: AcpSession
    ) -> Callable[[PermissionRequest], Awaitable[PermissionDecision]]:
        async def ask(request: PermissionRequest) -> PermissionDecision:
            return await self._ask_permission(session, request)

        return ask

    async def _ask_permission(
        self, session: AcpSession, request: PermissionRequest
    ) -> PermissionDecision:
        tool_id = request.tool_use_id or f"permission-{next(self._permission_ids)}"
        tool = ToolCall(
            id=tool_id, name=request.tool_name, input=request.input, title=request.title,
            kind=request.kind,
        )  # fmt: skip
        for update in session.mapper.announce(tool):
            await self._send_update(session, update)
        offered = tuple(o for o in request.options if o.kind in _PERMISSION_KINDS)
        options = offered or _DEFAULT_OPTIONS
        tool_call: dict[str, Any] = {
            "toolCallId": session.mapper.tool_id(tool_id),
            "title": tool_title(tool),
            "kind": tool_kind(tool),
            "status": "pending",
        }
        if request.input is not None:
            tool_call["rawInput"] = request.input
        params = {
            "sessionId": session.sid,
            "toolCall": tool_call,
            "options": [
                {"optionId": o.option_id, "name": o.name or o.kind, "kind": o.kind} for o in options
            ],
        }
        if self._conn is None:
            return PermissionDecision.deny("no ACP client is connected")
        try:
            result = await self._conn.request("session/request_permission", params)
        except (JsonRpcError, ConnectionClosedError) as exc:
            return PermissionDecision.deny(f"the ACP client did not answer: {exc}")
        outcome = as_dict((as_dict(result) or {}).get("outcome")) or {}
        if outcome.get("outcome") != "selected":
            return PermissionDecision.deny("the ACP client cancelled the permission request")
        chosen = next((o for o in options if o.option_id == outcome.get("optionId")), None)
        if chosen is None:
            return PermissionDecision.deny(f"the ACP client chose an unknown option {outcome!r}")
        allow = chosen.kind.startswith("allow")
        reason = None if allow else f"rejected by the ACP client ({chosen.name or chosen.kind})"
        return PermissionDecision(
            allow=allow,
            always=chosen.kind.endswith("always"),
            reason=reason,
            option_id=chosen.option_id if offered else None,
        )

    def _question_handler(
        self, session: AcpSession
    ) -> Callable[[QuestionRequest], Awaitable[QuestionAnswer]]:
        async def ask(request: QuestionRequest) -> QuestionAnswer:
            return await self._ask_questions(session, request)

        return ask

    async def _ask_questions(self, session: AcpSession, request: QuestionRequest) -> QuestionAnswer:
        if not self._elicitation or self._conn is None:
            return QuestionAnswer.refuse(
                "the ACP client takes no questions (it does not advertise elicitation forms)"
            )
        keys = {f"q{i}": q for i, q in enumerate(request.questions, 1)}
        properties: dict[str, Any] = {}
        for key, question in keys.items():
            labels = [o.label for o in question.options]
            prop: dict[str, Any] = {"title": question.header or question.text}
            if question.header:
                prop["description"] = question.text
            if question.multi_select and labels:
                prop |= {"type": "array", "items": {"type": "string", "enum": labels}}
            elif labels and not question.allow_other:
                prop |= {"type": "string", "enum": labels}
            else:
                prop["type"] = "string"
                if labels:
                    prop["description"] = f"{question.text} (e.g. {', '.join(labels)})"
            properties[key] = prop
        message = request.message or "; ".join(q.text for q in request.questions)
        params = {
            "sessionId": session.sid,
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": properties,
                                "required": list(properties)},
        }  # fmt: skip
        if request.tool_use_id is not None:
            params["toolCallId"] = session.mapper.tool_id(request.tool_use_id)
        try:
            result = await self._conn.request("elicitation/create", params)
        except (JsonRpcError, ConnectionClosedError) as exc:
            return QuestionAnswer.refuse(f"the ACP client did not answer: {exc}")
        answer = as_dict(result) or {}
        if answer.get("action") != "accept":
            return QuestionAnswer.refuse(f"the ACP client answered {answer.get('action')!r}")
        content = as_dict(answer.get("content")) or {}
        answers: dict[str, list[str]] = {}
        for key, question in keys.items():
            value: object = content.get(key)
            if isinstance(value, bool):
                answers[question.id] = ["true" if value else "false"]
            elif isinstance(value, list):
                answers[question.id] = [str(v) for v in as_list(cast(object, value))]
            elif value is not None:
                answers[question.id] = [str(value)]
        return QuestionAnswer.of(answers)
