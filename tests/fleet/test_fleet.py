"""Fleets on the scripted engine: limits, records, failures, budgets, cancellation — the
records, failure and budget cases on both backends (local, and Ray actors)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.abc
import pytest

from agentrun import (
    ConfigurationError,
    Fleet,
    FleetEvent,
    FleetTask,
    FleetTurnRecord,
    Message,
    MessageType,
    ProcessExitError,
    SessionOptions,
    Usage,
)
from agentrun._turns.session import Session, TurnContext
from agentrun._vocabulary.messages import ContextWindow
from agentrun.testing import Fail, Hang, ScriptedDriver, ScriptedEngine, Sleep
from agentrun.testing._scripted_engine import Step, result, scripted, text, tool_result, tool_use

pytestmark = pytest.mark.anyio


class Gauge:
    """Counts sessions running at once, overall and per engine."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.total_now = 0
        self.total_peak = 0

    def enter(self, engine: str) -> None:
        self.now[engine] = self.now.get(engine, 0) + 1
        self.peak[engine] = max(self.peak.get(engine, 0), self.now[engine])
        self.total_now += 1
        self.total_peak = max(self.total_peak, self.total_now)

    def leave(self, engine: str) -> None:
        self.now[engine] -= 1
        self.total_now -= 1


class CountingEngine(ScriptedEngine):
    """A scripted engine whose sessions report to a gauge while they are open."""

    def __init__(self, gauge: Gauge, label: str, script: ScriptedEngine) -> None:
        super().__init__(script.script)
        self.gauge, self.label = gauge, label

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(CountingSession(self, options))


class CountingSession(ScriptedDriver):
    engine: CountingEngine

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        self.engine.gauge.enter(self.engine.label)

    async def shutdown(self) -> None:
        self.engine.gauge.leave(self.engine.label)
        await super().shutdown()


def costing(cost: float, *, delay: float = 0.0, answer: str = "done") -> ScriptedEngine:
    def script(prompt: str, number: int) -> Sequence[Step]:
        steps: list[Step] = []
        if delay:
            steps.append(Sleep(delay))
        steps += [
            Message(
                type=MessageType.CONTEXT_WINDOW,
                context=ContextWindow(
                    used_tokens=1000 * number,
                    size_tokens=10_000,
                    used_source="agent",
                    size_source="catalog",
                ),
            ),
            tool_use(f"t{number}", "shell", {"command": "true"}),
            tool_result(f"t{number}", "ok"),
            text(f"{answer} {prompt}"),
            result(
                f"{answer} {prompt}",
                usage=Usage(input_tokens=10, output_tokens=5, cost_usd=cost),
            ),
        ]
        return steps

    return ScriptedEngine(script)


async def test_every_task_runs_and_its_records_are_data(backend: str) -> None:
    tasks = [
        FleetTask(engine="scripted", prompts=("a", "b"), name="one", labels={"row": "1"}),
        FleetTask(engine="scripted", prompts=("c",), name="two"),
    ]
    engines = {"one": costing(0.25), "two": costing(0.5)}
    events: list[FleetEvent] = []
    fleet = Fleet(limit=2, backend=backend, engine_factory=lambda t: engines[t.name or ""])
    result = await fleet.run(tasks, on_event=events.append)

    assert result.ok
    assert [s.task for s in result.sessions] == ["one", "two"]
    assert [(t.task, t.turn, t.text) for t in result.turns] == [
        ("one", 1, "done a"),
        ("one", 2, "done b"),
        ("two", 1, "done c"),
    ]
    one = result.sessions[0]
    assert one.turns == 2 and one.cost_usd == pytest.approx(0.5) and one.labels == {"row": "1"}
    assert result.cost_usd == pytest.approx(1.0)
    first = result.turns[0]
    assert first.tool_calls == 1 and first.ok and first.usage is not None
    assert first.context_peak == pytest.approx(0.1) and first.context_size_tokens == 10_000
    assert result.turns[1].context_peak == pytest.approx(0.2)

    kinds = [(e.kind, e.task) for e in events]
    assert kinds.count(("session_started", "one")) == 1
    assert kinds.count(("turn_finished", "one")) == 2
    assert ("session_finished", "two") in kinds
    finished = [e for e in events if e.kind == "turn_finished"]
    assert all(e.summary is not None and e.summary.ok for e in finished)

    lines = result.to_jsonl().splitlines()
    assert len(lines) == 3
    assert FleetTurnRecord.model_validate_json(lines[0]) == first
    assert json.loads(lines[2])["task"] == "two"
    table = result.table()
    assert table.splitlines()[0].split()[:4] == ["task", "engine", "model", "ok"]
    assert "one" in table and "$0.5000" in table


