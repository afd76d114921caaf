"""The error of a refused trace export."""

from __future__ import annotations


class TraceError(Exception):
    """A refused export: `status` is the HTTP status to answer, `path` the field at fault in
    OTLP JSON's names ("" for the body as a whole)."""

    def __init__(self, status: int, message: str, path: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.path = path
