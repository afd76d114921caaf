"""The zoo's datasets: generated deterministically, stored as Parquet, read back as model input.

A split is a Parquet file with two columns, ``image`` (the encoded PNG or JPEG file bytes) and
``label`` (int64), written in row groups of ``ROW_GROUP_SIZE`` rows so that readers can stream it
in batches. Both datasets are made from data that ships inside a package or from a fixed seed, so
that every build writes the same bytes.

``decode`` then ``normalize`` is the processing the zoo's manifests document (decode with Pillow,
convert the color mode, divide by 255, subtract the mean and divide by the standard deviation per
channel, in float): the models are trained and evaluated on exactly that.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from predictors.zoo.common import build_splits, dataset_metadata, parquet_bytes
from predictors.zoo.store import VERSION

ROW_GROUP_SIZE = 256


@dataclass(frozen=True)
class ImageSpec:
    """The input processing of a zoo model, as its manifest states it."""

    color_mode: str  # "GRAY" or "RGB"
    size: tuple[int, int]  # (height, width)
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale: float = 255.0

    @property
    def channels(self) -> int:
        return 1 if self.color_mode == "GRAY" else 3


@dataclass(frozen=True)
class Split:
    images: list[bytes]
    labels: np.ndarray  # int64


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    encoding: str  # "png" or "jpeg"
    labels: tuple[str, ...]
    image: ImageSpec
    make: Callable[[], dict[str, Split]]

    @property
    def directory(self) -> str:
        return f"datasets/{self.name}/{VERSION}"

    def split_path(self, split: str) -> str:
        return f"{self.directory}/{split}.parquet"


SPLITS = ("train", "validation")


# --- digits ---------------------------------------------------------------------------------


def make_digits() -> dict[str, Split]:
    """scikit-learn's 8x8 digits as grayscale PNGs, split 80/20, stratified, random_state=0."""
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = np.rint(digits.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
    labels = digits.target.astype(np.int64)
    train_idx, val_idx = train_test_split(
        np.arange(len(labels)), test_size=0.2, random_state=0, stratify=labels
    )

    def encode(index: np.ndarray) -> Split:
        images = []
        for i in index:
            buffer = io.BytesIO()
            Image.fromarray(pixels[i], mode="L").save(buffer, format="PNG")
            images.append(buffer.getvalue())
        return Split(images, labels[index])

    return {"train": encode(train_idx), "validation": encode(val_idx)}


# --- shapes-color ---------------------------------------------------------------------------

SHAPE_COLORS = ("red", "green", "blue")
SHAPE_KINDS = ("circle", "square", "triangle")
SHAPES_SEED = 20240917
SHAPES_COUNTS = {"train": 2000, "validation": 500}
SHAPES_SIZE = 32
_SUPERSAMPLE = 4


def _shape_image(rng: np.random.Generator, color: int, kind: int) -> np.ndarray:
    """One 32x32 RGB image: a colored shape on a dark, noisy, slightly tinted background.

    The class depends on the color and on the shape, so a model must use both: swapping R and B
    turns red classes into blue ones; the dark background (below 128) wraps around when the mean
    is subtracted in byte space; reading NHWC memory as NCHW scrambles everything.
    """
    from PIL import Image, ImageDraw

    size = SHAPES_SIZE * _SUPERSAMPLE
    gray = rng.uniform(25, 105)
    background = np.clip(gray + rng.uniform(-15, 15, size=3), 0, 255)
    fill = rng.uniform(0, 70, size=3)
    fill[color] = rng.uniform(170, 255)

    canvas = Image.new("RGB", (size, size), tuple(int(v) for v in background))
    draw = ImageDraw.Draw(canvas)
    radius = rng.uniform(7.0, 13.0) * _SUPERSAMPLE
    margin = radius + 1.0 * _SUPERSAMPLE
    cx, cy = rng.uniform(margin, size - margin, size=2)
    # Squares stand on a side, triangles point up; a little tilt (up to 10 degrees) either way.
    tilt = rng.uniform(-1.0, 1.0) * math.radians(10)
    rgb = tuple(int(v) for v in fill)
    if SHAPE_KINDS[kind] == "circle":
        r = radius * 0.85
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=rgb)
    else:
        corners = 4 if SHAPE_KINDS[kind] == "square" else 3
        angle = tilt + (math.pi / 4 if corners == 4 else -math.pi / 2)
        points = [
            (
                cx + radius * math.cos(angle + 2 * math.pi * k / corners),
                cy + radius * math.sin(angle + 2 * math.pi * k / corners),
            )
            for k in range(corners)
        ]
        draw.polygon(points, fill=rgb)
    small = canvas.resize((SHAPES_SIZE, SHAPES_SIZE), Image.Resampling.BOX)
    noise = rng.normal(0.0, 8.0, size=(SHAPES_SIZE, SHAPES_SIZE, 3))
    return np.clip(np.asarray(small, dtype=np.float64) + noise, 0, 255).round().astype(np.uint8)


