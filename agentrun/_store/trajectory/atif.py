"""ATIF, the Agent Trajectory Interchange Format (RFC 0001 of the Harbor project), as strict
pydantic models, written from the RFC: every version from ATIF-v1.0 to ATIF-v1.8 reads, and the
library writes v1.8 (:data:`ATIF_VERSION`; v1.8 added audio content parts).

Every object forbids fields the RFC does not define (``extra`` is where custom data goes); the
document-level rules the RFC states are checked when a document is validated: step ids run from
1, a result's ``source_call_id`` names a tool call of its own step, agent-only fields appear on
agent steps only, a step with ``llm_call_count == 0`` carries no metrics or reasoning, embedded
subagent trajectories carry unique ``trajectory_id``\\ s, and a subagent reference names a
trajectory (``trajectory_id`` or ``trajectory_path``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

__all__ = [
    "ATIF_VERSION",
    "ATIF_VERSIONS",
    "AtifAgent",
    "AtifAudioSource",
    "AtifContentPart",
    "AtifFinalMetrics",
    "AtifImageSource",
    "AtifMetrics",
    "AtifObservation",
    "AtifObservationResult",
    "AtifStep",
    "AtifSubagentRef",
    "AtifToolCall",
    "Trajectory",
]

#: The version the library writes.
ATIF_VERSION = "ATIF-v1.8"

SchemaVersion = Literal[
    "ATIF-v1.0",
    "ATIF-v1.1",
    "ATIF-v1.2",
    "ATIF-v1.3",
    "ATIF-v1.4",
    "ATIF-v1.5",
    "ATIF-v1.6",
    "ATIF-v1.7",
    "ATIF-v1.8",
]

#: Every version the library reads, oldest first (a document of any other is refused).
ATIF_VERSIONS: tuple[str, ...] = get_args(SchemaVersion)


class _Atif(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(extra="forbid")


class AtifImageSource(_Atif):
    """Where an image of a content part is (a file path or a URL)."""

    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


AudioMediaType = Literal[
    "audio/wav",
    "audio/mpeg",
    "audio/mp4",
    "audio/aac",
    "audio/ogg",
    "audio/flac",
    "audio/webm",
    "audio/aiff",
]

#: Spellings of the audio types above that producers write (``audio/mp3`` is no registered type,
#: but providers emit it), read as the registered one, as ATIF 1.8 does.
_AUDIO_SPELLINGS = {
    "audio/mp3": "audio/mpeg",
    "audio/mpga": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/wave": "audio/wav",
    "audio/x-wav": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/m4a": "audio/mp4",
    "audio/x-m4a": "audio/mp4",
    "audio/x-aac": "audio/aac",
    "audio/x-flac": "audio/flac",
    "audio/x-aiff": "audio/aiff",
}


class AtifAudioSource(_Atif):
    """Where the audio of a content part is (a file path or a URL), ATIF 1.8+; ``duration_sec``
    when known. A media type is read in its registered spelling (``audio/mp3`` is
    ``audio/mpeg``)."""

    media_type: AudioMediaType
    path: str
    duration_sec: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("media_type", mode="before")
    @classmethod
    def _registered_spelling(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        lowered = value.strip().lower()
        return _AUDIO_SPELLINGS.get(lowered, lowered)


def _media_kind(source: object) -> str:
    """Which source a media part's ``source`` is, by its media type (``image/...``: an image;
    anything else is read as audio, whose errors then name what audio may be)."""
    media_type: object = (
        cast("dict[str, object]", source).get("media_type")
        if isinstance(source, dict)
        else getattr(source, "media_type", None)
    )
    return "image" if isinstance(media_type, str) and media_type.startswith("image/") else "audio"


class AtifContentPart(_Atif):
    """One part of a multimodal message or result: text, an image (ATIF 1.6+) or audio
    (ATIF 1.8+). A text part has ``text``; a media part a ``source`` of its own kind."""

    type: Literal["text", "image", "audio"]
    text: str | None = None
    source: (
        Annotated[
            Annotated[AtifImageSource, Tag("image")] | Annotated[AtifAudioSource, Tag("audio")],
            Discriminator(_media_kind),
        ]
        | None
    ) = None

    @model_validator(mode="after")
    def _one_payload(self) -> AtifContentPart:
        if self.type == "text":
            if self.text is None or self.source is not None:
                raise ValueError("a text part has 'text' and no 'source'")
            return self
        if self.source is None or self.text is not None:
            raise ValueError(f"an {self.type} part has 'source' and no 'text'")
        if (self.type == "image") != isinstance(self.source, AtifImageSource):
            raise ValueError(
                f"an {self.type} part's source is of another kind ({self.source.media_type})"
            )
        return self


Content = str | list[AtifContentPart]


class AtifToolCall(_Atif):
    """An action of an agent step."""

    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class AtifSubagentRef(_Atif):
    """A delegated subagent's trajectory: embedded (``trajectory_id``) or in a file
    (``trajectory_path``); ``session_id`` is informational only."""

    trajectory_id: str | None = None
    session_id: str | None = None
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _resolvable(self) -> AtifSubagentRef:
        if self.trajectory_id is None and self.trajectory_path is None:
            raise ValueError("a subagent reference needs trajectory_id or trajectory_path")
        return self


class AtifObservationResult(_Atif):
    """One result of an observation; ``source_call_id`` pairs it with a tool call."""

    source_call_id: str | None = None
    content: Content | None = None
    subagent_trajectory_ref: list[AtifSubagentRef] | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(_Atif):
    results: list[AtifObservationResult]


class AtifMetrics(_Atif):
    """One step's model-call figures. ``prompt_tokens`` counts every input token, cached ones
    included; ``cached_tokens`` is the cache-hit part of it; ``completion_tokens`` includes
    reasoning."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class AtifStep(_Atif):
    """One step: a system event, a user message or an agent's model call."""

    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: Content
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @field_validator("timestamp")
    @classmethod
    def _iso_8601(cls, value: str | None) -> str | None:
        if value is not None:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        return value

    @model_validator(mode="after")
    def _agent_fields(self) -> AtifStep:
        if self.source != "agent":
            present = [name for name in _AGENT_ONLY if getattr(self, name) is not None]
            if present:
                raise ValueError(f"{', '.join(present)}: agent steps only ({self.source} step)")
        elif self.llm_call_count == 0 and (
            self.metrics is not None or self.reasoning_content is not None
        ):
            raise ValueError("a step of no model call (llm_call_count 0) has no metrics/reasoning")
        return self


