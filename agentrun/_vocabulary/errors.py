"""The exception tree of agentrun.

Every exception the library raises on purpose derives from :class:`AgentrunError`; the second
column is each class's ``error_code`` (``abc``: in :mod:`agentrun.abc`, ``acp``: in
``agentrun.engines.acp``; the same tree as ``docs/vocabulary.md``)::

    AgentrunError                        agentrun
    ├── ConfigurationError               configuration          bad option, env or argv (ValueError)
    ├── UsageError                       usage                  used out of order (a RuntimeError)
    ├── EngineUnavailableError           engine_unavailable     agent program missing (install hint)
    ├── SendNotSupportedError            send_not_supported     this process takes no more prompts
    ├── CompactionNotSupportedError      compaction_not_supported   the agent cannot compact
    ├── SteeringNotSupportedError        steering_not_supported     no input to a running turn
    ├── ForkNotSupportedError            fork_not_supported     the agent cannot fork a session
    ├── TurnInProgressError              turn_in_progress       a second turn while one runs
    ├── SessionNotFoundError             session_not_found      a resume / load id the agent lacks
    ├── JournalError                     journal                the session's journal not written
    │   └── JournalInUseError            journal_in_use         another session holds the journal
    ├── ProtocolError                    protocol               the wire broken beyond recovery
    │   └── LineTooLongError             line_too_long
    ├── JsonRpcError                     jsonrpc                abc: a JSON-RPC error object
    ├── RequestTimeoutError              request_timeout        abc: no response in time
    │   └── AcpTimeoutError              acp_timeout            acp: a start-up request timed out
    ├── SessionTerminatedError           session_terminated     the session is over
    │   ├── ProcessExitError             process_exit           exit code or signal, stderr tail
    │   ├── SessionClosedError           session_closed         closed while a turn was running
    │   ├── SessionLostError             session_lost           its worker (a Ray actor) died
    │   └── ConnectionClosedError        connection_closed      abc: the JSON-RPC connection ended
    └── TurnError                        turn                   partial summary attached
        ├── AgentAccountError            agent_account          the agent cannot run a turn at all
        │   ├── NotAuthenticatedError    not_authenticated      not logged in, no or invalid key
        │   └── QuotaExceededError       quota_exceeded         no quota, credit or billing
        ├── BudgetExceededError          budget                 a Budget limit was reached
        ├── NoResultError                no_result              the stream ended without a result
        ├── OutputValidationError        output_validation      the answer failed the output schema
        └── TurnTimeoutError             turn_timeout           kind "total" or "idle"

Errors carry the context a caller needs to act: the engine name, the exit code and the tail
of stderr, the limit that was exceeded, and (for errors that end a turn) the partial
:class:`~agentrun.TurnSummary` of what the turn produced before it failed.

Problems that do not end the session (an oversized line, a non-JSON line, an API error the
agent reported) are *not* raised: they arrive as ``error`` messages in the stream, carrying
one of the ``code`` strings in :data:`ERROR_CODES`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pydantic import ValidationError

    from .messages import ErrorInfo
    from .summary import TurnSummary

__all__ = [
    "ERROR_CODES",
    "AgentAccountError",
    "AgentrunError",
    "BudgetExceededError",
    "CompactionNotSupportedError",
    "ConfigurationError",
    "EngineUnavailableError",
    "ForkNotSupportedError",
    "JournalError",
    "JournalInUseError",
    "LineTooLongError",
    "NoResultError",
    "NotAuthenticatedError",
    "OutputValidationError",
    "ProcessExitError",
    "ProtocolError",
    "QuotaExceededError",
    "SendNotSupportedError",
    "SessionClosedError",
    "SessionLostError",
    "SessionNotFoundError",
    "SessionTerminatedError",
    "SteeringNotSupportedError",
    "TurnError",
    "TurnInProgressError",
    "TurnTimeoutError",
    "UsageError",
]

#: ``ErrorInfo.code`` values the library itself produces. Engines may also pass through
#: codes reported by the agent (e.g. ``"rate_limit"`` or ``"APIError"``).
ERROR_CODES: dict[str, str] = {
    "line_too_long": "an output line exceeded the framer's byte limit and was skipped",
    "invalid_json": "an output line was not JSON (kept raw in the message's data)",
    "invalid_utf8": "an output line was not valid UTF-8 (kept raw in the message's data)",
    "protocol": "a JSON line did not have the shape the engine expects",
    "process_exit": "the agent program exited during a turn",
    "no_result": "the stream ended without the turn's result",
    "timeout": "the turn's total timeout fired and the turn was cancelled",
    "idle_timeout": "no message arrived within the idle timeout and the turn was cancelled",
    "cancelled": "the turn was cancelled by the caller",
    "api_error": "the model API failed (status and text in the message)",
    "permission_callback": "the permission callback raised; the tool use was denied",
    "session_not_found": "the agent does not know the session id",
    "session_lost": "the worker running the session (a Ray actor or its node) died",
    "session_closed": "the session was closed while the turn was running",
    "budget": "a fleet or session budget was spent; the turn was stopped or not started",
    "output_validation": "the final answer did not validate against the turn's output schema",
    "not_authenticated": "the agent is not logged in, or its API key is missing or invalid",
    "quota_exceeded": "the agent's account has no quota, credit or billing left",
    "journal": "the session's journal could not be written; it ends there, the turn went on",
}


def _snake(name: str) -> str:
    """``SessionNotFound`` -> ``session_not_found``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _rebuild(cls: type[AgentrunError], message: str) -> AgentrunError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    return error


