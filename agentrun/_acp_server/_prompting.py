"""The prompt turn: ``session/prompt`` runs one turn of the hosted library session, streams
what it says to the client as ``session/update`` notifications, and answers with the ACP
``stopReason`` (:func:`stop_reason`) or a JSON-RPC error (:func:`error_data`).
"""

from __future__ import annotations

from typing import Any

from .._vocabulary.errors import AgentrunError, EngineUnavailableError, SessionTerminatedError
from .._vocabulary.summary import TurnSummary
from .._wire.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, JsonRpcError
from ._hosting import HostingServer
from ._models import PromptParams, parse, prompt_text
from ._sessions import AcpSession, now


def stop_reason(summary: TurnSummary | None, cancelled: bool) -> str:
    """The ACP ``stopReason`` of a turn that ended."""
    if cancelled:
        return "cancelled"
    reason = ((summary.stop_reason if summary is not None else None) or "").lower()
    if "cancel" in reason or "interrupt" in reason:
        return "cancelled"
    if "max_tokens" in reason or reason in ("length", "max_output_tokens"):
        return "max_tokens"
    if "refusal" in reason or "content_filter" in reason:
        return "refusal"
    if "max_turn" in reason:
        return "max_turn_requests"
    return "end_turn"


def turn_usage(summary: TurnSummary | None) -> dict[str, Any] | None:
    """The turn's tokens as the ``usage`` of the prompt's answer (the ACP usage RFD), when the
    input and output counts are known."""
    usage = summary.usage if summary is not None else None
    if usage is None or usage.input_tokens is None or usage.output_tokens is None:
        return None
    cache_read, cache_write = usage.cache_read_tokens, usage.cache_write_tokens
    answer: dict[str, Any] = {
        "totalTokens": usage.input_tokens + (cache_read or 0) + (cache_write or 0)
        + usage.output_tokens,
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
    }  # fmt: skip
    optional = {"thoughtTokens": usage.thinking_tokens, "cachedReadTokens": cache_read,
                "cachedWriteTokens": cache_write}  # fmt: skip
    for key, value in optional.items():
        if value is not None:
            answer[key] = value
    return answer


def error_data(exc: AgentrunError) -> dict[str, Any]:
    """The ``data`` of the JSON-RPC error that reports ``exc``."""
    data: dict[str, Any] = {"errorCode": exc.error_code}
    if isinstance(exc, EngineUnavailableError):
        data["unavailable"] = True
    return data


class PromptingServer(HostingServer):
    """Runs the prompts of the hosted sessions."""

    async def _prompt(self, params: Any) -> dict[str, Any]:
        request = parse(PromptParams, params)
        session = self._session(request.session_id)
        text = prompt_text(request.prompt)
        if session.busy:
            raise JsonRpcError(INVALID_REQUEST, "Invalid request: a prompt is already running")
        session.busy = True
        session.cancelled = False
        try:
            if session.dirty or session.hosted is None:
                await self._reopen(session)
            return await self._run_prompt(session, text)
        finally:
            session.busy = False
            session.turn = None

    async def _run_prompt(self, session: AcpSession, text: str) -> dict[str, Any]:
        hosted = session.hosted
        assert hosted is not None
        session.history.begin_turn()
        session.history.append(
            {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}
        )
        if session.title is None:
            session.title = text.strip().splitlines()[0][:80]
        session.prompted = True
        mapper = session.mapper
        mapper.begin_turn()
        failure: AgentrunError | None = None
        turn = hosted.turn(text)
        session.turn = turn
        try:
            async with turn:
                async for message in turn:
                    if message.init is not None and message.init.model:
                        await self._show_model(session, message.init.model)
                    for update in mapper.updates(message):
                        await self._send_update(session, update)
            summary: TurnSummary | None = turn.summary
        except AgentrunError as exc:
            failure = exc
            summary = exc.summary
        session.turn = None
        for update in mapper.end_turn(summary):
            await self._send_update(session, update)
        session.resume_id = hosted.resume_id or session.resume_id
        session.fork = False  # forked by now: later openings go on with the fork's own id
        session.updated_at = now()
        info = {"sessionUpdate": "session_info_update", "title": session.title,
                "updatedAt": session.updated_at}  # fmt: skip
        await self._send_update(session, info)
        if isinstance(failure, SessionTerminatedError):
            session.dirty = True  # the agent is gone: the next prompt reopens the session
        usage = turn_usage(summary)
        if session.cancelled:
            return _answer("cancelled", usage)
        if failure is not None:
            raise JsonRpcError(INTERNAL_ERROR, failure.message, error_data(failure))
        reason = stop_reason(summary, False)
        if reason == "end_turn" and summary is not None and not summary.ok:
            errors = summary.errors
            message = errors[0].message if errors else "the turn failed"
            data: dict[str, Any] = {"errorCode": errors[0].code if errors else None}
            if errors and errors[0].data:
                data["data"] = errors[0].data
            raise JsonRpcError(INTERNAL_ERROR, message, data)
        return _answer(reason, usage)

    async def _show_model(self, session: AcpSession, model: str) -> None:
        """The agent named its model: the client's model option shows it."""
        if model == (session.shown_model or session.model):
            return
        session.shown_model = model
        update = {
            "sessionUpdate": "config_option_update",
            "configOptions": self._config_options(session),
        }
        await self._send_update(session, update)


def _answer(reason: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    answer: dict[str, Any] = {"stopReason": reason}
    if usage is not None:
        answer["usage"] = usage
    return answer
