"""Engine and translator registry: names to implementations, imported lazily.

Adding an agent means writing one module under ``agentrun/engines/<name>/`` (argv + translator)
and one line in each table below; ``agentrun run --engine NAME`` and ``agentrun replay --engine
NAME`` then work, and the shared compliance tests pick it up.
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from ._errors import ConfigurationError
from ._process import Engine
from ._translate import Translator

__all__ = ["engine_names", "get_engine", "get_translator", "translator_names"]

#: name -> "module:attribute"; the attribute is an Engine subclass or a factory returning one.
_ENGINES: dict[str, str] = {
    "claude": "agentrun.engines.claude:ClaudeEngine",
    "opencode": "agentrun.engines.opencode:OpenCodeEngine",
    "acp": "agentrun.engines.acp:AcpEngine",
    "opencode-acp": "agentrun.engines.acp:opencode_acp",
    "replay": "agentrun._replay:ReplayEngine",
    "scripted": "agentrun.testing._scripted:ScriptedEngine",
}

#: name -> "module:attribute" of a Translator class taking no required arguments.
_TRANSLATORS: dict[str, str] = {
    "claude": "agentrun.engines.claude:ClaudeTranslator",
    "opencode": "agentrun.engines.opencode:OpenCodeTranslator",
    "acp": "agentrun.engines.acp:AcpTranslator",
    "opencode-acp": "agentrun.engines.acp:AcpTranslator",
}


def _load(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def engine_names() -> list[str]:
    return sorted(_ENGINES)


def translator_names() -> list[str]:
    return sorted(_TRANSLATORS)


def get_engine(name: str, **options: Any) -> Engine:
    """The engine called ``name``, constructed with ``options`` (e.g. ``binary=...``)."""
    spec = _ENGINES.get(name)
    if spec is None:
        raise ConfigurationError(
            f"unknown engine {name!r}; known: {', '.join(engine_names())}", option="engine"
        )
    try:
        factory = _load(spec)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"engine {name!r} is not available in this version of agentrun ({exc})",
            option="engine",
        ) from exc
    return cast(Engine, factory(**options))


def get_translator(name: str, **options: Any) -> Translator:
    """A fresh translator for ``name`` (used by replay and by the engines themselves)."""
    spec = _TRANSLATORS.get(name)
    if spec is None:
        raise ConfigurationError(
            f"no translator for engine {name!r}; known: {', '.join(translator_names())}",
            option="engine",
        )
    try:
        factory = _load(spec)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"engine {name!r} is not available in this version of agentrun ({exc})",
            option="engine",
        ) from exc
    return cast(Translator, factory(**options))
