"""The model catalog and the engine-agnostic context-window tracker.

Every engine that can know how full the model's context is emits ``context_window`` messages
through a :class:`ContextTracker`:

* ``used`` is the prompt size (input + cache read + cache write) of the **latest main-thread model
  call** (never a sum across calls), or the number the agent reports directly (ACP
  ``usage_update.used``);
* ``size`` comes from the best source known: reported by the agent (remembered for the rest of the
  session) > the session's ``context_window_tokens`` > the model catalog;
* each number says where it came from; where nothing is known the number is ``None``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

from .errors import ConfigurationError
from .messages import ContextSource, ContextWindow, Message, Usage, assemble
from .tables import extend_from, packaged_json

__all__ = ["Catalog", "ContextTracker", "ModelInfo", "default_catalog"]

#: Environment variable naming a JSON file (same shape as ``catalog.json``) merged over the
#: built-in catalog.
CATALOG_ENV = "AGENTRUN_MODEL_CATALOG"


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the catalog knows about one model."""

    id: str
    context_window: int | None
    max_output_tokens: int | None = None
    source: str | None = None
    #: How the id was matched: ``exact``, ``alias`` or ``family`` (a prefix rule).
    matched_by: Literal["exact", "alias", "family"] = "exact"


#: How many model names a catalog (or a price catalog) remembers the match of; beyond, it
#: starts over (a process that meets that many names is not the common case worth keeping).
FOUND_LIMIT = 256

_Found = TypeVar("_Found")


def remember(found: dict[str, _Found], model: str, match: _Found) -> _Found:
    """Keep ``match`` as what a catalog's look-up of ``model`` found (at most
    :data:`FOUND_LIMIT` names) and return it."""
    if len(found) >= FOUND_LIMIT:
        found.clear()
    found[model] = match
    return match


class Catalog:
    """Context window and max output per model id, with aliases and family prefixes.

    Lookups ignore a ``provider/`` prefix (``anthropic/claude-opus-5-5``) and case.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._models: dict[str, ModelInfo] = {}
        self._aliases: dict[str, str] = {}
        self._families: list[tuple[str, ModelInfo]] = []
        #: What :meth:`lookup` found per model name since the last :meth:`extend`.
        self._found: dict[str, ModelInfo | None] = {}
        self.extend(data)

    def extend(self, data: dict[str, Any]) -> None:
        """Merge more entries (same shape as ``catalog.json``); later entries win. A table of
        another shape, or with a key of its own that no catalog has (``_``-prefixed keys are
        comments), is refused with :class:`ConfigurationError` and changes nothing."""
        check_table_keys(data, MODEL_TABLE)
        models: dict[str, ModelInfo] = {}
        aliases: dict[str, str] = {}
        for model_id, entry in table_entries(data).items():
            key = model_id.lower()
            models[key] = ModelInfo(
                id=model_id,
                context_window=_tokens(entry, "context_window", model_id),
                max_output_tokens=_tokens(entry, "max_output_tokens", model_id),
                source=text_field(entry, "source", model_id),
            )
            for alias in alias_list(entry, model_id):
                aliases[alias.lower()] = key
        families = _object(data).get("families", [])
        if not isinstance(families, list):
            raise ConfigurationError("'families' must be a list of objects", option="families")
        new: list[tuple[str, ModelInfo]] = []
        for index, family in enumerate(cast("list[Any]", families)):
            where = f"families[{index}]"
            if not isinstance(family, dict):
                raise ConfigurationError(f"{where} must be an object", option="families")
            family = cast("dict[str, Any]", family)
            prefix = family.get("prefix")
            if not isinstance(prefix, str) or not prefix:
                raise ConfigurationError(f"{where} needs a 'prefix' string", option="families")
            info = ModelInfo(
                id=prefix,
                context_window=_tokens(family, "context_window", where),
                max_output_tokens=_tokens(family, "max_output_tokens", where),
                source=text_field(family, "source", where),
                matched_by="family",
            )
            new.append((prefix.lower(), info))
        self._models.update(models)
        self._aliases.update(aliases)
        # Longest prefix first, so specific families beat generic ones.
        self._families = sorted(new + self._families, key=lambda item: -len(item[0]))
        self._found = {}

    def names(self) -> list[str]:
        """Every model id and alias the catalog knows (family prefixes aside), sorted."""
        return sorted({*(info.id for info in self._models.values()), *self._aliases})

    def lookup(self, model: str | None) -> ModelInfo | None:
        if not model:
            return None
        # A session asks for its model at every reading: each name is matched once.
        found = self._found
        if model in found:
            return found[model]
        return remember(found, model, self._match(model))

    def _match(self, model: str) -> ModelInfo | None:
        candidates = model_keys(model)
        for candidate in candidates:
            if candidate in self._models:
                return self._models[candidate]
            if candidate in self._aliases:
                info = self._models[self._aliases[candidate]]
                return ModelInfo(
                    info.id, info.context_window, info.max_output_tokens, info.source, "alias"
                )
        for candidate in candidates:
            for prefix, info in self._families:
                if candidate.startswith(prefix):
                    return info
        return None


def model_keys(model: str) -> list[str]:
    """The keys a model id is looked up by, best first: the id in lower case, then without its
    ``provider/`` prefix. A name an agent decorates is also looked up by the model id inside it:
    Qwen Code's ``$runtime|openai|qwen3-coder(openai)`` by ``qwen3-coder``."""
    key = model.strip().lower()
    keys = [key]
    if "|" in key:
        inner = key.rsplit("|", 1)[1].strip()
        if inner.endswith(")") and "(" in inner:
            inner = inner[: inner.rindex("(")].strip()
        if inner:
            keys.append(inner)
    for k in list(keys):
        if "/" in k and (bare := k.rsplit("/", 1)[1]):
            keys.append(bare)
    return list(dict.fromkeys(keys))