class AgentrunError(Exception):
    """Base class of every error agentrun raises on purpose."""

    #: The engine name (``"claude"``, ``"opencode"``, ...) when one is involved.
    engine: str | None
    #: For errors that ended a turn: what the turn produced before it failed.
    summary: TurnSummary | None = None
    #: A stable snake_case identifier of the kind of error (``"session_not_found"``), also the
    #: ``code`` of the ``error`` message a failed turn ends with. Derived from the class name.
    error_code: ClassVar[str] = "agentrun"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "error_code" not in cls.__dict__:
            cls.error_code = _snake(cls.__name__.removesuffix("Error"))

    def __init__(self, message: str, *, engine: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.engine = engine

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable with every attribute (Ray, multiprocessing): the subclasses' keyword-only
        # constructors cannot be called again from the args alone.
        return (_rebuild, (type(self), self.message), dict(self.__dict__))


class ConfigurationError(AgentrunError, ValueError):
    """A session option, environment entry or argument was rejected before anything started."""

    def __init__(self, message: str, *, option: str | None = None, engine: str | None = None):
        super().__init__(message, engine=engine)
        #: The option that was rejected (``"model"``, ``"env"``, ...).
        self.option = option


def configuration_error(exc: ValidationError, what: str) -> ConfigurationError:
    """The :class:`ConfigurationError` for a model that rejected its arguments (``what``: "session
    option", "budget" ...), naming the first field at fault."""
    first = exc.errors()[0]
    location = ".".join(str(p) for p in first["loc"]) or None
    message = str(first["msg"]).removeprefix("Value error, ")
    where = f"{location}: " if location else ""
    return ConfigurationError(f"invalid {what} {where}{message}", option=location)


class UsageError(AgentrunError, RuntimeError):
    """An object of the library was used out of order: a session or connection started twice,
    a turn or a fleet stream iterated before ``async with`` entered it, a server asked for its
    port before it started. A mistake in the calling code, not in the agent."""


class EngineUnavailableError(AgentrunError):
    """The agent program was not found or cannot be started."""

    def __init__(
        self,
        message: str,
        *,
        engine: str | None = None,
        install_hint: str | None = None,
        searched: tuple[str, ...] = (),
    ) -> None:
        full = message if install_hint is None else f"{message}\n  install: {install_hint}"
        super().__init__(full, engine=engine)
        #: A command that installs the program.
        self.install_hint = install_hint
        #: The places that were searched, in order.
        self.searched = searched


class SendNotSupportedError(AgentrunError):
    """This process cannot accept a prompt (it is closed, or the engine has no way to send)."""


class CompactionNotSupportedError(AgentrunError):
    """The agent offers no way to compact its context (see ``Session.can_compact``)."""


class SteeringNotSupportedError(AgentrunError):
    """``Turn.steer``: this engine's agent takes no input while a turn runs."""


class ForkNotSupportedError(AgentrunError):
    """A fork of a session was asked of an engine whose agent cannot fork sessions."""


class TurnInProgressError(AgentrunError):
    """A turn was started while another turn of the same process was still running."""


class SessionNotFoundError(AgentrunError):
    """The agent does not know the session (resume) id it was given."""

    def __init__(self, message: str, *, session_id: str | None = None, engine: str | None = None):
        super().__init__(message, engine=engine)
        self.session_id = session_id


class JournalError(AgentrunError):
    """The session's journal (``SessionOptions(journal=...)``) could not be written: the store
    failed (a full disk, a directory that cannot be written). At the start the session does not
    start; later the journal ends there, the turns go on, and the session's close raises it."""

    def __init__(self, message: str, *, journal_id: str | None = None, engine: str | None = None):
        super().__init__(message, engine=engine)
        #: The journal's id.
        self.journal_id = journal_id


class JournalInUseError(JournalError):
    """Another session (in this process or another) holds the journal: two sessions never
    write one journal at once. Raised before the agent starts."""


class ProtocolError(AgentrunError):
    """The agent's output could not be understood and the session cannot go on safely."""


class LineTooLongError(ProtocolError):
    """An output line was larger than the configured limit.

    The framer reports this as an ``error`` message with code ``"line_too_long"`` and keeps
    reading; the exception type exists so callers can raise it from such a message.
    """

    def __init__(self, size: int, limit: int, *, engine: str | None = None) -> None:
        super().__init__(
            f"output line of at least {size} bytes exceeds the limit of {limit} bytes",
            engine=engine,
        )
        self.size = size
        self.limit = limit


class SessionTerminatedError(AgentrunError):
    """The session has ended: it was closed, or its program is gone."""


class ProcessExitError(SessionTerminatedError):
    """The agent program exited while it was still needed.

    ``exit_code`` is the process's exit status, or ``None`` when it died from a signal
    (then ``signal`` is the signal number). ``stderr_tail`` holds the last lines of its
    standard error, which is always captured.
    """

    def __init__(
        self,
        message: str,
        *,
        exit_code: int | None,
        signal: int | None = None,
        stderr_tail: str = "",
        engine: str | None = None,
    ) -> None:
        text = message
        if stderr_tail.strip():
            text = f"{message}\n--- stderr (tail) ---\n{stderr_tail.rstrip()}"
        super().__init__(text, engine=engine)
        self.exit_code = exit_code
        self.signal = signal
        self.stderr_tail = stderr_tail


class SessionClosedError(SessionTerminatedError):
    """The session was closed (``aclose()``, from any task) while a turn was running; the turn
    was cancelled in the agent first. Carries the turn's partial summary."""


class SessionLostError(SessionTerminatedError):
    """The worker that ran the session (a Ray actor, or its node) died; the session is over and
    the turn that was running is not repeated."""


class TurnError(AgentrunError):
    """A turn could not complete. ``summary`` holds what the turn produced before that."""

    def __init__(
        self, message: str, *, summary: TurnSummary | None = None, engine: str | None = None
    ) -> None:
        super().__init__(message, engine=engine)
        self.summary = summary


class BudgetExceededError(TurnError):
    """A :class:`~agentrun.Budget` limit was reached: the turn was refused before it started, or
    interrupted when it crossed the limit (its summary's ``stop_reason`` is ``"budget"``).
    ``limit`` is ``"cost"``, ``"tokens"``, ``"turns"`` or ``"wall"``."""

    error_code: ClassVar[str] = "budget"

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        summary: TurnSummary | None = None,
        engine: str | None = None,
    ) -> None:
        super().__init__(message, summary=summary, engine=engine)
        self.limit = limit


