"""Offline configuration: point a real agent program at the embedded model server.

Each function here takes the server URL (``ModelServer.url``, e.g. ``http://127.0.0.1:40365``)
and a directory the configuration may own (it creates ``home/`` and config files inside), and
returns an :class:`OfflineAgentConfig`. Its ``env`` is a **complete** environment: it starts
from ``PATH``, ``LANG``, ``USER``, ``SHELL`` (inherited), ``TERM=dumb`` and a fresh ``HOME``,
and never copies the caller's ``ANTHROPIC_*`` / ``OPENAI_*`` / ``CODEX_*`` / ``OPENCODE_*``
variables, so a developer's real credentials cannot leak into a test.

What each agent would otherwise reach, and the setting that stops it (from recordings made in a
loopback-only network namespace with a logging, refusing proxy):

Claude Code (``claude``)
    * Model calls go to ``ANTHROPIC_BASE_URL`` (set to the server; plain http to loopback is
      accepted) with ``ANTHROPIC_API_KEY`` (a dummy; without any key the CLI makes no request
      and prints ``Not logged in``).
    * Without further settings it makes 5-6 ``CONNECT api.anthropic.com:443`` attempts
      (bootstrap, organisation fast-mode status, MCP registry, event logging).
      ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` alone brings that to zero;
      ``DISABLE_TELEMETRY``, ``DISABLE_ERROR_REPORTING`` and ``DISABLE_AUTOUPDATER`` are set too.
    * ``CLAUDE_CODE_MAX_RETRIES=0``: the default of 10 retries makes a failing server cost about
      180 s. (A mid-stream SSE error is still re-requested 3 times by a separate loop.)
    * ``IS_SANDBOX=1`` when running as root, so that ``--dangerously-skip-permissions`` works.

OpenCode (``opencode run`` and ``opencode acp`` use the same configuration)
    * ``opencode.json`` (via ``OPENCODE_CONFIG``) defines the only enabled provider ``fake``
      (``@ai-sdk/openai-compatible``, bundled in the binary) with ``baseURL`` = server + ``/v1``
      and model ``fake-model`` whose ``limit.context`` is the reported context size.
    * ``GET https://models.opencode.ai/api.json`` (models catalog, refreshed hourly) is stopped
      by ``OPENCODE_DISABLE_MODELS_FETCH=1``; auto-update by ``OPENCODE_DISABLE_AUTOUPDATE=1``
      and ``"autoupdate": false``; sharing by ``OPENCODE_DISABLE_SHARE=1`` / ``"share":
      "disabled"``; LSP downloads by ``OPENCODE_DISABLE_LSP_DOWNLOAD=1``.
    * A background ``@opencode-ai/plugin`` install queries the npm registry in every config
      directory. A *plugin-dir stub* in ``$XDG_CONFIG_HOME/opencode`` (empty ``node_modules/``,
      a ``package.json`` and ``package-lock.json`` that already list the plugin) makes it a no-op.
      A ``.opencode/`` directory in the workspace would need the same stub
      (:func:`write_opencode_plugin_stub`).
    * ``XDG_*`` dirs live under the fresh HOME, so sessions (``opencode.db``) and logs are private.

Codex (``codex exec``)
    * ``$CODEX_HOME/config.toml`` selects provider ``fake`` (``wire_api = "responses"``,
      ``base_url`` = server + ``/v1``, key from ``FAKE_OPENAI_API_KEY``), with
      ``request_max_retries = 0`` and ``stream_max_retries = 0`` (30 requests per failure by
      default), ``check_for_update_on_startup = false`` and ``[analytics] enabled = false``.
    * ``[features] plugins = false`` stops a ``git ls-remote https://github.com/openai/plugins.git``
      run at every start (plugin marketplace sync).
    * Always pass ``--skip-git-repo-check`` outside a git repository and stdin ``/dev/null``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from .._vocabulary.errors import ConfigurationError

__all__ = [
    "OPENCODE_PLUGIN_VERSION",
    "OfflineAgentConfig",
    "base_env",
    "claude_offline",
    "codex_offline",
    "offline_config",
    "opencode_offline",
    "write_opencode_plugin_stub",
]

#: The ``@opencode-ai/plugin`` version the stub claims (the pinned OpenCode version).
OPENCODE_PLUGIN_VERSION = "1.18.33"

#: Context windows Claude Code 2.1.329 reports (``result.modelUsage.<m>.contextWindow``).
_CLAUDE_WINDOWS = {
    "claude-sonnet-4-5-20250929": 200_000,
    "claude-3-5-haiku-20241022": 200_000,
}

#: What Codex reports for a model slug it has no metadata for (272000 * 95 %).
_CODEX_FALLBACK_WINDOW = 258_400


@dataclass(frozen=True)
class OfflineAgentConfig:
    """Everything needed to start one agent program against the model server."""

    #: ``"claude"``, ``"opencode"`` or ``"codex"``.
    agent: str
    #: The complete environment for the agent process.
    env: Mapping[str, str]
    #: The model id to pass (``--model``), or ``None`` to use the agent's default.
    model: str | None
    #: The context window the agent will report for that model (``None`` if unknown).
    context_window: int | None
    #: The fresh HOME directory.
    home: Path
    #: Config files written (``opencode.json``, ``config.toml``...).
    files: tuple[Path, ...] = ()
    #: Extra command-line arguments the agent needs offline (e.g. ``--skip-git-repo-check``).
    args: tuple[str, ...] = ()
    #: Human-readable notes on what was set and why.
    notes: tuple[str, ...] = field(default=())


def base_env(home: Path) -> dict[str, str]:
    """The minimal inherited environment: PATH, LANG, USER, SHELL, TERM=dumb, HOME."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TERM": "dumb",
        "USER": os.environ.get("USER", "agentrun"),
        "SHELL": os.environ.get("SHELL", "/bin/sh"),
        "HOME": str(home),
    }


