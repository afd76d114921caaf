"""The zoo's text detector and its dataset: where the printed lines of a page are.

``text-pages``: pages of printed English lines (phrases of the Zen of Python, drawn as
``text-lines`` draws them: Pillow's own font at 14 to 29 px, dark ink on light paper with a
little noise), 3 to 7 lines a page at random places that do not touch, each boxed as COCO does
([x, y, width, height] in pixels: the box of the line's ink, as Pillow measures it) with the one
class ``text``. Pages are 320 x 480 px (height x width), PNG, 20 validation pages, seeded.

``text-detector``: PaddleOCR's PP-OCRv4 text detector (DBNet: a per-pixel probability that a
pixel is inside a text line) as the rapidocr-onnxruntime 1.4.4 wheel ships it
(``models/ch_PP-OCRv4_det_infer.onnx``, checked by its SHA-256). Its boxes come from its
probability map by rapidocr's ``DBPostProcess`` (threshold, contours, the score of each box,
the box grown back by its unclip ratio), written as the manifest's custom postprocess code
(``manifests/models/text-detector/onnxruntime.yaml``): a detector decoded by custom code.

The pages are at the detector's own input size. ``DetPreProcess`` scales an image by a limit
and then stretches each side to a multiple of 32, which no input parameter does; configured as
PaddleOCR configures it by default (``limit_type: max``: an image of at most 960 px a side is
not scaled; rapidocr's own default, ``min`` 736, scales every smaller page up, and runs about 4
times longer), both steps are the identity at 320 x 480, so that the manifest's pipeline is the
package's, input by input (``tests/predictors/test_pretrained_text_detector.py``).

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/text-pages/1.0.0/validation.parquet``: ``image`` (PNG), ``boxes``, ``classes``;
- ``models/text-detector/1.0.0/text-detector.onnx``.
"""

from __future__ import annotations

import numpy as np

from predictors.zoo.common import Column, build_generated, png_bytes
from predictors.zoo.pretrained import Pretrained, store_pretrained

DATASET = "text-pages"
MODEL = "text-detector"
LABELS = ("text",)
SEED = 20261129
COUNT = 20
HEIGHT, WIDTH = 320, 480
# Lines a page, and the space kept free around each line's box (pixels).
LINES = (3, 8)
GAP = 8

DETECTOR = Pretrained(
    name=MODEL,
    package="rapidocr-onnxruntime",
    version="1.4.4",
    module="rapidocr_onnxruntime",
    resource="models/ch_PP-OCRv4_det_infer.onnx",
    sha256="d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    file=f"{MODEL}.onnx",
    license="Apache-2.0",
)


def _page(rng: np.random.Generator, lines: list[list[str]]) -> tuple[np.ndarray, list, list]:
    """One page: its pixels (H, W, 3 uint8), its lines' boxes [x, y, width, height] and
    classes."""
    from PIL import Image, ImageDraw, ImageFont

    paper = int(rng.integers(215, 256))
    tint = max(0, paper - int(rng.integers(0, 20)))
    image = Image.new("RGB", (WIDTH, HEIGHT), (paper, paper, tint))
    draw = ImageDraw.Draw(image)
    ink = int(rng.integers(0, 70))
    boxes: list[list[float]] = []
    wanted = int(rng.integers(*LINES))
    for _ in range(wanted * 20):  # places tried until the page holds its lines
        if len(boxes) == wanted:
            break
        words = lines[int(rng.integers(len(lines)))]
        start = int(rng.integers(0, max(1, len(words) - 1)))
        text = " ".join(words[start : start + int(rng.integers(2, 8))])
        font = ImageFont.load_default(size=int(rng.integers(14, 30)))
        left, top, right, bottom = (int(v) for v in draw.textbbox((0, 0), text, font=font))
        width, height = right - left, bottom - top
        if width > WIDTH - 2 * GAP:
            continue
        x = int(rng.integers(GAP, WIDTH - GAP - width + 1))
        y = int(rng.integers(GAP, HEIGHT - GAP - height + 1))
        box = [float(x), float(y), float(width), float(height)]
        if any(_near(box, other) for other in boxes):
            continue
        draw.text((x - left, y - top), text, font=font, fill=(ink,) * 3)
        boxes.append(box)
    pixels = np.asarray(image, dtype=np.int16)
    noise = rng.normal(0, rng.uniform(0, 6), pixels.shape)
    return np.clip(pixels + noise, 0, 255).astype(np.uint8), boxes, [0] * len(boxes)


def _near(a: list[float], b: list[float]) -> bool:
    """Whether two boxes come within GAP pixels of each other."""
    return not (
        a[0] + a[2] + GAP <= b[0]
        or b[0] + b[2] + GAP <= a[0]
        or a[1] + a[3] + GAP <= b[1]
        or b[1] + b[3] + GAP <= a[1]
    )


def make_pages() -> tuple[list[bytes], list[list[list[float]]], list[list[int]]]:
    """The validation pages as PNG files, their boxes and their classes."""
    from predictors.zoo.datasets import zen_lines

    lines = [line.split() for line in zen_lines()]
    rng = np.random.default_rng(SEED)
    images, boxes, classes = [], [], []
    for _ in range(COUNT):
        pixels, page_boxes, page_classes = _page(rng, lines)
        images.append(png_bytes(pixels))
        boxes.append(page_boxes)
        classes.append(page_classes)
    return images, boxes, classes


def split_columns(split: str) -> list[Column]:
    import pyarrow as pa

    images, boxes, classes = make_pages()
    return [
        ("image", images, pa.binary()),
        ("boxes", boxes, pa.list_(pa.list_(pa.float64(), 4))),
        ("classes", classes, pa.list_(pa.int64())),
    ]


def build_dataset(store: str) -> dict:
    return build_generated(store, DATASET, LABELS, "png", split_columns, ("validation",))


def build_model(store: str) -> dict:
    return store_pretrained(store, DETECTOR)
