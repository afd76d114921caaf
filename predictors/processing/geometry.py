"""The optional geometry steps of an image input: `resize_side` (resize by one side) and `pad`
(pad to a size or to multiples), checked from the manifest's parameters."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from predictors.processing.parameters import (
    ELEMENT_TYPES,
    MAX_SIDE,
    ProcessingError,
    choice,
    per_channel,
    size_parameter,
)

# Optional geometry steps: absent or null leaves them out (every key inside them is required).
OPTIONAL_IMAGE_PARAMETERS = ("resize_side", "pad", "pad_square")
# The most pixels pad_square makes (Pillow's own bound on a decoded image).
MAX_SQUARE_PIXELS = 89_478_485
_SIDES = ("shorter", "longer", "height", "width")
_ROUNDINGS = ("up", "down", "half_even", "half_up")
_PAD_POSITIONS = ("top_left", "center")
_RESIZE_SIDE_KEYS = ("side", "size", "max_size", "multiple_of", "rounding")
_PAD_KEYS = ("size", "multiple_of", "position", "value")


def _rounded(value: float, multiple: int, rounding: str) -> int:
    """`value` rounded to a multiple of `multiple` (at least one multiple)."""
    units = value / multiple
    if rounding == "up":
        whole = math.ceil(units)
    elif rounding == "down":
        whole = math.floor(units)
    elif rounding == "half_up":
        whole = math.floor(units + 0.5)
    else:
        whole = round(units)  # half to even
    return max(1, int(whole)) * multiple


class ResizeSide:
    """`resize_side`: resize by one side (see the schema and docs/manifest.md)."""

    def __init__(
        self, side: str, size: int, max_size: int | None, multiple_of: int, rounding: str
    ) -> None:
        self.side, self.size, self.max_size = side, size, max_size
        self.multiple_of, self.rounding = multiple_of, rounding

    def size_for(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) after the resize of a `height` x `width` image. Each computed side
        is rounded to a multiple of `multiple_of`, then capped at `max_size` (itself a
        multiple), so that the cap holds after the rounding; no side may pass MAX_SIDE."""
        step, rounding = self.multiple_of, self.rounding
        if self.side in ("height", "width"):
            # That side becomes `size`; the other follows the aspect ratio (in this order of
            # operations: size * (other / side)), rounded, then capped at max_size.
            fixed, other = (height, width) if self.side == "height" else (width, height)
            computed = _rounded(self.size * (other / fixed), step, rounding)
            if self.max_size is not None:
                computed = min(computed, self.max_size)
            size = (self.size, computed) if self.side == "height" else (computed, self.size)
        else:
            short, long = min(height, width), max(height, width)
            factor = self.size / (short if self.side == "shorter" else long)
            if self.max_size is not None and long * factor > self.max_size:
                factor = self.max_size / long
            size = (
                _rounded(height * factor, step, rounding),
                _rounded(width * factor, step, rounding),
            )
            if self.max_size is not None:
                size = (min(size[0], self.max_size), min(size[1], self.max_size))
        if max(size) > MAX_SIDE:
            raise ProcessingError(
                f"resize_side would make a {height}x{width} image {size[0]}x{size[1]}, more "
                f"than {MAX_SIDE} pixels on a side: set resize_side.max_size",
                parameter="resize_side.max_size",
            )
        return size


def _step_keys(value: Any, name: str, keys: Sequence[str]) -> None:
    """An optional step's mapping must hold exactly its keys (each required, none unknown)."""
    if not isinstance(value, Mapping) or set(value) != set(keys):
        raise ProcessingError(
            f"input parameter {name!r} must be null or a mapping of exactly "
            f"{', '.join(keys)}; got {value!r}",
            parameter=name,
        )


def parse_resize_side(value: Any) -> ResizeSide | None:
    if value is None:
        return None
    name = "resize_side"
    _step_keys(value, name, _RESIZE_SIDE_KEYS)
    side = choice(value, "side", _SIDES, "resize_side.")
    rounding = choice(value, "rounding", _ROUNDINGS, "resize_side.")

    def integer(key: str, low: int, high: int, nullable: bool = False) -> int | None:
        item = value[key]
        if item is None and nullable:
            return None
        if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= high:
            raise ProcessingError(
                f"input parameter '{name}.{key}' must be an integer from {low} to {high}"
                + (" or null" if nullable else "")
                + f"; got {item!r}",
                parameter=f"{name}.{key}",
            )
        return item

    size = integer("size", 1, MAX_SIDE)
    max_size = integer("max_size", 1, MAX_SIDE, nullable=True)
    multiple_of = integer("multiple_of", 1, 1024)
    assert size is not None and multiple_of is not None
    if side == "longer" and max_size is not None:
        raise ProcessingError(
            f"input parameter '{name}.max_size' caps the other side; with side longer the "
            "longer side is size already: it must be null",
            parameter=f"{name}.max_size",
        )
    if max_size is not None and max_size % multiple_of:
        raise ProcessingError(
            f"input parameter '{name}.max_size' ({max_size}) must be a multiple of multiple_of "
            f"({multiple_of}), so that the cap holds after the rounding",
            parameter=f"{name}.max_size",
        )
    if max_size is not None and max_size < size:
        raise ProcessingError(
            f"input parameter '{name}.max_size' ({max_size}) is smaller than size ({size})",
            parameter=f"{name}.max_size",
        )
    if side in ("height", "width") and size % multiple_of:
        raise ProcessingError(
            f"input parameter '{name}.size' ({size}) must be a multiple of multiple_of "
            f"({multiple_of}): the {side} is exactly size",
            parameter=f"{name}.size",
        )
    return ResizeSide(side, size, max_size, multiple_of, rounding)


