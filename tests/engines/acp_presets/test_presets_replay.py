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


def test_a_claude_acp_compaction_replays_without_inventing_its_usage_or_moving_its_cost() -> None:
    """claude-agent-acp reports a ``/compact`` prompt with no main-loop tokens, the compaction's
    call only in its ``model_usage`` rows (with a title call beside it), and no running cost
    until the next prompt. Recorded against the model server: the compaction turn's tokens are
    not known (``unavailable``, the rows in ``side_usage``), not "zero reported"; the next
    turn's tokens are what the server served it, and its cost, which the running total would
    give with the compaction's inside, is not derived from it."""
    path = FIXTURES / "claude-acp" / "compaction.jsonl"
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    before, compaction, after = [
        TurnSummary.from_messages(turn) for turn in replay_turns(path, engine="claude-acp")
    ]
    served = [t["ledger"] for t in meta["turns"]]
    assert before.usage is not None and after.usage is not None
    for summary, ledger in ((before, served[0]), (after, served[2])):
        figures = {k: v for k, v in ledger["usage"].items() if k != "thinking_tokens"}
        assert summary.usage.model_dump(include=set(figures)) == figures  # type: ignore[union-attr]
    assert before.usage.cost_source == "derived"
    assert compaction.usage is not None and compaction.usage.usage_source == "unavailable"
    assert compaction.usage.input_tokens is None and compaction.usage.cost_usd is None
    side = compaction.side_usage
    assert side is not None and side.input_tokens is not None
    assert side.input_tokens >= served[1]["usage"]["input_tokens"]
    assert after.usage.cost_source != "derived"


LEDGERED = [
    path
    for path in sorted((FIXTURES / "gemini").glob("*.jsonl"))
    if all("ledger" in t for t in json.loads(path.with_suffix(".meta.json").read_text())["turns"])
]


@pytest.mark.parametrize("path", LEDGERED, ids=lambda p: p.stem)
def test_gemini_recordings_replay_to_what_the_model_server_served(path: Path) -> None:
    """Gemini CLI's prompt totals, replayed, are the model server's ledger for the turn (the
    meta file's ``turns[i].ledger``): the whole prompt with its cache reads, the output less the
    thinking, reported without a split the agent did not give, and never priced."""
    meta = json.loads(path.with_suffix(".meta.json").read_text())
    summaries = [TurnSummary.from_messages(t) for t in replay_turns(path, engine="gemini")]
    assert len(summaries) == len(meta["turns"])
    for outcome, summary in zip(meta["turns"], summaries, strict=True):
        served = outcome["ledger"]["usage"]
        usage = summary.usage
        assert usage is not None and usage.usage_source == "reported", (path.stem, usage)
        prompt = served["input_tokens"] + served["cache_read_tokens"] + served["cache_write_tokens"]
        answer = served["output_tokens"] - served["thinking_tokens"]
        assert (usage.whole_prompt_tokens, usage.answer_tokens) == (prompt, answer), path.stem
        split = (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens)
        assert split == (None, None, None) and usage.thinking_tokens is None, usage
        assert (usage.cost_usd, usage.cost_source) == (None, "unavailable"), usage


def test_a_gemini_recording_holds_the_model_servers_ledger() -> None:
    assert LEDGERED, "re-record a Gemini CLI session with agentrun.offline.record"
