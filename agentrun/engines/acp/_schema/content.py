"""Content blocks: text, images, audio and resources, in prompts, messages and tool calls."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Tag

from ._base import AcpModel, CatchAll, tagged_union

Role: TypeAlias = Literal["assistant", "user"]


class Annotations(AcpModel):
    audience: list[Role | str] | None = None
    last_modified: str | None = None
    priority: float | None = None


class TextContent(AcpModel):
    type: Literal["text"] = "text"
    text: str
    annotations: Annotations | None = None


class ImageContent(AcpModel):
    type: Literal["image"] = "image"
    data: str
    mime_type: str
    uri: str | None = None
    annotations: Annotations | None = None


class AudioContent(AcpModel):
    type: Literal["audio"] = "audio"
    data: str
    mime_type: str
    annotations: Annotations | None = None


class ResourceLink(AcpModel):
    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str
    mime_type: str | None = None
    title: str | None = None
    description: str | None = None
    size: int | None = None
    annotations: Annotations | None = None


class TextResourceContents(AcpModel):
    uri: str
    text: str
    mime_type: str | None = None


class BlobResourceContents(AcpModel):
    uri: str
    blob: str
    mime_type: str | None = None


class EmbeddedResource(AcpModel):
    type: Literal["resource"] = "resource"
    resource: TextResourceContents | BlobResourceContents
    annotations: Annotations | None = None


class UnknownContentBlock(CatchAll):
    """A content block of a ``type`` this version does not know; ``raw`` holds it."""

    @property
    def type(self) -> str | None:
        tag = self.raw.get("type")
        return tag if isinstance(tag, str) else None


CONTENT_TAGS = frozenset({"text", "image", "audio", "resource_link", "resource"})

ContentBlock: TypeAlias = Annotated[
    Annotated[TextContent, Tag("text")]
    | Annotated[ImageContent, Tag("image")]
    | Annotated[AudioContent, Tag("audio")]
    | Annotated[ResourceLink, Tag("resource_link")]
    | Annotated[EmbeddedResource, Tag("resource")]
    | Annotated[UnknownContentBlock, Tag("unknown")],
    tagged_union("type", "type", CONTENT_TAGS),
]
