"""Builders of the traces tests: OTLP exports (protobuf and JSON) of spans given as (name, start
offset ns, duration ns, attributes), posting them to the receiver, and the stored chunks."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

OTLP = "/v1/traces"
PROTOBUF = "application/x-protobuf"
BASE = 1_700_000_000_000_000_000


def _value(value: Any) -> common_pb2.AnyValue:
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    return common_pb2.AnyValue(string_value=str(value))


def export(trace_id: str, *spans: tuple[Any, ...]) -> bytes:
    """An ExportTraceServiceRequest of spans (name, start offset ns, duration ns, attributes),
    each optionally followed by its span id and its parent's (16 hex digits; else a random
    id and no parent)."""
    message = trace_service_pb2.ExportTraceServiceRequest()
    resource = message.resource_spans.add()
    resource.resource.attributes.add(key="service.name", value=_value("test"))
    scope = resource.scope_spans.add()
    scope.scope.name = "tests"
    for name, offset, duration, attributes, *ids in spans:
        span = scope.spans.add()
        span.trace_id = bytes.fromhex(trace_id)
        span.span_id = bytes.fromhex(ids[0]) if ids else secrets.token_bytes(8)
        if len(ids) > 1:
            span.parent_span_id = bytes.fromhex(ids[1])
        span.name = name
        span.kind = 1  # type: ignore[assignment]
        span.start_time_unix_nano = BASE + offset
        span.end_time_unix_nano = BASE + offset + duration
        for key, value in attributes.items():
            span.attributes.add(key=key, value=_value(value))
    return message.SerializeToString()


def post(client: Any, body: bytes, content_type: str = PROTOBUF, **extra: Any) -> Any:
    return client.generic("POST", OTLP, body, content_type=content_type, **extra)


def chunks(settings: Any, trace_id: str) -> list[Path]:
    return sorted((Path(settings.ARTIFACT_ROOT) / "traces" / trace_id).glob("*"))


def new_id() -> str:
    return secrets.token_hex(16)


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_json_value(item) for item in value]}}
    return {"stringValue": str(value)}


def json_export(trace_id: str, *spans: tuple[str, int, int, dict[str, Any]]) -> bytes:
    """An OTLP JSON export of spans (name, start offset ns, duration ns, attributes)."""
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": []},
                    "scopeSpans": [
                        {
                            "scope": {"name": "tests"},
                            "spans": [
                                {
                                    "traceId": trace_id,
                                    "spanId": secrets.token_hex(8),
                                    "name": name,
                                    "kind": 1,
                                    "startTimeUnixNano": str(BASE + offset),
                                    "endTimeUnixNano": str(BASE + offset + duration),
                                    "attributes": [
                                        {"key": key, "value": _json_value(value)}
                                        for key, value in attributes.items()
                                    ],
                                }
                                for name, offset, duration, attributes in spans
                            ],
                        }
                    ],
                }
            ]
        }
    ).encode()
