"""JSON-RPC 2.0 over newline-delimited JSON, shared by every engine that speaks it (the ACP
agents and the Codex app-server) and by the ACP server (``agentrun acp``).

* :mod:`.connection` — :class:`JsonRpcConnection`: sending requests and notifications, the
  table of requests waiting for a response, reading and dispatching what the peer sends, and
  how the connection ends (its docstring has the guarantees);
* :mod:`.codec` — a message as the bytes of one line, and the id a line too long to decode
  shows in its head;
* :mod:`.errors` — the error codes, :class:`JsonRpcError`, :class:`ConnectionClosedError`,
  :class:`RequestTimeoutError` and :class:`JsonRpcProblem`.

Callers import the names below from this package.
"""

from __future__ import annotations

from .codec import RequestId
from .connection import (
    JsonRpcConnection,
    LineTaker,
    MessageObserver,
    NotificationHandler,
    ProblemHandler,
    RequestHandler,
    SendLine,
)
from .errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ConnectionClosedError,
    JsonRpcError,
    JsonRpcProblem,
    RequestTimeoutError,
)

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "ConnectionClosedError",
    "JsonRpcConnection",
    "JsonRpcError",
    "JsonRpcProblem",
    "LineTaker",
    "MessageObserver",
    "NotificationHandler",
    "ProblemHandler",
    "RequestHandler",
    "RequestId",
    "RequestTimeoutError",
    "SendLine",
]