async def test_a_task_winds_its_turns_down() -> None:
    # The scripted engine takes no input during a turn: the wind-down is a notice, recorded.
    task = FleetTask(engine="scripted", prompts=("a",), timeout=5, wind_down=4.8)
    events: list[FleetEvent] = []
    fleet = Fleet(engine_factory=lambda t: costing(0.1, delay=0.5))
    result = await fleet.run([task], on_event=events.append)
    (record,) = result.turns
    assert record.ok and record.wound_down is not None
    assert not record.wound_down.steered and record.wound_down.ended_by_itself
    assert json.loads(result.to_jsonl())["wound_down"]["steered"] is False
    (finished,) = [e for e in events if e.kind == "turn_finished"]
    assert finished.summary is not None and finished.summary.wound_down == record.wound_down
    # Without wind_down the record's JSON has no such key.
    plain = await Fleet(engine_factory=lambda t: costing(0.1)).run(
        [task.model_copy(update={"wind_down": None})]
    )
    assert "wound_down" not in json.loads(plain.to_jsonl())


async def test_the_concurrency_limits_hold() -> None:
    gauge = Gauge()

    def factory(task: FleetTask) -> ScriptedEngine:
        return CountingEngine(gauge, task.engine, costing(0.0, delay=0.02))

    tasks = [FleetTask(engine="a", prompts=("x",)) for _ in range(8)]
    tasks += [FleetTask(engine="b", prompts=("x",)) for _ in range(8)]
    result = await Fleet(limit=3, per_engine={"a": 1}, engine_factory=factory).run(tasks)
    assert result.ok and len(result.sessions) == 16
    assert gauge.total_peak == 3
    assert gauge.peak["a"] == 1
    assert gauge.total_now == 0


async def test_a_failing_session_is_a_record_and_the_others_go_on(backend: str) -> None:
    crash = ScriptedEngine([[text("partial"), Fail(ProcessExitError("agent died", exit_code=3))]])
    tasks = [
        FleetTask(engine="scripted", prompts=("x", "y"), name="bad"),
        FleetTask(engine="scripted", prompts=("x",), name="good"),
    ]
    events: list[FleetEvent] = []
    result = await Fleet(
        limit=2,
        backend=backend,
        engine_factory=lambda t: crash if t.name == "bad" else costing(0.0),
    ).run(tasks, on_event=events.append)

    bad, good = result.sessions
    assert not bad.ok and bad.error is not None and "agent died" in bad.error.message
    assert bad.turns == 1  # the partial turn is kept
    assert result.turns[0].task == "bad" and not result.turns[0].ok
    assert good.ok
    assert not result.ok
    failed = [e for e in events if e.kind == "session_failed"]
    assert [e.task for e in failed] == ["bad"]


async def test_a_missing_engine_is_a_failed_session_not_a_crash(backend: str) -> None:
    result = await Fleet(backend=backend).run([FleetTask(engine="no-such-engine", prompts=("x",))])
    (session,) = result.sessions
    assert not session.ok and session.error is not None
    assert "no-such-engine" in session.error.message


async def test_the_session_budget_stops_further_turns(backend: str) -> None:
    task = FleetTask(engine="scripted", prompts=("1", "2", "3"), max_cost_usd=1.5)
    result = await Fleet(backend=backend, engine_factory=lambda t: costing(1.0)).run([task])
    (session,) = result.sessions
    assert session.turns == 2
    assert session.error is not None and session.error.code == "budget"
    assert not session.ok


async def test_the_fleet_budget_stops_new_sessions(backend: str) -> None:
    tasks = [FleetTask(engine="scripted", prompts=("x",)) for _ in range(5)]
    result = await Fleet(
        limit=1, max_cost_usd=2.0, backend=backend, engine_factory=lambda t: costing(1.0)
    ).run(tasks)
    assert [s.ok for s in result.sessions] == [True, True, False, False, False]
    assert all(s.error is not None and s.error.code == "budget" for s in result.sessions[2:])
    assert result.cost_usd == pytest.approx(2.0)


async def test_the_fleet_budget_cancels_running_turns_in_their_agents(backend: str) -> None:
    hanging = ScriptedEngine([[text("working"), Hang()]])
    tasks = [
        FleetTask(engine="scripted", prompts=("x",), name="hangs"),
        FleetTask(engine="scripted", prompts=("x",), name="spends"),
    ]
    engines = {"hangs": hanging, "spends": costing(5.0, delay=0.05)}
    with anyio.fail_after(20):
        result = await Fleet(
            limit=2,
            max_cost_usd=1.0,
            backend=backend,
            engine_factory=lambda t: engines[t.name or ""],
        ).run(tasks)
    hangs = result.sessions[0]
    assert hangs.error is not None and hangs.error.code == "budget"
    assert result.sessions[1].ok


