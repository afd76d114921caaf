"""How a manifest's problems are reported: `ManifestError` and the phrasing of its messages.

Every problem is a dict `{"path": "inputs.0.parameters.layout", "line": 12, "message": "..."}`;
the helpers here build those dicts and show values the same way in every message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = [
    "FieldPath",
    "ManifestError",
    "by_line",
    "describe",
    "dotted",
    "error_at",
    "item_count",
    "show",
]

FieldPath = tuple[str | int, ...]  # a field's path in a document: ("inputs", 0, "parameters")


class ManifestError(Exception):
    """A manifest that cannot be accepted.

    `errors` lists every problem found, sorted by line, each a dict
    `{"path": "inputs.0.parameters.layout", "line": 12, "message": "..."}`; the path is "" for
    the whole document and the line is None where there is no line to point at. `status` is the
    HTTP status an API should answer with: 400, or 413 when the body is too large.
    """

    def __init__(self, errors: list[dict[str, Any]], status: int = 400) -> None:
        self.errors = errors
        self.status = status
        super().__init__(self._summary())

    def _summary(self) -> str:
        lines = []
        for error in self.errors:
            where = f"line {error['line']}: " if error.get("line") else ""
            lines.append(f"{where}{error['path'] or '<document>'}: {error['message']}")
        return "; ".join(lines)


def error_at(path: FieldPath, line: int | None, message: str) -> dict[str, Any]:
    """One problem, as `ManifestError.errors` lists it."""
    return {"path": dotted(path), "line": line, "message": message}


def dotted(path: Iterable[str | int]) -> str:
    """A field path as messages and line maps spell it: `inputs.0.parameters`."""
    return ".".join(str(part) for part in path)


def by_line(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`errors` sorted by line, those without a line last."""
    return sorted(errors, key=lambda e: (e["line"] is None, e["line"] or 0))


def item_count(count: int) -> str:
    """A count with its noun: 1 item, 3 items."""
    return f"{count} item" if count == 1 else f"{count} items"


def show(value: Any) -> str:
    """A value as a message shows it: strings quoted, others as in JSON."""
    if isinstance(value, str):
        text = value if len(value) <= 80 else value[:77] + "..."
        return "'" + text + "'"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def describe(value: Any) -> str:
    """`value` described by type: "a list", "the number 5", "the string '8x8'"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int | float):
        return f"the number {show(value)}"
    return f"the string {show(value)}"
