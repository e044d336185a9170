"""A small ACP client for the server's conformance tests (asyncio and trio).

It starts ``agentrun acp`` as a subprocess, speaks JSON-RPC 2.0 over its stdio, keeps every
``session/update`` it receives (validated against the ACP v1 schema) and answers the server's
requests (``session/request_permission``, ``elicitation/create``) through callables the test
gives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import jsonschema
from repo_paths import FIXTURES, REPO

SCHEMA_DIR = FIXTURES / "acp-schema"
_SCHEMA_FILE = SCHEMA_DIR / "schema.json"
#: Parts of ACP still in the making (elicitation, the prompt answer's ``usage``).
_UNSTABLE_SCHEMA_FILE = SCHEMA_DIR / "schema.unstable.json"

Answer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def schema_validator(definition: str, *, unstable: bool = False) -> Any:
    """A validator of one ``$defs`` entry of the ACP v1 schema (``fixtures/acp-schema``; its
    unstable part with ``unstable``)."""
    schema = json.loads((_UNSTABLE_SCHEMA_FILE if unstable else _SCHEMA_FILE).read_text())
    ref = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    cls = jsonschema.validators.validator_for(schema)
    return cls(ref)


def server_argv(engine: str, *extra: str, backend: str = "asyncio") -> list[str]:
    return [sys.executable, "-m", "agentrun", "acp", "--engine", engine, "--backend", backend,
            *extra]  # fmt: skip


class AcpClient:
    """One ``agentrun acp`` process and the client side of its connection."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.updates: list[dict[str, Any]] = []
        self.responses: dict[int, dict[str, Any]] = {}
        self.server_requests: list[dict[str, Any]] = []
        self.stray: list[dict[str, Any]] = []
        self.invalid: list[str] = []
        #: Every JSON message sent or read, in order, as ``{"to": side, "message": ...}`` (for
        #: :mod:`acp_conformance`).
        self.wire: list[dict[str, Any]] = []
        self.on_permission: Answer | None = None
        self.on_elicitation: Answer | None = None
        self._next = 1
        self._waiters: dict[int, anyio.Event] = {}
        self._update_seen = anyio.Event()
        self._notification_schema = schema_validator("SessionNotification")

    async def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def send(self, message: dict[str, Any]) -> None:
        self.wire.append({"to": "agent", "message": message})
        await self.send_raw((json.dumps(message) + "\n").encode())

    async def request(self, method: str, params: Any = None, *, timeout: float = 120) -> Any:
        """The result; raises :class:`AcpError` for an error response."""
        response = await self.call(method, params, timeout=timeout)
        if "error" in response:
            raise AcpError(response["error"])
        return response["result"]

    async def call(
        self, method: str, params: Any = None, *, timeout: float = 120
    ) -> dict[str, Any]:
        """The whole response message."""
        request_id = self._next
        self._next += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self._waiters[request_id] = anyio.Event()
        await self.send(message)
        return await self.response(request_id, timeout=timeout)

    async def response(self, request_id: int, *, timeout: float = 120) -> dict[str, Any]:
        event = self._waiters.setdefault(request_id, anyio.Event())
        with anyio.fail_after(timeout):
            await event.wait()
        if request_id not in self.responses:
            raise AssertionError(f"the server ended without answering request {request_id}")
        return self.responses.pop(request_id)

    async def start_call(self, method: str, params: Any = None) -> int:
        """Send a request without waiting; :meth:`response` waits for its answer."""
        request_id = self._next
        self._next += 1
        self._waiters[request_id] = anyio.Event()
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def wait_update(
        self, match: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            while True:
                for update in self.updates:
                    if match(update):
                        return update
                self._update_seen = anyio.Event()
                await self._update_seen.wait()

    def kinds(self, session_id: str | None = None, since: int = 0) -> list[str]:
        return [u["update"]["sessionUpdate"] for u in self.updates[since:]
                if session_id is None or u["sessionId"] == session_id]  # fmt: skip

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    message = json.loads(line)
                    self.wire.append({"to": "client", "message": message})
                    await self._dispatch(message)
        for event in self._waiters.values():  # the server is gone: nobody waits forever
            event.set()

    async def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            self.server_requests.append(message)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._answer, message)
            return
        if "method" in message:
            if message["method"] == "session/update":
                if self._notification_schema is not None:
                    errors = list(self._notification_schema.iter_errors(message["params"]))
                    if errors:
                        self.invalid.append(f"{message['params']}: {errors[0].message}")
                self.updates.append(message["params"])
                self._update_seen.set()
            else:
                self.stray.append(message)
            return
        request_id = message.get("id")
        if isinstance(request_id, int) and request_id in self._waiters:
            self.responses[request_id] = message
            self._waiters.pop(request_id).set()
        else:
            self.stray.append(message)

    async def _answer(self, message: dict[str, Any]) -> None:
        method = message["method"]
        handler = {"session/request_permission": self.on_permission,
                   "elicitation/create": self.on_elicitation}.get(method)  # fmt: skip
        if handler is None:
            reply: dict[str, Any] = {"error": {"code": -32601, "message": f"no {method}"}}
        else:
            reply = {"result": await handler(message["params"])}
        await self.send({"jsonrpc": "2.0", "id": message["id"], **reply})


class AcpError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.error = error


async def open_server(
    tg: anyio.abc.TaskGroup,
    argv: list[str],
    *,
    stderr_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
) -> AcpClient:
    """Start an ACP agent (by default ``agentrun acp`` of this checkout) and its client."""
    if env is None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
    stderr = stderr_path.open("wb")
    process = await anyio.open_process(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env,
        cwd=str(cwd),
    )  # fmt: skip
    stderr.close()
    client = AcpClient(process)
    tg.start_soon(client.read)
    return client


CLIENT_INIT = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                           "terminal": False},
    "clientInfo": {"name": "agentrun-tests", "version": "1"},
}  # fmt: skip
