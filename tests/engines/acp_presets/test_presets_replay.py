"""Recorded sessions of the ACP presets (``agentrun record --engine <preset>``, the real pinned
adapters against the model server) replayed through the translator: each turn's message kinds and
its summary, snapshotted, and agreeing with what the live run reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from repo_paths import FIXTURES
from syrupy.assertion import SnapshotAssertion

from agentrun import TurnSummary
from agentrun.engines._replay import replay_turns

PRESETS = ("claude-acp", "codex-acp", "gemini", "qwen")
RECORDED = [(name, path) for name in PRESETS for path in sorted((FIXTURES / name).glob("*.jsonl"))]


def test_every_preset_has_a_recording() -> None:
    assert {name for name, _ in RECORDED} == set(PRESETS)


@pytest.mark.parametrize(("preset", "path"), RECORDED, ids=lambda v: getattr(v, "stem", v))
def test_recorded_sessions(preset: str, path: Path, snapshot: SnapshotAssertion) -> None:
    turns: list[dict[str, Any]] = []
    for messages in replay_turns(path, engine=preset):
        summary = TurnSummary.from_messages(messages)
        turns.append(
            {
                # The kinds only: some agents' command lists are hundreds of kilobytes.
                "messages": [f"{m.type.value}/{m.subtype or ''}" for m in messages],
                "summary": summary.model_dump(mode="json", exclude={"duration_s"}),
            }
        )
    assert turns == snapshot
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    assert [t["summary"]["ok"] for t in turns] == [t["ok"] for t in meta["turns"]]
    assert turns[0]["messages"][0] == "init/"  # the stream starts with init
