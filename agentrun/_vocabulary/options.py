"""Session options: the vocabulary of what to run, validated before any process starts.

:class:`SessionOptions` says *what* to run (model, prompts, limits, permissions, working
directory); each engine maps it onto its agent's flags or protocol. Values that an engine would
put on a command line are rejected when they could be read as a flag (a leading ``-``) or contain
NUL, so a hostile or mistaken value never turns into an option of the agent program.

Options an engine cannot honour are not ignored silently: the engine says so in a ``system``
message (subtype ``unsupported_option``) at the start of the turn.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .env import validate_env
from .errors import configuration_error
from .metering import UsageMeter
from .permissions import PermissionHandler
from .policy_settings import Budget, ContextPolicy
from .questions import QuestionHandler
from .sandbox import Sandbox
from .session_store import SessionStore

__all__ = ["ENGINE_OPTION_KEYS", "Effort", "Mode", "SessionOptions"]

Effort = Literal["low", "medium", "high", "max"]
Mode = Literal["plan", "act"]


def _no_nul(name: str, value: str) -> str:
    if "\0" in value:
        raise ValueError(f"{name} contains a NUL character")
    return value


def _argv_safe(name: str, value: str) -> str:
    _no_nul(name, value)
    if not value.strip():
        raise ValueError(f"{name} is empty")
    if value.startswith("-"):
        raise ValueError(f"{name} {value!r} starts with '-' and would be read as a flag")
    return value


#: The engine-specific options each engine reads, by namespace (``options["<namespace>.<name>"]``);
#: a name ending in ``.`` is a prefix (``codex.config.<key>``). An unknown name in one of these
#: namespaces is a :class:`ConfigurationError` naming the known ones; namespaces of engines from
#: other packages are not checked.
ENGINE_OPTION_KEYS: dict[str, tuple[str, ...]] = {
    "claude": ("permission_mode",),
    "codex": ("profile", "ephemeral", "skip_git_repo_check", "config."),
    "opencode": ("permission", "title", "variant"),
    "acp": ("mode", "config."),
}
#: Built-in engines that read their options under another engine's namespace.
_OPTION_NAMESPACES: dict[str, str] = {
    "codex-app-server": "codex",
    "opencode-acp": "acp",
    "claude-acp": "acp",
    "codex-acp": "acp",
    "qwen": "acp",
    "gemini": "acp",
}


def _check_engine_option(key: str) -> None:
    namespace, _, name = key.partition(".")
    if namespace in _OPTION_NAMESPACES:
        real = _OPTION_NAMESPACES[namespace]
        raise ValueError(
            f"unknown engine option {key!r}: the {namespace} engine reads its options as "
            f"'{real}.<name>' (known: {_known_options(real)})"
        )
    known = ENGINE_OPTION_KEYS.get(namespace)
    if known is None:
        return
    if any(
        (name.startswith(k) and len(name) > len(k)) if k.endswith(".") else name == k for k in known
    ):
        return
    raise ValueError(f"unknown engine option {key!r} (known: {_known_options(namespace)})")


def _known_options(namespace: str) -> str:
    return ", ".join(
        f"{namespace}.{k}<key>" if k.endswith(".") else f"{namespace}.{k}"
        for k in ENGINE_OPTION_KEYS[namespace]
    )


class SessionOptions(BaseModel):
    """Everything an engine needs to start a session. Immutable; copy with ``model_copy``.

    ``hitl`` ("human in the loop") decides what happens when the agent wants to use a tool that
    needs permission: ``True`` asks ``permission_handler`` (and denies, recording a denial, when
    there is none); ``False`` approves everything (the agent's bypass / auto-approve mode);
    ``None`` keeps the agent's own default policy.

    ``mode="plan"`` asks the agent to plan without changing anything; ``"act"`` is normal work.
    ``resume_id`` continues an earlier session (an id the engine reported as ``resume_id``);
    with ``fork=True`` the agent copies it into a new session where it can.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True
    )

    cwd: str | None = None
    model: str | None = None
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    max_turns: int | None = Field(default=None, gt=0)
    thinking_budget: int | None = Field(default=None, gt=0)
    effort: Effort | None = None
    mode: Mode | None = None
    hitl: bool | None = None
    permission_handler: PermissionHandler | None = Field(default=None, exclude=True)
    #: Answers the agent's questions (``None``: every question is refused at once).
    question_handler: QuestionHandler | None = Field(default=None, exclude=True)
    allowed_tools: tuple[str, ...] = ()
    add_dirs: tuple[str, ...] = ()
    agent_id: str | None = None
    resume_id: str | None = None
    fork: bool = False
    continue_last: bool = False
    env: dict[str, str] = Field(default_factory=dict[str, str])
    #: Start from the caller's environment (``True``) or only from ``env`` (``False``).
    inherit_env: bool = True
    #: Override the context-window size (tokens) when the agent does not report it.
    context_window_tokens: int | None = Field(default=None, gt=0)
    #: Ask for streaming deltas where the agent offers them.
    partial_messages: bool = True
    #: Explicit path of the agent program (else ``engines/`` then ``PATH``).
    binary: str | None = None
    #: Engine-specific options, keyed ``"<engine>.<name>"`` (e.g. ``claude.permission_mode``).
    options: dict[str, str] = Field(default_factory=dict[str, str])
    #: Extra command-line arguments appended verbatim (escape hatch; validated for NUL only).
    extra_args: tuple[str, ...] = ()
    #: Context thresholds announced as ``context_threshold`` messages (``None``: none).
    context_policy: ContextPolicy | None = ContextPolicy()
    #: Limits on cost, tokens, turns and wall time; share one object to limit several sessions.
    budget: Budget | None = Field(default=None, exclude=True)
    #: Keep a durable journal of the session (``agentrun sessions``): ``True`` in the default
    #: store (:class:`~agentrun.JsonlSessionStore`), or a :class:`~agentrun.SessionStore`.
    journal: SessionStore | bool | None = Field(default=None, exclude=True)
    #: Run the agent and every process it starts in a sandbox (:class:`~agentrun.Sandbox`):
    #: only the workspace, its home and what the value lists; no network but its ports; a clean
    #: environment. Raises :class:`~agentrun.EngineUnavailableError` at start where it cannot be
    #: had (never runs unsandboxed instead).
    sandbox: Sandbox | None = None
    #: The metering proxy's meter for this session (``CredentialProxy.client(...)``): each
    #: turn's usage is checked against what the proxy counted (``TurnSummary.metered``).
    meter: UsageMeter | None = Field(default=None, exclude=True)

    @field_validator("model", "agent_id", "resume_id")
    @classmethod
    def _flag_safe(cls, value: str | None, info: Any) -> str | None:
        return None if value is None else _argv_safe(info.field_name, value)

    @field_validator("system_prompt", "append_system_prompt", "binary")
    @classmethod
    def _nul_free(cls, value: str | None, info: Any) -> str | None:
        return None if value is None else _no_nul(info.field_name, value)

    @field_validator("allowed_tools")
    @classmethod
    def _tools(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_argv_safe("allowed_tools entry", v) for v in value)

    @field_validator("add_dirs")
    @classmethod
    def _dirs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for d in value:
            _argv_safe("add_dirs entry", d)
            if not os.path.isabs(d):
                raise ValueError(f"add_dirs entry {d!r} is not an absolute path")
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_no_nul("extra_args entry", v) for v in value)

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _no_nul("cwd", value)
        return os.path.abspath(value)

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, str]) -> dict[str, str]:
        for key, v in value.items():
            if "." not in key:
                raise ValueError(f"option {key!r} must be named '<engine>.<name>'")
            _check_engine_option(key)
            _no_nul(f"option {key}", v)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SessionOptions:
        validate_env(self.env)
        if self.fork and self.resume_id is None and not self.continue_last:
            raise ValueError("fork=True needs resume_id or continue_last")
        if self.continue_last and self.resume_id is not None:
            raise ValueError("continue_last and resume_id are exclusive")
        return self

    def __init__(self, **options: Any) -> None:
        # Validation failures surface as ConfigurationError (a ValueError), naming the option.
        try:
            super().__init__(**options)
        except ValidationError as exc:
            raise configuration_error(exc, "session option") from None

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # Environment values are secrets more often than not: a repr, a log line or an error
        # message shows their names only.
        for name, value in super().__repr_args__():
            if name == "env":
                yield name, self._masked_env()
            else:
                yield name, value

    def _masked_env(self) -> dict[str, str]:
        return dict.fromkeys(self.env, "***")

    def masked_dump(self) -> dict[str, Any]:
        """The options as JSON values, environment values masked as in the repr (what a
        session journal records)."""
        return {**self.model_dump(mode="json"), "env": self._masked_env()}

    def option(self, engine: str, name: str, default: str | None = None) -> str | None:
        """An engine-specific option (``options["<engine>.<name>"]``)."""
        return self.options.get(f"{engine}.{name}", default)
