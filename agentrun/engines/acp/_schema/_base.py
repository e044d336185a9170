"""What every ACP model shares: the method names, the base model, the wire form and the
catch-all variant of tagged unions."""

from __future__ import annotations

from typing import Any, ClassVar, Final, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "PROTOCOL_VERSION",
    "AcpModel",
    "CatchAll",
    "Method",
    "as_dict",
    "short_error",
    "tagged_union",
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
    """The JSON object of ``model`` as sent on the wire (aliases, no ``None`` values):
    ``model.model_dump(mode="json", by_alias=True, exclude_none=True)``, asked of the model's
    serializer directly (``model_dump``'s own call costs a quarter of a small model's dump)."""
    return type(model).__pydantic_serializer__.to_python(
        model, mode="json", by_alias=True, exclude_none=True
    )


def as_dict(value: Any) -> dict[str, Any] | None:
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def tagged_union(key: str, attr: str, known: frozenset[str]) -> Discriminator:
    """A discriminator that maps tags it does not know to ``"unknown"``."""

    def tag_of(value: Any) -> str:
        if isinstance(value, CatchAll):
            return "unknown"
        fields = as_dict(value)
        tag = fields.get(key) if fields is not None else getattr(value, attr, None)
        return tag if isinstance(tag, str) and tag in known else "unknown"

    return Discriminator(tag_of)


class CatchAll(AcpModel):
    """Shared behaviour of the catch-all variants: keep the raw object, dump it unchanged."""

    raw: dict[str, Any] = Field(default_factory=dict[str, Any])

    @model_validator(mode="before")
    @classmethod
    def _wrap(cls, data: Any) -> Any:
        # A wire object is wrapped whole; ``Cls(raw=..., error=...)`` is taken as is.
        fields = as_dict(data)
        if fields is not None and not (
            isinstance(fields.get("raw"), dict) and fields.keys() <= {"raw", "error"}
        ):
            return {"raw": fields}
        return data

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, Any]:
        return self.raw


def short_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in errors[:3]]
    more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more
