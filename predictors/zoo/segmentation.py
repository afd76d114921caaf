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
import json
from pathlib import Path

import numpy as np

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

    background = rng.integers(0, 256, 3)
    image = Image.new("RGB", (SIZE, SIZE), tuple(int(v) for v in background))
    draw = ImageDraw.Draw(image)
    mask = Image.new("L", (SIZE, SIZE), 0)
    rims = Image.new("L", (SIZE, SIZE), 0)
    for _ in range(int(rng.integers(1, 5))):
        size = int(rng.integers(8, 22))
        x, y = int(rng.integers(0, SIZE - size)), int(rng.integers(0, SIZE - size))
        kind = int(rng.integers(0, 3))
        color = rng.integers(0, 256, 3)
        while np.abs(color - background).sum() < 150:
            color = rng.integers(0, 256, 3)
        fill = tuple(int(v) for v in color)
        corners = (x, y, x + size - 1, y + size - 1)
        shape = Image.new("L", (SIZE, SIZE), 0)
        outline = ImageDraw.Draw(shape)
        if kind == 0:
            draw.ellipse(corners, fill=fill)
            outline.ellipse(corners, fill=255)
        elif kind == 1:
            draw.rectangle(corners, fill=fill)
            outline.rectangle(corners, fill=255)
        else:
            triangle = [(x + size / 2, y), (x, y + size - 1), (x + size - 1, y + size - 1)]
            draw.polygon(triangle, fill=fill)
            outline.polygon(triangle, fill=255)
        mask.paste(kind + 1, mask=shape)
        inner = shape.filter(ImageFilter.MinFilter(3))
        outer = shape.filter(ImageFilter.MaxFilter(3))
        rim = np.asarray(outer, np.int16) - np.asarray(inner, np.int16)
        rims.paste(255, mask=Image.fromarray((rim > 0).astype(np.uint8) * 255))
    classes = np.asarray(mask, np.uint8).copy()
    classes[np.asarray(rims) > 0] = IGNORE
    pixels = np.asarray(image, np.int16) + rng.normal(0, 8, (SIZE, SIZE, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8), classes


def _png(array: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def make_split(split: str) -> tuple[list[bytes], list[bytes]]:
    rng = np.random.default_rng(SEED + (0 if split == "train" else 1))
    images, masks = [], []
    for _ in range(COUNTS[split]):
        pixels, classes = _draw(rng)
        images.append(_png(pixels))
        masks.append(_png(classes))
    return images, masks


def to_parquet(images: list[bytes], masks: list[bytes]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [pa.field("image", pa.binary()), pa.field("mask", pa.binary())],
        metadata={"mlmodelscope.dataset": DATASET, "mlmodelscope.labels": json.dumps(LABELS)},
    )
    table = pa.Table.from_arrays(
        [pa.array(images, type=pa.binary()), pa.array(masks, type=pa.binary())], schema=schema
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=ROW_GROUP_SIZE, compression="none")
    return sink.getvalue()


def build_dataset(store: str) -> dict:
    from predictors.zoo.store import stage_splits

    splits = {name: make_split(name) for name in COUNTS}
    files = stage_splits(
        store,
        DATASET,
        {name: to_parquet(*split) for name, split in splits.items()},
        {name: len(split[0]) for name, split in splits.items()},
    )
    return {"files": files, "encoding": "png", "labels": list(LABELS), "ignore_label": IGNORE}


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

    pixels = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images])
    x = ((pixels.astype(np.float32) / 255.0 - MEAN) / STD).transpose(0, 3, 1, 2).copy()
    y = np.stack([np.asarray(Image.open(io.BytesIO(b))) for b in masks]).astype(np.int64)
    return x, y


def train(epochs: int = 6, batch_size: int = 32, learning_rate: float = 0.004):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    from predictors.zoo.training import fit, make_deterministic

    make_deterministic(SEED)
    model = _module()
    x, y = _arrays(*make_split("train"))
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    loss_fn = nn.CrossEntropyLoss(ignore_index=IGNORE)

    def batch_loss(index: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = loss_fn(model(inputs[index]), targets[index])
        return loss

    training = fit(
        model,
        len(inputs),
        batch_loss,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=SEED,
        label=MODEL,
        one_cycle=True,
    )
    return model, training


def build_model(store: str) -> dict:
    """Train the segmenter, export it as ONNX and TorchScript, check that both agree, and
    store them."""
    import torch

    from predictors.zoo import export
    from predictors.zoo.store import VERSION, Staging

    model, training = train()
    x, y = _arrays(*make_split("validation"))
    example = torch.from_numpy(x[:1])
    with Staging(Path(store), f"models/{MODEL}/{VERSION}") as staging:
        onnx, delta = export.stage_exports(staging, MODEL, model, example, LABELS, x, spatial=True)
        predicted = onnx.argmax(axis=1)
        scored = y != IGNORE
        pixel_accuracy = float(np.mean(predicted[scored] == y[scored]))
        if pixel_accuracy < 0.9:
            raise RuntimeError(f"{MODEL}: validation pixel accuracy {pixel_accuracy:.4f} < 0.9")
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "dataset": DATASET,
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": training,
        "validation_pixel_accuracy": pixel_accuracy,
        "max_abs_logit_diff": delta,
    }
