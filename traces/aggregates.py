"""Per-layer aggregates of a trace, never mixed across batch sizes: per level, name, op type
and batch size, the count and the total, mean, median, p99, min and max durations of its spans,
and for a layer the kernels run inside it (count and total time). Kept as `SpanAggregate`
rows, computed when the evaluation finishes (`traces.finishing`), and again when chunks
arrived since (a running evaluation's live table, an export that came late).

A span's batch size is its `batch_size` attribute (the evaluation loop puts it on stage, batch,
layer and kernel spans), else that of its nearest ancestor that has one; spans outside any
batch (the evaluation's root span, counter samples) have none.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from django.db import transaction

from predictors.protocol import KERNEL_LEVELS
from traces.models import SpanAggregate, Trace
from traces.otlp import clean
from traces.store import get_store

_COLUMNS = [
    "span_id",
    "parent_span_id",
    "name",
    "start_ns",
    "end_ns",
    "level",
    "layer_index",
    "layer_name",
    "op_type",
    "batch_size",
]
# The most levels a batch size is carried down (stage → batch → layer → op → kernel → …).
_MAX_DEPTH = 16


def _batch_sizes(table: pa.Table) -> pa.Array:
    """Each span's batch size: its own, else its nearest ancestor's (null where none has one),
    found a generation at a time by joining span ids, not span by span."""
    sizes = table["batch_size"].combine_chunks()
    parents = pc.index_in(table["parent_span_id"], value_set=table["span_id"])
    for _ in range(_MAX_DEPTH):
        missing = pc.and_(pc.is_null(sizes), pc.is_valid(parents))
        if not pc.any(missing).as_py():
            break
        inherited = pc.take(sizes, pc.fill_null(parents, 0))
        filled = pc.if_else(missing, inherited, sizes)
        if filled.null_count == sizes.null_count:
            break
        sizes = filled
    return sizes


def compute(trace_id: str) -> list[dict[str, Any]]:
    """The aggregates of a trace's spans as `SpanAggregate` fields: per (level, name, op type,
    batch size) count, total, mean, nearest-rank p50 and p99, min and max of the durations, the
    first layer index seen, and for a layer (any level but the kernel levels) the kernels
    correlated to it (`mlms.layer_name`) at the same batch size; computed in Arrow."""
    table = get_store().read_table(trace_id, _COLUMNS)
    if not table.num_rows:
        return []
    duration = pc.max_element_wise(pc.subtract(table["end_ns"], table["start_ns"]), 0)
    sizes = _batch_sizes(table)
    # -1 stands for "no batch size" while grouping (group keys may not be null here).
    size_key = pc.fill_null(sizes, -1)
    kernels = _kernels_by_layer(table, duration, size_key)
    flat = pa.table(
        {
            "level": pc.fill_null(table["level"], ""),
            "name": table["name"],
            "op_type": pc.fill_null(table["op_type"], ""),
            "batch_size": size_key,
            "layer_index": table["layer_index"],
            "duration": duration,
        }
    )
    keys = ["level", "name", "op_type", "batch_size"]
    ordered = flat.sort_by([(key, "ascending") for key in keys] + [("duration", "ascending")])
    # Without threads, groups come in the order they first appear: the sorted order.
    grouped = ordered.group_by(keys, use_threads=False).aggregate(
        [
            ("duration", "count"),
            ("duration", "sum"),
            ("duration", "min"),
            ("duration", "max"),
            ("layer_index", "first"),
        ]
    )
    durations = ordered["duration"].to_numpy()
    counts = grouped["duration_count"].to_numpy()
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    p50 = durations[starts + np.maximum(np.ceil(0.50 * counts).astype(np.int64) - 1, 0)]
    p99 = durations[starts + np.maximum(np.ceil(0.99 * counts).astype(np.int64) - 1, 0)]
    made = []
    for index, row in enumerate(grouped.to_pylist()):
        count, total = int(row["duration_count"]), int(row["duration_sum"])
        batch_size = row["batch_size"] if row["batch_size"] >= 0 else None
        kernel = (
            kernels.get((row["name"], row["batch_size"]))
            if row["level"] not in KERNEL_LEVELS
            else None
        )
        made.append(
            {
                # Cut to the columns' lengths, and cleaned: chunks stored before NULs were
                # replaced may hold them.
                "level": clean(row["level"])[:32],
                "name": clean(row["name"])[:255],
                "op_type": clean(row["op_type"])[:128],
                "batch_size": batch_size,
                "layer_index": row["layer_index_first"],
                "count": count,
                "total_ns": total,
                "mean_ns": total / count,
                "p50_ns": int(p50[index]),
                "p99_ns": int(p99[index]),
                "min_ns": int(row["duration_min"]),
                "max_ns": int(row["duration_max"]),
                "kernel_count": kernel[0] if kernel else None,
                "kernel_total_ns": kernel[1] if kernel else None,
            }
        )
    return made


def layer_samples(trace_id: str, level: str, batch_size: int | None) -> dict[str, np.ndarray]:
    """{span name: its durations in ns, in the order they ran} of a trace's spans of `level`
    at `batch_size` (the spans `compute` aggregates into one row each): what a comparison
    tests a layer's difference on."""
    table = get_store().read_table(trace_id, _COLUMNS)
    if not table.num_rows:
        return {}
    sizes = pc.fill_null(_batch_sizes(table), -1)
    keep = pc.and_(
        pc.equal(pc.fill_null(table["level"], ""), level),
        pc.equal(sizes, -1 if batch_size is None else batch_size),
    )
    chosen = table.filter(keep).sort_by([("start_ns", "ascending")])
    duration = pc.max_element_wise(pc.subtract(chosen["end_ns"], chosen["start_ns"]), 0)
    names = chosen["name"].to_pylist()
    values = duration.to_numpy()
    grouped: dict[str, list[int]] = {}
    for name, value in zip(names, values, strict=True):
        grouped.setdefault(name, []).append(int(value))
    return {name: np.asarray(found, dtype=np.int64) for name, found in grouped.items()}