class NoResultError(TurnError):
    """The agent's stream ended (or the program exited cleanly) without the turn's result."""


class OutputValidationError(TurnError):
    """A turn's final answer did not validate against its ``output=`` schema, also after the one
    repair turn. ``raw`` is the answer's text, ``errors`` what was wrong with it; ``summary`` is
    the last turn's."""

    def __init__(
        self,
        message: str,
        *,
        raw: str | None,
        errors: list[str],
        summary: TurnSummary | None = None,
        engine: str | None = None,
    ) -> None:
        super().__init__(message, summary=summary, engine=engine)
        self.raw = raw
        self.errors = errors


class TurnTimeoutError(TurnError):
    """The turn took longer than its ``timeout`` or was silent for longer than ``idle_timeout``.

    The backend turn was cancelled before this was raised; ``kind`` is ``"total"`` or
    ``"idle"`` and ``seconds`` the limit that fired.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        seconds: float,
        summary: TurnSummary | None = None,
        engine: str | None = None,
    ) -> None:
        super().__init__(message, summary=summary, engine=engine)
        self.kind = kind
        self.seconds = seconds


class AgentAccountError(TurnError):
    """The agent could not run the turn at all because of its account: it is not logged in, its
    API key is missing or rejected, or its quota or credit is spent. Raised at the end of the turn
    (after the stream delivered the agent's own error) instead of returning an empty summary.

    The message is the agent's own words; ``status`` is the HTTP status the model API answered,
    when the agent reported one, and ``agent_code`` the agent's own error code."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        agent_code: str | None = None,
        summary: TurnSummary | None = None,
        engine: str | None = None,
    ) -> None:
        super().__init__(message, summary=summary, engine=engine)
        self.status = status
        self.agent_code = agent_code


