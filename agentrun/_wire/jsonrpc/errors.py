"""The errors of a JSON-RPC connection: the error codes, :class:`JsonRpcError` (an error object
received or sent), :class:`ConnectionClosedError`, :class:`RequestTimeoutError`, and
:class:`JsonRpcProblem` (something skipped while reading)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ..._vocabulary.errors import AgentrunError, SessionTerminatedError

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "ConnectionClosedError",
    "JsonRpcError",
    "JsonRpcProblem",
    "RequestTimeoutError",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
#: The request was cancelled (``$/cancel_request`` in ACP; LSP uses the same code).
REQUEST_CANCELLED: Final = -32800


class JsonRpcError(AgentrunError):
    """A JSON-RPC error object: received in a response, or raised by a request handler.

    ``code`` is the JSON-RPC error code, ``message`` the peer's message unchanged and
    ``data`` its optional ``data`` member.  ``method`` names the request it answered when
    known.  Raise it from ``on_request`` to send this error to the peer.
    """

    error_code = "jsonrpc"

    def __init__(
        self,
        code: int,
        message: str,
        data: Any = None,
        *,
        method: str | None = None,
        engine: str | None = None,
    ) -> None:
        super().__init__(message, engine=engine)
        self.code = code
        self.data = data
        self.method = method

    def __str__(self) -> str:
        where = f" ({self.method})" if self.method else ""
        return f"JSON-RPC error {self.code}{where}: {self.message}"

    def __repr__(self) -> str:
        return f"JsonRpcError(code={self.code!r}, message={self.message!r}, data={self.data!r})"

    def to_json(self) -> dict[str, Any]:
        """The error object as sent on the wire."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out

    @classmethod
    def method_not_found(cls, method: str) -> JsonRpcError:
        return cls(METHOD_NOT_FOUND, f"Method not found: {method}", method=method)

    @classmethod
    def invalid_params(cls, detail: str, data: Any = None) -> JsonRpcError:
        return cls(INVALID_PARAMS, f"Invalid params: {detail}", data)


class ConnectionClosedError(SessionTerminatedError):
    """The connection ended (end of input, :meth:`~.connection.JsonRpcConnection.close`, or a
    failed write).

    Raised by a request that was still waiting for its response, and by any request or
    notification made afterwards.  ``reason`` says why the connection ended and ``method``
    names the request when there was one.
    """

    def __init__(
        self, reason: str, *, method: str | None = None, engine: str | None = None
    ) -> None:
        what = f"{method}: " if method else ""
        super().__init__(f"{what}JSON-RPC connection closed ({reason})", engine=engine)
        self.reason = reason
        self.method = method


class RequestTimeoutError(AgentrunError):
    """A request got no response within its ``timeout``; the request was abandoned."""

    def __init__(self, method: str, timeout: float, *, engine: str | None = None) -> None:
        super().__init__(f"{method}: no response within {timeout:g} s", engine=engine)
        self.method = method
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class JsonRpcProblem:
    """Something that went wrong while reading; it was skipped and reading went on.

    ``code`` is one of:

    ``"line_too_long"``, ``"invalid_json"``, ``"invalid_utf8"``
        the line could not be decoded (the codes of
        :data:`agentrun._vocabulary.errors.ERROR_CODES`);
    ``"protocol"``
        valid JSON that is not a usable JSON-RPC message: not an object, no method and no
        id, a bad id, a response to an id we never sent or a duplicate request id;
    ``"handler_error"``
        ``on_request`` raised (``exception`` holds it; the peer got ``-32603``);
    ``"callback_error"``
        ``on_notification`` raised (``exception`` holds it; the notification is lost);
    ``"write_error"``
        a response to the peer could not be written.

    ``raw`` is the offending line (for ``line_too_long``: its first bytes) and ``message``
    the decoded JSON when there was one.
    """

    code: str
    detail: str
    raw: bytes | None = None
    message: Any = None
    exception: BaseException | None = None
