"""Pydantic v2 models of the Agent Client Protocol (ACP, protocol version 1) messages we use.

Written against the published ACP v1 JSON Schema (stable, plus the unstable additions that
real agents send: the prompt result's ``usage``, ``session/fork``, ``session/set_model``
and the newer ``session/update`` kinds).  Conformance tests check these models against
that schema and against recorded agent traffic.

Conventions

* Python attributes are snake_case; the wire names are camelCase aliases (``_meta`` is
  :attr:`AcpModel.meta`).  Models accept both names.  Serialize with :func:`to_wire` (or
  ``model_dump(mode="json", by_alias=True, exclude_none=True)``) to get schema-valid JSON.
* **Unknown fields are kept** (``extra="allow"``): they land in ``model_extra`` and are
  written back on dump.  Agents put useful data in fields the schema does not know
  (``_meta.claudeCode``, ``authMethods[].vars``) and newer protocol versions add fields.
* Models of what the agent sends are lenient: only the fields needed to make sense of a
  message are required, and enum-like fields (``kind``, ``status``, ``stopReason``) are
  plain ``str`` typed as ``Literal[...] | str``, so a value from a newer agent still parses.
  Where an agent and the schema disagree, the agent wins.
* Tagged unions (``sessionUpdate``, content ``type``, tool-call content ``type``) never fail
  on an unknown tag: it parses into :class:`UnknownUpdate` / :class:`UnknownContentBlock` /
  :class:`UnknownToolCallContent`, which keep the raw object.  :func:`parse_session_update`
  and :func:`parse_session_notification` also turn a *known* kind that fails validation
  into an :class:`UnknownUpdate` (with the validation error) instead of raising, so no
  update is ever dropped silently.
* Parsing uses :class:`pydantic.TypeAdapter` objects built once at import.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "CLIENT_REQUEST_PARAMS",
    "PROTOCOL_VERSION",
    "AcpModel",
    "AgentCapabilities",
    "AgentMessageChunk",
    "AgentPlanUpdate",
    "AgentThoughtChunk",
    "Annotations",
    "AudioContent",
    "AuthMethod",
    "AvailableCommand",
    "AvailableCommandsUpdate",
    "BlobResourceContents",
    "CancelNotification",
    "CancelledPermissionOutcome",
    "ClientCapabilities",
    "CloseSessionRequest",
    "CloseSessionResponse",
    "CompactionSummaryChunk",
    "CompactionUpdate",
    "ConfigOptionUpdate",
    "ContentBlock",
    "ContentToolCallContent",
    "Cost",
    "CurrentModeUpdate",
    "DiffContent",
    "EmbeddedResource",
    "EnvVariable",
    "FileSystemCapabilities",
    "ForkSessionRequest",
    "ForkSessionResponse",
    "HttpHeader",
    "ImageContent",
    "Implementation",
    "InitializeRequest",
    "InitializeResponse",
    "ListSessionsRequest",
    "ListSessionsResponse",
    "LoadSessionRequest",
    "LoadSessionResponse",
    "McpCapabilities",
    "McpServer",
    "McpServerHttp",
    "McpServerSse",
    "McpServerStdio",
    "Method",
    "ModelInfo",
    "NewSessionRequest",
    "NewSessionResponse",
    "NoticeUpdate",
    "PermissionOption",
    "PermissionOptionKind",
    "PlanEntry",
    "PlanRemovedUpdate",
    "PlanUpdate",
    "PromptCapabilities",
    "PromptRequest",
    "PromptResponse",
    "ReadTextFileRequest",
    "ReadTextFileResponse",
    "RequestPermissionOutcome",
    "RequestPermissionRequest",
    "RequestPermissionResponse",
    "ResourceLink",
    "ResumeSessionRequest",
    "ResumeSessionResponse",
    "SelectedPermissionOutcome",
    "SessionCapabilities",
    "SessionConfigOption",
    "SessionConfigSelectGroup",
    "SessionConfigSelectOption",
    "SessionInfo",
    "SessionInfoUpdate",
    "SessionMode",
    "SessionModeState",
    "SessionModelState",
    "SessionNotification",
    "SessionUpdate",
    "SetSessionConfigOptionRequest",
    "SetSessionConfigOptionResponse",
    "SetSessionModeRequest",
    "SetSessionModeResponse",
    "SetSessionModelRequest",
    "SetSessionModelResponse",
    "StopReason",
    "TerminalToolCallContent",
    "TextContent",
    "TextResourceContents",
    "ToolCallContent",
    "ToolCallLocation",
    "ToolCallProgress",
    "ToolCallStart",
    "ToolCallStatus",
    "ToolCallUpdateFields",
    "ToolKind",
    "UnknownContentBlock",
    "UnknownToolCallContent",
    "UnknownUpdate",
    "Usage",
    "UsageUpdate",
    "UserMessageChunk",
    "WriteTextFileRequest",
    "WriteTextFileResponse",
    "parse_client_request",
    "parse_session_notification",
    "parse_session_update",
    "to_wire",
]

#: The ACP protocol version this client speaks.
PROTOCOL_VERSION: Final = 1


class Method:
    """ACP method names."""

    # client -> agent
    INITIALIZE: Final = "initialize"
    AUTHENTICATE: Final = "authenticate"
    SESSION_NEW: Final = "session/new"
    SESSION_LOAD: Final = "session/load"
    SESSION_RESUME: Final = "session/resume"
    SESSION_FORK: Final = "session/fork"  # unstable
    SESSION_LIST: Final = "session/list"
    SESSION_CLOSE: Final = "session/close"
    SESSION_PROMPT: Final = "session/prompt"
    SESSION_CANCEL: Final = "session/cancel"  # notification
    SESSION_SET_MODE: Final = "session/set_mode"
    SESSION_SET_CONFIG_OPTION: Final = "session/set_config_option"
    SESSION_SET_MODEL: Final = "session/set_model"  # unstable; removed from the schema
    # agent -> client
    SESSION_UPDATE: Final = "session/update"  # notification
    SESSION_REQUEST_PERMISSION: Final = "session/request_permission"
    FS_READ_TEXT_FILE: Final = "fs/read_text_file"
    FS_WRITE_TEXT_FILE: Final = "fs/write_text_file"
    ELICITATION_CREATE: Final = "elicitation/create"
    # both
    CANCEL_REQUEST: Final = "$/cancel_request"


class AcpModel(BaseModel):
    """Base of every ACP model: camelCase aliases, unknown fields kept, ``_meta`` as ``meta``."""

    model_config: ClassVar[ConfigDict] = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
    )

    #: ``_meta``: free-form metadata reserved by ACP for extensions.
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


def to_wire(model: BaseModel) -> dict[str, Any]:
    """The JSON object of ``model`` as sent on the wire (aliases, no ``None`` values)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _as_dict(value: Any) -> dict[str, Any] | None:
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def _tagged(key: str, attr: str, known: frozenset[str]) -> Discriminator:
    """A discriminator that maps tags it does not know to ``"unknown"``."""

    def tag_of(value: Any) -> str:
        if isinstance(value, _Unknown):
            return "unknown"
        fields = _as_dict(value)
        tag = fields.get(key) if fields is not None else getattr(value, attr, None)
        return tag if isinstance(tag, str) and tag in known else "unknown"

    return Discriminator(tag_of)


