"""A whole trace for other tools: Chrome trace JSON (Perfetto, chrome://tracing), drawn by the
exporter the CLI's `--trace-file` uses too (`predictors.tracing.chrome`), and OTLP JSON."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from predictors.tracing.chrome import chrome_trace
from traces.otlp import hex_ids, key_values, load_attributes
from traces.store import get_store

# The stored columns a Chrome trace draws.
_CHROME_COLUMNS = [
    "name",
    "start_ns",
    "end_ns",
    "level",
    "attributes",
    "span_id",
    "parent_span_id",
    "device",
    "counters",
]


def chrome(trace_id: str) -> dict[str, Any]:
    """The trace as a Chrome trace document: one thread per level; each hardware counter a
    counter event (`ph: "C"`) per sample, so that it gets its own track."""
    rows = get_store().read_table(trace_id, _CHROME_COLUMNS).to_pylist()
    for row in rows:
        row["attributes"] = load_attributes(row["attributes"])
        row["counters"] = row["counters"] or []
    return chrome_trace(rows, trace_id=trace_id)


def otlp(trace_id: str) -> dict[str, Any]:
    """The trace as OTLP JSON (an ExportTraceServiceRequest, ids in hex)."""
    table = get_store().read_table(trace_id)
    rows = table.sort_by([("start_ns", "ascending")]).to_pylist()
    message = trace_service_pb2.ExportTraceServiceRequest()
    groups: dict[tuple[str, str], trace_pb2.ScopeSpans] = {}
    resources: dict[str, trace_pb2.ResourceSpans] = {}
    for row in rows:
        resource = row["resource"] or "{}"
        if resource not in resources:
            resources[resource] = message.resource_spans.add()
            resources[resource].resource.attributes.extend(key_values(load_attributes(resource)))
        key = (resource, row["scope"] or "")
        if key not in groups:
            groups[key] = resources[resource].scope_spans.add()
            groups[key].scope.name = row["scope"] or ""
        span = groups[key].spans.add()
        span.trace_id = bytes.fromhex(row["trace_id"])
        span.span_id = bytes.fromhex(row["span_id"])
        if row["parent_span_id"]:
            span.parent_span_id = bytes.fromhex(row["parent_span_id"])
        span.name = row["name"]
        span.kind = row["kind"]  # type: ignore[assignment]
        span.start_time_unix_nano = row["start_ns"]
        span.end_time_unix_nano = row["end_ns"]
        span.attributes.extend(key_values(load_attributes(row["attributes"])))
        span.status.code = row["status"]  # type: ignore[assignment]
        span.status.message = row["status_message"] or ""
    result: dict[str, Any] = hex_ids(json_format.MessageToDict(message))
    return result
