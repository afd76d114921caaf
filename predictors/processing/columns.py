"""Several inputs from the dataset, each from a column of its own (an image and a tensor, two
images, a text and a tensor): a row's values preprocessed each by its own input's type and
parameters, and fed each to its own input of the model.

The loop drives every model through one array per batch, batch axis first (staged, timed,
cut into rows). A batch of such a model is its inputs packed side by side: each input's rows
as bytes, (N, B) uint8, B the sum of one row's bytes of every input (`ColumnsPreprocessor`).
The predictor takes a packed batch apart again into the model's inputs, each of its own
element type and row shape (`unpack`, by `predictors.frameworks.feeds.SeveralFeeds`), inside
the timed call: a copy of the rows, microseconds next to the model's own work. Every row of
one input has one shape: each input is batched as the model takes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError

__all__ = ["ColumnsPreprocessor", "Layout"]


@dataclass(frozen=True)
class Layout:
    """One input's place in a packed row: its name, element type and row shape."""

    name: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    @property
    def bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def show(self) -> str:
        return f"{self.name} ({self.dtype}, {self.shape})"


class ColumnsPreprocessor:
    """The inputs `names` (the model's data inputs, in order) preprocessed by `preprocessors`,
    each from its value of a row (a tuple, in the inputs' order), packed (see the module
    docstring). The layout is the first batch's; every later batch must keep it."""

    def __init__(self, names: Sequence[str], preprocessors: Sequence[Any]) -> None:
        if len(names) != len(preprocessors) or len(names) < 2:
            raise ValueError("several inputs, each with its preprocessor")
        self.names = [str(name) for name in names]
        self.preprocessors = list(preprocessors)
        self.layout: tuple[Layout, ...] | None = None

    def __call__(self, value: Any) -> np.ndarray:
        return self.batch([value])[0]

    def batch(self, values: Sequence[Any]) -> np.ndarray:
        if not values:
            raise ProcessingError("a batch needs at least one row")
        arrays = []
        for index, (name, preprocessor) in enumerate(
            zip(self.names, self.preprocessors, strict=True)
        ):
            column = []
            for row in values:
                if not isinstance(row, tuple) or len(row) != len(self.names):
                    raise ProcessingError(
                        f"a row of a model fed {len(self.names)} columns holds one value per "
                        f"column; got {type(row).__name__}"
                    )
                column.append(row[index])
            try:
                arrays.append(np.ascontiguousarray(preprocessor.batch(column)))
            except ProcessingError as error:
                raise ProcessingError(f"input {name}: {error}", parameter=error.parameter) from None
        layout = tuple(
            Layout(name, array.dtype, tuple(int(d) for d in array.shape[1:]))
            for name, array in zip(self.names, arrays, strict=True)
        )
        if self.layout is None:
            self.layout = layout
        elif layout != self.layout:
            changed = next(
                (new, old) for new, old in zip(layout, self.layout, strict=True) if new != old
            )
            raise ProcessingError(
                f"input {changed[0].name} gives rows of {changed[0].dtype} {changed[0].shape} "
                f"here, {changed[1].dtype} {changed[1].shape} before: each input of a model fed "
                "several columns is batched, its rows of one shape"
            )
        rows = len(values)
        return np.concatenate(
            [array.reshape(rows, -1).view(np.uint8).reshape(rows, -1) for array in arrays],
            axis=1,
        )

    def is_packed(self, batch: Any) -> bool:
        """Whether `batch` is a packed batch (rather than one input's own)."""
        return (
            isinstance(batch, np.ndarray)
            and batch.dtype == np.uint8
            and batch.ndim == 2
            and self.layout is not None
            and batch.shape[1] == sum(entry.bytes for entry in self.layout)
        )

    def unpack(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        """A packed batch as the model's inputs, by name, each of its own type and shape."""
        if self.layout is None:
            raise ProcessingError("no batch was packed yet: the inputs' layout is unknown")
        width = sum(entry.bytes for entry in self.layout)
        if batch.ndim != 2 or batch.dtype != np.uint8 or batch.shape[1] != width:
            raise ProcessingError(
                f"a packed batch of {', '.join(e.show() for e in self.layout)} is (N, {width}) "
                f"uint8; got {batch.dtype} {tuple(batch.shape)}"
            )
        rows, start, feeds = batch.shape[0], 0, {}
        for entry in self.layout:
            part = np.ascontiguousarray(batch[:, start : start + entry.bytes])
            feeds[entry.name] = part.view(entry.dtype).reshape((rows, *entry.shape))
            start += entry.bytes
        return feeds


def columns_preprocessor(
    inputs: Sequence[Mapping[str, Any]], build: Any
) -> ColumnsPreprocessor | None:
    """The preprocessor of a model's data inputs where it takes several (each built by
    `build(spec)`); None where it takes one."""
    if len(inputs) < 2:
        return None
    return ColumnsPreprocessor(
        [str(entry["name"]) for entry in inputs], [build(entry) for entry in inputs]
    )
