"""OpenCode offline (``opencode run`` and ``opencode acp`` use the same configuration).

* ``opencode.json`` (via ``OPENCODE_CONFIG``) defines the only enabled provider ``fake``
  (``@ai-sdk/openai-compatible``, bundled in the binary) with ``baseURL`` = server + ``/v1``
  and model ``fake-model`` whose ``limit.context`` is the reported context size.
* ``GET https://models.opencode.ai/api.json`` (models catalog, refreshed hourly) is stopped by
  ``OPENCODE_DISABLE_MODELS_FETCH=1``; auto-update by ``OPENCODE_DISABLE_AUTOUPDATE=1`` and
  ``"autoupdate": false``; sharing by ``OPENCODE_DISABLE_SHARE=1`` / ``"share": "disabled"``;
  LSP downloads by ``OPENCODE_DISABLE_LSP_DOWNLOAD=1``.
* A background ``@opencode-ai/plugin`` install queries the npm registry in every config
  directory. A *plugin-dir stub* in ``$XDG_CONFIG_HOME/opencode`` (empty ``node_modules/``, a
  ``package.json`` and ``package-lock.json`` that already list the plugin) makes it a no-op. A
  ``.opencode/`` directory in the workspace would need the same stub
  (:func:`write_opencode_plugin_stub`).
* ``XDG_*`` dirs live under the fresh HOME, so sessions (``opencode.db``) and logs are private.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ..._bases.offline import OfflineAgentConfig, fresh_home, server_root, write_json

__all__ = ["OPENCODE_PLUGIN_VERSION", "opencode_offline", "write_opencode_plugin_stub"]

#: The ``@opencode-ai/plugin`` version the stub claims (the pinned OpenCode version).
OPENCODE_PLUGIN_VERSION = "1.18.33"


def write_opencode_plugin_stub(config_dir: str | os.PathLike[str]) -> None:
    """Make OpenCode's background plugin install in ``config_dir`` a no-op (no npm traffic)."""
    path = Path(config_dir)
    (path / "node_modules").mkdir(parents=True, exist_ok=True)
    deps = {"@opencode-ai/plugin": OPENCODE_PLUGIN_VERSION}
    write_json(path / "package.json", {"dependencies": deps})
    lock = {
        "name": "opencode",
        "lockfileVersion": 3,
        "requires": True,
        "packages": {"": {"dependencies": deps}},
    }
    write_json(path / "package-lock.json", lock)


def opencode_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model_id: str = "fake-model",
    context_window: int = 200_000,
    output_limit: int = 8192,
    reasoning: bool = False,
    permission: Mapping[str, str] | None = None,
    api_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """OpenCode (``run`` and ``acp``): ``opencode.json`` with provider ``fake`` + the stub.

    The model to pass is ``fake/<model_id>``; its ``limit.context`` is ``context_window``
    (what ACP reports as ``usage_update.size``). Costs are 1 / 2 / 0.1 USD per million input /
    output / cache-read tokens. ``permission`` becomes ``OPENCODE_PERMISSION`` (e.g.
    ``{"bash": "ask"}``); by default bash, edit and write are allowed. ``api_key``: the
    provider's key in ``opencode.json`` (default a dummy).
    """
    home = fresh_home(directory)
    xdg = {
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_STATE_HOME": home / ".local" / "state",
    }
    for folder in xdg.values():
        folder.mkdir(parents=True, exist_ok=True)
    oc_config_dir = xdg["XDG_CONFIG_HOME"] / "opencode"
    write_opencode_plugin_stub(oc_config_dir)
    base = server_root(server_url) + "/v1"
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
                "options": {"baseURL": base, "apiKey": api_key or "dummy-key-not-real"},
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
    config_path = write_json(Path(directory).resolve() / "opencode.json", config)
    variables = {name: str(folder) for name, folder in xdg.items()}
    variables.update(
        {
            "OPENCODE_CONFIG": str(config_path),
            "FAKE_OPENAI_BASE_URL": base,
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        }
    )
    if permission is not None:
        variables["OPENCODE_PERMISSION"] = json.dumps(dict(permission))
    return OfflineAgentConfig.build(
        "opencode",
        home,
        variables,
        extra_env=extra_env,
        model=model,
        context_window=context_window,
        files=(config_path, oc_config_dir / "package.json", oc_config_dir / "package-lock.json"),
        notes=(
            "provider 'fake' (openai-compatible) is the only enabled provider",
            "OPENCODE_DISABLE_MODELS_FETCH=1 stops the models.opencode.ai catalog download",
            "plugin-dir stub in $XDG_CONFIG_HOME/opencode stops the npm registry lookups",
            "errors from the server carry retry-after-ms: 50, so retries take about 2 s",
        ),
    )
