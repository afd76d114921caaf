"""W3C trace context (`traceparent`): the caller's trace and span, when it launches evaluations.

    traceparent: 00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>

Lowercase hex; neither id may be all zeros; version `ff` is invalid, and version `00` has
exactly these four fields (a later version may append more, which are ignored).
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["TraceParent", "TraceParentError", "parse_traceparent"]

_TRACEPARENT = re.compile(
    r"^(?P<version>[0-9a-f]{2})-(?P<trace_id>[0-9a-f]{32})-(?P<span_id>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?$"
)


class TraceParent(NamedTuple):
    trace_id: str
    span_id: str
    flags: int


class TraceParentError(ValueError):
    """The header is not a valid `traceparent`; the message says why."""


def parse_traceparent(header: str) -> TraceParent:
    match = _TRACEPARENT.match(header.strip())
    if match is None:
        raise TraceParentError(
            "traceparent must be 00-<32 lowercase hex trace id>-<16 lowercase hex span id>"
            "-<2 hex flags>"
        )
    if match["version"] == "ff":
        raise TraceParentError("traceparent version ff is invalid")
    if match["version"] == "00" and match["rest"] is not None:
        raise TraceParentError("traceparent version 00 has exactly four fields")
    if set(match["trace_id"]) == {"0"}:
        raise TraceParentError("traceparent trace id may not be all zeros")
    if set(match["span_id"]) == {"0"}:
        raise TraceParentError("traceparent parent span id may not be all zeros")
    return TraceParent(match["trace_id"], match["span_id"], int(match["flags"], 16))
