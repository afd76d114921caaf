"""What the inputs' parameters share: `ProcessingError`, the element types a model input may
have, and the checks of one parameter (one of a set of names, a size, numbers per channel)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


class ProcessingError(ValueError):
    """A processing parameter is missing or invalid, or an input cannot be processed.

    `parameter` names the manifest parameter at fault, when there is one.
    """

    def __init__(self, message: str, *, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


ELEMENT_TYPES: dict[str, type[np.generic]] = {
    "float32": np.float32,
    "float16": np.float16,
    "float64": np.float64,
    "uint8": np.uint8,
    "int8": np.int8,
    "int32": np.int32,
    "int64": np.int64,
}


def input_keys(
    kind: str, parameters: Mapping[str, Any], known: Sequence[str], required: Sequence[str]
) -> None:
    """A `kind` input's parameters (audio, bytes, text) hold only `known` keys and every
    `required` one (ProcessingError naming the first that does not)."""
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        article = "an" if kind[:1] in "aeiou" else "a"
        raise ProcessingError(
            f"unknown {kind} input parameter {unknown[0]!r}; {article} {kind} input takes "
            f"{', '.join(known)}",
            parameter=str(unknown[0]),
        )
    for name in required:
        if name not in parameters:
            raise ProcessingError(
                f"input parameter {name!r} is missing; {kind} inputs state every one of "
                f"{', '.join(required)}",
                parameter=name,
            )


# The longest side an image may have, at any step.
MAX_SIDE = 8192


def choice(
    parameters: Mapping[str, Any], name: str, choices: Sequence[str], prefix: str = ""
) -> str:
    value = parameters[name]
    if not isinstance(value, str) or value not in choices:
        raise ProcessingError(
            f"input parameter '{prefix}{name}' must be one of {', '.join(choices)}; got {value!r}",
            parameter=prefix + name,
        )
    return value


def size_parameter(parameters: Mapping[str, Any], name: str) -> tuple[int, int] | None:
    value = parameters[name]
    if value is None:
        return None
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not all(1 <= v <= MAX_SIDE for v in value)
    ):
        raise ProcessingError(
            f"input parameter {name!r} must be null or [height, width], two integers from 1 "
            f"to {MAX_SIDE}; got {value!r}",
            parameter=name,
        )
    return int(value[0]), int(value[1])


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def per_channel(
    parameters: Mapping[str, Any], name: str, channels: int, *, positive: bool = False
) -> np.ndarray:
    """A list of one number per channel; a single number is accepted and used for every channel."""
    value = parameters[name]
    items = value if isinstance(value, list | tuple) else [value]
    if not items or not all(is_number(v) for v in items) or len(items) not in (1, channels):
        raise ProcessingError(
            f"input parameter {name!r} must be a list of {channels} number(s) (one per channel "
            f"of the color mode) or of one number for every channel; got {value!r}",
            parameter=name,
        )
    if positive and not all(v > 0 for v in items):
        raise ProcessingError(
            f"input parameter {name!r} must hold numbers > 0; got {value!r}", parameter=name
        )
    return np.broadcast_to(np.asarray(items, dtype=np.float64), (channels,)).copy()


def cast_table(table: np.ndarray, element_type: str) -> np.ndarray:
    """Cast float64 values to `element_type`; integers are rounded and must fit the type."""
    dtype = np.dtype(ELEMENT_TYPES[element_type])
    if dtype.kind == "f":
        return table.astype(dtype)
    rounded = np.rint(table)
    info = np.iinfo(dtype)
    if rounded.min() < info.min or rounded.max() > info.max:
        raise ProcessingError(
            f"input parameter 'element_type' is {element_type}, but the normalized values span "
            f"{table.min():g} to {table.max():g}, outside {info.min}..{info.max}; change "
            "scale/mean/std or the element type",
            parameter="element_type",
        )
    return rounded.astype(dtype)
