"""Per-layer aggregates of a trace, never mixed across batch sizes: per level, name, op type,
batch size and parent path, the count and the total, mean, median, p99, min and max durations
of its spans, and for a layer the kernels run inside it (count and total time); per hardware
counter, the median of its sampled values. Kept as `SpanAggregate` rows, computed when the
evaluation finishes (`traces.finishing`), and again when chunks arrived since (a running
evaluation's live table, an export that came late).

A span's batch size is its `batch_size` attribute (the evaluation loop puts it on stage, batch,
layer and kernel spans), else that of its nearest ancestor that has one; spans outside any
batch (the evaluation's root span, counter samples) have none.

A span's parent path is the names of the layer and op spans that enclose it (levels
`framework` and finer), outermost first, joined by `PATH_SEPARATOR`: an op of layer `conv1` has
the path `conv1`, a kernel of its op `Conv` the path `conv1 › Conv`. So one op name in two
layers makes two rows. Stages, batches and layers (enclosed by no layer) have the path "".
A counter's rows are one per sampler (its span's name) and, below it, one per counter it
carries, named after the counter, whose parent is the sampler.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from django.db import transaction

from predictors.protocol import COUNTER_LEVEL, COUNTER_OP_TYPE, KERNEL_LEVELS
from traces.models import SpanAggregate, Trace
from traces.otlp import clean
from traces.store import get_store

PATH_SEPARATOR = " › "
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
# The most enclosing spans a parent path is followed through (nested ops run deep).
_MAX_PATH_DEPTH = 32
# The levels whose spans name a parent path: layers, and ops and kernels inside them.
_STRUCTURE = pa.array(sorted({"framework", *KERNEL_LEVELS}))
_PARENT_LENGTH = SpanAggregate._meta.get_field("parent").max_length or 1024


def _parent_rows(table: pa.Table) -> pa.Array:
    """Each span's parent's row in `table` (null: none, or not stored)."""
    return pc.index_in(table["parent_span_id"], value_set=table["span_id"])


def _batch_sizes(table: pa.Table, parents: pa.Array | None = None) -> pa.Array:
    """Each span's batch size: its own, else its nearest ancestor's (null where none has one),
    found a generation at a time by joining span ids, not span by span."""
    sizes = table["batch_size"].combine_chunks()
    if parents is None:
        parents = _parent_rows(table)
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


def parent_paths(table: pa.Table, parents: pa.Array | None = None) -> pa.Array:
    """Each span's parent path (see the module's text), a generation at a time: a span's path
    is its parent's, followed by the parent's name where the parent is a layer or an op. A
    span whose parent is not stored, or lies deeper than `_MAX_PATH_DEPTH`, has the path of
    what is known of it (""). Never null."""
    if parents is None:
        parents = _parent_rows(table)
    has_parent = pc.is_valid(parents)
    index = pc.fill_null(parents, 0)
    names = pc.fill_null(table["name"].combine_chunks(), "")
    structural = pc.fill_null(
        pc.is_in(table["level"].combine_chunks(), value_set=_STRUCTURE), False
    )
    # Null: not known yet (its parent's path is not).
    paths = pc.if_else(has_parent, pa.scalar(None, pa.string()), pa.scalar("", pa.string()))
    for _ in range(_MAX_PATH_DEPTH):
        if not paths.null_count:
            break
        # What a span hands its children: its path, and its own name where it is structural.
        joined = pc.if_else(
            pc.equal(paths, ""), names, pc.binary_join_element_wise(paths, names, PATH_SEPARATOR)
        )
        handed = pc.if_else(structural, joined, paths)
        filled = pc.if_else(has_parent, pc.take(handed, index), paths)
        if filled.null_count == paths.null_count:
            break
        paths = filled
    return pc.fill_null(paths, "")


def _summaries(
    flat: pa.Table, keys: list[str], column: str, extra: Iterable[tuple[str, str]] = ()
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """`flat` grouped by `keys` (groups in the keys' sorted order): the count, sum, min and
    max of `column` and the `extra` aggregations, and each group's nearest-rank p50 and p99
    of `column`."""
    ordered = flat.sort_by([(key, "ascending") for key in keys] + [(column, "ascending")])
    # Without threads, groups come in the order they first appear: the sorted order.
    grouped = ordered.group_by(keys, use_threads=False).aggregate(
        [(column, "count"), (column, "sum"), (column, "min"), (column, "max"), *extra]
    )
    values = ordered[column].to_numpy()
    counts = grouped[f"{column}_count"].to_numpy()
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    p50 = values[starts + np.maximum(np.ceil(0.50 * counts).astype(np.int64) - 1, 0)]
    p99 = values[starts + np.maximum(np.ceil(0.99 * counts).astype(np.int64) - 1, 0)]
    return grouped, p50, p99


def compute(trace_id: str) -> list[dict[str, Any]]:
    """The aggregates of a trace's spans as `SpanAggregate` fields: per (level, name, op type,
    batch size, parent path) count, total, mean, nearest-rank p50 and p99, min and max of the
    durations, the first layer index seen, and for a layer (any level but the kernel levels)
    the kernels correlated to it (`mlms.layer_name`) at the same batch size; per counter, the
    same of its samples' durations and the median of its values (`value_p50`); computed in
    Arrow."""
    table = get_store().read_table(trace_id, [*_COLUMNS, "counters"])
    if not table.num_rows:
        return []
    duration = pc.max_element_wise(pc.subtract(table["end_ns"], table["start_ns"]), 0)
    parents = _parent_rows(table)
    sizes = _batch_sizes(table, parents)
    # -1 stands for "no batch size" while grouping (group keys may not be null here).
    size_key = pc.fill_null(sizes, -1)
    kernels = _kernels_by_layer(table, duration, size_key)
    flat = pa.table(
        {
            "level": pc.fill_null(table["level"], ""),
            "name": table["name"],
            "op_type": pc.fill_null(table["op_type"], ""),
            "batch_size": size_key,
            "parent": parent_paths(table, parents),
            "layer_index": table["layer_index"],
            "duration": duration,
        }
    )
    keys = ["level", "name", "op_type", "batch_size", "parent"]
    grouped, p50, p99 = _summaries(flat, keys, "duration", [("layer_index", "first")])
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
                "parent": clean(row["parent"])[:_PARENT_LENGTH],
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
    return made + _counter_rows(table, duration)


def _counter_samples(table: pa.Table, duration: pa.Array) -> pa.Table:
    """One row per value of a counter span (`sampler`, `counter`, `value`, the span's
    `duration`); finite values only."""
    is_counter = pc.fill_null(
        pc.and_(
            pc.and_(
                pc.equal(table["level"], COUNTER_LEVEL), pc.equal(table["op_type"], COUNTER_OP_TYPE)
            ),
            pc.is_valid(table["counters"]),
        ),
        False,
    )
    empty = pa.table(
        {
            "sampler": pa.array([], pa.string()),
            "counter": pa.array([], pa.string()),
            "value": pa.array([], pa.float64()),
            "duration": pa.array([], pa.int64()),
        }
    )
    if not pc.any(is_counter).as_py():
        return empty
    chosen = table.filter(is_counter)
    lists = chosen["counters"].combine_chunks()
    rows = pc.list_parent_indices(lists)
    values = pc.list_flatten(lists)
    samples = pa.table(
        {
            "sampler": pc.fill_null(pc.take(chosen["name"], rows), ""),
            "counter": pc.fill_null(pc.struct_field(values, "name"), ""),
            "value": pc.struct_field(values, "value"),
            "duration": pc.take(duration.filter(is_counter), rows),
        }
    )
    return samples.filter(pc.fill_null(pc.is_finite(samples["value"]), False))


def _counter_rows(table: pa.Table, duration: pa.Array) -> list[dict[str, Any]]:
    """A row per (sampler, counter): its samples' durations, and the median of its values."""
    samples = _counter_samples(table, duration)
    if not samples.num_rows:
        return []
    keys = ["sampler", "counter"]
    grouped, p50, p99 = _summaries(samples, keys, "duration")
    _by_value, value_p50, _ = _summaries(samples, keys, "value")
    made = []
    for index, row in enumerate(grouped.to_pylist()):
        count, total = int(row["duration_count"]), int(row["duration_sum"])
        made.append(
            {
                "level": COUNTER_LEVEL,
                "name": clean(row["counter"])[:255],
                "op_type": COUNTER_OP_TYPE,
                "batch_size": None,
                "parent": clean(row["sampler"])[:_PARENT_LENGTH],
                "layer_index": None,
                "count": count,
                "total_ns": total,
                "mean_ns": total / count,
                "p50_ns": int(p50[index]),
                "p99_ns": int(p99[index]),
                "min_ns": int(row["duration_min"]),
                "max_ns": int(row["duration_max"]),
                "kernel_count": None,
                "kernel_total_ns": None,
                "value_p50": float(value_p50[index]),
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


def item_samples(
    trace_id: str, batch_size: int | None
) -> tuple[dict[str, dict[tuple[str, str], np.ndarray]], dict[tuple[str, str], np.ndarray]]:
    """What `compute` aggregates, sample by sample, in the order they ran: ({level: {(parent
    path, name): durations in ns}} of a trace's spans at `batch_size`, {(sampler, counter):
    its sampled values}). What a comparison of one run against one run tests an item's
    difference on."""
    table = get_store().read_table(trace_id, [*_COLUMNS, "counters"])
    if not table.num_rows:
        return {}, {}
    table = table.sort_by([("start_ns", "ascending")])
    duration = pc.max_element_wise(pc.subtract(table["end_ns"], table["start_ns"]), 0)
    counters = _counter_samples(table, duration)
    parents = _parent_rows(table)
    sizes = pc.fill_null(_batch_sizes(table, parents), -1)
    keep = pc.equal(sizes, -1 if batch_size is None else batch_size)
    spans = pa.table(
        {
            "level": pc.fill_null(table["level"], ""),
            "parent": parent_paths(table, parents),
            "name": pc.fill_null(table["name"], ""),
            "value": duration,
        }
    ).filter(keep)
    by_level: dict[str, dict[tuple[str, str], np.ndarray]] = {}
    for level in pc.unique(spans["level"]).to_pylist():
        chosen = spans.filter(pc.equal(spans["level"], level))
        by_level[level] = _grouped_in_order(chosen["parent"], chosen["name"], chosen["value"])
    return by_level, _grouped_in_order(counters["sampler"], counters["counter"], counters["value"])


def _grouped_in_order(
    parent: pa.Array, name: pa.Array, value: pa.Array
) -> dict[tuple[str, str], np.ndarray]:
    """{(parent, name): its values, in the order given} (cleaned and cut as `compute` does)."""
    if not len(value):
        return {}
    chosen = pa.table({"parent": parent, "name": name, "value": value})
    chosen = chosen.append_column("order", pa.array(np.arange(chosen.num_rows)))
    ordered = chosen.sort_by(
        [("parent", "ascending"), ("name", "ascending"), ("order", "ascending")]
    )
    grouped = ordered.group_by(["parent", "name"], use_threads=False).aggregate(
        [("value", "count")]
    )
    values = ordered["value"].to_numpy()
    bounds = np.cumsum(grouped["value_count"].to_numpy())[:-1]
    keys = zip(grouped["parent"].to_pylist(), grouped["name"].to_pylist(), strict=True)
    return {
        (clean(parent)[:_PARENT_LENGTH], clean(name)[:255]): part
        for (parent, name), part in zip(keys, np.split(values, bounds), strict=True)
    }


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


def rows_of_traces(trace_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """{trace id: its aggregates, as dicts of the `SpanAggregate` fields a comparison reads}
    of many traces in one query; a trace whose aggregates count fewer chunks than it has is
    aggregated first (normally done when its evaluation finished). A trace id of no stored
    spans has none."""
    traces = list(Trace.objects.filter(trace_id__in=trace_ids))
    for trace in traces:
        if not current(trace):
            store(trace)
    found: dict[str, list[dict[str, Any]]] = {trace_id: [] for trace_id in trace_ids}
    for row in SpanAggregate.objects.filter(trace__in=traces).values(
        "trace__trace_id",
        "level",
        "name",
        "op_type",
        "batch_size",
        "parent",
        "layer_index",
        "count",
        "p50_ns",
        "value_p50",
    ):
        found[row.pop("trace__trace_id")].append(row)
    return found


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
