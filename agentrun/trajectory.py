"""Trajectories: sessions as ATIF documents (the Agent Trajectory Interchange Format, RFC 0001
of the Harbor project), out and in: the library writes ATIF-v1.8 and reads v1.0 to v1.8.

* :func:`to_atif` — the :class:`Trajectory` of a session, live (its messages and prompts) or
  replayed (:func:`agentrun.replay`'s turns);
* :func:`from_atif` — a trajectory read back into turns of messages with their summaries;
* :func:`trajectory_digest` — what another agent needs to continue the work, for
  :meth:`agentrun.Session.continue_trajectory`;
* the RFC's objects as strict pydantic models (``Atif*`` and :class:`Trajectory`).

``docs/trajectories.md`` has the mapping and examples.
"""

from ._store.trajectory import (
    DIGEST_MAX_CHARS,
    MAX_SUBAGENT_DEPTH,
    ReplayedTurn,
    TrajectorySource,
    TrajectoryTurns,
    from_atif,
    load_trajectory,
    to_atif,
    trajectory_digest,
)
from ._store.trajectory.atif import (
    ATIF_VERSION,
    ATIF_VERSIONS,
    AtifAgent,
    AtifAudioSource,
    AtifContentPart,
    AtifFinalMetrics,
    AtifImageSource,
    AtifMetrics,
    AtifObservation,
    AtifObservationResult,
    AtifStep,
    AtifSubagentRef,
    AtifToolCall,
    Trajectory,
)

__all__ = [
    "ATIF_VERSION",
    "ATIF_VERSIONS",
    "DIGEST_MAX_CHARS",
    "MAX_SUBAGENT_DEPTH",
    "AtifAgent",
    "AtifAudioSource",
    "AtifContentPart",
    "AtifFinalMetrics",
    "AtifImageSource",
    "AtifMetrics",
    "AtifObservation",
    "AtifObservationResult",
    "AtifStep",
    "AtifSubagentRef",
    "AtifToolCall",
    "ReplayedTurn",
    "Trajectory",
    "TrajectorySource",
    "TrajectoryTurns",
    "from_atif",
    "load_trajectory",
    "to_atif",
    "trajectory_digest",
]
