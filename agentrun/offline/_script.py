"""Script models for the embedded model server.

A :class:`Script` is a list of :class:`Turn` objects. Every model request the server receives
(except OpenCode's title requests and Anthropic ``count_tokens`` calls) consumes the next turn.
A turn is a list of blocks - :class:`Text`, :class:`Thinking`, :class:`ToolCall` - optionally
ending in a :class:`StreamError`, or a single :class:`HttpError`. The server renders the same
turn in the shape of whichever API was called (Anthropic Messages, OpenAI Responses, OpenAI
Chat Completions), so one script can drive Claude Code, Codex and OpenCode alike.

Scripts are plain pydantic models: build them in Python, or load them from JSON with
:meth:`Script.from_file` / :meth:`Script.from_json`. Example JSON::

    {"turns": [
      {"blocks": [{"type": "text", "text": "Running it."},
                  {"type": "tool_call", "tool": "shell",
                   "arguments": {"command": "echo hi"}}]},
      {"blocks": [{"type": "text", "text": "It printed hi."}],
       "usage": {"input_tokens": 40, "cache_read_tokens": 15000, "output_tokens": 9}}
    ]}

Usage numbers follow the Anthropic convention: ``input_tokens`` is the *uncached* input,
cache reads and writes are separate, and ``reasoning_tokens`` is a part of ``output_tokens``.
The server converts them for the OpenAI APIs (where cached tokens are a subset of the prompt).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DEFAULT_SHELL_COMMAND",
    "EXHAUSTED_TEXT",
    "Block",
    "HttpError",
    "Script",
    "StreamError",
    "Text",
    "Thinking",
    "ToolCall",
    "Turn",
    "Usage",
    "default_script",
]

#: The answer the server gives once every scripted turn has been used.
EXHAUSTED_TEXT = "[agentrun model server] The script has no turns left; this is the fixed fallback."

#: The command the built-in default script asks the agent to run.
DEFAULT_SHELL_COMMAND = "echo hello from agentrun"


class _Model(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid", frozen=True)


class Text(_Model):
    """Assistant text. It is streamed in pieces of ``Turn.chunk_chars`` characters."""

    type: Literal["text"] = "text"
    text: str


class Thinking(_Model):
    """A thinking / reasoning block.

    Anthropic: a ``thinking`` block with ``thinking_delta`` pieces and one ``signature_delta``.
    Responses: a ``reasoning`` item whose summary is ``text``. Chat Completions:
    ``delta.reasoning_content`` pieces before the content.
    """

    type: Literal["thinking"] = "thinking"
    text: str
    signature: str = "c2lnbmF0dXJlLW9mZmxpbmUtdGVzdA=="


class ToolCall(_Model):
    """A tool call.

    ``tool`` is either an exact tool name (sent unchanged) or the generic ``"shell"``, which
    the server maps per API: ``Bash {"command"}`` for Anthropic (Claude Code), ``bash
    {"command", "description"}`` for Chat Completions (OpenCode) and ``exec_command {"cmd",
    "yield_time_ms"}`` for Responses (Codex). For ``"shell"`` put the command line in
    ``arguments["command"]``.
    """

    type: Literal["tool_call"] = "tool_call"
    tool: str = "shell"
    arguments: dict[str, Any] = Field(default_factory=dict[str, Any])
    #: Call id; generated deterministically (``toolu_...`` / ``call_...``) when omitted.
    id: str | None = None


class HttpError(_Model):
    """Answer the request with an HTTP error status and the API's JSON error body.

    ``error_type`` defaults per status (``api_error`` / ``server_error``, ``rate_limit_error``,
    ``overloaded_error``, ``invalid_request_error``, ``authentication_error``). Chat
    Completions errors carry ``retry-after-ms: 50`` unless ``headers`` sets a retry header,
    so OpenCode's retry loop finishes in about 2 s instead of about 70 s.
    """

    type: Literal["http_error"] = "http_error"
    status: int = Field(default=500, ge=400, le=599)
    message: str = "scripted upstream error"
    error_type: str | None = None
    #: OpenAI ``error.code`` (e.g. ``"context_length_exceeded"``).
    code: str | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str])


class StreamError(_Model):
    """End the stream with an in-band error after the preceding blocks.

    Anthropic: ``event: error`` and no ``message_delta``/``message_stop``. Chat Completions:
    a ``data: {"error": ...}`` chunk, then the connection closes. Responses:
    ``response.failed`` with ``error: {code, message}``.
    """

    type: Literal["stream_error"] = "stream_error"
    message: str = "Overloaded"
    error_type: str = "overloaded_error"


Block = Annotated[Text | Thinking | ToolCall | HttpError | StreamError, Field(discriminator="type")]


class Usage(_Model):
    """Token usage of one model call, Anthropic convention.

    ``input_tokens`` excludes cache reads and writes; ``reasoning_tokens`` is part of
    ``output_tokens``. OpenAI shapes get ``prompt/input = input + cache_read + cache_write``
    and ``cached_tokens = cache_read``.
    """

    input_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)

    @property
    def prompt_tokens(self) -> int:
        """All input tokens: uncached + cache reads + cache writes (the context fill)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


StopReason = Literal["end_turn", "tool_use", "max_tokens"]


