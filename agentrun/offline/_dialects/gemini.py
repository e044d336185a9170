"""The Gemini API (``POST /v1beta/models/<m>:streamGenerateContent?alt=sse`` or
``:generateContent``), as Gemini CLI calls it.

``GenerateContentResponse`` objects, one per SSE event when streamed; function calls are sent
whole; the last response carries the finish reason and ``usageMetadata``. A mid-stream error is
a ``data: {"error": ...}`` event, then the stream ends.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..._vocabulary.messages import Usage as TokenUsage
from .._http import Responder, dumps
from .._script import HttpError, Text, Thinking, ToolCall, Usage
from ._base import Dialect, Served, count, mapping, pieces, tokens

__all__ = ["Gemini"]

#: ``error.status`` by HTTP status.
_ERROR_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class Gemini(Dialect):
    api = "gemini"

    def model_of(self, path: str, payload: Mapping[str, Any]) -> str:
        return path.rsplit("/", 1)[-1].split(":", 1)[0]

    def streams(self, path: str, payload: Mapping[str, Any]) -> bool:
        return path.endswith(":streamGenerateContent")

    def usage_fields(self, usage: Usage) -> dict[str, Any]:
        """``promptTokenCount`` counts the cached tokens too; ``candidatesTokenCount`` leaves
        the thoughts out."""
        return {
            "promptTokenCount": usage.prompt_tokens,
            "candidatesTokenCount": max(0, usage.output_tokens - usage.reasoning_tokens),
            "totalTokenCount": usage.prompt_tokens + usage.output_tokens,
            "cachedContentTokenCount": usage.cache_read_tokens,
            "thoughtsTokenCount": usage.reasoning_tokens,
        }

    def reported_usage(self, served: Served) -> dict[str, Any] | None:
        """A stream cut by an error ends before the response that carries ``usageMetadata``."""
        if served.stream and served.turn.stream_error is not None:
            return None
        return self.usage_fields(served.usage)

    def normalized(self, fields: Mapping[str, Any]) -> TokenUsage:
        """The cached tokens out of ``promptTokenCount``, the thoughts into the output. The API
        has no cache-write figure: the tokens written to the cache stay in the input."""
        cached = count(fields, "cachedContentTokenCount")
        thoughts = count(fields, "thoughtsTokenCount")
        return tokens(
            input=count(fields, "promptTokenCount") - cached,
            output=count(fields, "candidatesTokenCount") + thoughts,
            cache_read=cached,
            thinking=thoughts,
        )

    def answer_usage(self, answer: Mapping[str, Any]) -> dict[str, Any] | None:
        return mapping(answer.get("usageMetadata"))

    def event_usage(
        self, event: Mapping[str, Any], so_far: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Each response may carry ``usageMetadata``, the figures so far: the last one counts."""
        return mapping(event.get("usageMetadata")) or so_far

    def shell_tool(
        self, command: str, extra: dict[str, Any], offered: Collection[str]
    ) -> tuple[str, dict[str, Any]]:
        return "run_shell_command", {"command": command, **extra}

    def error_answer(self, err: HttpError, request_id: str) -> tuple[Any, dict[str, str]]:
        status = err.error_type or _ERROR_STATUS.get(err.status, "INTERNAL")
        body = {"error": {"code": err.status, "message": err.message, "status": status}}
        return body, dict(err.headers)

    async def serve(self, out: Responder, served: Served, keep_alive: bool) -> bool:
        turn = served.turn
        finish = {"end_turn": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS"}[
            turn.resolved_stop_reason()
        ]
        metadata = self.usage_fields(served.usage)
        response_id = f"offline-{served.seq:06d}"

        def response(parts: list[dict[str, Any]], last: bool = False) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            body: dict[str, Any] = {
                "candidates": [candidate],
                "modelVersion": served.model,
                "responseId": response_id,
            }
            if last:
                candidate["finishReason"] = finish
                body["usageMetadata"] = metadata
            return body

        def call_part(block: ToolCall, index: int) -> dict[str, Any]:
            name, args = self.tool_call(block, served.offered)
            call = {"name": name, "args": args, "id": self.tool_id(block, served, index)}
            return {"functionCall": call, "thoughtSignature": "b2ZmbGluZQ=="}

        if not served.stream:
            parts: list[dict[str, Any]] = []
            for i, block in enumerate(turn.content):
                if isinstance(block, Thinking):
                    parts.append({"text": block.text, "thought": True})
                elif isinstance(block, Text):
                    parts.append({"text": block.text})
                else:
                    parts.append(call_part(block, i))
            await out.send_json(200, response(parts, last=True), keep_alive)
            return keep_alive

        await out.start_events(chunked=True, keep_alive=keep_alive, delay=turn.chunk_delay)
        for i, block in enumerate(turn.content):
            if isinstance(block, Thinking):
                for p in pieces(block.text, turn.chunk_chars):
                    await out.event(dumps(response([{"text": p, "thought": True}])))
            elif isinstance(block, Text):
                for p in pieces(block.text, turn.chunk_chars):
                    await out.event(dumps(response([{"text": p}])))
            else:
                await out.event(dumps(response([call_part(block, i)])))
        serr = turn.stream_error
        if serr is not None:
            error = {"error": {"code": 500, "message": serr.message, "status": "INTERNAL"}}
            await out.event(dumps(error))
            await out.finish()
            return False
        await out.event(dumps(response([], last=True)))
        await out.finish()
        return keep_alive
