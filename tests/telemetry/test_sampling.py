"""Whether a trace is exported is Outlive's decision, not its callers' (issue 19, item 5): a
client's `traceparent` with the sampled flag once forced an export with the sampler's ratio at
0. The caller's trace id still continues; its flag no longer decides. Spans of Outlive's own
jobs and run attempts still follow their (Outlive-made) parent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.config import Settings
from outlive.telemetry import tracing
from outlive.telemetry.tracing_sdk import EdgeSampler
from tests.support import Api, TenantHandle, loopback_server, service_env, spawn_outlive
from tests.telemetry.test_metrics import free_port, wait_ready

pytestmark = pytest.mark.timeout(120)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SAMPLED = f"00-{TRACE}-00f067aa0ba902b7-01"
NOT_SAMPLED = f"00-{TRACE}-00f067aa0ba902b7-00"
# A trace id that any ratio sampler keeps (it compares the low 64 bits with ratio * 2**64).
LOW_ID = f"00-{'0' * 31}1-00f067aa0ba902b7-01"
VIEWER = "query Traced { viewer { user { id } } }"


def _provider(ratio: float) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=EdgeSampler(ParentBasedTraceIdRatio(ratio)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def traced() -> Iterator[Any]:
    providers: list[TracerProvider] = []

    def use(ratio: float) -> InMemorySpanExporter:
        provider, exporter = _provider(ratio)
        providers.append(provider)
        tracing.configure(provider)
        return exporter

    try:
        yield use
    finally:
        tracing.configure(None)
        for provider in providers:
            provider.shutdown()


async def _ask(api: Api, token: str, traceparent: str) -> None:
    response = await api.client.post(
        "/graphql",
        json={"query": VIEWER},
        headers={"Authorization": f"Bearer {token}", "traceparent": traceparent},
    )
    assert response.status_code == 200, response.text


async def test_a_callers_sampled_flag_does_not_force_a_trace(
    traced: Any, settings: Settings, tenant: TenantHandle
) -> None:
    spans = traced(0.0)
    async with Api.running(settings) as api:
        for traceparent in (SAMPLED, LOW_ID):
            await _ask(api, tenant.token, traceparent)
    assert [s.name for s in spans.get_finished_spans()] == []


async def test_at_ratio_one_a_caller_continues_its_trace_whatever_its_flag(
    traced: Any, settings: Settings, tenant: TenantHandle
) -> None:
    spans = traced(1.0)
    async with Api.running(settings) as api:
        await _ask(api, tenant.token, NOT_SAMPLED)
    (request,) = [s for s in spans.get_finished_spans() if s.name == "graphql query Traced"]
    assert request.context.trace_id == int(TRACE, 16)  # the caller's trace continues
    assert request.parent is not None
    assert request.parent.span_id == int("00f067aa0ba902b7", 16)


def test_outlives_own_remote_parents_still_decide(traced: Any) -> None:
    """A job's consumer span under the enqueue's traceparent (Outlive's own) follows it."""
    spans = traced(0.0)
    with tracing.span("job process", kind=tracing.SpanKind.CONSUMER, parent=SAMPLED):
        pass
    (job,) = spans.get_finished_spans()
    assert job.context.trace_id == int(TRACE, 16)


async def test_a_real_api_at_ratio_zero_exports_nothing_for_a_sampled_caller(
    settings: Settings, tenant: TenantHandle, tmp_path: Any
) -> None:
    """`outlive api` with the standard variables: OTEL_TRACES_SAMPLER=parentbased_traceidratio,
    ratio 0. Whatever it buffered is flushed when it exits, so what the collector has then is
    everything it would ever export."""
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: Request) -> Response:
        batch = ExportTraceServiceRequest()
        batch.ParseFromString(await request.body())
        received.append(batch)
        return Response(status_code=200)

    collector = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    port = free_port()
    async with loopback_server(collector) as collector_url:
        env = service_env(
            settings,
            OTEL_EXPORTER_OTLP_ENDPOINT=collector_url,
            OTEL_TRACES_SAMPLER="parentbased_traceidratio",
            OTEL_TRACES_SAMPLER_ARG="0",
            OTEL_BSP_SCHEDULE_DELAY="50",
        )
        log = open(tmp_path / "api.log", "wb")  # noqa: ASYNC230, SIM115
        process = spawn_outlive("api", "--port", str(port), env=env, log=log)
        try:
            await wait_ready(f"http://127.0.0.1:{port}")
            async with httpx.AsyncClient() as client:
                for traceparent in (SAMPLED, LOW_ID):
                    response = await client.post(
                        f"http://127.0.0.1:{port}/graphql",
                        json={"query": VIEWER},
                        headers={
                            "Authorization": f"Bearer {tenant.token}",
                            "traceparent": traceparent,
                        },
                    )
                    assert response.status_code == 200
        finally:
            process.terminate()
            await asyncio.to_thread(process.wait, 30)
            log.close()
    names = {
        span.name
        for batch in received
        for resource_spans in batch.resource_spans
        for scope in resource_spans.scope_spans
        for span in scope.spans
    }
    assert names == set(), (tmp_path / "api.log").read_text()
