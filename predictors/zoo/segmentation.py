"""The zoo's semantic segmentation model and its dataset: shapes, pixel by pixel.

``shapes-masks``: SIZE x SIZE images with one to four circles, squares and triangles on a noisy
background, each with its mask (a PNG of class indices: 0 background, 1 circle, 2 square,
3 triangle) in which the one-pixel rim of every shape is IGNORE (255): the pixels whose class
the drawing leaves ambiguous, as VOC's masks mark object borders. The dataset manifest names
the ignore label; those pixels count for no class.

``shapes-segmenter``: a small fully convolutional network giving a class score per pixel,
(N, classes, H, W) logits, exported to ONNX and TorchScript from the same weights and checked
to agree on every validation image.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/shapes-masks/1.0.0/{train,validation}.parquet``: the columns ``image`` (PNG) and
  ``mask`` (PNG, 8-bit class indices), one row per image;
- ``models/shapes-segmenter/1.0.0/{shapes-segmenter.onnx,shapes-segmenter.pt,labels.txt}``.
"""

from __future__ import annotations

import io

import numpy as np

from predictors.zoo.common import (
    Column,
    Sketch,
    build_generated,
    draw_shape,
    image_tensor,
    png_bytes,
)

DATASET = "shapes-masks"
MODEL = "shapes-segmenter"
LABELS = ("background", "circle", "square", "triangle")
IGNORE = 255
SEED = 20261128
COUNTS = {"train": 800, "validation": 200}
SIZE = 48
ROW_GROUP_SIZE = 256
MEAN, STD = 0.5, 0.25


def _draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One image (SIZE, SIZE, 3 uint8) and its mask (SIZE, SIZE uint8)."""
    from PIL import Image, ImageDraw, ImageFilter

    sketch = Sketch(rng, SIZE, SIZE)
    mask = Image.new("L", (SIZE, SIZE), 0)
    rims = Image.new("L", (SIZE, SIZE), 0)
    for _ in range(int(rng.integers(1, 5))):
        size = int(rng.integers(8, 22))
        x, y = int(rng.integers(0, SIZE - size)), int(rng.integers(0, SIZE - size))
        kind = int(rng.integers(0, 3))
        shape = Image.new("L", (SIZE, SIZE), 0)
        sketch.shape(kind, x, y, size)
        draw_shape(ImageDraw.Draw(shape), kind, x, y, size, 255)
        mask.paste(kind + 1, mask=shape)
        inner = shape.filter(ImageFilter.MinFilter(3))
        outer = shape.filter(ImageFilter.MaxFilter(3))
        rim = np.asarray(outer, np.int16) - np.asarray(inner, np.int16)
        rims.paste(255, mask=Image.fromarray((rim > 0).astype(np.uint8) * 255))
    classes = np.asarray(mask, np.uint8).copy()
    classes[np.asarray(rims) > 0] = IGNORE
    return sketch.pixels(), classes


def make_split(split: str) -> tuple[list[bytes], list[bytes]]:
    rng = np.random.default_rng(SEED + (0 if split == "train" else 1))
    images, masks = [], []
    for _ in range(COUNTS[split]):
        pixels, classes = _draw(rng)
        images.append(png_bytes(pixels))
        masks.append(png_bytes(classes))
    return images, masks


def split_columns(split: str) -> list[Column]:
    import pyarrow as pa

    images, masks = make_split(split)
    return [("image", images, pa.binary()), ("mask", masks, pa.binary())]


def build_dataset(store: str) -> dict:
    return build_generated(
        store, DATASET, LABELS, "png", split_columns, COUNTS, ROW_GROUP_SIZE, ignore_label=IGNORE
    )


# --- the model ------------------------------------------------------------------------------


def _module():  # type: ignore[no-untyped-def]
    from torch import nn

    def block(inputs: int, outputs: int, dilation: int = 1) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, 1, dilation, dilation=dilation),
            nn.BatchNorm2d(outputs),
            nn.ReLU(),
        )

    return nn.Sequential(
        block(3, 24),
        block(24, 32),
        block(32, 32, 2),
        block(32, 32, 4),
        block(32, 32, 2),
        nn.Conv2d(32, len(LABELS), 1),
    )


def _arrays(images: list[bytes], masks: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    x = image_tensor(images, MEAN, STD)
    y = np.stack([np.asarray(Image.open(io.BytesIO(b))) for b in masks]).astype(np.int64)
    return x, y


def train(epochs: int = 6, batch_size: int = 32, learning_rate: float = 0.004):  # type: ignore[no-untyped-def]
    from torch import nn

    from predictors.zoo.training import TrainingPlan, fit, make_deterministic, supervised_loss

    make_deterministic(SEED)
    model = _module()
    x, y = _arrays(*make_split("train"))
    batch_loss = supervised_loss(model, x, y, nn.CrossEntropyLoss(ignore_index=IGNORE))
    plan = TrainingPlan(epochs, batch_size, learning_rate, SEED)
    return model, fit(model, len(x), batch_loss, plan, MODEL, one_cycle=True)


def build_model(store: str) -> dict:
    """Train the segmenter, export it as ONNX and TorchScript, check that both agree, and
    store them."""
    from predictors.zoo.export import store_exports

    model, training = train()
    x, y = _arrays(*make_split("validation"))

    def check(onnx: np.ndarray) -> dict[str, float]:
        predicted = onnx.argmax(axis=1)
        scored = y != IGNORE
        pixel_accuracy = float(np.mean(predicted[scored] == y[scored]))
        if pixel_accuracy < 0.9:
            raise RuntimeError(f"{MODEL}: validation pixel accuracy {pixel_accuracy:.4f} < 0.9")
        return {"validation_pixel_accuracy": pixel_accuracy}

    return store_exports(store, MODEL, DATASET, model, training, LABELS, x, check, spatial=True)
