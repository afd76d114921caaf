"""TensorFlow models of several inputs and outputs, fed and read by name. A detector: a Keras
model that finds the one bright square of each image exactly (its box from the image's own
rows and columns), so that COCO's mAP is 1 by construction, and a box one pixel wider is not
counted at the strictest IoUs. A stream: a Keras model whose state is the running sum of its
stream's chunks, every row right with the state carried, and with it reset as right as each
chunk alone says.

The TensorFlow predictor feeds and reads by name (`run`): a Keras model's outputs by the names
of the layers that make them, a SavedModel's or TFLite file's by its signature's.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from predictors import manifests
from predictors.tasks import unsupported
from tests.predictors.conftest import RunEvaluation

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

SIDE = 32
LABELS = ["square"]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> None:
    """TensorFlow sizes its thread pools once per process: as the evaluations ask (threads=1),
    before a model is built."""
    from predictors.frameworks.tensorflow import _apply_threads

    _apply_threads(1)


def _images(count: int) -> tuple[list[bytes], list[list[list[float]]]]:
    """PNG images of one white square on black, and each square's [x, y, width, height]."""
    from PIL import Image

    rng = np.random.default_rng(11)
    images, boxes = [], []
    for _ in range(count):
        size = int(rng.integers(4, 16))
        x, y = (int(v) for v in rng.integers(0, SIDE - size, 2))
        pixels = np.zeros((SIDE, SIDE, 3), np.uint8)
        pixels[y : y + size, x : x + size] = 255
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        images.append(buffer.getvalue())
        boxes.append([[float(x), float(y), float(size), float(size)]])
    return images, boxes


def square_corners(image: Any) -> tuple[Any, Any, Any, Any]:
    """Keras ops on an (N, SIDE, SIDE, 3) input: the bright pixels' extent, x1, y1, x2, y2
    (N,) each, in pixels: the square's box, exact."""
    from keras import ops

    bright = ops.cast(ops.max(image, axis=-1) > 0.5, "float32")  # (N, H, W)
    rows, columns = ops.max(bright, axis=2), ops.max(bright, axis=1)
    index = ops.cast(ops.arange(SIDE), "float32")

    def extent(present: Any) -> tuple[Any, Any]:
        low = ops.min(ops.where(present > 0, index, SIDE), axis=1)
        high = ops.max(ops.where(present > 0, index + 1, 0.0), axis=1)
        return low, high

    y1, y2 = extent(rows)
    x1, x2 = extent(columns)
    return x1, y1, x2, y2


def _detector(path: Path, offset: float) -> None:
    """A Keras model: the bright pixels' extent as an [x1, y1, x2, y2] box (plus `offset`),
    score 1 and class 0, and a second detection of score 0 (padding)."""
    import keras
    from keras import ops

    image = keras.Input((SIDE, SIDE, 3), name="image")
    x1, y1, x2, y2 = square_corners(image)
    box = ops.stack([x1, y1, x2 + offset, y2], axis=1)  # (N, 4)
    padding = ops.zeros_like(box)
    boxes = keras.layers.Identity(name="boxes")(ops.stack([box, padding], axis=1))
    ones = ops.ones_like(x1)
    scores = keras.layers.Identity(name="scores")(ops.stack([ones, ones * 0.0], axis=1))
    classes = keras.layers.Identity(name="classes")(ops.zeros_like(scores))
    keras.Model(image, [boxes, scores, classes]).save(path)


def _manifest(name: str) -> manifests.Manifest:
    data = yaml.safe_load(
        (
            Path(__file__).parents[2] / "manifests/models/shapes-detector/onnxruntime.yaml"
        ).read_text()
    )
    data.update(name=name, framework={"name": "tensorflow", "version": ">=2.15.0 <3.0.0"})
    del data["container"]
    parameters = data["inputs"][0]["parameters"]
    parameters.update(layout="NHWC", mean=[0.0] * 3, std=[1.0] * 3, pad=None)
    data["outputs"][1]["parameters"]["min_score"] = 0.5
    data["outputs"][2]["parameters"]["labels"] = LABELS
    # Declared in another order than the model gives them: they are read by name.
    data["outputs"] = [data["outputs"][2], data["outputs"][0], data["outputs"][1]]
    data["model"] = {"graph_path": f"repo://models/{name}/1.0.0/{name}.keras", "format": "keras"}
    data["attributes"] = {"trained": True}
    return manifests.load(yaml.safe_dump(data), kind="model")


def _dataset(store: Path, images: list[bytes], boxes: list[Any]) -> manifests.Manifest:
    folder = store / "datasets/squares/1.0.0"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "image": pa.array(images, pa.binary()),
                "boxes": pa.array(boxes, pa.list_(pa.list_(pa.float64()))),
                "classes": pa.array([[0]] * len(images), pa.list_(pa.int64())),
            }
        ),
        folder / "validation.parquet",
    )
    data = {
        "kind": "dataset",
        "name": "squares",
        "version": "1.0.0",
        "task": "object_detection",
        "format": "parquet",
        "encoding": "png",
        "labels": LABELS,
        "splits": {
            "validation": {
                "path": "repo://datasets/squares/1.0.0/validation.parquet",
                "count": len(images),
            }
        },
    }
    return manifests.load(yaml.safe_dump(data), kind="dataset")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"threads": 1, "repeat": 1}


