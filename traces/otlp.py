"""OTLP in and out: decoding an export (protobuf or JSON) into the stored rows, and the stored
attributes back into OTLP values.

Malformed spans: an export is refused (Invalid, nothing stored) when a span's
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
import itertools
import json
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from hub.api.parsers import MAX_JSON_DEPTH, too_deep_message
from hub.errors import Invalid
from predictors.protocol import COUNTER_LEVEL, COUNTER_OP_TYPE, Attr
from traces.error_codes import TraceErrorCode
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


# --- The export as the receiver parses it ------------------------------------------------------
#
# OTLP's messages as opentelemetry-proto defines them, copied into a package of our own with one
# difference: a span's attributes (KeyValue messages) and its status are read as their wire bytes
# (a message field and a bytes field are the same on the wire). Reading every attribute of every
# span through protobuf's Python objects was most of what ingest cost; kept as bytes, the
# attributes an export repeats (most of them: an agent's spans share their framework, level, op
# types, layer names, shapes) are decoded once (`_pairs`), and the stored columns are gathered
# from them with Arrow and NumPy rather than span by span.

_COLUMNAR_PACKAGE = "mlmodelscope.traces.columnar"
_OTLP_PACKAGE = ".opentelemetry.proto.trace.v1."


def _columnar_messages() -> tuple[Any, Any]:
    """The columnar ExportTraceServiceRequest and Span message classes."""
    pool = descriptor_pool.Default()
    name = "mlmodelscope/traces/columnar.proto"
    try:
        pool.FindFileByName(name)
    except KeyError:
        file = descriptor_pb2.FileDescriptorProto(
            name=name, package=_COLUMNAR_PACKAGE, syntax="proto3"
        )
        file.dependency.extend(d.name for d in trace_pb2.DESCRIPTOR.dependencies)
        for original in (
            trace_service_pb2.ExportTraceServiceRequest,
            trace_pb2.ResourceSpans,
            trace_pb2.ScopeSpans,
            trace_pb2.Span,
        ):
            copy = file.message_type.add()
            original.DESCRIPTOR.CopyToProto(copy)
            for message in (copy, *copy.nested_type):
                for field in message.field:
                    if (
                        message is copy
                        and original is trace_pb2.Span
                        and field.name
                        in (
                            "attributes",
                            "status",
                        )
                    ):
                        field.type = field.TYPE_BYTES
                        field.ClearField("type_name")
                    elif field.type_name.startswith(_OTLP_PACKAGE):
                        local = field.type_name.removeprefix(_OTLP_PACKAGE)
                        field.type_name = f".{_COLUMNAR_PACKAGE}.{local}"
            copy.name = original.DESCRIPTOR.name
        pool.AddSerializedFile(file.SerializeToString())
    export, span = (
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{_COLUMNAR_PACKAGE}.{message}")
        )
        for message in ("ExportTraceServiceRequest", "Span")
    )
    return export, span


_COLUMNAR_EXPORT, _COLUMNAR_SPAN = _columnar_messages()


# --- Decoding ---------------------------------------------------------------------------------


def _hex_ids_to_base64(node: Any, depth: int = 1) -> None:
    """OTLP JSON writes trace and span ids in hex; protobuf's JSON mapping expects base64.
    Refuses (Invalid) a body nesting deeper than MAX_JSON_DEPTH on the way."""
    if not isinstance(node, dict | list):
        return
    if depth > MAX_JSON_DEPTH:
        raise Invalid(too_deep_message(), code=TraceErrorCode.NOT_OTLP)
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError:
                    raise Invalid(
                        f"{key} {value!r} is not hexadecimal.", code=TraceErrorCode.NOT_OTLP
                    ) from None
            else:
                _hex_ids_to_base64(value, depth + 1)
    else:
        for item in node:
            _hex_ids_to_base64(item, depth + 1)


def decode(body: bytes, content_type: str) -> Any:
    """An OTLP/HTTP body (protobuf or JSON) parsed into the export's columnar messages
    (`_COLUMNAR_EXPORT`: an ExportTraceServiceRequest whose spans keep their attributes and
    status as wire bytes), which `tables_by_trace` reads."""
    if content_type == "application/x-protobuf":
        try:
            return _COLUMNAR_EXPORT.FromString(body)
        except (DecodeError, RuntimeError) as error:
            raise Invalid(
                f"The body is not an OTLP protobuf export: {error}", code=TraceErrorCode.NOT_OTLP
            ) from None
    message = trace_service_pb2.ExportTraceServiceRequest()
    if content_type == "application/json":
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise Invalid(f"The body is not JSON: {error}", code=TraceErrorCode.NOT_OTLP) from None
        except RecursionError:
            raise Invalid(too_deep_message(), code=TraceErrorCode.NOT_OTLP) from None
        if not isinstance(data, dict):
            raise Invalid(
                "The body must be a JSON object (an OTLP export).", code=TraceErrorCode.NOT_OTLP
            )
        _hex_ids_to_base64(data)  # refuses too deep a body first
        _check_json_shape(data, message.DESCRIPTOR, "")
        try:
            json_format.ParseDict(data, message)
        except (json_format.ParseError, OverflowError, ValueError) as error:
            # OverflowError: a double written as an integer past a double's range (protobuf
            # converts it with float()).
            raise Invalid(
                f"The body is not an OTLP JSON export: {error}", code=TraceErrorCode.NOT_OTLP
            ) from None
    else:
        raise Invalid(  # pragma: no cover - the view checks first
            "Send OTLP as application/x-protobuf or application/json.",
            code=TraceErrorCode.NOT_OTLP,
        )
    return _COLUMNAR_EXPORT.FromString(message.SerializeToString())


def _check_json_shape(node: Any, descriptor: Any, path: str) -> None:
    """Invalid unless every message of the OTLP JSON `node` is a JSON object and every repeated
    message field an array of them (protobuf's own parser takes `[]` for a message)."""
    if not isinstance(node, dict):
        where = path or "the body"
        raise Invalid(
            f"{where} must be a JSON object (an OTLP message).",
            path=path,
            code=TraceErrorCode.NOT_OTLP,
        )
    fields = {f.json_name: f for f in descriptor.fields} | {f.name: f for f in descriptor.fields}
    for key, value in node.items():
        field = fields.get(key)
        if field is None or field.message_type is None:
            continue
        where = f"{path}.{key}" if path else key
        if value is None:
            kind = "a JSON array" if field.is_repeated else "a JSON object"
            raise Invalid(
                f"{where} must be {kind}, not null.", path=where, code=TraceErrorCode.NOT_OTLP
            )
        if field.is_repeated:
            if not isinstance(value, list):
                raise Invalid(
                    f"{where} must be a JSON array.", path=where, code=TraceErrorCode.NOT_OTLP
                )
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
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    data = b"".join(ids).hex().encode("ascii")
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(lengths * 2, out=offsets[1:])
    return pa.StringArray.from_buffers(len(ids), pa.py_buffer(offsets), pa.py_buffer(data))


def _bad_ids(ids: list[bytes], widths: tuple[int, ...], nonzero: bool) -> np.ndarray:
    """Which ids are not `widths` bytes long (or, with `nonzero`, all zero bytes)."""
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    bad = lengths != widths[0]
    for width in widths[1:]:
        bad &= lengths != width
    if not nonzero:
        return bad
    if not bad.any():  # every id `widths[0]` bytes long: one array of them all
        bytes_of = np.frombuffer(b"".join(ids), dtype=np.uint8).reshape(len(ids), widths[0])
        return np.logical_not(bytes_of.any(axis=1))
    return bad | np.fromiter((not any(i) for i in ids), dtype=bool, count=len(ids))


class _Pair(NamedTuple):
    """An attribute (an OTLP KeyValue) as stored: its key, its `"key":value` JSON member, its
    value as text and as a 64-bit integer (for the columns read out of attributes: level,
    layer, op type, device, batch size), and its value."""

    key: str
    member: str
    text: str | None
    integer: int | None
    value: Any


# Attributes decoded so far, by their wire bytes (a KeyValue message each); emptied when it holds
# `_PAIRS_KEPT`, so that a stream of unique values costs no more than memory for that many. Only
# attributes of at most `_PAIR_CACHED_BYTES` are kept (names, op types, shapes: what repeats), so
# that the cache stays within a few tens of MiB whatever the values.
_PAIRS: dict[bytes, _Pair] = {}
_PAIRS_KEPT = 65_536
_PAIR_CACHED_BYTES = 256


def _pairs(raws: list[bytes]) -> list[_Pair]:
    """The attributes of an export (KeyValue wire bytes, each once) decoded, those not decoded
    before in one parse: as a span of an export of their own, so that protobuf checks them as it
    checks a span's attributes in a whole export (UTF-8, nesting depth)."""
    found = [_PAIRS.get(raw) for raw in raws]
    missing = [raw for raw, pair in zip(raws, found, strict=True) if pair is None]
    if not missing:
        return found  # type: ignore[return-value]
    span = _COLUMNAR_SPAN(attributes=missing)
    envelope = _COLUMNAR_EXPORT()
    envelope.resource_spans.add().scope_spans.add().spans.append(span)
    try:
        message = trace_service_pb2.ExportTraceServiceRequest.FromString(
            envelope.SerializeToString()
        )
    except (DecodeError, RuntimeError) as error:
        raise Invalid(
            f"The body is not an OTLP protobuf export: {error}", code=TraceErrorCode.NOT_OTLP
        ) from None
    decoded = iter(message.resource_spans[0].scope_spans[0].spans[0].attributes)
    if len(_PAIRS) + len(missing) > _PAIRS_KEPT:
        _PAIRS.clear()
    for index, pair in enumerate(found):
        if pair is None:
            key_value = next(decoded)
            key = clean(key_value.key)
            value = _value(key_value.value)
            member = orjson.dumps({key: value}, option=orjson.OPT_SORT_KEYS)[1:-1].decode()
            found[index] = _Pair(key, member, _text(value), _int(value), value)
            if len(raws[index]) <= _PAIR_CACHED_BYTES:
                _PAIRS[raws[index]] = found[index]  # type: ignore[assignment]
    return found  # type: ignore[return-value]


def _statuses(raws: list[bytes]) -> tuple[pa.Array, pa.Array]:
    """Spans' statuses (Status wire bytes): their codes and messages, each distinct status
    decoded once."""
    encoded = pc.dictionary_encode(pa.array(raws, pa.binary()))
    codes, messages = [], []
    for raw in encoded.dictionary.to_pylist():
        try:
            status = trace_pb2.Status.FromString(raw)
        except (DecodeError, RuntimeError) as error:
            raise Invalid(
                f"The body is not an OTLP protobuf export: {error}", code=TraceErrorCode.NOT_OTLP
            ) from None
        codes.append(status.code)
        messages.append(clean(status.message))
    return (
        pa.array(codes, pa.int32()).take(encoded.indices),
        pa.array(messages, pa.string()).take(encoded.indices),
    )


class _Export:
    """The stored columns of an export's spans: each span's fields read once, its attributes
    decoded once per distinct attribute (`_pairs`) and gathered into columns with Arrow and
    NumPy."""

    def __init__(self, message: Any) -> None:
        spans: list[Any] = []
        self.resource: list[str] = []
        self.scope: list[str] = []
        # Where the spans were in the export: per scope, its resource's and its own number and
        # its first span's position among all (found again only for an error's path).
        self.scopes: list[tuple[int, int, int]] = []
        for r, resource_spans in enumerate(message.resource_spans):
            resource = json.dumps(_attributes(resource_spans.resource.attributes), sort_keys=True)
            for s, scope_spans in enumerate(resource_spans.scope_spans):
                count = len(scope_spans.spans)
                self.scopes.append((r, s, len(spans)))
                self.resource.extend([resource] * count)
                self.scope.extend([clean(scope_spans.scope.name)] * count)
                spans.extend(scope_spans.spans)
        self.count = len(spans)
        self.trace_id: list[bytes] = [span.trace_id for span in spans]
        self.span_id: list[bytes] = [span.span_id for span in spans]
        self.parent_span_id: list[bytes] = [span.parent_span_id for span in spans]
        self.name: list[str] = [span.name for span in spans]
        self.kind: list[int] = [span.kind for span in spans]
        self.start_ns = np.array([span.start_time_unix_nano for span in spans], dtype=np.uint64)
        self.end_ns = np.array([span.end_time_unix_nano for span in spans], dtype=np.uint64)
        self.status, self.status_message = _statuses([span.status for span in spans])
        # Each span's attributes (KeyValue wire bytes), all in one array, and where each span's
        # begin in it.
        lists = [span.attributes for span in spans]
        self.attribute_offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(
            np.fromiter(map(len, lists), dtype=np.int64, count=len(lists)),
            out=self.attribute_offsets[1:],
        )
        self.attribute_values = pa.array(list(itertools.chain.from_iterable(lists)), pa.binary())

    def _refuse(self, bad: np.ndarray, field: str, message: str) -> None:
        if bad.any():
            position = int(np.argmax(bad))
            r, s, first = next(scope for scope in reversed(self.scopes) if scope[2] <= position)
            path = f"resourceSpans.{r}.scopeSpans.{s}.spans.{position - first}.{field}"
            raise Invalid(message, path=path, code=TraceErrorCode.NOT_OTLP)

    def check(self) -> None:
        """Invalid naming the first span field that cannot be stored."""
        if not self.count:
            return
        self._refuse(
            _bad_ids(self.trace_id, (16,), nonzero=True),
            "traceId",
            "A span's trace id must be 16 bytes, not all zero.",
        )
        self._refuse(
            _bad_ids(self.span_id, (8,), nonzero=True),
            "spanId",
            "A span's span id must be 8 bytes, not all zero.",
        )
        self._refuse(
            _bad_ids(self.parent_span_id, (0, 8), nonzero=False),
            "parentSpanId",
            "A span's parent span id must be 8 bytes.",
        )
        starts, ends = self.start_ns, self.end_ns
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
        n = self.count
        # Each attribute of each span (occurrence), by span: which distinct attribute it is.
        encoded = pc.dictionary_encode(self.attribute_values)
        pairs = _pairs(encoded.dictionary.to_pylist())
        keys = sorted({pair.key for pair in pairs})
        rank = {key: index for index, key in enumerate(keys)}
        key_of = np.array([rank[pair.key] for pair in pairs], dtype=np.int64)
        offsets = self.attribute_offsets
        pair_of = encoded.indices.to_numpy(zero_copy_only=False)
        span_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
        # Per span, sorted by key (as JSON with sorted keys); of a key given twice, the last.
        order = np.lexsort((key_of[pair_of], span_of))
        span_of, pair_of = span_of[order], pair_of[order]
        keys_of = key_of[pair_of]
        last = np.ones(len(order), dtype=bool)
        last[:-1] = (span_of[:-1] != span_of[1:]) | (keys_of[:-1] != keys_of[1:])
        span_of, pair_of, keys_of = span_of[last], pair_of[last], keys_of[last]
        kept = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.bincount(span_of, minlength=n), out=kept[1:])
        members = pa.array([pair.member for pair in pairs], pa.string()).take(pair_of)
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(kept), members), ",")
        attributes = pc.binary_join_element_wise("{", joined, "}", "")

        def attribute(key: str, values: pa.Array) -> pa.Array:
            """Each span's value of attribute `key` (null where it has none)."""
            index = np.full(n, -1, dtype=np.int64)
            if key in rank:
                has = keys_of == rank[key]
                index[span_of[has]] = pair_of[has]
            return values.take(pa.array(index, mask=index < 0))

        texts = pa.array([pair.text for pair in pairs], pa.string())
        integers = pa.array([pair.integer for pair in pairs], pa.int64())
        level, op_type = attribute(Attr.LEVEL, texts), attribute(Attr.OP_TYPE, texts)
        names = pa.array(self.name, pa.string())
        columns = {
            "trace_id": _hex(self.trace_id, 16),
            "span_id": _hex(self.span_id, 8),
            "parent_span_id": _hex(self.parent_span_id, 8),
            "name": pc.replace_substring(names, "\x00", NUL_REPLACEMENT),
            "kind": pa.array(self.kind, pa.int32()),
            "start_ns": pa.array(self.start_ns.astype(np.int64)),
            "end_ns": pa.array(self.end_ns.astype(np.int64)),
            "attributes": attributes,
            "resource": pa.array(self.resource, pa.string()),
            "scope": pa.array(self.scope, pa.string()),
            "status": self.status,
            "status_message": self.status_message,
            "level": level,
            "layer_index": attribute(Attr.LAYER_INDEX, integers),
            "layer_name": attribute(Attr.LAYER_NAME, texts),
            "op_type": op_type,
            "device": attribute(Attr.DEVICE, texts),
            "counters": self._counters(level, op_type, kept, pair_of, pairs),
            "batch_size": attribute(Attr.BATCH_SIZE, integers),
        }
        return pa.Table.from_arrays([columns[name] for name in SCHEMA.names], schema=SCHEMA)

    def _counters(
        self,
        level: pa.Array,
        op_type: pa.Array,
        kept: np.ndarray,
        pair_of: np.ndarray,
        pairs: list[_Pair],
    ) -> pa.Array:
        """The `counters` column: a counter sample's values (`counter_values`), else null;
        `kept` and `pair_of`: where each span's attributes are among `pairs`."""
        counters: list[list[dict[str, Any]] | None] = [None] * self.count
        is_counter = pc.and_(pc.equal(level, COUNTER_LEVEL), pc.equal(op_type, COUNTER_OP_TYPE))
        for position in pc.indices_nonzero(pc.fill_null(is_counter, False)).to_pylist():
            own = pair_of[kept[position] : kept[position + 1]]
            counters[position] = counter_values({pairs[i].key: pairs[i].value for i in own})
        return pa.array(counters, COUNTERS)


def tables_by_trace(message: Any) -> dict[str, pa.Table]:
    """The export's spans (as `decode` answers it, or an ExportTraceServiceRequest) as tables
    of the stored columns (`traces.store.SCHEMA`), one per trace id (hex); Invalid
    naming the first span that cannot be stored."""
    if isinstance(message, trace_service_pb2.ExportTraceServiceRequest):
        message = _COLUMNAR_EXPORT.FromString(message.SerializeToString())
    export = _Export(message)
    export.check()
    if not export.count:
        return {}
    table = export.table()
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
