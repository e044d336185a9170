"""Codex offline: ``codex exec``, ``codex app-server`` and codex-acp (which runs
``codex app-server``) against the embedded model server.

* ``$CODEX_HOME/config.toml`` selects provider ``fake`` (``wire_api = "responses"``,
  ``base_url`` = server + ``/v1``, key from ``FAKE_OPENAI_API_KEY``), with
  ``request_max_retries = 0`` and ``stream_max_retries = 0`` (30 requests per failure by
  default), ``check_for_update_on_startup = false`` and ``[analytics] enabled = false``.
* ``[features] plugins = false`` stops a ``git ls-remote https://github.com/openai/plugins.git``
  run at every start (plugin marketplace sync).
* Always pass ``--skip-git-repo-check`` outside a git repository and stdin ``/dev/null``.
* A sandboxed command (codex-acp's modes, app-server's ``plan`` and ``hitl=True``) runs through
  the sandbox helper ``codex-linux-sandbox``: Codex itself, found on ``PATH`` under that name. Codex
  puts that alias on ``PATH`` itself, but refuses to under the temporary directory, where an
  offline ``CODEX_HOME`` usually is; with bubblewrap installed every sandboxed command then dies
  (``bwrap: execvp codex-linux-sandbox``) and Codex reports no item for it. So the configuration
  makes the alias itself, in ``<directory>/codex-bin`` (a folder only it writes), first on ``PATH``.
* codex-acp: no ``approval_policy`` / ``sandbox_mode`` (its ACP mode decides, so permission
  requests reach the client), a model catalog that gives the fake model real metadata, and no
  prompt-suggestion call after each turn.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from ..._bases.offline import OfflineAgentConfig, base_env, fresh_home, server_root

__all__ = ["codex_acp_offline", "codex_offline", "write_codex_model_catalog"]

#: What Codex reports for a model slug it has no metadata for (272000 * 95 %).
_CODEX_FALLBACK_WINDOW = 258_400

#: The bundled Codex model whose metadata ``codex_acp_offline`` gives the fake model.
_CODEX_TEMPLATE_MODEL = "gpt-5.5"

_NOTES = (
    "provider 'fake' uses the Responses API on the model server",
    "request_max_retries = stream_max_retries = 0: one request per failure",
    "[features] plugins = false stops the git ls-remote to github.com",
    "PATH starts with codex-bin/codex-linux-sandbox: the sandbox helper Codex refuses to make"
    " under the temporary directory",
)


def _codex_home(directory: str | os.PathLike[str]) -> Path:
    codex_home = Path(directory).resolve() / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    return codex_home


def _write_config(
    codex_home: Path,
    server_url: str,
    *,
    model: str,
    context_window: int | None = None,
    catalog: Path | None = None,
    asks: bool = False,
) -> Path:
    """``$CODEX_HOME/config.toml``: provider ``fake`` and nothing that leaves the machine.
    ``asks``: no approval policy or sandbox mode, so the client's mode decides."""
    lines = [f"model = {json.dumps(model)}"]
    if catalog is not None:
        lines.append(f"model_catalog_json = {json.dumps(str(catalog))}")
    lines.append('model_provider = "fake"')
    if not asks:
        lines += ['approval_policy = "never"', 'sandbox_mode = "danger-full-access"']
    lines.append("check_for_update_on_startup = false")
    if context_window is not None:
        lines.append(f"model_context_window = {int(context_window)}")
    lines += [
        "",
        "[model_providers.fake]",
        'name = "Fake OpenAI (local)"',
        f"base_url = {json.dumps(server_root(server_url) + '/v1')}",
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
    path = codex_home / "config.toml"
    path.write_text("\n".join(lines))
    return path


#: The name by which Codex runs itself as its Linux sandbox helper (it dispatches on argv[0]).
SANDBOX_HELPER = "codex-linux-sandbox"


def _sandbox_helper_folder(codex_home: Path) -> Path | None:
    """``<directory>/codex-bin`` holding ``codex-linux-sandbox``, a link to the pinned native
    Codex, or ``None`` off Linux or without a native Codex. Only a link is ever replaced."""
    from ..._vocabulary.errors import EngineUnavailableError
    from ..._wire.programs import resolve_binary

    if not sys.platform.startswith("linux"):
        return None
    try:
        codex = Path(resolve_binary("codex")).resolve()
    except EngineUnavailableError:
        return None
    if codex.suffix in (".js", ".mjs", ".cjs"):  # a Node launcher: argv[0] would not reach Codex
        return None
    folder = codex_home.parent / "codex-bin"
    folder.mkdir(exist_ok=True)
    link = folder / SANDBOX_HELPER
    if link.is_symlink():
        if link.readlink() == codex:
            return folder
        link.unlink()
    elif link.exists():
        return folder  # not ours: left as it is
    link.symlink_to(codex)
    return folder


def _variables(codex_home: Path, api_key: str | None) -> dict[str, str]:
    variables = {
        "CODEX_HOME": str(codex_home),
        "FAKE_OPENAI_API_KEY": api_key or "sk-offline-not-a-real-key",
        "NO_COLOR": "1",
    }
    helper = _sandbox_helper_folder(codex_home)
    if helper is not None:
        inherited = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        variables["PATH"] = f"{helper}{os.pathsep}{inherited}"
    return variables


def codex_offline(
    server_url: str,
    directory: str | os.PathLike[str],
    *,
    model: str = "fake-model",
    context_window: int | None = None,
    api_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """Codex: ``$CODEX_HOME/config.toml`` with provider ``fake`` (Responses API), no retries;
    its key ``api_key`` (default a dummy).

    ``context_window`` sets ``model_context_window``; Codex then reports 95 % of it. Without
    it an unknown slug gets fallback metadata (reported window 258400) and a warning item.
    """
    home = fresh_home(directory)
    codex_home = _codex_home(directory)
    config = _write_config(codex_home, server_url, model=model, context_window=context_window)
    reported = (
        int(context_window) * 95 // 100 if context_window is not None else _CODEX_FALLBACK_WINDOW
    )
    return OfflineAgentConfig.build(
        "codex",
        home,
        _variables(codex_home, api_key),
        extra_env=extra_env,
        model=model,
        context_window=reported,
        files=(config,),
        args=("--skip-git-repo-check",),
        notes=_NOTES,
    )


def write_codex_model_catalog(
    codex_home: Path, *, model: str, context_window: int, codex: str | None = None
) -> Path:
    """``$CODEX_HOME/catalog.json``: the pinned Codex's bundled metadata of one real model,
    re-named ``model`` with ``context_window``, so Codex knows the fake model (no "Model
    metadata ... not found" warning in the answer) and reports 95 % of the window."""
    import subprocess

    from ..._wire.programs import resolve_binary

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
    api_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> OfflineAgentConfig:
    """codex-acp: the ``codex_offline`` provider (its key ``api_key``), **without**
    ``approval_policy`` and ``sandbox_mode`` (so permission requests reach the client), with a
    model catalog entry for ``model`` and without the adapter's prompt-suggestion model
    calls."""
    home = fresh_home(directory)
    codex_home = _codex_home(directory)
    catalog = write_codex_model_catalog(codex_home, model=model, context_window=context_window)
    config = _write_config(codex_home, server_url, model=model, catalog=catalog, asks=True)
    return OfflineAgentConfig.build(
        "codex-acp",
        home,
        {**_variables(codex_home, api_key), "CODEX_ACP_PROMPT_SUGGESTIONS": "false"},
        extra_env=extra_env,
        model=model,
        context_window=context_window * 95 // 100,
        files=(config, catalog),
        notes=(
            *_NOTES,
            "no approval_policy / sandbox_mode: the read-only mode asks the client",
            "model_catalog_json: the fake model has real metadata (no metadata warning)",
            "CODEX_ACP_PROMPT_SUGGESTIONS=false: no suggestion model call after each turn",
        ),
    )
