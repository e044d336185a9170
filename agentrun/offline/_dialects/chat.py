"""OpenAI Chat Completions (``POST /v1/chat/completions``), as OpenCode and Qwen Code call it.

Streamed: ``chat.completion.chunk`` objects, close-delimited (``Connection: close``, the shape
OpenCode was recorded with): the role, ``reasoning_content`` and ``content`` pieces,
``tool_calls`` deltas, the finish reason, a last chunk with only the usage, then ``[DONE]``.
A mid-stream error is a ``data: {"error": ...}`` chunk, then the connection closes. Not
streamed: one ``chat.completion`` object.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..._vocabulary.messages import Usage as TokenUsage
from .._http import Responder, dumps
from .._script import HttpError, Text, Thinking, ToolCall, Usage
from ._base import Dialect, Served, count, json_pieces, mapping, openai_error, pieces, tokens

__all__ = ["ChatCompletions"]


class ChatCompletions(Dialect):
    api = "chat"

    def usage_fields(self, usage: Usage) -> dict[str, Any]:
        """``prompt_tokens`` counts the cached tokens too; ``completion_tokens`` the
        reasoning."""
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        }

    def reported_usage(self, served: Served) -> dict[str, Any] | None:
        """A stream cut by an error ends before its usage chunk."""
        if served.stream and served.turn.stream_error is not None:
            return None
        return self.usage_fields(served.usage)

    def normalized(self, fields: Mapping[str, Any]) -> TokenUsage:
        """The cached tokens out of ``prompt_tokens``. The API has no cache-write figure: the
        tokens written to the cache stay in the input."""
        cached = count(fields, "prompt_tokens_details", "cached_tokens")
        return tokens(
            input=count(fields, "prompt_tokens") - cached,
            output=count(fields, "completion_tokens"),
            cache_read=cached,
            thinking=count(fields, "completion_tokens_details", "reasoning_tokens"),
        )

    def event_usage(
        self, event: Mapping[str, Any], so_far: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The usage of the chunk that carries one (the last, with ``include_usage``)."""
        return mapping(event.get("usage")) or so_far

    def shell_tool(
        self, command: str, extra: dict[str, Any], offered: Collection[str]
    ) -> tuple[str, dict[str, Any]]:
        # Qwen Code offers run_shell_command where OpenCode offers bash.
        if "run_shell_command" in offered and "bash" not in offered:
            return "run_shell_command", {"command": command, **extra}
        extra.setdefault("description", "Run a shell command")
        return "bash", {"command": command, **extra}

    def error_answer(self, err: HttpError, request_id: str) -> tuple[Any, dict[str, str]]:
        headers = dict(err.headers)
        if not {k.lower() for k in headers} & {"retry-after", "retry-after-ms"}:
            # OpenCode retries 429/5xx six times; a short retry delay keeps that at about 2 s.
            headers["retry-after-ms"] = "50"
        return openai_error(err), headers

    async def serve(self, out: Responder, served: Served, keep_alive: bool) -> bool:
        turn, model = served.turn, served.model
        finish = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}[
            turn.resolved_stop_reason()
        ]
        chat_id = f"chatcmpl-offline-{served.seq:06d}"
        usage_obj = self.usage_fields(served.usage)
        calls: list[tuple[str, str, str]] = []
        for i, block in enumerate(turn.content):
            if isinstance(block, ToolCall):
                name, args = self.tool_call(block, served.offered)
                calls.append((self.tool_id(block, served, i), name, dumps(args)))
        if not served.stream:
            text = "".join(b.text for b in turn.content if isinstance(b, Text))
            reasoning = "".join(b.text for b in turn.content if isinstance(b, Thinking))
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = [
                    {"id": cid, "type": "function", "function": {"name": n, "arguments": a}}
                    for cid, n, a in calls
                ]
            completion = {
                "id": chat_id,
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage_obj,
            }
            await out.send_json(200, completion, keep_alive)
            return keep_alive

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            return dumps(
                {
                    "id": chat_id,
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                }
            )

        await out.start_events(chunked=False, keep_alive=False, delay=turn.chunk_delay)
        await out.event(chunk({"role": "assistant", "content": ""}))
        call_index = 0
        for block in turn.content:
            if isinstance(block, Thinking):
                for p in pieces(block.text, turn.chunk_chars):
                    await out.event(chunk({"reasoning_content": p}))
            elif isinstance(block, Text):
                for p in pieces(block.text, turn.chunk_chars):
                    await out.event(chunk({"content": p}))
            else:
                cid, name, args = calls[call_index]
                head = {
                    "index": call_index,
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                await out.event(chunk({"tool_calls": [head]}))
                for p in json_pieces(args):
                    piece = {"index": call_index, "function": {"arguments": p}}
                    await out.event(chunk({"tool_calls": [piece]}))
                call_index += 1
        serr = turn.stream_error
        if serr is not None:
            error = {"error": {"message": serr.message, "type": serr.error_type, "code": "500"}}
            await out.event(dumps(error))
            return False
        await out.event(chunk({}, finish))
        final: dict[str, Any] = {
            "id": chat_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": usage_obj,
        }
        await out.event(dumps(final))
        await out.event("[DONE]")
        return False
