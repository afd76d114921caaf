"""Per-layer aggregates of a trace: per level, name and op type, the count and the total, mean,
median, p99, min and max durations of its spans (kept as `SpanAggregate` rows, recomputed when
chunks arrived since), and the kernels' time per layer."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from django.db import transaction

from traces.models import SpanAggregate, Trace
from traces.otlp import clean
from traces.store import get_store


def kernels_by_layer(trace_id: str) -> dict[str, tuple[int, int]]:
    """{layer name: (how many kernel spans, their total ns)} of the kernels (op type `kernel`)
    correlated to a layer (`mlms.layer_name`)."""
    table = get_store().read_table(trace_id, ["op_type", "layer_name", "start_ns", "end_ns"])
    table = table.filter(
        pc.fill_null(
            pc.and_(pc.equal(table["op_type"], "kernel"), pc.is_valid(table["layer_name"])),
            False,
        )
    )
    if not table.num_rows:
        return {}
    duration = pc.max_element_wise(pc.subtract(table["end_ns"], table["start_ns"]), 0)
    grouped = (
        table.append_column("duration", duration)
        .group_by("layer_name")
        .aggregate([("duration", "count"), ("duration", "sum")])
    )
    return {
        row["layer_name"]: (row["duration_count"], row["duration_sum"])
        for row in grouped.to_pylist()
    }


def _aggregate(trace_id: str) -> list[dict[str, Any]]:
    """Per (level, name, op type): count, total, mean, nearest-rank p50 and p99, min and max of
    the durations, and the first layer index seen; computed in Arrow, not row by row."""
    table = get_store().read_table(
        trace_id, ["name", "start_ns", "end_ns", "level", "layer_index", "op_type"]
    )
    if not table.num_rows:
        return []
    duration = pc.max_element_wise(pc.subtract(table["end_ns"], table["start_ns"]), 0)
    table = pa.table(
        {
            "level": pc.fill_null(table["level"], ""),
            "name": table["name"],
            "op_type": pc.fill_null(table["op_type"], ""),
            "layer_index": table["layer_index"],
            "duration": duration,
        }
    )
    keys = ["level", "name", "op_type"]
    ordered = table.sort_by([(key, "ascending") for key in keys] + [("duration", "ascending")])
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
        made.append(
            {
                # Cut to the columns' lengths, and cleaned: chunks stored before NULs were
                # replaced may hold them.
                "level": clean(row["level"])[:32],
                "name": clean(row["name"])[:255],
                "op_type": clean(row["op_type"])[:128],
                "layer_index": row["layer_index_first"],
                "count": count,
                "total_ns": total,
                "mean_ns": total / count,
                "p50_ns": int(p50[index]),
                "p99_ns": int(p99[index]),
                "min_ns": int(row["duration_min"]),
                "max_ns": int(row["duration_max"]),
            }
        )
    return made


def aggregates(trace: Trace) -> list[SpanAggregate]:
    """The trace's aggregates, recomputed first if chunks arrived since they were."""
    with transaction.atomic():
        trace = Trace.objects.select_for_update().get(pk=trace.pk)
        if trace.aggregated_chunks != trace.chunk_count:
            SpanAggregate.objects.filter(trace=trace).delete()
            made = [SpanAggregate(trace=trace, **fields) for fields in _aggregate(trace.trace_id)]
            SpanAggregate.objects.bulk_create(made)
            trace.aggregated_chunks = trace.chunk_count
            trace.save(update_fields=["aggregated_chunks"])
    return list(SpanAggregate.objects.filter(trace=trace).order_by("-total_ns", "level", "name"))
