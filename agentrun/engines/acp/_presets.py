"""Presets of the ACP engine for third-party adapters, pinned in ``engines/``.

* ``claude-acp``: ``@agentclientprotocol/claude-agent-acp`` (Claude Code through the Claude
  Agent SDK), run with a Node.js of at least 22; starts in its ``default`` mode, which asks
  for permission (its own default, ``auto``, lets Claude decide and never asks).
* ``codex-acp``: ``@agentclientprotocol/codex-acp`` (``codex app-server`` behind an ACP
  front), with the pinned ``codex`` as its Codex; starts in ``read-only``, which asks (its own
  default, ``agent``, lets a reviewer model decide).
* ``gemini``: Gemini CLI (``@google/gemini-cli``) with ``--acp``; starts in ``default``
  where the agent offers modes.
* ``qwen``: Qwen Code (``@qwen-code/qwen-code``) with ``--acp``, on a Node.js of at least 22;
  starts in ``default``, which asks before edits and shell commands (its own ACP default,
  ``auto``, lets a classifier decide).

``SessionOptions.binary`` (or ``binary=``) replaces the whole command with one program (an
installed ``claude-agent-acp`` or ``codex-acp``); ``options={"acp.mode": ...}`` picks another
mode.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any

from ..._turns.session import Session
from ..._vocabulary.errors import EngineUnavailableError
from ..._vocabulary.options import SessionOptions
from ..._wire.programs import resolve_binary, resolve_node, resolve_node_script
from ._engine import AcpEngine
from ._gemini_chats import loads_in_a_later_minute

__all__ = ["claude_acp", "codex_acp", "gemini", "qwen"]


@dataclass(frozen=True)
class _NodeAgent:
    """An ACP agent shipped as an npm package and run as ``node <script> <args>``."""

    name: str
    package: str
    script: str
    node_major: int
    default_mode: str
    args: tuple[str, ...] = ()
    engine_type: type[AcpEngine] = AcpEngine

    def engine(self, binary: str | None, options: dict[str, Any]) -> AcpEngine:
        def command(session: SessionOptions) -> list[str]:
            explicit = session.binary if session.binary is not None else binary
            if explicit is not None:
                program = [resolve_binary(self.name, explicit=explicit, engine=self.name)]
            else:
                script = resolve_node_script(self.package, self.script, engine=self.name)
                program = [resolve_node(minimum=self.node_major, engine=self.name), script]
            return [*program, *self.args]

        options.setdefault("name", self.name)
        options.setdefault("default_mode", self.default_mode)
        return self.engine_type(command, **options)


class _GeminiEngine(AcpEngine):
    """Gemini CLI: a session to load is loaded only once that cannot erase it (see
    ``_gemini_chats``). Its context fill is not known: it sends no ``usage_update``, and its
    prompt result's ``_meta.quota.token_count.input_tokens`` sums the prompts of all the
    turn's model calls, without the window's size."""

    reports_context_fill: bool = False

    def start(self, options: SessionOptions | None = None) -> Session:
        if options is None or options.resume_id is None or options.fork:
            return super().start(options)  # nothing to load (a fork is refused: no session/fork)
        loading = copy.copy(self)
        loading.start_guard = loads_in_a_later_minute(options.resume_id, self.start_guard)
        return AcpEngine.start(loading, options)


_CLAUDE_ACP = _NodeAgent(
    "claude-acp", "@agentclientprotocol/claude-agent-acp", "dist/index.js", 22, "default"
)
_CODEX_ACP = _NodeAgent(
    "codex-acp", "@agentclientprotocol/codex-acp", "dist/index.js", 20, "read-only"
)
_QWEN = _NodeAgent("qwen", "@qwen-code/qwen-code", "cli.js", 22, "default", ("--acp",))
_GEMINI = _NodeAgent(
    "gemini", "@google/gemini-cli", "bundle/gemini.js", 20, "default", ("--acp",), _GeminiEngine
)


def claude_acp(binary: str | None = None, **options: Any) -> AcpEngine:
    """``claude-agent-acp`` 0.101 (pinned), in mode ``default``. Other keyword arguments go to
    :class:`AcpEngine`."""
    return _CLAUDE_ACP.engine(binary, options)


def codex_acp(binary: str | None = None, **options: Any) -> AcpEngine:
    """``codex-acp`` 2.6 (pinned) over the pinned ``codex``, in mode ``read-only``. Other
    keyword arguments go to :class:`AcpEngine`."""

    def session_env(session: SessionOptions) -> dict[str, str]:
        env: dict[str, str] = {}
        if "CODEX_PATH" not in session.env:
            with contextlib.suppress(EngineUnavailableError):  # else its own bundled Codex
                env["CODEX_PATH"] = resolve_binary("codex", engine="codex-acp")
        return env

    options.setdefault("session_env", session_env)
    return _CODEX_ACP.engine(binary, options)


def qwen(binary: str | None = None, **options: Any) -> AcpEngine:
    """Qwen Code 0.24 (pinned) in ACP mode, in mode ``default``. Other keyword arguments go to
    :class:`AcpEngine`."""
    return _QWEN.engine(binary, options)


def gemini(binary: str | None = None, **options: Any) -> AcpEngine:
    """Gemini CLI 0.61 (pinned) in ACP mode, in mode ``default``. Other keyword arguments go to
    :class:`AcpEngine`."""
    return _GEMINI.engine(binary, options)
