"""The API's parsers: what no request body gets past, whatever endpoint it is sent to.

DRF's own JSON parser hands any JSON value to the view (a list, a number, `null`), lets a body
nested thousands of levels deep escape as a RecursionError, and takes values that no column can
hold: a NUL character (PostgreSQL's text and JSON columns refuse it), a lone surrogate
(`"\\ud800"`: not Unicode text, it cannot be encoded to UTF-8), an integer outside 64 bits
(2^63 overflows every integer column and NumPy's int64), a number past a double's range (`1e999`
reads as infinity) and the non-standard constants `NaN`, `Infinity` and `-Infinity`. Each of
those reached a view and became a 500 where it was stored. These parsers refuse them all with
400, once, before any view sees the body, in the API's error format, each error's `path` the
dotted field path of the value (or of the key) at fault:

- `JSONParser` (application/json): the body is a JSON object at most `MAX_JSON_DEPTH` arrays
  and objects deep (deep enough for any request the API takes; shallow enough that no recursive
  code after it, serializers, JSON columns, exports, runs out of stack), and no string or key
  of it holds a NUL or a lone surrogate, no integer is outside [-2^63, 2^63 - 1], no number is
  infinite or NaN;
- `FormParser` and `MultiPartParser` (forms and uploads): no field name or value holds a NUL
  (form values are text: their numbers are the serializers' to bound), and a multipart body
  that cannot be parsed is a 400 naming the problem.

Integers within 64 bits that a column cannot hold (a PositiveIntegerField holds at most
2^31 - 1) are the serializers' to bound (`max_value`), field by field.
"""

from __future__ import annotations

import codecs
import io
import json
import math
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http.multipartparser import MultiPartParserError
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from hub.errors import DomainError, Invalid, TooLarge

MAX_JSON_DEPTH = 64
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# At most this many problems of one body are listed (the first ones found).
MAX_REPORTED = 20

_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")


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


def too_deep_message(limit: int = MAX_JSON_DEPTH) -> str:
    return f"The JSON body nests arrays and objects more than {limit} levels deep."


def printable(text: str) -> str:
    """`text` as an answer may show it: lone surrogates (which cannot be encoded, so none may
    reach an answer) and NUL characters written as `\\udXXX` and `\\u0000`."""
    return _NOT_TEXT.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def path_text(path: str) -> str:
    """A field path as an error's `path`: as sent, but for its lone surrogates, written as
    `\\udXXX` (a NUL stays: JSON answers carry it)."""
    return re.sub("[\ud800-\udfff]", lambda match: f"\\u{ord(match.group()):04x}", path)


def text_problem(text: str) -> str | None:
    """What keeps `text` from being stored (a NUL, a lone surrogate), or None."""
    found = _NOT_TEXT.search(text)
    if found is None:
        return None
    character = found.group()
    if character == "\x00":
        return "holds a NUL character (\\u0000), which the hub does not store"
    return (
        f"holds a lone surrogate (\\u{ord(character):04x}), which is not Unicode text "
        "(a surrogate must be half of a pair)"
    )


class _Constant(str):
    """`NaN`, `Infinity` or `-Infinity` as the JSON parser found it: no JSON number (RFC 8259),
    and none that a JSON column stores. Refused with its path once the body is parsed."""


def _integer_text(value: int) -> str:
    digits = len(str(abs(value)))
    return str(value) if digits <= 40 else f"an integer of {digits} digits"


def value_problems(data: Any, limit: int = MAX_JSON_DEPTH) -> list[dict[str, Any]]:
    """The API's errors ({"path", "message"}) of a parsed JSON body: the values above that no
    endpoint takes. Iterative, so that no depth overflows the stack; a body nested deeper than
    `limit` is one error of its own."""
    errors: list[dict[str, Any]] = []

    def add(path: str, message: str) -> None:
        where = printable(path) or "The body"
        errors.append({"path": path_text(path), "message": f"{where} {message}."})

    stack: list[tuple[Any, str, int]] = [(data, "", 1)]
    while stack and len(errors) < MAX_REPORTED:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            if depth > limit:
                return [{"path": "", "message": too_deep_message(limit)}]
            children = []
            for key, value in node.items():
                where = f"{path}.{key}" if path else key
                problem = text_problem(key)
                if problem is not None:
                    add(where, problem.replace("holds", "has a name that holds", 1))
                children.append((value, where, depth + 1))
            stack.extend(reversed(children))
        elif isinstance(node, list):
            if depth > limit:
                return [{"path": "", "message": too_deep_message(limit)}]
            stack.extend(
                (item, f"{path}.{index}" if path else str(index), depth + 1)
                for index, item in reversed(list(enumerate(node)))
            )
        elif isinstance(node, _Constant):
            add(path, f"is {node}, which is not a JSON number")
        elif isinstance(node, str):
            problem = text_problem(node)
            if problem is not None:
                add(path, problem)
        elif isinstance(node, float):
            if not math.isfinite(node):
                add(path, "is a number beyond the range of a double (about ±1.8e308)")
        elif isinstance(node, int) and not isinstance(node, bool):
            if not INT64_MIN <= node <= INT64_MAX:
                add(
                    path,
                    f"is {_integer_text(node)}, outside the range of a 64-bit integer "
                    "(-2^63 to 2^63 - 1)",
                )
    return errors


