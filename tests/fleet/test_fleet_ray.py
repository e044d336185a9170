"""The Ray backend on a local Ray instance started by the tests (no dashboard, loopback only).

Sessions run in Ray actors that own the real pinned agents; the driver sees the same messages,
summaries and fleet records as with the local backend. Failure semantics: a dead actor ends the
turn with ``SessionLostError``, the session stays dead, and the turn is not run again.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from agents_support import require_engine

from agentrun import (
    Engine,
    Fleet,
    FleetTask,
    SessionOptions,
    SessionTerminatedError,
    Usage,
    run_turn,
)
from agentrun._fleets.ray import RayDriver, RayEngine, SessionLostError, _SessionActor
from agentrun._turns.session import Session
from agentrun._turns.turn import TurnContext
from agentrun.offline import ModelServer, ModelTurn, Script, embedded_engine
from agentrun.testing import ScriptedDriver, ScriptedEngine
from agentrun.testing._scripted_engine import result, text

ray: Any = pytest.importorskip("ray")

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def ray_instance(ray_cluster: Any) -> None:
    """The session's local Ray instance (tests/fleet/conftest.py)."""


def test_the_tests_ray_instance_does_not_use_the_users_ray_home(ray_instance: None) -> None:
    """A new local ``ray.init()`` turns token auth on by default: it uses a
    ``~/.ray/auth_token`` it finds in the user's home, or writes one there. That token then makes
    a fresh ``ray start`` cluster reject its own driver (``InvalidAuthToken``); the tests' Ray
    leaves the user's ``~/.ray`` alone (``RAY_AUTH_MODE=disabled``)."""
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    assert not is_token_auth_enabled()


async def test_a_scripted_session_runs_in_an_actor(ray_instance: None) -> None:
    engine = RayEngine(
        lambda: ScriptedEngine([[text("one"), result("one")], [text("two"), result("two")]])
    )
    async with engine.start() as session:
        driver = session.driver
        assert isinstance(driver, RayDriver)
        first = await run_turn(session, "a")
        second = await run_turn(session, "b")
        assert driver.worker_pid is not None and driver.worker_pid != os.getpid()
        assert session.engine_name == "ray:scripted"
    assert (first.turn, first.text, first.ok) == (1, "one", True)
    assert (second.turn, second.text) == (2, "two")


async def test_a_typed_error_in_the_actor_is_the_same_error_in_the_driver(
    ray_instance: None,
) -> None:
    engine = RayEngine(lambda: ScriptedEngine([[text("only turn"), result("ok")]]))
    async with engine.start() as session:
        await run_turn(session, "a")
        with pytest.raises(Exception) as caught:
            await run_turn(session, "b")
        # The scripted engine has no second turn: an AgentrunError raised in the actor.
        assert "no turn 2" in str(caught.value)


@pytest.mark.agent
async def test_a_fleet_of_real_agents_on_ray(ray_instance: None, tmp_path: Path) -> None:
    require_engine("claude")
    require_engine("opencode")
    names = ("claude", "opencode", "opencode-acp")
    engines: dict[str, Engine] = {}
    tasks: list[FleetTask] = []
    async with AsyncExitStack() as stack:
        for name in names:
            server = await stack.enter_async_context(ModelServer())
            workspace = tmp_path / name
            workspace.mkdir()
            engine, options = embedded_engine(
                name, server.url, tmp_path / f"{name}-agent", cwd=str(workspace)
            )
            engines[name] = engine
            tasks.append(
                FleetTask(engine=name, prompts=("check", "again"), options=options, name=name)
            )
        fleet = Fleet(backend="ray", limit=3, engine_factory=lambda task: engines[task.engine])
        with anyio.fail_after(240):
            result = await fleet.run(tasks)
    assert [s.task for s in result.sessions] == list(names)
    for session in result.sessions:
        assert session.ok and session.turns == 2, session
    first_turns = [r for r in result.turns if r.turn == 1]
    for record in first_turns:
        assert record.tool_calls == 1 and "hello from agentrun" in record.text, record
        assert record.context_peak is not None


@pytest.mark.agent
async def test_a_dead_actor_is_a_typed_error_and_the_turn_is_not_repeated(
    ray_instance: None, tmp_path: Path
) -> None:
    require_engine("claude")
    script = Script(turns=[ModelTurn.text("slow answer").model_copy(update={"delay_before": 60})])
    async with ModelServer(script) as server:
        engine, options = embedded_engine(
            "claude", server.url, tmp_path / "agent", cwd=str(tmp_path)
        )
        remote = RayEngine(lambda: engine)
        with anyio.fail_after(120):
            async with remote.start(options) as session:
                driver = session.driver
                assert isinstance(driver, RayDriver)

                async def kill_once_the_model_is_asked() -> None:
                    while not server.model_requests:
                        await anyio.sleep(0.05)
                    ray.kill(driver.actor)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(kill_once_the_model_is_asked)
                    with pytest.raises(SessionLostError) as caught:
                        await run_turn(session, "go")
                assert isinstance(caught.value, SessionTerminatedError)
                assert caught.value.summary is not None
                # The session is dead: the next turn fails at once.
                with pytest.raises(SessionLostError):
                    await run_turn(session, "again", timeout=10)
        await anyio.sleep(2)
        assert len(server.model_requests) == 1  # nothing was retried


