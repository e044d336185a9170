"""Sessions as ATIF trajectories: export (:func:`to_atif`), import (:func:`from_atif`) and the
digest that seeds a session of another agent (:func:`trajectory_digest`).

The names other modules import, gathered from the modules that hold them (replay, which needs
only :class:`ReplayedTurn`, imports :mod:`.trajectory_turns` itself and so loads no ATIF
model):

* :mod:`.trajectory_turns` — :class:`ReplayedTurn`, :class:`TrajectoryTurns`;
* :mod:`.trajectory_load` — :data:`TrajectorySource`, :func:`load_trajectory`;
* :mod:`.trajectory_export` — :func:`to_atif` (the mapping onto the RFC is described there);
* :mod:`.trajectory_import` — :func:`from_atif`, :data:`MAX_SUBAGENT_DEPTH`;
* :mod:`.trajectory_digest` — :func:`trajectory_digest`, :data:`DIGEST_MAX_CHARS`.
"""

from __future__ import annotations

from .trajectory_digest import DIGEST_MAX_CHARS, trajectory_digest
from .trajectory_export import to_atif
from .trajectory_import import MAX_SUBAGENT_DEPTH, from_atif
from .trajectory_load import TrajectorySource, load_trajectory
from .trajectory_turns import ReplayedTurn, TrajectoryTurns

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
