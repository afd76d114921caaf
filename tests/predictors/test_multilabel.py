"""Multi-label classification: the zoo's shapes-tagger on shapes-sets, each class read through its
own sigmoid and scored with scikit-learn (`predictors.evaluation.scenarios.multilabel`); and the
checks of multi-label manifests and datasets."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image
from sklearn import metrics

from predictors import manifests
from predictors.data import DatasetError, DatasetReader, split_problems
from predictors.evaluation import compare
from predictors.evaluation.scenarios.multilabel import multilabel_metrics, sigmoid_probabilities
from predictors.manifests.catalog import Catalog
from predictors.tasks import unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("shapes-tagger",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "shapes-tagger", "dataset": "shapes-sets", "threads": 1, "repeat": 1}


def _reference(store: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every image's classes (0/1 rows) and the ONNX model's own logits, computed here."""
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(store / "models/shapes-tagger/1.0.0/shapes-tagger.onnx"),
        providers=["CPUExecutionProvider"],
    )
    rows = pq.read_table(store / "datasets/shapes-sets/1.0.0/validation.parquet").to_pylist()
    pixels = np.stack(
        [np.asarray(Image.open(io.BytesIO(row["image"])).convert("RGB")) for row in rows]
    )
    x = ((pixels.astype(np.float32) / 255.0 - 0.5) / 0.25).transpose(0, 3, 1, 2).copy()
    (logits,) = session.run(None, {"input": x})
    truth = np.zeros((len(rows), 4), np.uint8)
    for index, row in enumerate(rows):
        truth[index, row["label"]] = 1
    return truth, logits


def test_map_and_f1_are_scikit_learns_on_the_models_own_sigmoids(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    onnx = run_evaluation(framework="onnxruntime", batch_sizes=[1, 16])
    accuracy = onnx.result["accuracy"]
    truth, logits = _reference(store)
    probabilities = 1 / (1 + np.exp(-logits.astype(np.float64)))
    predicted = (probabilities >= 0.5).astype(np.uint8)
    assert accuracy["map"] == pytest.approx(
        metrics.average_precision_score(truth, probabilities, average="macro"), abs=1e-6
    )
    assert accuracy["f1_micro"] == pytest.approx(
        metrics.f1_score(truth, predicted, average="micro"), abs=1e-9
    )
    assert accuracy["exact_match"] == pytest.approx(float((predicted == truth).all(axis=1).mean()))
    per_class = metrics.average_precision_score(truth, probabilities, average=None)
    assert list(accuracy["average_precision"].values()) == pytest.approx(list(per_class), abs=1e-6)
    assert accuracy["top1"] == accuracy["map"] and accuracy["top5"] == accuracy["f1_micro"]
    assert accuracy["map"] >= 0.9 and accuracy["count"] == 400
    # Some images hold no shape and some several: the sets are no single labels.
    counts = truth.sum(axis=1)
    assert counts.min() == 0 and counts.max() >= 2
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in onnx.result["batch_sizes"]}
    assert by_size[1]["map"] == pytest.approx(by_size[16]["map"], abs=1e-9)
    # The predictions are each image's kinds by probability, as a sigmoid reads them.
    first = onnx.predictions[0]
    assert first[0][2] == pytest.approx(float(probabilities[0].max()), abs=1e-5)

    torchscript = run_evaluation(framework="pytorch", batch_sizes=[4])
    assert torchscript.result["accuracy"]["map"] == pytest.approx(accuracy["map"], abs=1e-6)
    assert compare(onnx, torchscript)["max_abs_diff"] < 1e-4


def test_a_higher_threshold_predicts_fewer_classes(run_evaluation: RunEvaluation) -> None:
    model = Catalog().find_model("shapes-tagger", "*", "onnxruntime")
    data = model.data
    data["outputs"][0]["parameters"]["threshold"] = 0.99
    strict = manifests.load(yaml.safe_dump(data))
    loose = run_evaluation(framework="onnxruntime", batch_sizes=[16], limit=64)
    tight = run_evaluation(model=strict, batch_sizes=[16], limit=64)
    assert tight.result["accuracy"]["threshold"] == 0.99
    # mAP needs no threshold; recall falls as fewer classes count as predicted.
    assert tight.result["accuracy"]["map"] == loose.result["accuracy"]["map"]
    assert tight.result["accuracy"]["recall_micro"] < loose.result["accuracy"]["recall_micro"]