class NotAuthenticatedError(AgentAccountError):
    """The agent is not logged in, has no API key, or its key was rejected (HTTP 401/403)."""

    error_code: ClassVar[str] = "not_authenticated"


class QuotaExceededError(AgentAccountError):
    """The agent's account has no quota, credit or billing left (HTTP 402, or a 429 that says
    so); a plain rate limit is not this error."""


#: Agent error codes (as engines report them in ``ErrorInfo.code``) that say the account failed.
_AUTH_CODES = frozenset(
    {
        "authentication_failed",
        "authentication_error",
        "auth_required",
        "unauthorized",
        "invalid_api_key",
        "permission_error",
        "not_authenticated",
    }
)
_QUOTA_CODES = frozenset(
    {"insufficient_quota", "billing_error", "billing_hard_limit_reached", "quota_exceeded"}
)
#: The agents' and the model APIs' wording, lower case.
_AUTH_WORDS = re.compile(
    r"not logged in|please run /login|invalid api key|invalid x-api-key|incorrect api key"
    r"|api key not valid|authentication required|authentication_error|401 unauthorized"
    r"|no api key|missing api key|api key is missing"
    r"|missing environment variable: `?\w*(?:key|token)",
)
_QUOTA_WORDS = re.compile(
    r"insufficient_quota|exceeded your current quota|credit balance is too low|out of credits"
    r"|billing_hard_limit|payment required|usage limit|quota exceeded",
)


def account_failure(error: ErrorInfo) -> type[AgentAccountError] | None:
    """The :class:`AgentAccountError` class an agent's reported error stands for, or ``None``
    for any other failure (a 500, a rate limit, a tool error ...). The one place that reads the
    engines' signals: the HTTP status, the agent's error code and its wording."""
    status = error.status
    code = (error.code or "").lower()
    text = error.message.lower()
    if error.data:
        text = f"{text} {error.data}".lower()
    if status == 402 or code in _QUOTA_CODES or _QUOTA_WORDS.search(text):
        return QuotaExceededError
    if status in (401, 403) or code in _AUTH_CODES or _AUTH_WORDS.search(text):
        return NotAuthenticatedError
    return None


def account_error(errors: list[ErrorInfo], engine: str | None) -> AgentAccountError | None:
    """The typed error for a failed turn whose fatal error was the agent's account, else
    ``None``. Looks at the turn's fatal errors, the last first."""
    for error in reversed(errors):
        if not error.fatal:
            continue
        kind = account_failure(error)
        if kind is not None:
            message = error.message
            details = (error.data or {}).get("details")
            if isinstance(details, str) and details and details not in message:
                message = f"{message}: {details}"  # a JSON-RPC error's own words
            return kind(message, status=error.status, agent_code=error.code, engine=engine)
    return None