def _is_root() -> bool:
    geteuid = getattr(os, "geteuid", None)
    return geteuid is not None and geteuid() == 0


def _fresh_home(directory: str | os.PathLike[str]) -> Path:
    home = Path(directory).resolve() / "home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _strip(url: str) -> str:
    url = url.rstrip("/")
    return url.removesuffix("/v1")


def claude_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str | None = None,
    api_key: str = "sk-ant-offline-test",
    max_retries: int = 0,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Claude Code: env only (no config files). Model ``None`` = the CLI's default."""
    home = _fresh_home(directory)
    env = base_env(home)
    env.update(
        {
            "ANTHROPIC_BASE_URL": _strip(server_url),
            "ANTHROPIC_API_KEY": api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": str(max_retries),
        }
    )
    notes = [
        "ANTHROPIC_BASE_URL points at the model server; the API key is a dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 stops every call to api.anthropic.com",
        f"CLAUDE_CODE_MAX_RETRIES={max_retries}: HTTP errors fail fast",
    ]
    if _is_root():
        env["IS_SANDBOX"] = "1"
        notes.append("IS_SANDBOX=1 because this runs as root (bypass mode needs it)")
    if extra_env:
        env.update(extra_env)
    window = _CLAUDE_WINDOWS.get(model or "", 1_000_000)
    return OfflineAgentConfig(
        agent="claude",
        env=env,
        model=model,
        context_window=window,
        home=home,
        notes=tuple(notes),
    )


def write_opencode_plugin_stub(config_dir: str | os.PathLike[str]) -> None:
    """Make OpenCode's background plugin install in ``config_dir`` a no-op (no npm traffic)."""
    path = Path(config_dir)
    (path / "node_modules").mkdir(parents=True, exist_ok=True)
    deps = {"@opencode-ai/plugin": OPENCODE_PLUGIN_VERSION}
    (path / "package.json").write_text(json.dumps({"dependencies": deps}, indent=2) + "\n")
    lock = {
        "name": "opencode",
        "lockfileVersion": 3,
        "requires": True,
        "packages": {"": {"dependencies": deps}},
    }
    (path / "package-lock.json").write_text(json.dumps(lock, indent=2) + "\n")


