"""agentrun: drive Claude Code, Codex, OpenCode and any ACP agent through one vocabulary.

The public API is exactly what ``__all__`` lists; every other module is private.
"""

from ._compare import CompareRun, FilesChanged, compare
from ._context import Catalog, ContextTracker, ModelInfo, default_catalog
from ._errors import (
    ERROR_CODES,
    AgentrunError,
    ConfigurationError,
    EngineUnavailableError,
    LineTooLongError,
    NoResultError,
    ProcessExitError,
    ProtocolError,
    SendNotSupportedError,
    SessionLostError,
    SessionNotFoundError,
    SessionTerminatedError,
    TurnError,
    TurnInProgressError,
    TurnTimeoutError,
)
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
from ._messages import (
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
from ._ray import RayEngine, RaySession
from ._registry import engine_names, get_engine, get_translator
from ._session import Engine, MessageCallback, Session, Turn, TurnContext, WireTap, run_turn
from ._summary import ContextSummary, ToolCallSummary, TurnSummary
from ._translate import Translator

__version__ = "0.1.0"

__all__ = [
    "ERROR_CODES",
    "AgentrunError",
    "Catalog",
    "CompareRun",
    "ConfigurationError",
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
    "NoResultError",
    "PermissionDecision",
    "PermissionDenial",
    "PermissionHandler",
    "PermissionOption",
    "PermissionRequest",
    "ProcessExitError",
    "ProcessMeta",
    "ProtocolError",
    "RayEngine",
    "RaySession",
    "SendNotSupportedError",
    "Session",
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
    "WireTap",
    "__version__",
    "approve_all",
    "compare",
    "default_catalog",
    "deny_all",
    "engine_names",
    "get_engine",
    "get_translator",
    "run_turn",
]
