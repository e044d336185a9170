"""OpenAI Responses (``POST /v1/responses``), as Codex calls it.

Streamed: ``response.created``, ``response.in_progress``, per output item its ``added`` /
delta / ``done`` events, then ``response.completed`` with the usage (``response.incomplete``
for ``max_tokens``, ``response.failed`` for a mid-stream error). Not streamed: one ``response``
object.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..._vocabulary.messages import Usage as TokenUsage
from .._http import Responder, dumps
from .._script import HttpError, Text, Thinking, ToolCall, Usage
from ._base import Dialect, Served, count, json_pieces, mapping, openai_error, pieces, tokens

__all__ = ["Responses"]


class Responses(Dialect):
    api = "responses"

    def usage_fields(self, usage: Usage) -> dict[str, Any]:
        """``input_tokens`` counts the cached tokens too; ``output_tokens`` the reasoning."""
        return {
            "input_tokens": usage.prompt_tokens,
            "input_tokens_details": {
                "cached_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
            },
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
        }

    def normalized(self, fields: Mapping[str, Any]) -> TokenUsage:
        """The cached and cache-written tokens out of ``input_tokens``. (``cache_write_tokens``
        is this server's; an agent that does not read it counts those tokens as input.)"""
        cached = count(fields, "input_tokens_details", "cached_tokens")
        written = count(fields, "input_tokens_details", "cache_write_tokens")
        return tokens(
            input=count(fields, "input_tokens") - cached - written,
            output=count(fields, "output_tokens"),
            cache_read=cached,
            cache_write=written,
            thinking=count(fields, "output_tokens_details", "reasoning_tokens"),
        )

    def event_usage(
        self, event: Mapping[str, Any], so_far: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The usage of the terminal event's response (completed, incomplete or failed)."""
        if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            response = mapping(event.get("response")) or {}
            return mapping(response.get("usage")) or so_far
        return so_far

    def shell_tool(
        self, command: str, extra: dict[str, Any], offered: Collection[str]
    ) -> tuple[str, dict[str, Any]]:
        extra.pop("description", None)
        extra.setdefault("yield_time_ms", 1000)
        return "exec_command", {"cmd": command, **extra}

    def error_answer(self, err: HttpError, request_id: str) -> tuple[Any, dict[str, str]]:
        return openai_error(err), dict(err.headers)

    def _tool_item(self, block: ToolCall, served: Served, i: int) -> dict[str, Any]:
        """A tool call as an output item. Besides function calls: ``web_search`` (a
        ``web_search_call`` item, ``arguments["query"]``), ``apply_patch`` (a custom tool call
        whose input is ``arguments["input"]``) and ``mcp__<server>__<tool>`` (a function call
        in the ``mcp__<server>`` namespace, as Codex offers MCP tools)."""
        call_id = self.tool_id(block, served, i)
        item_id = f"fc_offline_{served.seq:04d}_{i:02d}"
        if block.tool == "web_search":
            query = str(block.arguments.get("query", ""))
            return {
                "id": f"ws_offline_{served.seq:04d}_{i:02d}",
                "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": query},
            }
        if block.tool == "apply_patch":
            return {
                "id": item_id,
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": call_id,
                "name": "apply_patch",
                "input": str(block.arguments.get("input", "")),
            }
        name, args = self.tool_call(block)
        item: dict[str, Any] = {
            "id": item_id,
            "type": "function_call",
            "status": "completed",
            "call_id": call_id,
            "name": name,
            "arguments": dumps(args),
        }
        if name.startswith("mcp__") and name.count("__") >= 2:
            namespace, _, tool = name.rpartition("__")
            item.update(namespace=namespace, name=tool)
        return item

    def _items(self, served: Served) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for i, block in enumerate(served.turn.content):
            if isinstance(block, Text):
                items.append(
                    {
                        "id": f"msg_offline_{served.seq:04d}_{i:02d}",
                        "type": "message",
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                    }
                )
            elif isinstance(block, Thinking):
                items.append(
                    {
                        "id": f"rs_offline_{served.seq:04d}_{i:02d}",
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": block.text}],
                        "encrypted_content": block.signature,
                    }
                )
            else:
                items.append(self._tool_item(block, served, i))
        return items

    async def serve(self, out: Responder, served: Served, keep_alive: bool) -> bool:
        turn = served.turn
        resp_id = f"resp_offline_{served.seq:06d}"
        usage_obj = self.usage_fields(served.usage)
        items = self._items(served)
        serr = turn.stream_error
        if serr is not None:
            status, terminal = "failed", "response.failed"
        elif turn.resolved_stop_reason() == "max_tokens":
            status, terminal = "incomplete", "response.incomplete"
        else:
            status, terminal = "completed", "response.completed"

        def response_obj(state: str, output: list[dict[str, Any]]) -> dict[str, Any]:
            obj: dict[str, Any] = {
                "id": resp_id,
                "object": "response",
                "created_at": 0,
                "status": state,
                "model": served.model,
                "output": output,
            }
            if state in ("completed", "incomplete", "failed"):
                obj["usage"] = usage_obj
            if state == "incomplete":
                obj["incomplete_details"] = {"reason": "max_output_tokens"}
            if state == "failed" and serr is not None:
                obj["error"] = {"code": serr.error_type, "message": serr.message}
            return obj

        if not served.stream:
            await out.send_json(200, response_obj(status, items), keep_alive)
            return keep_alive

        seq = 0

        async def emit(event: str, payload: dict[str, Any]) -> None:
            nonlocal seq
            body = {"type": event, "sequence_number": seq, **payload}
            seq += 1
            await out.event(dumps(body), event)

        await out.start_events(chunked=True, keep_alive=keep_alive, delay=turn.chunk_delay)
        await emit("response.created", {"response": response_obj("in_progress", [])})
        await emit("response.in_progress", {"response": response_obj("in_progress", [])})
        for idx, item in enumerate(items):
            await emit("response.output_item.added", {"output_index": idx, "item": _added(item)})
            common = {"output_index": idx, "item_id": item["id"]}
            kind = item["type"]
            if kind == "message":
                text = item["content"][0]["text"]
                part = {**common, "content_index": 0}
                empty: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
                await emit("response.content_part.added", {**part, "part": empty})
                for p in pieces(text, turn.chunk_chars):
                    await emit("response.output_text.delta", {**part, "delta": p})
                await emit("response.output_text.done", {**part, "text": text})
                await emit("response.content_part.done", {**part, "part": item["content"][0]})
            elif kind == "reasoning":
                text = item["summary"][0]["text"]
                part = {**common, "summary_index": 0}
                summary = {"type": "summary_text", "text": ""}
                await emit("response.reasoning_summary_part.added", {**part, "part": summary})
                for p in pieces(text, turn.chunk_chars):
                    await emit("response.reasoning_summary_text.delta", {**part, "delta": p})
                await emit("response.reasoning_summary_text.done", {**part, "text": text})
                summary = {"type": "summary_text", "text": text}
                await emit("response.reasoning_summary_part.done", {**part, "part": summary})
            elif kind == "custom_tool_call":
                for p in pieces(item["input"], turn.chunk_chars):
                    await emit("response.custom_tool_call_input.delta", {**common, "delta": p})
                done = {**common, "input": item["input"]}
                await emit("response.custom_tool_call_input.done", done)
            elif kind == "function_call":
                for p in json_pieces(item["arguments"]):
                    await emit("response.function_call_arguments.delta", {**common, "delta": p})
                done = {**common, "arguments": item["arguments"]}
                await emit("response.function_call_arguments.done", done)
            await emit("response.output_item.done", {"output_index": idx, "item": item})
        await emit(terminal, {"response": response_obj(status, items)})
        await out.finish()
        return keep_alive


def _added(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as ``response.output_item.added`` announces it: in progress, empty."""
    kind = item["type"]
    if kind == "message":
        return {**item, "status": "in_progress", "content": []}
    if kind == "reasoning":
        return {**item, "summary": []}
    if kind == "custom_tool_call":
        return {**item, "status": "in_progress", "input": ""}
    if kind == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    return {**item, "status": "in_progress"}
