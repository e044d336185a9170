"""Anthropic Messages (``POST /v1/messages``), as Claude Code calls it.

Streamed: ``message_start`` (with the input and cache figures), ``ping``, one
``content_block_start`` / ``content_block_delta``\\* / ``content_block_stop`` per block,
``message_delta`` (stop reason and the final usage) and ``message_stop``; a mid-stream error is an
``event: error`` in place of the last two. Not streamed: one ``message`` object.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..._vocabulary.messages import Usage as TokenUsage
from .._http import Responder, dumps
from .._script import HttpError, Text, Thinking, Usage
from ._base import Dialect, Served, count, json_pieces, mapping, pieces, tokens

__all__ = ["Anthropic"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _cache_creation(usage: Usage) -> dict[str, int]:
    return {
        "ephemeral_5m_input_tokens": usage.cache_write_tokens,
        "ephemeral_1h_input_tokens": 0,
    }


def _start_usage(usage: Usage) -> dict[str, Any]:
    """The usage of ``message_start``: the input figures, one output token so far."""
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "cache_creation": _cache_creation(usage),
        "output_tokens": 1,
        "service_tier": "standard",
    }


class Anthropic(Dialect):
    api = "anthropic"
    tool_id_prefix = "toolu"

    def usage_fields(self, usage: Usage) -> dict[str, Any]:
        """The final usage (``message_delta.usage``): ``input_tokens`` without the cache."""
        return {
            "input_tokens": usage.input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"thinking_tokens": usage.reasoning_tokens},
        }

    def reported_usage(self, served: Served) -> dict[str, Any] | None:
        """The message's usage; for a stream cut by an error, ``message_start``'s."""
        if not served.stream:
            return {
                **self.usage_fields(served.usage),
                "cache_creation": _cache_creation(served.usage),
            }
        if served.turn.stream_error is not None:
            return _start_usage(served.usage)
        return self.usage_fields(served.usage)

    def normalized(self, fields: Mapping[str, Any]) -> TokenUsage:
        """Already the library's convention: ``input_tokens`` leaves the cache out."""
        return tokens(
            input=count(fields, "input_tokens"),
            output=count(fields, "output_tokens"),
            cache_read=count(fields, "cache_read_input_tokens"),
            cache_write=count(fields, "cache_creation_input_tokens"),
            thinking=count(fields, "output_tokens_details", "thinking_tokens"),
        )

    def event_usage(
        self, event: Mapping[str, Any], so_far: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """``message_start`` states the input figures, ``message_delta`` the final ones (those
        it names replace the start's)."""
        kind = event.get("type")
        if kind == "message_start":
            message = mapping(event.get("message")) or {}
            return mapping(message.get("usage")) or so_far
        if kind == "message_delta":
            final = mapping(event.get("usage"))
            if final is not None:
                return {**(so_far or {}), **final}
        return so_far

    def shell_tool(
        self, command: str, extra: dict[str, Any], offered: Collection[str]
    ) -> tuple[str, dict[str, Any]]:
        return "Bash", {"command": command, **extra}

    def error_answer(self, err: HttpError, request_id: str) -> tuple[Any, dict[str, str]]:
        etype = err.error_type or _ERROR_TYPES.get(err.status, "api_error")
        body = {
            "type": "error",
            "error": {"type": etype, "message": err.message},
            "request_id": request_id,
        }
        headers = dict(err.headers)
        headers.setdefault("request-id", request_id)
        return body, headers

    async def serve(self, out: Responder, served: Served, keep_alive: bool) -> bool:
        turn, usage = served.turn, served.usage
        msg_id = f"msg_offline_{served.seq:06d}"
        request_id = f"req_offline_{served.seq:06d}"
        stop = turn.resolved_stop_reason()
        final_usage = self.usage_fields(usage)
        if not served.stream:
            content: list[dict[str, Any]] = []
            for i, block in enumerate(turn.content):
                if isinstance(block, Text):
                    content.append({"type": "text", "text": block.text})
                elif isinstance(block, Thinking):
                    content.append(
                        {"type": "thinking", "thinking": block.text, "signature": block.signature}
                    )
                else:
                    name, args = self.tool_call(block)
                    tid = self.tool_id(block, served, i)
                    content.append({"type": "tool_use", "id": tid, "name": name, "input": args})
            message = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": served.model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": self.reported_usage(served),
            }
            await out.send_json(200, message, keep_alive, headers=[("request-id", request_id)])
            return keep_alive

        await out.start_events(
            chunked=True,
            keep_alive=keep_alive,
            delay=turn.chunk_delay,
            headers=[("request-id", request_id)],
        )
        message_start: dict[str, Any] = {
            "type": "message_start",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": served.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": _start_usage(usage),
            },
        }
        await out.event(dumps(message_start), "message_start")
        await out.event(dumps({"type": "ping"}), "ping")
        for i, block in enumerate(turn.content):
            if isinstance(block, Text):
                start_block: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [
                    {"type": "text_delta", "text": p} for p in pieces(block.text, turn.chunk_chars)
                ]
            elif isinstance(block, Thinking):
                start_block = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": p}
                    for p in pieces(block.text, turn.chunk_chars)
                ]
                deltas.append({"type": "signature_delta", "signature": block.signature})
            else:
                name, args = self.tool_call(block)
                tid = self.tool_id(block, served, i)
                start_block = {"type": "tool_use", "id": tid, "name": name, "input": {}}
                deltas = [
                    {"type": "input_json_delta", "partial_json": p}
                    for p in json_pieces(dumps(args))
                ]
            start = {"type": "content_block_start", "index": i, "content_block": start_block}
            await out.event(dumps(start), "content_block_start")
            for delta in deltas:
                body = {"type": "content_block_delta", "index": i, "delta": delta}
                await out.event(dumps(body), "content_block_delta")
            await out.event(dumps({"type": "content_block_stop", "index": i}), "content_block_stop")
        serr = turn.stream_error
        if serr is not None:
            error = {"type": "error", "error": {"type": serr.error_type, "message": serr.message}}
            await out.event(dumps(error), "error")
            await out.finish()
            return keep_alive
        message_delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": final_usage,
        }
        await out.event(dumps(message_delta), "message_delta")
        await out.event(dumps({"type": "message_stop"}), "message_stop")
        await out.finish()
        return keep_alive
