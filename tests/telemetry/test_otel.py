"""OpenTelemetry: the span tree of a session, metrics per turn, trace context for the agents."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from engines.toy.toy_engine import ToyEngine
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentrun import (
    ContextWindow,
    Message,
    ProcessExitError,
    SessionOptions,
    Usage,
    run_turn,
)
from agentrun import otel as agentrun_otel
from agentrun._turns.observe import OBSERVERS
from agentrun.testing import Fail, ScriptedEngine
from agentrun.testing._scripted_engine import result, text, tool_result, tool_use

pytestmark = pytest.mark.anyio


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, object], float]]:
        data = self.metrics.get_metrics_data()
        out: list[tuple[dict[str, object], float]] = []
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            out.append((dict(point.attributes or {}), point.sum))  # type: ignore[union-attr]
        return out


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    with agentrun_otel.instrumented(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider
    ):
        yield t
    assert not OBSERVERS  # uninstrumented again


def _usage(prompt: int, output: int, cost: float) -> Usage:
    return Usage(input_tokens=prompt, output_tokens=output, cost_usd=cost,
                 usage_source="reported", cost_source="estimated")  # fmt: skip


SCRIPT = [
    [
        text("I'll look."),
        tool_use("t1", "Bash", {"command": "ls"}),
        tool_result("t1", "a.txt"),
        Message.context_window(ContextWindow(used_tokens=400, size_tokens=1000)),
        text("Found a.txt."),
        result("Found a.txt.", usage=_usage(300, 20, 0.01)),
    ],
    [text("Second."), result("Second.", usage=_usage(350, 5, 0.002))],
    [text("Going down."), Fail(ProcessExitError("agent died", exit_code=3, engine="scripted"))],
]


async def test_the_span_tree_of_a_three_turn_session(telemetry: Telemetry) -> None:
    engine = ScriptedEngine(SCRIPT)
    async with engine.start(SessionOptions(model="m-1")) as session:
        await run_turn(session, "look")
        await run_turn(session, "again")
        with pytest.raises(ProcessExitError):
            await run_turn(session, "fail")
    spans = telemetry.finished()
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (root,) = by_name["agentrun.session scripted"]
    turns = sorted(by_name["invoke_agent scripted"], key=lambda s: s.start_time or 0)
    (tool,) = by_name["execute_tool Bash"]
    assert len(turns) == 3 and len(spans) == 5
    # session -> turns -> tool call, all in one trace
    assert root.parent is None
    assert all(t.parent is not None and t.parent.span_id == root.context.span_id for t in turns)
    assert tool.parent is not None and tool.parent.span_id == turns[0].context.span_id
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    first, second, failed = (dict(t.attributes or {}) for t in turns)
    assert first["gen_ai.operation.name"] == "invoke_agent"
    assert first["gen_ai.provider.name"] == "scripted"
    assert first["gen_ai.request.model"] == "m-1"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (300, 20)
    assert first["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert first["agentrun.cost_usd"] == 0.01 and first["agentrun.cost.source"] == "estimated"
    assert first["agentrun.context.fill"] == 0.4
    assert second["gen_ai.usage.output_tokens"] == 5
    assert turns[0].status.status_code is StatusCode.UNSET
    # The failed turn: an error status and its type.
    assert turns[2].status.status_code is StatusCode.ERROR
    assert failed["error.type"] == "process_exit"
    tool_attributes = dict(tool.attributes or {})
    assert tool_attributes["gen_ai.tool.name"] == "Bash"
    assert tool_attributes["gen_ai.tool.call.id"] == "t1"
    assert dict(root.attributes or {})["agentrun.turns"] == 3


async def test_turn_metrics(telemetry: Telemetry) -> None:
    engine = ScriptedEngine(SCRIPT[:2])
    async with engine.start() as session:
        await run_turn(session, "look")
        await run_turn(session, "again")
    tokens = telemetry.points("gen_ai.client.token.usage")
    by_type = {str(a["gen_ai.token.type"]): total for a, total in tokens}
    assert by_type == {"input": 650, "output": 25}
    ((cost_attributes, cost),) = telemetry.points("agentrun.turn.cost")
    assert cost == pytest.approx(0.012) and cost_attributes["agentrun.cost.source"] == "estimated"
    assert len(telemetry.points("gen_ai.client.operation.duration")) == 1  # one series


async def test_agents_get_the_trace_context_of_their_span(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    options = SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})
    async with ToyEngine().start(options) as session:
        summary = await run_turn(session, "env TRACEPARENT")
    (turn,) = [s for s in telemetry.finished() if s.name.startswith("invoke_agent")]
    context = turn.context
    flags = int(context.trace_flags)
    expected = f"TRACEPARENT=00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    assert summary.text == expected


async def test_without_instrumentation_nothing_is_added(tmp_path: Path) -> None:
    options = SessionOptions(cwd=str(tmp_path), env={"TOY_HOME": str(tmp_path)})
    async with ToyEngine().start(options) as session:
        summary = await run_turn(session, "env TRACEPARENT")
    assert summary.text == "TRACEPARENT="


def test_import_agentrun_loads_no_opentelemetry() -> None:
    import subprocess
    import sys

    code = "import sys, agentrun; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
