"""What every agent's offline configuration is made of.

An offline configuration points a real agent program at the embedded model server
(:mod:`agentrun.offline`). Each engine folder has its own (``engines/<name>/_offline.py``): a
function of the server URL (``ModelServer.url``, e.g. ``http://127.0.0.1:40365``) and a
directory the configuration may own (it creates ``home/`` and config files inside) that returns
an :class:`OfflineAgentConfig`. Its ``env`` is a **complete** environment: it starts from
``PATH``, ``LANG``, ``USER``, ``SHELL`` (inherited), ``TERM=dumb`` and a fresh ``HOME``
(:func:`base_env`), and never copies the caller's ``ANTHROPIC_*`` / ``OPENAI_*`` / ``CODEX_*``
/ ``OPENCODE_*`` variables, so a developer's real credentials cannot leak into a test.

What each agent would otherwise reach, and the setting that stops it, is told in its module
(from recordings made in a loopback-only network namespace with a logging, refusing proxy).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "OfflineAgentConfig",
    "base_env",
    "fresh_home",
    "running_as_root",
    "server_root",
    "write_json",
]


@dataclass(frozen=True)
class OfflineAgentConfig:
    """Everything needed to start one agent program against the model server."""

    #: The agent configured: ``"claude"``, ``"opencode"``, ``"codex"``, ``"claude-acp"``,
    #: ``"codex-acp"``, ``"qwen"`` or ``"gemini"``.
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

    @classmethod
    def build(
        cls,
        agent: str,
        home: Path,
        variables: Mapping[str, str],
        *,
        extra_env: Mapping[str, str] | None,
        model: str | None,
        context_window: int | None,
        files: tuple[Path, ...] = (),
        args: tuple[str, ...] = (),
        notes: tuple[str, ...] = (),
    ) -> OfflineAgentConfig:
        """A configuration whose environment is :func:`base_env` of ``home``, then the agent's
        ``variables``, then the caller's ``extra_env``."""
        env = base_env(home)
        env.update(variables)
        if extra_env:
            env.update(extra_env)
        return cls(
            agent=agent,
            env=env,
            model=model,
            context_window=context_window,
            home=home,
            files=files,
            args=args,
            notes=notes,
        )


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


def fresh_home(directory: str | os.PathLike[str]) -> Path:
    """``<directory>/home``, created: the agent's HOME."""
    home = Path(directory).resolve() / "home"
    home.mkdir(parents=True, exist_ok=True)
    return home


def server_root(url: str) -> str:
    """The server URL without a trailing slash or ``/v1``."""
    return url.rstrip("/").removesuffix("/v1")


def running_as_root() -> bool:
    geteuid = getattr(os, "geteuid", None)
    return geteuid is not None and geteuid() == 0


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as indented JSON (its folder created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
