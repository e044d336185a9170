"""``initialize``: capabilities of both sides, the agent's identity and authentication methods."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ._base import PROTOCOL_VERSION, AcpModel


class Implementation(AcpModel):
    name: str
    version: str
    title: str | None = None


class FileSystemCapabilities(AcpModel):
    read_text_file: bool = False
    write_text_file: bool = False


class ClientCapabilities(AcpModel):
    fs: FileSystemCapabilities = Field(default_factory=FileSystemCapabilities)
    terminal: bool = False
    #: ``{"form": {}}``: the client answers form elicitations (omitted: it does not).
    elicitation: dict[str, Any] | None = None


class PromptCapabilities(AcpModel):
    image: bool = False
    audio: bool = False
    embedded_context: bool = False


class McpCapabilities(AcpModel):
    http: bool = False
    sse: bool = False


class SessionCapabilities(AcpModel):
    """Optional session methods the agent supports: each is an object (often ``{}``) or absent."""

    list: dict[str, Any] | None = None
    delete: dict[str, Any] | None = None
    resume: dict[str, Any] | None = None
    close: dict[str, Any] | None = None
    fork: dict[str, Any] | None = None
    additional_directories: dict[str, Any] | None = None


class AgentCapabilities(AcpModel):
    load_session: bool = False
    prompt_capabilities: PromptCapabilities = Field(default_factory=PromptCapabilities)
    mcp_capabilities: McpCapabilities = Field(default_factory=McpCapabilities)
    session_capabilities: SessionCapabilities = Field(default_factory=SessionCapabilities)
    auth: dict[str, Any] | None = None


class AuthMethod(AcpModel):
    """An authentication method; ``type`` is absent for agent-handled methods."""

    id: str
    name: str
    description: str | None = None
    type: str | None = None


class InitializeRequest(AcpModel):
    protocol_version: int = PROTOCOL_VERSION
    client_capabilities: ClientCapabilities = Field(default_factory=ClientCapabilities)
    client_info: Implementation | None = None


class InitializeResponse(AcpModel):
    protocol_version: int
    agent_capabilities: AgentCapabilities = Field(default_factory=AgentCapabilities)
    auth_methods: list[AuthMethod] = Field(default_factory=list[AuthMethod])
    agent_info: Implementation | None = None
