"""The real key and the proxy's client key never reach an OpenTelemetry span.

A real agent (Claude Code) runs through the metering credential proxy with the library's
OpenTelemetry support on, recording into memory. The upstream (the embedded model server)
echoes the real key in a streamed answer and in the error answer that fails the next turn
(the agent's words for it become the turn span's status). Every
span's name, attributes, events, links and status are searched for both keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentrun import AgentrunError, CredentialProxy, EngineUnavailableError, run_turn
from agentrun import otel as agentrun_otel
from agentrun.offline import HttpError, ModelServer, ModelTurn, Script, TextBlock, embedded_engine

pytestmark = [pytest.mark.anyio, pytest.mark.agent]

PLANTED = "sk-ant-planted-otel-93be61c4d0a7"


def _everything_in(span: ReadableSpan) -> str:
    """A span as text: its name, attributes, events, links and status."""
    parts: list[object] = [span.name, dict(span.attributes or {})]
    parts += [(event.name, dict(event.attributes or {})) for event in span.events]
    parts += [dict(link.attributes or {}) for link in span.links]
    parts += [span.status.status_code, span.status.description]
    return repr(parts)


async def test_no_key_reaches_a_span_of_a_proxied_session(tmp_path: Path) -> None:
    script = Script(
        turns=[
            # One delta: a key spread over several deltas is not one run of bytes to find.
            ModelTurn(
                blocks=[TextBlock(text=f"Your key is {PLANTED}, and again: {PLANTED}.")],
                chunk_chars=1000,
            ),
            ModelTurn(
                blocks=[
                    HttpError(
                        status=400,
                        message=f"Your credit balance is too low (key {PLANTED})",
                        error_type="invalid_request_error",
                    )
                ]
            ),
        ]
    )
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    texts: list[str] = []
    failed: AgentrunError | None = None
    async with ModelServer(script) as server:
        async with CredentialProxy(server.url, keys={"anthropic": PLANTED}) as proxy:
            try:
                engine, options = embedded_engine(
                    "claude", proxy.url, tmp_path / "agent", api_key=proxy.client_key
                )
            except EngineUnavailableError as exc:
                pytest.skip(str(exc))
            with agentrun_otel.instrumented(
                tracer_provider=tracer_provider, meter_provider=MeterProvider()
            ):
                async with engine.start(options) as session:
                    first = await run_turn(session, "say my key", timeout=120)
                    texts.append(first.text)
                    try:
                        await run_turn(session, "again", timeout=120)
                    except AgentrunError as error:
                        failed = error
    finished = list(spans.get_finished_spans())
    # The session ran through the proxy: both model calls were the agent's, with its key.
    assert len(server.model_requests) >= 2 and proxy.unauthorized == 0
    assert all(r.headers["x-api-key"] == PLANTED for r in server.model_requests)
    # The echo reached the agent (redacted), and the failed turn's span holds its words.
    assert "[redacted key]" in texts[0] and PLANTED not in texts[0]
    assert failed is not None
    assert any(
        span.status.status_code is StatusCode.ERROR and span.status.description == failed.message
        for span in finished
    )
    names = sorted(span.name for span in finished)
    assert names == ["agentrun.session claude", "invoke_agent claude", "invoke_agent claude"]
    for span in finished:
        seen = _everything_in(span)
        assert PLANTED not in seen and proxy.client_key not in seen, span.name