def _object(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"the table must be a JSON object, not {type(data).__name__}", option="models"
        )
    return cast("dict[str, Any]", data)


@dataclass(frozen=True)
class TableShape:
    """The top-level keys a kind of table may have (besides ``_``-prefixed comments such as
    ``_about``), at least one of which it must have, and the words its errors use."""

    what: str
    keys: tuple[str, ...]
    option: str
    missing: str


PRICE_TABLE = TableShape(
    what="a price table",
    keys=("models",),
    option="prices",
    missing="its prices go in 'models'",
)
MODEL_TABLE = TableShape(
    what="a model catalog",
    keys=("models", "families"),
    option="models",
    missing="its entries go in 'models' and 'families'",
)


def check_table_keys(data: object, shape: TableShape) -> None:
    """A table has some of its own keys and no other: a misspelt ``models`` would otherwise
    add nothing without a word."""
    if not isinstance(data, dict):
        return  # the shape is :func:`table_entries`'s to refuse
    keys = [str(k) for k in cast("dict[object, object]", data)]
    unknown = [k for k in keys if k not in shape.keys and not k.startswith("_")]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, shape.keys, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigurationError(
            f"{shape.what} has no key {key!r}{hint}: {shape.missing}", option=shape.option
        )
    if not any(k in keys for k in shape.keys):
        named = " or ".join(repr(k) for k in shape.keys)
        raise ConfigurationError(
            f'{shape.what} has no {named} (add entries as {{"models": {{"<model id>": {{...}}}}}})',
            option=shape.option,
        )


def table_entries(data: object) -> dict[str, dict[str, Any]]:
    """The ``models`` of a catalog table, each checked to be an object (a
    :class:`ConfigurationError` naming what is wrong otherwise)."""
    models = _object(data).get("models", {})
    if not isinstance(models, dict):
        raise ConfigurationError("'models' must be an object of model ids", option="models")
    for model_id, entry in cast("dict[str, Any]", models).items():
        if not isinstance(entry, dict):
            raise ConfigurationError(
                f"the entry of {model_id!r} must be an object", option="models"
            )
    return cast("dict[str, dict[str, Any]]", models)


def alias_list(entry: dict[str, Any], model_id: str) -> list[str]:
    """An entry's ``aliases``: a list of strings."""
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(
        isinstance(a, str) for a in cast("list[Any]", aliases)
    ):
        raise ConfigurationError(
            f"the aliases of {model_id!r} must be a list of strings", option="models"
        )
    return cast("list[str]", aliases)


def text_field(entry: dict[str, Any], name: str, where: str) -> str | None:
    """An optional string field of an entry."""
    value = entry.get(name)
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"the {name} of {where!r} must be a string", option="models")
    return value


def _tokens(entry: dict[str, Any], name: str, where: str) -> int | None:
    value = entry.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(
            f"the {name} of {where!r} must be a positive whole number of tokens, got {value!r}",
            option="models",
        )
    return value


def default_catalog() -> Catalog:
    """The built-in catalog, extended by the file named in ``$AGENTRUN_MODEL_CATALOG``."""
    catalog = Catalog(packaged_json("catalog.json"))
    extend_from(CATALOG_ENV, catalog.extend)
    return catalog


_T = TypeVar("_T")


