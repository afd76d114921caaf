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
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from hub.api.parsers import MAX_JSON_DEPTH, too_deep_message
from predictors.protocol import COUNTER_LEVEL, COUNTER_OP_TYPE, Attr
from traces.errors import TraceError

__all__ = [
    "INT64_MAX",
    "NUL_REPLACEMENT",
    "clean",
    "counter_values",
    "decode",
    "hex_ids",
    "key_values",
    "load_attributes",
    "rows_by_trace",
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


def rows_by_trace(
    message: trace_service_pb2.ExportTraceServiceRequest,
) -> dict[str, list[dict[str, Any]]]:
    """The export's spans as table rows (`traces.store.SCHEMA`), grouped by trace id (hex)."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for resource_spans in message.resource_spans:
        resource = json.dumps(_attributes(resource_spans.resource.attributes), sort_keys=True)
        for scope_spans in resource_spans.scope_spans:
            scope = clean(scope_spans.scope.name)
            for span in scope_spans.spans:
                attributes = _attributes(span.attributes)
                trace_id = span.trace_id.hex()
                grouped[trace_id].append(
                    {
                        "trace_id": trace_id,
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": clean(span.name),
                        "kind": int(span.kind),
                        "start_ns": int(span.start_time_unix_nano),
                        "end_ns": int(span.end_time_unix_nano),
                        "attributes": json.dumps(attributes, sort_keys=True),
                        "resource": resource,
                        "scope": scope,
                        "status": int(span.status.code),
                        "status_message": clean(span.status.message),
                        "level": _text(attributes.get(Attr.LEVEL)),
                        "layer_index": _int(attributes.get(Attr.LAYER_INDEX)),
                        "layer_name": _text(attributes.get(Attr.LAYER_NAME)),
                        "op_type": _text(attributes.get(Attr.OP_TYPE)),
                        "device": _text(attributes.get(Attr.DEVICE)),
                        "counters": counter_values(attributes),
                    }
                )
    return grouped


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
