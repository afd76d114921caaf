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

import io
import json
from pathlib import Path

import numpy as np

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
    from PIL import Image, ImageDraw

    background = rng.integers(0, 256, 3)
    image = Image.new("RGB", (SIZE, SIZE), tuple(int(v) for v in background))
    draw = ImageDraw.Draw(image)
    kinds = set()
    for _ in range(int(rng.integers(0, 4))):
        size = int(rng.integers(12, 22))
        x, y = int(rng.integers(0, SIZE - size)), int(rng.integers(0, SIZE - size))
        kind = int(rng.integers(0, len(LABELS)))
        color = rng.integers(0, 256, 3)
        while np.abs(color - background).sum() < 150:
            color = rng.integers(0, 256, 3)
        fill = tuple(int(v) for v in color)
        corners = (x, y, x + size - 1, y + size - 1)
        if kind == 0:
            draw.ellipse(corners, fill=fill)
        elif kind == 1:
            draw.rectangle(corners, fill=fill)
        elif kind == 2:
            draw.polygon(
                [(x + size / 2, y), (x, y + size - 1), (x + size - 1, y + size - 1)], fill=fill
            )
        else:
            draw.ellipse(corners, outline=fill, width=3)
        kinds.add(kind)
    pixels = np.asarray(image, np.int16) + rng.normal(0, 8, (SIZE, SIZE, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8), sorted(kinds)


def _png(array: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def make_split(split: str) -> tuple[list[bytes], list[list[int]]]:
    rng = np.random.default_rng(SEED + (0 if split == "train" else 1))
    images, labels = [], []
    for _ in range(COUNTS[split]):
        pixels, kinds = _draw(rng)
        images.append(_png(pixels))
        labels.append(kinds)
    return images, labels


def to_parquet(images: list[bytes], labels: list[list[int]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [pa.field("image", pa.binary()), pa.field("label", pa.list_(pa.int64()))],
        metadata={"mlmodelscope.dataset": DATASET, "mlmodelscope.labels": json.dumps(LABELS)},
    )
    table = pa.Table.from_arrays(
        [pa.array(images, pa.binary()), pa.array(labels, pa.list_(pa.int64()))], schema=schema
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
    return {"files": files, "encoding": "png", "labels": list(LABELS)}


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
    from PIL import Image

    pixels = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images])
    x = ((pixels.astype(np.float32) / 255.0 - MEAN) / STD).transpose(0, 3, 1, 2).copy()
    y = np.zeros((len(labels), len(LABELS)), np.float32)
    for row, kinds in enumerate(labels):
        y[row, kinds] = 1.0
    return x, y


def train(epochs: int = 10, batch_size: int = 32, learning_rate: float = 0.006):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    from predictors.zoo.training import fit, make_deterministic

    make_deterministic(SEED)
    model = _module()
    x, y = _arrays(*make_split("train"))
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    loss_fn = nn.BCEWithLogitsLoss()

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
    """Train the tagger, export it as ONNX and TorchScript, check that both agree, and store
    them."""
    import torch
    from sklearn.metrics import average_precision_score

    from predictors.zoo import export
    from predictors.zoo.store import VERSION, Staging

    model, training = train()
    x, y = _arrays(*make_split("validation"))
    example = torch.from_numpy(x[:1])
    with Staging(Path(store), f"models/{MODEL}/{VERSION}") as staging:
        onnx, delta = export.stage_exports(staging, MODEL, model, example, LABELS, x)
        mean_ap = float(average_precision_score(y, onnx, average="macro"))
        if mean_ap < 0.9:
            raise RuntimeError(f"{MODEL}: validation mAP {mean_ap:.4f} < 0.9")
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "dataset": DATASET,
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": training,
        "validation_map": mean_ap,
        "max_abs_logit_diff": delta,
    }
