"""What an ACP client sends the server, validated by small models of the server's own.

Only the fields the server reads are declared; everything else (``_meta``, fields of newer
protocol versions) is allowed and ignored. A request that does not validate is answered with
JSON-RPC ``-32602`` (invalid params) naming the field, and the server goes on.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._wire.jsonrpc import JsonRpcError

__all__ = [
    "ForkParams",
    "InitializeParams",
    "ListParams",
    "LoadParams",
    "NewParams",
    "PromptParams",
    "SessionParams",
    "SetConfigParams",
    "SetModeParams",
    "SetModelParams",
    "parse",
    "prompt_text",
]


class _Params(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(extra="allow", populate_by_name=True)


def _absolute_dir(value: str) -> str:
    if "\0" in value:
        raise ValueError("cwd contains a NUL character")
    if not os.path.isabs(value):
        raise ValueError(f"cwd {value!r} is not an absolute path")
    if not os.path.isdir(value):
        raise ValueError(f"cwd {value!r} is not a directory")
    return os.path.normpath(value)


class InitializeParams(_Params):
    protocol_version: int = Field(alias="protocolVersion")
    client_capabilities: dict[str, Any] = Field(default_factory=dict, alias="clientCapabilities")
    client_info: dict[str, Any] | None = Field(default=None, alias="clientInfo")


class NewParams(_Params):
    cwd: str
    mcp_servers: list[Any] = Field(default_factory=list, alias="mcpServers")

    _check_cwd = field_validator("cwd")(_absolute_dir)


class SessionParams(_Params):
    session_id: str = Field(alias="sessionId", min_length=1)


class LoadParams(SessionParams):
    cwd: str
    mcp_servers: list[Any] = Field(default_factory=list, alias="mcpServers")

    _check_cwd = field_validator("cwd")(_absolute_dir)


class ForkParams(SessionParams):
    cwd: str
    mcp_servers: list[Any] = Field(default_factory=list, alias="mcpServers")

    _check_cwd = field_validator("cwd")(_absolute_dir)


class ListParams(_Params):
    cwd: str | None = None
    cursor: str | None = None


class SetModeParams(SessionParams):
    mode_id: str = Field(alias="modeId")


class SetModelParams(SessionParams):
    model_id: str = Field(alias="modelId", min_length=1)


class SetConfigParams(SessionParams):
    config_id: str = Field(alias="configId")
    value: str | bool
    type: Literal["boolean"] | None = None


class PromptParams(SessionParams):
    prompt: list[dict[str, Any]] = Field(min_length=1)


_P = TypeVar("_P", bound=_Params)


def parse(model: type[_P], params: Any) -> _P:
    """``params`` as ``model``, or the JSON-RPC invalid-params error naming what is wrong."""
    if not isinstance(params, dict):
        raise JsonRpcError.invalid_params("params must be an object")
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        raise JsonRpcError.invalid_params(f"{where}: {first['msg']}") from None


def prompt_text(blocks: list[dict[str, Any]]) -> str:
    """The prompt's content blocks as the one text a turn takes: text as it is, a resource
    link as a reference, an embedded text resource inline under its URI. Images and audio
    (not advertised) are refused."""
    parts: list[str] = []
    for index, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            name = block.get("name") if isinstance(block.get("name"), str) else block["uri"]
            parts.append(f"[{name}]({block['uri']})")
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource: dict[str, Any] = block["resource"]
            text, uri = resource.get("text"), resource.get("uri")
            if not isinstance(text, str) or not isinstance(uri, str):
                raise JsonRpcError.invalid_params(
                    f"prompt.{index}: only text resources can be embedded"
                )
            parts.append(f'<context uri="{uri}">\n{text}\n</context>')
        else:
            raise JsonRpcError.invalid_params(
                f"prompt.{index}: content of type {kind!r} is not supported (text, "
                "resource_link and text resources are)"
            )
    text = "\n\n".join(p for p in parts if p)
    if not text.strip():
        raise JsonRpcError.invalid_params("prompt: the prompt has no text")
    if "\0" in text:
        raise JsonRpcError.invalid_params("prompt: the prompt contains a NUL character")
    return text
