"""Image and tensor preprocessing, and postprocessing, on small synthetic images.

Every processing parameter must have an effect a test can see; the images are made here with
Pillow (PNG when the test needs exact pixels, JPEG where decoding is the subject).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from predictors.processing import (
    IMAGE_PARAMETERS,
    ImagePreprocessor,
    ProcessingError,
    TensorPreprocessor,
    load_labels,
    postprocess,
    preprocessor_for,
)

pytestmark = pytest.mark.database_free

RED = (255, 0, 0)
GREEN = (0, 255, 0)
BLUE = (0, 0, 255)
DECODERS = ("pillow", "opencv")

# Raw bytes out: uint8, no normalization, so that tests read pixel values directly.
RAW = {
    "decoder": "pillow",
    "jpeg_dct_method": "islow",
    "color_mode": "RGB",
    "layout": "NHWC",
    "resize_method": "nearest",
    "resize_size": None,
    "keep_aspect_ratio": False,
    "crop_method": "none",
    "crop_size": None,
    "element_type": "uint8",
    "normalization_order": "convert_then_normalize",
    "scale": 1.0,
    "mean": [0.0],
    "std": [1.0],
}


def params(**overrides: object) -> dict[str, object]:
    return {**RAW, **overrides}


def encode(pixels: np.ndarray, fmt: str = "PNG", **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt, **options)
    return buffer.getvalue()


def stripes(height: int, colors: list[tuple[int, int, int]], width_each: int) -> np.ndarray:
    """Vertical stripes of the given colors, left to right."""
    return np.concatenate(
        [np.full((height, width_each, 3), color, dtype=np.uint8) for color in colors], axis=1
    )


RED_BLUE = encode(stripes(4, [RED, BLUE], 3))  # 4x6, left half red, right half blue


# -- color mode ------------------------------------------------------------------------------


@pytest.mark.parametrize("decoder", DECODERS)
def test_rgb_puts_red_first_and_bgr_swaps_the_channels(decoder: str) -> None:
    rgb = ImagePreprocessor(params(decoder=decoder, color_mode="RGB"))(RED_BLUE)
    bgr = ImagePreprocessor(params(decoder=decoder, color_mode="BGR"))(RED_BLUE)

    assert rgb[0, 0].tolist() == [255, 0, 0]
    assert rgb[0, 5].tolist() == [0, 0, 255]
    assert bgr[0, 0].tolist() == [0, 0, 255]
    assert bgr[0, 5].tolist() == [255, 0, 0]
    np.testing.assert_array_equal(bgr, rgb[:, :, ::-1])


@pytest.mark.parametrize("decoder", DECODERS)
def test_gray_gives_one_channel_of_luma(decoder: str) -> None:
    gray = ImagePreprocessor(params(decoder=decoder, color_mode="GRAY", layout="NCHW"))(RED_BLUE)

    assert gray.shape == (1, 4, 6)
    # ITU-R 601 luma: 0.299 R + 0.587 G + 0.114 B.
    assert gray[0, 0, 0] == 76
    assert gray[0, 0, 5] == 29


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_gray_source_asked_for_rgb_repeats_its_channel(decoder: str) -> None:
    source = encode(np.array([[10, 200], [60, 90]], dtype=np.uint8))  # an "L" PNG

    rgb = ImagePreprocessor(params(decoder=decoder))(source)
    gray = ImagePreprocessor(params(decoder=decoder, color_mode="GRAY"))(source)

    assert rgb.shape == (2, 2, 3)
    for channel in range(3):
        np.testing.assert_array_equal(rgb[:, :, channel], [[10, 200], [60, 90]])
    np.testing.assert_array_equal(gray[:, :, 0], [[10, 200], [60, 90]])


@pytest.mark.parametrize("decoder", DECODERS)
def test_an_alpha_channel_is_dropped(decoder: str) -> None:
    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    rgba[..., 0] = 255
    rgba[..., 3] = 7

    rgb = ImagePreprocessor(params(decoder=decoder))(encode(rgba))

    assert rgb.shape == (2, 2, 3)
    assert rgb[0, 0].tolist() == [255, 0, 0]


# -- layout ----------------------------------------------------------------------------------


def test_nchw_and_nhwc_hold_the_same_values_in_their_own_order() -> None:
    nchw = ImagePreprocessor(params(layout="NCHW"))
    nhwc = ImagePreprocessor(params(layout="NHWC"))

    chw, hwc = nchw(RED_BLUE), nhwc(RED_BLUE)

    assert chw.shape == (3, 4, 6)
    assert hwc.shape == (4, 6, 3)
    assert chw[0, :, :3].tolist() == [[255] * 3] * 4  # the red plane, left half
    np.testing.assert_array_equal(chw, hwc.transpose(2, 0, 1))
    assert chw.flags.c_contiguous
    assert nchw.batch([RED_BLUE, RED_BLUE]).shape == (2, 3, 4, 6)
    assert nhwc.batch([RED_BLUE, RED_BLUE]).shape == (2, 4, 6, 3)


# -- decoding --------------------------------------------------------------------------------


def test_pillow_and_opencv_decode_a_png_identically() -> None:
    noise = np.random.default_rng(0).integers(0, 256, size=(17, 23, 3), dtype=np.uint8)
    png = encode(noise)

    for color_mode in ("RGB", "BGR"):
        pillow = ImagePreprocessor(params(color_mode=color_mode))(png)
        opencv = ImagePreprocessor(params(color_mode=color_mode, decoder="opencv"))(png)
        np.testing.assert_array_equal(pillow, opencv)
    np.testing.assert_array_equal(ImagePreprocessor(params())(png), noise)
    # Each library computes luma with its own fixed-point weights: they round apart by one.
    pillow = ImagePreprocessor(params(color_mode="GRAY"))(png).astype(int)
    opencv = ImagePreprocessor(params(color_mode="GRAY", decoder="opencv"))(png).astype(int)
    assert np.abs(pillow - opencv).max() <= 1


def test_pillow_and_opencv_decode_a_jpeg_nearly_identically() -> None:
    y, x = np.mgrid[0:32, 0:48]
    gradient = np.stack([x * 5, y * 7, (x + y) * 3], axis=-1).astype(np.uint8)
    jpeg = encode(gradient, "JPEG", quality=90)

    pillow = ImagePreprocessor(params())(jpeg).astype(int)
    opencv = ImagePreprocessor(params(decoder="opencv"))(jpeg).astype(int)

    assert np.abs(pillow - opencv).max() <= 4
    assert np.abs(pillow - opencv).mean() < 1
    assert np.abs(pillow - gradient).max() > 0  # JPEG is lossy: a real decode happened


@pytest.mark.parametrize("decoder", DECODERS)
def test_jpeg_dct_methods_other_than_islow_are_refused(decoder: str) -> None:
    for method in ("ifast", "float"):
        with pytest.raises(ProcessingError, match="cannot honour") as error:
            ImagePreprocessor(params(decoder=decoder, jpeg_dct_method=method))
        assert error.value.parameter == "jpeg_dct_method"


@pytest.mark.parametrize("decoder", DECODERS)
def test_bytes_that_are_no_image_raise_processing_error(decoder: str) -> None:
    with pytest.raises(ProcessingError, match="decode"):
        ImagePreprocessor(params(decoder=decoder))(b"this is not an image")


# -- resize and crop -------------------------------------------------------------------------


@pytest.mark.parametrize("decoder", DECODERS)
def test_resize_gives_the_requested_size_and_each_method_its_own_pixels(decoder: str) -> None:
    checker = (np.indices((6, 6)).sum(axis=0) % 2 * 255).astype(np.uint8)
    source = encode(np.repeat(checker[:, :, None], 3, axis=2))

    results = {
        method: ImagePreprocessor(
            params(decoder=decoder, resize_method=method, resize_size=[4, 5])
        )(source)
        for method in ("nearest", "bilinear", "bicubic", "area", "lanczos")
    }

    assert {r.shape for r in results.values()} == {(4, 5, 3)}
    assert set(np.unique(results["nearest"])) <= {0, 255}  # nearest invents no value
    assert len(np.unique(results["bilinear"])) > 2
    distinct = {r.tobytes() for r in results.values()}
    assert len(distinct) >= 4


@pytest.mark.parametrize("decoder", DECODERS)
def test_area_resize_averages_blocks(decoder: str) -> None:
    # Pillow's `area` is Image.Resampling.BOX: the plain average of the covered pixels.
    # Four 2x2 blocks; each is (10, 20, 30, 40) plus 40, 80, 120 or 160.
    offsets = np.array([[40, 80], [120, 160]], dtype=np.uint8)
    source = np.tile(np.array([[10, 20], [30, 40]], dtype=np.uint8), (2, 2))
    source += np.kron(offsets, np.ones((2, 2), dtype=np.uint8))

    out = ImagePreprocessor(
        params(decoder=decoder, color_mode="GRAY", resize_method="area", resize_size=[2, 2])
    )(encode(source))

    np.testing.assert_array_equal(out[:, :, 0], [[25 + 40, 25 + 80], [25 + 120, 25 + 160]])


@pytest.mark.parametrize("decoder", DECODERS)
def test_keep_aspect_ratio_scales_then_crops_the_middle(decoder: str) -> None:
    # 8x16: green | red | blue | green, 4 columns each.
    source = encode(stripes(8, [GREEN, RED, BLUE, GREEN], 4))
    squash = ImagePreprocessor(params(decoder=decoder, resize_size=[4, 4]))
    keep = ImagePreprocessor(params(decoder=decoder, resize_size=[4, 4], keep_aspect_ratio=True))

    squashed, kept = squash(source), keep(source)

    assert squashed.shape == kept.shape == (4, 4, 3)
    assert [tuple(p) for p in squashed[0]] == [GREEN, RED, BLUE, GREEN]
    # Scaled to 4x8 (g g r r b b g g), then the middle 4 columns.
    assert [tuple(p) for p in kept[0]] == [RED, RED, BLUE, BLUE]
    # The same on the other axis.
    tall = encode(np.ascontiguousarray(stripes(8, [GREEN, RED, BLUE, GREEN], 4).transpose(1, 0, 2)))
    assert [tuple(p) for p in keep(tall)[:, 0]] == [RED, RED, BLUE, BLUE]


def test_keep_aspect_ratio_covers_a_non_square_target() -> None:
    source = encode(np.zeros((10, 20, 3), dtype=np.uint8))

    out = ImagePreprocessor(params(resize_size=[6, 8], keep_aspect_ratio=True))(source)

    assert out.shape == (6, 8, 3)


@pytest.mark.parametrize("decoder", DECODERS)
def test_center_crop_takes_the_middle(decoder: str) -> None:
    values = (np.arange(4)[:, None] * 10 + np.arange(6)[None, :]).astype(np.uint8)  # 10*row+col
    source = encode(values)

    out = ImagePreprocessor(
        params(decoder=decoder, color_mode="GRAY", crop_method="center", crop_size=[2, 2])
    )(source)

    np.testing.assert_array_equal(out[:, :, 0], [[12, 13], [22, 23]])


def test_a_crop_larger_than_the_image_is_an_error() -> None:
    crop = ImagePreprocessor(params(crop_method="center", crop_size=[5, 5]))

    with pytest.raises(ProcessingError, match="crop_size"):
        crop(RED_BLUE)


def test_images_of_different_sizes_cannot_share_a_batch() -> None:
    other = encode(stripes(2, [RED], 2))

    with pytest.raises(ProcessingError, match="different sizes"):
        ImagePreprocessor(params()).batch([RED_BLUE, other])


# -- conversion and normalization ------------------------------------------------------------

BYTE_100 = encode(np.full((2, 2), 100, dtype=np.uint8))
BYTE_200 = encode(np.full((2, 2), 200, dtype=np.uint8))
HALF = {"scale": 255.0, "mean": [0.5], "std": [0.5], "color_mode": "GRAY"}


# -- optional geometry: resize by one side, pad ------------------------------------------------


def _text_direction_reference(encoded: bytes) -> np.ndarray:
    """A text-direction classifier's own preprocessing, written out as OCR packages do it:
    height 48, width ceil(48 * w / h) capped at 192, OpenCV's bilinear resize of the BGR bytes,
    (x / 255 - 0.5) / 0.5, then zeros to the right up to 192 (CHW)."""
    import math

    import cv2

    image = cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_COLOR)
    height, width = image.shape[:2]
    ratio = width / float(height)
    resized_w = 192 if math.ceil(48 * ratio) > 192 else int(math.ceil(48 * ratio))
    resized = cv2.resize(image, (resized_w, 48)).astype("float32")
    resized = resized.transpose((2, 0, 1)) / 255
    resized -= 0.5
    resized /= 0.5
    padded = np.zeros((3, 48, 192), dtype=np.float32)
    padded[:, :, :resized_w] = resized
    return padded


TEXT_DIRECTION = params(
    decoder="opencv",
    color_mode="BGR",
    layout="NCHW",
    resize_method="bilinear",
    element_type="float32",
    scale=255.0,
    mean=[0.5, 0.5, 0.5],
    std=[0.5, 0.5, 0.5],
    resize_side={"side": "height", "size": 48, "max_size": 192, "multiple_of": 1, "rounding": "up"},
    pad={"size": [48, 192], "multiple_of": None, "position": "top_left", "value": 0.0},
)


@pytest.mark.parametrize("shape", [(20, 100), (30, 40), (48, 48), (7, 500), (64, 33)])
def test_resize_by_height_and_pad_give_a_text_classifiers_own_input(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    encoded = encode(rng.integers(0, 256, (*shape, 3), dtype=np.uint8))
    ours = ImagePreprocessor(TEXT_DIRECTION)(encoded)
    reference = _text_direction_reference(encoded)
    assert ours.shape == reference.shape == (3, 48, 192)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("decoder", DECODERS)
def test_resize_by_the_shorter_side_caps_the_longer_and_rounds_to_multiples(decoder: str) -> None:
    image = encode(np.zeros((300, 500, 3), dtype=np.uint8))
    side = {"side": "shorter", "size": 200, "max_size": 288, "multiple_of": 32}
    # 200/300 would make the longer side 333 > 288: scaled by 288/500 instead, to 172.8x288,
    # then each side to a multiple of 32 (172.8/32 = 5.4), capped at 288 (a multiple).
    for rounding, expected in (
        ("half_up", (160, 288)),
        ("up", (192, 288)),
        ("down", (160, 288)),
        ("half_even", (160, 288)),
    ):
        p = params(decoder=decoder, resize_side={**side, "rounding": rounding})
        assert ImagePreprocessor(p)(image).shape[:2] == expected, rounding
    longer = params(
        resize_side={
            "side": "longer",
            "size": 50,
            "max_size": None,
            "multiple_of": 1,
            "rounding": "half_even",
        }
    )
    assert ImagePreprocessor(longer)(image).shape[:2] == (30, 50)


def test_a_computed_side_never_passes_the_cap_or_the_largest_side() -> None:
    tall = encode(np.zeros((10, 300, 3), dtype=np.uint8))
    # height 48: width 1440 rounded up to a multiple of 16, capped at 192 (a multiple of 16).
    capped = {"side": "height", "size": 48, "max_size": 192, "multiple_of": 16, "rounding": "up"}
    assert ImagePreprocessor(params(resize_side=capped))(tall).shape[:2] == (48, 192)
    endless = {**capped, "max_size": None, "size": 64, "multiple_of": 1}
    line = encode(np.zeros((1, 200, 3), dtype=np.uint8))
    with pytest.raises(ProcessingError, match="would make a 1x200 image 64x12800") as refused:
        ImagePreprocessor(params(resize_side=endless))(line)
    assert refused.value.parameter == "resize_side.max_size"


def test_letterbox_centres_the_image_on_the_pad_value() -> None:
    image = encode(np.full((20, 40, 3), 200, dtype=np.uint8))
    letterbox = params(
        resize_side={
            "side": "longer",
            "size": 64,
            "max_size": None,
            "multiple_of": 1,
            "rounding": "half_even",
        },
        pad={"size": [64, 64], "multiple_of": None, "position": "center", "value": [114, 115, 116]},
    )
    out = ImagePreprocessor(letterbox)(image)
    assert out.shape == (64, 64, 3)
    assert (out[16:48] == 200).all()  # the 32x64 image, 16 rows from the top
    assert out[:16].tolist() == out[48:].tolist() == [[[114, 115, 116]] * 64] * 16


def test_pad_to_a_multiple_grows_each_side_to_the_next_one() -> None:
    image = encode(np.full((50, 70, 3), 9, dtype=np.uint8))
    p = params(pad={"size": None, "multiple_of": 32, "position": "top_left", "value": 0})
    out = ImagePreprocessor(p)(image)
    assert out.shape == (64, 96, 3)
    assert (out[:50, :70] == 9).all() and (out[50:] == 0).all() and (out[:, 70:] == 0).all()
    # Two images of different sizes that pad to the same size share a batch.
    other = encode(np.full((60, 90, 3), 1, dtype=np.uint8))
    assert ImagePreprocessor(p).batch([image, other]).shape == (2, 64, 96, 3)


@pytest.mark.parametrize(
    ("overrides", "parameter"),
    [
        (
            {
                "resize_size": [8, 8],
                "resize_side": {
                    "side": "height",
                    "size": 8,
                    "max_size": None,
                    "multiple_of": 1,
                    "rounding": "up",
                },
            },
            "resize_side",
        ),
        (
            {
                "resize_side": {
                    "side": "diagonal",
                    "size": 8,
                    "max_size": None,
                    "multiple_of": 1,
                    "rounding": "up",
                }
            },
            "resize_side.side",
        ),
        (
            {
                "resize_side": {
                    "side": "height",
                    "size": 8,
                    "max_size": None,
                    "multiple_of": 1,
                    "rounding": "nearest",
                }
            },
            "resize_side.rounding",
        ),
        (
            {"resize_side": {"side": "height", "size": 8, "max_size": None, "multiple_of": 1}},
            "resize_side",
        ),
        (
            {
                "resize_side": {
                    "side": "longer",
                    "size": 8,
                    "max_size": 9,
                    "multiple_of": 1,
                    "rounding": "up",
                }
            },
            "resize_side.max_size",
        ),
        (
            {
                "resize_side": {
                    "side": "height",
                    "size": 10,
                    "max_size": None,
                    "multiple_of": 4,
                    "rounding": "up",
                }
            },
            "resize_side.size",
        ),
        (
            {
                "resize_side": {
                    "side": "height",
                    "size": 0,
                    "max_size": None,
                    "multiple_of": 1,
                    "rounding": "up",
                }
            },
            "resize_side.size",
        ),
        ({"pad": {"size": [4, 4], "multiple_of": 8, "position": "center", "value": 0}}, "pad.size"),
        ({"pad": {"size": [4], "multiple_of": None, "position": "center", "value": 0}}, "pad.size"),
        (
            {"pad": {"size": None, "multiple_of": 8, "position": "middle", "value": 0}},
            "pad.position",
        ),
        (
            {"pad": {"size": None, "multiple_of": 8, "position": "center", "value": 0.5}},
            "pad.value",
        ),
        (
            {"pad": {"size": None, "multiple_of": 8, "position": "center", "value": [1, 2]}},
            "pad.value",
        ),
    ],
)
def test_bad_geometry_is_refused_naming_the_parameter(overrides: dict, parameter: str) -> None:
    with pytest.raises(ProcessingError) as refused:
        ImagePreprocessor(params(**overrides))
    assert refused.value.parameter == parameter, str(refused.value)
    assert f"'{parameter}'" in str(refused.value)


def test_an_image_larger_than_the_pad_size_is_an_error_not_a_crop() -> None:
    p = params(pad={"size": [4, 4], "multiple_of": None, "position": "center", "value": 0})
    with pytest.raises(ProcessingError, match=r"comes out 6x5, larger than pad size \[4, 4\]"):
        ImagePreprocessor(p)(encode(np.zeros((6, 5, 3), dtype=np.uint8)))


def test_convert_then_normalize_follows_its_formula() -> None:
    pre = ImagePreprocessor(
        params(**HALF, element_type="float32", normalization_order="convert_then_normalize")
    )

    out = pre(BYTE_100)

    assert out.dtype == np.float32
    assert np.all(out == np.float32((100 / 255 - 0.5) / 0.5))


def test_normalize_then_convert_subtracts_the_byte_mean_with_wrap_around() -> None:
    pre = ImagePreprocessor(
        params(**HALF, element_type="float32", normalization_order="normalize_then_convert")
    )

    # round(0.5 * 255) = 128; uint8(100 - 128) = 228 (wraps), uint8(200 - 128) = 72.
    assert np.all(pre(BYTE_100) == np.float32((228 / 255) / 0.5))
    assert np.all(pre(BYTE_200) == np.float32((72 / 255) / 0.5))


def test_the_two_orders_differ_and_float64_is_exact() -> None:
    orders = {
        order: ImagePreprocessor(params(**HALF, element_type="float64", normalization_order=order))(
            BYTE_100
        )
        for order in ("convert_then_normalize", "normalize_then_convert")
    }

    assert orders["convert_then_normalize"][0, 0, 0] == (100 / 255 - 0.5) / 0.5
    assert orders["normalize_then_convert"][0, 0, 0] == 228 / 255 / 0.5
    assert orders["convert_then_normalize"].dtype == np.float64


def test_mean_and_std_apply_per_channel_in_color_mode_order() -> None:
    common = {"element_type": "float32", "scale": 255.0, "mean": [1.0, 0.0, 0.5]}
    rgb = ImagePreprocessor(params(**common, std=[1.0, 1.0, 0.25]))(RED_BLUE)
    bgr = ImagePreprocessor(params(**common, std=[1.0, 1.0, 0.25], color_mode="BGR"))(RED_BLUE)

    # Left pixel is red: RGB (1, 0, 0), BGR (0, 0, 1).
    assert rgb[0, 0].tolist() == [0.0, 0.0, -2.0]
    assert bgr[0, 0].tolist() == [-1.0, 0.0, 2.0]


def test_element_types_are_honoured() -> None:
    assert ImagePreprocessor(params(element_type="float16"))(RED_BLUE).dtype == np.float16
    signed = ImagePreprocessor(params(element_type="int8", mean=[128.0]))(RED_BLUE)
    assert signed.dtype == np.int8
    assert signed[0, 0].tolist() == [127, -128, -128]
    assert ImagePreprocessor(params(element_type="int64"))(RED_BLUE).dtype == np.int64


def test_values_an_integer_type_cannot_hold_are_refused() -> None:
    with pytest.raises(ProcessingError, match="element_type") as error:
        ImagePreprocessor(params(element_type="int8"))  # 0..255 does not fit int8
    assert error.value.parameter == "element_type"


# -- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", IMAGE_PARAMETERS)
def test_every_missing_parameter_is_named(name: str) -> None:
    incomplete = params()
    del incomplete[name]

    with pytest.raises(ProcessingError, match=name) as error:
        ImagePreprocessor(incomplete)
    assert error.value.parameter == name


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("decoder", "skimage"),
        ("color_mode", "rgb"),
        ("layout", "CHW"),
        ("resize_method", "fancy"),
        ("resize_size", [0, 5]),
        ("resize_size", [224]),
        ("keep_aspect_ratio", "yes"),
        ("crop_method", "random"),
        ("crop_size", [2, 2]),  # with crop_method none
        ("element_type", "float8"),
        ("normalization_order", "whatever"),
        ("scale", 0),
        ("mean", "0.5"),
        ("mean", [0.1, 0.2]),  # two values for three channels
        ("std", [0.0]),
    ],
)
def test_a_bad_value_is_refused_naming_its_parameter(name: str, value: object) -> None:
    with pytest.raises(ProcessingError, match=name) as error:
        ImagePreprocessor(params(**{name: value}))
    assert error.value.parameter == name


def test_keep_aspect_ratio_needs_a_resize_size_and_center_crop_a_crop_size() -> None:
    with pytest.raises(ProcessingError, match="keep_aspect_ratio"):
        ImagePreprocessor(params(keep_aspect_ratio=True))
    with pytest.raises(ProcessingError, match="crop_size"):
        ImagePreprocessor(params(crop_method="center"))


def test_an_unknown_parameter_is_refused() -> None:
    with pytest.raises(ProcessingError, match="colour_mode"):
        ImagePreprocessor(params(colour_mode="BGR"))


def test_preprocessor_for_picks_by_input_type() -> None:
    image = preprocessor_for({"name": "image", "type": "image", "parameters": params()})
    tensor = preprocessor_for(
        {"name": "x", "type": "tensor", "parameters": {"element_type": "int32"}}
    )

    assert isinstance(image, ImagePreprocessor)
    assert isinstance(tensor, TensorPreprocessor)
    with pytest.raises(ProcessingError, match="type"):
        preprocessor_for({"name": "x", "type": "audio", "parameters": {}})


# -- tensor inputs ---------------------------------------------------------------------------


def test_tensor_inputs_are_normalized_and_cast() -> None:
    pre = TensorPreprocessor({"element_type": "float32", "mean": [1.0, 2.0], "std": [2.0, 4.0]})
    buffer = io.BytesIO()
    np.save(buffer, np.array([[3, 6], [5, 10]], dtype=np.int64))

    from_npy = pre(buffer.getvalue())
    batch = pre.batch([[3, 6], [5, 10]])

    assert from_npy.dtype == np.float32
    assert from_npy.tolist() == [[1.0, 1.0], [2.0, 2.0]]
    assert batch.tolist() == [[1.0, 1.0], [2.0, 2.0]]
    assert TensorPreprocessor({"element_type": "int64"})([1.0, 2.0]).dtype == np.int64
    with pytest.raises(ProcessingError, match="std"):
        TensorPreprocessor({"element_type": "float32", "mean": [1.0]})


# -- postprocessing --------------------------------------------------------------------------


def test_logits_go_through_softmax() -> None:
    logits = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)

    [top] = postprocess(logits, output_type="logits", top_k=3, labels=["a", "b", "c"])

    expected = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    assert [(i, label) for i, label, _ in top] == [(2, "c"), (1, "b"), (0, "a")]
    np.testing.assert_allclose([p for _, _, p in top], expected[::-1], rtol=1e-12)


def test_softmax_is_stable_for_huge_logits() -> None:
    [top] = postprocess(
        np.array([[1000.0, 1001.0]]), output_type="logits", top_k=2, labels=["a", "b"]
    )

    assert top[0][0] == 1
    np.testing.assert_allclose(top[0][2], 1 / (1 + np.exp(-1)))
    assert sum(p for _, _, p in top) == pytest.approx(1.0)


def test_probabilities_are_used_as_they_are() -> None:
    probabilities = np.array([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]])

    rows = postprocess(probabilities, output_type="probabilities", top_k=2, labels=["a", "b", "c"])

    assert rows == [[(1, "b", 0.7), (2, "c", 0.2)], [(0, "a", 0.5), (1, "b", 0.25)]]


def test_ties_go_to_the_lower_class_index_and_top_k_is_clipped() -> None:
    probabilities = np.array([[0.2, 0.3, 0.2, 0.3]])

    [top] = postprocess(
        probabilities, output_type="probabilities", top_k=10, labels=["w", "x", "y", "z"]
    )

    assert [i for i, _, _ in top] == [1, 3, 0, 2]
    assert [label for _, label, _ in top] == ["x", "z", "w", "y"]


def test_labels_must_match_the_classes() -> None:
    with pytest.raises(ProcessingError, match="labels"):
        postprocess(np.zeros((1, 3)), output_type="logits", top_k=1, labels=["a", "b"])


def test_load_labels_reads_inline_lists_and_files(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\n\n", encoding="utf-8")
    fetched: list[str] = []

    def fetch(url: str) -> Path:
        fetched.append(url)
        return tmp_path / "labels.txt"

    assert load_labels({"labels": ["a", "b"]}, fetch) == ["a", "b"]
    assert load_labels({"labels_path": "repo://models/m/1.0.0/labels.txt"}, fetch) == [
        "cat",
        "dog",
    ]
    assert fetched == ["repo://models/m/1.0.0/labels.txt"]
    with pytest.raises(ProcessingError, match="labels"):
        load_labels({}, fetch)


def test_a_tensor_inputs_shape_is_held_to_dynamic_dimensions_included() -> None:
    from predictors.processing import ProcessingError, TensorPreprocessor

    fixed = TensorPreprocessor({"element_type": "float32", "shape": [None, 3]})
    assert fixed.batch([np.zeros((5, 3)), np.ones((5, 3))]).shape == (2, 5, 3)
    assert fixed(np.zeros((7, 3))).shape == (7, 3)  # the first dimension is dynamic
    with pytest.raises(ProcessingError) as wrong:
        fixed(np.zeros((5, 4)))
    assert wrong.value.parameter == "shape" and "(?, 3)" in str(wrong.value)
    with pytest.raises(ProcessingError):
        fixed(np.zeros(3))  # a missing dimension
    with pytest.raises(ProcessingError) as bad:
        TensorPreprocessor({"element_type": "float32", "shape": [0, "x"]})
    assert bad.value.parameter == "shape"


def test_a_cap_that_is_no_multiple_is_refused() -> None:
    side = {"side": "height", "size": 48, "max_size": 190, "multiple_of": 32, "rounding": "up"}
    with pytest.raises(ProcessingError) as refused:
        ImagePreprocessor(params(resize_side=side))
    assert refused.value.parameter == "resize_side.max_size"
    assert "must be a multiple of multiple_of (32)" in str(refused.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"resize_size": None},
        {"resize_size": [6, 10]},
        {"resize_size": [6, 6], "keep_aspect_ratio": True},
        {"resize_size": None, "crop_method": "center", "crop_size": [3, 3]},
        {
            "resize_size": None,
            "pad": {"size": None, "multiple_of": 4, "position": "top_left", "value": 0.0},
        },
        {
            "resize_size": None,
            "resize_side": {
                "side": "shorter",
                "size": 8,
                "max_size": 16,
                "multiple_of": 2,
                "rounding": "half_up",
            },
            "pad": {"size": [16, 24], "multiple_of": None, "position": "center", "value": 0.0},
        },
        {"resize_size": [8, 8], "pad_square": {"position": "center", "value": 0}},
    ],
)
def test_the_output_size_is_what_the_image_becomes(changes: dict) -> None:
    """`output_size` (what the hub asks at launch of a split's images) is the shape the
    preprocessor gives each image, whatever its size."""
    from predictors.processing import ImagePreprocessor
    from tests.hub.factories import IMAGE_PARAMETERS

    parameters = {**IMAGE_PARAMETERS, "layout": "NHWC"}  # (height, width) first
    preprocessor = ImagePreprocessor({**parameters, **changes})
    for height, width in ((5, 7), (9, 4), (8, 8), (13, 11)):
        buffer = io.BytesIO()
        Image.new("RGB", (width, height), (10, 20, 30)).save(buffer, format="PNG")
        made = preprocessor(buffer.getvalue())
        assert made.shape[:2] == preprocessor.output_size(height, width), (height, width)
