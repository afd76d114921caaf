"""Traces: the spans of evaluations (and of any OpenTelemetry client) that the hub receives,
keeps and serves.

- `models`: `Trace`, `SpanAggregate`, `SpanExport` (their tables keep the evaluations app's
  names: they moved here without moving data);
- `otlp`: OTLP protobuf/JSON decoded into rows, and stored attributes back into OTLP values;
- `access`: who may write spans into a trace, and who may read it;
- `store`: where spans are kept (`TraceStore`; Parquet chunks in the artifact store);
- `ingest`: storing an export, once (`SpanExport`), telling `signals.spans_received`;
- `exports`, `timeline`, `aggregates`: the reads (Chrome trace and OTLP JSON, windows of the
  timeline, per-layer aggregates);
- `traceparent`: W3C trace context on launch;
- `actions`: what the evaluations app asks of traces;
- `api/`: the OTLP receiver (`/v1/traces`) and one module per read under /api/v1/.
"""
