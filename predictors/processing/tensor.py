"""Tensor inputs (`type: tensor`): values that are already arrays, checked against a shape and
normalized."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from predictors.processing.parameters import (
    ELEMENT_TYPES,
    ProcessingError,
    cast_table,
    choice,
    is_number,
)


class TensorPreprocessor:
    """Model inputs that are already tensors (`type: tensor`).

    Parameters: `element_type` (required); optionally `shape`, the shape of one example
    without the batch axis (null for a dynamic dimension), which every value must have; and
    `mean` and `std` together (numbers, or lists that broadcast against the last axis):
    x = (x - mean) / std, computed in float64, then cast. A value is an array-like or the bytes
    of a `.npy` file.
    """

    # `context` is the streaming loop's (`predictors.evaluation.scenarios.streams`): it needs
    # the input before in the stream.
    _KNOWN = ("element_type", "shape", "mean", "std", "context")

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        if not isinstance(parameters, Mapping):
            raise ProcessingError("tensor input parameters must be a mapping")
        unknown = sorted(set(parameters) - set(self._KNOWN))
        if unknown:
            raise ProcessingError(
                f"unknown tensor input parameter {unknown[0]!r}", parameter=str(unknown[0])
            )
        if "element_type" not in parameters:
            raise ProcessingError(
                "input parameter 'element_type' is missing", parameter="element_type"
            )
        self.element_type = choice(parameters, "element_type", tuple(ELEMENT_TYPES))
        self.shape: tuple[int | None, ...] | None = None
        if "shape" in parameters:
            shape = parameters["shape"]
            if not isinstance(shape, list | tuple) or not all(
                d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 1)
                for d in shape
            ):
                raise ProcessingError(
                    "input parameter 'shape' must be a list of sizes (>= 1, or null for a "
                    "dynamic dimension)",
                    parameter="shape",
                )
            self.shape = tuple(shape)
        if ("mean" in parameters) != ("std" in parameters):
            missing = "std" if "mean" in parameters else "mean"
            raise ProcessingError(
                "tensor inputs take 'mean' and 'std' together or neither", parameter=missing
            )
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None
        if "mean" in parameters:
            for name in ("mean", "std"):
                value = parameters[name]
                items = value if isinstance(value, list | tuple) else [value]
                if not items or not all(is_number(v) for v in items):
                    raise ProcessingError(
                        f"input parameter {name!r} must be a number or a list of numbers",
                        parameter=name,
                    )
                if name == "std" and not all(v > 0 for v in items):
                    raise ProcessingError("input parameter 'std' must be > 0", parameter="std")
                setattr(self, name, np.asarray(items, dtype=np.float64))

    def __call__(self, value: Any) -> np.ndarray:
        if isinstance(value, bytes | bytearray | memoryview):
            try:
                value = np.load(io.BytesIO(bytes(value)), allow_pickle=False)
            except ValueError as exc:
                raise ProcessingError(f"tensor input is not a .npy file: {exc}") from exc
        array = np.asarray(value)
        if self.shape is not None and (
            array.ndim != len(self.shape)
            or any(
                want is not None and want != got
                for want, got in zip(self.shape, array.shape, strict=True)
            )
        ):
            wanted = "(" + ", ".join("?" if d is None else str(d) for d in self.shape) + ")"
            raise ProcessingError(
                f"a tensor input has shape {tuple(array.shape)}, but the manifest's shape is "
                f"{wanted} ('?': any size)",
                parameter="shape",
            )
        if self.mean is None or self.std is None:
            return np.ascontiguousarray(array.astype(ELEMENT_TYPES[self.element_type]))
        try:
            normalized = (array.astype(np.float64) - self.mean) / self.std
        except ValueError as exc:
            raise ProcessingError(f"mean/std do not fit a tensor of shape {array.shape}") from exc
        return np.ascontiguousarray(cast_table(normalized, self.element_type))

    def batch(self, values: Sequence[Any]) -> np.ndarray:
        if not values:
            raise ProcessingError("a batch needs at least one tensor")
        arrays = [self(v) for v in values]
        if len({a.shape for a in arrays}) > 1:
            raise ProcessingError("tensors of one batch have different shapes")
        return np.stack(arrays)
