"""What a session can be set to: config options, modes and models (in session results and
``session/update``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._base import AcpModel


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
