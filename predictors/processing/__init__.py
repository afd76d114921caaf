"""Pre- and post-processing of model inputs and outputs, driven by manifest parameters.

Every pitfall of reproducing a published result (seed 000: color mode, layout, JPEG decoding,
the order of type conversion and normalization) is an explicit, required parameter of an image
input. There are no hidden defaults: a missing or unknown value raises `ProcessingError` naming
the parameter, before any image is touched.

An image goes through these steps, in this order (the manifest spec, "Processing semantics"):

1. decode with `decoder` (Pillow or OpenCV);
2. convert to `color_mode` from the decoder's native order (Pillow RGB/L, OpenCV BGR/gray);
3. resize with the decoder's own library (`resize_method`, `resize_size`, `keep_aspect_ratio`);
4. crop (`crop_method`, `crop_size`);
5. convert the bytes to `element_type` and normalize, in `normalization_order`;
6. arrange as `layout` and, for a batch, stack with N first.

Step 5 is a per-channel lookup table of the 256 possible byte values, computed once in float64
from the formulas and then cast, so its results are exactly those of the formulas and it costs a
single gather per image.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
from PIL import Image

from predictors.manifests.labels import labels_from_text

__all__ = [
    "ELEMENT_TYPES",
    "IMAGE_PARAMETERS",
    "ImagePreprocessor",
    "ProcessingError",
    "TensorPreprocessor",
    "load_labels",
    "postprocess",
    "preprocessor_for",
]


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

# The keys every `type: image` input must carry, in the order the spec lists them.
IMAGE_PARAMETERS = (
    "decoder",
    "jpeg_dct_method",
    "color_mode",
    "layout",
    "resize_method",
    "resize_size",
    "keep_aspect_ratio",
    "crop_method",
    "crop_size",
    "element_type",
    "normalization_order",
    "scale",
    "mean",
    "std",
)

# Optional geometry steps: absent or null leaves them out (every key inside them is required).
OPTIONAL_IMAGE_PARAMETERS = ("resize_side", "pad")
_SIDES = ("shorter", "longer", "height", "width")
_ROUNDINGS = ("up", "down", "half_even", "half_up")
_PAD_POSITIONS = ("top_left", "center")
_RESIZE_SIDE_KEYS = ("side", "size", "max_size", "multiple_of", "rounding")
_PAD_KEYS = ("size", "multiple_of", "position", "value")

_DECODERS = ("pillow", "opencv")
_DCT_METHODS = ("islow", "ifast", "float")
# Both Pillow and OpenCV decode JPEG with libjpeg(-turbo)'s default DCT, JDCT_ISLOW, and
# neither lets a caller choose another one.
_SUPPORTED_DCT_METHODS = {"pillow": ("islow",), "opencv": ("islow",)}
_COLOR_MODES = ("RGB", "BGR", "GRAY")
_LAYOUTS = ("NCHW", "NHWC")
_CROP_METHODS = ("none", "center")
_NORMALIZATION_ORDERS = ("convert_then_normalize", "normalize_then_convert")
_MAX_SIDE = 8192

# `area` for Pillow is Image.Resampling.BOX: each output pixel is the plain average of the input
# pixels it covers, the same idea as OpenCV's INTER_AREA. Pillow antialiases bilinear, bicubic
# and lanczos when it shrinks an image; OpenCV does not. That difference is real, and is the
# reason the resize runs in the decoder's own library: a model trained on an OpenCV pipeline gets
# OpenCV's resize.
_PILLOW_RESAMPLING = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "area": Image.Resampling.BOX,
    "lanczos": Image.Resampling.LANCZOS,
}
_OPENCV_INTERPOLATION = {
    "nearest": cv2.INTER_NEAREST,
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "area": cv2.INTER_AREA,
    "lanczos": cv2.INTER_LANCZOS4,
}
# OpenCV would otherwise rotate images by their EXIF orientation tag, which Pillow's decoder
# does not do; both decoders give the stored pixel order.
_OPENCV_COLOR_FLAGS = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION


def _choice(
    parameters: Mapping[str, Any], name: str, choices: Sequence[str], prefix: str = ""
) -> str:
    value = parameters[name]
    if not isinstance(value, str) or value not in choices:
        raise ProcessingError(
            f"input parameter '{prefix}{name}' must be one of {', '.join(choices)}; got {value!r}",
            parameter=prefix + name,
        )
    return value


def _size(parameters: Mapping[str, Any], name: str) -> tuple[int, int] | None:
    value = parameters[name]
    if value is None:
        return None
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not all(1 <= v <= _MAX_SIDE for v in value)
    ):
        raise ProcessingError(
            f"input parameter {name!r} must be null or [height, width], two integers from 1 "
            f"to {_MAX_SIDE}; got {value!r}",
            parameter=name,
        )
    return int(value[0]), int(value[1])


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _per_channel(
    parameters: Mapping[str, Any], name: str, channels: int, *, positive: bool = False
) -> np.ndarray:
    """A list of one number per channel; a single number is accepted and used for every channel."""
    value = parameters[name]
    items = value if isinstance(value, list | tuple) else [value]
    if not items or not all(_number(v) for v in items) or len(items) not in (1, channels):
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


def _cast_table(table: np.ndarray, element_type: str) -> np.ndarray:
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


class ImagePreprocessor:
    """Turns encoded images (PNG, JPEG, … file bytes) into model input tensors.

    Built from the `parameters` of a manifest input of `type: image`; every key of
    `IMAGE_PARAMETERS` is required and any other key is rejected (a misspelt key would otherwise
    be silently ignored, which is the pitfall this module exists to prevent).

    Notes on choices the spec leaves open:
    - `mean` and `std` are in the order of `color_mode` (for BGR: blue, green, red); a single
      number applies to every channel.
    - `keep_aspect_ratio: true` scales the image by max(target_h / h, target_w / w), so that it
      covers `resize_size` (for a square target: the shorter side becomes the target side), then
      crops the middle `resize_size`. A center crop starts at floor((size - crop) / 2).
    - Integer element types take the normalized value rounded half to even; normalized values
      that cannot fit the type are refused when the preprocessor is built.
    - GRAY is ITU-R 601 luma computed by the decoder's library (Pillow's "L", OpenCV's
      BGR2GRAY); their fixed-point weights differ, so a pixel may come out one apart; a gray source
      asked for RGB/BGR has its one channel repeated; an alpha channel is dropped.
    """

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        if not isinstance(parameters, Mapping):
            raise ProcessingError(
                f"image input parameters must be a mapping; got {type(parameters).__name__}"
            )
        for name in IMAGE_PARAMETERS:
            if name not in parameters:
                raise ProcessingError(
                    f"input parameter {name!r} is missing; image inputs must state every one of "
                    f"{', '.join(IMAGE_PARAMETERS)}",
                    parameter=name,
                )
        unknown = sorted(set(parameters) - set(IMAGE_PARAMETERS) - set(OPTIONAL_IMAGE_PARAMETERS))
        if unknown:
            raise ProcessingError(
                f"unknown image input parameter {unknown[0]!r}", parameter=str(unknown[0])
            )

        self.decoder = _choice(parameters, "decoder", _DECODERS)
        self.jpeg_dct_method = _choice(parameters, "jpeg_dct_method", _DCT_METHODS)
        if self.jpeg_dct_method not in _SUPPORTED_DCT_METHODS[self.decoder]:
            raise ProcessingError(
                f"input parameter 'jpeg_dct_method' is {self.jpeg_dct_method!r}, but the "
                f"{self.decoder} decoder cannot honour it: it always decodes JPEG with the "
                "libjpeg 'islow' (accurate integer) DCT",
                parameter="jpeg_dct_method",
            )
        self.color_mode = _choice(parameters, "color_mode", _COLOR_MODES)
        self.channels = 1 if self.color_mode == "GRAY" else 3
        self.layout = _choice(parameters, "layout", _LAYOUTS)
        self.resize_method = _choice(parameters, "resize_method", tuple(_PILLOW_RESAMPLING))
        self.resize_size = _size(parameters, "resize_size")
        keep = parameters["keep_aspect_ratio"]
        if not isinstance(keep, bool):
            raise ProcessingError(
                f"input parameter 'keep_aspect_ratio' must be true or false; got {keep!r}",
                parameter="keep_aspect_ratio",
            )
        if keep and self.resize_size is None:
            raise ProcessingError(
                "input parameter 'keep_aspect_ratio' is true, which needs a 'resize_size'",
                parameter="keep_aspect_ratio",
            )
        self.keep_aspect_ratio = keep
        self.resize_side = _resize_side(parameters.get("resize_side"))
        if self.resize_side is not None and (self.resize_size is not None or keep):
            raise ProcessingError(
                "input parameter 'resize_side' resizes by one side: 'resize_size' must be null "
                "and 'keep_aspect_ratio' false",
                parameter="resize_side",
            )
        self.crop_method = _choice(parameters, "crop_method", _CROP_METHODS)
        self.crop_size = _size(parameters, "crop_size")
        if (self.crop_method == "center") != (self.crop_size is not None):
            raise ProcessingError(
                "input parameter 'crop_size' must be [height, width] when crop_method is "
                f"center and null when it is none; got {parameters['crop_size']!r} with "
                f"crop_method {self.crop_method}",
                parameter="crop_size",
            )
        self.element_type = _choice(parameters, "element_type", tuple(ELEMENT_TYPES))
        self.normalization_order = _choice(parameters, "normalization_order", _NORMALIZATION_ORDERS)
        scale = parameters["scale"]
        if not _number(scale) or scale <= 0:
            raise ProcessingError(
                f"input parameter 'scale' must be a number > 0; got {scale!r}", parameter="scale"
            )
        self.scale = float(scale)
        self.mean = _per_channel(parameters, "mean", self.channels)
        self.std = _per_channel(parameters, "std", self.channels, positive=True)
        self._table = self._lookup_table()
        self.pad = _pad(parameters.get("pad"), self.channels, self.element_type)

    def _lookup_table(self) -> np.ndarray:
        """table[c, v] is the model input value for byte v in channel c."""
        values = np.arange(256, dtype=np.float64)[None, :]
        mean = self.mean[:, None]
        std = self.std[:, None]
        if self.normalization_order == "convert_then_normalize":
            table = (values / self.scale - mean) / std
        else:
            # The mean is taken to byte space and subtracted with uint8 arithmetic, which wraps
            # around (seed 000, Fig. 8b); only the result is converted.
            mean_bytes = [round(float(m) * self.scale) for m in self.mean]
            if not all(0 <= m <= 255 for m in mean_bytes):
                raise ProcessingError(
                    "input parameter 'mean' times 'scale' must lie within 0..255 for "
                    f"normalize_then_convert (byte space); got {mean_bytes}",
                    parameter="mean",
                )
            wrapped = np.mod(values - np.asarray(mean_bytes, dtype=np.float64)[:, None], 256)
            table = wrapped / self.scale / std
        return _cast_table(table, self.element_type)

    # -- steps 1 to 4: decode, color mode, resize, crop ----------------------------------------

    def _decode_resize_crop(self, encoded: bytes) -> np.ndarray:
        """Steps 1 to 4: an HxWxC uint8 array in `color_mode`."""
        if self.decoder == "pillow":
            return self._pillow(encoded)
        return self._opencv(encoded)

    def _pillow(self, encoded: bytes) -> np.ndarray:
        try:
            image: Image.Image = Image.open(io.BytesIO(encoded))
            image.load()
        except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
            raise ProcessingError(f"Pillow cannot decode the image: {exc}") from exc
        mode = "L" if self.color_mode == "GRAY" else "RGB"
        if image.mode != mode:
            image = image.convert(mode)
        resized = self._resized_size(image.height, image.width)
        if resized is not None:
            image = image.resize(
                (resized[1], resized[0]), resample=_PILLOW_RESAMPLING[self.resize_method]
            )
        pixels = np.asarray(image, dtype=np.uint8)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        pixels = self._crop(pixels)
        if self.color_mode == "BGR":
            # Swapping channels commutes exactly with the per-channel resize and the crop.
            pixels = pixels[:, :, ::-1]
        return pixels

    def _opencv(self, encoded: bytes) -> np.ndarray:
        buffer = np.frombuffer(encoded, dtype=np.uint8)
        pixels = cv2.imdecode(buffer, _OPENCV_COLOR_FLAGS) if buffer.size else None
        if pixels is None:
            raise ProcessingError("OpenCV cannot decode the image (unknown or corrupt format)")
        if self.color_mode == "GRAY":
            pixels = cv2.cvtColor(pixels, cv2.COLOR_BGR2GRAY)
        elif self.color_mode == "RGB":
            pixels = cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB)
        resized = self._resized_size(pixels.shape[0], pixels.shape[1])
        if resized is not None:
            pixels = cv2.resize(
                pixels,
                (resized[1], resized[0]),
                interpolation=_OPENCV_INTERPOLATION[self.resize_method],
            )
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        return self._crop(pixels)

    # -- geometry ----------------------------------------------------------------------------

    def _resized_size(self, height: int, width: int) -> tuple[int, int] | None:
        """The size to resize to before any crop, or None when no resize is needed."""
        if self.resize_side is not None:
            size = self.resize_side.size_for(height, width)
            return None if size == (height, width) else size
        if self.resize_size is None:
            return None
        target_h, target_w = self.resize_size
        if self.keep_aspect_ratio:
            factor = max(target_h / height, target_w / width)
            size = (max(target_h, round(height * factor)), max(target_w, round(width * factor)))
        else:
            size = (target_h, target_w)
        return None if size == (height, width) else size

    def _crop(self, pixels: np.ndarray) -> np.ndarray:
        if self.keep_aspect_ratio and self.resize_size is not None:
            pixels = _center_crop(pixels, self.resize_size, "resize_size")
        if self.crop_size is not None:
            pixels = _center_crop(pixels, self.crop_size, "crop_size")
        return pixels

    # -- steps 5 and 6: convert and normalize, layout ----------------------------------------

    def _convert(self, pixels: np.ndarray) -> np.ndarray:
        """Step 5 as a gather from the lookup table; HxWxC uint8 to HxWxC element_type."""
        return self._table[np.arange(self.channels), pixels]

    def __call__(self, encoded: bytes) -> np.ndarray:
        """One image: CHW for layout NCHW, HWC for NHWC, of `element_type`."""
        values = self._convert(self._decode_resize_crop(encoded))
        if self.pad is not None:
            values = self.pad.apply(values)
        if self.layout == "NCHW":
            values = values.transpose(2, 0, 1)
        return np.ascontiguousarray(values)

    def to_image(self, encoded: bytes) -> tuple[float, float, int, int]:
        """How a point of the model input maps back to the image `encoded` (for a detector's
        boxes): (scale_x, scale_y, left, top), the point (x, y) of the input being
        ((x - left) * scale_x, (y - top) * scale_y) in the image's pixels. Through a resize
        and a padding; a crop cannot be undone, and is refused."""
        if self.crop_size is not None or (self.keep_aspect_ratio and self.resize_size is not None):
            raise ProcessingError(
                "boxes in the input cannot be mapped back to an image that was cropped",
                parameter="crop_method",
            )
        try:
            with Image.open(io.BytesIO(encoded)) as image:
                width, height = image.size
        except (OSError, Image.DecompressionBombError, SyntaxError, ValueError) as exc:
            raise ProcessingError(f"Pillow cannot read the image's size: {exc}") from exc
        resized_h, resized_w = self._resized_size(height, width) or (height, width)
        top, left = self.pad.offset(resized_h, resized_w) if self.pad is not None else (0, 0)
        return width / resized_w, height / resized_h, left, top

    def batch(self, images: Sequence[bytes]) -> np.ndarray:
        """A batch: NCHW or NHWC. All images must come out the same size."""
        if not images:
            raise ProcessingError("a batch needs at least one image")
        arrays = [self(encoded) for encoded in images]
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            raise ProcessingError(
                f"images of one batch come out in different sizes {sorted(shapes)}; set "
                "resize_size, crop_size or pad.size so that every image has the same size, or "
                "use batch size 1"
            )
        return np.stack(arrays)


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
        multiple), so that the cap holds after the rounding; no side may pass _MAX_SIDE."""
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
        if max(size) > _MAX_SIDE:
            raise ProcessingError(
                f"resize_side would make a {height}x{width} image {size[0]}x{size[1]}, more "
                f"than {_MAX_SIDE} pixels on a side: set resize_side.max_size",
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


def _resize_side(value: Any) -> ResizeSide | None:
    if value is None:
        return None
    name = "resize_side"
    _step_keys(value, name, _RESIZE_SIDE_KEYS)
    side = _choice(value, "side", _SIDES, "resize_side.")
    rounding = _choice(value, "rounding", _ROUNDINGS, "resize_side.")

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

    size = integer("size", 1, _MAX_SIDE)
    max_size = integer("max_size", 1, _MAX_SIDE, nullable=True)
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
        target_h, target_w = self._target(height, width)
        return (target_h - height) // 2, (target_w - width) // 2

    def _target(self, height: int, width: int) -> tuple[int, int]:
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
            target_h, target_w = self._target(height, width)
        if (target_h, target_w) == (height, width):
            return values
        top = (target_h - height) // 2 if self.position == "center" else 0
        left = (target_w - width) // 2 if self.position == "center" else 0
        padded = np.empty((target_h, target_w, values.shape[2]), dtype=values.dtype)
        padded[...] = self.value
        padded[top : top + height, left : left + width] = values
        return padded


def _pad(value: Any, channels: int, element_type: str) -> Pad | None:
    if value is None:
        return None
    _step_keys(value, "pad", _PAD_KEYS)
    try:
        size = _size(value, "size")
        filler = _per_channel(value, "value", channels)
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
    position = _choice(value, "position", _PAD_POSITIONS, "pad.")
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


def _center_crop(pixels: np.ndarray, size: tuple[int, int], parameter: str) -> np.ndarray:
    height, width = pixels.shape[:2]
    crop_h, crop_w = size
    if crop_h > height or crop_w > width:
        raise ProcessingError(
            f"cannot crop {crop_h}x{crop_w} ({parameter}) from an image of {height}x{width}",
            parameter=parameter,
        )
    top = (height - crop_h) // 2
    left = (width - crop_w) // 2
    return pixels[top : top + crop_h, left : left + crop_w]


class TensorPreprocessor:
    """Model inputs that are already tensors (`type: tensor`).

    Parameters: `element_type` (required); optionally `shape`, the shape of one example
    without the batch axis (null for a dynamic dimension), which every value must have; and
    `mean` and `std` together (numbers, or lists that broadcast against the last axis):
    x = (x - mean) / std, computed in float64, then cast. A value is an array-like or the bytes
    of a `.npy` file.
    """

    # `context` is the streaming loop's (`predictors.evaluation.streams`): it needs the input
    # before in the stream.
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
        self.element_type = _choice(parameters, "element_type", tuple(ELEMENT_TYPES))
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
                if not items or not all(_number(v) for v in items):
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
        return np.ascontiguousarray(_cast_table(normalized, self.element_type))

    def batch(self, values: Sequence[Any]) -> np.ndarray:
        if not values:
            raise ProcessingError("a batch needs at least one tensor")
        arrays = [self(v) for v in values]
        if len({a.shape for a in arrays}) > 1:
            raise ProcessingError("tensors of one batch have different shapes")
        return np.stack(arrays)


def preprocessor_for(input_spec: Mapping[str, Any]) -> Any:
    """The preprocessor for one manifest input (`name`, `type`, `parameters`)."""
    kind = input_spec.get("type")
    parameters = input_spec.get("parameters")
    if parameters is None:
        raise ProcessingError(
            f"input {input_spec.get('name')!r} has no parameters", parameter="parameters"
        )
    if kind == "image":
        return ImagePreprocessor(parameters)
    if kind == "tensor":
        return TensorPreprocessor(parameters)
    if kind == "audio":
        from predictors.processing.audio import AudioPreprocessor

        return AudioPreprocessor(parameters)
    raise ProcessingError(
        f"input type must be image, tensor or audio; got {kind!r}", parameter="type"
    )


def postprocess(
    outputs: np.ndarray,
    *,
    output_type: Literal["logits", "probabilities"],
    top_k: int,
    labels: Sequence[str],
) -> list[list[tuple[int, str, float]]]:
    """The top-k (class index, label, probability) of each row, most probable first.

    `outputs` is (N, classes), or (N, …) flattened per row. Logits go through a numerically
    stable softmax (in float64); probabilities are used as they are. Ties go to the lower class
    index, and a `top_k` above the number of classes returns every class.
    """
    if output_type not in ("logits", "probabilities"):
        raise ProcessingError(
            f"output type must be logits or probabilities; got {output_type!r}",
            parameter="type",
        )
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ProcessingError(f"top_k must be an integer >= 1; got {top_k!r}", parameter="top_k")
    values = np.asarray(outputs, dtype=np.float64)
    if values.ndim < 2:
        raise ProcessingError(
            f"model outputs must have a batch axis first, (N, classes); got shape {values.shape}"
        )
    values = values.reshape(values.shape[0], -1)
    classes = values.shape[1]
    if len(labels) != classes:
        raise ProcessingError(
            f"the model gives {classes} classes but there are {len(labels)} labels",
            parameter="labels",
        )
    if np.isnan(values).any():
        raise ProcessingError("the model outputs contain NaN")
    if output_type == "logits":
        shifted = values - values.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        probabilities = exp / exp.sum(axis=1, keepdims=True)
    else:
        probabilities = values
    k = min(top_k, classes)
    # A stable sort of the negated probabilities keeps equal ones in class-index order.
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(probabilities, order, axis=1)
    return [
        [(int(i), labels[int(i)], float(p)) for i, p in zip(row_order, row_top, strict=True)]
        for row_order, row_top in zip(order, top, strict=True)
    ]


def load_labels(output_parameters: Mapping[str, Any], fetch: Callable[[str], Path]) -> list[str]:
    """The class labels of an output: the inline `labels` list, or `labels_path` fetched.

    `fetch` turns a URL into a local file (e.g. `DataManager.fetch`). A labels file holds one
    label per line (UTF-8); trailing empty lines are ignored.
    """
    inline = output_parameters.get("labels")
    path = output_parameters.get("labels_path")
    if (inline is None) == (path is None):
        raise ProcessingError(
            "an output needs exactly one of 'labels' (a list) and 'labels_path'",
            parameter="labels",
        )
    if inline is not None:
        if not isinstance(inline, list) or not all(isinstance(x, str) for x in inline):
            raise ProcessingError("'labels' must be a list of strings", parameter="labels")
        return list(inline)
    if not isinstance(path, str):
        raise ProcessingError("'labels_path' must be a URL", parameter="labels_path")
    return labels_from_text(fetch(path).read_text(encoding="utf-8"))
