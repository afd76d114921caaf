"""Frozen dataclasses as JSON objects: `Record.to_dict`, and `Record.from_dict`, a strict reader
driven by the fields' types, that refuses an unknown key or a value of the wrong type with a
`ProtocolError` naming its path (`batch_sizes.0.latency.p50_ms`).

The types it reads: `bool`, `int`, `float` (an integer is a number too), `str`, `None`, `Any`
(any JSON value, as given), `list[T]`, `dict[str, T]`, a `Record`, and unions of them; of a
union of Records, the first whose fields hold every key given. A field typed `Maybe[T]` may be
left out: it is then `ABSENT` (JSON's missing key, apart from `null`), and `to_dict` leaves it
out again, so that `from_dict(d).to_dict() == d`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Final, Self, TypeAlias, TypeVar

from predictors.protocol.errors import ProtocolError, mapping

__all__ = ["ABSENT", "Absent", "Maybe", "Record", "plain", "present", "read"]


class Absent(enum.Enum):
    """A key left out (JSON's missing key, apart from `null`)."""

    ABSENT = "absent"

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = Absent.ABSENT

T = TypeVar("T")
Maybe: TypeAlias = T | Absent
"""`Maybe[T]`: a field that may be left out (`ABSENT`)."""

# The plural a list of one scalar type is refused with ("must hold numbers only").
_PLURALS = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
_NAMES = {bool: "a boolean", int: "an integer", float: "a finite number", str: "a string"}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _where(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def _is_scalar(kind: Any, value: Any) -> bool:
    """Whether `value` is of the scalar type `kind` (a bool is no number)."""
    if kind is float:  # JSON has no NaN nor infinity
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _name(kind: Any) -> str:
    """A type as a refusal names it."""
    if kind is type(None):
        return "null"
    if kind in _NAMES:
        return _NAMES[kind]
    origin = typing.get_origin(kind)
    if origin is list:
        return "a list"
    if origin is dict or (isinstance(kind, type) and issubclass(kind, Record)):
        return "an object"
    return getattr(kind, "__name__", str(kind))


def read(value: Any, kind: Any, path: str) -> Any:
    """`value` read as `kind` (see the module docstring), or ProtocolError naming `path`."""
    if kind is Any:
        return value
    origin = typing.get_origin(kind)
    if origin is typing.Union or origin is types.UnionType:
        return _read_union(value, [k for k in typing.get_args(kind) if k is not Absent], path)
    if kind is type(None):
        if value is not None:
            raise ProtocolError(path, f"must be null; got {_shown(value)}")
        return None
    if kind in _NAMES:
        if not _is_scalar(kind, value):
            raise ProtocolError(path, f"must be {_NAMES[kind]}; got {_shown(value)}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(path, f"must be a list; got {_shown(value)}")
        (item,) = typing.get_args(kind)
        if item in _PLURALS:
            for index, element in enumerate(value):
                if not _is_scalar(item, element):
                    raise ProtocolError(
                        path,
                        f"must hold {_PLURALS[item]} only; item {index} is {_shown(element)}",
                    )
            return value
        return [read(element, item, _where(path, index)) for index, element in enumerate(value)]
    if origin is dict:
        _, item = typing.get_args(kind)
        for key in mapping(value, path):
            if not isinstance(key, str):  # JSON's keys are strings
                raise ProtocolError(path, f"keys must be strings; got {_shown(key)}")
        return {
            key: read(element, item, _where(path, key))
            for key, element in mapping(value, path).items()
        }
    if isinstance(kind, type) and issubclass(kind, Record):
        return kind.from_dict(value, path)
    raise TypeError(f"{path}: a Record cannot read the type {kind!r}")


def _read_union(value: Any, kinds: list[Any], path: str) -> Any:
    """`value` as the first of `kinds` it is: null, a scalar, a list, an object (of Records,
    the first whose fields hold every key given)."""
    if value is None:
        if type(None) in kinds:
            return None
        raise ProtocolError(path, f"must be {_names(kinds)}; got null")
    kinds = [kind for kind in kinds if kind is not type(None)]
    if len(kinds) == 1:
        return read(value, kinds[0], path)
    records = [k for k in kinds if isinstance(k, type) and issubclass(k, Record)]
    if records and isinstance(value, Mapping):
        for record in records:
            if set(value) <= _fields(record).keys():
                return record.from_dict(value, path)
        known = set().union(*(_fields(record).keys() for record in records))
        unknown = sorted(set(value) - known)
        if unknown:
            raise ProtocolError(_where(path, unknown[0]), "unknown field")
        # Every key is known to one of them, but no one holds them all.
        raise ProtocolError(
            path, f"no one kind of object holds all of {', '.join(sorted(map(str, value)))}"
        )
    for kind in kinds:
        try:
            return read(value, kind, path)
        except ProtocolError as error:
            if error.path != path:  # the value is of this kind; something inside it is not
                raise
    raise ProtocolError(path, f"must be {_names(kinds)}; got {_shown(value)}")


def _names(kinds: list[Any]) -> str:
    """The kinds a union takes, as a refusal names them, each once."""
    return " or ".join(dict.fromkeys(_name(kind) for kind in kinds))


# Each Record's fields, read once: each one's type, and whether it may be left out.
_FIELDS: dict[type, dict[str, tuple[Any, bool]]] = {}


def _fields(cls: type[Record]) -> dict[str, tuple[Any, bool]]:
    """A Record's fields: each one's type, and whether it may be left out."""
    found = _FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = {
            spec.name: (hints[spec.name], Absent in typing.get_args(hints[spec.name]))
            for spec in dataclasses.fields(cls)
        }
        _FIELDS[cls] = found
    return found


def present(value: Maybe[T], path: str) -> T:
    """`value`, which must not be left out: ProtocolError naming `path` where it is."""
    if value is ABSENT:
        raise ProtocolError(path, "is required")
    return value


def plain(value: Any) -> Any:
    """`value` as JSON: Records as objects, their `ABSENT` fields left out."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


@dataclasses.dataclass(frozen=True)
class Record:
    """A JSON object of known fields (see the module docstring); a subclass is a frozen
    dataclass of its own."""

    def to_dict(self) -> dict[str, Any]:
        return {
            spec.name: plain(value)
            for spec in dataclasses.fields(self)
            if (value := getattr(self, spec.name)) is not ABSENT
        }

    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> Self:
        """The record of `data`, strictly: an unknown key, a missing required one or a value
        of another type is a ProtocolError naming its path."""
        data = mapping(data, path)
        known = _fields(cls)
        unknown = sorted(key for key in data if key not in known)
        if unknown:
            raise ProtocolError(_where(path, unknown[0]), "unknown field")
        values = {}
        for name, (kind, optional) in known.items():
            if name in data:
                values[name] = read(data[name], kind, _where(path, name))
            elif not optional:
                raise ProtocolError(_where(path, name), "is required")
        return cls(**values)
