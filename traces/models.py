"""Traces: the database's summary of the spans stored in the artifact store.

The spans themselves live in Parquet chunks under `traces/<trace_id>/` (see `traces.store`);
the database keeps one `Trace` row per trace id (who owns it, which evaluation it belongs to,
how many spans and chunks), its per-level, per-name aggregates and one row per stored export.

These models began in the evaluations app: their tables keep its names (`db_table`), so that
moving them moved no data (`traces/migrations/0001_initial.py`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


def evaluation_link(on_delete: Any, related_name: str) -> Any:
    """A row's link to the evaluation it belongs to, if any."""
    return models.ForeignKey(
        "evaluations.Evaluation",
        null=True,
        blank=True,
        on_delete=on_delete,
        related_name=related_name,
    )


class Trace(models.Model):
    trace_id = models.CharField(max_length=32, unique=True)
    # The evaluation's user for an evaluation's trace; otherwise the user whose token first
    # wrote spans into it.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="traces"
    )
    evaluation = evaluation_link(models.SET_NULL, "traces")
    span_count = models.PositiveBigIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    # The earliest span start and the latest span end, in Unix nanoseconds.
    start_ns = models.BigIntegerField(null=True, blank=True)
    end_ns = models.BigIntegerField(null=True, blank=True)
    # The chunk count the stored aggregates were computed from (computed when the evaluation
    # finishes, and again on a read after more chunks arrived).
    aggregated_chunks = models.PositiveIntegerField(default=0)
    # The chunk count when the trace was last finished (compacted and aggregated in the
    # background once its evaluation finished, `traces.finishing`).
    finished_chunks = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "evaluations_trace"
        ordering = ["-created_at", "id"]

    def __str__(self) -> str:
        return f"trace {self.trace_id} ({self.span_count} spans)"


class SpanAggregate(models.Model):
    """The durations of the spans of one trace with the same level, name, op type, batch size
    (None: spans outside any batch) and parent path, and for a layer the kernels run inside
    it; for a hardware counter, the median of its sampled values."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="aggregates")
    level = models.CharField(max_length=32, blank=True, default="")
    name = models.CharField(max_length=255)
    op_type = models.CharField(max_length=128, blank=True, default="")
    batch_size = models.BigIntegerField(null=True, blank=True)
    layer_index = models.BigIntegerField(null=True, blank=True)
    count = models.PositiveBigIntegerField()
    total_ns = models.BigIntegerField()
    mean_ns = models.FloatField()
    p50_ns = models.BigIntegerField()
    p99_ns = models.BigIntegerField()
    min_ns = models.BigIntegerField()
    max_ns = models.BigIntegerField()
    # The kernels (op type `kernel`) correlated to this layer at this batch size: how many, and
    # their total time (None: none, or a row of a kernel level).
    kernel_count = models.PositiveBigIntegerField(null=True, blank=True)
    kernel_total_ns = models.BigIntegerField(null=True, blank=True)
    # The names of the layer and op spans that enclose these spans, outermost first, joined by
    # " › " (`traces.aggregates.PATH_SEPARATOR`); "" where none does (stages, batches,
    # layers). A counter's row: the sampler that took it (its span's name).
    parent = models.CharField(max_length=1024, blank=True, default="")
    # A counter's row (level `hardware`, op type `counter`, named after the counter): the
    # median of the values its samples carry; None for the rows of spans.
    value_p50 = models.FloatField(null=True, blank=True)

    class Meta:
        db_table = "evaluations_spanaggregate"
        ordering = ["trace", "-total_ns", "id"]

    def __str__(self) -> str:
        return f"{self.level}/{self.name} @{self.batch_size} × {self.count}"


class SpanExport(models.Model):
    """One accepted export's spans of one trace: how many, for which evaluation and attempt,
    under which export id (`X-MLMS-Export`, unique within the trace: an export sent again after
    its answer was lost is stored once). The spans stored for an evaluation's attempt are the
    sum of its rows."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="exports")
    evaluation = evaluation_link(models.CASCADE, "span_exports")
    attempt = models.PositiveIntegerField(default=0)
    key = models.CharField(max_length=32, blank=True, default="")
    spans = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "evaluations_spanexport"
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["trace", "key"],
                condition=~models.Q(key=""),
                name="span_export_once_per_trace",
            )
        ]
        # The name the index got in the evaluations app (a name made from the table and
        # columns), given here so that it stays the same.
        indexes = [
            models.Index(fields=["evaluation", "attempt"], name="evaluations_evaluat_6831d5_idx")
        ]

    def __str__(self) -> str:
        return f"{self.spans} spans into {self.trace_id}"
