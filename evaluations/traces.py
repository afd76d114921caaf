"""Spans: OTLP decoding, who may write and read a trace, columnar storage, exports.

Each accepted export writes, per trace id it carries, one Parquet chunk (zstd) at
`traces/<trace_id>/<chunk>.parquet` in the artifact store, atomically, and updates the trace's
`Trace` row. Per-level, per-name aggregates (`SpanAggregate`) are recomputed lazily, when read
after new chunks arrived, so an export costs one file write and one row update.

Malformed spans: an export is refused (400, nothing stored) when a span's
`startTimeUnixNano`/`endTimeUnixNano` is 2^63 or more (Parquet and the database keep signed
64-bit nanoseconds; 2^63 ns is the year 2262) or ends before it starts, and when an OTLP JSON
body nests deeper than `MAX_JSON_DEPTH` (protobuf bodies have protobuf's own limit). Two things
are cleaned rather than refused, so that one odd attribute does not cost a client its whole
batch, and every read of a stored span (timeline, layers, Chrome and OTLP exports) still
answers: a double attribute value that is NaN or ±Infinity (strict JSON has no such number) is
stored as the string "NaN", "Infinity" or "-Infinity", the names the OTLP JSON encoding gives
them; a NUL character (PostgreSQL text cannot hold one) in a span name, scope name, status
message, attribute key or string value is replaced by U+FFFD.

Exactly once: an export that carries an id (`X-MLMS-Export`, see `predictors.span_delivery`)
is stored once per trace however often it arrives; each stored export is a `SpanExport` row
(the evaluation and attempt it counts for, its span count), which is what `spans_stored`
sums. An export that carries an agent's claim (`X-MLMS-Claim`) is refused (409) once the hub
has given the job to another attempt, so an evaluation's spans are those of the attempt that
produced its result.

Authorization: a trace id that belongs to an evaluation is written by the evaluation's user
(token scope `write` or `evaluate`) or by an agent token whose host claimed that evaluation; a
trace id of no evaluation belongs to the user whose token first wrote into it. Reads follow the
evaluation's visibility, or the owner (and staff) for a free-standing trace.
"""

from __future__ import annotations

import base64
import io
import json
import math
import secrets
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Sum
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from evaluations import events, trace_store
from evaluations.models import Evaluation
from evaluations.trace_models import SpanAggregate, SpanExport, Trace
from evaluations.trace_store import (
    COUNTER_LEVEL,
    COUNTER_OP_TYPE,
    SCHEMA,
    TRACE_ID,
    chunk_folder,
    read_table,
)
from hub import storage
from hub.api.parsers import MAX_JSON_DEPTH, too_deep_message
from hub.models import ApiToken
from predictors.protocol import SPAN_LEVELS, Attr

USER_SCOPES = frozenset({"write", "evaluate"})
WRITE_SCOPES = USER_SCOPES | {"agent"}
# The span levels, outermost first (DESIGN.md, "Tracing"); each gets its own Chrome thread.
LEVELS = SPAN_LEVELS
# A hardware counter sample: a span of level `hardware` and op type `counter` whose numeric
# attributes `mlms.counter.<name>` (the name ends in its unit: `gpu.power_w`) are the values read
# at its start; it is stored with them, so that they are read without parsing attributes.
COUNTER_PREFIX = Attr.COUNTER_PREFIX
# The largest value of the integer columns: span times (Unix ns), layer indexes.
INT64_MAX = 2**63 - 1
# What a NUL character becomes (PostgreSQL text, and so our JSON and aggregate columns, cannot
# hold one).
NUL_REPLACEMENT = "\ufffd"


