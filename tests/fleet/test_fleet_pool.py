"""A pooled fleet (``Fleet(pool=N)``): the tasks of one engine share its agent processes.

Four tasks of ``claude-acp`` with ``pool=2``, each in a workspace of its own, run on two agent
processes (the pids of their sessions' init messages, read back from their journals): ACP gives
each session its working directory, which reaches the model as that session's own. Each task gets
the one answer the model server gave it, and nothing of the fleet runs once it has ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from agents_support import descendants, require_engine

from agentrun import Fleet, FleetTask, JsonlSessionStore
from agentrun._vocabulary.permissions import approve_all
from agentrun.offline import ModelServer, ModelTurn, Script, TextBlock, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

WORDS = ("walrus", "zeppelin", "quokka", "gondola")


def _init_pids(store: JsonlSessionStore) -> list[int]:
    pids: list[int] = []
    for journal in store.ids():
        for record in store.records(journal):
            message: Any = record.get("message")
            if record.get("kind") == "message" and isinstance(message, dict):
                process: Any = message.get("process")  # pyright: ignore[reportUnknownMemberType]
                if message.get("type") == "init" and isinstance(process, dict):  # pyright: ignore[reportUnknownMemberType]
                    pids.append(int(process["pid"]))  # pyright: ignore[reportUnknownArgumentType]
    return pids


async def test_four_pooled_tasks_run_on_two_processes_and_leave_nothing(tmp_path: Path) -> None:
    require_engine("claude-acp")
    before = descendants()
    turns = [ModelTurn(blocks=[TextBlock(text=f"{word} {word}")]) for word in WORDS]
    store = JsonlSessionStore(tmp_path / "journals")
    workspaces = [tmp_path / f"workspace-{word}" for word in WORDS]
    for workspace in workspaces:
        workspace.mkdir()
    async with ModelServer(Script(turns=turns, exhausted_text="nothing more")) as server:
        # The embedded configuration (one agent home for the engine); the fleet builds the
        # pooled engine itself, one for the four tasks.
        _, options = embedded_engine(
            "claude-acp",
            server.url,
            tmp_path / "agent",
            hitl=True,
            permission_handler=approve_all,
        )
        tasks = [
            FleetTask(
                engine="claude-acp",
                prompts=("say your word",),
                options=options.model_copy(update={"cwd": str(workspace)}),
                timeout=180,
            )
            for workspace in workspaces
        ]
        result = await Fleet(limit=4, pool=2, journal=store).run(tasks)
        bodies = [request.body.decode() for request in server.model_requests]
    assert [s.ok for s in result.sessions] == [True] * 4, result.sessions
    said = [[word for word in WORDS if word in record.text] for record in result.turns]
    assert all(len(words) == 1 for words in said), said  # its own answer, no other's
    assert sorted(words[0] for words in said) == sorted(WORDS)
    pids = _init_pids(store)
    assert len(pids) == 4
    assert len(set(pids)) == 2, pids  # two sessions on each process
    for workspace in workspaces:  # each session works in its own directory
        assert any(str(workspace) in body for body in bodies), workspace
    deadline = anyio.current_time() + 10
    while not descendants() <= before and anyio.current_time() < deadline:
        await anyio.sleep(0.1)
    assert descendants() <= before, "agent processes outlived the fleet"
