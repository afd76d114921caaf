"""The zoo's object detector and its dataset: shapes on noisy backgrounds, boxed.

``shapes-boxes``: images of varied sizes (VALIDATION_SIZES pixels a side) with one to four
circles, squares and triangles, each boxed (COCO's [x, y, width, height] in pixels) and classed.
Train images are TRAIN_SIZE square (the detector is fully convolutional, so it runs at any size
a multiple of its stride); validation images vary, so that the latency is measured at the
manifest's dynamic input size.

``shapes-detector``: a small CenterNet-style detector (a heatmap of object centres per class at
stride 4, and each centre's box size and offset), whose graph decodes its own detections: the
MAX_DETECTIONS best peaks (a 3x3 max-pool keeps local maxima only) as ``boxes`` (N, K, 4: x1,
y1, x2, y2 in input pixels), ``scores`` (N, K) and ``classes`` (N, K, int64). Exported to ONNX
and TorchScript from the same weights, checked to agree on every validation image.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/shapes-boxes/1.0.0/{train,validation}.parquet``: the columns ``image`` (PNG),
  ``boxes`` (list of [x, y, w, h]) and ``classes`` (list of int64), one row per image;
- ``models/shapes-detector/1.0.0/{shapes-detector.onnx,shapes-detector.pt,labels.txt}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from predictors.zoo.common import (
    Column,
    Sketch,
    build_generated,
    image_tensor,
    labels_text,
    png_bytes,
    store_model,
)
from predictors.zoo.store import Staging

DATASET = "shapes-boxes"
MODEL = "shapes-detector"
LABELS = ("circle", "square", "triangle")
SEED = 20261127
COUNTS = {"train": 1500, "validation": 300}
TRAIN_SIZE = 64
VALIDATION_SIZES = (48, 112)
STRIDE = 4
MAX_DETECTIONS = 20
ROW_GROUP_SIZE = 256


def _draw(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, list, list]:
    """One image (H, W, 3 uint8) and its boxes ([x, y, w, h]) and classes."""
    sketch = Sketch(rng, width, height)
    boxes: list[list[float]] = []
    classes: list[int] = []
    for _ in range(int(rng.integers(1, 5))):
        for _attempt in range(20):
            size = int(rng.integers(10, min(30, height - 2, width - 2) + 1))
            x, y = int(rng.integers(0, width - size)), int(rng.integers(0, height - size))
            if all(_iou([x, y, size, size], other) < 0.1 for other in boxes):
                break
        else:
            continue
        kind = int(rng.integers(0, 3))
        sketch.shape(kind, x, y, size)
        boxes.append([float(x), float(y), float(size), float(size)])
        classes.append(kind)
    return sketch.pixels(), boxes, classes


def _iou(a: list[float], b: list[float]) -> float:
    ax2, ay2, bx2, by2 = a[0] + a[2], a[1] + a[3], b[0] + b[2], b[1] + b[3]
    width = max(0.0, min(ax2, bx2) - max(a[0], b[0]))
    height = max(0.0, min(ay2, by2) - max(a[1], b[1]))
    inter = width * height
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def make_split(split: str) -> tuple[list[bytes], list[list[list[float]]], list[list[int]]]:
    rng = np.random.default_rng(SEED + (0 if split == "train" else 1))
    images, boxes, classes = [], [], []
    for _ in range(COUNTS[split]):
        if split == "train":
            height = width = TRAIN_SIZE
        else:
            height, width = (int(v) for v in rng.integers(*VALIDATION_SIZES, size=2))
        pixels, image_boxes, image_classes = _draw(rng, height, width)
        images.append(png_bytes(pixels))
        boxes.append(image_boxes)
        classes.append(image_classes)
    return images, boxes, classes


def split_columns(split: str) -> list[Column]:
    import pyarrow as pa

    images, boxes, classes = make_split(split)
    return [
        ("image", images, pa.binary()),
        ("boxes", boxes, pa.list_(pa.list_(pa.float64(), 4))),
        ("classes", classes, pa.list_(pa.int64())),
    ]


def build_dataset(store: str) -> dict:
    return build_generated(store, DATASET, LABELS, "png", split_columns, COUNTS, ROW_GROUP_SIZE)


# --- the model ------------------------------------------------------------------------------


def _module():  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    def block(inputs: int, outputs: int, stride: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, stride, 1), nn.BatchNorm2d(outputs), nn.ReLU()
        )

    class ShapesDetector(nn.Module):
        """(image (N, 3, H, W), H and W multiples of STRIDE) -> (boxes, scores, classes)."""

        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(
                block(3, 24, 1),
                block(24, 32, 2),
                block(32, 48, 2),
                block(48, 48, 1),
                block(48, 48, 1),
            )
            self.heat = nn.Conv2d(48, len(LABELS), 1)
            self.box = nn.Conv2d(48, 4, 1)  # offset x, y (in cells), log width, log height
            nn.init.constant_(self.heat.bias, -2.2)  # type: ignore[arg-type]

        def heads(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            features = self.backbone(image)
            return self.heat(features), self.box(features)

        def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            heat, box = self.heads(image)
            heat = torch.sigmoid(heat)
            peaks = heat * (nn.functional.max_pool2d(heat, 3, 1, 1) == heat).float()
            batch, classes, height, width = peaks.shape
            scores, index = torch.topk(peaks.reshape(batch, -1), MAX_DETECTIONS, dim=1)
            cells = height * width
            kind = torch.div(index, cells, rounding_mode="floor")
            cell = index - kind * cells
            y = torch.div(cell, width, rounding_mode="floor")
            x = cell - y * width
            gathered = torch.gather(
                box.reshape(batch, 4, -1), 2, cell.unsqueeze(1).expand(-1, 4, -1)
            )
            centre_x = (x.float() + gathered[:, 0]) * STRIDE
            centre_y = (y.float() + gathered[:, 1]) * STRIDE
            half_w = torch.exp(gathered[:, 2]) * STRIDE / 2
            half_h = torch.exp(gathered[:, 3]) * STRIDE / 2
            boxes = torch.stack(
                [centre_x - half_w, centre_y - half_h, centre_x + half_w, centre_y + half_h], 2
            )
            return boxes, scores, kind

    return ShapesDetector()


MEAN, STD = 0.5, 0.25


def _targets(boxes: list, classes: list, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CenterNet targets at stride 4: Gaussian centre heatmaps, box targets, their mask."""
    cells = size // STRIDE
    heat = np.zeros((len(boxes), len(LABELS), cells, cells), np.float32)
    box = np.zeros((len(boxes), 4, cells, cells), np.float32)
    mask = np.zeros((len(boxes), cells, cells), np.float32)
    ys, xs = np.mgrid[0:cells, 0:cells]
    for n, (image_boxes, image_classes) in enumerate(zip(boxes, classes, strict=True)):
        for (x, y, w, h), kind in zip(image_boxes, image_classes, strict=True):
            cx, cy = (x + w / 2) / STRIDE, (y + h / 2) / STRIDE
            ix, iy = min(int(cx), cells - 1), min(int(cy), cells - 1)
            sigma = max(w, h) / STRIDE / 6 + 0.5
            gaussian = np.exp(-((xs - ix) ** 2 + (ys - iy) ** 2) / (2 * sigma**2))
            heat[n, kind] = np.maximum(heat[n, kind], gaussian)
            box[n, :, iy, ix] = (cx - ix, cy - iy, np.log(w / STRIDE), np.log(h / STRIDE))
            mask[n, iy, ix] = 1.0
    return heat, box, mask


