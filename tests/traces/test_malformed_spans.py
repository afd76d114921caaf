"""Malformed input to the OTLP receiver and the trace reads: a 4xx in the API's JSON error
format naming the problem, nothing stored on refusal, and every read of an accepted-but-cleaned
span answering 200."""

from __future__ import annotations

import json
import math
import secrets
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from hub import storage
from tests.helpers import error_of
from tests.traces.factories import BASE, export, json_export, new_id, post
from traces import store
from traces.models import SpanAggregate, Trace

JSON = "application/json"
DEEP = 100_000


def nothing_stored(settings: Any) -> bool:
    return (
        not Trace.objects.exists()
        and not SpanAggregate.objects.exists()
        and not (Path(settings.ARTIFACT_ROOT) / "traces").exists()
    )


# --- OTLP exports that nest too deep -----------------------------------------------------------


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def deep_protobuf(depth: int) -> bytes:
    """An export of one span whose attribute `k` is an array in an array … `depth` times, as
    protobuf wire bytes (built outside in, so that 100,000 levels take no quadratic time)."""
    # AnyValue{array_value (5): ArrayValue{values (1): AnyValue{…}}}: sizes from the inside out.
    sizes = [0]
    for _ in range(depth):
        array = 1 + len(_varint(sizes[-1])) + sizes[-1]
        sizes.append(1 + len(_varint(array)) + array)
    parts = []
    for inner in reversed(sizes[:-1]):
        array = 1 + len(_varint(inner)) + inner
        parts.append(b"\x2a" + _varint(array) + b"\x0a" + _varint(inner))
    value = b"".join(parts)
    pair = b"\x0a\x01k\x12" + _varint(len(value)) + value
    span = (
        b"\x0a\x10" + bytes.fromhex(new_id())  # trace_id
        + b"\x12\x08" + secrets.token_bytes(8)  # span_id
        + b"\x2a\x04deep"  # name
        + b"\x39" + BASE.to_bytes(8, "little")  # start_time_unix_nano (fixed64)
        + b"\x41" + (BASE + 10).to_bytes(8, "little")  # end_time_unix_nano
        + b"\x4a" + _varint(len(pair)) + pair  # attributes
    )  # fmt: skip
    scope = b"\x12" + _varint(len(span)) + span
    resource = b"\x12" + _varint(len(scope)) + scope
    return b"\x0a" + _varint(len(resource)) + resource


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        "[" * DEEP + "]" * DEEP,
        '{"resourceSpans": ' * DEEP + "[]" + "}" * DEEP,
        '{"resourceSpans": [' + "[" * 70 + "]" * 70 + "]}",
    ],
    ids=["array", "object", "past-the-limit"],
)
def test_an_otlp_json_export_nested_too_deep_is_refused(bob_client, settings, body) -> None:  # type: ignore[no-untyped-def]
    response = post(bob_client, body.encode(), JSON)

    assert response.status_code == 400
    assert "more than 64 levels deep" in error_of(response)["message"]
    assert nothing_stored(settings)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "path", "says"),
    [
        ('{"resourceSpans": null}', "resourceSpans", "must be a JSON array, not null"),
        (
            '{"resourceSpans": [{"resource": null, "scopeSpans": []}]}',
            "resourceSpans.0.resource",
            "must be a JSON object, not null",
        ),
    ],
)
def test_a_null_where_otlp_json_wants_a_message_is_refused_naming_it(  # type: ignore[no-untyped-def]
    bob_client, settings, body, path, says
) -> None:
    response = post(bob_client, body.encode(), JSON)

    assert response.status_code == 400
    assert error_of(response)["path"] == path and says in error_of(response)["message"]
    assert nothing_stored(settings)


@pytest.mark.django_db
def test_an_otlp_protobuf_export_nested_too_deep_is_refused(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    response = post(bob_client, deep_protobuf(DEEP))

    assert response.status_code == 400
    assert "not an OTLP protobuf export" in error_of(response)["message"]
    assert nothing_stored(settings)


@pytest.mark.django_db
def test_the_deepest_export_protobuf_accepts_reads_back(bob_client) -> None:  # type: ignore[no-untyped-def]
    deepest = 47  # one more nesting passes protobuf's recursion limit (100 messages)
    body = deep_protobuf(deepest)
    message = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    trace_id = message.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    assert post(bob_client, deep_protobuf(deepest + 1)).status_code == 400

    assert post(bob_client, body).status_code == 200

    assert_every_read_answers(bob_client, trace_id)
    [span] = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    value = span["attributes"]["k"]
    for _ in range(deepest):
        [value] = value
    assert value is None  # the innermost array holds one empty value


# --- OTLP span times ---------------------------------------------------------------------------


def _span(**fields: Any) -> dict[str, Any]:
    return {
        "traceId": new_id(),
        "spanId": secrets.token_hex(8),
        "name": "s",
        "startTimeUnixNano": str(BASE),
        "endTimeUnixNano": str(BASE + 10),
        **fields,
    }


def _json_body(*spans: dict[str, Any]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}).encode()