def _kernels_by_layer(
    table: pa.Table, duration: pa.Array, size_key: pa.Array
) -> dict[tuple[str, int], tuple[int, int]]:
    """{(layer name, batch size or -1): (how many kernel spans, their total ns)} of the kernels
    (op type `kernel`) correlated to a layer (`mlms.layer_name`)."""
    is_kernel = pc.fill_null(
        pc.and_(pc.equal(table["op_type"], "kernel"), pc.is_valid(table["layer_name"])), False
    )
    if not pc.any(is_kernel).as_py():
        return {}
    kernels = pa.table(
        {"layer_name": table["layer_name"], "batch_size": size_key, "duration": duration}
    ).filter(is_kernel)
    grouped = kernels.group_by(["layer_name", "batch_size"]).aggregate(
        [("duration", "count"), ("duration", "sum")]
    )
    return {
        (row["layer_name"], row["batch_size"]): (row["duration_count"], row["duration_sum"])
        for row in grouped.to_pylist()
    }


def store(trace: Trace) -> None:
    """Compute the trace's aggregates and keep them, marked with the chunk count they were
    computed from. The spans are read without holding the trace's row (exports keep arriving
    meanwhile); the rows are replaced under its lock, unless newer ones were stored since."""
    chunks = Trace.objects.values_list("chunk_count", flat=True).get(pk=trace.pk)
    made = compute(trace.trace_id)
    with transaction.atomic():
        locked = Trace.objects.select_for_update().get(pk=trace.pk)
        if locked.aggregated_chunks >= chunks and locked.aggregated_chunks != 0:
            return
        SpanAggregate.objects.filter(trace=locked).delete()
        SpanAggregate.objects.bulk_create(
            [SpanAggregate(trace=locked, **fields) for fields in made], batch_size=1000
        )
        locked.aggregated_chunks = chunks
        locked.save(update_fields=["aggregated_chunks"])
    trace.aggregated_chunks = chunks


def current(trace: Trace) -> bool:
    """Whether the trace's stored aggregates count every chunk it has."""
    return trace.aggregated_chunks == trace.chunk_count


def aggregates(trace: Trace) -> list[SpanAggregate]:
    """The trace's aggregates; computed first if chunks arrived since they were (normally they
    were computed when its evaluation finished)."""
    trace.refresh_from_db(fields=["chunk_count", "aggregated_chunks"])
    if not current(trace):
        store(trace)
    return list(
        SpanAggregate.objects.filter(trace=trace).order_by(
            "batch_size", "-total_ns", "level", "name"
        )
    )