class _Unknown(AcpModel):
    """Shared behaviour of the catch-all variants: keep the raw object, dump it unchanged."""

    raw: dict[str, Any] = Field(default_factory=dict[str, Any])

    @model_validator(mode="before")
    @classmethod
    def _wrap(cls, data: Any) -> Any:
        # A wire object is wrapped whole; ``Cls(raw=..., error=...)`` is taken as is.
        fields = _as_dict(data)
        if fields is not None and not (
            isinstance(fields.get("raw"), dict) and fields.keys() <= {"raw", "error"}
        ):
            return {"raw": fields}
        return data

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return self.raw


# -- content blocks ----------------------------------------------------------------------

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


class UnknownContentBlock(_Unknown):
    """A content block of a ``type`` this version does not know; ``raw`` holds it."""

    @property
    def type(self) -> str | None:
        tag = self.raw.get("type")
        return tag if isinstance(tag, str) else None


_CONTENT_TAGS = frozenset({"text", "image", "audio", "resource_link", "resource"})

ContentBlock: TypeAlias = Annotated[
    Annotated[TextContent, Tag("text")]
    | Annotated[ImageContent, Tag("image")]
    | Annotated[AudioContent, Tag("audio")]
    | Annotated[ResourceLink, Tag("resource_link")]
    | Annotated[EmbeddedResource, Tag("resource")]
    | Annotated[UnknownContentBlock, Tag("unknown")],
    _tagged("type", "type", _CONTENT_TAGS),
]

