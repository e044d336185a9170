"""What the snapshot tests of recorded transcripts compare: every turn's normalized messages and
its summary (without the wall time), as ``agentrun replay`` makes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrun import TurnSummary
from agentrun.engines._replay import replay_turns


def replayed(path: Path, engine: str) -> dict[str, Any]:
    return {
        "turns": [
            {
                "messages": [m.model_dump(mode="json", exclude_none=True) for m in turn],
                "summary": TurnSummary.from_messages(turn).model_dump(
                    mode="json", exclude={"duration_s"}
                ),
            }
            for turn in replay_turns(path, engine=engine)
        ]
    }
