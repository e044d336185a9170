"""Helpers shared by tests that run the real pinned agent programs offline.

Import from test modules (``tests/`` is on ``sys.path``)::

    from agents_support import require_engine, run_agent, claude_argv

* :func:`require_engine` - the binary path, or ``pytest.skip`` with the install command.
* :func:`run_agent` - run an agent with stdin ``/dev/null``, an offline env and a cwd; returns
  an :class:`AgentRun` (exit code, parsed JSON lines, stderr, wall time).
* ``claude_argv`` / ``opencode_run_argv`` / ``codex_exec_argv`` - the usual command lines.
* :func:`live_engine` - :func:`agentrun.offline.embedded_engine`, plus the generic ``acp``
  engine (claude-agent-acp given as a plain command, as the compliance suite runs it).
* ``model_server`` - an async fixture with the default script (``from agents_support import
  model_server`` in the test module, then take ``model_server`` as an argument).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentrun import Engine, SessionOptions
from agentrun._vocabulary.errors import EngineUnavailableError
from agentrun._wire.programs import INSTALL_HINT, resolve_binary
from agentrun.offline import ModelServer, OfflineAgentConfig, embedded_engine

__all__ = [
    "AgentRun",
    "claude_argv",
    "codex_exec_argv",
    "descendants",
    "live_engine",
    "model_server",
    "opencode_run_argv",
    "require_engine",
    "run_agent",
]


def require_engine(name: str) -> str:
    """The pinned program behind ``name``, or skip the test with the install command.

    ``name`` is an engine name (``"claude-acp"``, ``"codex-app-server"``: the engine says which
    program it runs) or a program name (``"claude"``). Where the pinned programs are installed
    (``engines/node_modules``), a program that cannot be found is a failure, not a skip: a test
    must never pass by silently not running.
    """
    from agentrun import engine_names, get_engine

    try:
        if name in engine_names() and name not in _PROGRAMS_BY_NAME:
            get_engine(name).check()
            return name
        return resolve_binary(name)
    except EngineUnavailableError as exc:
        if _PINNED_BIN.is_dir():
            pytest.fail(f"{name}: {exc} (the pinned programs are installed, so this is a bug)")
        pytest.skip(f"{name} is not installed; run: {INSTALL_HINT}")


#: Engine names that are also their program's name: resolved as programs (a path comes back).
_PROGRAMS_BY_NAME = frozenset({"claude", "codex", "opencode", "qwen", "gemini", "codex-acp"})
_PINNED_BIN = Path(__file__).resolve().parent.parent / "engines" / "node_modules" / ".bin"


@dataclass
class AgentRun:
    """What one agent process did."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall: float
    events: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == type_]

    def describe(self) -> str:
        return (
            f"argv={self.argv}\nexit={self.returncode} wall={self.wall:.2f}s\n"
            f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


#: The generic ``acp`` engine runs the agent of this preset, given as a plain command.
GENERIC_ACP_AGENT = "claude-acp"

#: Gemini CLI's resume waits out the minute its session began (up to 60 s of the agent's clock,
#: the same on either backend): a scenario that resumes a Gemini session runs it on asyncio only.
GEMINI_RESUME_ON_ASYNCIO = pytest.mark.asyncio_only_for(
    "gemini", reason="Gemini's resume waits out the minute its session began: the agent's clock"
)


def live_engine(
    name: str, server_url: str, directory: Path, **options: Any
) -> tuple[Engine, SessionOptions]:
    """:func:`~agentrun.offline.embedded_engine` for ``name``; for ``"acp"``, the generic ACP
    engine running :data:`GENERIC_ACP_AGENT`'s command line with that preset's options."""
    from agentrun.engines.acp import AcpEngine

    engine, session_options = embedded_engine(
        GENERIC_ACP_AGENT if name == "acp" else name, server_url, directory, **options
    )
    if name == "acp":
        assert isinstance(engine, AcpEngine)
        engine = AcpEngine(engine.command_for(session_options))
    return engine, session_options


def _json_lines(text: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


async def run_agent(
    argv: Sequence[str],
    config: OfflineAgentConfig,
    cwd: Path,
    *,
    timeout: float = 90.0,
) -> AgentRun:
    """Run ``argv`` with stdin ``/dev/null``, ``config.env`` and ``cwd``; never raises on exit."""
    start = time.monotonic()
    with anyio.fail_after(timeout):
        done = await anyio.run_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            env=dict(config.env),
            cwd=cwd,
            check=False,
        )
    stdout = done.stdout.decode("utf-8", "replace")
    return AgentRun(
        argv=list(argv),
        returncode=done.returncode,
        stdout=stdout,
        stderr=done.stderr.decode("utf-8", "replace"),
        wall=time.monotonic() - start,
        events=_json_lines(stdout),
    )


def claude_argv(binary: str, prompt: str, *extra: str) -> list[str]:
    """``claude -p --verbose --output-format stream-json`` with bypass permissions."""
    return [
        binary,
        "-p",
        "--verbose",
        "--output-format",
        "stream-json",
        "--dangerously-skip-permissions",
        *extra,
        prompt,
    ]


def opencode_run_argv(binary: str, config: OfflineAgentConfig, *words: str) -> list[str]:
    """``opencode run --format json --model fake/fake-model WORDS...`` (no quoting quirk)."""
    assert config.model is not None
    return [binary, "run", "--format", "json", "--model", config.model, *words]


def codex_exec_argv(binary: str, config: OfflineAgentConfig, prompt: str) -> list[str]:
    """``codex exec --json --skip-git-repo-check PROMPT``."""
    return [binary, "exec", "--json", *config.args, prompt]


@pytest.fixture
async def model_server() -> AsyncIterator[ModelServer]:
    """A running :class:`ModelServer` with the default script."""
    async with ModelServer() as server:
        yield server


def descendants(pid: int | None = None) -> set[int]:
    """Live processes below ``pid`` (default: this test process), read from ``/proc``."""
    import os

    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
