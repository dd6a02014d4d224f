"""Commit tracing with OpenTelemetry: one commit is one trace across the four processes.

The gateway opens a `commit` span (a child of the client's `traceparent`, if any) and puts
its W3C traceparent into the ring entry; each stage records a span for the entries it
handled, as children of that context (`sequence`, `resolve`, `persist`). Off by default:
with no exporter configured nothing is created and the hot path is untouched.

Exporters, chosen by environment:
- ``OTEL_EXPORTER_OTLP_ENDPOINT``: OTLP/HTTP (needs ``opentelemetry-exporter-otlp``);
- ``WEASELDB_TRACE_FILE``: JSON lines to that path (``{service}`` is replaced), for tests
  and for looking at a trace without a collector.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from weaseldb.core.protocol import CommitEntry, RingEntry
from weaseldb.core.types import Outcome, Stage

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None


class JsonLinesExporter(SpanExporter):
    """Writes one JSON object per finished span."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in shutdown
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(_as_record(span)) + "\n" for span in spans]
        with self._lock:
            self._file.writelines(lines)
            self._file.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._file.close()


def _as_record(span: ReadableSpan) -> dict[str, Any]:
    context, parent = span.get_span_context(), span.parent
    return {
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "trace_id": f"{context.trace_id:032x}" if context else None,
        "span_id": f"{context.span_id:016x}" if context else None,
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "attributes": dict(span.attributes or {}),
    }


def setup(service: str) -> bool:
    """Configure tracing for this process from the environment; True when enabled."""
    global _provider, _tracer
    exporter = _exporter(service)
    if exporter is None:
        return False
    _provider = TracerProvider(resource=Resource.create({"service.name": f"weaseldb-{service}"}))
    _provider.add_span_processor(BatchSpanProcessor(exporter))
    _tracer = _provider.get_tracer("weaseldb")
    return True


def _exporter(service: str) -> SpanExporter | None:
    path = os.environ.get("WEASELDB_TRACE_FILE")
    if path:
        return JsonLinesExporter(path.replace("{service}", service))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
            OTLPSpanExporter,
        )

        exporter: SpanExporter = OTLPSpanExporter()
        return exporter
    return None


def shutdown() -> None:
    if _provider is not None:
        _provider.shutdown()


def enabled() -> bool:
    return _tracer is not None


def _context(traceparent: str) -> Context | None:
    return _propagator.extract({"traceparent": traceparent}) if traceparent else None


def start_commit(traceparent: str) -> tuple[trace.Span | None, str]:
    """Open the commit's span; returns it and the traceparent to carry in the entry."""
    if _tracer is None:
        return None, traceparent
    span = _tracer.start_span("commit", context=_context(traceparent))
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    return span, carrier.get("traceparent", "")


def end_commit(span: trace.Span | None, status: Outcome, version: int) -> None:
    if span is not None:
        span.set_attribute("weaseldb.status", status.value)
        span.set_attribute("weaseldb.version", version)
        span.end()


def record_stage(name: Stage, entries: Iterable[RingEntry], start_ns: int, end_ns: int) -> None:
    """One span per traced commit a stage handled in one batch, from start_ns to end_ns."""
    if _tracer is None:
        return
    for entry in entries:
        if isinstance(entry, CommitEntry) and entry.trace:
            span = _tracer.start_span(name, context=_context(entry.trace), start_time=start_ns)
            span.set_attribute("weaseldb.version", entry.version)
            span.set_attribute("weaseldb.state", int(entry.state))
            span.end(end_time=end_ns)
