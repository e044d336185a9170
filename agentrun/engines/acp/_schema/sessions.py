"""Opening and steering sessions: MCP servers, ``session/new`` / ``load`` / ``resume`` /
``fork`` / ``list`` / ``close`` and the ``set_*`` requests."""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import Field, model_validator

from ._base import AcpModel
from .config import SessionConfigOption, SessionModelState, SessionModeState


class EnvVariable(AcpModel):
    name: str
    value: str


class HttpHeader(AcpModel):
    name: str
    value: str


class McpServerStdio(AcpModel):
    name: str
    command: str
    args: list[str] = Field(default_factory=list[str])
    env: list[EnvVariable] = Field(default_factory=list[EnvVariable])


class McpServerHttp(AcpModel):
    type: Literal["http"] = "http"
    name: str
    url: str
    headers: list[HttpHeader] = Field(default_factory=list[HttpHeader])


class McpServerSse(AcpModel):
    type: Literal["sse"] = "sse"
    name: str
    url: str
    headers: list[HttpHeader] = Field(default_factory=list[HttpHeader])


McpServer: TypeAlias = McpServerHttp | McpServerSse | McpServerStdio


class NewSessionRequest(AcpModel):
    cwd: str
    mcp_servers: list[McpServer] = Field(default_factory=list[McpServer])
    additional_directories: list[str] | None = None


class _SessionState(AcpModel):
    modes: SessionModeState | None = None
    models: SessionModelState | None = None
    config_options: list[SessionConfigOption] | None = None


class NewSessionResponse(_SessionState):
    session_id: str


class LoadSessionRequest(AcpModel):
    session_id: str
    cwd: str
    mcp_servers: list[McpServer] = Field(default_factory=list[McpServer])
    additional_directories: list[str] | None = None


class LoadSessionResponse(_SessionState):
    pass


class ResumeSessionRequest(AcpModel):
    session_id: str
    cwd: str
    mcp_servers: list[McpServer] = Field(default_factory=list[McpServer])
    additional_directories: list[str] | None = None


class ResumeSessionResponse(_SessionState):
    pass


class ForkSessionRequest(AcpModel):
    """``session/fork`` (unstable)."""

    session_id: str
    cwd: str
    mcp_servers: list[McpServer] = Field(default_factory=list[McpServer])
    additional_directories: list[str] | None = None


class ForkSessionResponse(_SessionState):
    session_id: str


class ListSessionsRequest(AcpModel):
    cwd: str | None = None
    cursor: str | None = None


class SessionInfo(AcpModel):
    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = None


class ListSessionsResponse(AcpModel):
    sessions: list[SessionInfo] = Field(default_factory=list[SessionInfo])
    next_cursor: str | None = None


class CloseSessionRequest(AcpModel):
    session_id: str


class CloseSessionResponse(AcpModel):
    pass


class SetSessionModeRequest(AcpModel):
    session_id: str
    mode_id: str


class SetSessionModeResponse(AcpModel):
    pass


class SetSessionConfigOptionRequest(AcpModel):
    """``session/set_config_option``; ``type`` becomes ``"boolean"`` for a bool ``value``."""

    session_id: str
    config_id: str
    value: bool | str
    type: Literal["boolean"] | None = None

    @model_validator(mode="after")
    def _boolean_tag(self) -> SetSessionConfigOptionRequest:
        if isinstance(self.value, bool) and self.type is None:
            self.type = "boolean"
        return self


class SetSessionConfigOptionResponse(AcpModel):
    config_options: list[SessionConfigOption] = Field(default_factory=list[SessionConfigOption])


class SetSessionModelRequest(AcpModel):
    """``session/set_model`` (unstable, no longer in the published schema; OpenCode has it)."""

    session_id: str
    model_id: str


class SetSessionModelResponse(AcpModel):
    pass