def test_a_keras_detector_is_read_by_its_output_layers_names(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    images, boxes = _images(24)
    dataset = _dataset(store, images, boxes)
    results = {}
    for name, offset in (("exact-squares", 0.0), ("wide-squares", 1.0)):
        folder = store / f"models/{name}/1.0.0"
        folder.mkdir(parents=True)
        _detector(folder / f"{name}.keras", offset)
        model = _manifest(name)
        assert unsupported(model.data) is None
        evaluation = run_evaluation(
            model, framework="tensorflow", dataset=dataset, batch_sizes=(1, 8)
        )
        results[name] = evaluation.result["accuracy"]
    exact = results["exact-squares"]
    assert exact["count"] == 24
    assert exact["top1"] == pytest.approx(1.0) and exact["top5"] == pytest.approx(1.0)
    # One pixel wider: still found at IoU 0.5, not at the strictest thresholds.
    wide = results["wide-squares"]
    assert wide["top5"] == pytest.approx(1.0) and wide["top1"] < 1.0


# -- a TensorFlow stream: a state carried from call to call --------------------------------------

CHUNK = 4


def _counter(path: Path) -> None:
    """A Keras model of two inputs and two outputs: the state is the running sum of the
    stream's chunks (next_state = state + sum(chunk)), the logits say whether it is above 0."""
    import keras
    from keras import ops

    chunk = keras.Input((CHUNK,), name="chunk")
    state = keras.Input((1,), name="state")
    total = state + ops.sum(chunk, axis=1, keepdims=True)
    next_state = keras.layers.Identity(name="next_state")(total)
    logits = keras.layers.Identity(name="logits")(ops.concatenate([-total, total], axis=1))
    keras.Model([chunk, state], [logits, next_state]).save(path)


def _streams(store: Path) -> tuple[manifests.Manifest, float]:
    """Streams of chunks of +1 or -1 (all alike in a chunk), each row labelled with whether the
    stream's running sum is above 0; and the share of rows whose own chunk says so."""
    rng = np.random.default_rng(12)
    rows: dict[str, list[Any]] = {"stream": [], "position": [], "input": [], "label": []}
    own_right = []
    for stream in range(12):
        total = 0.0
        for position in range(int(rng.integers(5, 15))):
            sign = float(rng.choice([-1.0, 1.0]))
            total += sign * CHUNK
            buffer = io.BytesIO()
            np.save(buffer, np.full(CHUNK, sign, np.float32))
            rows["stream"].append(stream)
            rows["position"].append(position)
            rows["input"].append(buffer.getvalue())
            rows["label"].append(int(total > 0))
            own_right.append((sign > 0) == (total > 0))
    folder = store / "datasets/sums/1.0.0"
    folder.mkdir(parents=True)
    pq.write_table(pa.table(rows), folder / "validation.parquet")
    data = {
        "kind": "dataset",
        "name": "sums",
        "version": "1.0.0",
        "task": "sequence_labelling",
        "format": "parquet",
        "encoding": "npy",
        "labels": ["not above", "above"],
        "splits": {
            "validation": {
                "path": "repo://datasets/sums/1.0.0/validation.parquet",
                "count": len(rows["label"]),
            }
        },
    }
    return manifests.load(yaml.safe_dump(data), kind="dataset"), float(np.mean(own_right))


def test_a_keras_stream_carries_its_state_by_name(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    dataset, reset_accuracy = _streams(store)
    folder = store / "models/sum-keeper/1.0.0"
    folder.mkdir(parents=True)
    _counter(folder / "sum-keeper.keras")
    data = {
        "kind": "model",
        "name": "sum-keeper",
        "version": "1.0.0",
        "task": "sequence_labelling",
        "framework": {"name": "tensorflow", "version": ">=2.15.0 <3.0.0"},
        "inputs": [
            {
                "name": "chunk",
                "type": "tensor",
                "parameters": {"element_type": "float32", "shape": [CHUNK]},
            },
            {
                "name": "state",
                "type": "state",
                "parameters": {
                    "element_type": "float32",
                    "shape": [1],
                    "batch_axis": 0,
                    "initial": 0.0,
                    "from_output": "next_state",
                },
            },
        ],
        "outputs": [
            {
                "name": "logits",
                "type": "logits",
                "parameters": {"top_k": 2, "labels": ["not above", "above"]},
            },
            {"name": "next_state", "type": "state", "parameters": {"batch_axis": 0}},
        ],
        "model": {
            "graph_path": "repo://models/sum-keeper/1.0.0/sum-keeper.keras",
            "format": "keras",
        },
    }
    model = manifests.load(yaml.safe_dump(data), kind="model")
    assert unsupported(model.data) is None
    evaluation = run_evaluation(model, framework="tensorflow", dataset=dataset, batch_sizes=(1, 4))
    # Carried, the state is the running sum: every row right; reset at every call, the model
    # sees its own chunk only.
    assert evaluation.result["accuracy"]["top1"] == 1.0
    reset = evaluation.result["batch_sizes"][0]["accuracy_state_reset"]["top1"]
    assert reset == pytest.approx(reset_accuracy)
