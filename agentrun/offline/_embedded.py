"""The embedded default: an engine and its session options, pointed at the scripted model server.

``agentrun run``, ``agentrun compare`` and the fleet tests all need the same thing: the pinned
agent program of an engine, an offline configuration in a fresh directory, and session options
whose environment is exactly that configuration. This module is the one place that knows which
offline configuration each engine takes.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from .._bases.offline import OfflineAgentConfig
from .._turns.engine import Engine
from .._vocabulary.errors import ConfigurationError
from .._vocabulary.options import SessionOptions
from .._vocabulary.sandbox import Sandbox
from ..engines._registry import get_engine
from ..engines.acp._offline import gemini_offline, qwen_offline
from ..engines.claude._offline import claude_acp_offline, claude_offline
from ..engines.codex._offline import codex_acp_offline, codex_offline
from ..engines.opencode._offline import opencode_offline

__all__ = ["EMBEDDED_ENGINES", "GENERIC_ACP_AGENT", "embedded_engine", "offline_config"]

#: Engines that run on the embedded model server, and the agent each configures.
EMBEDDED_ENGINES: dict[str, str] = {
    "claude": "claude",
    "codex": "codex",
    "codex-app-server": "codex",
    "opencode": "opencode",
    "opencode-acp": "opencode",
    "claude-acp": "claude-acp",
    "codex-acp": "codex-acp",
    "qwen": "qwen",
    "gemini": "gemini",
}

#: The generic ``acp`` engine, embedded, runs this preset's agent (claude-agent-acp) as a plain
#: command line, with that preset's offline configuration: an ACP agent the library knows
#: nothing of beyond its command.
GENERIC_ACP_AGENT = "claude-acp"


class _Configure(Protocol):
    def __call__(
        self, server_url: str, directory: str | os.PathLike[str], *, api_key: str | None = None
    ) -> OfflineAgentConfig: ...


def _codex_app_server_offline(
    server_url: str, directory: str | os.PathLike[str], *, api_key: str | None = None
) -> OfflineAgentConfig:
    # Same configuration; app-server takes no exec flags (no git check applies).
    return replace(codex_offline(server_url, directory, api_key=api_key), args=())


#: Each agent's offline configuration with its defaults, by agent (or engine) name.
_CONFIGS: dict[str, _Configure] = {
    "claude": claude_offline,
    "claude-code": claude_offline,
    "opencode": opencode_offline,
    "opencode-acp": opencode_offline,
    "opencode-run": opencode_offline,
    "codex": codex_offline,
    "codex-app-server": _codex_app_server_offline,
    "claude-acp": claude_acp_offline,
    "codex-acp": codex_acp_offline,
    "qwen": qwen_offline,
    "gemini": gemini_offline,
}


def offline_config(
    agent: str,
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    api_key: str | None = None,
) -> OfflineAgentConfig:
    """Dispatch on the agent name: ``claude``, ``opencode`` (or ``opencode-acp``), ``codex``,
    ``codex-app-server``, ``claude-acp``, ``codex-acp``, ``qwen``, ``gemini``. ``api_key``: the
    key the agent sends (a :class:`~agentrun.CredentialProxy`'s ``client_key``; default a
    dummy the model server ignores)."""
    config = _CONFIGS.get(agent)
    if config is None:
        raise ConfigurationError(f"no offline configuration for agent {agent!r}", option="agent")
    return config(server_url, directory, api_key=api_key)


#: Engine options each agent needs offline (a scratch workspace is no git repository).
_ENGINE_OPTIONS: dict[str, dict[str, str]] = {"codex": {"codex.skip_git_repo_check": "true"}}


#: Engine options of a sandboxed session that approves everything: the agent's own sandbox is
#: off inside ours (codex-acp's modes other than full access run each command in Codex's own
#: bubblewrap sandbox, which cannot start inside ours; see docs/sandbox.md).
_SANDBOXED_UNATTENDED: dict[str, dict[str, str]] = {
    "codex-acp": {"acp.mode": "agent-full-access"},
}


def embedded_engine(
    name: str,
    server_url: str,
    directory: str | Path,
    *,
    cwd: str | None = None,
    model: str | None = None,
    binary: str | None = None,
    resume_id: str | None = None,
    sandbox: Sandbox | bool | None = None,
    api_key: str | None = None,
    pool: int | None = None,
    **options: Any,
) -> tuple[Engine, SessionOptions]:
    """The engine ``name`` and session options that run its pinned agent against the model
    server at ``server_url``, with an offline configuration written under ``directory``.

    Extra keyword arguments become :class:`~agentrun.SessionOptions` fields (``hitl``,
    ``permission_handler``, ...). Raises :class:`~agentrun.ConfigurationError` for an engine
    that has no embedded configuration, and :class:`~agentrun.EngineUnavailableError` when its
    program is not installed.

    ``sandbox`` (``True`` or a :class:`~agentrun.Sandbox`) runs the agent sandboxed with
    ``directory`` as its read-write home and the model server's port its only way out.
    ``api_key``: the key the agent sends; pointed at a :class:`~agentrun.CredentialProxy`,
    its ``client_key``. ``pool=N``: N sessions at most share one agent process (the engines
    that can: the ACP ones and ``codex-app-server``).

    ``name`` may also be ``"acp"``: the generic ACP engine running :data:`GENERIC_ACP_AGENT`'s
    agent, given as a plain command line.
    """
    from .._vocabulary.errors import ConfigurationError

    generic = name == "acp"
    preset = GENERIC_ACP_AGENT if generic else name
    agent = EMBEDDED_ENGINES.get(preset)
    if agent is None:
        raise ConfigurationError(
            f"engine {name!r} has no embedded configuration "
            f"(supported: {', '.join(sorted(EMBEDDED_ENGINES))}, acp)",
            option="engine",
        )
    config = offline_config(agent, server_url, Path(directory), api_key=api_key)
    factory_options: dict[str, Any] = {} if binary is None else {"binary": binary}
    if pool is not None:
        factory_options["pool"] = pool
    engine = get_engine(preset, **factory_options)
    engine.check()
    engine_options = {**_ENGINE_OPTIONS.get(agent, {}), **options.pop("options", {})}
    if sandbox and options.get("hitl") is False:
        engine_options = {**_SANDBOXED_UNATTENDED.get(name, {}), **engine_options}
    if sandbox is True:
        sandbox = Sandbox()
    if isinstance(sandbox, Sandbox):
        port = urlsplit(server_url).port
        if port is not None and port not in sandbox.socket_ports:
            sandbox = sandbox.with_ports(port)
        if sandbox.home is None:
            sandbox = sandbox.model_copy(update={"home": str(Path(directory).resolve())})
    session = SessionOptions(
        model=model or config.model,
        cwd=cwd,
        env=dict(config.env),
        inherit_env=False,
        resume_id=resume_id,
        context_window_tokens=config.context_window,
        options=engine_options,
        sandbox=sandbox or None,
        **options,
    )
    if generic:
        engine = _plain_command(engine, session, pool)
    return engine, session


def _plain_command(preset: Engine, session: SessionOptions, pool: int | None) -> Engine:
    """The generic ACP engine running ``preset``'s command line for ``session``, as a user
    would give it (without the session's extra arguments: the generic engine adds those), in
    the preset's mode when none is asked for (claude-agent-acp's own, ``auto``, never asks and
    adds a billing notice to the first answer)."""
    from ..engines.acp import AcpEngine

    assert isinstance(preset, AcpEngine)
    command = preset.command_for(session.model_copy(update={"extra_args": ()}))
    return AcpEngine(command, default_mode=preset.default_mode, pool=pool)
