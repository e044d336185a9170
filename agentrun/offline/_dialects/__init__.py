"""The model APIs the model server speaks, one module each, behind one small interface
(:class:`~._base.Dialect`): Anthropic Messages, OpenAI Responses, Chat Completions and the
Gemini API."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .._requests import ApiKind
from .._script import ToolCall
from ._base import Dialect, Served
from .anthropic import Anthropic
from .chat import ChatCompletions
from .gemini import Gemini
from .responses import Responses

__all__ = ["DIALECTS", "Dialect", "Served", "map_tool_call"]

#: One dialect per model API.
DIALECTS: dict[ApiKind, Dialect] = {
    d.api: d for d in (Anthropic(), Responses(), ChatCompletions(), Gemini())
}


def map_tool_call(
    api: ApiKind, call: ToolCall, offered: Collection[str] = ()
) -> tuple[str, dict[str, Any]]:
    """The tool name and arguments ``call`` becomes in ``api``'s shape; ``offered`` (the tool
    names of the request) tells agents of one API apart (Qwen Code's ``run_shell_command``
    beside OpenCode's ``bash``)."""
    return DIALECTS.get(api, DIALECTS["responses"]).tool_call(call, offered)