class TraceError(Exception):
    """A refused export: `status` is the HTTP status to answer, `path` the field at fault in
    OTLP JSON's names ("" for the body as a whole)."""

    def __init__(self, status: int, message: str, path: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.path = path


# --- Decoding ---------------------------------------------------------------------------------


def _hex_ids_to_base64(node: Any, depth: int = 1) -> None:
    """OTLP JSON writes trace and span ids in hex; protobuf's JSON mapping expects base64.
    Refuses (400) a body nesting deeper than MAX_JSON_DEPTH on the way."""
    if not isinstance(node, dict | list):
        return
    if depth > MAX_JSON_DEPTH:
        raise TraceError(400, too_deep_message())
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError:
                    raise TraceError(400, f"{key} {value!r} is not hexadecimal.") from None
            else:
                _hex_ids_to_base64(value, depth + 1)
    else:
        for item in node:
            _hex_ids_to_base64(item, depth + 1)


def decode(body: bytes, content_type: str) -> trace_service_pb2.ExportTraceServiceRequest:
    """An ExportTraceServiceRequest from an OTLP/HTTP body (protobuf or JSON)."""
    message = trace_service_pb2.ExportTraceServiceRequest()
    if content_type == "application/x-protobuf":
        try:
            message.ParseFromString(body)
        except (DecodeError, RuntimeError) as error:
            raise TraceError(400, f"The body is not an OTLP protobuf export: {error}") from None
    elif content_type == "application/json":
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise TraceError(400, f"The body is not JSON: {error}") from None
        except RecursionError:
            raise TraceError(400, too_deep_message()) from None
        if not isinstance(data, dict):
            raise TraceError(400, "The body must be a JSON object (an OTLP export).")
        _hex_ids_to_base64(data)  # refuses too deep a body first
        _check_json_shape(data, message.DESCRIPTOR, "")
        try:
            json_format.ParseDict(data, message)
        except json_format.ParseError as error:
            raise TraceError(400, f"The body is not an OTLP JSON export: {error}") from None
    else:
        raise TraceError(
            415, "Send OTLP as application/x-protobuf or application/json."
        )  # pragma: no cover - the view checks first
    for r, resource_spans in enumerate(message.resource_spans):
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for index, span in enumerate(scope_spans.spans):
                _check_span(span, f"resourceSpans.{r}.scopeSpans.{s}.spans.{index}")
    return message


def _check_json_shape(node: Any, descriptor: Any, path: str) -> None:
    """400 unless every message of the OTLP JSON `node` is a JSON object and every repeated
    message field an array of them (protobuf's own parser takes `[]` for a message)."""
    if not isinstance(node, dict):
        where = path or "the body"
        raise TraceError(400, f"{where} must be a JSON object (an OTLP message).", path)
    fields = {f.json_name: f for f in descriptor.fields} | {f.name: f for f in descriptor.fields}
    for key, value in node.items():
        field = fields.get(key)
        if field is None or field.message_type is None or value is None:
            continue
        where = f"{path}.{key}" if path else key
        if field.is_repeated:
            if not isinstance(value, list):
                raise TraceError(400, f"{where} must be a JSON array.", where)
            for index, item in enumerate(value):
                _check_json_shape(item, field.message_type, f"{where}.{index}")
        else:
            _check_json_shape(value, field.message_type, where)


def _check_span(span: trace_pb2.Span, path: str) -> None:
    """TraceError(400) naming the first field of `span` (at `path`) that cannot be stored."""
    if len(span.trace_id) != 16 or not any(span.trace_id):
        raise TraceError(
            400, "A span's trace id must be 16 bytes, not all zero.", f"{path}.traceId"
        )
    if len(span.span_id) != 8 or not any(span.span_id):
        raise TraceError(400, "A span's span id must be 8 bytes, not all zero.", f"{path}.spanId")
    if span.parent_span_id and len(span.parent_span_id) != 8:
        raise TraceError(400, "A span's parent span id must be 8 bytes.", f"{path}.parentSpanId")
    for field, value in (
        ("startTimeUnixNano", span.start_time_unix_nano),
        ("endTimeUnixNano", span.end_time_unix_nano),
    ):
        if value > INT64_MAX:
            raise TraceError(
                400,
                f"A span's {field} must be below 2^63 (Unix nanoseconds before the year 2262), "
                f"not {value}.",
                f"{path}.{field}",
            )
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise TraceError(
            400,
            f"A span's endTimeUnixNano ({span.end_time_unix_nano}) is before its "
            f"startTimeUnixNano ({span.start_time_unix_nano}).",
            f"{path}.endTimeUnixNano",
        )


def _clean(text: str) -> str:
    """`text` storable anywhere: NUL characters replaced (PostgreSQL text cannot hold them)."""
    return text.replace("\x00", NUL_REPLACEMENT) if "\x00" in text else text


def _value(value: common_pb2.AnyValue) -> Any:
    """An attribute value as stored: strict JSON (NaN and ±Infinity as strings), no NULs."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind == "string_value":
        return _clean(value.string_value)
    if kind == "double_value" and not math.isfinite(value.double_value):
        # Strings, with the names OTLP JSON (protobuf's JSON mapping) gives these numbers.
        number = value.double_value
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    return getattr(value, kind)


def _attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {_clean(pair.key): _value(pair.value) for pair in pairs}


def load_attributes(text: str | None) -> dict[str, Any]:
    """Stored attributes (or resource) JSON. Chunks written before NaN and ±Infinity were
    stored as strings may hold them as bare JSON constants: those come back as those strings
    too, so that no read answers a number strict JSON cannot carry."""
    result: dict[str, Any] = json.loads(text or "{}", parse_constant=str)
    return result


def _any_value(value: Any) -> common_pb2.AnyValue:
    out = common_pb2.AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, list):
        out.array_value.values.extend(_any_value(item) for item in value)
    elif isinstance(value, dict):
        out.kvlist_value.values.extend(_key_values(value))
    return out


def _key_values(attributes: dict[str, Any]) -> list[common_pb2.KeyValue]:
    return [common_pb2.KeyValue(key=key, value=_any_value(v)) for key, v in attributes.items()]


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    """`value` as a signed 64-bit integer (the column's type), else None."""
    try:
        number = None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number is not None and -INT64_MAX - 1 <= number <= INT64_MAX else None


def _counter_values(attributes: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A counter span's `mlms.counter.<name>` values (finite numbers only), else None."""
    if (
        attributes.get(Attr.LEVEL) != COUNTER_LEVEL
        or attributes.get(Attr.OP_TYPE) != COUNTER_OP_TYPE
    ):
        return None
    values = []
    for key, value in sorted(attributes.items()):
        if (
            key.startswith(COUNTER_PREFIX)
            and len(key) > len(COUNTER_PREFIX)
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
        ):
            values.append({"name": key[len(COUNTER_PREFIX) :], "value": float(value)})
    return values


def rows_by_trace(
    message: trace_service_pb2.ExportTraceServiceRequest,
) -> dict[str, list[dict[str, Any]]]:
    """The export's spans as table rows, grouped by trace id (hex)."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for resource_spans in message.resource_spans:
        resource = json.dumps(_attributes(resource_spans.resource.attributes), sort_keys=True)
        for scope_spans in resource_spans.scope_spans:
            scope = _clean(scope_spans.scope.name)
            for span in scope_spans.spans:
                attributes = _attributes(span.attributes)
                trace_id = span.trace_id.hex()
                grouped[trace_id].append(
                    {
                        "trace_id": trace_id,
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": _clean(span.name),
                        "kind": int(span.kind),
                        "start_ns": int(span.start_time_unix_nano),
                        "end_ns": int(span.end_time_unix_nano),
                        "attributes": json.dumps(attributes, sort_keys=True),
                        "resource": resource,
                        "scope": scope,
                        "status": int(span.status.code),
                        "status_message": _clean(span.status.message),
                        "level": _text(attributes.get(Attr.LEVEL)),
                        "layer_index": _int(attributes.get(Attr.LAYER_INDEX)),
                        "layer_name": _text(attributes.get(Attr.LAYER_NAME)),
                        "op_type": _text(attributes.get(Attr.OP_TYPE)),
                        "device": _text(attributes.get(Attr.DEVICE)),
                        "counters": _counter_values(attributes),
                    }
                )
    return grouped


# --- Who may write and read -------------------------------------------------------------------


@dataclass
class Target:
    trace_id: str
    evaluation: Evaluation | None
    trace: Trace | None


def _evaluation_of(trace_id: str, trace: Trace | None) -> Evaluation | None:
    if trace is not None and trace.evaluation_id is not None:
        return trace.evaluation
    return Evaluation.objects.select_related("host").filter(trace_id=trace_id).first()


def authorize_write(token: ApiToken, trace_ids: Iterable[str], *, claim: str = "") -> list[Target]:
    """The traces `token` may write into, or TraceError(403) naming the first it may not.

    With `claim` (an agent's `X-MLMS-Claim`), an evaluation's trace takes the spans only for the
    evaluation that claim currently holds: TraceError(409) when the hub has given the job to
    another attempt since."""
    scopes = set(token.scopes)
    targets = []
    for trace_id in sorted(trace_ids):
        trace = Trace.objects.select_related("evaluation__host").filter(trace_id=trace_id).first()
        evaluation = _evaluation_of(trace_id, trace)
        if evaluation is not None:
            # Evaluations launched with one `traceparent` share its trace id (`hosts: all`
            # launches several): the token may write when it may write into any of them, and
            # the spans are counted for the one its claim holds, else the first of them.
            sharing = Evaluation.objects.select_related("host").filter(trace_id=trace_id)
            writable = [e for e in [evaluation, *sharing] if _may_write(token, scopes, e)]
            allowed = bool(writable)
            if writable:
                evaluation = writable[0]
            if writable and claim:
                current = [e for e in writable if e.claim == claim]
                if not current:
                    raise TraceError(
                        409,
                        f"Claim {claim} is no longer current for the evaluation of trace "
                        f"{trace_id}: the hub gave the job to another attempt, whose spans "
                        "replace these.",
                    )
                evaluation = current[0]
        elif trace is not None:
            allowed = bool(scopes & USER_SCOPES) and trace.owner_id == token.user_id
        else:
            allowed = bool(scopes & USER_SCOPES)
        if not allowed:
            raise TraceError(403, f"This token may not write spans into trace {trace_id}.")
        targets.append(Target(trace_id, evaluation, trace))
    return targets


def _may_write(token: ApiToken, scopes: set[str], evaluation: Evaluation) -> bool:
    return bool(scopes & USER_SCOPES and evaluation.user_id == token.user_id) or (
        "agent" in scopes and evaluation.host is not None and evaluation.host.token_id == token.pk
    )


def readable_trace(
    user: AbstractBaseUser | AnonymousUser, trace_id: str
) -> tuple[Trace | None, Evaluation | None] | None:
    """(the Trace row if any, its evaluation if any) when `user` may read the trace; else None."""
    if not TRACE_ID.match(trace_id) or not user.is_authenticated:
        return None
    trace = Trace.objects.filter(trace_id=trace_id).first()
    evaluation = _evaluation_of(trace_id, trace)
    if evaluation is not None:
        if not Evaluation.objects.visible_to(user).filter(pk=evaluation.pk).exists():
            return None
        return trace, evaluation
    if trace is None:
        return None
    if trace.owner_id != user.pk and not user.is_staff:  # type: ignore[union-attr]
        return None
    return trace, None


# --- Storage ----------------------------------------------------------------------------------


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


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
    `authorize_write`."""
    grouped = rows_by_trace(message)
    targets = authorize_write(token, grouped, claim=claim)
    written: list[str] = []
    try:
        with transaction.atomic():
            for target in targets:
                rows = grouped[target.trace_id]
                trace = _locked_trace(token, target)
                if key and SpanExport.objects.filter(trace=trace, key=key).exists():
                    continue  # sent again after a lost answer: stored already
                path = f"{chunk_folder(target.trace_id)}/{secrets.token_hex(8)}.parquet"
                storage.write(path, [_parquet(rows)])
                written.append(path)
                _account(trace, target, rows)
                SpanExport.objects.create(
                    trace=trace,
                    evaluation=target.evaluation,
                    attempt=target.evaluation.attempts if target.evaluation is not None else 0,
                    key=key,
                    spans=len(rows),
                )
                if target.evaluation is not None:
                    events.spans_received(target.evaluation, _levels(rows))
    except BaseException:
        for path in written:
            storage.remove(path)
        raise
    return sum(len(rows) for rows in grouped.values())


def spans_stored(evaluation: Evaluation) -> int:
    """How many spans the hub stored for the evaluation's current attempt."""
    total = SpanExport.objects.filter(evaluation=evaluation, attempt=evaluation.attempts).aggregate(
        total=Sum("spans")
    )["total"]
    return int(total or 0)


def _levels(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many of `rows` each level recorded (`""`: spans without `mlms.level`)."""
    levels: dict[str, int] = defaultdict(int)
    for row in rows:
        levels[row["level"] or ""] += 1
    return dict(levels)


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


def _account(trace: Trace, target: Target, rows: list[dict[str, Any]]) -> None:
    start = min(row["start_ns"] for row in rows)
    end = max(row["end_ns"] for row in rows)
    trace.span_count += len(rows)
    trace.chunk_count += 1
    trace.start_ns = start if trace.start_ns is None else min(trace.start_ns, start)
    trace.end_ns = end if trace.end_ns is None else max(trace.end_ns, end)
    if target.evaluation is not None and trace.evaluation_id is None:
        trace.evaluation = target.evaluation
        trace.owner_id = target.evaluation.user_id
    trace.save()


def span_json(row: dict[str, Any]) -> dict[str, Any]:
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


# --- Exports ----------------------------------------------------------------------------------


def _tid(level: str | None) -> int:
    return LEVELS.index(level) + 1 if level in LEVELS else 0


def _is_counter(row: dict[str, Any]) -> bool:
    return row["level"] == COUNTER_LEVEL and row["op_type"] == COUNTER_OP_TYPE


def chrome(trace_id: str) -> dict[str, Any]:
    """Chrome trace JSON (opens in Perfetto and chrome://tracing): one thread per level; each
    hardware counter a counter event (`ph: "C"`) per sample, so that it gets its own track."""
    rows = read_table(trace_id).sort_by([("start_ns", "ascending")]).to_pylist()
    events: list[dict[str, Any]] = []
    used = sorted({_tid(row["level"]) for row in rows if not _is_counter(row)})
    for tid in used:
        name = LEVELS[tid - 1] if tid else "other"
        events.append(
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}}
        )
    devices: dict[str, set[str | None]] = defaultdict(set)
    for row in rows:
        if _is_counter(row):
            for counter in row["counters"] or ():
                devices[counter["name"]].add(row["device"])
    for row in rows:
        if _is_counter(row):
            for counter in row["counters"] or ():
                key = _counter_key(counter["name"], row["device"], len(devices[counter["name"]]))
                events.append(
                    {
                        "name": key,
                        "cat": COUNTER_LEVEL,
                        "ph": "C",
                        "ts": row["start_ns"] / 1000,
                        "pid": 1,
                        "args": {key: counter["value"]},
                    }
                )
            continue
        args = load_attributes(row["attributes"])
        args.update(span_id=row["span_id"], parent_span_id=row["parent_span_id"] or None)
        events.append(
            {
                "name": row["name"],
                "cat": row["level"] or "other",
                "ph": "X",
                "ts": row["start_ns"] / 1000,
                "dur": max(row["end_ns"] - row["start_ns"], 0) / 1000,
                "pid": 1,
                "tid": _tid(row["level"]),
                "args": args,
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"trace_id": trace_id}}


def _hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: (
                base64.b64decode(value).hex()
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str)
                else _hex_ids(value)
            )
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(item) for item in node]
    return node


def otlp(trace_id: str) -> dict[str, Any]:
    """The trace as OTLP JSON (an ExportTraceServiceRequest, ids in hex)."""
    rows = read_table(trace_id).sort_by([("start_ns", "ascending")]).to_pylist()
    message = trace_service_pb2.ExportTraceServiceRequest()
    groups: dict[tuple[str, str], trace_pb2.ScopeSpans] = {}
    resources: dict[str, trace_pb2.ResourceSpans] = {}
    for row in rows:
        resource = row["resource"] or "{}"
        if resource not in resources:
            resources[resource] = message.resource_spans.add()
            resources[resource].resource.attributes.extend(_key_values(load_attributes(resource)))
        key = (resource, row["scope"] or "")
        if key not in groups:
            groups[key] = resources[resource].scope_spans.add()
            groups[key].scope.name = row["scope"] or ""
        span = groups[key].spans.add()
        span.trace_id = bytes.fromhex(row["trace_id"])
        span.span_id = bytes.fromhex(row["span_id"])
        if row["parent_span_id"]:
            span.parent_span_id = bytes.fromhex(row["parent_span_id"])
        span.name = row["name"]
        span.kind = row["kind"]  # type: ignore[assignment]
        span.start_time_unix_nano = row["start_ns"]
        span.end_time_unix_nano = row["end_ns"]
        span.attributes.extend(_key_values(load_attributes(row["attributes"])))
        span.status.code = row["status"]  # type: ignore[assignment]
        span.status.message = row["status_message"] or ""
    result: dict[str, Any] = _hex_ids(json_format.MessageToDict(message))
    return result


def _counter_key(name: str, device: str | None, devices: int) -> str:
    """A counter's key: its name, or `<name>@<device>` when several devices sampled it."""
    return name if devices <= 1 else f"{name}@{device or ''}"


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
    spans = trace_store.window(trace_id, start, end, max_spans)
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
    offsets = pc.cast(pc.subtract(samples["t"], start), pa.float64())
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


def kernels_by_layer(trace_id: str) -> dict[str, tuple[int, int]]:
    """{layer name: (how many kernel spans, their total ns)} of the kernels (op type `kernel`)
    correlated to a layer (`mlms.layer_name`)."""
    table = read_table(trace_id, ["op_type", "layer_name", "start_ns", "end_ns"])
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
    table = read_table(trace_id, ["name", "start_ns", "end_ns", "level", "layer_index", "op_type"])
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
                "level": _clean(row["level"])[:32],
                "name": _clean(row["name"])[:255],
                "op_type": _clean(row["op_type"])[:128],
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
