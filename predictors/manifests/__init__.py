"""Manifests: the YAML documents that describe a model or a dataset.

`load` turns YAML text into a validated `Manifest`, in four passes, each of which can only
fail with a `ManifestError` that names the field path and the YAML line of every problem:

1. size: a body over `max_bytes` is refused before it is parsed (status 413);
2. YAML: a composer builds the node graph while measuring it: nesting deeper than `MAX_DEPTH`
   or expanding (aliases included) past `MAX_NODES` stops the parse at once, so an alias bomb
   costs no more than its own text. The events come from libyaml's parser when PyYAML has it
   (ten times faster), else from a `yaml.SafeLoader` subclass; either way no constructor ever
   runs. Scalars follow the YAML 1.2 core schema (`yes` and `1:20` are strings, `1e-3` is a
   number);
3. construction: the nodes become plain JSON values. Only the JSON-compatible core tags are
   accepted (str, int, float, bool, null, seq, map); any other tag (`!!python/…`, `!include`,
   `!!binary`, …) is an error and is never constructed. Duplicate keys, non-string keys and
   non-finite numbers are errors too;
4. validation: the JSON Schema of the manifest's kind (`predictors/schemas/`), then the
   cross-field rules a schema cannot express (semver, version ranges, repo:// paths, sha256 for
   https:// files, crop and per-channel rules).

The format is documented in docs/manifest.md. This module never imports Django.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any, TypeGuard, cast
from urllib.parse import urlsplit

import jsonschema
import numpy as np
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from predictors.manifests import versioning
from predictors.processing import custom_code

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "MAX_NODES",
    "Manifest",
    "ManifestError",
    "apply_overrides",
    "load",
    "load_file",
    "published_schema",
    "schema",
]

MAX_MANIFEST_BYTES = 256 * 1024
MAX_NODES = 100_000  # nodes after alias expansion; a 256 KiB document without aliases has fewer
MAX_DEPTH = 64  # nesting levels, the root being level 1
MAX_REPO_PATH = 255  # characters after repo://
KINDS = ("model", "dataset")

PUBLISHED_SCHEMA_ID = "https://mlmodelscope.org/schema/manifest.json"

Path_ = tuple[str | int, ...]


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


@dataclass(frozen=True)
class Manifest:
    """A validated manifest. `data` is the document as plain JSON types; `source` its YAML."""

    kind: str
    name: str
    version: str
    framework: str  # '' for datasets
    framework_range: str  # '' for datasets
    task: str
    visibility: str | None  # None when the document does not say
    data: dict[str, Any] = field(hash=False, repr=False)
    source: str = field(hash=False, repr=False)

    def namespace(self) -> str:
        """The manifest's folder in the artifact store: models/<name>/<version> or datasets/…."""
        return _namespace(self.kind, self.name, self.version)

    def repo_paths(self) -> list[tuple[str, str]]:
        """(field path, store-relative path) for every repo:// file the manifest names."""
        return [
            (_dotted(path), uri[len(_REPO) :])
            for path, uri, _, _ in _file_refs(self.data, self.kind)
            if isinstance(uri, str) and uri.startswith(_REPO)
        ]

    def content_hash(self) -> str:
        """sha256 (hex) of the canonical JSON of `data`: sorted keys, no whitespace, UTF-8."""
        canonical = json.dumps(
            self.data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# -- public functions ------------------------------------------------------------------------


def load(
    text: str | bytes, *, max_bytes: int = MAX_MANIFEST_BYTES, kind: str | None = None
) -> Manifest:
    """Parse and validate a manifest; raise ManifestError listing every error found.

    `kind` ("model" or "dataset"), when given, is the kind the document must be.
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    source = _decode(text, max_bytes)
    data, lines = parse_with_lines(source)
    errors = _validate(data, kind, lines)
    if errors:
        raise ManifestError(errors)
    return _manifest(data, source)


def load_file(path: str | PathLike[str], *, kind: str | None = None) -> Manifest:
    """`load` the manifest in a file."""
    file = Path(path)
    size = file.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError([_too_large(size, MAX_MANIFEST_BYTES)], status=413)
    return load(file.read_bytes(), kind=kind)


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


def apply_overrides(data: dict[str, Any], assignments: list[str]) -> Manifest:
    """A copy of `data` with `PATH=VALUE` assignments applied, validated again.

    PATH is dotted with list indices as numbers (`inputs.0.parameters.color_mode`); VALUE is
    parsed as YAML (`BGR`, `0.5`, `null`, `[256, 256]`). The last segment may name a key the
    mapping lacks (the schema then judges it); every other segment must exist. Errors carry
    the path and no line (the assignments are not YAML lines). `data` is not modified.
    """
    result = copy.deepcopy(data)
    errors: list[dict[str, Any]] = []
    for assignment in assignments:
        error = _assign(result, assignment)
        if error is not None:
            errors.append(error)
    if errors:
        raise ManifestError(errors)
    source = yaml.dump(result, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    errors = _validate(result, None, {})
    if errors:
        raise ManifestError(errors)
    return _manifest(result, source)


# -- pass 1: size and text -------------------------------------------------------------------


def _too_large(size: int, max_bytes: int) -> dict[str, Any]:
    return {
        "path": "",
        "line": None,
        "message": f"the manifest is {size:,} bytes; the limit is {max_bytes:,} bytes",
    }


def _decode(text: str | bytes, max_bytes: int) -> str:
    if isinstance(text, str):
        # A str is at least as many bytes as characters: refuse the obvious case unencoded.
        size = len(text) if len(text) > max_bytes else len(text.encode("utf-8"))
        if size > max_bytes:
            raise ManifestError([_too_large(size, max_bytes)], status=413)
        source = text
    else:
        if len(text) > max_bytes:
            raise ManifestError([_too_large(len(text), max_bytes)], status=413)
        try:
            source = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            line = bytes(text)[: exc.start].count(b"\n") + 1
            raise ManifestError(
                [{"path": "", "line": line, "message": "the manifest is not UTF-8 text"}]
            )
    return source.removeprefix("\ufeff")


# -- pass 2: YAML, measured as it is composed ------------------------------------------------

_CORE = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_CORE + t for t in ("str", "int", "float", "bool", "null"))
_SEQ, _MAP = _CORE + "seq", _CORE + "map"
_ALLOWED_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL, _SEQ, _MAP}

# The YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#103-core-schema).
_CORE_SCALARS = {
    _NULL: re.compile(r"~|null|Null|NULL|"),
    _BOOL: re.compile(r"true|True|TRUE|false|False|FALSE"),
    _INT: re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+"),
    _FLOAT: re.compile(
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
    ),
}
_FIRST_CHARS = {
    _NULL: ["~", "n", "N", ""],
    _BOOL: list("tTfF"),
    _INT: list("-+0123456789"),
    _FLOAT: list("-+.0123456789"),
}


class _LimitError(yaml.MarkedYAMLError):
    """The document nests too deep, expands too far, or refers to itself."""


def _limit(problem: str, event: yaml.Event) -> _LimitError:
    return _LimitError(problem=problem, problem_mark=event.start_mark)  # type: ignore[arg-type]


class _CoreResolver(yaml.resolver.BaseResolver):
    """Resolves plain scalars by the YAML 1.2 core schema instead of PyYAML's YAML 1.1."""

    yaml_implicit_resolvers: dict[Any, Any] = {}


for _tag, _pattern in _CORE_SCALARS.items():
    _CoreResolver.add_implicit_resolver(
        _tag, re.compile(rf"^(?:{_pattern.pattern})$"), _FIRST_CHARS[_tag]
    )


class _MeasuringComposer(yaml.composer.Composer):
    """Composes nodes only (never constructs), measuring each node's expanded size and height.

    The measures are computed as nodes complete, from their children's measures, so an alias
    costs one lookup however large the node it names, and the limits trip on the first node
    that crosses them. The composer recurses once per level, at most MAX_DEPTH times.
    """

    _measures: dict[int, tuple[int, int]]  # id(node) -> (size, height)
    _depth: int
    peek_event: Callable[[], yaml.Event]  # from the parser it is mixed with

    def _start_measuring(self) -> None:
        self._measures = {}
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _limit(f"the document nests deeper than {MAX_DEPTH} levels", event)
            node = cast(Node, super().compose_node(parent, index))
            self._measure(node, event)
        finally:
            self._depth -= 1
        return node

    def _measure(self, node: Node, event: yaml.Event) -> None:
        if isinstance(event, yaml.AliasEvent):
            measure = self._measures.get(id(node))
            if measure is None:
                raise _limit(f"the alias *{event.anchor} refers to a node that contains it", event)
            size, height = measure
            if self._depth + height - 1 > MAX_DEPTH:
                raise _limit(
                    f"the alias *{event.anchor} makes the document nest deeper than "
                    f"{MAX_DEPTH} levels",
                    event,
                )
        else:
            if isinstance(node, MappingNode):
                children = [child for pair in node.value for child in pair]
            elif isinstance(node, SequenceNode):
                children = node.value
            else:
                children = []
            measures = [self._measures[id(child)] for child in children]
            size = 1 + sum(m[0] for m in measures)
            height = 1 + max((m[1] for m in measures), default=0)
            self._measures[id(node)] = (size, height)
        if size > MAX_NODES:
            raise _limit(
                f"the document expands to more than {MAX_NODES:,} nodes "
                "(counting every alias as a copy of what it names)",
                event,
            )


class _Loader(_MeasuringComposer, yaml.SafeLoader):
    """The pure-Python loader: a SafeLoader whose constructor is never called."""

    yaml_implicit_resolvers = _CoreResolver.yaml_implicit_resolvers

    def __init__(self, stream: str) -> None:
        yaml.SafeLoader.__init__(self, stream)
        self._start_measuring()


_LOADER: type[Any] = _Loader

if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _FastLoader(_MeasuringComposer, CParser, _CoreResolver):  # type: ignore[misc]
        """The same composer and resolver over libyaml's event parser, about ten times faster
        than the pure-Python scanner (a 256 KiB document costs well under a second)."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            _CoreResolver.__init__(self)
            self._start_measuring()

    _LOADER = _FastLoader


class _Dumper(yaml.SafeDumper):
    """Writes YAML that reads back the same under both YAML 1.1 and the 1.2 core schema."""


for _tag, _pattern in _CORE_SCALARS.items():
    _Dumper.add_implicit_resolver(
        _tag, re.compile(rf"^(?:{_pattern.pattern})$"), _FIRST_CHARS[_tag]
    )


def _error(path: Path_, line: int | None, message: str) -> dict[str, Any]:
    return {"path": _dotted(path), "line": line, "message": message}


def _compose(source: str, loader_class: type[Any] | None = None) -> Node | None:
    loader_class = loader_class or _LOADER
    loader = None
    try:
        loader = loader_class(source)  # the reader checks the characters here
        return loader.get_single_node()
    except _LimitError as exc:
        raise ManifestError([_error((), _mark_line(exc), str(exc.problem))])
    except yaml.MarkedYAMLError as exc:
        raise ManifestError([_error((), _mark_line(exc), _syntax_message(exc, source))])
    except yaml.YAMLError as exc:  # ReaderError: a character YAML does not allow
        position = getattr(exc, "position", None)
        line = None
        if isinstance(position, int):  # libyaml counts bytes, the Python reader characters
            if loader_class is _Loader:
                line = source[:position].count("\n") + 1
            else:
                line = source.encode()[:position].count(b"\n") + 1
        character = getattr(exc, "character", None)
        what = f"the character #x{character:04x}" if isinstance(character, int) else "a character"
        message = f"the manifest contains {what}, which YAML does not allow"
        raise ManifestError([_error((), line, message)])
    finally:
        if loader is not None:
            loader.dispose()


def _mark_line(exc: yaml.MarkedYAMLError) -> int | None:
    mark = exc.problem_mark or exc.context_mark
    return mark.line + 1 if mark is not None else None


def _syntax_message(exc: yaml.MarkedYAMLError, source: str) -> str:
    context, problem = exc.context or "", exc.problem or "invalid YAML"
    if problem.startswith("but "):  # "expected a single document…, but found another document"
        message = f"{context}, {problem}"
    elif context and exc.context_mark and exc.problem_mark:
        if exc.context_mark.line != exc.problem_mark.line:
            context = f"{context} that starts on line {exc.context_mark.line + 1}"
        message = f"{problem} ({context})"
    else:
        message = problem
    mark = exc.problem_mark
    if mark is not None and mark.line < len(lines := source.splitlines()):
        if lines[mark.line][mark.column : mark.column + 1] == "\t":
            message += "; indent with spaces, not tabs"
    return f"YAML syntax error: {message}"


# -- pass 3: construction of plain JSON values -----------------------------------------------


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag


_KIND_NAMES = {ScalarNode: "a scalar", SequenceNode: "a list", MappingNode: "a mapping"}
_TAG_KINDS = {_SEQ: SequenceNode, _MAP: MappingNode}


class _Builder:
    """Builds plain values from a measured node graph, recording the line of every path."""

    def __init__(self) -> None:
        self.errors: list[dict[str, Any]] = []
        self.lines: dict[str, int] = {}

    def build(self, node: Node, path: Path_, line: int) -> Any:
        self.lines.setdefault(_dotted(path), line)
        tag = node.tag
        if tag not in _ALLOWED_TAGS:
            self.errors.append(
                _error(
                    path,
                    node.start_mark.line + 1,
                    f"the tag {_tag_name(tag)} is not allowed: a manifest holds only strings, "
                    "numbers, booleans, null, lists and mappings",
                )
            )
            return None
        expected = _TAG_KINDS.get(tag, ScalarNode)
        if not isinstance(node, expected):
            self.errors.append(
                _error(
                    path,
                    node.start_mark.line + 1,
                    f"the tag {_tag_name(tag)} cannot be applied to {_KIND_NAMES[type(node)]}",
                )
            )
            return None
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        if isinstance(node, SequenceNode):
            return [
                self.build(child, (*path, index), child.start_mark.line + 1)
                for index, child in enumerate(node.value)
            ]
        assert isinstance(node, ScalarNode)
        return self._scalar(node, path)

    def _mapping(self, node: MappingNode, path: Path_) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode) or key_node.tag != _STR:
                if key_node.tag not in _ALLOWED_TAGS:
                    self.build(key_node, path, line)  # reports the tag
                else:
                    shown = (
                        f"the key {key_node.value} ({_tag_name(key_node.tag)[2:]})"
                        if isinstance(key_node, ScalarNode)
                        else f"{_KIND_NAMES[type(key_node)]} as a key"
                    )
                    message = f"keys must be strings (quote them); found {shown}"
                    self.errors.append(_error(path, line, message))
                continue
            key = key_node.value
            if key == "<<" and not key_node.style:  # plain (None in Python, "" in libyaml)
                self.errors.append(
                    _error(path, line, "merge keys (<<) are not supported; write the keys out")
                )
                continue
            if key in first_lines:
                self.errors.append(
                    _error(
                        (*path, key),
                        line,
                        f"duplicate key '{key}' (first on line {first_lines[key]})",
                    )
                )
                continue
            first_lines[key] = line
            result[key] = self.build(value_node, (*path, key), line)
        return result

    def _scalar(self, node: ScalarNode, path: Path_) -> Any:
        tag, value = node.tag, node.value
        if tag == _STR:
            return value
        if not _CORE_SCALARS[tag].fullmatch(value):
            self.errors.append(
                _error(
                    path,
                    node.start_mark.line + 1,
                    f"'{value}' is not a valid {_tag_name(tag)[2:]}",
                )
            )
            return None
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return value.lower() == "true"
        if tag == _INT:
            try:
                if value.startswith("0o"):
                    return int(value[2:], 8)
                if value.startswith("0x"):
                    return int(value[2:], 16)
                return int(value, 10)
            except ValueError:  # more digits than Python converts
                message = f"the integer '{value[:20]}…' is too long"
        else:
            number = math.inf if value.lower().lstrip("+-") in (".inf", ".nan") else float(value)
            if math.isfinite(number):
                return number
            message = f"'{value}' is not a finite number (infinities and NaN are not allowed)"
        self.errors.append(_error(path, node.start_mark.line + 1, message))
        return None


def parse_with_lines(source: str) -> tuple[dict[str, Any], dict[str, int]]:
    """YAML text -> (document, line of every path). Raises ManifestError."""
    node = _compose(source)
    if node is None:
        raise ManifestError([_error((), None, "the manifest is empty")])
    builder = _Builder()
    data = builder.build(node, (), node.start_mark.line + 1)
    if builder.errors:
        raise ManifestError(_sorted(builder.errors))
    if not isinstance(data, dict):
        raise ManifestError(
            [
                _error(
                    (),
                    node.start_mark.line + 1,
                    "a manifest must be a mapping of keys to values (kind: …, name: …), "
                    f"not {_describe(data)}",
                )
            ]
        )
    return data, builder.lines


# -- pass 4: validation ----------------------------------------------------------------------


@cache
def _schema(kind: str) -> dict[str, Any]:
    text = resources.files("predictors").joinpath("schemas", f"{kind}.schema.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


@cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(_schema(kind))


def _validate(data: dict[str, Any], expected: str | None, lines: dict[str, int]) -> list[dict]:
    problems: list[tuple[Path_, str]] = []
    kind = data.get("kind")
    if "kind" not in data:
        problems.append((("kind",), "'kind' is required: model or dataset"))
        kind = expected
    elif kind not in KINDS:
        problems.append((("kind",), f"{_show(kind)} is not one of model, dataset"))
        kind = None
    elif expected is not None and kind != expected:
        problems.append((("kind",), f"expected a {expected} manifest, got a {kind} manifest"))
        kind = None
    if kind is not None:
        for error in _validator(kind).iter_errors(data):
            problems.extend(_schema_problems(error))
        problems.extend(_semantic_problems(data, kind))
    seen: set[tuple[Path_, str]] = set()
    errors = []
    for path, message in problems:
        if (path, message) not in seen:
            seen.add((path, message))
            errors.append(_error(path, _line(lines, path), message))
    return _sorted(errors)


def _sorted(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(errors, key=lambda e: (e["line"] is None, e["line"] or 0))


def _line(lines: dict[str, int], path: Path_) -> int | None:
    """The line of `path`, or of its nearest parent that exists in the document."""
    for end in range(len(path), -1, -1):
        line = lines.get(_dotted(path[:end]))
        if line is not None:
            return line
    return None


def _dotted(path: Iterable[str | int]) -> str:
    return ".".join(str(part) for part in path)


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


def _schema_problems(error: jsonschema.ValidationError) -> Iterator[tuple[Path_, str]]:
    path: Path_ = tuple(error.absolute_path)
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
        yield (*path, value), f"{_show(value)} {message}"
    elif keyword == "type":
        types = [expected] if isinstance(expected, str) else list(expected)
        if types == ["boolean"]:
            wanted = "true or false"
        else:
            names = [_TYPE_NAMES.get(t, t).replace("true or false", "a boolean") for t in types]
            wanted = " or ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
        yield path, f"must be {wanted}, not {_describe(value)}"
    elif keyword == "enum":
        options = ", ".join(str(option) for option in expected)
        hint = _did_you_mean(value, [str(o) for o in expected]) if isinstance(value, str) else ""
        yield path, f"{_show(value)} is not one of {options}{hint}"
    elif keyword == "const":
        yield path, f"must be {_show(expected)}, not {_show(value)}"
    elif keyword == "pattern":
        message = _PATTERN_MESSAGES.get(expected, f"does not match the pattern {expected}")
        yield path, f"{_show(value)} {message}"
    elif keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        relation = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "greater than",
            "exclusiveMaximum": "less than",
        }[keyword]
        yield path, f"must be {relation} {expected}, not {_show(value)}"
    elif keyword in ("minItems", "maxItems"):
        count = len(value)
        bounds = error.schema
        if bounds.get("minItems") == bounds.get("maxItems"):
            yield path, f"must have exactly {_items(expected)}, not {count}"
        elif keyword == "minItems":
            yield path, f"must have at least {_items(expected)}, not {count}"
        else:
            yield path, f"must have at most {_items(expected)}, not {count}"
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


def _items(count: int) -> str:
    return f"{count} item" if count == 1 else f"{count} items"


def _did_you_mean(value: str, options: list[str]) -> str:
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    if not close:
        close = [option for option in options if option.lower() == value.lower()]
    return f" (did you mean {close[0]}?)" if close else ""


def _show(value: Any) -> str:
    """A value as a message shows it: strings quoted, others as in JSON."""
    if isinstance(value, str):
        text = value if len(value) <= 80 else value[:77] + "..."
        return "'" + text + "'"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _describe(value: Any) -> str:
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
        return f"the number {_show(value)}"
    return f"the string {_show(value)}"


# -- cross-field rules -----------------------------------------------------------------------

_REPO = "repo://"
_HTTPS = "https://"
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_CHANNELS = {"GRAY": 1, "RGB": 3, "BGR": 3}


def _namespace(kind: str, name: str, version: str) -> str:
    return f"{kind}s/{name}/{version}"


def _nul_problems(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    """Strings (keys included) holding a NUL character, which no database stores."""
    if isinstance(value, str):
        if "\x00" in value:
            yield path, "contains a NUL character (\\0), which is not allowed"
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                yield path, "has a key containing a NUL character (\\0), which is not allowed"
            yield from _nul_problems(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nul_problems(item, (*path, index))


def _semantic_problems(data: dict[str, Any], kind: str) -> Iterator[tuple[Path_, str]]:
    yield from _nul_problems(data)
    name, version = data.get("name"), data.get("version")
    version_ok = False
    if isinstance(version, str):
        if not versioning.is_valid_version(version):
            message = (
                f"{_show(version)} is not a semantic version: expected MAJOR.MINOR.PATCH "
                "with no leading zeros, e.g. 1.0.0 or 2.1.0-rc.1"
            )
            yield ("version",), message
        elif "+" in version:
            message = (
                f"{_show(version)} has build metadata (+…), which semver ignores when "
                "comparing versions; use a pre-release (-…) or a new version instead"
            )
            yield ("version",), message
        else:
            version_ok = True
    framework = data.get("framework")
    if kind == "model" and isinstance(framework, dict):
        spec = framework.get("version")
        if isinstance(spec, str):
            try:
                versioning.validate_range(spec)
            except versioning.InvalidRange as exc:
                detail = str(exc).rpartition("': ")[2]  # drop the range, quoted again
                message = (
                    f"{_show(spec)} is not a valid version range ({detail}); write an npm range "
                    'such as ">=2.0.0 <3.0.0" or "^1.16"'
                )
                yield ("framework", "version"), message
    if kind == "model":
        for field in custom_code.FIELDS:
            problem = custom_code.check_source(field, data.get(field))
            if problem:
                yield (field,), problem
        for index, entry in _entries(data.get("inputs")):
            parameters = entry.get("parameters")
            if entry.get("type") == "image" and isinstance(parameters, dict):
                yield from _image_problems(parameters, ("inputs", index, "parameters"))
        for index, entry in _entries(data.get("outputs")):
            parameters = entry.get("parameters")
            if isinstance(parameters, dict) and entry.get("type") not in _UNLABELLED_OUTPUTS:
                yield from _labels_problems(parameters, ("outputs", index, "parameters"))
                for key, task, what in _TASK_PARAMETERS:
                    if key in parameters and data.get("task") != task:
                        yield (
                            ("outputs", index, "parameters", key),
                            f"is read for {task} models only ({what}); this is a "
                            f"{data.get('task')} model",
                        )
                labels = parameters.get("labels")
                if (
                    str(entry.get("type")).startswith("binary_")
                    and isinstance(labels, list)
                    and len(labels) != 2
                ):
                    message = (
                        f"has {_items(len(labels)).replace('item', 'label')}; a "
                        f"{entry.get('type')} output reads two classes (the second is the "
                        "positive one)"
                    )
                    yield ("outputs", index, "parameters", "labels"), message
        yield from _port_problems(data)
    else:
        yield from _labels_problems(data, ())
    namespace = None
    if isinstance(name, str) and _SLUG.fullmatch(name) and version_ok:
        namespace = _namespace(kind, name, str(version))
    for path, uri, sha_path, sha in _file_refs(data, kind):
        yield from _file_problems(path, uri, sha_path, sha, namespace)


# Output parameters that one task reads: (key, task, what it says).
_TASK_PARAMETERS = (
    ("layout", "semantic_segmentation", "where the per-pixel class axis is"),
    ("threshold", "multi_label_classification", "the probability from which a class is predicted"),
)
# Outputs that carry no class names: states, a detector's boxes and scores, and tensors.
_UNLABELLED_OUTPUTS = ("state", "boxes", "scores", "tensor")
# The most elements a constant input's value may hold.
MAX_CONSTANT_ELEMENTS = 4096
_INTEGER_TYPES = ("uint8", "int8", "int32", "int64")


def _port_problems(data: dict[str, Any]) -> Iterator[tuple[Path_, str]]:
    """The rules across inputs and outputs: every state input takes a state output and every state output goes to one state input; a constant's value is a
    rectangular array of numbers of its element type; a state's batch axis fits its shape."""
    outputs = list(_entries(data.get("outputs")))
    state_outputs = {
        str(entry.get("name")): index for index, entry in outputs if entry.get("type") == "state"
    }
    carried: dict[str, int] = {}
    for index, entry in _entries(data.get("inputs")):
        parameters = entry.get("parameters")
        if not isinstance(parameters, dict):
            continue
        where: Path_ = ("inputs", index, "parameters")
        if entry.get("type") == "state":
            source = parameters.get("from_output")
            if isinstance(source, str):
                if source not in state_outputs:
                    names = ", ".join(state_outputs) or "none"
                    yield (
                        (*where, "from_output"),
                        (
                            f"{_show(source)} is not a state output of this model (its state "
                            f"outputs: {names})"
                        ),
                    )
                elif source in carried:
                    yield (
                        (*where, "from_output"),
                        (
                            f"{_show(source)} is already carried to input {carried[source]}; a state "
                            "output goes to one state input"
                        ),
                    )
                else:
                    carried[source] = index
            shape, axis = parameters.get("shape"), parameters.get("batch_axis")
            if isinstance(shape, list) and isinstance(axis, int) and axis > len(shape):
                yield (
                    (*where, "batch_axis"),
                    (
                        f"{axis} is past the tensor's last axis: the state has shape {_show(shape)} "
                        f"without the batch axis, so the batch axis is 0 to {len(shape)}"
                    ),
                )
        elif entry.get("type") == "constant" and "value" in parameters:
            problem = _constant_problem(parameters.get("value"), parameters.get("element_type"))
            if problem:
                yield (*where, "value"), problem
    for name, index in state_outputs.items():
        if name not in carried:
            yield (
                ("outputs", index),
                (
                    f"state output {_show(name)} is carried to no input: name it in a state input's "
                    "from_output"
                ),
            )


def _constant_problem(value: Any, element_type: Any) -> str | None:
    def numbers(item: Any) -> bool:
        if isinstance(item, list):
            return all(numbers(v) for v in item)
        return _is_number(item)

    if not numbers(value):
        return "must be a number or a nested list of numbers"
    try:
        array = np.asarray(value, dtype=np.float64)
    except ValueError:
        return "the lists of one level must all have the same length"
    except OverflowError:
        return "holds a number too large for any element type"
    if array.size > MAX_CONSTANT_ELEMENTS:
        return f"holds {array.size} numbers; a constant holds at most {MAX_CONSTANT_ELEMENTS}"
    if not np.all(np.isfinite(array)):
        return "must hold finite numbers"
    if element_type in _INTEGER_TYPES:
        if not np.all(array == np.round(array)):
            return f"must hold whole numbers for element type {element_type}"
        limits = np.iinfo(element_type)
        if array.size and (array.min() < limits.min or array.max() > limits.max):
            return f"holds numbers outside {element_type}'s {limits.min}..{limits.max}"
    elif element_type in ("float16", "float32") and array.size:
        largest = float(np.finfo(element_type).max)
        if np.abs(array).max() > largest:
            return f"holds numbers beyond {element_type}'s largest, {largest:g}"
    return None


def _entries(value: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    if isinstance(value, list):
        for index, entry in enumerate(value):
            if isinstance(entry, dict):
                yield index, entry


def _labels_problems(where: dict[str, Any], path: Path_) -> Iterator[tuple[Path_, str]]:
    if "labels" in where and "labels_path" in where:
        message = "labels and labels_path are exclusive: give the labels inline or in a file"
        yield (*path, "labels_path"), message
    elif "labels" not in where and "labels_path" not in where:
        message = "'labels' (or 'labels_path') is required: the class names, by class index"
        yield (*path, "labels"), message


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _geometry_problems(parameters: dict[str, Any], path: Path_) -> Iterator[tuple[Path_, str]]:
    """The rules of the optional geometry steps (`resize_side`, `pad`) beyond the schema."""
    side, pad = parameters.get("resize_side"), parameters.get("pad")
    if isinstance(side, dict):
        where = (*path, "resize_side")
        if parameters.get("resize_size") is not None or parameters.get("keep_aspect_ratio"):
            yield where, "resizes by one side: resize_size must be null and keep_aspect_ratio false"
        size, cap, step = side.get("size"), side.get("max_size"), side.get("multiple_of")
        if side.get("side") == "longer" and cap is not None:
            yield (*where, "max_size"), "must be null with side longer (that side is size)"
        if isinstance(cap, int) and isinstance(step, int) and step > 0 and cap % step:
            yield (*where, "max_size"), f"{_show(cap)} is not a multiple of multiple_of {step}"
        if _is_number(size) and _is_number(cap) and cap < size:
            yield (*where, "max_size"), f"{_show(cap)} is smaller than size {_show(size)}"
        if (
            side.get("side") in ("height", "width")
            and isinstance(size, int)
            and isinstance(step, int)
            and step > 0
            and size % step
        ):
            yield (*where, "size"), f"{_show(size)} is not a multiple of multiple_of {step}"
    if isinstance(pad, dict):
        where = (*path, "pad")
        if (pad.get("size") is None) == (pad.get("multiple_of") is None):
            yield (*where, "size"), "give exactly one of size and multiple_of"
        channels = _CHANNELS.get(str(parameters.get("color_mode")))
        value = pad.get("value")
        if channels is not None and isinstance(value, list) and len(value) not in (1, channels):
            yield (*where, "value"), f"give one value, or one per channel ({channels})"


def _image_problems(parameters: dict[str, Any], path: Path_) -> Iterator[tuple[Path_, str]]:
    get = parameters.get
    crop_method, crop_size, resize_size = get("crop_method"), get("crop_size"), get("resize_size")
    if crop_method == "center" and crop_size is None:
        yield (*path, "crop_size"), "must be [height, width] when crop_method is center"
    if crop_method == "none" and crop_size is not None:
        yield (*path, "crop_size"), "must be null when crop_method is none"
    if (
        crop_method == "center"
        and _is_size(crop_size)
        and _is_size(resize_size)
        and (crop_size[0] > resize_size[0] or crop_size[1] > resize_size[1])
    ):
        message = f"{_show(crop_size)} is larger than resize_size {_show(resize_size)}"
        yield (*path, "crop_size"), message
    if (
        get("keep_aspect_ratio") is True
        and "resize_size" in parameters
        and resize_size is None
        and get("resize_side") is None
    ):
        message = "must be false when resize_size is null (there is no resize)"
        yield (*path, "keep_aspect_ratio"), message
    yield from _geometry_problems(parameters, path)
    channels = _CHANNELS.get(str(get("color_mode")))
    if channels is not None:
        for key in ("mean", "std"):
            values = get(key)
            if isinstance(values, list) and values and len(values) != channels:
                unit = "channel" if channels == 1 else "channels"
                message = (
                    f"has {_items(len(values)).replace('item', 'value')} but color_mode "
                    f"{get('color_mode')} has {channels} {unit}: give one value per channel"
                )
                yield (*path, key), message
    mean, scale = get("mean"), get("scale")
    if (
        get("normalization_order") == "normalize_then_convert"
        and isinstance(mean, list)
        and _is_number(scale)
        and scale > 0
    ):
        for index, value in enumerate(mean):
            if _is_number(value) and not 0 <= round(value * scale) <= 255:
                message = (
                    f"{_show(value)} times scale {_show(scale)} is outside 0..255: "
                    "normalize_then_convert subtracts the mean in byte space"
                )
                yield (*path, "mean", index), message


def _is_size(value: Any) -> TypeGuard[list[Any]]:
    return isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value)


def file_urls(data: dict[str, Any], kind: str) -> set[str]:
    """Every file URL (`repo://…`, `https://…`) a manifest's document names."""
    return {uri for _, uri, _, _ in _file_refs(data, kind) if isinstance(uri, str)}


def _file_refs(data: dict[str, Any], kind: str) -> Iterator[tuple[Path_, Any, Path_ | None, Any]]:
    """(path, uri, sha256 path or None, sha256) for every file a manifest names."""
    if kind == "model":
        files = data.get("model")
        if isinstance(files, dict):
            for stem in ("graph", "weights"):
                if files.get(f"{stem}_path") is not None:
                    yield (
                        ("model", f"{stem}_path"),
                        files[f"{stem}_path"],
                        ("model", f"{stem}_sha256"),
                        files.get(f"{stem}_sha256"),
                    )
        for index, entry in _entries(data.get("outputs")):
            parameters = entry.get("parameters")
            if isinstance(parameters, dict) and "labels_path" in parameters:
                path = ("outputs", index, "parameters", "labels_path")
                yield path, parameters["labels_path"], None, None
    else:
        if "labels_path" in data:
            yield ("labels_path",), data["labels_path"], None, None
        splits = data.get("splits")
        if isinstance(splits, dict):
            for split, entry in splits.items():
                if isinstance(entry, dict) and "path" in entry:
                    yield (
                        ("splits", split, "path"),
                        entry["path"],
                        ("splits", split, "sha256"),
                        entry.get("sha256"),
                    )


def _file_problems(
    path: Path_, uri: Any, sha_path: Path_ | None, sha: Any, namespace: str | None
) -> Iterator[tuple[Path_, str]]:
    if not isinstance(uri, str):
        return
    if uri.startswith(_REPO):
        problem = _repo_path_problem(uri[len(_REPO) :], namespace)
        if problem:
            yield path, f"{_show(uri)} {problem}"
    elif uri.startswith(_HTTPS):
        try:
            parts = urlsplit(uri)
            host = parts.hostname
        except ValueError:  # e.g. an unclosed [IPv6] host
            host = None
        if not host or any(c.isspace() for c in uri):
            yield path, f"{_show(uri)} is not a valid https:// URL"
        elif parts.username is not None or parts.password is not None:
            yield path, f"{_show(uri)} holds credentials; a manifest must not"
        if sha_path is not None and sha is None:
            message = (
                f"'{sha_path[-1]}' is required when '{path[-1]}' is an https:// URL "
                "(the download is checked against it)"
            )
            yield sha_path, message


def _repo_path_problem(relative: str, namespace: str | None) -> str | None:
    where = f"repo://{namespace}/" if namespace else "repo://<kind>s/<name>/<version>/"
    if "\\" in relative:
        return "contains a backslash; separate path segments with '/'"
    if relative.startswith("/"):
        return f"is absolute; a repo:// path is relative to the artifact store, e.g. {where}…"
    if len(relative) > MAX_REPO_PATH:
        return f"is longer than {MAX_REPO_PATH} characters"
    for segment in relative.split("/"):
        if segment == "":
            return "has an empty path segment"
        if segment in (".", ".."):
            return f"has a '{segment}' segment; repo:// paths cannot leave their folder"
        if not _SEGMENT.fullmatch(segment):
            return f"has the segment {_show(segment)}: use only letters, digits, '.', '_' and '-'"
    if namespace is not None and not relative.startswith(namespace + "/"):
        return f"is outside this manifest's folder: its files must be under {where}"
    return None


# -- results and overrides -------------------------------------------------------------------


def _manifest(data: dict[str, Any], source: str) -> Manifest:
    kind = data["kind"]
    framework = data.get("framework") or {}
    return Manifest(
        kind=kind,
        name=data["name"],
        version=data["version"],
        framework=framework.get("name", ""),
        framework_range=framework.get("version", ""),
        task=data["task"],
        visibility=data.get("visibility"),
        data=data,
        source=source,
    )


# Fields an override may not change: what decides where and how a job runs, which the hub
# reads from the stored manifest (custom code goes only to hosts that opt in), and what the
# result is marked with.
_NOT_OVERRIDDEN = {
    field: f"{field} cannot be overridden: custom code runs only where its manifest is "
    "routed (hosts that opt in); publish a version of the manifest with the code instead"
    for field in ("preprocess", "postprocess")
} | {
    name: f"{name} cannot be overridden: publish a version of the manifest instead"
    for name in ("kind", "name", "version", "task", "framework", "container", "model", "attributes")
}


def _assign(data: dict[str, Any], assignment: str) -> dict[str, Any] | None:
    """Apply one PATH=VALUE to `data` in place; return an error, or None."""
    target, equals, text = assignment.partition("=")
    target = target.strip()
    if not equals or not target:
        return _error((), None, f"expected PATH=VALUE, got {_show(assignment)}")
    parts: list[str | int] = []
    for raw in target.split("."):
        parts.append(int(raw) if raw.isdigit() else raw)
    path = tuple(parts)
    if parts[0] in _NOT_OVERRIDDEN:
        return _error(path, None, _NOT_OVERRIDDEN[str(parts[0])])
    try:
        value = _parse_value(text)
    except ManifestError as exc:
        return _error(
            path, None, f"the value {_show(text)} is not valid YAML: " + exc.errors[0]["message"]
        )
    node: Any = data
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        here = path[: depth + 1]
        if isinstance(node, dict):
            key = str(part)
            if last:
                node[key] = value
            elif key in node:
                node = node[key]
            else:
                return _error(here, None, f"there is no field '{_dotted(here)}' to override")
        elif isinstance(node, list) and isinstance(part, int):
            if part >= len(node):
                return _error(here, None, f"there is no item '{_dotted(here)}' to override")
            if last:
                node[part] = value
            else:
                node = node[part]
        else:
            kind = "a list" if isinstance(node, list) else _describe(node)
            return _error(
                here, None, f"cannot override '{_dotted(here)}': '{_dotted(here[:-1])}' is {kind}"
            )
    return None


def _parse_value(text: str) -> Any:
    node = _compose(_decode(text, MAX_MANIFEST_BYTES))
    if node is None:
        return None
    builder = _Builder()
    value = builder.build(node, (), 1)
    if builder.errors:
        raise ManifestError(builder.errors)
    return value
