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

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar, cast

from .messages import ContextSource, ContextWindow, Message, MessageType, Usage, assemble

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


class Catalog:
    """Context window and max output per model id, with aliases and family prefixes.

    Lookups ignore a ``provider/`` prefix (``anthropic/claude-opus-5-5``) and case.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._models: dict[str, ModelInfo] = {}
        self._aliases: dict[str, str] = {}
        self._families: list[tuple[str, ModelInfo]] = []
        self.extend(data)

    def extend(self, data: dict[str, Any]) -> None:
        """Merge more entries (same shape as ``catalog.json``); later entries win."""
        models = cast("dict[str, dict[str, Any]]", data.get("models", {}))
        for model_id, entry in models.items():
            key = model_id.lower()
            self._models[key] = ModelInfo(
                id=model_id,
                context_window=_int(entry.get("context_window")),
                max_output_tokens=_int(entry.get("max_output_tokens")),
                source=cast("str | None", entry.get("source")),
            )
            for alias in cast("list[str]", entry.get("aliases", [])):
                self._aliases[alias.lower()] = key
        families = cast("list[dict[str, Any]]", data.get("families", []))
        new = [
            (
                str(f["prefix"]).lower(),
                ModelInfo(
                    id=str(f["prefix"]),
                    context_window=_int(f.get("context_window")),
                    max_output_tokens=_int(f.get("max_output_tokens")),
                    source=cast("str | None", f.get("source")),
                    matched_by="family",
                ),
            )
            for f in families
        ]
        # Longest prefix first, so specific families beat generic ones.
        self._families = sorted(new + self._families, key=lambda item: -len(item[0]))

    def names(self) -> list[str]:
        """Every model id and alias the catalog knows (family prefixes aside), sorted."""
        return sorted({*(info.id for info in self._models.values()), *self._aliases})

    def lookup(self, model: str | None) -> ModelInfo | None:
        if not model:
            return None
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
    ``provider/`` prefix."""
    key = model.strip().lower()
    return [key, key.rsplit("/", 1)[1]] if "/" in key else [key]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


@lru_cache(maxsize=4)
def packaged_json(name: str) -> dict[str, Any]:
    """A JSON table shipped in the package (``catalog.json``, ``prices.json``), read once."""
    from importlib import resources

    text = (
        resources.files(__package__ or "agentrun._vocabulary")
        .joinpath(name)
        .read_text(encoding="utf-8")
    )
    return cast("dict[str, Any]", json.loads(text))


def user_extension(env: str) -> dict[str, Any] | None:
    """The JSON table in the file named by ``$env``, which extends a built-in one."""
    path = os.environ.get(env)
    if not path:
        return None
    with open(path, encoding="utf-8") as fh:
        return cast("dict[str, Any]", json.load(fh))


def default_catalog() -> Catalog:
    """The built-in catalog, extended by the file named in ``$AGENTRUN_MODEL_CATALOG``."""
    catalog = Catalog(packaged_json("catalog.json"))
    extra = user_extension(CATALOG_ENV)
    if extra is not None:
        catalog.extend(extra)
    return catalog


_T = TypeVar("_T")


class SharedDefault(Generic[_T]):
    """A default table the library reads (never modifies): built once per process, again only
    when the environment variable naming the user's additions changes. The public
    ``default_*()`` functions return fresh copies to callers."""

    def __init__(self, env: str, build: Callable[[], _T]) -> None:
        self._env = env
        self._build = build
        self._built: tuple[str | None, _T] | None = None

    def get(self) -> _T:
        extra = os.environ.get(self._env)
        if self._built is None or self._built[0] != extra:
            self._built = (extra, self._build())
        return self._built[1]


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
        if (
            used_source == "call_usage"
            and type(used) is int
            and (size_source is None or (size_source == "catalog" and type(size) is int))
        ):
            # Every number is the library's: the prompt of a validated call's usage (above
            # zero) and the catalog's window (above zero), nothing the agent said unchecked.
            reading = assemble(
                ContextWindow,
                {
                    "used_tokens": used,
                    "size_tokens": size,
                    "used_source": used_source,
                    "size_source": size_source,
                },
            )
            self.last = reading
            usage = assemble(Usage, {"context_used_tokens": used, "context_size_tokens": size})
            return assemble(
                Message,
                {
                    "type": MessageType.CONTEXT_WINDOW,
                    "context": reading,
                    "usage": usage,
                    "raw": raw,
                },
            )
        reading = ContextWindow(
            used_tokens=used,
            size_tokens=size,
            used_source=used_source if used is not None else None,
            size_source=size_source,
        )
        self.last = reading
        return Message.context_window(reading, raw=raw)
