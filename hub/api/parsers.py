"""The API's JSON parser: every JSON body of this API is an object of bounded depth.

DRF's own parser hands any JSON value to the view (a list, a number, `null`) and lets a body
nested thousands of levels deep escape as a RecursionError (a 500). This one refuses both with
400 before a view sees them: a body that is not a JSON object, and one that nests deeper than
`MAX_JSON_DEPTH` arrays and objects (deep enough for any request the API takes; shallow enough
that no recursive code after it, serializers, JSON columns, exports, runs out of stack).
"""

from __future__ import annotations

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_JSON_DEPTH = 64


def json_type(value: Any) -> str:
    """What a parsed JSON value is, in JSON's words (for error messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` holds arrays and objects more than `limit` levels deep (iteratively, so
    that no depth overflows the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def too_deep_message(limit: int = MAX_JSON_DEPTH) -> str:
    return f"The JSON body nests arrays and objects more than {limit} levels deep."


class JSONParser(parsers.JSONParser):
    """application/json bodies: a JSON object at most `MAX_JSON_DEPTH` levels deep, else 400."""

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> dict[str, Any]:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(too_deep_message()) from None
        if not isinstance(data, dict):
            raise ParseError(f"The request body must be a JSON object, not {json_type(data)}.")
        if nests_deeper_than(data, MAX_JSON_DEPTH):
            raise ParseError(too_deep_message())
        return data
