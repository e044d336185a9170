"""Engine and translator registry: names to implementations, imported lazily.

Adding an agent means writing one module under ``agentrun/engines/<name>/`` (argv + translator)
and one line in each table below — or, outside this package, registering the engine and its
translator under the ``agentrun.engines`` / ``agentrun.translators`` entry-point groups;
``agentrun run --engine NAME`` and ``agentrun replay --engine
NAME`` then work, and the shared compliance tests pick it up.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any, cast

from .._bases.translator import Translator
from .._turns.engine import Engine
from .._vocabulary.errors import ConfigurationError

__all__ = ["engine_names", "get_engine", "get_translator", "translator_names"]

#: name -> "module:attribute"; the attribute is an Engine subclass or a factory returning one.
_ENGINES: dict[str, str] = {
    "claude": "agentrun.engines.claude:ClaudeEngine",
    "codex": "agentrun.engines.codex:CodexEngine",
    "codex-app-server": "agentrun.engines.codex:CodexAppServerEngine",
    "opencode": "agentrun.engines.opencode:OpenCodeEngine",
    "acp": "agentrun.engines.acp:AcpEngine",
    "opencode-acp": "agentrun.engines.acp:opencode_acp",
    "claude-acp": "agentrun.engines.acp:claude_acp",
    "codex-acp": "agentrun.engines.acp:codex_acp",
    "qwen": "agentrun.engines.acp:qwen",
    "gemini": "agentrun.engines.acp:gemini",
    "replay": "agentrun.engines._replay:ReplayEngine",
    "scripted": "agentrun.testing._scripted_engine:ScriptedEngine",
}

#: name -> "module:attribute" of a Translator class taking no required arguments.
_TRANSLATORS: dict[str, str] = {
    "claude": "agentrun.engines.claude:ClaudeTranslator",
    "codex": "agentrun.engines.codex:CodexExecTranslator",
    "codex-app-server": "agentrun.engines.codex:CodexAppServerTranslator",
    "opencode": "agentrun.engines.opencode:OpenCodeTranslator",
    "acp": "agentrun.engines.acp:AcpTranslator",
    "opencode-acp": "agentrun.engines.acp:AcpTranslator",
    "claude-acp": "agentrun.engines.acp:AcpTranslator",
    "codex-acp": "agentrun.engines.acp:AcpTranslator",
    "qwen": "agentrun.engines.acp:AcpTranslator",
    "gemini": "agentrun.engines.acp:AcpTranslator",
}


#: Entry-point groups through which installed packages add engines and translators:
#: ``[project.entry-points."agentrun.engines"] my-agent = "my_pkg.engine:MyEngine"``.
ENGINE_GROUP = "agentrun.engines"
TRANSLATOR_GROUP = "agentrun.translators"


def _plugins(group: str) -> dict[str, str]:
    """Names and ``module:attribute`` specs that installed packages register under ``group``
    (built-in names win)."""
    from importlib.metadata import entry_points

    try:
        found = entry_points(group=group)
    except Exception:  # a broken distribution must not break the registry
        return {}
    return {ep.name: ep.value for ep in found}


def _table(table: dict[str, str], group: str) -> dict[str, str]:
    return {**_plugins(group), **table}


def _factory(table: dict[str, str], name: str, what: str) -> Any:
    spec = table.get(name)
    if spec is None:
        raise ConfigurationError(
            f"{what} {name!r}; known: {', '.join(sorted(table))}", option="engine"
        )
    module_name, _, attribute = spec.partition(":")
    try:
        # A module already imported is taken as it is (import_module's own look-up costs more
        # than replaying a short transcript's line).
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        return getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"engine {name!r} is not available in this version of agentrun ({exc})",
            option="engine",
        ) from exc


def engine_names() -> list[str]:
    """Every engine name: the built-in ones and those installed packages register."""
    return sorted(_table(_ENGINES, ENGINE_GROUP))


def translator_names() -> list[str]:
    return sorted(_table(_TRANSLATORS, TRANSLATOR_GROUP))


def get_engine(name: str, **options: Any) -> Engine:
    """The engine called ``name``, constructed with ``options`` (e.g. ``binary=...``;
    ``pool=N``: N sessions at most share one agent process, on the engines that can)."""
    table = _ENGINES if name in _ENGINES else _table(_ENGINES, ENGINE_GROUP)
    factory = _factory(table, name, "unknown engine")
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        if "pool" in options and "'pool'" in str(exc):
            raise ConfigurationError(
                f"engine {name!r} cannot share an agent process between sessions (pool=); "
                "the ACP engines and codex-app-server can",
                option="pool",
                engine=name,
            ) from None
        # An engine that needs arguments (replay: a transcript) is not built by name alone.
        raise ConfigurationError(
            f"engine {name!r} cannot be built with "
            f"{', '.join(sorted(options)) or 'no options'}: {exc}",
            option="engine",
        ) from None
    except ValueError:  # no signature to check (a builtin): let the call decide
        pass
    return cast(Engine, factory(**options))


#: Classes whose instances were found to implement :class:`Translator`: the protocol's
#: ``isinstance`` looks up every member, which costs more than a short transcript's replay.
_TRANSLATOR_CLASSES: set[type] = set()


def get_translator(name: str, **options: Any) -> Translator:
    """A fresh translator for ``name`` (used by replay and by the engines themselves)."""
    table = _TRANSLATORS if name in _TRANSLATORS else _table(_TRANSLATORS, TRANSLATOR_GROUP)
    translator: object = _factory(table, name, "no translator for engine")(**options)
    kind = type(translator)
    if kind in _TRANSLATOR_CLASSES:
        return cast(Translator, translator)
    if isinstance(translator, Translator):
        _TRANSLATOR_CLASSES.add(kind)
    else:
        raise ConfigurationError(
            f"the translator of {name!r} ({type(translator).__name__}) does not implement "
            "agentrun.abc.Translator (subclass it for the optional members' defaults)",
            option="engine",
        )
    return translator
