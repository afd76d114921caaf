"""OTLP in and out: decoding an export (protobuf or JSON) into the stored rows, and the stored
attributes back into OTLP values.

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

A hardware counter sample is a span of level `hardware` and op type `counter` whose numeric
attributes `mlms.counter.<name>` (the name ends in its unit: `gpu.power_w`) are the values read
at its start; its row carries them (`counters`), so that they are read without parsing
attributes.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from hub.api.parsers import MAX_JSON_DEPTH, too_deep_message
from predictors.protocol import COUNTER_LEVEL, COUNTER_OP_TYPE, Attr
from traces.errors import TraceError
from traces.store import COUNTERS, SCHEMA

__all__ = [
    "INT64_MAX",
    "NUL_REPLACEMENT",
    "clean",
    "counter_values",
    "decode",
    "hex_ids",
    "key_values",
    "load_attributes",
    "tables_by_trace",
]

# The largest value of the integer columns: span times (Unix ns), layer indexes.
INT64_MAX = 2**63 - 1
# What a NUL character becomes (PostgreSQL text, and so our JSON and aggregate columns, cannot
# hold one).
NUL_REPLACEMENT = "\ufffd"
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


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
            if key in _ID_KEYS and isinstance(value, str):
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
        if field is None or field.message_type is None:
            continue
        where = f"{path}.{key}" if path else key
        if value is None:
            kind = "a JSON array" if field.is_repeated else "a JSON object"
            raise TraceError(400, f"{where} must be {kind}, not null.", where)
        if field.is_repeated:
            if not isinstance(value, list):
                raise TraceError(400, f"{where} must be a JSON array.", where)
            for index, item in enumerate(value):
                _check_json_shape(item, field.message_type, f"{where}.{index}")
        else:
            _check_json_shape(value, field.message_type, where)


# --- Rows -------------------------------------------------------------------------------------


def clean(text: str) -> str:
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
        return clean(value.string_value)
    if kind == "double_value" and not math.isfinite(value.double_value):
        # Strings, with the names OTLP JSON (protobuf's JSON mapping) gives these numbers.
        number = value.double_value
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    return getattr(value, kind)


def _attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {clean(pair.key): _value(pair.value) for pair in pairs}


def load_attributes(text: str | None) -> dict[str, Any]:
    """Stored attributes (or resource) JSON. Chunks written before NaN and ±Infinity were
    stored as strings may hold them as bare JSON constants: those come back as those strings
    too, so that no read answers a number strict JSON cannot carry."""
    result: dict[str, Any] = json.loads(text or "{}", parse_constant=str)
    return result


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    """`value` as a signed 64-bit integer (the column's type), else None."""
    try:
        number = None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number is not None and -INT64_MAX - 1 <= number <= INT64_MAX else None


def counter_values(attributes: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A counter span's `mlms.counter.<name>` values (finite numbers only), else None."""
    if (
        attributes.get(Attr.LEVEL) != COUNTER_LEVEL
        or attributes.get(Attr.OP_TYPE) != COUNTER_OP_TYPE
    ):
        return None
    prefix = Attr.COUNTER_PREFIX
    values = []
    for key, value in sorted(attributes.items()):
        if (
            key.startswith(prefix)
            and len(key) > len(prefix)
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
        ):
            values.append({"name": key[len(prefix) :], "value": float(value)})
    return values


def _hex(ids: list[bytes], width: int) -> pa.Array:
    """Ids (each `width` bytes, or empty) as lowercase hex strings, without a Python string
    per id: one join, one hex, and offsets."""
    lengths = np.fromiter((len(i) for i in ids), dtype=np.int32, count=len(ids))
    data = b"".join(ids).hex().encode("ascii")
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(lengths * 2, out=offsets[1:])
    return pa.StringArray.from_buffers(len(ids), pa.py_buffer(offsets), pa.py_buffer(data))


def _json_column(texts: list[bytes]) -> pa.Array:
    """orjson's outputs as one string column (NUL-free: orjson escapes it as `\\u0000`,
    which `_clean_json` then replaces)."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(texts)
    column = pa.LargeStringArray.from_buffers(
        len(texts), pa.py_buffer(offsets), pa.py_buffer(data)
    ).cast(pa.string())
    return _clean_json(column)


def _clean_json(column: pa.Array) -> pa.Array:
    """JSON texts whose strings held a NUL (escaped `\\u0000`) written again with it
    replaced; found vectorised, rewritten one by one (they are rare)."""
    suspect = pc.match_substring(column, "\\u0000")
    if not pc.any(suspect).as_py():
        return column
    texts = column.to_pylist()
    for index in pc.indices_nonzero(suspect).to_pylist():
        texts[index] = json.dumps(_cleaned(json.loads(texts[index])), sort_keys=True)
    return pa.array(texts, pa.string())


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list):
        return [_cleaned(item) for item in value]
    if isinstance(value, dict):
        return {clean(key): _cleaned(item) for key, item in value.items()}
    return value


def _fast_attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    """`_attributes`, with scalar values read inline (the common case) and NULs left for
    `_clean_json` to find."""
    out: dict[str, Any] = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        if kind == "string_value":
            out[pair.key] = value.string_value
        elif kind == "int_value":
            out[pair.key] = value.int_value
        elif kind == "double_value" and math.isfinite(value.double_value):
            out[pair.key] = value.double_value
        elif kind == "bool_value":
            out[pair.key] = value.bool_value
        else:
            out[pair.key] = _value(value)
    return out


class _Columns:
    """The stored columns of an export's spans, filled span by span with as little Python per
    span as it takes: plain values appended to lists, ids and attribute texts joined and
    converted once per export."""

    def __init__(self) -> None:
        self.trace_id: list[bytes] = []
        self.span_id: list[bytes] = []
        self.parent_span_id: list[bytes] = []
        self.name: list[str] = []
        self.kind: list[int] = []
        self.start_ns: list[int] = []
        self.end_ns: list[int] = []
        self.attributes: list[bytes] = []
        self.resource: list[str] = []
        self.scope: list[str] = []
        self.status: list[int] = []
        self.status_message: list[str] = []
        self.level: list[str | None] = []
        self.layer_index: list[int | None] = []
        self.layer_name: list[str | None] = []
        self.op_type: list[str | None] = []
        self.device: list[str | None] = []
        self.counters: list[list[dict[str, Any]] | None] = []
        self.batch_size: list[int | None] = []
        # Where the spans were in the export: per scope, its resource's and its own number and
        # its first span's position among all (found again only for an error's path).
        self.scopes: list[tuple[int, int, int]] = []

    def add(self, message: trace_service_pb2.ExportTraceServiceRequest) -> None:
        level_key, index_key, name_key = Attr.LEVEL, Attr.LAYER_INDEX, Attr.LAYER_NAME
        op_key, device_key, batch_key = Attr.OP_TYPE, Attr.DEVICE, Attr.BATCH_SIZE
        dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS
        for r, resource_spans in enumerate(message.resource_spans):
            resource = json.dumps(_attributes(resource_spans.resource.attributes), sort_keys=True)
            for s, scope_spans in enumerate(resource_spans.scope_spans):
                scope = clean(scope_spans.scope.name)
                spans = scope_spans.spans
                count = len(spans)
                self.resource.extend([resource] * count)
                self.scope.extend([scope] * count)
                self.scopes.append((r, s, len(self.trace_id)))
                for span in spans:
                    self.trace_id.append(span.trace_id)
                    self.span_id.append(span.span_id)
                    self.parent_span_id.append(span.parent_span_id)
                    self.name.append(span.name)
                    self.kind.append(span.kind)
                    self.start_ns.append(span.start_time_unix_nano)
                    self.end_ns.append(span.end_time_unix_nano)
                    status = span.status
                    self.status.append(status.code)
                    self.status_message.append(status.message)
                    attributes = _fast_attributes(span.attributes)
                    self.attributes.append(dumps(attributes, option=sort))
                    level = attributes.get(level_key)
                    op_type = attributes.get(op_key)
                    self.level.append(None if level is None else str(level))
                    self.layer_index.append(_int(attributes.get(index_key)))
                    self.layer_name.append(_text(attributes.get(name_key)))
                    self.op_type.append(None if op_type is None else str(op_type))
                    self.device.append(_text(attributes.get(device_key)))
                    self.batch_size.append(_int(attributes.get(batch_key)))
                    self.counters.append(
                        counter_values(attributes)
                        if level == COUNTER_LEVEL and op_type == COUNTER_OP_TYPE
                        else None
                    )

    def _refuse(self, bad: np.ndarray, field: str, message: str) -> None:
        if bad.any():
            position = int(np.argmax(bad))
            r, s, first = next(scope for scope in reversed(self.scopes) if scope[2] <= position)
            path = f"resourceSpans.{r}.scopeSpans.{s}.spans.{position - first}.{field}"
            raise TraceError(400, message, path)

    def check(self) -> None:
        """TraceError(400) naming the first span field that cannot be stored."""
        if not self.trace_id:
            return
        trace_length = np.fromiter(map(len, self.trace_id), dtype=np.int32)
        self._refuse(
            (trace_length != 16) | np.fromiter((not any(i) for i in self.trace_id), dtype=bool),
            "traceId",
            "A span's trace id must be 16 bytes, not all zero.",
        )
        span_length = np.fromiter(map(len, self.span_id), dtype=np.int32)
        self._refuse(
            (span_length != 8) | np.fromiter((not any(i) for i in self.span_id), dtype=bool),
            "spanId",
            "A span's span id must be 8 bytes, not all zero.",
        )
        parent_length = np.fromiter(map(len, self.parent_span_id), dtype=np.int32)
        self._refuse(
            (parent_length != 0) & (parent_length != 8),
            "parentSpanId",
            "A span's parent span id must be 8 bytes.",
        )
        starts = np.array(self.start_ns, dtype=np.uint64)
        ends = np.array(self.end_ns, dtype=np.uint64)
        for field, values in (("startTimeUnixNano", starts), ("endTimeUnixNano", ends)):
            over = values > INT64_MAX
            if over.any():
                value = int(values[int(np.argmax(over))])
                self._refuse(
                    over,
                    field,
                    f"A span's {field} must be below 2^63 (Unix nanoseconds before the year "
                    f"2262), not {value}.",
                )
        backwards = ends < starts
        if backwards.any():
            at = int(np.argmax(backwards))
            self._refuse(
                backwards,
                "endTimeUnixNano",
                f"A span's endTimeUnixNano ({int(ends[at])}) is before its "
                f"startTimeUnixNano ({int(starts[at])}).",
            )

    def table(self) -> pa.Table:
        """Every span, in `traces.store.SCHEMA`."""
        n = len(self.trace_id)
        strings = [
            pc.replace_substring(pa.array(values, pa.string()), "\x00", NUL_REPLACEMENT)
            for values in (self.name, self.status_message)
        ]
        columns = {
            "trace_id": _hex(self.trace_id, 16),
            "span_id": _hex(self.span_id, 8),
            "parent_span_id": _hex(self.parent_span_id, 8),
            "name": strings[0],
            "kind": pa.array(self.kind, pa.int32()),
            "start_ns": pa.array(np.array(self.start_ns, dtype=np.uint64).astype(np.int64)),
            "end_ns": pa.array(np.array(self.end_ns, dtype=np.uint64).astype(np.int64)),
            "attributes": _json_column(self.attributes) if n else pa.array([], pa.string()),
            "resource": pa.array(self.resource, pa.string()),
            "scope": pa.array(self.scope, pa.string()),
            "status": pa.array(self.status, pa.int32()),
            "status_message": strings[1],
        }
        for name in ("level", "layer_name", "op_type", "device"):
            values = pa.array(getattr(self, name), pa.string())
            columns[name] = pc.replace_substring(values, "\x00", NUL_REPLACEMENT)
        columns["layer_index"] = pa.array(self.layer_index, pa.int64())
        columns["batch_size"] = pa.array(self.batch_size, pa.int64())
        columns["counters"] = pa.array(self.counters, COUNTERS)
        return pa.table(columns).select(SCHEMA.names).cast(SCHEMA)


def tables_by_trace(message: trace_service_pb2.ExportTraceServiceRequest) -> dict[str, pa.Table]:
    """The export's spans as tables of the stored columns (`traces.store.SCHEMA`), one per
    trace id (hex); TraceError(400) naming the first span that cannot be stored."""
    columns = _Columns()
    columns.add(message)
    columns.check()
    table = columns.table()
    if not table.num_rows:
        return {}
    ids = pc.unique(table["trace_id"]).to_pylist()
    if len(ids) == 1:
        return {ids[0]: table}
    return {trace_id: table.filter(pc.equal(table["trace_id"], trace_id)) for trace_id in ids}


# --- Encoding ---------------------------------------------------------------------------------


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
        out.kvlist_value.values.extend(key_values(value))
    return out


def key_values(attributes: dict[str, Any]) -> list[common_pb2.KeyValue]:
    """Stored attributes as OTLP key-value pairs."""
    return [common_pb2.KeyValue(key=key, value=_any_value(v)) for key, v in attributes.items()]


def hex_ids(node: Any) -> Any:
    """OTLP JSON from protobuf's JSON mapping (ids in base64) with its ids in hex, as OTLP JSON
    writes them."""
    if isinstance(node, dict):
        return {
            key: (
                base64.b64decode(value).hex()
                if key in _ID_KEYS and isinstance(value, str)
                else hex_ids(value)
            )
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [hex_ids(item) for item in node]
    return node
