"""``fs/read_text_file`` and ``fs/write_text_file``, confined to the session's working directory
(symlinks and ``..`` resolved first); the files are read and written in a worker thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from ..._wire.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError
from ._schema import ReadTextFileRequest, WriteTextFileRequest

__all__ = ["RESOURCE_NOT_FOUND", "WorkspaceFiles"]

#: ACP's "resource not found" error code.
RESOURCE_NOT_FOUND = -32002


class WorkspaceFiles:
    """The text files of one working directory, as the agent may read and write them."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd

    def path(self, path: str) -> Path:
        """``path`` resolved (relative to the working directory); outside it: invalid params."""
        root = Path(self.cwd).resolve()
        target = Path(path)
        if not target.is_absolute():
            target = root / target
        resolved = target.resolve()
        if resolved != root and root not in resolved.parents:
            raise JsonRpcError(
                INVALID_PARAMS,
                f"Invalid params: {path} is outside the session's working directory",
                {"path": path},
            )
        return resolved

    async def read(self, params: Any) -> dict[str, Any]:
        """``fs/read_text_file``: the file's text (``line`` / ``limit`` select lines)."""
        try:
            request = ReadTextFileRequest.model_validate(params)
        except ValidationError as exc:
            raise JsonRpcError.invalid_params(f"{exc.error_count()} problems") from None
        path = self.path(request.path)

        def read() -> str:
            text = path.read_text(encoding="utf-8")
            if request.line is None and request.limit is None:
                return text
            lines = text.splitlines(keepends=True)
            start = max((request.line or 1) - 1, 0)
            end = None if request.limit is None else start + max(request.limit, 0)
            return "".join(lines[start:end])

        try:
            content = await anyio.to_thread.run_sync(read)
        except FileNotFoundError:
            raise JsonRpcError(
                RESOURCE_NOT_FOUND, f"Resource not found: {request.path}", {"path": request.path}
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise JsonRpcError(INTERNAL_ERROR, f"Internal error: {type(exc).__name__}") from None
        return {"content": content}

    async def write(self, params: Any) -> None:
        """``fs/write_text_file``: the file written whole (its directories made)."""
        try:
            request = WriteTextFileRequest.model_validate(params)
        except ValidationError as exc:
            raise JsonRpcError.invalid_params(f"{exc.error_count()} problems") from None
        path = self.path(request.path)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(request.content, encoding="utf-8")

        try:
            await anyio.to_thread.run_sync(write)
        except OSError as exc:
            raise JsonRpcError(INTERNAL_ERROR, f"Internal error: {type(exc).__name__}") from None