class Turn(_Model):
    """One scripted model answer."""

    blocks: list[Block] = Field(default_factory=list[Block])
    #: Usage reported for the call. ``None``: estimated from the request size (about four
    #: bytes of request JSON per input token, 90 % of it reported as cache read after the
    #: first call) and the text length; give explicit numbers when a test asserts them.
    usage: Usage | None = None
    #: Override the stop reason. Default: ``tool_use`` when the turn has a tool call, else
    #: ``end_turn``. ``max_tokens`` becomes ``length`` (Chat Completions) or
    #: ``response.incomplete`` (Responses).
    stop_reason: StopReason | None = None
    #: Seconds to wait before sending the response status line.
    delay_before: float = Field(default=0.0, ge=0.0)
    #: Seconds to wait between streamed events.
    chunk_delay: float = Field(default=0.0, ge=0.0)
    #: Characters per text / thinking delta.
    chunk_chars: int = Field(default=24, ge=1)
    #: How many consecutive requests this turn answers (useful for errors an agent retries:
    #: OpenCode makes 6 attempts on 429/5xx, Claude Code 4 on a mid-stream error).
    repeat: int = Field(default=1, ge=1)
    #: Model name echoed back; default: the requested model.
    model: str | None = None

    @model_validator(mode="after")
    def _check_errors(self) -> Turn:
        for i, block in enumerate(self.blocks):
            if isinstance(block, HttpError) and len(self.blocks) != 1:
                raise ValueError("an http_error block must be the only block of its turn")
            if isinstance(block, StreamError) and i != len(self.blocks) - 1:
                raise ValueError("a stream_error block must be the last block of its turn")
        return self

    @property
    def http_error(self) -> HttpError | None:
        first = self.blocks[0] if self.blocks else None
        return first if isinstance(first, HttpError) else None

    @property
    def stream_error(self) -> StreamError | None:
        last = self.blocks[-1] if self.blocks else None
        return last if isinstance(last, StreamError) else None

    @property
    def content(self) -> list[Text | Thinking | ToolCall]:
        """The content blocks (without error blocks)."""
        return [b for b in self.blocks if isinstance(b, (Text, Thinking, ToolCall))]

    def resolved_stop_reason(self) -> StopReason:
        if self.stop_reason is not None:
            return self.stop_reason
        if any(isinstance(b, ToolCall) for b in self.blocks):
            return "tool_use"
        return "end_turn"

    @classmethod
    def text(cls, text: str, *, usage: Usage | None = None) -> Turn:
        """A turn that only answers with ``text``."""
        return cls(blocks=[Text(text=text)], usage=usage)

    @classmethod
    def shell(cls, command: str, *, say: str | None = None, usage: Usage | None = None) -> Turn:
        """A turn that (optionally says something and) runs ``command`` with the shell tool."""
        blocks: list[Block] = [] if say is None else [Text(text=say)]
        blocks.append(ToolCall(tool="shell", arguments={"command": command}))
        return cls(blocks=blocks, usage=usage)

    @classmethod
    def error(
        cls, status: int = 500, message: str = "scripted upstream error", *, repeat: int = 1
    ) -> Turn:
        """A turn that answers with an HTTP error."""
        return cls(blocks=[HttpError(status=status, message=message)], repeat=repeat)


class Script(_Model):
    """The scripted conversation: the model's answers, in order."""

    turns: list[Turn] = Field(default_factory=list[Turn])
    #: Answer to OpenCode's title requests (they never consume a turn).
    title: str = "Offline agentrun session"
    #: Text used once the turns are exhausted.
    exhausted_text: str = EXHAUSTED_TEXT

    @classmethod
    def from_json(cls, data: str | bytes) -> Script:
        """Parse a script from JSON text: ``{"turns": [...]}`` or a bare list of turns."""
        raw: Any = json.loads(data)
        if isinstance(raw, list):
            raw = {"turns": cast(list[Any], raw)}
        return cls.model_validate(raw)

    @classmethod
    def from_file(cls, path: str | Path) -> Script:
        """Load a script from a JSON file."""
        return cls.from_json(Path(path).read_bytes())

    @classmethod
    def of(cls, *turns: Turn | str) -> Script:
        """Build a script from turns; a plain string is a text-only turn."""
        return cls(turns=[Turn.text(t) if isinstance(t, str) else t for t in turns])

    def expanded(self) -> list[tuple[int, Turn]]:
        """The turns as served, with ``repeat`` unrolled: ``(turn index, turn)`` per request."""
        out: list[tuple[int, Turn]] = []
        for i, turn in enumerate(self.turns):
            out.extend((i, turn) for _ in range(turn.repeat))
        return out


def default_script(command: str = DEFAULT_SHELL_COMMAND) -> Script:
    """The built-in demo script.

    Turn 0 says it will run ``command`` and calls the agent's shell tool; turn 1 summarises the
    result. Usage numbers look like a real session (a warm prompt cache), so context gauges and
    cache figures are visible: 18,450 and 18,662 tokens of context in the two calls.
    """
    return Script(
        turns=[
            Turn(
                blocks=[
                    Text(text="I'll run a quick shell command to check the environment."),
                    ToolCall(tool="shell", arguments={"command": command}),
                ],
                usage=Usage(
                    input_tokens=26,
                    cache_read_tokens=14_336,
                    cache_write_tokens=4_088,
                    output_tokens=48,
                ),
            ),
            Turn(
                blocks=[
                    Text(
                        text=(
                            f"The command `{command}` ran successfully and printed its "
                            "greeting. Everything works offline."
                        )
                    ),
                ],
                usage=Usage(
                    input_tokens=94,
                    cache_read_tokens=18_424,
                    cache_write_tokens=144,
                    output_tokens=31,
                ),
            ),
        ]
    )
