"""The codes of the traces app's domain errors (an error body's `code`).

Ingest (`traces.otlp`, `traces.access`, `traces.ingest`) raises the hub's kinds of domain error
(`hub.errors`) with one of these codes and the field at fault; the receiver
(`traces.api.receiver`) answers each kind with its HTTP status (`hub.api.errors.STATUS`). Each
code is, on the wire, its kind's own (`invalid`, `forbidden`, `conflict`): a sender acts on the
status, and the code names why.
"""

from __future__ import annotations

from enum import StrEnum


class TraceErrorCode(StrEnum):
    # The body is not an OTLP export, or a span in it cannot be stored (Invalid).
    NOT_OTLP = "invalid"
    # The token may not write spans into the trace (Forbidden).
    NOT_WRITABLE = "forbidden"
    # The export's claim no longer holds its evaluation: the job ended or moved on (Conflict).
    CLAIM_NOT_CURRENT = "conflict"
