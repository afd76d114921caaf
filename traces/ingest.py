"""Storing an accepted export: per trace id it carries, one chunk in the trace store
(`traces.store`), the trace's `Trace` row updated, and one `SpanExport` row. Per-level,
per-name aggregates (`SpanAggregate`) are recomputed lazily, when read after new chunks arrived
(`traces.aggregates`), so an export costs one chunk write and a few row writes.

Exactly once: an export that carries an id (`X-MLMS-Export`, see `predictors.span_delivery`)
is stored once per trace however often it arrives; each stored export is a `SpanExport` row
(the evaluation and attempt it counts for, its span count), which is what
`traces.actions.spans_stored` sums. Who may write what, and the agent's claim: `traces.access`.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from django.db import transaction
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from hub.models import ApiToken
from traces import finishing, signals
from traces.access import Target, authorize_write
from traces.errors import TraceError
from traces.models import SpanExport, Trace
from traces.otlp import tables_by_trace
from traces.store import get_store


def ingest(
    token: ApiToken,
    message: trace_service_pb2.ExportTraceServiceRequest,
    *,
    key: str = "",
    claim: str = "",
) -> int:
    """Store an export's spans (authorized first: on any refusal nothing is stored); the number
    of spans it carried.

    `key` (`X-MLMS-Export`) identifies the export: one that a trace has stored already is not
    stored again (its sender did not get the first answer). `claim` (`X-MLMS-Claim`): see
    `traces.access.authorize_write`."""
    grouped = tables_by_trace(message)
    targets = authorize_write(token, grouped, claim=claim)
    store = get_store()
    written: list[str] = []
    try:
        with transaction.atomic():
            for target in targets:
                rows = grouped[target.trace_id]
                trace = _locked_trace(token, target)
                if key and SpanExport.objects.filter(trace=trace, key=key).exists():
                    continue  # sent again after a lost answer: stored already
                written.append(store.add_chunk(target.trace_id, rows))
                _account(trace, target, rows)
                SpanExport.objects.create(
                    trace=trace,
                    evaluation=target.evaluation,
                    attempt=target.evaluation.attempts if target.evaluation is not None else 0,
                    key=key,
                    spans=rows.num_rows,
                )
                if target.evaluation is not None:
                    signals.spans_received.send(
                        sender=Trace, evaluation=target.evaluation, levels=_levels(rows)
                    )
                    if target.evaluation.status in target.evaluation.FINISHED:
                        # An export that came after the end: finish the trace again.
                        transaction.on_commit(
                            lambda trace_id=target.trace_id: finishing.schedule(trace_id),
                            robust=True,
                        )
    except BaseException:
        for handle in written:
            store.remove_chunk(handle)
        raise
    return sum(rows.num_rows for rows in grouped.values())


def _levels(rows: pa.Table) -> dict[str, int]:
    """How many of `rows` each level recorded (`""`: spans without `mlms.level`)."""
    counts = pc.value_counts(pc.fill_null(rows["level"], ""))
    return {
        str(level): int(count)
        for level, count in zip(
            counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
        )
    }


def _locked_trace(token: ApiToken, target: Target) -> Trace:
    """The target's `Trace` row, made if new, locked until the transaction ends."""
    owner_id = target.evaluation.user_id if target.evaluation is not None else token.user_id
    trace, _created = Trace.objects.select_for_update().get_or_create(
        trace_id=target.trace_id,
        defaults={"owner_id": owner_id, "evaluation": target.evaluation},
    )
    if target.evaluation is None and trace.owner_id != token.user_id:
        # Another user's token created it in the meantime.
        raise TraceError(403, f"This token may not write spans into trace {target.trace_id}.")
    return trace


def _account(trace: Trace, target: Target, rows: pa.Table) -> None:
    start = pc.min(rows["start_ns"]).as_py()
    end = pc.max(rows["end_ns"]).as_py()
    trace.span_count += rows.num_rows
    trace.chunk_count += 1
    trace.start_ns = start if trace.start_ns is None else min(trace.start_ns, start)
    trace.end_ns = end if trace.end_ns is None else max(trace.end_ns, end)
    if target.evaluation is not None and trace.evaluation_id is None:
        trace.evaluation = target.evaluation
        trace.owner_id = target.evaluation.user_id
    trace.save(
        update_fields=[
            "span_count",
            "chunk_count",
            "start_ns",
            "end_ns",
            "evaluation",
            "owner",
            "updated_at",
        ]
    )
