"""agentrun: drive Claude Code, Codex, OpenCode and any ACP agent through one vocabulary.

The public API is exactly what ``__all__`` lists; every other module is private. The engines,
``replay``, the trajectories (``Trajectory``, ``ReplayedTurn``, ``to_atif``, ``from_atif``),
fleets, ``compare`` and the Ray backend are loaded on first use, so ``import agentrun`` stays
light.
"""

from typing import TYPE_CHECKING, Any

from ._bases.translator import Translator
from ._store.jsonl_store import JsonlSessionStore
from ._turns.engine import Engine
from ._turns.run import run_turn
from ._turns.session import Session, WireTap
from ._turns.turn import MessageCallback, Turn, TurnContext
from ._version import VERSION as __version__
from ._vocabulary.context import Catalog, ContextTracker, ModelInfo, default_catalog
from ._vocabulary.errors import (
    ERROR_CODES,
    AgentAccountError,
    AgentrunError,
    BudgetExceededError,
    CompactionNotSupportedError,
    ConfigurationError,
    EngineUnavailableError,
    ForkNotSupportedError,
    JournalError,
    JournalInUseError,
    LineTooLongError,
    NoResultError,
    NotAuthenticatedError,
    OutputValidationError,
    ProcessExitError,
    ProtocolError,
    QuotaExceededError,
    SendNotSupportedError,
    SessionClosedError,
    SessionLostError,
    SessionNotFoundError,
    SessionTerminatedError,
    SteeringNotSupportedError,
    TurnError,
    TurnInProgressError,
    TurnTimeoutError,
    UsageError,
)
from ._vocabulary.limits import TurnLimits
from ._vocabulary.messages import (
    BackgroundTask,
    ContextSource,
    ContextWindow,
    ErrorInfo,
    InitMeta,
    Message,
    MessageType,
    PermissionDenial,
    ProcessMeta,
    ToolCall,
    Usage,
    UsageSource,
)
from ._vocabulary.metering import MeteredUsage, UsageMeter
from ._vocabulary.options import Effort, Mode, SessionOptions
from ._vocabulary.permissions import (
    PermissionDecision,
    PermissionHandler,
    PermissionOption,
    PermissionRequest,
    approve_all,
    deny_all,
)
from ._vocabulary.policy_settings import Budget, BudgetLimit, ContextPolicy
from ._vocabulary.prices import ModelPrice, PriceCatalog, default_prices
from ._vocabulary.questions import (
    Question,
    QuestionAnswer,
    QuestionHandler,
    QuestionOption,
    QuestionRecord,
    QuestionRequest,
)
from ._vocabulary.sandbox import Sandbox, SandboxBackend
from ._vocabulary.session_store import SessionStore
from ._vocabulary.summary import (
    ContextSummary,
    SessionTotals,
    SteeredInput,
    ToolCallSummary,
    TurnSummary,
    WindDown,
    WoundDown,
)
from .engines._registry import engine_names, get_engine, get_translator

if TYPE_CHECKING:
    from ._fleets.compare import CompareRun, FilesChanged, compare
    from ._fleets.fleet import (
        EngineFactory,
        Fleet,
        FleetEvent,
        FleetEventKind,
        FleetResult,
        FleetRun,
        FleetSessionRecord,
        FleetTask,
        FleetTurnRecord,
    )
    from ._fleets.ray import RayEngine, RaySession
    from ._store.trajectory.atif import Trajectory
    from ._store.trajectory.export import to_atif
    from ._store.trajectory.import_ import from_atif
    from ._store.trajectory.turns import ReplayedTurn
    from .engines._replay import replay
    from .offline._proxy import CredentialProxy, ProxyClient

#: Public names defined in modules loaded on first use.
_LAZY: dict[str, str] = {
    "CompareRun": "._fleets.compare",
    "FilesChanged": "._fleets.compare",
    "compare": "._fleets.compare",
    "EngineFactory": "._fleets.fleet",
    "Fleet": "._fleets.fleet",
    "FleetEvent": "._fleets.fleet",
    "FleetEventKind": "._fleets.fleet",
    "FleetResult": "._fleets.fleet",
    "FleetRun": "._fleets.fleet",
    "FleetSessionRecord": "._fleets.fleet",
    "FleetTask": "._fleets.fleet",
    "FleetTurnRecord": "._fleets.fleet",
    "RayEngine": "._fleets.ray",
    "RaySession": "._fleets.ray",
    "replay": ".engines._replay",
    "CredentialProxy": ".offline._proxy",
    "ProxyClient": ".offline._proxy",
    "Trajectory": "._store.trajectory.atif",
    "ReplayedTurn": "._store.trajectory.turns",
    "from_atif": "._store.trajectory.import_",
    "to_atif": "._store.trajectory.export",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrun' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ERROR_CODES",
    "AgentAccountError",
    "AgentrunError",
    "BackgroundTask",
    "Budget",
    "BudgetExceededError",
    "BudgetLimit",
    "Catalog",
    "CompactionNotSupportedError",
    "CompareRun",
    "ConfigurationError",
    "ContextPolicy",
    "ContextSource",
    "ContextSummary",
    "ContextTracker",
    "ContextWindow",
    "CredentialProxy",
    "Effort",
    "Engine",
    "EngineFactory",
    "EngineUnavailableError",
    "ErrorInfo",
    "FilesChanged",
    "Fleet",
    "FleetEvent",
    "FleetEventKind",
    "FleetResult",
    "FleetRun",
    "FleetSessionRecord",
    "FleetTask",
    "FleetTurnRecord",
    "ForkNotSupportedError",
    "InitMeta",
    "JournalError",
    "JournalInUseError",
    "JsonlSessionStore",
    "LineTooLongError",
    "Message",
    "MessageCallback",
    "MessageType",
    "MeteredUsage",
    "Mode",
    "ModelInfo",
    "ModelPrice",
    "NoResultError",
    "NotAuthenticatedError",
    "OutputValidationError",
    "PermissionDecision",
    "PermissionDenial",
    "PermissionHandler",
    "PermissionOption",
    "PermissionRequest",
    "PriceCatalog",
    "ProcessExitError",
    "ProcessMeta",
    "ProtocolError",
    "ProxyClient",
    "Question",
    "QuestionAnswer",
    "QuestionHandler",
    "QuestionOption",
    "QuestionRecord",
    "QuestionRequest",
    "QuotaExceededError",
    "RayEngine",
    "RaySession",
    "ReplayedTurn",
    "Sandbox",
    "SandboxBackend",
    "SendNotSupportedError",
    "Session",
    "SessionClosedError",
    "SessionLostError",
    "SessionNotFoundError",
    "SessionOptions",
    "SessionStore",
    "SessionTerminatedError",
    "SessionTotals",
    "SteeredInput",
    "SteeringNotSupportedError",
    "ToolCall",
    "ToolCallSummary",
    "Trajectory",
    "Translator",
    "Turn",
    "TurnContext",
    "TurnError",
    "TurnInProgressError",
    "TurnLimits",
    "TurnSummary",
    "TurnTimeoutError",
    "Usage",
    "UsageError",
    "UsageMeter",
    "UsageSource",
    "WindDown",
    "WireTap",
    "WoundDown",
    "__version__",
    "approve_all",
    "compare",
    "default_catalog",
    "default_prices",
    "deny_all",
    "engine_names",
    "from_atif",
    "get_engine",
    "get_translator",
    "replay",
    "run_turn",
    "to_atif",
]
