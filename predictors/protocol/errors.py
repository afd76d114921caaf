"""A message that breaks the contract, and the strict readers that say which field did."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ProtocolError(ValueError):
    """A message that breaks the contract: `path` names the field at fault."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def mapping(data: Any, path: str) -> Mapping[str, Any]:
    """`data` as an object, or ProtocolError naming `path`."""
    if not isinstance(data, Mapping):
        raise ProtocolError(path, f"must be an object; got {type(data).__name__}")
    return data


def get_field(
    data: Mapping[str, Any], path: str, key: str, kind: type, optional: bool = False
) -> Any:
    """`data[key]`, of type `kind` (None if optional and absent), or ProtocolError naming it."""
    where = f"{path}.{key}" if path else key
    value = data.get(key)
    if value is None:
        if optional:
            return None
        raise ProtocolError(where, "is required")
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ProtocolError(where, f"must be a {kind.__name__}; got {value!r}")
    return value