def train(epochs: int = 8, batch_size: int = 32, learning_rate: float = 0.003):  # type: ignore[no-untyped-def]
    import torch

    from predictors.zoo.training import TrainingPlan, fit, make_deterministic

    make_deterministic(SEED)
    model = _module()
    images, boxes, classes = make_split("train")
    inputs = torch.from_numpy(image_tensor(images, MEAN, STD))
    heat, box, mask = (torch.from_numpy(t) for t in _targets(boxes, classes, TRAIN_SIZE))

    def batch_loss(index: torch.Tensor) -> torch.Tensor:
        predicted_heat, predicted_box = model.heads(inputs[index])
        loss: torch.Tensor = _focal(predicted_heat, heat[index]) + _box_loss(
            predicted_box, box[index], mask[index]
        )
        return loss

    plan = TrainingPlan(epochs, batch_size, learning_rate, SEED)
    return model, fit(model, len(inputs), batch_loss, plan, MODEL, one_cycle=True, log_every=4)


def _focal(logits, target):  # type: ignore[no-untyped-def]
    """CenterNet's penalty-reduced focal loss, per object."""
    import torch

    probability = torch.sigmoid(logits).clamp(1e-4, 1 - 1e-4)
    positive = target.eq(1).float()
    positives = (-torch.log(probability) * (1 - probability) ** 2 * positive).sum()
    negatives = (
        -torch.log(1 - probability) * probability**2 * (1 - target) ** 4 * (1 - positive)
    ).sum()
    return (positives + negatives) / positive.sum().clamp(min=1)


