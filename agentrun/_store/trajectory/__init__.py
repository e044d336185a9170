"""Sessions as ATIF trajectories: export (:func:`to_atif`), import (:func:`from_atif`) and the
digest that seeds a session of another agent (:func:`trajectory_digest`).

One module per concern:

* :mod:`.atif` — the RFC's objects as strict pydantic models (:class:`Trajectory`, ``Atif*``);
* :mod:`.turns` — :class:`ReplayedTurn`, :class:`TrajectoryTurns`, the turns a replayed
  transcript or an imported trajectory is read into;
* :mod:`.load` — :data:`TrajectorySource`, :func:`load_trajectory` (a model, a decoded document,
  JSON text or a file), and the keys export and import share;
* :mod:`.export` — :func:`to_atif` (the mapping onto the RFC is described there);
* :mod:`.import_` — :func:`from_atif`, :data:`MAX_SUBAGENT_DEPTH`;
* :mod:`.digest` — :func:`trajectory_digest`, :data:`DIGEST_MAX_CHARS`.

The names below load their module on first use: replay imports :mod:`.turns`, which runs this
file, and must not load the ATIF models with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .digest import DIGEST_MAX_CHARS, trajectory_digest
    from .export import to_atif
    from .import_ import MAX_SUBAGENT_DEPTH, from_atif
    from .load import TrajectorySource, load_trajectory
    from .turns import ReplayedTurn, TrajectoryTurns

#: Each name this package gives, and the module of the package that holds it.
_HOME: dict[str, str] = {
    "DIGEST_MAX_CHARS": ".digest",
    "trajectory_digest": ".digest",
    "to_atif": ".export",
    "MAX_SUBAGENT_DEPTH": ".import_",
    "from_atif": ".import_",
    "TrajectorySource": ".load",
    "load_trajectory": ".load",
    "ReplayedTurn": ".turns",
    "TrajectoryTurns": ".turns",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "DIGEST_MAX_CHARS",
    "MAX_SUBAGENT_DEPTH",
    "ReplayedTurn",
    "TrajectorySource",
    "TrajectoryTurns",
    "from_atif",
    "load_trajectory",
    "to_atif",
    "trajectory_digest",
]