# -- tool calls ---------------------------------------------------------------------------

ToolKind: TypeAlias = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
ToolCallStatus: TypeAlias = Literal["pending", "in_progress", "completed", "failed"]


class ContentToolCallContent(AcpModel):
    type: Literal["content"] = "content"
    content: ContentBlock


class DiffContent(AcpModel):
    type: Literal["diff"] = "diff"
    path: str
    new_text: str
    old_text: str | None = None


class TerminalToolCallContent(AcpModel):
    type: Literal["terminal"] = "terminal"
    terminal_id: str


class UnknownToolCallContent(_Unknown):
    """Tool-call content of a ``type`` this version does not know; ``raw`` holds it."""

    @property
    def type(self) -> str | None:
        tag = self.raw.get("type")
        return tag if isinstance(tag, str) else None


ToolCallContent: TypeAlias = Annotated[
    Annotated[ContentToolCallContent, Tag("content")]
    | Annotated[DiffContent, Tag("diff")]
    | Annotated[TerminalToolCallContent, Tag("terminal")]
    | Annotated[UnknownToolCallContent, Tag("unknown")],
    _tagged("type", "type", frozenset({"content", "diff", "terminal"})),
]


class ToolCallLocation(AcpModel):
    path: str
    line: int | None = None


class ToolCallUpdateFields(AcpModel):
    """The fields of a tool call, all optional but the id (``ToolCallUpdate`` in the schema).

    Also the ``toolCall`` of :class:`RequestPermissionRequest`.
    """

    tool_call_id: str
    title: str | None = None
    kind: ToolKind | str | None = None
    status: ToolCallStatus | str | None = None
    content: list[ToolCallContent] | None = None
    locations: list[ToolCallLocation] | None = None
    raw_input: Any = None
    raw_output: Any = None


# -- session/update ----------------------------------------------------------------------


class _Chunk(AcpModel):
    content: ContentBlock
    message_id: str | None = None


class UserMessageChunk(_Chunk):
    session_update: Literal["user_message_chunk"] = "user_message_chunk"


class AgentMessageChunk(_Chunk):
    session_update: Literal["agent_message_chunk"] = "agent_message_chunk"


class AgentThoughtChunk(_Chunk):
    session_update: Literal["agent_thought_chunk"] = "agent_thought_chunk"


class ToolCallStart(ToolCallUpdateFields):
    """``tool_call``: a new tool call (the schema requires ``title``; we do not)."""

    session_update: Literal["tool_call"] = "tool_call"


class ToolCallProgress(ToolCallUpdateFields):
    """``tool_call_update``: new values for some fields of a known tool call."""

    session_update: Literal["tool_call_update"] = "tool_call_update"


class PlanEntry(AcpModel):
    content: str
    priority: Literal["high", "medium", "low"] | str | None = None
    status: Literal["pending", "in_progress", "completed"] | str | None = None


class AgentPlanUpdate(AcpModel):
    """``plan``: the agent's complete current plan (replaces the previous one)."""

    session_update: Literal["plan"] = "plan"
    entries: list[PlanEntry] = Field(default_factory=list[PlanEntry])


class PlanUpdate(AcpModel):
    """``plan_update`` (unstable): one plan by id; ``plan["type"]`` is items, file or markdown."""

    session_update: Literal["plan_update"] = "plan_update"
    plan: dict[str, Any]


class PlanRemovedUpdate(AcpModel):
    """``plan_removed`` (unstable)."""

    session_update: Literal["plan_removed"] = "plan_removed"
    plan_id: str


class AvailableCommand(AcpModel):
    name: str
    description: str = ""
    #: ``{"hint": ...}`` for commands that take free text, else ``None``.
    input: dict[str, Any] | None = None


class AvailableCommandsUpdate(AcpModel):
    session_update: Literal["available_commands_update"] = "available_commands_update"
    available_commands: list[AvailableCommand] = Field(default_factory=list[AvailableCommand])


