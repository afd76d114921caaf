"""Image inputs (`type: image`): encoded images into model input tensors, driven by manifest
parameters.

Every pitfall of reproducing a published result (`docs/pitfalls.md`: color mode, layout, JPEG
decoding, the order of type conversion and normalization) is an explicit, required parameter of
an image input. There are no hidden defaults: a missing or unknown value raises
`ProcessingError` naming the parameter, before any image is touched.

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
from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np
from PIL import Image

from predictors.processing.geometry import (
    OPTIONAL_IMAGE_PARAMETERS,
    parse_pad,
    parse_pad_square,
    parse_resize_side,
)
from predictors.processing.parameters import (
    ELEMENT_TYPES,
    ProcessingError,
    cast_table,
    choice,
    is_number,
    per_channel,
    size_parameter,
)

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


_DECODERS = ("pillow", "opencv")
_DCT_METHODS = ("islow", "ifast", "float")
# Both Pillow and OpenCV decode JPEG with libjpeg(-turbo)'s default DCT, JDCT_ISLOW, and
# neither lets a caller choose another one.
_SUPPORTED_DCT_METHODS = {"pillow": ("islow",), "opencv": ("islow",)}
_COLOR_MODES = ("RGB", "BGR", "GRAY")
_LAYOUTS = ("NCHW", "NHWC")
_CROP_METHODS = ("none", "center")
_NORMALIZATION_ORDERS = ("convert_then_normalize", "normalize_then_convert")

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

        self.decoder = choice(parameters, "decoder", _DECODERS)
        self.jpeg_dct_method = choice(parameters, "jpeg_dct_method", _DCT_METHODS)
        if self.jpeg_dct_method not in _SUPPORTED_DCT_METHODS[self.decoder]:
            raise ProcessingError(
                f"input parameter 'jpeg_dct_method' is {self.jpeg_dct_method!r}, but the "
                f"{self.decoder} decoder cannot honour it: it always decodes JPEG with the "
                "libjpeg 'islow' (accurate integer) DCT",
                parameter="jpeg_dct_method",
            )
        self.color_mode = choice(parameters, "color_mode", _COLOR_MODES)
        self.channels = 1 if self.color_mode == "GRAY" else 3
        self.layout = choice(parameters, "layout", _LAYOUTS)
        self.resize_method = choice(parameters, "resize_method", tuple(_PILLOW_RESAMPLING))
        self.resize_size = size_parameter(parameters, "resize_size")
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
        self.resize_side = parse_resize_side(parameters.get("resize_side"))
        if self.resize_side is not None and (self.resize_size is not None or keep):
            raise ProcessingError(
                "input parameter 'resize_side' resizes by one side: 'resize_size' must be null "
                "and 'keep_aspect_ratio' false",
                parameter="resize_side",
            )
        self.crop_method = choice(parameters, "crop_method", _CROP_METHODS)
        self.crop_size = size_parameter(parameters, "crop_size")
        if (self.crop_method == "center") != (self.crop_size is not None):
            raise ProcessingError(
                "input parameter 'crop_size' must be [height, width] when crop_method is "
                f"center and null when it is none; got {parameters['crop_size']!r} with "
                f"crop_method {self.crop_method}",
                parameter="crop_size",
            )
        self.element_type = choice(parameters, "element_type", tuple(ELEMENT_TYPES))
        self.normalization_order = choice(parameters, "normalization_order", _NORMALIZATION_ORDERS)
        scale = parameters["scale"]
        if not is_number(scale) or scale <= 0:
            raise ProcessingError(
                f"input parameter 'scale' must be a number > 0; got {scale!r}", parameter="scale"
            )
        self.scale = float(scale)
        self.mean = per_channel(parameters, "mean", self.channels)
        self.std = per_channel(parameters, "std", self.channels, positive=True)
        self._table = self._lookup_table()
        self.pad = parse_pad(parameters.get("pad"), self.channels, self.element_type)
        self.pad_square = parse_pad_square(parameters.get("pad_square"))

    def _lookup_table(self) -> np.ndarray:
        """table[c, v] is the model input value for byte v in channel c."""
        values = np.arange(256, dtype=np.float64)[None, :]
        mean = self.mean[:, None]
        std = self.std[:, None]
        if self.normalization_order == "convert_then_normalize":
            table = (values / self.scale - mean) / std
        else:
            # The mean is taken to byte space and subtracted with uint8 arithmetic, which wraps
            # around (`docs/pitfalls.md`); only the result is converted.
            mean_bytes = [round(float(m) * self.scale) for m in self.mean]
            if not all(0 <= m <= 255 for m in mean_bytes):
                raise ProcessingError(
                    "input parameter 'mean' times 'scale' must lie within 0..255 for "
                    f"normalize_then_convert (byte space); got {mean_bytes}",
                    parameter="mean",
                )
            wrapped = np.mod(values - np.asarray(mean_bytes, dtype=np.float64)[:, None], 256)
            table = wrapped / self.scale / std
        return cast_table(table, self.element_type)

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
        if self.pad_square is not None:
            side, top, left = self.pad_square.placed(image.height, image.width)
            value = self.pad_square.value
            square = Image.new(mode, (side, side), value if mode == "L" else (value,) * 3)
            square.paste(image, (left, top))
            image = square
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
        if self.pad_square is not None:
            height, width = pixels.shape[:2]
            side, top, left = self.pad_square.placed(height, width)
            pixels = cv2.copyMakeBorder(
                pixels,
                top,
                side - height - top,
                left,
                side - width - left,
                cv2.BORDER_CONSTANT,
                value=(self.pad_square.value,) * 3,
            )
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

    def output_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of what an image of `height` x `width` becomes: padded to a square,
        resized, cropped and padded as the parameters say (what a batch of images needs
        alike)."""
        if self.pad_square is not None:
            side = max(height, width)
            height = width = side
        height, width = self._resized_size(height, width) or (height, width)
        if self.keep_aspect_ratio and self.resize_size is not None:
            height, width = self.resize_size
        if self.crop_size is not None:
            height, width = self.crop_size
        if self.pad is not None:
            # A pad size is the size (an image larger than it is refused when it is read).
            height, width = self.pad.target(height, width)
        return height, width

    def fixed_size(self) -> bool:
        """Whether every image comes out one size whatever its own: resized to a size, cropped
        or padded to one."""
        return (
            self.resize_size is not None
            or self.crop_size is not None
            or (self.pad is not None and self.pad.size is not None)
        )

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

    def to_image(self, encoded: bytes) -> tuple[float, float, float, float]:
        """How a point of the model input maps back to the image `encoded` (for a detector's
        boxes): (scale_x, scale_y, left, top), the point (x, y) of the input being
        ((x - left) * scale_x, (y - top) * scale_y) in the image's pixels. Through a padding
        to a square, a resize and a padding; a crop cannot be undone, and is refused."""
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
        before = (height, width)  # the size the resize takes
        square_top = square_left = 0
        if self.pad_square is not None:
            side, square_top, square_left = self.pad_square.placed(height, width)
            before = (side, side)
        resized_h, resized_w = self._resized_size(*before) or before
        top, left = self.pad.offset(resized_h, resized_w) if self.pad is not None else (0, 0)
        scale_y, scale_x = before[0] / resized_h, before[1] / resized_w
        # The square's own padding, in the input's pixels, moves the origin further.
        return scale_x, scale_y, left + square_left / scale_x, top + square_top / scale_y

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
