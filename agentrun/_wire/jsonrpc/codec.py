"""A JSON-RPC message as the bytes of one line, and back from a line too long to decode.

* :func:`encode_line` — a message as compact UTF-8 JSON with its trailing ``b"\\n"``; pydantic
  models inside params or results are dumped with ``by_alias=True, exclude_none=True`` (the wire
  form of :mod:`agentrun.engines.acp._schema`);
* :func:`error_line` — the error response to a request, without its ``data`` when that cannot
  be encoded;
* :func:`response_id_in_head`, :func:`request_in_head` — what the head of an oversized line
  shows of it: the id of a response, or the id and method of a request.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

__all__ = ["RequestId", "encode_line", "error_line", "request_in_head", "response_id_in_head"]

#: A JSON-RPC request id as we accept it from a peer.
RequestId = int | str

# The id of an oversized response, when the line's head shows it unambiguously.
_HEAD_ID = re.compile(
    rb'^\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(\d{1,18})\s*,\s*"(?:result|error)"'
)
# The id and method of an oversized request of the peer, when the line's head shows them.
_HEAD_REQUEST = re.compile(
    rb'^\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(\d{1,18}|"[^"\\]{0,256}")\s*,'
    rb'\s*"method"\s*:\s*"([^"\\]{1,256})"'
)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


_dumps = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), default=_json_default, allow_nan=False
).encode


def encode_line(message: dict[str, Any]) -> bytes:
    """``message`` as one line: compact UTF-8 JSON and its ``b"\\n"``. ``TypeError`` or
    ``ValueError`` when it cannot be encoded (an unknown type, NaN)."""
    return (_dumps(message) + "\n").encode("utf-8")


def error_line(request_id: RequestId, error: dict[str, Any]) -> bytes:
    """The error response ``error`` to the request ``request_id``, as one line; an ``error``
    whose ``data`` cannot be encoded goes without it."""
    try:
        return encode_line({"jsonrpc": "2.0", "id": request_id, "error": error})
    except (TypeError, ValueError):  # un-encodable ``data``
        error = {"code": error["code"], "message": error["message"]}
        return encode_line({"jsonrpc": "2.0", "id": request_id, "error": error})


def response_id_in_head(head: bytes) -> int | None:
    """The id of the response an oversized line begins, when its head shows it unambiguously."""
    match = _HEAD_ID.match(head)
    return None if match is None else int(match.group(1))


def request_in_head(head: bytes) -> tuple[RequestId, str] | None:
    """The id and method of the peer's request an oversized line begins, when its head shows
    them (its id and method first, as agents write them)."""
    request = _HEAD_REQUEST.match(head)
    if request is None:
        return None
    raw_id = request.group(1)
    request_id: RequestId = (
        raw_id[1:-1].decode("utf-8", "replace") if raw_id[:1] == b'"' else int(raw_id)
    )
    return request_id, request.group(2).decode("utf-8", "replace")