def _box_loss(predicted, target, mask):  # type: ignore[no-untyped-def]
    weight = mask.unsqueeze(1)
    return ((predicted - target).abs() * weight).sum() / weight.sum().clamp(min=1)


OUTPUT_NAMES = ("boxes", "scores", "classes")


def _padded(images: list[bytes]) -> list[np.ndarray]:
    """Each image as the manifest prepares it, padded (bottom, right) to multiples of STRIDE."""
    arrays = []
    for image in images:
        x = image_tensor([image], MEAN, STD)
        height, width = x.shape[2:]
        pad = ((0, 0), (0, 0), (0, -height % STRIDE), (0, -width % STRIDE))
        arrays.append(np.pad(x, pad))
    return arrays


def build_model(store: str) -> dict:
    """Train the detector, export it as ONNX and TorchScript, check that both give the same
    detections on every validation image (each at its own size), and store them."""
    import torch

    from predictors.zoo import export

    model, training = train()
    images, _, _ = make_split("validation")
    inputs = _padded(images)

    def stage(staging: Staging) -> dict[str, Any]:
        example = torch.from_numpy(inputs[0])
        onnx = export.onnx_bytes(
            model,
            example,
            input_names=["image"],
            output_names=OUTPUT_NAMES,
            dynamic_axes={
                "image": {0: "batch", 2: "height", 3: "width"},
                **{name: {0: "batch"} for name in OUTPUT_NAMES},
            },
        )
        paths = {
            "onnxruntime": staging.write(f"{MODEL}.onnx", onnx),
            "pytorch": staging.write(f"{MODEL}.pt", export.torchscript_bytes(model, example)),
        }
        staging.write("labels.txt", labels_text(LABELS))
        session = export.onnx_session(paths["onnxruntime"])
        module = export.load_torchscript(paths["pytorch"])
        delta = 0.0
        sizes = set()
        with torch.no_grad():
            for x in inputs:
                sizes.add(x.shape[2:])
                ours = session.run(None, {"image": x})
                theirs = [t.numpy() for t in module(torch.from_numpy(x))]
                reference = [t.numpy() for t in model(torch.from_numpy(x))]
                for a, b, c in zip(ours, theirs, reference, strict=True):
                    if a.dtype.kind == "i":
                        if not (np.array_equal(a, b) and np.array_equal(a, c)):
                            raise RuntimeError(f"{MODEL}: the exports' classes disagree")
                    else:
                        delta = max(delta, float(np.abs(a - b).max()), float(np.abs(a - c).max()))
        if not delta < 1e-3:
            raise RuntimeError(f"{MODEL}: exports disagree (max |Δ| {delta:.3g})")
        return {"validation_count": len(images), "input_sizes": len(sizes), "max_abs_diff": delta}

    return store_model(store, MODEL, DATASET, model, training, stage)
