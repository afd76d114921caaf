"""Trace levels, spans, and their export as OpenTelemetry spans.

Trace levels, each including the ones before it: `none`, `application`, `model`, `framework`,
`ml_library`, `system_library`, `hardware`, `full` (`predictors.protocol.TRACE_LEVELS`).
Nothing beyond the requested level is recorded, and a level that is not requested costs nothing: the evaluation loop records
batch spans from the times it reads anyway, and a predictor installs its layer tracing only when
it is loaded at trace level `framework` or finer (`PredictorOptions.trace_level`).

The loop records spans as plain `Span` values (cheap to make in a timed loop); `Tracer` turns a
finished evaluation's spans into OpenTelemetry spans, nested as recorded (layer spans in their
batch span, batch spans in one `evaluation` span), kept in memory and, when a hub is given,
exported asynchronously and in batches over OTLP/HTTP (protobuf) to `{hub}/v1/traces` with a
bearer token, through `predictors.tracing.delivery` (each export sent once, retried with backoff
while the hub does not answer, spooled to disk when a spool folder is given). A `Tracer` is a
context object: it holds its own `TracerProvider`, and nothing is registered globally.

Our attributes: `mlms.level` (the level that records the span), `mlms.clock` (what the times
were read from), `mlms.layer_index`, `mlms.layer_name`, `mlms.op_type`, `mlms.output_shape`,
`mlms.device`, plus the loop's own (`framework`, `model`, `batch_size`, …).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from predictors.protocol import Attr
from predictors.tracing.delivery import RETRY_SECONDS, SpanDelivery

__all__ = [
    "CLOCK_ORT_PROFILER",
    "CLOCK_TORCH_PROFILER",
    "CLOCK_TF_LAYERS",
    "CLOCK_TORCH_LAYERS",
    "Layer",
    "Span",
    "Tracer",
]


CLOCK_TORCH_LAYERS = (
    "perf_counter around each layer (host wall clock): synchronous on the CPU; on CUDA a layer "
    "span covers its kernel launches only, the device is not synchronised per layer"
)
CLOCK_TF_LAYERS = (
    "tf.timestamp() read in the model's graph before the first layer and after each one (host "
    "wall clock, float64 seconds: about 0.25 us resolution), ordered by control dependencies, so "
    "TensorFlow optimizes within layers but not across them; offsets from time.time_ns() at the "
    "call; on a GPU the readings follow each layer's kernel launches, not their completion"
)
CLOCK_TORCH_PROFILER = (
    "torch.profiler (Kineto): host ops on the host clock, GPU kernels and copies from CUPTI on "
    "the same timeline; offsets from the start of each call's record_function annotation"
)
CLOCK_ORT_PROFILER = (
    "onnxruntime profiler: node start offsets and durations within the run, placed at the "
    "start of their batch span"
)


logger = logging.getLogger(__name__)

# The batch span processor's queue and export size (OTLP requests of 512 spans, the SDK's
# default size).
QUEUE_SPANS = 8192
EXPORT_BATCH_SPANS = 512
# What is queued is exported at least this often (the SDK's default is 5 s): a timeline that
# is open while the evaluation runs sees its spans within about a second.
EXPORT_EVERY_MS = 1000


@dataclass(frozen=True)
class Span:
    """One timed step. Times are nanoseconds since the Unix epoch, read from the loop's clock
    (perf_counter, anchored to the wall clock once per evaluation). `span_id` is unique within
    an evaluation's spans (0: none given); `parent_id` is the id of the enclosing span (0: a
    top-level span)."""

    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    span_id: int = 0
    parent_id: int = 0


@dataclass(frozen=True, slots=True)
class Layer:
    """One traced step inside one `predict` call: a layer (level `framework`), or a finer step
    inside one (a framework op at `ml_library`; a CUDA runtime call, GPU kernel or copy at
    `system_library`). Its start is an offset from the call's start and its duration, both in
    nanoseconds. `parent` is the index, in the same call's list, of the step that encloses it
    (-1: the call's batch span itself); a parent comes before its children."""

    name: str
    op_type: str
    offset_ns: int
    duration_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    level: str = "framework"
    parent: int = -1


def _attribute(value: Any) -> Any:
    """A value OpenTelemetry accepts as an attribute (primitives or flat lists of them)."""
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(
        isinstance(v, str | bool | int | float) for v in value
    ):
        return list(value)
    return json.dumps(value, default=str)


class Tracer:
    """OpenTelemetry spans of evaluations: exported to a hub (OTLP/HTTP, batched, in a
    background thread) when `hub` is given, else kept in memory (`finished()`); `keep=True`
    keeps them in memory as well. `shutdown()` flushes. An exporting tracer holds no span once
    it is sent: the agent's memory holds the evaluation's spans once, not twice.

    `claim` (an agent's claim on the evaluation) goes with every export, so that the hub takes
    the spans only from the current attempt; `spool` is the folder for exports waiting to be
    sent again; `retry_seconds` how long to keep trying while the hub does not answer (see
    `predictors.tracing.delivery`). `delivery.counts` says what became of the spans."""

    def __init__(
        self,
        *,
        hub: str | None = None,
        token: str | None = None,
        service: str = "mlms-predictor",
        resource: Mapping[str, Any] | None = None,
        claim: str | None = None,
        spool: Path | None = None,
        retry_seconds: float | None = None,
        keep: bool | None = None,
    ) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        attributes = {"service.name": service, **(resource or {})}
        self._ids = _PinnedIds()
        self._provider = TracerProvider(
            resource=Resource.create(attributes), id_generator=self._ids
        )
        self.export_failures = 0
        self.delivery: SpanDelivery | None = None
        self._batch: Any = None
        self._memory: InMemorySpanExporter | None = None
        if keep or (keep is None and hub is None):
            self._memory = InMemorySpanExporter()
            self._provider.add_span_processor(SimpleSpanProcessor(self._memory))
        if hub is not None:
            self.delivery = SpanDelivery(
                hub,
                token,
                claim=claim,
                spool=spool,
                retry_seconds=RETRY_SECONDS if retry_seconds is None else retry_seconds,
            )
            # The batch processor drops what does not fit its queue; an evaluation's spans are
            # recorded at once, so `record` waits for the queue to drain before it would fill.
            self._batch = BatchSpanProcessor(
                _Delivering(self.delivery, self),
                max_queue_size=QUEUE_SPANS,
                max_export_batch_size=EXPORT_BATCH_SPANS,
                schedule_delay_millis=EXPORT_EVERY_MS,
            )
            self._provider.add_span_processor(self._batch)
        self._tracer = self._provider.get_tracer(Attr.PREDICTORS)
        self._pending = 0
        self._root: Any = None
        self._root_context: Any = None
        self._contexts: dict[int, Any] = {}
        # The contexts of parents that children named before the parents were written.
        self._early: dict[int, Any] = {}
        self._end_ns = 0

    def start(
        self,
        name: str = "evaluation",
        *,
        attributes: Mapping[str, Any],
        trace_id: str | None = None,
        parent_span_id: str | None = None,
        start_ns: int | None = None,
    ) -> None:
        """Open one evaluation's trace: a root span `name` (started at `start_ns`, default now)
        under which `write` nests the spans as they come; `finish` ends it.

        `trace_id` (32 hex digits) pins the trace's id (else a random one); `parent_span_id`
        (16 hex digits, with `trace_id`) makes a remote span the root span's parent (W3C trace
        context: the caller's span)."""
        import time

        from opentelemetry import trace

        context = None
        if trace_id and parent_span_id:
            remote = trace.SpanContext(
                trace_id=int(trace_id, 16),
                span_id=int(parent_span_id, 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
            context = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        self._ids.trace_id = int(trace_id, 16) if trace_id else None
        try:
            self._root = self._tracer.start_span(
                name,
                context=context,
                start_time=start_ns if start_ns is not None else time.time_ns(),
                attributes={k: _attribute(v) for k, v in attributes.items() if v is not None},
            )
        finally:
            self._ids.trace_id = None
        self._root_context = trace.set_span_in_context(self._root)
        # Each written span's SpanContext (its ids), without the span: a later span may be its
        # child, and a context that held the span would hold the whole trace in memory.
        self._contexts = {}
        self._early = {}
        self._end_ns = 0

    def write(self, spans: Sequence[Span]) -> None:
        """Record spans of the open trace (a `predictors.evaluation.SpanSink`): each becomes an
        OpenTelemetry span, nested in its parent or in the root, handed to the exporter and not
        kept. A parent may be written before its children or after them (a stage span ends
        after the batch spans streamed inside it): the ids of a parent not written yet are
        fixed when a child first names it, and the parent gets them when it comes."""
        from opentelemetry import trace

        if self._root is None:
            raise RuntimeError("Tracer.write before Tracer.start")
        for span in spans:
            known = self._contexts.get(span.parent_id) if span.parent_id else None
            if span.parent_id and known is None:
                known = self._contexts[span.parent_id] = self._reserved_context()
                self._early[span.parent_id] = known
            parent = (
                trace.set_span_in_context(trace.NonRecordingSpan(known))
                if known is not None
                else self._root_context
            )
            reserved = self._early.pop(span.span_id, None) if span.span_id else None
            self._ids.span_id = reserved.span_id if reserved is not None else None
            try:
                otel = self._tracer.start_span(
                    span.name,
                    context=parent,
                    start_time=span.start_ns,
                    attributes={
                        k: _attribute(v) for k, v in span.attributes.items() if v is not None
                    },
                )
            finally:
                self._ids.span_id = None
            otel.end(end_time=span.end_ns)
            if span.span_id and reserved is None:
                self._contexts[span.span_id] = otel.get_span_context()
            self._end_ns = max(self._end_ns, span.end_ns)
            self._queued()

    def _reserved_context(self) -> Any:
        """The ids of a span to be written later: this trace's id and a new span id."""
        from opentelemetry import trace

        return trace.SpanContext(
            trace_id=self._root.get_span_context().trace_id,
            span_id=self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )

    def finish(self, end_ns: int | None = None) -> None:
        """End the root span (at `end_ns`, default the last span's end, or now)."""
        import time

        if self._root is None:
            return
        self._root.end(end_time=end_ns or self._end_ns or time.time_ns())
        self._root = None
        self._contexts = {}
        self._early = {}
        self._queued()

    def record(
        self,
        spans: Sequence[Span],
        *,
        name: str = "evaluation",
        attributes: Mapping[str, Any],
        trace_id: str | None = None,
        parent_span_id: str | None = None,
    ) -> None:
        """Turn one finished evaluation's spans into OpenTelemetry spans, in one trace under a
        root span `name` that covers them all (`start`, `write`, `finish` at once). A span's
        parent must come before it in `spans`."""
        if not spans:
            return
        self.start(
            name,
            attributes=attributes,
            trace_id=trace_id,
            parent_span_id=parent_span_id,
            start_ns=min(s.start_ns for s in spans),
        )
        self.write(spans)
        self.finish(max(s.end_ns for s in spans))

    def _queued(self) -> None:
        """Count a span handed to the batch processor; wait for the export of what is queued
        before the queue would be full (it would drop spans)."""
        if self._batch is None:
            return
        self._pending += 1
        if self._pending >= QUEUE_SPANS - EXPORT_BATCH_SPANS:
            self._batch.force_flush()
            self._pending = 0

    def finished(self) -> Iterable[Any]:
        """The OpenTelemetry spans recorded so far (`ReadableSpan`s), in the order they ended
        (none unless the tracer keeps them)."""
        return self._memory.get_finished_spans() if self._memory is not None else ()

    def flush(self, timeout_ms: int = 30_000) -> bool:
        self._pending = 0
        return self._provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        self._provider.shutdown()


def _id_generator_base() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    return RandomIdGenerator


class _PinnedIds(_id_generator_base()):  # type: ignore[misc]
    """Random ids, except the trace id while `trace_id` is set and the span id while
    `span_id` is."""

    trace_id: int | None = None
    span_id: int | None = None

    def generate_trace_id(self) -> int:
        pinned = self.trace_id
        return pinned if pinned is not None else int(super().generate_trace_id())

    def generate_span_id(self) -> int:
        pinned = self.span_id
        return pinned if pinned is not None else int(super().generate_span_id())


def _span_exporter_base() -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter

    return SpanExporter


class _Delivering(_span_exporter_base()):  # type: ignore[misc]
    """A span exporter that encodes each batch as OTLP protobuf and hands it to a
    `SpanDelivery` (retries, spool, exactly-once headers); it counts the batches not delivered
    on the tracer (`export_failures`)."""

    def __init__(self, delivery: SpanDelivery, tracer: Tracer) -> None:
        self._delivery = delivery
        self._tracer = tracer

    def export(self, spans: Any) -> Any:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            body = encode_spans(spans).SerializeToString()
            delivered = self._delivery.deliver(body, len(spans))
        except Exception:
            logger.exception("span export failed")
            delivered = False
        if not delivered:
            self._tracer.export_failures += 1
        return SpanExportResult.SUCCESS if delivered else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._delivery.stopping.set()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True
