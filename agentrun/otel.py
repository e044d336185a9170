"""OpenTelemetry traces and metrics for every session, turn and tool call (``agentrun-py[otel]``).

::

    from agentrun import otel
    otel.instrument()                     # the global tracer and meter providers
    otel.instrument(tracer_provider=tp, meter_provider=mp)
    otel.uninstrument()

Spans follow the OpenTelemetry GenAI semantic conventions:

* ``agentrun.session <engine>`` — one per session, from start to close;
* ``invoke_agent <engine>`` — one per turn, a child of its session's span
  (``gen_ai.operation.name = "invoke_agent"``, ``gen_ai.provider.name`` = the engine,
  ``gen_ai.request.model`` / ``gen_ai.response.model``, ``gen_ai.conversation.id`` = the agent's
  session id, ``gen_ai.usage.input_tokens`` (the whole prompt: input and cache) /
  ``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons``, the turn's cost and
  context fill; ``error.type`` and an error status when the turn failed);
* ``execute_tool <name>`` — one per tool call of the turn's main thread, from its ``tool_use`` to
  its ``tool_result`` (``gen_ai.tool.name``, ``gen_ai.tool.call.id``; ``error.type`` when the tool
  failed).

Metrics: ``gen_ai.client.token.usage`` (tokens per turn, by ``gen_ai.token.type``),
``gen_ai.client.operation.duration`` (seconds per turn), ``agentrun.turn.cost`` (US dollars per
turn, with its ``agentrun.cost.source``) and ``agentrun.context.fill`` (the fraction of the window
after each turn).

Agents join the caller's trace: each program a session starts gets ``TRACEPARENT`` (W3C trace
context) for the span it runs under — the session's for a long-lived agent, the turn's for an agent
started per turn. Nothing is imported or measured until :func:`instrument` is called; with no SDK
provider configured, spans are non-recording and cost next to nothing.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError as _missing:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "agentrun.otel needs OpenTelemetry: pip install 'agentrun-py[otel]'"
    ) from _missing

from ._turns import observe as _observe
from ._version import VERSION
from ._vocabulary.messages import Message, MessageType

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ._turns.session import Session
    from ._turns.turn import Turn
    from ._vocabulary.errors import AgentrunError

__all__ = ["instrument", "instrumented", "uninstrument"]

_SCOPE = "agentrun"


class _Telemetry:
    """The observer: spans per session, turn and tool call, and the turn metrics."""

    def __init__(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ):
        self.tracer = trace.get_tracer(_SCOPE, VERSION, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, VERSION, meter_provider=meter_provider)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per turn"
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Duration of a turn"
        )
        self.cost = meter.create_histogram(
            "agentrun.turn.cost", unit="USD", description="Cost of a turn"
        )
        self.fill = meter.create_histogram(
            "agentrun.context.fill", unit="1", description="Context window fill after a turn"
        )
        self._sessions: dict[int, Span] = {}
        self._turns: dict[int, Span] = {}
        self._tools: dict[int, dict[str, Span]] = {}

    # -- sessions --------------------------------------------------------------------------

    def session_started(self, session: Session) -> None:
        span = self.tracer.start_span(
            f"agentrun.session {session.engine_name}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.provider.name": session.engine_name,
                "gen_ai.agent.name": session.engine_name,
                **_model(session.options.model, "gen_ai.request.model"),
            },
        )
        self._sessions[id(session)] = span

    def session_closed(self, session: Session) -> None:
        span = self._sessions.pop(id(session), None)
        if span is None:
            return
        if session.resume_id:
            span.set_attribute("gen_ai.conversation.id", session.resume_id)
        span.set_attribute("agentrun.turns", session.turns)
        span.end()

    # -- turns -----------------------------------------------------------------------------

    def turn_started(self, turn: Turn) -> None:
        session = turn.session
        parent = self._sessions.get(id(session))
        context = trace.set_span_in_context(parent) if parent is not None else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": session.engine_name,
            "gen_ai.agent.name": session.engine_name,
            "agentrun.turn": turn.number,
            **_model(session.options.model, "gen_ai.request.model"),
        }
        if session.resume_id:
            attributes["gen_ai.conversation.id"] = session.resume_id
        span = self.tracer.start_span(
            f"invoke_agent {session.engine_name}",
            context=context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        self._turns[id(turn)] = span
        self._tools[id(turn)] = {}

    def message(self, turn: Turn, message: Message) -> None:
        kind = message.type
        if kind is not MessageType.TOOL_USE and kind is not MessageType.TOOL_RESULT:
            return
        tool = message.tool
        if tool is None or tool.id is None or message.parent_tool_use_id is not None:
            return
        tools = self._tools.get(id(turn))
        parent = self._turns.get(id(turn))
        if tools is None or parent is None:
            return
        if kind is MessageType.TOOL_USE:
            if tool.id in tools:
                return
            tools[tool.id] = self.tracer.start_span(
                f"execute_tool {tool.name or 'tool'}",
                context=trace.set_span_in_context(parent),
                kind=SpanKind.INTERNAL,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool.name or "",
                    "gen_ai.tool.call.id": tool.id,
                },
            )
            return
        span = tools.pop(tool.id, None)
        if span is None:
            return
        if tool.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def turn_ended(self, turn: Turn, error: AgentrunError | None) -> None:
        span = self._turns.pop(id(turn), None)
        for tool_span in self._tools.pop(id(turn), {}).values():
            tool_span.set_attribute("error.type", "unfinished")
            tool_span.end()
        if span is None:
            return
        summary = turn.summary
        engine = turn.session.engine_name
        metric: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": engine,
            **_model(summary.model, "gen_ai.response.model"),
        }
        if summary.model:
            span.set_attribute("gen_ai.response.model", summary.model)
        if summary.session_id or summary.resume_id:
            span.set_attribute("gen_ai.conversation.id", summary.session_id or summary.resume_id)
        if summary.stop_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [summary.stop_reason])
        usage = summary.usage
        if usage is not None:
            prompt = usage.prompt_tokens
            if prompt is not None:
                span.set_attribute("gen_ai.usage.input_tokens", prompt)
                self.tokens.record(prompt, {**metric, "gen_ai.token.type": "input"})
            if usage.output_tokens is not None:
                span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
                self.tokens.record(usage.output_tokens, {**metric, "gen_ai.token.type": "output"})
            if usage.cost_usd is not None:
                span.set_attribute("agentrun.cost_usd", usage.cost_usd)
                source = usage.cost_source or "reported"
                span.set_attribute("agentrun.cost.source", source)
                self.cost.record(usage.cost_usd, {**metric, "agentrun.cost.source": source})
        context = summary.context
        if context is not None and context.fraction is not None:
            span.set_attribute("agentrun.context.fill", context.fraction)
            self.fill.record(context.fraction, metric)
        if summary.duration_s is not None:
            self.duration.record(summary.duration_s, metric)
        failed = error is not None or not summary.ok
        if failed:
            error_type = error.error_code if error is not None else _summary_error(turn)
            span.set_attribute("error.type", error_type)
            message = error.message if error is not None else None
            span.set_status(Status(StatusCode.ERROR, message))
        span.end()

    # -- agent processes -------------------------------------------------------------------

    def spawn_env(self, session: Session) -> dict[str, str]:
        active = session.active_turn
        span = self._turns.get(id(active)) if active is not None else None
        if span is None:
            span = self._sessions.get(id(session))
        if span is None:
            return {}
        context = span.get_span_context()
        if not context.is_valid:
            return {}
        flags = int(context.trace_flags) & 0xFF
        return {"TRACEPARENT": f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"}


def _model(model: str | None, key: str) -> dict[str, str]:
    return {key: model} if model else {}


def _summary_error(turn: Turn) -> str:
    summary = turn.summary
    if summary.stop_reason == "cancelled":
        return "cancelled"
    for error in reversed(summary.errors):
        if error.fatal and error.code:
            return error.code
    return "error"


_active: _Telemetry | None = None


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Trace every session, turn and tool call from now on (the global providers unless given).
    Calling it again replaces the providers."""
    global _active
    uninstrument()
    _active = _Telemetry(tracer_provider, meter_provider)
    _observe.OBSERVERS.append(_active)


def uninstrument() -> None:
    """Stop tracing (spans already started end as their sessions and turns end)."""
    global _active
    if _active is not None and _active in _observe.OBSERVERS:
        _observe.OBSERVERS.remove(_active)
    _active = None


@contextmanager
def instrumented(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> Generator[None, None, None]:
    """:func:`instrument` for the ``with`` block only (tests, one-off runs)."""
    instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield
    finally:
        uninstrument()
