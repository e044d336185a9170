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
from typing import Any

from ..._binaries import resolve_binary, resolve_node, resolve_node_script
from ..._errors import EngineUnavailableError
from ..._options import SessionOptions
from ._engine import AcpEngine

__all__ = ["claude_acp", "codex_acp", "gemini", "qwen"]


def _node_command(
    session: SessionOptions,
    binary: str | None,
    *,
    engine: str,
    package: str,
    script: str,
    node_major: int,
) -> list[str]:
    explicit = session.binary if session.binary is not None else binary
    if explicit is not None:
        return [resolve_binary(engine, explicit=explicit, engine=engine)]
    path = resolve_node_script(package, script, engine=engine)
    return [resolve_node(minimum=node_major, engine=engine), path]


def claude_acp(binary: str | None = None, **options: Any) -> AcpEngine:
    """``claude-agent-acp`` 0.101 (pinned), in mode ``default``. Other keyword arguments go to
    :class:`AcpEngine`."""

    def command(session: SessionOptions) -> list[str]:
        return _node_command(
            session,
            binary,
            engine="claude-acp",
            package="@agentclientprotocol/claude-agent-acp",
            script="dist/index.js",
            node_major=22,
        )

    options.setdefault("name", "claude-acp")
    options.setdefault("default_mode", "default")
    return AcpEngine(command, **options)


def codex_acp(binary: str | None = None, **options: Any) -> AcpEngine:
    """``codex-acp`` 2.6 (pinned) over the pinned ``codex``, in mode ``read-only``. Other
    keyword arguments go to :class:`AcpEngine`."""

    def command(session: SessionOptions) -> list[str]:
        return _node_command(
            session,
            binary,
            engine="codex-acp",
            package="@agentclientprotocol/codex-acp",
            script="dist/index.js",
            node_major=20,
        )

    def session_env(session: SessionOptions) -> dict[str, str]:
        env: dict[str, str] = {}
        if "CODEX_PATH" not in session.env:
            with contextlib.suppress(EngineUnavailableError):  # else its own bundled Codex
                env["CODEX_PATH"] = resolve_binary("codex", engine="codex-acp")
        return env

    options.setdefault("name", "codex-acp")
    options.setdefault("default_mode", "read-only")
    options.setdefault("session_env", session_env)
    return AcpEngine(command, **options)


def qwen(binary: str | None = None, **options: Any) -> AcpEngine:
    """Qwen Code 0.24 (pinned) in ACP mode, in mode ``default``. Other keyword arguments go to
    :class:`AcpEngine`."""

    def command(session: SessionOptions) -> list[str]:
        argv = _node_command(
            session,
            binary,
            engine="qwen",
            package="@qwen-code/qwen-code",
            script="cli.js",
            node_major=22,
        )
        return [*argv, "--acp"]

    options.setdefault("name", "qwen")
    options.setdefault("default_mode", "default")
    return AcpEngine(command, **options)


def gemini(binary: str | None = None, **options: Any) -> AcpEngine:
    """Gemini CLI 0.61 (pinned) in ACP mode. Other keyword arguments go to
    :class:`AcpEngine`."""

    def command(session: SessionOptions) -> list[str]:
        argv = _node_command(
            session,
            binary,
            engine="gemini",
            package="@google/gemini-cli",
            script="bundle/gemini.js",
            node_major=20,
        )
        return [*argv, "--acp"]

    options.setdefault("name", "gemini")
    options.setdefault("default_mode", "default")
    return AcpEngine(command, **options)
