"""Requests an agent sends to the client: permission requests and file-system access."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import Field

from ._base import AcpModel, Method
from .tool_calls import ToolCallUpdateFields

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


def parse_client_request(method: str, params: Any) -> AcpModel | None:
    """Parse the params of an agent->client request; ``None`` for a method we do not model.

    Raises :class:`ValidationError` when the params do not fit the method.
    """
    model = CLIENT_REQUEST_PARAMS.get(method)
    if model is None:
        return None
    return model.model_validate(params)
