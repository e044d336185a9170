"""The prompt turn: ``session/prompt``, its result and usage, and ``session/cancel``."""

from __future__ import annotations

from typing import Literal, TypeAlias

from ._base import AcpModel
from .content import ContentBlock

StopReason: TypeAlias = Literal[
    "end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"
]


class PromptRequest(AcpModel):
    session_id: str
    prompt: list[ContentBlock]


class Usage(AcpModel):
    """Token usage of a prompt turn (unstable).  Absent figures stay ``None``."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    thought_tokens: int | None = None
    cached_read_tokens: int | None = None
    cached_write_tokens: int | None = None


class PromptResponse(AcpModel):
    stop_reason: StopReason | str
    usage: Usage | None = None
    user_message_id: str | None = None


class CancelNotification(AcpModel):
    """Params of the ``session/cancel`` notification."""

    session_id: str