class AtifAgent(_Atif):
    name: str
    version: str
    model_name: str | None = None
    #: OpenAI function-calling definitions of the tools the agent had.
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(_Atif):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Trajectory(_Atif):
    """One ATIF document. ``model_dump(mode="json", exclude_none=True)`` is its JSON form."""

    schema_version: SchemaVersion
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep] = Field(min_length=1)
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[Trajectory] | None = None

    @model_validator(mode="after")
    def _document_rules(self) -> Trajectory:
        for index, step in enumerate(self.steps, start=1):
            if step.step_id != index:
                raise ValueError(f"step_id {step.step_id} at position {index} (sequential from 1)")
            if step.observation is None:
                continue
            calls = {call.tool_call_id for call in step.tool_calls or ()}
            for result in step.observation.results:
                if result.source_call_id is not None and result.source_call_id not in calls:
                    raise ValueError(
                        f"step {index}: result for {result.source_call_id!r}, which is not a "
                        "tool call of the step"
                    )
        seen: set[str] = set()
        for sub in self.subagent_trajectories or ():
            if sub.trajectory_id is None:
                raise ValueError("an embedded subagent trajectory needs a trajectory_id")
            if sub.trajectory_id in seen:
                raise ValueError(f"subagent trajectory_id {sub.trajectory_id!r} is not unique")
            seen.add(sub.trajectory_id)
        return self
