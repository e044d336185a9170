"""Text, thought and user-message chunks -> deltas and complete messages.

``agent_message_chunk`` -> ``text_delta`` per chunk, and one complete ``text`` per message once it
ends (a chunk of another message or kind, a tool call, or the end of the turn);
``agent_thought_chunk`` likewise -> ``thinking_delta`` / ``thinking``; ``user_message_chunk``
(replay) -> a complete ``system`` message ``user_message``. Images, resources and audio pass on
whole as ``system`` messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..._vocabulary.messages import Message, MessageType
from ._meta import adapter_notice, call_usage
from ._schema import AgentMessageChunk, AgentThoughtChunk, TextContent, UserMessageChunk, to_wire
from ._session_state import SessionState

__all__ = ["Block", "BlockKind", "MessageBlocks"]

# Message kinds as module constants: an enum's attribute look-up costs more than a global's.
_SYSTEM = MessageType.SYSTEM
_TEXT = MessageType.TEXT
_TEXT_DELTA = MessageType.TEXT_DELTA
_THINKING = MessageType.THINKING
_THINKING_DELTA = MessageType.THINKING_DELTA

BlockKind = Literal["text", "thinking", "user"]


@dataclass
class Block:
    """The message being streamed: its chunks so far."""

    kind: BlockKind
    message_id: str | None
    replayed: bool
    parts: list[str] = field(default_factory=list[str])


class MessageBlocks(SessionState):
    """The message block being streamed (on top of :class:`SessionState`)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._block: Block | None = None

    def _chunk(
        self,
        kind: BlockKind,
        chunk: AgentMessageChunk | AgentThoughtChunk | UserMessageChunk,
        raw: Any,
    ) -> list[Message]:
        content = chunk.content
        if not isinstance(content, TextContent):
            # Images, resources, audio: passed on whole, not part of a text block.
            out = self._announce_pending()
            out.append(
                self._msg(
                    type=_SYSTEM,
                    subtype=chunk.session_update,
                    message_id=chunk.message_id,
                    data=to_wire(chunk),
                    raw=raw,
                )
            )
            return out
        return self._text_chunk(kind, content.text, chunk.message_id, chunk.meta, raw)

    def _text_chunk(
        self,
        kind: BlockKind,
        text: str,
        message_id: str | None,
        meta: dict[str, Any] | None,
        raw: Any,
    ) -> list[Message]:
        """A chunk of text (``text``, validated: a chunk's model or the wire schema's)."""
        notice = None
        if meta and kind == "text":
            usage = call_usage(meta)
            if usage is not None and not text:
                # One model call's usage on an empty chunk (Qwen Code), not text.
                self.call_usage.append(usage)
                return []
            notice = adapter_notice(meta)
        if notice is not None:
            # A notice from the adapter (a billing or mode warning), not the model's answer.
            out = self._announce_pending()
            out.append(
                self._msg(
                    type=_SYSTEM,
                    subtype="notice",
                    text=text,
                    data={"level": notice.get("level")},
                    raw=raw,
                )
            )
            return out
        out: list[Message] = []
        block = self._block
        if block is None or block.kind != kind or block.message_id != message_id:
            out.extend(self._flush_block())
            out.extend(self._announce_pending())
            block = self._block = Block(kind, message_id, self.replaying)
        else:
            out.extend(self._announce_pending())
        block.parts.append(text)
        if text and kind != "user" and self.deltas:
            delta = _TEXT_DELTA if kind == "text" else _THINKING_DELTA
            out.append(self._msg(type=delta, text=text, message_id=message_id, raw=raw))
        return out

    def _flush_block(self) -> list[Message]:
        block, self._block = self._block, None
        if block is None:
            return []
        text = "".join(block.parts)
        if not text:
            return []
        if block.kind == "user":
            return [
                self._msg(
                    block.replayed,
                    type=_SYSTEM,
                    subtype="user_message",
                    text=text,
                    message_id=block.message_id,
                )
            ]
        kind = _TEXT if block.kind == "text" else _THINKING
        return [self._msg(block.replayed, type=kind, text=text, message_id=block.message_id)]

    def _announce_pending(self, but: str | None = None) -> list[Message]:
        """Announce the tool calls held back for their input (the tool-call layer)."""
        raise NotImplementedError
