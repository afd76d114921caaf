"""The JSON Schemas of the two kinds of manifest, and their errors in plain words.

The schemas are `predictors/schemas/<kind>.schema.json` (draft 2020-12); `schema_problems`
turns a `jsonschema` error into (field path, message) pairs a manifest's author can act on.
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from predictors.manifests.errors import FieldPath, describe, item_count, show

__all__ = [
    "KINDS",
    "PUBLISHED_SCHEMA_ID",
    "published_schema",
    "schema",
    "schema_problems",
    "validator",
]

KINDS = ("model", "dataset")

PUBLISHED_SCHEMA_ID = "https://mlmodelscope.org/schema/manifest.json"


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one kind of manifest, "model" or "dataset"."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return copy.deepcopy(_schema(kind))


def published_schema() -> dict[str, Any]:
    """One JSON Schema for both kinds, chosen by `kind` (served at /api/v1/schema/manifest.json).

    The cross-field rules (semver, ranges, repo:// namespaces, …) are checked by `load` only;
    the schema says so in its description.
    """
    defs = {}
    for kind in KINDS:
        document = schema(kind)
        document.pop("$schema", None)
        defs[kind] = document
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": PUBLISHED_SCHEMA_ID,
        "title": "MLModelScope manifest",
        "description": "A model or a dataset manifest, chosen by `kind`. "
        + "The hub also checks the cross-field rules described in each kind's description "
        + "(see docs/manifest.md).",
        "type": "object",
        "properties": {
            "kind": {
                "title": "Kind",
                "description": "model or dataset: which of the two schemas applies.",
                "enum": list(KINDS),
            }
        },
        "required": ["kind"],
        "allOf": [
            {
                "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                "then": {"$ref": defs[kind]["$id"]},
            }
            for kind in KINDS
        ],
        "$defs": defs,
    }


@cache
def _schema(kind: str) -> dict[str, Any]:
    text = resources.files("predictors").joinpath("schemas", f"{kind}.schema.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


@cache
def validator(kind: str) -> jsonschema.protocols.Validator:
    """The (cached) validator of one kind's schema."""
    return jsonschema.Draft202012Validator(_schema(kind))


# Messages for the schema's patterns, by pattern.
_PATTERN_MESSAGES = {
    "^[a-z0-9][a-z0-9._-]{0,63}$": "is not a valid name: use 1 to 64 lowercase letters, digits, "
    "'.', '_' or '-', starting with a letter or digit",
    "^[a-z0-9][a-z0-9_-]{0,63}$": "is not a valid split name: use 1 to 64 lowercase letters, "
    "digits, '_' or '-', starting with a letter or digit",
    "^[0-9a-f]{64}$": "is not a SHA-256: expected 64 lowercase hexadecimal digits",
    "^(repo|https)://": "is not a repo://… path or an https://… URL",
    "^repo://": "is not a repo://… path",
    "^\\S+$": "is not a container image reference (no spaces allowed)",
}

_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def schema_problems(error: jsonschema.ValidationError) -> Iterator[tuple[FieldPath, str]]:
    """One schema error as (field path, message) pairs, in plain words."""
    path: FieldPath = tuple(error.absolute_path)
    keyword, expected, value = error.validator, error.validator_value, error.instance
    if keyword == "required":
        for name in expected:
            if isinstance(value, dict) and name not in value:
                yield (*path, name), f"'{name}' is required"
    elif keyword == "additionalProperties" and expected is False and isinstance(value, dict):
        known = list(error.schema.get("properties", {}))
        for name in value:
            if name not in known:
                yield (*path, name), f"unknown field '{name}'" + _did_you_mean(name, known)
    elif "propertyNames" in error.relative_schema_path and isinstance(value, str):
        message = _PATTERN_MESSAGES.get(error.schema.get("pattern", ""), "is not a valid key")
        yield (*path, value), f"{show(value)} {message}"
    elif keyword == "type":
        types = [expected] if isinstance(expected, str) else list(expected)
        if types == ["boolean"]:
            wanted = "true or false"
        else:
            names = [_TYPE_NAMES.get(t, t).replace("true or false", "a boolean") for t in types]
            wanted = " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
        yield path, f"must be {wanted}, not {describe(value)}"
    elif keyword == "enum":
        options = ", ".join(str(option) for option in expected)
        hint = _did_you_mean(value, [str(o) for o in expected]) if isinstance(value, str) else ""
        yield path, f"{show(value)} is not one of {options}{hint}"
    elif keyword == "const":
        yield path, f"must be {show(expected)}, not {show(value)}"
    elif keyword == "pattern":
        message = _PATTERN_MESSAGES.get(expected, f"does not match the pattern {expected}")
        yield path, f"{show(value)} {message}"
    elif keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        relation = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "greater than",
            "exclusiveMaximum": "less than",
        }[keyword]
        yield path, f"must be {relation} {expected}, not {show(value)}"
    elif keyword in ("minItems", "maxItems"):
        count = len(value)
        bounds = error.schema
        if bounds.get("minItems") == bounds.get("maxItems"):
            yield path, f"must have exactly {item_count(expected)}, not {count}"
        elif keyword == "minItems":
            yield path, f"must have at least {item_count(expected)}, not {count}"
        else:
            yield path, f"must have at most {item_count(expected)}, not {count}"
    elif keyword == "minLength":
        if expected == 1:
            yield path, "must not be empty"
        else:
            yield path, f"must be at least {expected} characters long"
    elif keyword == "maxLength":
        yield path, f"must be at most {expected:,} characters long, not {len(value):,}"
    elif keyword == "minProperties":
        yield path, "must not be empty"
    else:
        yield path, error.message


def _did_you_mean(value: str, options: list[str]) -> str:
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    if not close:
        close = [option for option in options if option.lower() == value.lower()]
    return f" (did you mean {close[0]}?)" if close else ""
