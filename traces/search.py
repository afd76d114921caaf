"""Reading a whole trace, not a window's longest spans: the spans whose name, op type or layer
name holds a text (case aside), wherever they are on the timeline (`/search`); one span's
parent and children (`/spans/<span_id>`); and the statistics of every span in a time range
(`/selection`, the timeline's area selection). Vectorised over the stored columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traces.store import _not_counter, get_store

FIELDS = ("name", "op_type", "layer_name")
MAX_CHILDREN = 200
_COLUMNS = [
    "span_id",
    "parent_span_id",
    "name",
    "op_type",
    "layer_name",
    "level",
    "start_ns",
    "end_ns",
]


@dataclass
class Matches:
    total: int  # every span that matches
    spans: list[dict[str, Any]]  # the first `limit` of them from `offset`, in time order


def search(trace_id: str, text: str, fields: tuple[str, ...], offset: int, limit: int) -> Matches:
    """The spans (counter samples aside) whose `fields` hold `text`, ignoring case, ordered by
    start (then longest first); `limit` of them from the `offset`-th."""
    table = get_store().read_table(trace_id, _COLUMNS)
    if not table.num_rows:
        return Matches(0, [])
    found = None
    for field in fields:
        hit = pc.fill_null(pc.match_substring(table[field], text, ignore_case=True), False)
        found = hit if found is None else pc.or_(found, hit)
    assert found is not None
    table = table.filter(pc.and_(found, _not_counter(table)))
    duration = pc.subtract(table["end_ns"], table["start_ns"])
    table = table.append_column("duration_ns", duration).sort_by(
        [("start_ns", "ascending"), ("duration_ns", "descending"), ("span_id", "ascending")]
    )
    page = table.slice(offset, limit)
    return Matches(table.num_rows, [_row(row) for row in page.to_pylist()])


def _row(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "span_id": row["span_id"],
        "parent_span_id": row["parent_span_id"] or None,
        "name": row["name"],
        "op_type": row["op_type"],
        "layer_name": row["layer_name"],
        "level": row["level"],
        "start_ns": row["start_ns"],
        "end_ns": row["end_ns"],
        "duration_ns": row["duration_ns"],
    }


def span(trace_id: str, span_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """One span's place in the trace (its name, level, op type, times and parent; None if the
    trace has no such span) and its children (the spans it is the parent of, in time order,
    at most `MAX_CHILDREN`), read from the light columns only."""
    table = get_store().read_table(trace_id, _COLUMNS)
    own = table.filter(pc.equal(table["span_id"], span_id))
    if not own.num_rows:
        return None, []
    children = table.filter(pc.fill_null(pc.equal(table["parent_span_id"], span_id), False))
    children = children.append_column(
        "duration_ns", pc.subtract(children["end_ns"], children["start_ns"])
    ).sort_by([("start_ns", "ascending"), ("span_id", "ascending")])
    found = own.append_column("duration_ns", pc.subtract(own["end_ns"], own["start_ns"]))
    return _row(found.to_pylist()[0]), [
        _row(row) for row in children.slice(0, MAX_CHILDREN).to_pylist()
    ]


@dataclass
class Selection:
    total: int  # spans (counter samples aside) overlapping the range
    levels: dict[str, int]  # of them, how many per level ("" for none)
    busy_ns: dict[str, int]  # per level, the time inside the range covered by its spans
    top: list[dict[str, Any]]  # per (level, name, op type): count and time inside the range


def selection(trace_id: str, start: int, end: int, top: int) -> Selection:
    """Statistics of every span overlapping [start, end] (not only those a window shows): how
    many per level, and per (level, name, op type) the count and the time each spends inside
    the range (clipped to it), the `top` of most time first; vectorised."""
    table = get_store().read_table(trace_id, _COLUMNS)
    if not table.num_rows:
        return Selection(0, {}, {}, [])
    inside = pc.and_(
        pc.and_(pc.greater_equal(table["end_ns"], start), pc.less_equal(table["start_ns"], end)),
        _not_counter(table),
    )
    table = table.filter(inside)
    if not table.num_rows:
        return Selection(0, {}, {}, [])
    clipped = pc.subtract(
        pc.min_element_wise(table["end_ns"], end), pc.max_element_wise(table["start_ns"], start)
    )
    flat = pa.table(
        {
            "level": pc.fill_null(table["level"], ""),
            "name": table["name"],
            "op_type": pc.fill_null(table["op_type"], ""),
            "inside_ns": pc.max_element_wise(clipped, 0),
            "start_ns": table["start_ns"],
            "end_ns": table["end_ns"],
        }
    )
    per_level = flat.group_by("level").aggregate([("inside_ns", "count")])
    levels = {str(row["level"]): int(row["inside_ns_count"]) for row in per_level.to_pylist()}
    groups = (
        flat.group_by(["level", "name", "op_type"])
        .aggregate([("inside_ns", "count"), ("inside_ns", "sum")])
        .sort_by([("inside_ns_sum", "descending"), ("level", "ascending"), ("name", "ascending")])
        .slice(0, top)
    )
    rows = [
        {
            "level": row["level"],
            "name": row["name"],
            "op_type": row["op_type"],
            "count": int(row["inside_ns_count"]),
            "inside_ns": int(row["inside_ns_sum"]),
        }
        for row in groups.to_pylist()
    ]
    return Selection(flat.num_rows, levels, _busy(flat, start, end), rows)


def _busy(flat: pa.Table, start: int, end: int) -> dict[str, int]:
    """Per level, the time in [start, end] when at least one of its spans runs (overlapping
    spans counted once): the union of their clipped intervals."""
    busy: dict[str, int] = {}
    for level in pc.unique(flat["level"]).to_pylist():
        rows = flat.filter(pc.equal(flat["level"], level))
        starts = np.maximum(rows["start_ns"].to_numpy(), start)
        ends = np.minimum(rows["end_ns"].to_numpy(), end)
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        # The end reached so far, before each interval: a gap opens where a start passes it.
        reach = np.maximum.accumulate(ends)
        previous = np.concatenate([[starts[0]], reach[:-1]])
        covered = np.maximum(ends - np.maximum(starts, previous), 0)
        busy[str(level)] = int(covered.sum())
    return busy
