"""agentrun: drive Claude Code, Codex, OpenCode and any ACP agent through one vocabulary.

The public API is exactly what ``__all__`` lists; every other module is private. Fleets,
``compare`` and the Ray backend are loaded on first use, so ``import agentrun`` stays light.
"""

from typing import TYPE_CHECKING, Any

from ._context import Catalog, ContextTracker, ModelInfo, default_catalog
from ._errors import (
    ERROR_CODES,
    AgentrunError,
    BudgetExceededError,
    CompactionNotSupportedError,
    ConfigurationError,
    EngineUnavailableError,
    LineTooLongError,
    NoResultError,
    ProcessExitError,
    ProtocolError,
    SendNotSupportedError,
    SessionClosedError,
    SessionLostError,
    SessionNotFoundError,
    SessionTerminatedError,
    TurnError,
    TurnInProgressError,
    TurnTimeoutError,
)
from ._messages import (
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
from ._options import Effort, Mode, SessionOptions
from ._permissions import (
    PermissionDecision,
    PermissionHandler,
    PermissionOption,
    PermissionRequest,
    approve_all,
    deny_all,
)
from ._policy import Budget, BudgetLimit, ContextPolicy
from ._prices import ModelPrice, PriceCatalog, default_prices
from ._questions import (
    Question,
    QuestionAnswer,
    QuestionHandler,
    QuestionOption,
    QuestionRecord,
    QuestionRequest,
)
from ._registry import engine_names, get_engine, get_translator
from ._session import Engine, MessageCallback, Session, Turn, TurnContext, WireTap, run_turn
from ._summary import ContextSummary, ToolCallSummary, TurnSummary
from ._translate import Translator
from ._version import VERSION as __version__

if TYPE_CHECKING:
    from ._compare import CompareRun, FilesChanged, compare
    from ._fleet import (
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
    from ._ray import RayEngine, RaySession

#: Public names defined in modules loaded on first use.
_LAZY: dict[str, str] = {
    "CompareRun": "._compare",
    "FilesChanged": "._compare",
    "compare": "._compare",
    "EngineFactory": "._fleet",
    "Fleet": "._fleet",
    "FleetEvent": "._fleet",
    "FleetEventKind": "._fleet",
    "FleetResult": "._fleet",
    "FleetRun": "._fleet",
    "FleetSessionRecord": "._fleet",
    "FleetTask": "._fleet",
    "FleetTurnRecord": "._fleet",
    "RayEngine": "._ray",
    "RaySession": "._ray",
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
    "InitMeta",
    "LineTooLongError",
    "Message",
    "MessageCallback",
    "MessageType",
    "Mode",
    "ModelInfo",
    "ModelPrice",
    "NoResultError",
    "PermissionDecision",
    "PermissionDenial",
    "PermissionHandler",
    "PermissionOption",
    "PermissionRequest",
    "PriceCatalog",
    "ProcessExitError",
    "ProcessMeta",
    "ProtocolError",
    "Question",
    "QuestionAnswer",
    "QuestionHandler",
    "QuestionOption",
    "QuestionRecord",
    "QuestionRequest",
    "RayEngine",
    "RaySession",
    "SendNotSupportedError",
    "Session",
    "SessionClosedError",
    "SessionLostError",
    "SessionNotFoundError",
    "SessionOptions",
    "SessionTerminatedError",
    "ToolCall",
    "ToolCallSummary",
    "Translator",
    "Turn",
    "TurnContext",
    "TurnError",
    "TurnInProgressError",
    "TurnSummary",
    "TurnTimeoutError",
    "Usage",
    "UsageSource",
    "WireTap",
    "__version__",
    "approve_all",
    "compare",
    "default_catalog",
    "default_prices",
    "deny_all",
    "engine_names",
    "get_engine",
    "get_translator",
    "run_turn",
]