def make_shapes_color() -> dict[str, Split]:
    """Generated 32x32 RGB JPEGs (quality 90): 3 colors x 3 shapes = 9 balanced classes."""
    from PIL import Image

    splits = {}
    for index, (split, count) in enumerate(SHAPES_COUNTS.items()):
        rng = np.random.default_rng([SHAPES_SEED, index])
        classes = len(SHAPE_COLORS) * len(SHAPE_KINDS)
        labels = rng.permutation(np.arange(count) % classes).astype(np.int64)
        images = []
        for label in labels:
            color, kind = divmod(int(label), len(SHAPE_KINDS))
            buffer = io.BytesIO()
            Image.fromarray(_shape_image(rng, color, kind), mode="RGB").save(
                buffer, format="JPEG", quality=90
            )
            images.append(buffer.getvalue())
        splits[split] = Split(images, labels)
    return splits


# --- text-lines -----------------------------------------------------------------------------

TEXT_SEED = 20261125
TEXT_COUNTS = {"train": 200, "validation": 600}
TEXT_DIRECTIONS = ("0", "180")


def zen_lines() -> list[str]:
    """The lines of the Zen of Python, read from the standard library's `this` module without
    running it (it prints when imported)."""
    import ast
    import codecs
    import importlib.util

    spec = importlib.util.find_spec("this")
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    encoded = next(
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )
    text = codecs.decode(encoded, "rot13")
    return [line for line in text.splitlines()[2:] if line.strip()]


def _text_line(rng: np.random.Generator, words: list[str]) -> np.ndarray:
    """One text line as a word processor prints it (`text_line`), without its text."""
    return text_line(rng, words)[0]


def text_line(rng: np.random.Generator, words: list[str]) -> tuple[np.ndarray, str]:
    """One text line as a word processor prints it: dark text on a light, slightly uneven
    background, in Pillow's own scalable font at a random size, with a margin; its pixels
    (H, W, 3 uint8) and its text."""
    from PIL import Image, ImageDraw, ImageFont

    start = int(rng.integers(0, max(1, len(words) - 1)))
    count = int(rng.integers(2, 8))
    text = " ".join(words[start : start + count])
    font = ImageFont.load_default(size=int(rng.integers(18, 40)))
    left, top, right, bottom = font.getbbox(text)
    margin_x, margin_y = int(rng.integers(2, 12)), int(rng.integers(2, 10))
    size = (int(right - left) + 2 * margin_x, int(bottom - top) + 2 * margin_y)
    paper = int(rng.integers(205, 256))
    image = Image.new("RGB", size, (paper, paper, max(0, paper - int(rng.integers(0, 25)))))
    ink = int(rng.integers(0, 70))
    origin = (margin_x - int(left), margin_y - int(top))
    ImageDraw.Draw(image).text(origin, text, font=font, fill=(ink,) * 3)
    pixels = np.asarray(image, dtype=np.int16)
    noise = rng.normal(0, rng.uniform(0, 6), pixels.shape)
    return np.clip(pixels + noise, 0, 255).astype(np.uint8), text


def make_text_lines() -> dict[str, Split]:
    """Printed English text lines (phrases of the Zen of Python), upright (label "0") or upside
    down (label "180", the same line rotated by 180 degrees), balanced, as PNG."""
    from PIL import Image

    lines = [line.split() for line in zen_lines()]
    rng = np.random.default_rng(TEXT_SEED)
    splits = {}
    for split in SPLITS:
        count = TEXT_COUNTS[split]
        labels = np.asarray([i % 2 for i in range(count)], dtype=np.int64)
        images = []
        for label in labels:
            pixels = _text_line(rng, lines[int(rng.integers(len(lines)))])
            if label == 1:
                pixels = np.ascontiguousarray(pixels[::-1, ::-1])
            buffer = io.BytesIO()
            Image.fromarray(pixels, mode="RGB").save(buffer, format="PNG")
            images.append(buffer.getvalue())
        splits[split] = Split(images, labels)
    return splits


