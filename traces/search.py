"""Searching a whole trace: the spans whose name, op type or layer name holds a text (case
aside), in time order, wherever they are on the timeline (what
`GET /api/v1/traces/<trace_id>/search` answers). Vectorised over the stored columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
