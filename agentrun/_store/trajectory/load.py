"""What export and import share: the sources a reader takes
(:data:`TrajectorySource`) and :func:`load_trajectory`, which validates one into a
:class:`Trajectory`; plus the names both directions write and read (:data:`EXTRA_KEY`,
:data:`ATIF_SYSTEM`). The turns a trajectory is read into (:class:`ReplayedTurn`,
:class:`TrajectoryTurns`) are in :mod:`.turns`, which replay imports without the
ATIF models.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from ..._vocabulary.errors import ConfigurationError
from .atif import ATIF_VERSIONS, Trajectory

__all__ = [
    "ATIF_SYSTEM",
    "CONTENT_KEY",
    "EXTRA_KEY",
    "MAX_NESTING",
    "TrajectorySource",
    "load_trajectory",
    "parts_text",
]

#: What the readers of a trajectory take: the model, a decoded document, JSON text or bytes, or
#: the path of a JSON file (an ``os.PathLike``; a ``str`` is JSON text).
TrajectorySource = Trajectory | Mapping[str, Any] | str | bytes | os.PathLike[str]

#: How deep a document nests (objects and arrays): JSON text deeper than this is refused by the
#: parser, and a decoded document (a ``Mapping``) is held to the same bound.
MAX_NESTING = 200

#: The key under a step's (or a trajectory's) ``extra`` that holds what the RFC has no field for.
EXTRA_KEY = "agentrun"
#: The subtype of a ``system`` message that stands for a system step of a foreign trajectory.
ATIF_SYSTEM = "atif_system"
#: The key under a message's ``data`` that keeps the content parts (text, images, audio) its
#: step's message or result was given as, in their JSON form.
CONTENT_KEY = "atif_content"


def parts_text(parts: Iterable[Mapping[str, Any]]) -> str:
    """The text of content parts (in their JSON form): their text parts, a line each."""
    return "\n".join(text for p in parts if p.get("type") == "text" and (text := p.get("text")))


def load_trajectory(source: TrajectorySource) -> Trajectory:
    """A validated :class:`Trajectory` from a model, a decoded document, JSON text, or the path
    of a JSON file. Raises :class:`ConfigurationError` when it is not an ATIF document."""
    if isinstance(source, Trajectory):
        return source
    try:
        if isinstance(source, os.PathLike):
            source = Path(source).read_bytes()
        if isinstance(source, (str, bytes)):
            return Trajectory.model_validate_json(source)
        if _too_deep(source):
            raise ConfigurationError(
                f"not an ATIF trajectory: nested deeper than {MAX_NESTING} levels",
                option="trajectory",
            )
        return Trajectory.model_validate(source)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the trajectory: {exc.strerror or exc}", option="trajectory"
        ) from None
    except ValidationError as exc:
        errors = exc.errors()
        version = next((e for e in errors if _is_version_error(e["loc"], e["type"])), None)
        if version is not None:
            # A newer (or unknown) version explains whatever else failed: say that alone.
            where = _place(version["loc"])
            if len(where) > 200:
                where = "…" + where[-199:]
            raise ConfigurationError(
                f"not an ATIF version this library reads: {where} is {_shown(version['input'])}"
                f" (it reads {ATIF_VERSIONS[0]} to {ATIF_VERSIONS[-1]})",
                option="trajectory",
            ) from None
        # The deepest error is the most telling: a message of the wrong parts fails as a string
        # too (``str | list[parts]``), and that error comes first.
        first = max(errors, key=lambda e: len(e["loc"]))
        where = _place(first["loc"])
        if len(where) > 200:
            where = "…" + where[-199:]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigurationError(
            f"not an ATIF trajectory: {where + ': ' if where else ''}{message}",
            option="trajectory",
        ) from None


def _is_version_error(location: tuple[int | str, ...], kind: str) -> bool:
    """Whether a validation error is a ``schema_version`` outside :data:`ATIF_VERSIONS` (of the
    document, or of a subagent trajectory embedded in it)."""
    return bool(location) and location[-1] == "schema_version" and kind == "literal_error"


def _place(location: tuple[int | str, ...]) -> str:
    """Where in the document an error is, without the names pydantic gives the members of a
    union (``list[...]``, ``function-after[...]``): ``steps.0.message.0.source.media_type``."""
    return ".".join(str(p) for p in location if not (isinstance(p, str) and "[" in p))


def _shown(value: object) -> str:
    """``value`` as an error message shows it: its ``repr``, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _too_deep(document: Mapping[str, Any]) -> bool:
    """Whether ``document``'s objects and arrays nest deeper than :data:`MAX_NESTING`
    (iterative: no recursion limit applies)."""
    stack: list[tuple[Iterable[object], int]] = [(document.values(), 1)]
    while stack:
        children, depth = stack.pop()
        for child in children:
            if isinstance(child, Mapping):
                inner: Iterable[object] = cast("Mapping[Any, object]", child).values()
            elif isinstance(child, (list, tuple)):
                inner = cast("Iterable[object]", child)
            else:
                continue
            if depth + 1 > MAX_NESTING:
                return True
            stack.append((inner, depth + 1))
    return False