class CurrentModeUpdate(AcpModel):
    session_update: Literal["current_mode_update"] = "current_mode_update"
    current_mode_id: str


class SessionConfigSelectOption(AcpModel):
    value: str
    name: str
    description: str | None = None


class SessionConfigSelectGroup(AcpModel):
    group: str
    name: str
    options: list[SessionConfigSelectOption] = Field(
        default_factory=list[SessionConfigSelectOption]
    )


class SessionConfigOption(AcpModel):
    """One configuration option (``type`` ``"select"`` or ``"boolean"``)."""

    id: str
    name: str
    type: Literal["select", "boolean"] | str | None = None
    category: Literal["mode", "model", "model_config", "thought_level"] | str | None = None
    description: str | None = None
    current_value: bool | str | None = None
    #: For ``select``: plain options or groups of options.
    options: list[SessionConfigSelectOption | SessionConfigSelectGroup] | None = None


class ConfigOptionUpdate(AcpModel):
    session_update: Literal["config_option_update"] = "config_option_update"
    config_options: list[SessionConfigOption] = Field(default_factory=list[SessionConfigOption])


class SessionInfoUpdate(AcpModel):
    session_update: Literal["session_info_update"] = "session_info_update"
    title: str | None = None
    updated_at: str | None = None


class Cost(AcpModel):
    amount: float
    currency: str


class UsageUpdate(AcpModel):
    """``usage_update``: context-window fill (``used`` of ``size`` tokens) and session cost.

    ``cost`` is **cumulative for the session** when present.
    """

    session_update: Literal["usage_update"] = "usage_update"
    used: int
    size: int
    cost: Cost | None = None


class NoticeUpdate(AcpModel):
    """``notice`` (unstable): a message for the user (``severity`` info/warning/error)."""

    session_update: Literal["notice"] = "notice"
    severity: Literal["info", "warning", "error"] | str
    title: str
    description: str | None = None


class CompactionUpdate(AcpModel):
    """``compaction_update`` (unstable): progress of a context compaction."""

    session_update: Literal["compaction_update"] = "compaction_update"
    compaction_id: str
    status: Literal["in_progress", "completed", "failed", "cancelled"] | str
    summary: list[ContentBlock] | None = None
    error: str | None = None


class CompactionSummaryChunk(AcpModel):
    """``compaction_summary_chunk`` (unstable)."""

    session_update: Literal["compaction_summary_chunk"] = "compaction_summary_chunk"
    compaction_id: str
    content: ContentBlock


class UnknownUpdate(_Unknown):
    """A ``session/update`` this version cannot use; ``raw`` holds the update object.

    ``error`` is set when the kind is known but the object did not validate.
    """

    error: str | None = None

    @property
    def session_update(self) -> str | None:
        tag = self.raw.get("sessionUpdate")
        return tag if isinstance(tag, str) else None


_UPDATE_TAGS = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "plan_update",
        "plan_removed",
        "available_commands_update",
        "current_mode_update",
        "config_option_update",
        "session_info_update",
        "usage_update",
        "notice",
        "compaction_update",
        "compaction_summary_chunk",
    }
)

SessionUpdate: TypeAlias = Annotated[
    Annotated[UserMessageChunk, Tag("user_message_chunk")]
    | Annotated[AgentMessageChunk, Tag("agent_message_chunk")]
    | Annotated[AgentThoughtChunk, Tag("agent_thought_chunk")]
    | Annotated[ToolCallStart, Tag("tool_call")]
    | Annotated[ToolCallProgress, Tag("tool_call_update")]
    | Annotated[AgentPlanUpdate, Tag("plan")]
    | Annotated[PlanUpdate, Tag("plan_update")]
    | Annotated[PlanRemovedUpdate, Tag("plan_removed")]
    | Annotated[AvailableCommandsUpdate, Tag("available_commands_update")]
    | Annotated[CurrentModeUpdate, Tag("current_mode_update")]
    | Annotated[ConfigOptionUpdate, Tag("config_option_update")]
    | Annotated[SessionInfoUpdate, Tag("session_info_update")]
    | Annotated[UsageUpdate, Tag("usage_update")]
    | Annotated[NoticeUpdate, Tag("notice")]
    | Annotated[CompactionUpdate, Tag("compaction_update")]
    | Annotated[CompactionSummaryChunk, Tag("compaction_summary_chunk")]
    | Annotated[UnknownUpdate, Tag("unknown")],
    _tagged("sessionUpdate", "session_update", _UPDATE_TAGS),
]