def refuse(errors: list[dict[str, Any]]) -> None:
    """400 in the API's format, naming every problem (the first is the `detail`)."""
    if errors:
        raise Invalid(errors)


class JSONParser(parsers.JSONParser):
    """application/json bodies: a JSON object at most `MAX_JSON_DEPTH` levels deep, holding
    only values the hub can store (see the module's text), else 400 naming each one."""

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> dict[str, Any]:
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]
        try:
            data = json.load(codecs.getreader(encoding)(stream), parse_constant=_Constant)
        except RecursionError:
            raise ParseError(too_deep_message()) from None
        except ValueError as error:  # not JSON, not UTF-8, an integer of 4,300 digits or more
            raise ParseError(f"JSON parse error - {printable(str(error))}") from None
        if not isinstance(data, dict):
            raise ParseError(f"The request body must be a JSON object, not {json_type(data)}.")
        refuse(value_problems(data))
        return data


def read_body(stream: Any, limit: int, refusal: DomainError) -> bytes:
    """A request body read from its stream, at most `limit` bytes of it: `refusal` (a 413) when
    it is longer."""
    body = stream.read(limit + 1) if stream is not None else b""
    if len(body) > limit:
        raise refusal
    return body


class LargeJSONParser(parsers.BaseParser):
    """application/json bodies larger than Django's in-memory limit (`DATA_UPLOAD_MAX_MEMORY_SIZE`,
    sized for manifests), up to `RESULT_MAX_BYTES`, for the endpoints whose bodies carry a run's
    measurements (an agent's result: every input's predictions, every timed batch; a page of
    its predictions). Read
    from the stream (DRF reads a `JSONParser`'s body through that limit), then checked as
    `JSONParser` checks any body; a larger body is a 413 naming the limit."""

    media_type = "application/json"

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> dict[str, Any]:
        limit = settings.RESULT_MAX_BYTES
        message = f"The request body is larger than the limit of {limit} bytes."
        body = read_body(stream, limit, TooLarge(message, code="invalid"))
        return JSONParser().parse(io.BytesIO(body), media_type, parser_context)


def _form_problems(data: Any) -> list[dict[str, Any]]:
    """The errors of a parsed form: a NUL (or lone surrogate) in a field's name or in one of
    its values. (An uploaded file's name needs no check: Django keeps only its printable
    characters.)"""
    errors: list[dict[str, Any]] = []
    for key, values in data.lists():
        problem = text_problem(key)
        if problem is not None:
            problem = problem.replace("holds", "has a name that holds", 1)
        else:
            problem = next(
                (found for value in values if (found := text_problem(str(value))) is not None),
                None,
            )
        if problem is not None:
            errors.append({"path": path_text(key), "message": f"{printable(key)} {problem}."})
    return errors[:MAX_REPORTED]


class FormParser(parsers.FormParser):
    """application/x-www-form-urlencoded: no NUL in a field's name or value, and no more fields
    than Django takes (its SuspiciousOperation would be its bare 400 page), else 400."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RequestDataTooBig:
            raise
        except SuspiciousOperation as error:  # more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS
            raise ParseError(f"Form parse error - {printable(str(error))}") from None
        refuse(_form_problems(data))
        return data


class MultiPartParser(parsers.MultiPartParser):
    """multipart/form-data: a body that cannot be parsed is a 400 naming the problem (Django
    raises some of them as SuspiciousOperation, which would be its bare 400 page), and no field
    name or value holds a NUL, else 400."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            parsed = super().parse(stream, media_type, parser_context)
        except RequestDataTooBig:  # 413, as for any body (hub.api.errors.exception_handler)
            raise
        except (MultiPartParserError, SuspiciousOperation, ValueError) as error:
            message = printable(str(error)) or "the multipart body cannot be parsed"
            raise ParseError(f"Multipart form parse error - {message}") from None
        refuse(_form_problems(parsed.data))
        return parsed
