"""Manifest text to plain JSON values, safely: size, YAML and construction.

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
   non-finite numbers are errors too.

Every failure is a `ManifestError` that names the YAML line of the problem.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, cast

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from predictors.manifests.errors import (
    FieldPath,
    ManifestError,
    by_line,
    describe,
    dotted,
    error_at,
)

__all__ = [
    "LOADER",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "MAX_NODES",
    "Dumper",
    "PythonLoader",
    "decode",
    "parse_value",
    "parse_with_lines",
    "too_large",
]

MAX_MANIFEST_BYTES = 256 * 1024
MAX_NODES = 100_000  # nodes after alias expansion; a 256 KiB document without aliases has fewer
MAX_DEPTH = 64  # nesting levels, the root being level 1


# -- pass 1: size and text -------------------------------------------------------------------


def too_large(size: int, max_bytes: int) -> dict[str, Any]:
    """The problem of a body of `size` bytes over the limit."""
    return {
        "path": "",
        "line": None,
        "message": f"the manifest is {size:,} bytes; the limit is {max_bytes:,} bytes",
    }


def decode(text: str | bytes, max_bytes: int) -> str:
    """`text` as a str without its byte order mark, refused (413) over `max_bytes`."""
    if isinstance(text, str):
        # A str is at least as many bytes as characters: refuse the obvious case unencoded.
        size = len(text) if len(text) > max_bytes else len(text.encode("utf-8"))
        if size > max_bytes:
            raise ManifestError([too_large(size, max_bytes)], status=413)
        source = text
    else:
        if len(text) > max_bytes:
            raise ManifestError([too_large(len(text), max_bytes)], status=413)
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


class PythonLoader(_MeasuringComposer, yaml.SafeLoader):
    """The pure-Python loader: a SafeLoader whose constructor is never called."""

    yaml_implicit_resolvers = _CoreResolver.yaml_implicit_resolvers

    def __init__(self, stream: str) -> None:
        yaml.SafeLoader.__init__(self, stream)
        self._start_measuring()


# The loader every parse uses: libyaml's parser below where PyYAML has it.
LOADER: type[Any] = PythonLoader

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

    LOADER = _FastLoader


class Dumper(yaml.SafeDumper):
    """Writes YAML that reads back the same under both YAML 1.1 and the 1.2 core schema."""


for _tag, _pattern in _CORE_SCALARS.items():
    Dumper.add_implicit_resolver(_tag, re.compile(rf"^(?:{_pattern.pattern})$"), _FIRST_CHARS[_tag])


def _compose(source: str, loader_class: type[Any] | None = None) -> Node | None:
    loader_class = loader_class or LOADER
    loader = None
    try:
        loader = loader_class(source)  # the reader checks the characters here
        return loader.get_single_node()
    except _LimitError as exc:
        raise ManifestError([error_at((), _mark_line(exc), str(exc.problem))])
    except yaml.MarkedYAMLError as exc:
        raise ManifestError([error_at((), _mark_line(exc), _syntax_message(exc, source))])
    except yaml.YAMLError as exc:  # ReaderError: a character YAML does not allow
        position = getattr(exc, "position", None)
        line = None
        if isinstance(position, int):  # libyaml counts bytes, the Python reader characters
            if loader_class is PythonLoader:
                line = source[:position].count("\n") + 1
            else:
                line = source.encode()[:position].count(b"\n") + 1
        character = getattr(exc, "character", None)
        what = f"the character #x{character:04x}" if isinstance(character, int) else "a character"
        message = f"the manifest contains {what}, which YAML does not allow"
        raise ManifestError([error_at((), line, message)])
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

    def build(self, node: Node, path: FieldPath, line: int) -> Any:
        self.lines.setdefault(dotted(path), line)
        tag = node.tag
        if tag not in _ALLOWED_TAGS:
            self.errors.append(
                error_at(
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
                error_at(
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

    def _mapping(self, node: MappingNode, path: FieldPath) -> dict[str, Any]:
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
                    self.errors.append(error_at(path, line, message))
                continue
            key = key_node.value
            if key == "<<" and not key_node.style:  # plain (None in Python, "" in libyaml)
                self.errors.append(
                    error_at(path, line, "merge keys (<<) are not supported; write the keys out")
                )
                continue
            if key in first_lines:
                self.errors.append(
                    error_at(
                        (*path, key),
                        line,
                        f"duplicate key '{key}' (first on line {first_lines[key]})",
                    )
                )
                continue
            first_lines[key] = line
            result[key] = self.build(value_node, (*path, key), line)
        return result

    def _scalar(self, node: ScalarNode, path: FieldPath) -> Any:
        tag, value = node.tag, node.value
        if tag == _STR:
            return value
        if not _CORE_SCALARS[tag].fullmatch(value):
            self.errors.append(
                error_at(
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
        self.errors.append(error_at(path, node.start_mark.line + 1, message))
        return None


def parse_with_lines(source: str) -> tuple[dict[str, Any], dict[str, int]]:
    """YAML text -> (document, line of every path). Raises ManifestError."""
    node = _compose(source)
    if node is None:
        raise ManifestError([error_at((), None, "the manifest is empty")])
    builder = _Builder()
    data = builder.build(node, (), node.start_mark.line + 1)
    if builder.errors:
        raise ManifestError(by_line(builder.errors))
    if not isinstance(data, dict):
        raise ManifestError(
            [
                error_at(
                    (),
                    node.start_mark.line + 1,
                    "a manifest must be a mapping of keys to values (kind: …, name: …), "
                    f"not {describe(data)}",
                )
            ]
        )
    return data, builder.lines


def parse_value(text: str) -> Any:
    """One YAML value (`BGR`, `0.5`, `[256, 256]`) as a plain JSON value; raises ManifestError."""
    node = _compose(decode(text, MAX_MANIFEST_BYTES))
    if node is None:
        return None
    builder = _Builder()
    value = builder.build(node, (), 1)
    if builder.errors:
        raise ManifestError(builder.errors)
    return value