class Pad:
    """`pad`: after normalization, pad an HxWxC example to a size or to multiples, with a
    value in the model's input values (see the schema and docs/manifest.md)."""

    def __init__(
        self,
        size: tuple[int, int] | None,
        multiple_of: int | None,
        position: str,
        value: np.ndarray,
    ) -> None:
        self.size, self.multiple_of, self.position, self.value = size, multiple_of, position, value

    def offset(self, height: int, width: int) -> tuple[int, int]:
        """(top, left): where an image of `height` x `width` sits once padded."""
        if self.position != "center":
            return 0, 0
        target_h, target_w = self.target(height, width)
        return (target_h - height) // 2, (target_w - width) // 2

    def target(self, height: int, width: int) -> tuple[int, int]:
        if self.size is not None:
            return self.size
        step = self.multiple_of or 1
        return -(-height // step) * step, -(-width // step) * step

    def apply(self, values: np.ndarray) -> np.ndarray:
        height, width = values.shape[:2]
        if self.size is not None:
            target_h, target_w = self.size
            if height > target_h or width > target_w:
                raise ProcessingError(
                    f"an image comes out {height}x{width}, larger than pad size "
                    f"[{target_h}, {target_w}] (padding never crops): resize it to fit first "
                    "(resize_side with max_size, or resize_size)",
                    parameter="pad.size",
                )
        else:
            target_h, target_w = self.target(height, width)
        if (target_h, target_w) == (height, width):
            return values
        top = (target_h - height) // 2 if self.position == "center" else 0
        left = (target_w - width) // 2 if self.position == "center" else 0
        padded = np.empty((target_h, target_w, values.shape[2]), dtype=values.dtype)
        padded[...] = self.value
        padded[top : top + height, left : left + width] = values
        return padded


class PadSquare:
    """`pad_square`: before the resize, pad the decoded image (bytes) to a square of its
    longer side with one byte value, the image at `position`."""

    def __init__(self, position: str, value: int) -> None:
        self.position, self.value = position, value

    def placed(self, height: int, width: int) -> tuple[int, int, int]:
        """(side, top, left): the square, and where an image of `height` x `width` sits in
        it; ProcessingError where the square would pass MAX_SQUARE_PIXELS."""
        side = max(height, width)
        if side * side > MAX_SQUARE_PIXELS:
            raise ProcessingError(
                f"pad_square would make a {height}x{width} image a {side}x{side} square, more "
                f"than {MAX_SQUARE_PIXELS:,} pixels",
                parameter="pad_square",
            )
        if self.position != "center":
            return side, 0, 0
        return side, (side - height) // 2, (side - width) // 2


def parse_pad_square(value: Any) -> PadSquare | None:
    if value is None:
        return None
    _step_keys(value, "pad_square", ("position", "value"))
    position = choice(value, "position", _PAD_POSITIONS, prefix="pad_square.")
    filler = value["value"]
    if isinstance(filler, bool) or not isinstance(filler, int) or not 0 <= filler <= 255:
        raise ProcessingError(
            f"input parameter 'pad_square.value' must be a byte value from 0 to 255; got "
            f"{filler!r}",
            parameter="pad_square.value",
        )
    return PadSquare(position, filler)


def parse_pad(value: Any, channels: int, element_type: str) -> Pad | None:
    if value is None:
        return None
    _step_keys(value, "pad", _PAD_KEYS)
    try:
        size = size_parameter(value, "size")
        filler = per_channel(value, "value", channels)
    except ProcessingError as error:
        key = str(error.parameter)
        raise ProcessingError(
            str(error).replace(f"'{key}'", f"'pad.{key}'"), parameter=f"pad.{key}"
        ) from None
    multiple_of = value["multiple_of"]
    if multiple_of is not None and (
        isinstance(multiple_of, bool)
        or not isinstance(multiple_of, int)
        or not 1 <= multiple_of <= 1024
    ):
        raise ProcessingError(
            f"input parameter 'pad.multiple_of' must be an integer from 1 to 1024 or null; got "
            f"{multiple_of!r}",
            parameter="pad.multiple_of",
        )
    if (size is None) == (multiple_of is None):
        raise ProcessingError(
            "input parameter 'pad.size' or 'pad.multiple_of': give exactly one of the two (a "
            "[height, width] to pad to, or a multiple to pad each side up to)",
            parameter="pad.size",
        )
    position = choice(value, "position", _PAD_POSITIONS, "pad.")
    dtype = np.dtype(ELEMENT_TYPES[element_type])
    if dtype.kind != "f":
        info = np.iinfo(dtype)
        if not all(float(v).is_integer() and info.min <= v <= info.max for v in filler):
            raise ProcessingError(
                f"input parameter 'pad.value' must hold {element_type} values (whole numbers "
                f"from {info.min} to {info.max}); got {value['value']!r}",
                parameter="pad.value",
            )
    return Pad(size, multiple_of, position, filler.astype(dtype))
