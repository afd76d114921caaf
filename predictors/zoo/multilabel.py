"""The zoo's multi-label classifier and its dataset: which kinds of shape an image holds.

``shapes-sets``: SIZE x SIZE images with none to three shapes (circles, squares, triangles and
rings, a kind possibly twice) on noisy backgrounds; each image is labelled with the set of kinds
it holds, as a list of class indices (empty for an image without shapes).

``shapes-tagger``: a small CNN giving a logit per kind, each read through its own sigmoid
(trained with a binary cross-entropy per kind), exported to ONNX and TorchScript from the same
weights and checked to agree on every validation image.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/shapes-sets/1.0.0/{train,validation}.parquet``: the columns ``image`` (PNG) and
  ``label`` (list<int64>: the kinds present), one row per image;
- ``models/shapes-tagger/1.0.0/{shapes-tagger.onnx,shapes-tagger.pt,labels.txt}``.
"""

from __future__ import annotations

import numpy as np

from predictors.zoo.common import Column, Sketch, build_generated, image_tensor, png_bytes

DATASET = "shapes-sets"
MODEL = "shapes-tagger"
LABELS = ("circle", "square", "triangle", "ring")
SEED = 20261126
COUNTS = {"train": 1600, "validation": 400}
SIZE = 48
ROW_GROUP_SIZE = 256
MEAN, STD = 0.5, 0.25


def _draw(rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    """One image (SIZE, SIZE, 3 uint8) and the sorted kinds it holds."""
    sketch = Sketch(rng, SIZE, SIZE)
    kinds = set()
    for _ in range(int(rng.integers(0, 4))):
        size = int(rng.integers(12, 22))
        x, y = int(rng.integers(0, SIZE - size)), int(rng.integers(0, SIZE - size))
        kind = int(rng.integers(0, len(LABELS)))
        if kind == 3:  # a ring
            corners = (x, y, x + size - 1, y + size - 1)
            sketch.draw.ellipse(corners, outline=sketch.color(), width=3)
        else:
            sketch.shape(kind, x, y, size)
        kinds.add(kind)
    return sketch.pixels(), sorted(kinds)


def make_split(split: str) -> tuple[list[bytes], list[list[int]]]:
    rng = np.random.default_rng(SEED + (0 if split == "train" else 1))
    images, labels = [], []
    for _ in range(COUNTS[split]):
        pixels, kinds = _draw(rng)
        images.append(png_bytes(pixels))
        labels.append(kinds)
    return images, labels


def split_columns(split: str) -> list[Column]:
    import pyarrow as pa

    images, labels = make_split(split)
    return [("image", images, pa.binary()), ("label", labels, pa.list_(pa.int64()))]


def build_dataset(store: str) -> dict:
    return build_generated(store, DATASET, LABELS, "png", split_columns, COUNTS, ROW_GROUP_SIZE)


# --- the model ------------------------------------------------------------------------------


def _module():  # type: ignore[no-untyped-def]
    from torch import nn

    def block(inputs: int, outputs: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, 1, 1), nn.BatchNorm2d(outputs), nn.ReLU(), nn.MaxPool2d(2)
        )

    return nn.Sequential(
        block(3, 16),
        block(16, 32),
        block(32, 48),
        nn.AdaptiveMaxPool2d(1),
        nn.Flatten(),
        nn.Linear(48, len(LABELS)),
    )


def _arrays(images: list[bytes], labels: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    x = image_tensor(images, MEAN, STD)
    y = np.zeros((len(labels), len(LABELS)), np.float32)
    for row, kinds in enumerate(labels):
        y[row, kinds] = 1.0
    return x, y


def train(epochs: int = 10, batch_size: int = 32, learning_rate: float = 0.006):  # type: ignore[no-untyped-def]
    from torch import nn

    from predictors.zoo.training import TrainingPlan, fit, make_deterministic, supervised_loss

    make_deterministic(SEED)
    model = _module()
    x, y = _arrays(*make_split("train"))
    batch_loss = supervised_loss(model, x, y, nn.BCEWithLogitsLoss())
    plan = TrainingPlan(epochs, batch_size, learning_rate, SEED)
    return model, fit(model, len(x), batch_loss, plan, MODEL, one_cycle=True)


def build_model(store: str) -> dict:
    """Train the tagger, export it as ONNX and TorchScript, check that both agree, and store
    them."""
    from sklearn.metrics import average_precision_score

    from predictors.zoo.export import store_exports

    model, training = train()
    x, y = _arrays(*make_split("validation"))

    def check(onnx: np.ndarray) -> dict[str, float]:
        mean_ap = float(average_precision_score(y, onnx, average="macro"))
        if mean_ap < 0.9:
            raise RuntimeError(f"{MODEL}: validation mAP {mean_ap:.4f} < 0.9")
        return {"validation_map": mean_ap}

    return store_exports(store, MODEL, DATASET, model, training, LABELS, x, check)
