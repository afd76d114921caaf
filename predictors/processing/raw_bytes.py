"""Raw bytes inputs (`type: bytes`): a file's own bytes, whatever they hold, as a row of
integers (one per byte, 0 to 255) taken from its start and its end, as file-type classifiers
read a file.

Parameters (all required):

- `block_size`: the most bytes read from each end of the file (all of it when it is shorter):
  the start slices are taken from the first `block_size` bytes, the end slices from the last;
- `strip`: `whitespace` (the start block's leading and the end block's trailing ASCII
  whitespace, space, tab, newline, carriage return, vertical tab and form feed, are left out
  first, as Python's `bytes.lstrip()` / `bytes.rstrip()` do) or `none`;
- `slices`: the slices of the input, in order, concatenated: each `{from: start, size: N}`
  (the first N bytes of the start block) or `{from: end, size: N}` (its last N bytes); N at
  most `block_size`;
- `pad_value`: an integer that stands for a byte the file lacks (a short file, or one mostly
  whitespace): a start slice is padded after its bytes, an end slice before them, so that the
  padding always lies away from the file's edge (e.g. 256, a value no byte has);
- `element_type`: an integer type that holds every byte and `pad_value`: `int32`, `int64`,
  `int16`, `uint16` or `uint8`.

An input is an (F,) array, F the sum of the slices' sizes; a batch is (N, F). The dataset of
such a model has `encoding: raw`: its `image` column holds each file's bytes as they are.

Magika's feature extraction (`magika.Magika._extract_features_from_seekable`, standard_v3_3)
is `block_size: 4096`, `strip: whitespace`, `slices: [{from: start, size: 1024}, {from: end,
size: 1024}]`, `pad_value: 256`, `element_type: int32`. What it does besides, for files under
its `min_file_size_for_dl` bytes (after stripping), is decided by rules without the model and
has no parameter here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError, input_keys

PARAMETERS = ("block_size", "strip", "slices", "pad_value", "element_type")
STRIP_MODES = ("whitespace", "none")
SLICE_ENDS = ("start", "end")
# The integer types a row of bytes may be fed as.
BYTES_ELEMENT_TYPES: dict[str, type[np.integer]] = {
    "int32": np.int32,
    "int64": np.int64,
    "int16": np.int16,
    "uint16": np.uint16,
    "uint8": np.uint8,
}
# The longest block read from each end, and the longest row.
MAX_BLOCK = 1 << 24
MAX_FEATURES = 1 << 20
# Python's `bytes.strip()` whitespace: space, \t, \n, \r, \v, \f.
WHITESPACE = b" \t\n\r\x0b\x0c"


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class RawBytesPreprocessor:
    """A file's bytes into a row of integers (see the module docstring)."""

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        if not isinstance(parameters, Mapping):
            raise ProcessingError("bytes input parameters must be a mapping")
        input_keys("bytes", parameters, PARAMETERS, PARAMETERS)
        block = parameters["block_size"]
        if not _integer(block) or not 1 <= block <= MAX_BLOCK:
            raise ProcessingError(
                f"input parameter 'block_size' must be an integer from 1 to {MAX_BLOCK} (the "
                f"bytes read from each end of the file); got {block!r}",
                parameter="block_size",
            )
        self.block_size: int = block
        strip = parameters["strip"]
        if strip not in STRIP_MODES:
            raise ProcessingError(
                f"input parameter 'strip' must be one of {', '.join(STRIP_MODES)}; got {strip!r}",
                parameter="strip",
            )
        self.strip: str = strip
        self.slices: list[tuple[str, int]] = self._slices(parameters["slices"])
        element_type = parameters["element_type"]
        if element_type not in BYTES_ELEMENT_TYPES:
            raise ProcessingError(
                "input parameter 'element_type' of a bytes input must be an integer type that "
                f"holds a byte (0 to 255), one of {', '.join(BYTES_ELEMENT_TYPES)}; got "
                f"{element_type!r}",
                parameter="element_type",
            )
        self.element_type: str = element_type
        self.dtype = np.dtype(BYTES_ELEMENT_TYPES[element_type])
        info = np.iinfo(self.dtype)
        pad = parameters["pad_value"]
        if not _integer(pad) or not info.min <= pad <= info.max:
            raise ProcessingError(
                f"input parameter 'pad_value' must be an integer that {element_type} holds "
                f"({info.min} to {info.max}); got {pad!r}",
                parameter="pad_value",
            )
        self.pad_value: int = pad

    def _slices(self, value: Any) -> list[tuple[str, int]]:
        if not isinstance(value, list | tuple) or not value:
            raise ProcessingError(
                "input parameter 'slices' must be a non-empty list of {from: start|end, "
                f"size: N}}; got {value!r}",
                parameter="slices",
            )
        slices: list[tuple[str, int]] = []
        for index, entry in enumerate(value):
            where = f"slices.{index}"
            if not isinstance(entry, Mapping) or set(entry) != {"from", "size"}:
                raise ProcessingError(
                    f"input parameter '{where}' must be {{from: start|end, size: N}} (both keys, "
                    f"no other); got {entry!r}",
                    parameter=where,
                )
            if entry["from"] not in SLICE_ENDS:
                raise ProcessingError(
                    f"input parameter '{where}.from' must be one of {', '.join(SLICE_ENDS)}; "
                    f"got {entry['from']!r}",
                    parameter=f"{where}.from",
                )
            size = entry["size"]
            if not _integer(size) or not 1 <= size <= self.block_size:
                raise ProcessingError(
                    f"input parameter '{where}.size' must be an integer from 1 to block_size "
                    f"({self.block_size}); got {size!r}",
                    parameter=f"{where}.size",
                )
            slices.append((str(entry["from"]), size))
        total = sum(size for _, size in slices)
        if total > MAX_FEATURES:
            raise ProcessingError(
                f"input parameter 'slices' sums to {total} bytes, more than {MAX_FEATURES}",
                parameter="slices",
            )
        return slices

    @property
    def features(self) -> int:
        """The length of one input: the sum of the slices' sizes."""
        return sum(size for _, size in self.slices)

    def blocks(self, data: bytes) -> tuple[bytes, bytes]:
        """The start and end blocks of a file: at most `block_size` bytes from each end,
        stripped as `strip` says."""
        start, end = data[: self.block_size], data[-self.block_size :]
        if self.strip == "whitespace":
            start, end = start.lstrip(WHITESPACE), end.rstrip(WHITESPACE)
        return start, end

    def __call__(self, value: Any) -> np.ndarray:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ProcessingError(f"a bytes input takes a file's bytes; got {type(value).__name__}")
        start, end = self.blocks(bytes(value))
        row = np.full(self.features, self.pad_value, dtype=self.dtype)
        offset = 0
        for side, size in self.slices:
            if side == "start":
                taken = np.frombuffer(start[:size], dtype=np.uint8)
                row[offset : offset + len(taken)] = taken
            else:
                taken = np.frombuffer(end[-size:], dtype=np.uint8)
                row[offset + size - len(taken) : offset + size] = taken
            offset += size
        return row

    def batch(self, values: Sequence[Any]) -> np.ndarray:
        if not values:
            raise ProcessingError("a batch needs at least one file")
        return np.stack([self(value) for value in values])