async def test_a_session_no_node_can_hold_fails_fast_and_cancels_fast(ray_instance: None) -> None:
    """Resources no node has (the documented example on a cluster without such nodes): Ray
    reports the request infeasible and the session fails with a typed error within seconds; a
    start that is cancelled while Ray still places the actor ends at once."""
    task = FleetTask(engine="scripted", prompts=("hi",), resources={"agentrun-no-such-node": 1})
    started = anyio.current_time()
    with anyio.fail_after(30):
        result = await Fleet(backend="ray", engine_factory=lambda t: ScriptedEngine()).run([task])
    (session,) = result.sessions
    assert session.error is not None and session.error.code == "engine_unavailable"
    assert "agentrun-no-such-node=1" in session.error.message
    assert "infeasible" in session.error.message
    assert anyio.current_time() - started < 20

    waiting = RayEngine(
        ScriptedEngine,
        actor_options={"resources": {"agentrun-no-such-node": 1}},
        infeasible_timeout=None,
    )
    started = anyio.current_time()
    with anyio.move_on_after(2) as scope:
        async with waiting.start():
            pytest.fail("the actor cannot have started")
    assert scope.cancelled_caught
    assert anyio.current_time() - started < 8


class _ChargedOnCancelEngine(ScriptedEngine):
    """Works until cancelled — also when cancelled before its first message — then reports
    what the interrupted turn cost, as Claude Code's result after an interrupt does."""

    def __init__(self) -> None:
        super().__init__([[text("working"), result("never")]])

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(_ChargedOnCancelSession(self, options))


class _ChargedOnCancelSession(ScriptedDriver):
    async def run_turn(self, ctx: TurnContext) -> None:
        try:
            await ctx.emit(text("working"))
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            ctx.begin_cancel()
            with anyio.CancelScope(shield=True):
                spent = Usage(input_tokens=100, output_tokens=7, cost_usd=0.25)
                await ctx.emit(result(stop_reason="cancelled", usage=spent))
            raise


def _items(turn: Any) -> AsyncIterator[dict[str, Any]]:
    """The actor's turn (an async generator of message dicts, typed ``Any`` for Ray)."""
    return cast("AsyncIterator[dict[str, Any]]", turn)


async def test_the_actor_keeps_a_cancel_that_arrives_before_its_turn() -> None:
    """The driver's cancel and the turn are separate actor calls: a cancel that runs before the
    turn was entered in the actor (a budget stop 40 ms into a turn, on a loaded node) must still
    cancel that turn, which then ends as a cancelled turn with what it cost; before, the
    cancel was dropped and the turn ran on, with nothing of it reaching the record."""
    actor = _SessionActor(_ChargedOnCancelEngine, SessionOptions())
    assert "pid" in await actor.open()
    try:
        assert await actor.cancel_turn(1) is False  # nothing is running yet
        items: list[dict[str, Any]] = []
        with anyio.fail_after(30):  # a guard against a hang, not a measurement
            async for item in _items(actor.turn("x", None, None, 1)):
                items.append(item)
        ended = [i for i in items if i.get("type") == "result"]
        assert ended and ended[-1]["stop_reason"] == "cancelled", items
        assert ended[-1]["usage"]["cost_usd"] == 0.25
        # A stale cancel (of turn 1) does not touch the next turn.
        assert await actor.cancel_turn(1) is False
        actor._cancelled_key = 1  # pyright: ignore[reportPrivateUsage]
        second: list[dict[str, Any]] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    async for item in _items(actor.turn("y", None, None, 2)):
                        second.append(item)

                tg.start_soon(run)
                while not second:
                    await anyio.sleep(0.01)
                assert await actor.cancel_turn(2) is True
        assert second[0].get("text") == "working"
    finally:
        await actor.close()


async def test_a_turn_cancelled_before_its_first_message_on_ray_is_a_cancelled_summary(
    ray_instance: None,
) -> None:
    """End to end: the driver cancels the turn as soon as it is entered, before the actor has
    sent anything; the turn still ends in the actor, with its cost, not by force."""
    engine = RayEngine(_ChargedOnCancelEngine)
    async with engine.start() as session:
        turn = session.turn("x")
        async with turn:
            turn.cancel()
            async for _ in turn:
                pass
        summary = turn.summary
        assert not turn.stopped_by_force
        assert summary.stop_reason == "cancelled" and not summary.ok
        assert summary.usage is not None and summary.usage.cost_usd == 0.25