class SessionNotification(AcpModel):
    """Params of the ``session/update`` notification."""

    session_id: str
    update: SessionUpdate


# -- capabilities and handshake ------------------------------------------------------------


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


# -- sessions ---------------------------------------------------------------------------------


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


class SessionMode(AcpModel):
    id: str
    name: str
    description: str | None = None


class SessionModeState(AcpModel):
    current_mode_id: str
    available_modes: list[SessionMode] = Field(default_factory=list[SessionMode])


class ModelInfo(AcpModel):
    model_id: str
    name: str
    description: str | None = None


class SessionModelState(AcpModel):
    """``models`` of a session result (unstable; sent by claude-code-acp)."""

    current_model_id: str
    available_models: list[ModelInfo] = Field(default_factory=list[ModelInfo])


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


# -- prompt turn ------------------------------------------------------------------------------

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


# -- agent -> client requests ------------------------------------------------------------------

PermissionOptionKind: TypeAlias = Literal[
    "allow_once", "allow_always", "reject_once", "reject_always"
]


class PermissionOption(AcpModel):
    option_id: str
    name: str
    kind: PermissionOptionKind | str


class RequestPermissionRequest(AcpModel):
    session_id: str
    tool_call: ToolCallUpdateFields
    options: list[PermissionOption]


class SelectedPermissionOutcome(AcpModel):
    outcome: Literal["selected"] = "selected"
    option_id: str


class CancelledPermissionOutcome(AcpModel):
    outcome: Literal["cancelled"] = "cancelled"


RequestPermissionOutcome: TypeAlias = Annotated[
    SelectedPermissionOutcome | CancelledPermissionOutcome, Field(discriminator="outcome")
]


class RequestPermissionResponse(AcpModel):
    outcome: RequestPermissionOutcome


class ReadTextFileRequest(AcpModel):
    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class ReadTextFileResponse(AcpModel):
    content: str


class WriteTextFileRequest(AcpModel):
    session_id: str
    path: str
    content: str


class WriteTextFileResponse(AcpModel):
    pass


#: Params models of the requests an agent may send to the client, by method.
CLIENT_REQUEST_PARAMS: Final[dict[str, type[AcpModel]]] = {
    Method.SESSION_REQUEST_PERMISSION: RequestPermissionRequest,
    Method.FS_READ_TEXT_FILE: ReadTextFileRequest,
    Method.FS_WRITE_TEXT_FILE: WriteTextFileRequest,
}

# -- parsing ----------------------------------------------------------------------------------

_UPDATE_ADAPTER: TypeAdapter[SessionUpdate] = TypeAdapter(SessionUpdate)


def parse_session_update(update: Any) -> SessionUpdate:
    """Parse one ``update`` object; never raises (falls back to :class:`UnknownUpdate`)."""
    try:
        return _UPDATE_ADAPTER.validate_python(update)
    except ValidationError as exc:
        fields = _as_dict(update)
        raw = fields if fields is not None else {"value": update}
        return UnknownUpdate(raw=raw, error=_short(exc))


def parse_session_notification(params: Any) -> SessionNotification:
    """Parse ``session/update`` params.

    A bad ``update`` becomes an :class:`UnknownUpdate`; raises :class:`ValidationError` only
    when ``params`` is not an object with a string ``sessionId``.
    """
    try:
        return SessionNotification.model_validate(params)
    except ValidationError:
        given = _as_dict(params)
        if given is None or not isinstance(given.get("sessionId"), str):
            raise
        fields = dict(given)
        fields["update"] = parse_session_update(fields.get("update"))
        return SessionNotification.model_validate(fields)


def parse_client_request(method: str, params: Any) -> AcpModel | None:
    """Parse the params of an agent->client request; ``None`` for a method we do not model.

    Raises :class:`ValidationError` when the params do not fit the method.
    """
    model = CLIENT_REQUEST_PARAMS.get(method)
    if model is None:
        return None
    return model.model_validate(params)


def _short(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in errors[:3]]
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more
