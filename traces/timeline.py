"""Windows of a trace's timeline: the longest spans overlapping a window, and the hardware
counters sampled in it, downsampled (what `GET /api/v1/traces/<trace_id>/timeline` answers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from traces.otlp import load_attributes
from traces.store import get_store


def span_json(row: dict[str, Any]) -> dict[str, Any]:
    """A stored span (a row of every column) as the timeline answers it."""
    return {
        "trace_id": row["trace_id"],
        "span_id": row["span_id"],
        "parent_span_id": row["parent_span_id"] or None,
        "name": row["name"],
        "kind": row["kind"],
        "start_ns": row["start_ns"],
        "end_ns": row["end_ns"],
        "duration_ns": row["end_ns"] - row["start_ns"],
        "level": row["level"],
        "layer_index": row["layer_index"],
        "layer_name": row["layer_name"],
        "op_type": row["op_type"],
        "status": row["status"],
        "status_message": row["status_message"],
        "attributes": load_attributes(row["attributes"]),
        "resource": load_attributes(row["resource"]),
    }


def counter_unit(name: str) -> str:
    """A counter's unit: its name's suffix after the last `_` (`gpu.power_w`: `w`)."""
    return name.rsplit("_", 1)[1] if "_" in name else ""


@dataclass
class Window:
    """What `timeline` answers for a window."""

    total: int  # spans (not counter samples) overlapping the window
    spans: list[dict[str, Any]]  # the `max_spans` longest of them, longest first
    counter_samples: int  # counter spans sampled in the window
    counters: dict[str, dict[str, Any]]  # {key: {"unit", "device", "points": [[t_ns, value]]}}


def timeline(
    trace_id: str, start: int | None, end: int | None, max_spans: int, max_points: int = 1000
) -> Window:
    """The spans overlapping [start, end] (the `max_spans` longest of them, longest first), and
    the hardware counters sampled in it, each downsampled to at most `max_points` points: the
    window is cut into `max_points` equal buckets and each keeps its largest sample."""
    spans = get_store().window(trace_id, start, end, max_spans)
    rows = spans.longest.to_pylist()
    window_start = start if start is not None else spans.start_ns
    window_end = end if end is not None else spans.end_ns
    counter_rows = spans.counters
    samples: int = 0
    counters: dict[str, dict[str, Any]] = {}
    if window_start is not None and window_end is not None and counter_rows.num_rows:
        samples, counters = _counters(counter_rows, window_start, window_end, max_points)
    return Window(spans.total, [span_json(row) for row in rows], samples, counters)


def _counters(
    rows: pa.Table, start: int, end: int, max_points: int
) -> tuple[int, dict[str, dict[str, Any]]]:
    """(how many of the counter spans `rows` were sampled in [start, end], their counters
    downsampled to at most `max_points` points each: per equal bucket, the largest sample)."""
    rows = rows.combine_chunks()
    lists = rows["counters"].combine_chunks()
    values = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists)
    samples = pa.table(
        {
            "name": pc.struct_field(values, "name"),
            "value": pc.struct_field(values, "value"),
            "t": pc.take(rows["start_ns"], parents),
            "until": pc.take(rows["end_ns"], parents),
            "device": pc.fill_null(pc.take(rows["device"], parents), ""),
        }
    )
    # A counter sampled on several devices (one per GPU) gets a key per device.
    devices = samples.group_by("name").aggregate([("device", "count_distinct")])
    shared = devices.filter(pc.greater(devices["device_count_distinct"], 1))["name"]
    key = pc.if_else(
        pc.is_in(samples["name"], value_set=shared.combine_chunks()),
        pc.binary_join_element_wise(samples["name"], samples["device"], "@"),
        samples["name"],
    )
    samples = samples.append_column("key", key)
    in_window = pc.and_(
        pc.greater_equal(rows["start_ns"], start), pc.less_equal(rows["start_ns"], end)
    )
    sampled = pc.sum(pc.cast(in_window, pa.int64())).as_py() or 0
    # A sample holds for its interval (its span): a counter's last sample before the window
    # comes too when its interval reaches into the window, so that a window between two samples
    # still shows the value.
    before = samples.filter(
        pc.and_(pc.less(samples["t"], start), pc.greater_equal(samples["until"], start))
    )
    held = None
    if before.num_rows:
        held = (
            before.sort_by([("key", "ascending"), ("t", "descending")])
            .group_by("key", use_threads=False)
            .aggregate([("t", "first"), ("value", "first"), ("name", "first"), ("device", "first")])
        )
    samples = samples.filter(
        pc.and_(pc.greater_equal(samples["t"], start), pc.less_equal(samples["t"], end))
    )
    if not samples.num_rows and held is None:
        return sampled, {}
    # Equal buckets over the window; each keeps its largest value (the earliest, on a tie).
    # An offset is nanoseconds, past 2^53 in a window from 0 (Unix time): a double holds it only
    # to its 53 bits, which a bucket of a thousandth of such a window cannot tell apart, so the
    # cast may round (a safe cast refuses to, and failed every such window).
    offsets = pc.cast(pc.subtract(samples["t"], start), pa.float64(), safe=False)
    bucket = pc.floor(pc.multiply(pc.divide(offsets, float(end - start + 1)), float(max_points)))
    bucket = pc.min_element_wise(pc.cast(bucket, pa.int64()), max_points - 1)
    samples = samples.append_column("bucket", bucket)
    ordered = samples.sort_by(
        [("key", "ascending"), ("bucket", "ascending"), ("value", "descending"), ("t", "ascending")]
    )
    kept = ordered.group_by(["key", "bucket"], use_threads=False).aggregate(
        [("t", "first"), ("value", "first"), ("name", "first"), ("device", "first")]
    )
    columns = ["key", "t_first", "value_first", "name_first", "device_first"]
    kept = kept.select(columns)
    if held is not None:
        kept = pa.concat_tables([held.select(columns), kept])
    kept = kept.sort_by([("key", "ascending"), ("t_first", "ascending")])
    counters: dict[str, dict[str, Any]] = {}
    for row in kept.to_pylist():
        counter = counters.get(row["key"])
        if counter is None:
            counter = counters[row["key"]] = {
                "unit": counter_unit(row["name_first"]),
                "device": row["device_first"] or None,
                "points": [],
            }
        counter["points"].append([row["t_first"], row["value_first"]])
    return sampled, counters
