"""Spans as a Chrome trace (the JSON that Perfetto and chrome://tracing open): the one exporter
behind `mlms evaluate --trace-file` and the hub's `?format=chrome`, so both draw the same spans
the same way.

One process per framework (the spans' `framework` attribute: `mlms evaluate` compares several
in one file), named after it; in each, one thread per span level, outermost first (`protocol.SPAN_LEVELS`; a span of no
known level goes to thread 0, "other"), each span a complete event (`ph: "X"`, microseconds)
whose `args` are its attributes and its span and parent ids; each hardware counter sample a
counter event (`ph: "C"`) per counter, so that every counter gets a track of its own (named
`<counter>@<device>` when several devices sampled it).

A span is a `SpanRow` mapping: `name`, `start_ns`, `end_ns`, `level`, `attributes` (a dict),
`span_id`, `parent_span_id` (0 or None: none), `device`, and `counters` (a list of
`{"name", "value"}` for a counter sample, else empty). `rows_of_spans` makes them of the
evaluation loop's `Span`s; the hub reads them from its stored columns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from predictors.protocol import COUNTER_LEVEL, COUNTER_OP_TYPE, SPAN_LEVELS, Attr
from predictors.tracing import Span

__all__ = ["chrome_trace", "counter_key", "rows_of_spans"]

SpanRow = Mapping[str, Any]


def counter_key(name: str, device: str | None, devices: int) -> str:
    """A counter's key: its name, or `<name>@<device>` when several devices sampled it."""
    return name if devices <= 1 else f"{name}@{device or ''}"


def thread_of(level: str | None) -> int:
    """The thread of a span level: 1 for the outermost, 0 for none known."""
    return SPAN_LEVELS.index(level) + 1 if level in SPAN_LEVELS else 0


def chrome_trace(rows: Iterable[SpanRow], *, trace_id: str | None = None) -> dict[str, Any]:
    """The Chrome trace document of `rows`, in the order of their start."""
    ordered = sorted(rows, key=lambda row: row["start_ns"])
    samples = [row for row in ordered if row.get("counters")]
    spans = [row for row in ordered if not row.get("counters")]
    processes: dict[str, int] = {}
    for row in ordered:
        processes.setdefault(_framework(row), len(processes) + 1)
    events: list[dict[str, Any]] = []
    for framework, pid in processes.items():
        if framework:
            events.append(
                {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": framework}}
            )
    for pid, tid in sorted(
        {(processes[_framework(row)], thread_of(row.get("level"))) for row in spans}
    ):
        name = SPAN_LEVELS[tid - 1] if tid else "other"
        events.append(
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
        )
    devices: dict[str, set[str | None]] = defaultdict(set)
    for row in samples:
        for counter in row["counters"]:
            devices[counter["name"]].add(row.get("device"))
    for row in ordered:
        if row.get("counters"):
            for counter in row["counters"]:
                key = counter_key(counter["name"], row.get("device"), len(devices[counter["name"]]))
                events.append(
                    {
                        "name": key,
                        "cat": COUNTER_LEVEL,
                        "ph": "C",
                        "ts": row["start_ns"] / 1000,
                        "pid": processes[_framework(row)],
                        "args": {key: counter["value"]},
                    }
                )
            continue
        args = dict(row.get("attributes") or {})
        args.update(span_id=row.get("span_id"), parent_span_id=row.get("parent_span_id") or None)
        events.append(
            {
                "name": row["name"],
                "cat": row.get("level") or "other",
                "ph": "X",
                "ts": row["start_ns"] / 1000,
                "dur": max(row["end_ns"] - row["start_ns"], 0) / 1000,
                "pid": processes[_framework(row)],
                "tid": thread_of(row.get("level")),
                "args": args,
            }
        )
    document: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if trace_id:
        document["otherData"] = {"trace_id": trace_id}
    return document


def _framework(row: SpanRow) -> str:
    return str((row.get("attributes") or {}).get("framework") or "")


def rows_of_spans(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """The evaluation loop's spans as rows: a counter sample's `mlms.counter.*` attributes
    become its counters."""
    rows = []
    for span in spans:
        attributes = dict(span.attributes)
        level = attributes.get(Attr.LEVEL)
        counters: list[dict[str, Any]] = []
        if level == COUNTER_LEVEL and attributes.get(Attr.OP_TYPE) == COUNTER_OP_TYPE:
            prefix = Attr.COUNTER_PREFIX
            counters = [
                {"name": key[len(prefix) :], "value": value}
                for key, value in attributes.items()
                if key.startswith(prefix) and isinstance(value, int | float)
            ]
        rows.append(
            {
                "name": span.name,
                "start_ns": span.start_ns,
                "end_ns": span.end_ns,
                "level": level,
                "attributes": attributes,
                "span_id": span.span_id or None,
                "parent_span_id": span.parent_id or None,
                "device": attributes.get(Attr.DEVICE),
                "counters": counters,
            }
        )
    return rows