def test_macro_f1_averages_the_classes_that_occur_only() -> None:
    # A perfect model on a split where the third class never occurs (nor is predicted).
    truth = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0]], np.uint8)
    scores = truth.astype(np.float64) * 0.9 + 0.05
    found = multilabel_metrics(scores, truth, ["a", "b", "c"], 0.5)
    assert found["f1_macro"] == 1.0 and found["map"] == 1.0 and found["exact_match"] == 1.0
    assert found["average_precision"]["c"] is None and found["classes_scored"] == 2
    # A class predicted where it never occurs counts, as a miss.
    scores[0, 2] = 0.9
    assert multilabel_metrics(scores, truth, ["a", "b", "c"], 0.5)["f1_macro"] < 1.0


def test_sigmoid_reads_logits_without_overflow_and_keeps_probabilities() -> None:
    logits = np.array([[-1000.0, 0.0, 1000.0]], np.float32)
    assert sigmoid_probabilities(logits, "logits").tolist() == [[0.0, 0.5, 1.0]]
    kept = np.array([[0.2, 0.9]], np.float32)
    assert sigmoid_probabilities(kept, "probabilities") == pytest.approx(kept)


def _split(tmp_path: Path, labels: pa.Array) -> Path:
    path = tmp_path / "s.parquet"
    image = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(image, format="PNG")
    images = pa.array([image.getvalue()] * len(labels))
    pq.write_table(pa.table({"image": images, "label": labels}), path)
    return path


def test_a_multi_label_split_is_read_as_rows_of_classes(tmp_path: Path) -> None:
    path = _split(tmp_path, pa.array([[0, 2], [], [1]], pa.list_(pa.int64())))
    ((_, hot),) = list(DatasetReader(path, 8, target="classes", classes=3))
    assert hot.tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    assert split_problems(path, labels=3, encoding="png", count=3, target="classes") == []


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (pa.array([[0], [5]], pa.list_(pa.int64())), "row 1 has a class 5, but the dataset has 3"),
        (pa.array([[0], [-1]], pa.list_(pa.int64())), "row 1 has a class -1"),
        (pa.array([1, 2], pa.int64()), "not a list of class indices"),
        (pa.array([["a"], ["b"]], pa.list_(pa.string())), "not a list of class indices"),
        (pa.array([[0], None], pa.list_(pa.int64())), "include a null image or label"),
        (pa.array([[0], [1, None]], pa.list_(pa.int64())), "row 1 has a null class in its label"),
    ],
)
def test_a_multi_label_split_is_checked_row_by_row(
    tmp_path: Path, labels: pa.Array, message: str
) -> None:
    path = _split(tmp_path, labels)
    problems = split_problems(path, labels=3, encoding="png", count=2, target="classes")
    assert any(message in problem for problem in problems), problems


def test_a_class_the_model_does_not_read_fails_the_run_naming_it(tmp_path: Path) -> None:
    path = _split(tmp_path, pa.array([[0, 7]], pa.list_(pa.int64())))
    with pytest.raises(DatasetError, match="has label 7, but the model reads 3 classes"):
        list(DatasetReader(path, 8, target="classes", classes=3))


def test_what_the_multi_label_loop_cannot_run_is_refused_naming_it() -> None:
    data = Catalog().find_model("shapes-tagger", "*", "onnxruntime").data
    assert unsupported(data) is None
    output = {**data["outputs"][0], "type": "binary_logit"}
    assert "scored output is logits or probabilities" in str(
        unsupported({**data, "outputs": [output]})
    )
    # The threshold is read for multi-label classifiers only.
    classifier = Catalog().find_model("digits-cnn", "*", "onnxruntime").data
    classifier["outputs"][0]["parameters"]["threshold"] = 0.5
    with pytest.raises(manifests.ManifestError) as caught:
        manifests.load(yaml.safe_dump(classifier))
    (error,) = caught.value.errors
    assert error["path"] == "outputs.0.parameters.threshold"
    assert "multi_label_classification models only" in error["message"]
