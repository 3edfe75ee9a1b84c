"""What tracing needs of the OpenTelemetry SDK (`tracing.setup` imports it when tracing is on):
the SDK's resource detection imports psutil, 75 ms of every start of a process that traces
nothing."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind


class EdgeSampler(Sampler):
    """A sampler that never lets a caller's sampled flag decide (see the module's doc)."""

    def __init__(self, configured: Sampler) -> None:
        self._configured = configured

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if kind is SpanKind.SERVER and parent.is_valid and parent.is_remote:
            as_root = self._configured.should_sample(
                otel_context.Context(), secrets.randbits(128) or 1, name, kind, attributes, links
            )
            return SamplingResult(as_root.decision, as_root.attributes, parent.trace_state)
        return self._configured.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"EdgeSampler{{{self._configured.get_description()}}}"


class JsonLinesExporter(SpanExporter):
    """Spans appended to a file, one JSON object a line (`ReadableSpan.to_json`), each in one
    write: workers sharing the file interleave whole lines."""

    def __init__(self, path: str) -> None:
        self._path = path

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        lines = "".join(s.to_json(indent=None) + "\n" for s in spans)
        with open(self._path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None
