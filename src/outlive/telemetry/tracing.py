"""OpenTelemetry traces, off unless configured.

`setup(endpoint_set=…)` builds a tracer provider with the OTLP/HTTP exporter when the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set; the SDK reads every other standard
variable itself (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`,
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, …). Tests hand `configure()` a provider of their own
(an in-memory exporter).

Off, every helper here is a check of one module-level flag: no span objects, no context
switches, nothing stamped on envelopes or jobs. On, one trace runs from the GraphQL request
through the enqueue (a producer span whose context travels as `traceparent` in the job envelope
or in the run job's saq `meta`) to the job or run attempt (a consumer span, its child) and the
nudges it publishes. A retry is a new span in the same trace, linked to the first attempt's span.

Whether a trace is recorded is Outlive's decision, not its callers': a request's `traceparent`
comes from anyone on the internet, and the SDK's parent-based samplers would follow its sampled
flag (a client could have every one of its requests exported with the ratio at 0, or choose trace
ids that a ratio sampler always keeps). `EdgeSampler` wraps the configured sampler
(`OTEL_TRACES_SAMPLER`): a server span under a remote parent is decided as a new root would be,
on a random id, and keeps the caller's trace id; every other span (a job's or a run attempt's,
whose parent is Outlive's own enqueue) follows the configured sampler as it is.

The SDK (and `tracing_sdk`, which subclasses it) is imported by `setup` only, when tracing is on:
its resource detection imports psutil, and the SDK was 75 ms of every process's start.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["SpanKind"]

TRACER_NAME = "outlive"
_PROPAGATOR = TraceContextTextMapPropagator()
_tracer: Tracer | None = None
_provider: Any = None


def is_enabled() -> bool:
    return _tracer is not None


def configure(provider: Any | None) -> None:
    """Use `provider` (an SDK `TracerProvider`) for Outlive's spans; None turns tracing off."""
    global _tracer, _provider
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer(TRACER_NAME)


def setup(*, endpoint_set: bool, disabled: bool = False, file: str | None = None) -> bool:
    """Tracing on when an OTLP endpoint is configured, or a file (`OUTLIVE_TRACES_FILE`), and
    the SDK is not disabled; idempotent. The provider also becomes the global one, for libraries
    that trace on their own. The file gets each span as one JSON line as soon as it ends
    (synchronously: for tests and debugging, where a process killed the next moment must have
    left what it ended on disk), beside the OTLP exporter when both are set."""
    if _tracer is not None:
        return True
    if disabled or not (endpoint_set or file):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    from outlive.telemetry.tracing_sdk import EdgeSampler, JsonLinesExporter

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "outlive"}))
    configured = TracerProvider(shutdown_on_exit=False).sampler  # from OTEL_TRACES_SAMPLER
    provider = TracerProvider(resource=resource, sampler=EdgeSampler(configured))
    if endpoint_set:
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if file:
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(file)))
    trace.set_tracer_provider(provider)
    configure(provider)
    return True


def shutdown() -> None:
    """Flush what is buffered (at process exit)."""
    if _provider is not None and hasattr(_provider, "shutdown"):
        _provider.shutdown()


@contextmanager
def _span(
    name: str,
    kind: SpanKind,
    attributes: Mapping[str, Any] | None,
    parent: str | None,
    links: Sequence[str],
) -> Iterator[Any]:
    assert _tracer is not None  # noqa: S101 (callers check is_enabled)
    ctx = extract(parent) if parent else None
    span_links = [Link(c) for c in (_span_context(t) for t in links) if c is not None]
    with _tracer.start_as_current_span(
        name, context=ctx, kind=kind, attributes=dict(attributes or {}), links=span_links
    ) as span:
        yield span


def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    parent: str | None = None,
    links: Sequence[str] = (),
) -> Any:
    """A context manager: a span (child of `parent`, a traceparent, when given, else of the
    current span), or nothing at all when tracing is off."""
    if _tracer is None:
        return nullcontext()
    return _span(name, kind, attributes, parent, links)


def fail(span: Any, exc: BaseException) -> None:
    """Mark `span` (as yielded by `span()`) failed with `exc`; nothing when tracing is off."""
    if span is not None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current span; None when tracing is off or no span is open."""
    if _tracer is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def current_trace_id() -> str | None:
    """The current trace id (32 hex digits), for log lines; None without a recording span."""
    if _tracer is None:
        return None
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def extract(traceparent: str) -> otel_context.Context:
    return _PROPAGATOR.extract({"traceparent": traceparent})


def extract_headers(headers: Mapping[str, str]) -> str | None:
    """The incoming `traceparent` header, when tracing is on."""
    return headers.get("traceparent") if _tracer is not None else None


def _span_context(traceparent: str) -> trace.SpanContext | None:
    context = trace.get_current_span(extract(traceparent)).get_span_context()
    return context if context.is_valid else None