def opencode_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model_id: str = "fake-model",
    context_window: int = 200_000,
    output_limit: int = 8192,
    reasoning: bool = False,
    permission: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """OpenCode (``run`` and ``acp``): ``opencode.json`` with provider ``fake`` + the stub.

    The model to pass is ``fake/<model_id>``; its ``limit.context`` is ``context_window``
    (what ACP reports as ``usage_update.size``). Costs are 1 / 2 / 0.1 USD per million input /
    output / cache-read tokens. ``permission`` becomes ``OPENCODE_PERMISSION`` (e.g.
    ``{"bash": "ask"}``); by default bash, edit and write are allowed.
    """
    home = _fresh_home(directory)
    config_home = home / ".config"
    data_home = home / ".local" / "share"
    cache_home = home / ".cache"
    state_home = home / ".local" / "state"
    for d in (config_home, data_home, cache_home, state_home):
        d.mkdir(parents=True, exist_ok=True)
    oc_config_dir = config_home / "opencode"
    write_opencode_plugin_stub(oc_config_dir)
    base = _strip(server_url) + "/v1"
    model = f"fake/{model_id}"
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": model,
        "small_model": model,
        "autoupdate": False,
        "share": "disabled",
        "enabled_providers": ["fake"],
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake Local",
                "options": {"baseURL": base, "apiKey": "dummy-key-not-real"},
                "models": {
                    model_id: {
                        "name": "Fake Model",
                        "tool_call": True,
                        "reasoning": reasoning,
                        "cost": {"input": 1.0, "output": 2.0, "cache_read": 0.1},
                        "limit": {"context": context_window, "output": output_limit},
                    }
                },
            }
        },
    }
    config_path = Path(directory).resolve() / "opencode.json"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    env = base_env(home)
    env.update(
        {
            "XDG_CONFIG_HOME": str(config_home),
            "XDG_DATA_HOME": str(data_home),
            "XDG_CACHE_HOME": str(cache_home),
            "XDG_STATE_HOME": str(state_home),
            "OPENCODE_CONFIG": str(config_path),
            "FAKE_OPENAI_BASE_URL": base,
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        }
    )
    if permission is not None:
        env["OPENCODE_PERMISSION"] = json.dumps(dict(permission))
    if extra_env:
        env.update(extra_env)
    return OfflineAgentConfig(
        agent="opencode",
        env=env,
        model=model,
        context_window=context_window,
        home=home,
        files=(config_path, oc_config_dir / "package.json", oc_config_dir / "package-lock.json"),
        notes=(
            "provider 'fake' (openai-compatible) is the only enabled provider",
            "OPENCODE_DISABLE_MODELS_FETCH=1 stops the models.opencode.ai catalog download",
            "plugin-dir stub in $XDG_CONFIG_HOME/opencode stops the npm registry lookups",
            "errors from the server carry retry-after-ms: 50, so retries take about 2 s",
        ),
    )


