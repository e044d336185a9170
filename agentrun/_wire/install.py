"""Installing the pinned agent programs: what ``agentrun engines install`` does.

The package carries the pinned ``engines/package.json`` and ``package-lock.json`` (in a wheel as
``agentrun/_engines/``; in a checkout they are the repository's ``engines/``).
:func:`install_engines` copies both into an engines directory and runs ``npm ci`` there, so the
agents are exactly the tested versions. The default directory is ``$AGENTRUN_ENGINES_DIR`` when
set, else the per-user one (``$XDG_DATA_HOME/agentrun/engines``, by default
``~/.local/share/agentrun/engines``), which :func:`~agentrun._wire.programs.resolve_binary`
searches after a checkout's ``engines/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .._vocabulary.errors import ConfigurationError, EngineUnavailableError
from .programs import ENGINES_DIR_ENV, user_engines_dir

__all__ = ["MANIFESTS", "default_install_dir", "install_engines", "pinned_manifests"]

#: The files that pin the agent programs, copied into the engines directory.
MANIFESTS = ("package.json", "package-lock.json")

_NPM_HINT = "install Node.js with npm (https://nodejs.org), then run: agentrun engines install"


def pinned_manifests() -> Path:
    """The directory holding the pinned ``package.json`` and ``package-lock.json``: the
    package's own copy (a wheel), else the checkout's ``engines/``."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_engines", package.parent / "engines"):
        if all((candidate / name).is_file() for name in MANIFESTS):
            return candidate
    raise ConfigurationError(
        f"the pinned engine manifests ({', '.join(MANIFESTS)}) are not part of this "
        f"installation (looked in {package / '_engines'} and {package.parent / 'engines'})",
        option="engines",
    )


def default_install_dir() -> Path:
    """Where ``agentrun engines install`` installs by default: ``$AGENTRUN_ENGINES_DIR`` when
    set, else the per-user engines directory."""
    env = os.environ.get(ENGINES_DIR_ENV)
    return Path(env).expanduser() if env else user_engines_dir()


def install_engines(directory: str | os.PathLike[str] | None = None, *, npm: str = "npm") -> Path:
    """Install the pinned agent programs into ``directory`` (default:
    :func:`default_install_dir`) with ``npm ci``; return the directory.

    npm's own output goes to this process's stdout and stderr. Raises
    :class:`~agentrun.EngineUnavailableError` when ``npm`` is not found or ``npm ci`` fails
    (its exit status in the message), :class:`~agentrun.ConfigurationError` when the manifests
    are missing or the directory cannot be written.
    """
    target = Path(directory).expanduser() if directory is not None else default_install_dir()
    source = pinned_manifests()
    found = shutil.which(npm)
    if found is None:
        raise EngineUnavailableError(
            f"npm ({npm!r}) was not found on PATH; the pinned agents are npm packages",
            engine="npm",
            install_hint=_NPM_HINT,
            searched=(f"PATH ({npm})",),
        )
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in MANIFESTS:
            shutil.copyfile(source / name, target / name)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write the engines directory {target}: {exc}", option="engines"
        ) from None
    argv = [found, "ci", "--no-audit", "--no-fund"]
    try:
        done = subprocess.run(argv, cwd=target, stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        raise EngineUnavailableError(
            f"npm could not be started: {exc}", engine="npm", install_hint=_NPM_HINT
        ) from None
    if done.returncode != 0:
        raise EngineUnavailableError(
            f"npm ci in {target} failed with exit status {done.returncode}",
            engine="npm",
            install_hint=f"cd {target} && npm ci",
        )
    return target