class ChargedOnCancelEngine(ScriptedEngine):
    """Works until cancelled, then reports what the interrupted turn cost (as Claude Code's
    result after an interrupt does). With ``working``: the file it creates once it has said
    it is working."""

    def __init__(self, working: Path | None = None) -> None:
        super().__init__([[text("working"), Hang()]])
        self.working = working

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(ChargedOnCancelSession(self, options))


class ChargedOnCancelSession(ScriptedDriver):
    async def run_turn(self, ctx: TurnContext) -> None:
        await ctx.emit(text("working"))
        working = getattr(self.engine, "working", None)
        if isinstance(working, Path):
            working.touch()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            ctx.begin_cancel()
            with anyio.CancelScope(shield=True):
                spent = Usage(input_tokens=100, output_tokens=7, cost_usd=0.25)
                await ctx.emit(result(stop_reason="cancelled", usage=spent))
            raise


class SpendsOnceEngine(ScriptedEngine):
    """Spends ``cost`` in its turn once the file ``after`` exists (another session's signal,
    also across Ray workers on one machine)."""

    def __init__(self, after: Path, cost: float) -> None:
        super().__init__([[result("spent")]])
        self.after = after
        self.cost = cost

    def start(self, options: SessionOptions | None = None) -> Session:
        return Session(SpendsOnceSession(self, options))


class SpendsOnceSession(ScriptedDriver):
    async def run_turn(self, ctx: TurnContext) -> None:
        engine = self.engine
        assert isinstance(engine, SpendsOnceEngine)
        while not engine.after.exists():
            await anyio.sleep(0.01)
        await ctx.emit(text("spent"))
        spent = Usage(input_tokens=10, output_tokens=5, cost_usd=engine.cost)
        await ctx.emit(result("spent", usage=spent))


async def test_a_turn_the_fleet_budget_cancels_is_a_record_with_its_cost(
    backend: str, tmp_path: Path
) -> None:
    """The spending turn ends once the other turn is working (whatever the load, on either
    backend): that turn is cancelled by the budget and is a record with what it cost."""
    tasks = [
        FleetTask(engine="scripted", prompts=("x",), name="hangs"),
        FleetTask(engine="scripted", prompts=("x",), name="spends"),
    ]
    working = tmp_path / "hangs-is-working"
    engines = {"hangs": ChargedOnCancelEngine(working), "spends": SpendsOnceEngine(working, 5.0)}
    with anyio.fail_after(30):
        result = await Fleet(
            limit=2,
            max_cost_usd=1.0,
            backend=backend,
            engine_factory=lambda t: engines[t.name or ""],
        ).run(tasks)
    hangs, spends = result.sessions
    assert spends.ok
    assert hangs.error is not None and hangs.error.code == "budget"
    assert not hangs.ok and hangs.turns == 1 and hangs.cost_usd == pytest.approx(0.25)
    (cancelled,) = [t for t in result.turns if t.task == "hangs"]
    assert cancelled.stop_reason == "cancelled" and not cancelled.ok
    assert cancelled.cost_usd == pytest.approx(0.25)
    assert cancelled.usage is not None and cancelled.usage.output_tokens == 7
    assert cancelled.text == "working"
    assert result.cost_usd == pytest.approx(5.25)