def codex_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str = "fake-model",
    context_window: int | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Codex: ``$CODEX_HOME/config.toml`` with provider ``fake`` (Responses API), no retries.

    ``context_window`` sets ``model_context_window``; Codex then reports 95 % of it. Without
    it an unknown slug gets fallback metadata (reported window 258400) and a warning item.
    """
    home = _fresh_home(directory)
    codex_home = Path(directory).resolve() / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    base = _strip(server_url) + "/v1"
    lines = [
        f"model = {json.dumps(model)}",
        'model_provider = "fake"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
    ]
    if context_window is not None:
        lines.append(f"model_context_window = {int(context_window)}")
    lines += [
        "",
        "[model_providers.fake]",
        'name = "Fake OpenAI (local)"',
        f"base_url = {json.dumps(base)}",
        'wire_api = "responses"',
        'env_key = "FAKE_OPENAI_API_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "stream_idle_timeout_ms = 20000",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        "plugins = false",
        "",
    ]
    config_path = codex_home / "config.toml"
    config_path.write_text("\n".join(lines))
    env = base_env(home)
    env.update(
        {
            "CODEX_HOME": str(codex_home),
            "FAKE_OPENAI_API_KEY": "sk-offline-not-a-real-key",
            "NO_COLOR": "1",
        }
    )
    if extra_env:
        env.update(extra_env)
    reported = (
        int(context_window) * 95 // 100 if context_window is not None else _CODEX_FALLBACK_WINDOW
    )
    return OfflineAgentConfig(
        agent="codex",
        env=env,
        model=model,
        context_window=reported,
        home=home,
        files=(config_path,),
        args=("--skip-git-repo-check",),
        notes=(
            "provider 'fake' uses the Responses API on the model server",
            "request_max_retries = stream_max_retries = 0: one request per failure",
            "[features] plugins = false stops the git ls-remote to github.com",
        ),
    )


#: The bundled Codex model whose metadata ``codex_acp_offline`` gives the fake model.
_CODEX_TEMPLATE_MODEL = "gpt-5.5"


def write_codex_model_catalog(
    codex_home: Path, *, model: str, context_window: int, codex: str | None = None
) -> Path:
    """``$CODEX_HOME/catalog.json``: the pinned Codex's bundled metadata of one real model,
    re-named ``model`` with ``context_window``, so Codex knows the fake model (no "Model
    metadata ... not found" warning in the answer) and reports 95 % of the window."""
    import subprocess

    from .._wire.programs import resolve_binary

    program = codex or resolve_binary("codex")
    done = subprocess.run(
        [program, "debug", "models", "--bundled"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**base_env(codex_home), "CODEX_HOME": str(codex_home)},
    )
    bundled = cast(list[dict[str, Any]], json.loads(done.stdout)["models"])
    entry = next((m for m in bundled if m.get("slug") == _CODEX_TEMPLATE_MODEL), bundled[0])
    entry = {**entry, "slug": model, "display_name": model, "context_window": context_window}
    entry["upgrade"] = None
    path = codex_home / "catalog.json"
    path.write_text(json.dumps({"models": [entry]}))
    return path


def codex_acp_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str = "fake-model",
    context_window: int = 131_072,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """codex-acp: the ``codex_offline`` provider, **without** ``approval_policy`` and
    ``sandbox_mode`` (so permission requests reach the client), with a model catalog entry for
    ``model`` and without the adapter's prompt-suggestion model calls."""
    base = codex_offline(server_url, directory, model=model, extra_env=extra_env)
    config_path = base.files[0]
    codex_home = config_path.parent
    catalog = write_codex_model_catalog(codex_home, model=model, context_window=context_window)
    lines = [
        line
        for line in config_path.read_text().splitlines()
        if not line.startswith(("approval_policy", "sandbox_mode"))
    ]
    lines.insert(1, f"model_catalog_json = {json.dumps(str(catalog))}")
    config_path.write_text("\n".join(lines) + "\n")
    env = {**base.env, "CODEX_ACP_PROMPT_SUGGESTIONS": "false"}
    return replace(
        base,
        agent="codex-acp",
        env=env,
        context_window=context_window * 95 // 100,
        files=(config_path, catalog),
        args=(),
        notes=(
            *base.notes,
            "no approval_policy / sandbox_mode: the read-only mode asks the client",
            "model_catalog_json: the fake model has real metadata (no metadata warning)",
            "CODEX_ACP_PROMPT_SUGGESTIONS=false: no suggestion model call after each turn",
        ),
    )


def claude_acp_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """claude-agent-acp: the ``claude_offline`` environment (the adapter runs Claude Code)."""
    base = claude_offline(server_url, directory, model=model, extra_env=extra_env)
    return replace(base, agent="claude-acp")


def _write_gemini_style_settings(folder: Path, *, auth: str, **sections: Any) -> Path:
    """``settings.json`` of Gemini CLI and its fork Qwen Code: the auth type, no telemetry,
    usage statistics or update checks, plus ``sections``."""
    folder.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {
        "security": {"auth": {"selectedType": auth}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        **sections,
    }
    path = folder / "settings.json"
    path.write_text(json.dumps(settings, indent=2))
    return path


def qwen_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str = "fake-model",
    context_window: int = 131_072,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Qwen Code: its OpenAI-compatible provider (Chat Completions) on the model server, from
    ``~/.qwen/settings.json``; the model's context window set there (Qwen Code reports
    ``usage_update`` only for a window it knows); no telemetry, usage statistics, update checks
    or automatic memory (a model call after every turn)."""
    home = _fresh_home(directory)
    path = _write_gemini_style_settings(
        home / ".qwen",
        auth="openai",
        model={"name": model, "generationConfig": {"contextWindowSize": context_window}},
        memory={"enableManagedAutoMemory": False},
    )
    env = base_env(home)
    env.update(
        {
            "OPENAI_BASE_URL": _strip(server_url) + "/v1",
            "OPENAI_API_KEY": "sk-offline-not-a-real-key",
            "OPENAI_MODEL": model,
        }
    )
    if extra_env:
        env.update(extra_env)
    return OfflineAgentConfig(
        agent="qwen",
        env=env,
        model=None,
        context_window=context_window,
        home=home,
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
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Gemini CLI: the Gemini API on the model server (``GOOGLE_GEMINI_BASE_URL``, a dummy
    ``GEMINI_API_KEY``), API-key auth chosen in ``~/.gemini/settings.json``, a fixed model (no
    model router), no telemetry, usage statistics, update checks or IDE connection."""
    home = _fresh_home(directory)
    path = _write_gemini_style_settings(
        home / ".gemini", auth="gemini-api-key", model={"name": model}, ide={"enabled": False}
    )
    env = base_env(home)
    env.update(
        {
            "GOOGLE_GEMINI_BASE_URL": _strip(server_url),
            "GEMINI_API_KEY": "offline-not-a-real-key",
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "NO_BROWSER": "1",
        }
    )
    if extra_env:
        env.update(extra_env)
    return OfflineAgentConfig(
        agent="gemini",
        env=env,
        model=None,
        context_window=None,
        home=home,
        files=(path,),
        notes=(
            "GOOGLE_GEMINI_BASE_URL: the Gemini API on the model server (http on loopback)",
            "model.name fixed: no model-router classifier call",
            "GEMINI_CLI_NO_RELAUNCH: one process (no relaunch with a larger heap)",
        ),
    )


def offline_config(
    agent: str, server_url: str, directory: str | os.PathLike[str]
) -> OfflineAgentConfig:
    """Dispatch on the agent name: ``claude``, ``opencode`` (or ``opencode-acp``), ``codex``,
    ``codex-app-server``, ``claude-acp``, ``codex-acp``, ``qwen``, ``gemini``."""
    if agent == "claude-acp":
        return claude_acp_offline(server_url, directory)
    if agent == "codex-acp":
        return codex_acp_offline(server_url, directory)
    if agent == "qwen":
        return qwen_offline(server_url, directory)
    if agent == "gemini":
        return gemini_offline(server_url, directory)
    if agent in ("claude", "claude-code"):
        return claude_offline(server_url, directory)
    if agent in ("opencode", "opencode-acp", "opencode-run"):
        return opencode_offline(server_url, directory)
    if agent == "codex":
        return codex_offline(server_url, directory)
    if agent == "codex-app-server":
        # Same configuration; app-server takes no exec flags (no git check applies).
        return replace(codex_offline(server_url, directory), args=())
    raise ConfigurationError(f"no offline configuration for agent {agent!r}", option="agent")
