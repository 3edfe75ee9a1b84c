"""OpenTelemetry: one trace from the request through the enqueue to the run attempt, its nudges
and the jobs it queued; a retry is a new span linked to the first; off unless configured, and
then nothing is stamped on the wire; on with the standard OTLP variables."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.jobs.envelopes import ENVELOPES
from outlive.telemetry import logs, tracing
from outlive.worker import WorkerHost
from tests.support import (
    RUN_FIELDS,
    Api,
    NudgeWatch,
    TenantHandle,
    loopback_server,
    service_env,
    settled,
    spawn_outlive,
)
from tests.telemetry.test_metrics import free_port, wait_ready

pytestmark = pytest.mark.timeout(120)

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
START = f"""mutation Start($input: StartRunInput!) {{
  startRun(input: $input) {{ created run {{ {RUN_FIELDS} }} }} }}"""


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        yield exporter
    finally:
        tracing.configure(None)
        provider.shutdown()


class Records(logging.Handler):
    """Log records as the JSON formatter writes them, with the context filter applied."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[dict[str, Any]] = []
        self.addFilter(logs.ContextFilter())
        self.setFormatter(logs.formatter("json"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("outlive")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
async def hook_url() -> AsyncIterator[str]:
    async def ok(_: Request) -> Response:
        return Response(status_code=204)

    async with loopback_server(Starlette(routes=[Route("/hook", ok, methods=["POST"])])) as url:
        yield f"{url}/hook"


def only(found: list[ReadableSpan], name: str) -> ReadableSpan:
    matching = [s for s in found if s.name == name]
    assert len(matching) == 1, [s.name for s in found]
    return matching[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def _start_traced(api: Api, token: str, input: dict[str, Any]) -> str:
    response = await api.client.post(
        "/graphql",
        json={"query": START, "variables": {"input": {"agent": "demo", "input": input}}},
        headers={
            "Authorization": f"Bearer {token}",
            "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        },
    )
    return str(response.json()["data"]["startRun"]["run"]["id"])


async def test_one_trace_from_the_request_to_the_attempt_its_nudges_and_its_jobs(
    spans: InMemorySpanExporter,
    records: Records,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    hook_url: str,
) -> None:
    assert settings.redis_url is not None
    async with (
        Api.running(settings) as api,
        NudgeWatch(settings.redis_url, sessions, tenant.id) as w,
    ):
        await api.gql(
            "mutation($u: String!) { createWebhookEndpoint(url: $u) { secret } }",
            {"u": hook_url},
            token=tenant.token,
        )
        host = WorkerHost(settings, concurrency=4)
        await host.start()
        try:
            run_id = await _start_traced(api, tenant.token, {"turns": 1, "delayMs": 0})
            await w.until(run_id, settled)

            def delivered() -> Any:
                names = {s.name for s in spans.get_finished_spans()}
                return True if "webhook.deliver.v1 process" in names else None

            async def check() -> Any:
                return delivered()

            await w.until_true(check, 30, "the delivery job's span")
        finally:
            await host.stop()
    found = [s for s in spans.get_finished_spans() if s.context.trace_id == int(CLIENT_TRACE, 16)]

    request = only(found, "graphql mutation Start")
    assert request.kind is SpanKind.SERVER
    assert parent_of(request) == int(CLIENT_SPAN, 16)  # the caller's traceparent continues
    enqueue = only(found, "outlive-runs enqueue")
    assert enqueue.kind is SpanKind.PRODUCER
    assert parent_of(enqueue) == request.context.span_id
    attempt = only(found, "run attempt")
    assert attempt.kind is SpanKind.CONSUMER
    assert parent_of(attempt) == enqueue.context.span_id
    assert attempt.attributes is not None
    assert attempt.attributes["outlive.run_id"] == run_id
    job_enqueue = only(found, "webhook.deliver.v1 enqueue")
    assert parent_of(job_enqueue) == attempt.context.span_id
    job = only(found, "webhook.deliver.v1 process")
    assert parent_of(job) == job_enqueue.context.span_id
    # run.created from the request; run.updated/run.event from the attempt; the delivery's from
    # its job: every nudge is published inside the span of the work that caused it
    nudges = [s for s in found if s.name == "nudge publish"]
    assert {parent_of(s) for s in nudges} == {
        request.context.span_id,
        attempt.context.span_id,
        job.context.span_id,
    }

    attempt_lines = [r for r in records.lines if r["message"].startswith("run attempt")]
    assert attempt_lines, records.lines
    line = attempt_lines[-1]
    assert line["trace_id"] == CLIENT_TRACE
    assert line["run_id"] == run_id
    assert line["tenant_id"] == str(tenant.id)
    assert line["job_id"] == run_id  # the run's saq job is keyed by its id
    assert line["agent"] == "demo"


async def test_a_retry_is_a_new_span_linked_to_the_first(
    spans: InMemorySpanExporter, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    assert settings.redis_url is not None
    async with (
        Api.running(settings) as api,
        NudgeWatch(settings.redis_url, sessions, tenant.id) as w,
    ):
        host = WorkerHost(settings, concurrency=4)
        await host.start()
        try:
            run_id = await _start_traced(
                api, tenant.token, {"turns": 1, "delayMs": 0, "flakyAttempts": 1}
            )
            run = await w.until(run_id, settled)
        finally:
            await host.stop()
    assert run.attempt == 2
    attempts = sorted(
        (s for s in spans.get_finished_spans() if s.name == "run attempt"),
        key=lambda s: s.start_time or 0,
    )
    assert len(attempts) == 2
    first, retry = attempts
    assert first.context.span_id != retry.context.span_id
    assert {first.context.trace_id, retry.context.trace_id} == {int(CLIENT_TRACE, 16)}
    assert parent_of(first) == parent_of(retry)  # both children of the enqueue
    assert [link.context.span_id for link in retry.links] == [first.context.span_id]
    assert list(first.links) == []
    assert first.attributes is not None
    assert retry.attributes is not None
    assert (first.attributes["outlive.attempt"], retry.attributes["outlive.attempt"]) == (1, 2)


def test_with_tracing_off_nothing_is_stamped_and_old_envelopes_parse() -> None:
    assert not tracing.is_enabled()
    assert tracing.current_traceparent() is None
    envelope = ENVELOPES.build("webhook.deliver.v1", {"deliveryId": str(uuid.uuid4())})
    wire = json.loads(ENVELOPES.dump(envelope))
    assert "traceparent" not in wire  # byte for byte what the previous release sent
    legacy = {k: wire[k] for k in ("id", "type", "payload", "enqueued_at")}
    assert ENVELOPES.parse(json.dumps(legacy)).traceparent is None
    traced = {**legacy, "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    assert ENVELOPES.parse(json.dumps(traced)).traceparent == traced["traceparent"]
    with pytest.raises(ValueError, match="Extra inputs"):
        ENVELOPES.parse(json.dumps({**legacy, "traceparentx": "1"}))  # still extra="forbid"


async def test_the_standard_otlp_variables_switch_tracing_on(
    settings: Settings, tenant: TenantHandle, tmp_path: Any
) -> None:
    """A real `outlive api` with OTEL_EXPORTER_OTLP_ENDPOINT exports its spans (OTLP/HTTP,
    protobuf) to a collector on loopback, under OTEL_SERVICE_NAME."""
    received: list[ExportTraceServiceRequest] = []
    arrived = asyncio.Event()

    async def collect(request: Request) -> Response:
        batch = ExportTraceServiceRequest()
        batch.ParseFromString(await request.body())
        received.append(batch)
        arrived.set()
        return Response(status_code=200)

    collector = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    port = free_port()
    async with loopback_server(collector) as collector_url:
        env = service_env(
            settings,
            OTEL_EXPORTER_OTLP_ENDPOINT=collector_url,
            OTEL_SERVICE_NAME="outlive-under-test",
            OTEL_BSP_SCHEDULE_DELAY="50",
        )
        log = open(tmp_path / "api.log", "wb")  # noqa: ASYNC230, SIM115
        process = spawn_outlive("api", "--port", str(port), env=env, log=log)
        try:
            await wait_ready(f"http://127.0.0.1:{port}")
            async with httpx.AsyncClient() as client:
                await client.post(
                    f"http://127.0.0.1:{port}/graphql",
                    json={"query": "query Traced { viewer { user { id } } }"},
                    headers={"Authorization": f"Bearer {tenant.token}"},
                )
            async with asyncio.timeout(20):
                await arrived.wait()
        finally:
            process.terminate()
            await asyncio.to_thread(process.wait, 20)
            log.close()
    names, services = set(), set()
    for batch in received:
        for resource_spans in batch.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope in resource_spans.scope_spans:
                names |= {span.name for span in scope.spans}
    assert "graphql query Traced" in names
    assert services == {"outlive-under-test"}