async def test_leaving_the_stream_early_cancels_and_closes_every_session() -> None:
    engines: list[ScriptedEngine] = []

    def factory(task: FleetTask) -> ScriptedEngine:
        engine = ScriptedEngine([[text("working"), Hang()]])
        engines.append(engine)
        return engine

    sessions = []
    original = ScriptedEngine.start

    def spy(self: ScriptedEngine, options: SessionOptions | None = None):  # type: ignore[no-untyped-def]
        session = original(self, options)
        sessions.append(session)
        return session

    fleet = Fleet(limit=4, engine_factory=factory)
    tasks = [FleetTask(engine="scripted", prompts=("x",)) for _ in range(4)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ScriptedEngine, "start", spy)
        with anyio.fail_after(20):
            async with fleet.stream(tasks) as events:
                seen = 0
                async for event in events:
                    assert event.kind == "session_started"
                    seen += 1
                    if seen == 4:
                        await anyio.sleep(0.05)  # let the turns start
                        break
    assert len(sessions) == 4
    assert all(s.closed for s in sessions)
    assert all(record.cancelled for s in sessions for record in scripted(s).log)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 2.5}, "limit"),
        ({"per_engine": {"claude": 0}}, "per_engine"),
        ({"max_cost_usd": -1.0}, "max_cost_usd"),
        ({"backend": "carrier-pigeon"}, "backend"),
        ({"pool": 0}, "pool"),
        ({"pool": 2.0}, "pool"),
        ({"pool": True}, "pool"),
        ({"pool": 2, "backend": "ray"}, "pool"),
        ({"pool": 2, "engine_factory": lambda task: costing(0.0)}, "pool"),
    ],
)
def test_bad_fleet_options_are_typed_errors(kwargs: dict[str, object], option: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Fleet(**kwargs)  # type: ignore[arg-type]
    assert caught.value.option == option


SECRET = "sk-fleet-test-secret-4711"


@pytest.mark.parametrize(
    ("kwargs", "option", "said"),
    [
        ({"prompts": ()}, "prompts", "at least 1"),
        ({"prompts": ("ok", "  ")}, "prompts", "empty"),
        ({"timeout": -1}, "timeout", "greater than 0"),
        ({"idle_timeout": 0}, "idle_timeout", "greater than 0"),
        ({"max_cost_usd": -0.5}, "max_cost_usd", "greater than or equal to 0"),
        ({"max_cost_usd": float("nan")}, "max_cost_usd", "finite"),
        ({"resources": {"claude": -1}}, "resources.claude", "greater than or equal to 0"),
        ({"prompt": "singular"}, "prompt", "not permitted"),
        ({"env": {"API_KEY": SECRET}}, "env", "not permitted"),
        ({"options": {"env": {"API_KEY": SECRET}, "cwd": 5}}, "options", "cwd"),
        ({"options": {"env": {"API_KEY": SECRET + "\0"}}}, "options", "API_KEY"),
    ],
)
def test_bad_tasks_are_configuration_errors_naming_the_field_never_a_secret(
    kwargs: dict[str, object], option: str, said: str
) -> None:
    arguments: dict[str, object] = {
        "engine": "claude",
        "prompts": ("hi",),
        "options": SessionOptions(env={"API_KEY": SECRET}),
        **kwargs,
    }
    with pytest.raises(ConfigurationError) as caught:
        FleetTask(**arguments)  # type: ignore[arg-type]
    error = caught.value
    assert error.option == option and option in str(error), str(error)
    assert said in str(error), str(error)
    assert SECRET not in str(error) and SECRET not in repr(error)
    assert error.__cause__ is None and error.__suppress_context__  # no ValidationError shown


def test_bad_tasks_are_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigurationError, match="empty") as empty:
        FleetTask(engine="claude", prompts=("  ",))
    assert empty.value.option == "prompts"
    with pytest.raises(ConfigurationError):
        FleetTask(engine="claude", prompts=())
    fleet = Fleet()
    with pytest.raises(ConfigurationError, match="named 'x'"):
        fleet.stream([FleetTask(engine="a", prompts=("p",), name="x")] * 2)
    with pytest.raises(ConfigurationError, match="not a FleetTask"):
        fleet.stream(["claude"])  # type: ignore[list-item]


async def test_a_pooled_fleet_refuses_engines_that_cannot_pool_before_anything_starts() -> None:
    tasks = [
        FleetTask(engine=name, prompts=("p",))
        for name in ("claude-acp", "codex", "claude", "codex-app-server", "claude")
    ]
    fleet = Fleet(pool=4)
    with pytest.raises(ConfigurationError) as caught:
        fleet.stream(tasks)
    assert caught.value.option == "pool"
    assert "'claude', 'codex' cannot share" in caught.value.message  # each named once
    assert "acp" not in caught.value.message.split("(")[0]


async def test_a_pooled_fleet_s_unknown_engine_is_a_failed_session_not_a_crash() -> None:
    result = await Fleet(pool=2).run([FleetTask(engine="no-such-engine", prompts=("p",))])
    assert [s.ok for s in result.sessions] == [False]
    error = result.sessions[0].error
    assert error is not None and "unknown engine" in error.message


async def test_a_fleet_journals_every_session(tmp_path: Path) -> None:
    from agentrun import JsonlSessionStore

    store = JsonlSessionStore(tmp_path / "journals")
    tasks = [FleetTask(engine="scripted", prompts=("a", "b"), name=n) for n in ("one", "two")]
    fleet = Fleet(limit=2, engine_factory=lambda t: costing(0.25), journal=store)
    result = await fleet.run(tasks)
    assert all(s.ok for s in result.sessions)
    journals = [store.records(i) for i in store.ids()]
    assert len(journals) == 2
    for records in journals:
        assert [r["prompt"] for r in records if r["kind"] == "turn"] == ["a", "b"]
        assert [r["kind"] for r in records].count("summary") == 2
