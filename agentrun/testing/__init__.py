"""What only tests need: a fault shim that makes a real agent misbehave on cue, and a scripted
in-process engine for test code that uses agentrun without running any agent.

The embedded model server, scripts and offline configurations are a feature, not a test
helper: they live in :mod:`agentrun.offline`.

May import anything in the package; nothing in the library outside this folder imports it.
"""

from ._faults import FAULTS, fault_prompt, fault_shim
from ._scripted_engine import (
    Ask,
    Fail,
    Hang,
    ScriptedDriver,
    ScriptedEngine,
    ScriptedSession,
    Sleep,
    TurnRecord,
)

__all__ = [
    "FAULTS",
    "Ask",
    "Fail",
    "Hang",
    "ScriptedDriver",
    "ScriptedEngine",
    "ScriptedSession",
    "Sleep",
    "TurnRecord",
    "fault_prompt",
    "fault_shim",
]
