"""Finding the agent programs.

:func:`resolve_binary` looks, in order, at an explicit path, at the pinned programs under
``engines/node_modules`` (next to the package, or ``$AGENTRUN_ENGINES_DIR``), and at ``PATH``.
Under ``engines/`` the real native executable behind an npm shim is preferred when it is easy
to find (Codex's ``bin/codex.js`` shim spawns a native child that a kill of the shim would
orphan on Node 20; Claude Code's and OpenCode's ``.bin`` entries already point at native files).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from pathlib import Path

from .._vocabulary.errors import EngineUnavailableError

__all__ = ["INSTALL_HINT", "engines_dir", "engines_dirs", "package_version", "resolve_binary"]

#: The command that installs the pinned agent programs (run from the repository root).
INSTALL_HINT = "npm install --prefix engines --no-audit --no-fund"

_ENV_ENGINES_DIR = "AGENTRUN_ENGINES_DIR"
#: The checkout's (or installed tree's) ``engines`` folder: beside the ``agentrun`` package,
#: which holds this file in ``agentrun/_wire/``.
_PACKAGED_ENGINES_DIR = Path(__file__).resolve().parents[2] / "engines"


def engines_dirs() -> list[Path]:
    """Directories that may hold an ``engines`` npm install, most specific first."""
    dirs: list[Path] = []
    env = os.environ.get(_ENV_ENGINES_DIR)
    if env:
        dirs.append(Path(env).expanduser())
    dirs.append(_PACKAGED_ENGINES_DIR)
    return dirs


def engines_dir() -> Path:
    """The first engines directory that has a ``node_modules`` (or the default one)."""
    dirs = engines_dirs()
    for d in dirs:
        if (d / "node_modules").is_dir():
            return d
    return dirs[-1]


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _is_native(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError:
        return False
    return (
        magic
        in (
            b"\x7fELF",
            b"\xcf\xfa\xed\xfe",  # Mach-O 64-bit
            b"\xce\xfa\xed\xfe",
            b"\xca\xfe\xba\xbe",  # universal
        )
        or magic[:2] == b"MZ"
    )


def _rust_triple() -> str | None:
    machine = platform.machine().lower()
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(
        machine
    )
    if arch is None:
        return None
    if sys.platform.startswith("linux"):
        return f"{arch}-unknown-linux-musl"
    if sys.platform == "darwin":
        return f"{arch}-apple-darwin"
    return None


def _native_candidates(name: str, node_modules: Path) -> list[Path]:
    """Native executables behind the npm shim of ``name``, best first."""
    if name == "codex":
        triple = _rust_triple()
        if triple is None:
            return []
        vendored = sorted(node_modules.glob(f"@openai/codex-*/vendor/{triple}/bin/codex"))
        return [*vendored, node_modules / "@openai" / "codex" / "vendor" / triple / "bin" / "codex"]
    return []


def _from_engines(name: str, engines: Path) -> tuple[str | None, list[str]]:
    node_modules = engines / "node_modules"
    searched: list[str] = []
    for cand in _native_candidates(name, node_modules):
        searched.append(str(cand))
        if _is_executable(cand):
            return str(cand), searched
    shim = node_modules / ".bin" / name
    searched.append(str(shim))
    if _is_executable(shim):
        real = shim.resolve()
        if _is_native(real):
            return str(real), searched
        return str(shim), searched
    return None, searched


def resolve_binary(
    name: str,
    *,
    explicit: str | os.PathLike[str] | None = None,
    engine: str | None = None,
) -> str:
    """The path of the agent program ``name`` (``"claude"``, ``"codex"``, ``"opencode"``...).

    ``explicit`` wins and must be an existing executable (a bare name is looked up on
    ``PATH``). Otherwise the pinned install under ``engines/node_modules`` is used, then
    ``PATH``. Raises :class:`~agentrun.EngineUnavailableError` (with the install command)
    when nothing is found.
    """
    engine_name: str = engine or name
    if explicit is not None:
        text = os.fspath(explicit)
        path = Path(text).expanduser()
        if os.sep not in text and not path.exists():
            found = shutil.which(text)
            if found is not None:
                return found
        if _is_executable(path):
            return str(path)
        problem = "does not exist" if not path.exists() else "is not an executable file"
        raise EngineUnavailableError(
            f"the {engine_name} program {text!r} {problem}",
            engine=engine_name,
            install_hint=INSTALL_HINT,
            searched=(text,),
        )
    searched: list[str] = []
    for engines in engines_dirs():
        found, tried = _from_engines(name, engines)
        searched.extend(tried)
        if found is not None:
            return found
    on_path = shutil.which(name)
    searched.append(f"PATH ({name})")
    if on_path is not None:
        return on_path
    raise EngineUnavailableError(
        f"the {engine_name} program {name!r} was not found",
        engine=engine_name,
        install_hint=INSTALL_HINT,
        searched=tuple(searched),
    )


def package_version(binary: str, name_prefix: str) -> str | None:
    """The version of the npm package (named ``name_prefix...``) that ships ``binary``: the
    nearest ``package.json`` above it. ``None`` when there is none or it is unreadable."""
    import json

    for parent in Path(binary).resolve().parents:
        manifest = parent / "package.json"
        if not manifest.is_file():
            continue
        try:
            data: object = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        info: dict[object, object] = data  # pyright: ignore[reportUnknownVariableType]
        name, version = info.get("name"), info.get("version")
        if isinstance(name, str) and name.startswith(name_prefix) and isinstance(version, str):
            return version.split("-", 1)[0]
        return None
    return None


_NODE_VERSIONS: dict[str, tuple[int, ...] | None] = {}


def _node_version(node: str) -> tuple[int, ...] | None:
    """``node --version`` as numbers (cached per path), or ``None`` if it does not answer."""
    if node not in _NODE_VERSIONS:
        import subprocess

        try:
            done = subprocess.run(
                [node, "--version"], capture_output=True, text=True, timeout=10, check=False
            )
            text = done.stdout.strip().lstrip("v")
            _NODE_VERSIONS[node] = tuple(int(p) for p in text.split(".")[:3])
        except (OSError, ValueError, subprocess.SubprocessError):
            _NODE_VERSIONS[node] = None
    return _NODE_VERSIONS[node]


def resolve_node(*, minimum: int, engine: str) -> str:
    """A Node.js of at least major version ``minimum``: the pinned runtime under
    ``engines/node_modules`` (the registry's ``node-<platform>`` package), else ``node`` on
    ``PATH`` if it is new enough."""
    searched: list[str] = []
    candidates: list[Path] = []
    for engines in engines_dirs():
        node_modules = engines / "node_modules"
        candidates.extend(sorted(node_modules.glob("node-*/bin/node")))
        candidates.append(node_modules / ".bin" / "node")
    on_path = shutil.which("node")
    if on_path is not None:
        candidates.append(Path(on_path))
    for cand in candidates:
        searched.append(str(cand))
        if not _is_executable(cand):
            continue
        version = _node_version(str(cand))
        if version is not None and version[0] >= minimum:
            return str(cand)
    raise EngineUnavailableError(
        f"the {engine} engine needs Node.js {minimum} or newer (none found)",
        engine=engine,
        install_hint=INSTALL_HINT,
        searched=tuple(searched),
    )


def resolve_node_script(package: str, script: str, *, engine: str) -> str:
    """The path of ``script`` inside the pinned npm ``package`` (``dist/index.js``)."""
    searched: list[str] = []
    for engines in engines_dirs():
        path = engines / "node_modules" / package / script
        searched.append(str(path))
        if path.is_file():
            return str(path)
    raise EngineUnavailableError(
        f"the {engine} engine needs the npm package {package} (not installed)",
        engine=engine,
        install_hint=INSTALL_HINT,
        searched=tuple(searched),
    )