class SharedDefault(Generic[_T]):
    """A default table the library reads (never modifies): built once per process, again only
    when the environment variable naming the user's additions changes. The public
    ``default_*()`` functions return fresh copies to callers."""

    def __init__(self, env: str, build: Callable[[], _T]) -> None:
        self._env = env
        self._build = build
        self._built: tuple[object, _T] | None = None
        self._environ: object = None
        self._table: dict[Any, Any] | None = None
        self._key: object = None

    def get(self) -> _T:
        environ = os.environ
        if environ is not self._environ:
            self._bind(environ)
        table = self._table
        # The variable's value as ``os.environ`` keeps it: equal exactly when the decoded values
        # are, read with one dict lookup where ``os.environ.get`` runs four Python functions
        # (every context tracker and every turn's accounting asks).
        extra = table.get(self._key) if table is not None else environ.get(self._env)
        built = self._built
        if built is None or built[0] != extra:
            built = self._built = (extra, self._build())
        return built[1]

    def _bind(self, environ: object) -> None:
        """Read the variable from the table behind ``environ`` (CPython's ``os._Environ``
        keeps its encoded keys and values in ``_data``); a mapping without one (a stand-in put
        in place of ``os.environ``) is asked through ``get``."""
        table: object = getattr(environ, "_data", None)
        encodekey: object = getattr(environ, "encodekey", None)
        if type(table) is dict and callable(encodekey):
            self._key = encodekey(self._env)
            self._table = cast("dict[Any, Any]", table)
        else:
            self._table = None
        # Last: a thread that sees this environment bound sees its table and key.
        self._environ = environ


_tracker_catalog = SharedDefault(CATALOG_ENV, default_catalog).get


class ContextTracker:
    """Turns per-call usage (or an agent's own figures) into ``context_window`` messages.

    One tracker lives as long as a session. ``override`` is the session's
    ``context_window_tokens``.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        override: int | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self._catalog = catalog if catalog is not None else _tracker_catalog()
        self._override = override
        self._reported: int | None = None
        self._reported_source: ContextSource = "agent"
        self._model = model
        self.last: ContextWindow | None = None

    @property
    def model(self) -> str | None:
        return self._model

    def set_model(self, model: str | None) -> None:
        """The model the agent says it uses (e.g. from its init event)."""
        if model:
            self._model = model

    def report_size(self, size: int | None, *, effective: bool = False) -> None:
        """A window size the agent reported: authoritative, remembered for the session.
        ``effective``: the agent reports the part of the window it lets a conversation fill."""
        if size is not None and size > 0:
            self._reported = size
            self._reported_source = "agent_effective" if effective else "agent"

    def size(self) -> tuple[int | None, ContextSource | None]:
        """The best known window size and its source."""
        if self._reported is not None:
            return self._reported, self._reported_source
        if self._override is not None:
            return self._override, "user"
        info = self._catalog.lookup(self._model)
        if info is not None and info.context_window is not None:
            return info.context_window, "catalog"
        return None, None

    def observe_call(self, usage: Usage, *, raw: Any = None) -> Message | None:
        """A main-thread model call finished (or started) with this usage; ``None`` when the
        usage has no prompt-side numbers, or only zeros (every real call has a prompt: zeros
        are an agent's placeholder before its first call, such as Codex's at a turn's start)."""
        used = usage.prompt_tokens
        if not used:
            return None
        return self._reading(used, "call_usage", raw=raw)

    def observe_reported(
        self, used: int | None, size: int | None = None, *, raw: Any = None
    ) -> Message:
        """The agent reported its own context fill (and perhaps the window)."""
        self.report_size(size)
        return self._reading(used, "agent" if used is not None else None, raw=raw)

    def refresh(self) -> Message | None:
        """Re-issue the last reading with the best size now known (e.g. after the agent
        reported the window at the end of a turn); ``None`` if nothing changed."""
        if self.last is None:
            return None
        size, source = self.size()
        if size == self.last.size_tokens and source == self.last.size_source:
            return None
        return self._reading(self.last.used_tokens, self.last.used_source)

    def _reading(
        self, used: int | None, used_source: ContextSource | None, *, raw: Any = None
    ) -> Message:
        size, size_source = self.size()
        if used is None:
            used_source = None
        if (used is None or type(used) is int) and (size is None or type(size) is int):
            # Numbers that are already what validation returns (an agent's number was read as
            # an int, or is not); the sources are the library's own.
            reading = assemble(
                ContextWindow,
                {
                    "used_tokens": used,
                    "size_tokens": size,
                    "used_source": used_source,
                    "size_source": size_source,
                },
            )
        else:
            reading = ContextWindow(
                used_tokens=used,
                size_tokens=size,
                used_source=used_source,
                size_source=size_source,
            )
        self.last = reading
        return Message.context_window(reading, raw=raw)
