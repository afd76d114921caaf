"""Storing an accepted export: per trace id it carries, one chunk in the trace store
(`traces.store`), one `SpanExport` row, and the counts of the trace's `Trace` row (one UPDATE).
A trace's compaction and per-level, per-name aggregates (`SpanAggregate`) are computed when its
evaluation finishes (`traces.finishing`), not here, so an export costs one chunk write and a
few row writes.

Exactly once: an export that carries an id (`X-MLMS-Export`, see `predictors.tracing.delivery`)
is stored once per trace however often it arrives; each stored export is a `SpanExport` row
(the evaluation and attempt it counts for, its span count), which is what
`traces.actions.spans_stored` sums. Its row is unique per trace and id, so an export sent
again fails to insert it (the database refuses the second row, or holds it until the first
transaction ends); the export is then stored once more with each trace's row locked, skipping
the traces that hold it already. Who may write what, and the agent's claim: `traces.access`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from hub.errors import Forbidden
from hub.models import ApiToken
from traces import finishing, signals
from traces.access import Target, authorize_write
from traces.error_codes import TraceErrorCode
from traces.models import SpanExport, Trace
from traces.otlp import tables_by_trace
from traces.store import get_store


def ingest(
    token: ApiToken,
    message: Any,
    *,
    key: str = "",
    claim: str = "",
) -> int:
    """Store an export's spans (as `traces.otlp.decode` answers it, or an
    ExportTraceServiceRequest; authorized first: on any refusal nothing is stored); the number
    of spans it carried.

    `key` (`X-MLMS-Export`) identifies the export: one that a trace has stored already is not
    stored again (its sender did not get the first answer). `claim` (`X-MLMS-Claim`): see
    `traces.access.authorize_write`."""
    grouped = tables_by_trace(message)
    targets = authorize_write(token, grouped, claim=claim)
    try:
        _store(token, grouped, targets, key, again=False)
    except IntegrityError:
        if not key:
            raise
        # The export's `SpanExport` row exists already (the export was sent again): stored
        # again with each trace's row locked first, skipping the traces that have it.
        _store(token, grouped, targets, key, again=True)
    return sum(rows.num_rows for rows in grouped.values())


def _store(
    token: ApiToken, grouped: dict[str, pa.Table], targets: list[Target], key: str, *, again: bool
) -> None:
    """Per target, one `SpanExport` row, one chunk and the `Trace` row's counts, in one
    transaction (the chunks taken back if it does not commit). The first time (`again`
    false) an export's key is not looked for: the `SpanExport` row's uniqueness refuses it
    (IntegrityError) if stored already, and `ingest` stores `again`, looking."""
    store = get_store()
    # The chunks are written first, outside the transaction: with SQLite it holds the database's
    # one write lock, which other exports (the ingest processes) wait for meanwhile.
    written: dict[str, str] = {}
    try:
        for target in targets:
            written[target.trace_id] = store.add_chunk(target.trace_id, grouped[target.trace_id])
        with transaction.atomic():
            for target in targets:
                rows = grouped[target.trace_id]
                trace = target.trace
                if trace is None or again:
                    trace = _locked_trace(token, target)
                    if key and SpanExport.objects.filter(trace=trace, key=key).exists():
                        # Sent again after a lost answer: stored already.
                        store.remove_chunk(written.pop(target.trace_id))
                        continue
                _add_export(trace, target, key, rows.num_rows)
                _account(trace, target, rows)
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
        for handle in written.values():
            store.remove_chunk(handle)
        raise


def _add_export(trace: Trace, target: Target, key: str, spans: int) -> None:
    """The export's `SpanExport` row (IntegrityError when the trace has one of `key`). In SQL,
    as `_account`: the ORM's insert cost several times what the database took."""
    connection = connections[SpanExport.objects.db]
    quote = connection.ops.quote_name
    evaluation = target.evaluation
    values = {
        "trace": trace.pk,
        "evaluation": evaluation.pk if evaluation is not None else None,
        "attempt": target.attempt,
        "key": key,
        "spans": spans,
        "created_at": timezone.now(),
    }
    fields = [SpanExport._meta.get_field(name) for name in values]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(SpanExport._meta.db_table)} "  # noqa: S608
            f"({', '.join(quote(field.column) for field in fields)}) "  # type: ignore[union-attr]
            f"VALUES ({', '.join(['%s'] * len(fields))})",
            [
                field.get_db_prep_save(value, connection)  # type: ignore[union-attr]
                for field, value in zip(fields, values.values(), strict=True)
            ],
        )


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
        raise Forbidden(
            f"This token may not write spans into trace {target.trace_id}.",
            code=TraceErrorCode.NOT_WRITABLE,
        )
    return trace


def _account(trace: Trace, target: Target, rows: pa.Table) -> None:
    """The trace's counts and time bounds with `rows` added: one UPDATE, computed by the
    database from the row as it is (exports into one trace arriving together need no lock
    for it). Written in SQL: the ORM took twenty times as long to build this statement as the
    database took to run it, once per export."""
    start = pc.min(rows["start_ns"]).as_py()
    end = pc.max(rows["end_ns"]).as_py()
    connection = connections[Trace.objects.db]
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    values: list[Any] = [rows.num_rows, start, start, end, end, now]
    assignments = [
        "span_count = span_count + %s",
        "chunk_count = chunk_count + 1",
        "start_ns = CASE WHEN start_ns IS NULL OR start_ns > %s THEN %s ELSE start_ns END",
        "end_ns = CASE WHEN end_ns IS NULL OR end_ns < %s THEN %s ELSE end_ns END",
        "updated_at = %s",
    ]
    if target.evaluation is not None and trace.evaluation_id is None:
        assignments += ["evaluation_id = %s", "owner_id = %s"]
        values += [target.evaluation.pk, target.evaluation.user_id]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {connection.ops.quote_name(Trace._meta.db_table)} "  # noqa: S608
            f"SET {', '.join(assignments)} WHERE id = %s",
            [*values, trace.pk],
        )
