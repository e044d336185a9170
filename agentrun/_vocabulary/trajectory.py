"""Sessions as ATIF trajectories: export (:func:`to_atif`), import (:func:`from_atif`) and the
digest that seeds a session of another agent (:func:`trajectory_digest`).

The names other modules import, gathered from the modules that hold them and loaded on first
use, so that replay (which needs only :class:`ReplayedTurn`) does not load the ATIF models:

* :mod:`.trajectory_turns` — :class:`ReplayedTurn`, :class:`TrajectoryTurns`;
* :mod:`.trajectory_load` — :data:`TrajectorySource`, :func:`load_trajectory`;
* :mod:`.trajectory_export` — :func:`to_atif` (the mapping onto the RFC is described there);
* :mod:`.trajectory_import` — :func:`from_atif`;
* :mod:`.trajectory_digest` — :func:`trajectory_digest`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .trajectory_digest import trajectory_digest
    from .trajectory_export import to_atif
    from .trajectory_import import from_atif
    from .trajectory_load import TrajectorySource, load_trajectory
    from .trajectory_turns import ReplayedTurn, TrajectoryTurns

#: Each name's module.
_HOMES: dict[str, str] = {
    "ReplayedTurn": ".trajectory_turns",
    "TrajectoryTurns": ".trajectory_turns",
    "TrajectorySource": ".trajectory_load",
    "load_trajectory": ".trajectory_load",
    "to_atif": ".trajectory_export",
    "from_atif": ".trajectory_import",
    "trajectory_digest": ".trajectory_digest",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(home, __package__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "ReplayedTurn",
    "TrajectorySource",
    "TrajectoryTurns",
    "from_atif",
    "load_trajectory",
    "to_atif",
    "trajectory_digest",
]