SPAN_PATH = "resourceSpans.0.scopeSpans.0.spans"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"startTimeUnixNano": str(2**63), "endTimeUnixNano": str(2**63 + 5)}, "startTimeUnixNano"),
        ({"endTimeUnixNano": str(2**64 - 1)}, "endTimeUnixNano"),
        ({"endTimeUnixNano": str(2**63)}, "endTimeUnixNano"),
        ({"endTimeUnixNano": str(BASE - 1)}, "endTimeUnixNano"),
    ],
    ids=["start-2^63", "end-2^64-1", "end-2^63", "end-before-start"],
)
def test_a_span_time_that_cannot_be_stored_is_refused_naming_the_field(
    bob_client, settings, fields, field
) -> None:  # type: ignore[no-untyped-def]
    # The bad span comes second: the good one before it is not stored either.
    response = post(bob_client, _json_body(_span(), _span(**fields)), JSON)

    assert response.status_code == 400
    error = error_of(response)
    assert error["path"] == f"{SPAN_PATH}.1.{field}"
    assert field in error["message"]
    assert nothing_stored(settings)


@pytest.mark.django_db
def test_a_negative_span_time_is_refused_naming_the_field(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    response = post(bob_client, _json_body(_span(startTimeUnixNano="-1")), JSON)

    assert response.status_code == 400
    assert "startTimeUnixNano" in error_of(response)["message"]
    assert nothing_stored(settings)


@pytest.mark.django_db
def test_a_protobuf_span_time_past_2_63_is_refused(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    message = trace_service_pb2.ExportTraceServiceRequest.FromString(
        export(new_id(), ("a", 0, 10, {}))
    )
    span = message.resource_spans[0].scope_spans[0].spans[0]
    span.start_time_unix_nano, span.end_time_unix_nano = 2**63, 2**64 - 1

    response = post(bob_client, message.SerializeToString())

    assert response.status_code == 400
    assert error_of(response)["path"] == f"{SPAN_PATH}.0.startTimeUnixNano"
    assert nothing_stored(settings)


# --- Values that are cleaned, and every read after them -----------------------------------------


def assert_every_read_answers(client: Any, trace_id: str) -> None:
    """Every read of the trace answers 200 with strict JSON (no NaN, no Infinity)."""
    for path in ("", "?format=otlp", "/timeline", "/layers"):
        response = client.get(f"/api/v1/traces/{trace_id}{path}")
        assert response.status_code == 200, (path, response.content[:500])
        json.loads(response.content, parse_constant=_refuse)


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def _pb_value(value: Any) -> common_pb2.AnyValue:
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    if isinstance(value, list):
        out = common_pb2.AnyValue()
        out.array_value.values.extend(_pb_value(item) for item in value)
        return out
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    return common_pb2.AnyValue(string_value=value)


@pytest.mark.django_db
def test_nan_and_infinity_attributes_are_stored_as_strings_and_read_back(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    message = trace_service_pb2.ExportTraceServiceRequest()
    resource = message.resource_spans.add()
    resource.resource.attributes.add(key="host.load", value=_pb_value(math.inf))
    span = resource.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes.fromhex(trace_id), secrets.token_bytes(8), "s"
    span.start_time_unix_nano, span.end_time_unix_nano = BASE, BASE + 10
    attributes = {
        "nan": math.nan,
        "inf": math.inf,
        "minus_inf": -math.inf,
        "list": [1.5, math.nan],
        "mlms.level": "model",
    }
    for key, value in attributes.items():
        span.attributes.add(key=key, value=_pb_value(value))

    assert post(bob_client, message.SerializeToString()).status_code == 200

    assert_every_read_answers(bob_client, trace_id)
    [stored] = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    assert stored["attributes"] == {
        "nan": "NaN",
        "inf": "Infinity",
        "minus_inf": "-Infinity",
        "list": [1.5, "NaN"],
        "mlms.level": "model",
    }
    assert stored["resource"] == {"host.load": "Infinity"}
    otlp = bob_client.get(f"/api/v1/traces/{trace_id}?format=otlp").json()
    exported = otlp["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    assert {"key": "nan", "value": {"stringValue": "NaN"}} in exported


@pytest.mark.django_db
def test_nan_in_otlp_json_is_stored_as_a_string(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    body = json_export(trace_id, ("s", 0, 10, {}))
    data = json.loads(body)
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = [
        {"key": "x", "value": {"doubleValue": "NaN"}},
        {"key": "y", "value": {"doubleValue": "-Infinity"}},
    ]

    assert post(bob_client, json.dumps(data).encode(), JSON).status_code == 200

    assert_every_read_answers(bob_client, trace_id)
    [stored] = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    assert stored["attributes"] == {"x": "NaN", "y": "-Infinity"}


@pytest.mark.django_db
def test_nul_characters_are_replaced_and_every_read_answers(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    attributes = {
        "mlms.level": "frame\x00work",
        "mlms.op_type": "Co\x00nv",
        "mlms.layer_name": "conv\x001",
        "key\x00": "value\x00",
    }
    body = export(trace_id, ("con\x00v1", 0, 10, attributes))
    message = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    message.resource_spans[0].scope_spans[0].scope.name = "sco\x00pe"
    span = message.resource_spans[0].scope_spans[0].spans[0]
    span.status.message = "bro\x00ken"
    span.attributes.add(key="list", value=_pb_value(["a\x00"]))

    assert post(bob_client, message.SerializeToString()).status_code == 200

    assert_every_read_answers(bob_client, trace_id)
    [span] = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    assert "\x00" not in json.dumps(span, ensure_ascii=False)
    assert span["name"] == "con\ufffdv1" and span["status_message"] == "bro\ufffdken"
    assert span["attributes"]["key\ufffd"] == "value\ufffd"
    assert span["attributes"]["list"] == ["a\ufffd"]
    assert span["level"] == "frame\ufffdwork" and span["layer_name"] == "conv\ufffd1"
    [row] = bob_client.get(f"/api/v1/traces/{trace_id}/layers").json()["aggregates"]
    assert row["name"] == "con\ufffdv1" and row["op_type"] == "Co\ufffdnv"
    assert SpanAggregate.objects.get().name == "con\ufffdv1"


@pytest.mark.django_db
def test_out_of_range_layer_indexes_and_long_levels_are_stored_and_read(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    spans = [
        ("huge", 0, 10, {"mlms.layer_index": "99999999999999999999"}),
        ("infinite", 20, 10, {"mlms.layer_index": math.inf, "mlms.level": "l" * 100}),
    ]
    message = trace_service_pb2.ExportTraceServiceRequest.FromString(export(trace_id))
    scope = message.resource_spans[0].scope_spans[0]
    for name, offset, duration, attributes in spans:
        span = scope.spans.add()
        span.trace_id, span.span_id = bytes.fromhex(trace_id), secrets.token_bytes(8)
        span.name = name
        span.start_time_unix_nano, span.end_time_unix_nano = BASE + offset, BASE + offset + duration
        for key, value in attributes.items():
            span.attributes.add(key=key, value=_pb_value(value))

    assert post(bob_client, message.SerializeToString()).status_code == 200

    assert_every_read_answers(bob_client, trace_id)
    spans_read = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    assert {s["name"]: s["layer_index"] for s in spans_read} == {"huge": None, "infinite": None}


@pytest.mark.django_db
def test_a_chunk_stored_with_a_bare_nan_still_reads(bob_client, bob) -> None:  # type: ignore[no-untyped-def]
    """A chunk written before NaN was stored as a string holds it as a bare JSON constant."""
    trace_id = new_id()
    row = {name: None for name in store.SCHEMA.names} | {
        "trace_id": trace_id,
        "span_id": secrets.token_hex(8),
        "parent_span_id": "",
        "name": "old",
        "kind": 1,
        "start_ns": BASE,
        "end_ns": BASE + 10,
        "attributes": '{"a": NaN, "b": [Infinity, -Infinity]}',
        "resource": '{"r": NaN}',
        "scope": "",
        "status": 0,
        "status_message": "",
    }
    storage.write(f"traces/{trace_id}/old.parquet", [store.parquet_bytes([row])])
    Trace.objects.create(
        trace_id=trace_id, owner=bob, span_count=1, chunk_count=1, start_ns=BASE, end_ns=BASE + 10
    )

    assert_every_read_answers(bob_client, trace_id)
    [span] = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    assert span["attributes"] == {"a": "NaN", "b": ["Infinity", "-Infinity"]}


# --- Query parameters of the trace reads ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "name", "says"),
    [
        ({"end": 2**63}, "end", "at most 9223372036854775807"),
        ({"start": 2**63}, "start", "at most 9223372036854775807"),
        ({"start": 10**30}, "start", "at most"),
        ({"start": -1}, "start", "at least 0"),
        ({"end": "tomorrow"}, "end", "must be an integer"),
        ({"end": "9" * 5000}, "end", "at most 9223372036854775807"),
        ({"end": ""}, "end", "must be an integer"),
        ({"end": "1_000"}, "end", "must be an integer"),
        ({"max_spans": 2**63}, "max_spans", "at most"),
        ({"max_spans": 0}, "max_spans", "at least 1"),
        ({"max_points": -5}, "max_points", "at least 1"),
        ({"max_points": "1.5"}, "max_points", "must be an integer"),
        ({"start": BASE + 10, "end": BASE}, "end", "before start"),
    ],
)
def test_a_bad_timeline_parameter_is_400_naming_it(bob_client, query, name, says) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    assert post(bob_client, export(trace_id, ("a", 0, 10, {}))).status_code == 200

    response = bob_client.get(f"/api/v1/traces/{trace_id}/timeline", query)

    assert response.status_code == 400
    error = error_of(response)
    assert error["path"] == name and name in error["message"] and says in error["message"]


@pytest.mark.django_db
def test_the_largest_timeline_window_answers(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    assert post(bob_client, export(trace_id, ("a", 0, 10, {}))).status_code == 200

    response = bob_client.get(f"/api/v1/traces/{trace_id}/timeline", {"start": 0, "end": 2**63 - 1})

    assert response.status_code == 200 and response.json()["total"] == 1
