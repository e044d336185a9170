"""The interface every API dialect of the model server implements, and what they share."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from ..._vocabulary.messages import Usage as TokenUsage
from .._http import Responder
from .._requests import ApiKind
from .._script import HttpError, ToolCall, Turn, Usage

__all__ = [
    "Dialect",
    "Served",
    "count",
    "json_pieces",
    "mapping",
    "openai_error",
    "pieces",
    "tokens",
]


@dataclass(frozen=True)
class Served:
    """One answer being served: the scripted turn, its usage and what the request asked for."""

    turn: Turn
    #: Order of arrival of the request (it names the response's ids).
    seq: int
    #: The model name echoed back.
    model: str
    #: Whether the request asked for a stream.
    stream: bool
    usage: Usage
    #: The tool names the request offered (see :func:`~agentrun.offline.map_tool_call`).
    offered: frozenset[str] = frozenset()


def pieces(text: str, size: int) -> list[str]:
    """``text`` in pieces of ``size`` characters (none for an empty text)."""
    if not text:
        return []
    return [text[i : i + size] for i in range(0, len(text), size)]


def json_pieces(text: str) -> list[str]:
    """Split a JSON text into three roughly equal pieces (as real servers stream arguments)."""
    if len(text) < 6:
        return [text]
    step = math.ceil(len(text) / 3)
    return pieces(text, step)


def count(fields: Mapping[str, Any], *path: str) -> int:
    """The token count at ``path`` in a usage object (0 when absent)."""
    value: Any = fields
    for key in path:
        if not isinstance(value, dict):
            return 0
        value = cast(dict[str, Any], value).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def mapping(value: Any) -> dict[str, Any] | None:
    """``value`` when it is a JSON object, else ``None``."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def tokens(
    *, input: int, output: int, cache_read: int = 0, cache_write: int = 0, thinking: int = 0
) -> TokenUsage:
    """Token figures in the library's convention (:class:`agentrun.Usage`)."""
    return TokenUsage(
        input_tokens=input,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
        thinking_tokens=thinking,
    )


def _shell_command(call: ToolCall) -> str:
    value = call.arguments.get("command", call.arguments.get("cmd", ""))
    if isinstance(value, list):
        return " ".join(str(v) for v in cast(list[Any], value))
    return str(value)


_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error(err: HttpError) -> dict[str, Any]:
    """The error body of the OpenAI APIs (Chat Completions and Responses)."""
    etype = err.error_type or _OPENAI_ERROR_TYPES.get(err.status, "server_error")
    return {
        "error": {
            "message": err.message,
            "type": etype,
            "param": None,
            "code": err.code if err.code is not None else str(err.status),
        }
    }


class Dialect(ABC):
    """One model API: how a scripted turn, its usage and an HTTP error look in it.

    A dialect is stateless; the server keeps one instance per API. It reads the model name and
    the stream flag from the request (:meth:`model_of`, :meth:`streams`), states the usage in
    the API's own terms (:meth:`usage_fields`, :meth:`reported_usage`) and reads it back in the
    library's (:meth:`normalized`), maps the generic ``shell`` tool
    (:meth:`shell_tool`), answers an HTTP error (:meth:`error_answer`) and serves a turn
    (:meth:`serve`).
    """

    api: ClassVar[ApiKind]
    #: Prefix of generated tool-call ids.
    tool_id_prefix: ClassVar[str] = "call"

    def model_of(self, path: str, payload: Mapping[str, Any]) -> str:
        """The model a request names (``fake-model`` when it names none)."""
        model = payload.get("model")
        return model if isinstance(model, str) else "fake-model"

    def streams(self, path: str, payload: Mapping[str, Any]) -> bool:
        """Whether a request asks for a streamed answer."""
        return payload.get("stream") is True

    @abstractmethod
    def usage_fields(self, usage: Usage) -> dict[str, Any]:
        """``usage`` (the script's convention) as this API reports it: its usage object."""

    def reported_usage(self, served: Served) -> dict[str, Any] | None:
        """The usage object the answer to ``served`` carries, or ``None`` when it carries none
        (a stream cut by an error before its usage)."""
        return self.usage_fields(served.usage)

    @abstractmethod
    def normalized(self, fields: Mapping[str, Any]) -> TokenUsage:
        """A usage object of this API in the library's convention: ``input_tokens`` without the
        cache, ``output_tokens`` with the thinking (see :class:`agentrun.Usage`)."""

    def answer_usage(self, answer: Mapping[str, Any]) -> dict[str, Any] | None:
        """The usage object a whole (not streamed) answer of this API carries, or ``None``:
        what a client reads back of :meth:`usage_fields` (the metering proxy's reading)."""
        return mapping(answer.get("usage"))

    @abstractmethod
    def event_usage(
        self, event: Mapping[str, Any], so_far: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The usage object known after one streamed event (its ``data`` parsed), given the one
        known before it (``None`` at first): a client's reading of a stream's usage."""

    @abstractmethod
    def shell_tool(
        self, command: str, extra: dict[str, Any], offered: Collection[str]
    ) -> tuple[str, dict[str, Any]]:
        """The name and arguments of the generic ``shell`` tool running ``command`` (``extra``:
        its other arguments, a copy the dialect may change)."""

    @abstractmethod
    def error_answer(self, err: HttpError, request_id: str) -> tuple[Any, dict[str, str]]:
        """The JSON body of an HTTP error answer, and its headers (``err.headers`` and the
        API's own)."""

    @abstractmethod
    async def serve(self, out: Responder, served: Served, keep_alive: bool) -> bool:
        """Send the answer to ``served``; returns whether the connection stays open."""

    def tool_call(
        self, call: ToolCall, offered: Collection[str] = ()
    ) -> tuple[str, dict[str, Any]]:
        """The tool name and arguments ``call`` becomes in this API."""
        if call.tool != "shell":
            return call.tool, dict(call.arguments)
        extra = {k: v for k, v in call.arguments.items() if k not in ("command", "cmd")}
        return self.shell_tool(_shell_command(call), extra, offered)

    def tool_id(self, call: ToolCall, served: Served, index: int) -> str:
        """The id of a tool call: the scripted one, or one made of the request and the block."""
        if call.id is not None:
            return call.id
        return f"{self.tool_id_prefix}_offline_{served.seq:04d}_{index:02d}"
