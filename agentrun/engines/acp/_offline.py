"""Offline configurations of the ACP presets that are not another engine's agent: Qwen Code and
Gemini CLI (``claude-acp`` runs Claude Code and ``codex-acp`` runs Codex: their configurations
are in those engines' folders).

Both read a ``settings.json`` of the same shape (Qwen Code is a fork of Gemini CLI), where the
auth type is chosen and telemetry, usage statistics and update checks are switched off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..._bases.offline import OfflineAgentConfig, fresh_home, server_root, write_json

__all__ = ["gemini_offline", "qwen_offline"]


def _write_settings(folder: Path, *, auth: str, **sections: Any) -> Path:
    """``settings.json`` of Gemini CLI and Qwen Code: the auth type, no telemetry, usage
    statistics or update checks, plus ``sections``."""
    security: dict[str, Any] = {"auth": {"selectedType": auth}, **sections.pop("security", {})}
    general: dict[str, Any] = {
        "disableAutoUpdate": True,
        "disableUpdateNag": True,
        **sections.pop("general", {}),
    }
    settings: dict[str, Any] = {
        "security": security,
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": general,
        **sections,
    }
    return write_json(folder / "settings.json", settings)


def qwen_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str = "fake-model",
    context_window: int = 131_072,
    api_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Qwen Code: its OpenAI-compatible provider (Chat Completions) on the model server, from
    ``~/.qwen/settings.json``; the model's context window set there (Qwen Code reports
    ``usage_update`` only for a window it knows); no telemetry, usage statistics, update checks
    or automatic memory (a model call after every turn). ``api_key``: its ``OPENAI_API_KEY``
    (default a dummy)."""
    home = fresh_home(directory)
    path = _write_settings(
        home / ".qwen",
        auth="openai",
        model={"name": model, "generationConfig": {"contextWindowSize": context_window}},
        memory={"enableManagedAutoMemory": False},
    )
    variables = {
        "OPENAI_BASE_URL": server_root(server_url) + "/v1",
        "OPENAI_API_KEY": api_key or "sk-offline-not-a-real-key",
        "OPENAI_MODEL": model,
    }
    return OfflineAgentConfig.build(
        "qwen",
        home,
        variables,
        extra_env=extra_env,
        model=None,
        context_window=context_window,
        files=(path,),
        notes=(
            "auth type openai: Chat Completions at OPENAI_BASE_URL (the model server)",
            "model.generationConfig.contextWindowSize: the size usage_update reports",
            "memory.enableManagedAutoMemory=false: no memory-extraction call after each turn",
        ),
    )


def gemini_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str = "fake-model",
    api_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Gemini CLI: the Gemini API on the model server (``GOOGLE_GEMINI_BASE_URL``;
    ``GEMINI_API_KEY`` is ``api_key``, default a dummy), API-key auth chosen in
    ``~/.gemini/settings.json``, a fixed model (no model router), no telemetry, usage
    statistics, update checks, IDE connection or session cleanup (Gemini CLI 0.61's cleanup
    deletes a session at the next start once it was loaded). Folder trust is off, so every
    workspace is trusted: Gemini CLI refuses its ``autoEdit`` and ``yolo`` modes in a folder
    it does not trust (``session/set_mode`` fails with "Internal error"), and the workspace of
    an offline run is a folder nobody could have trusted."""
    home = fresh_home(directory)
    path = _write_settings(
        home / ".gemini",
        auth="gemini-api-key",
        model={"name": model},
        ide={"enabled": False},
        security={"folderTrust": {"enabled": False}},
        general={"sessionRetention": {"enabled": False}},
    )
    variables = {
        "GOOGLE_GEMINI_BASE_URL": server_root(server_url),
        "GEMINI_API_KEY": api_key or "offline-not-a-real-key",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "NO_BROWSER": "1",
    }
    return OfflineAgentConfig.build(
        "gemini",
        home,
        variables,
        extra_env=extra_env,
        model=None,
        context_window=None,
        files=(path,),
        notes=(
            "GOOGLE_GEMINI_BASE_URL: the Gemini API on the model server (http on loopback)",
            "model.name fixed: no model-router classifier call",
            "security.folderTrust.enabled=false: every workspace trusted (yolo/autoEdit allowed)",
            "GEMINI_CLI_NO_RELAUNCH: one process (no relaunch with a larger heap)",
            "general.sessionRetention.enabled=false: a session loaded once survives the next "
            "start (the cleanup takes the load's empty chat file of the same id for the "
            "session's and deletes every file of that id)",
        ),
    )
