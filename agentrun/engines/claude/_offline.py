"""Claude Code offline: its environment pointed at the embedded model server.

The same configuration serves ``claude -p`` and claude-agent-acp (``claude-acp``), which runs
Claude Code through the Claude Agent SDK.

* Model calls go to ``ANTHROPIC_BASE_URL`` (set to the server; plain http to loopback is
  accepted) with ``ANTHROPIC_API_KEY`` (a dummy; without any key the CLI makes no request and
  prints ``Not logged in``).
* Without further settings it makes 5-6 ``CONNECT api.anthropic.com:443`` attempts (bootstrap,
  organisation fast-mode status, MCP registry, event logging).
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` alone brings that to zero;
  ``DISABLE_TELEMETRY``, ``DISABLE_ERROR_REPORTING`` and ``DISABLE_AUTOUPDATER`` are set too.
* ``CLAUDE_CODE_MAX_RETRIES=0``: the default of 10 retries makes a failing server cost about
  180 s. (A mid-stream SSE error is still re-requested 3 times by a separate loop.)
* ``IS_SANDBOX=1`` when running as root, so that ``--dangerously-skip-permissions`` works.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from ..._bases.offline import OfflineAgentConfig, fresh_home, running_as_root, server_root

__all__ = ["claude_acp_offline", "claude_offline"]

#: Context windows Claude Code 2.1.329 reports (``result.modelUsage.<m>.contextWindow``).
_CLAUDE_WINDOWS = {
    "claude-sonnet-4-5-20250929": 200_000,
    "claude-3-5-haiku-20241022": 200_000,
}


def claude_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str | None = None,
    api_key: str | None = None,
    max_retries: int = 0,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Claude Code: env only (no config files). Model ``None`` = the CLI's default;
    ``api_key``: its ``ANTHROPIC_API_KEY`` (default a dummy)."""
    variables = {
        "ANTHROPIC_BASE_URL": server_root(server_url),
        "ANTHROPIC_API_KEY": api_key or "sk-ant-offline-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": str(max_retries),
    }
    notes = [
        "ANTHROPIC_BASE_URL points at the model server; the API key is a dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 stops every call to api.anthropic.com",
        f"CLAUDE_CODE_MAX_RETRIES={max_retries}: HTTP errors fail fast",
    ]
    if running_as_root():
        variables["IS_SANDBOX"] = "1"
        notes.append("IS_SANDBOX=1 because this runs as root (bypass mode needs it)")
    return OfflineAgentConfig.build(
        "claude",
        fresh_home(directory),
        variables,
        extra_env=extra_env,
        model=model,
        context_window=_CLAUDE_WINDOWS.get(model or "", 1_000_000),
        notes=tuple(notes),
    )


def claude_acp_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str | None = None,
    api_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """claude-agent-acp: the ``claude_offline`` environment (the adapter runs Claude Code)."""
    base = claude_offline(server_url, directory, model=model, api_key=api_key, extra_env=extra_env)
    return replace(base, agent="claude-acp")