DIGITS = DatasetSpec(
    name="digits",
    encoding="png",
    labels=tuple(str(d) for d in range(10)),
    image=ImageSpec(color_mode="GRAY", size=(8, 8), mean=(0.5,), std=(0.5,)),
    make=make_digits,
)
SHAPES = DatasetSpec(
    name="shapes-color",
    encoding="jpeg",
    labels=tuple(f"{c}-{k}" for c in SHAPE_COLORS for k in SHAPE_KINDS),
    image=ImageSpec(color_mode="RGB", size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3),
    make=make_shapes_color,
)
TEXT_LINES = DatasetSpec(
    name="text-lines",
    encoding="png",
    labels=TEXT_DIRECTIONS,
    # The input of the text-direction classifier that is evaluated on it (its manifest).
    image=ImageSpec(color_mode="BGR", size=(48, 192), mean=(0.5,) * 3, std=(0.5,) * 3),
    make=make_text_lines,
)
DATASETS = {spec.name: spec for spec in (DIGITS, SHAPES, TEXT_LINES)}


# --- Parquet --------------------------------------------------------------------------------


def to_parquet(split: Split, spec: DatasetSpec) -> bytes:
    """The split as Parquet bytes, in row groups of ROW_GROUP_SIZE rows."""
    import pyarrow as pa

    columns = [("image", split.images, pa.binary()), ("label", split.labels, pa.int64())]
    metadata = dataset_metadata(spec.name, spec.labels, spec.encoding)
    return parquet_bytes(columns, metadata, ROW_GROUP_SIZE)


def iter_batches(path: Path, batch_size: int = ROW_GROUP_SIZE) -> Iterator[Split]:
    """Stream a split file in batches, without reading it whole."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as parquet:
        for batch in parquet.iter_batches(batch_size=batch_size, columns=["image", "label"]):
            images = batch.column("image").to_pylist()
            labels = batch.column("label").to_numpy().astype(np.int64)
            yield Split(images, labels)


def read_split(path: Path) -> Split:
    images: list[bytes] = []
    labels: list[np.ndarray] = []
    for batch in iter_batches(path):
        images.extend(batch.images)
        labels.append(batch.labels)
    return Split(images, np.concatenate(labels) if labels else np.zeros(0, np.int64))


def count_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


# --- the documented preprocessing -----------------------------------------------------------


def decode(images: Sequence[bytes], spec: ImageSpec) -> np.ndarray:
    """Decode with Pillow, convert the color mode, resize (bilinear) if needed; NHWC uint8."""
    from PIL import Image

    height, width = spec.size
    mode = "L" if spec.color_mode == "GRAY" else "RGB"
    batch = np.empty((len(images), height, width, spec.channels), np.uint8)
    for i, data in enumerate(images):
        with Image.open(io.BytesIO(data)) as file:
            image = file.convert(mode)
        if image.size != (width, height):
            image = image.resize((width, height), Image.Resampling.BILINEAR)
        batch[i] = np.asarray(image, np.uint8).reshape(height, width, spec.channels)
    return batch


def normalize(pixels: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """NHWC uint8 -> NCHW float32: x = (x / scale - mean) / std per channel (in float)."""
    mean = np.asarray(spec.mean, np.float32)
    std = np.asarray(spec.std, np.float32)
    x = (pixels.astype(np.float32) / np.float32(spec.scale) - mean) / std
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


# --- pitfalls: what a model sees when its input is processed the wrong way ------------------


def pitfall_inputs(pixels: np.ndarray, spec: ImageSpec) -> dict[str, np.ndarray]:
    """NCHW float32 inputs made with one documented parameter wrong (docs/pitfalls.md)."""
    mean = np.asarray(spec.mean, np.float32)
    std = np.asarray(spec.std, np.float32)
    # normalize_then_convert: the mean taken to byte space and subtracted in uint8 (wrapping).
    byte_mean = np.rint(mean * spec.scale).astype(np.uint8)
    wrapped = (pixels - byte_mean).astype(np.float32)  # uint8 - uint8 wraps modulo 256
    variants = {
        "normalize_then_convert": np.ascontiguousarray(
            (wrapped / np.float32(spec.scale) / std).transpose(0, 3, 1, 2)
        ),
        # NHWC memory handed to a model that reads NCHW.
        "nhwc_as_nchw": np.ascontiguousarray(
            ((pixels.astype(np.float32) / np.float32(spec.scale) - mean) / std).reshape(
                len(pixels), spec.channels, *spec.size
            )
        ),
    }
    if spec.channels == 3:
        variants["bgr"] = normalize(np.ascontiguousarray(pixels[..., ::-1]), spec)
    return variants


# --- writing a dataset into the store -------------------------------------------------------


def build_dataset(store: Path, spec: DatasetSpec) -> dict:
    """Generate the dataset and write its splits (atomically) into ``store``."""
    splits = spec.make()
    files = {name: (to_parquet(splits[name], spec), len(splits[name].labels)) for name in SPLITS}
    return build_splits(store, spec.name, spec.labels, spec.encoding, files)
