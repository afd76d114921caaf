"""Regression: the zoo's diabetes-mlp on scikit-learn's diabetes data, its values compared with the
targets by scikit-learn (`predictors.evaluation.scenarios.regression`); and the checks of regression
manifests and datasets."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from predictors.data import DatasetError, DatasetReader, split_problems
from predictors.evaluation import compare
from predictors.manifests.catalog import Catalog
from predictors.tasks import metric_problem, unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("diabetes-mlp",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "diabetes-mlp", "dataset": "diabetes", "threads": 1, "repeat": 1}


def _reference(store: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every row's target and the ONNX model's own value, computed here."""
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(store / "models/diabetes-mlp/1.0.0/diabetes-mlp.onnx"),
        providers=["CPUExecutionProvider"],
    )
    rows = pq.read_table(store / "datasets/diabetes/1.0.0/validation.parquet").to_pylist()
    x = np.stack([np.load(io.BytesIO(row["input"])) for row in rows])
    (values,) = session.run(None, {"input": x})
    return np.array([row["target"] for row in rows]), values[:, 0].astype(np.float64)


def test_mae_rmse_and_r2_are_the_models_own_errors(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    onnx = run_evaluation(framework="onnxruntime", batch_sizes=[1, 32])
    accuracy = onnx.result["accuracy"]
    truth, values = _reference(store)
    error = values - truth
    assert accuracy["mae"] == pytest.approx(float(np.abs(error).mean()), rel=1e-6)
    assert accuracy["rmse"] == pytest.approx(float(np.sqrt((error**2).mean())), rel=1e-6)
    r2 = 1 - (error**2).sum() / ((truth - truth.mean()) ** 2).sum()
    assert accuracy["r2"] == pytest.approx(float(r2), rel=1e-6)
    assert accuracy["max_error"] == pytest.approx(float(np.abs(error).max()), rel=1e-6)
    assert accuracy["top1"] == accuracy["mae"] and accuracy["top5"] == accuracy["rmse"]
    assert (
        accuracy["count"] == 100 and accuracy["per_value"]["progression"]["mae"] == accuracy["mae"]
    )
    # Learnt something: better than always answering the training targets' mean.
    assert accuracy["r2"] > 0.2
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in onnx.result["batch_sizes"]}
    assert by_size[1]["mae"] == pytest.approx(by_size[32]["mae"], rel=1e-9)
    # The predictions are each input's value, by its label's name.
    assert onnx.predictions[0] == [(0, "progression", pytest.approx(values[0], rel=1e-5))]

    torchscript = run_evaluation(framework="pytorch", batch_sizes=[8])
    assert torchscript.result["accuracy"]["mae"] == pytest.approx(accuracy["mae"], rel=1e-5)
    agreement = compare(onnx, torchscript)
    assert agreement["top1_agreement"] is None and agreement["max_abs_diff"] < 1e-3


def _split(tmp_path: Path, target: pa.Array) -> Path:
    path = tmp_path / "r.parquet"
    buffer = io.BytesIO()
    np.save(buffer, np.zeros(3, np.float32))
    inputs = pa.array([buffer.getvalue()] * len(target))
    pq.write_table(pa.table({"input": inputs, "target": target}), path)
    return path


def test_targets_are_read_as_rows_of_values(tmp_path: Path) -> None:
    one = _split(tmp_path, pa.array([1.5, 2.0]))
    ((_, values),) = list(DatasetReader(one, 8, target="values", classes=1))
    assert values.tolist() == [[1.5], [2.0]]
    many = _split(tmp_path, pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float64())))
    ((_, values),) = list(DatasetReader(many, 8, target="values", classes=2))
    assert values.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert split_problems(many, labels=2, encoding="npy", count=2, target="values") == []
    with pytest.raises(DatasetError, match="a row's target has 2 values, but the model gives 3"):
        list(DatasetReader(many, 8, target="values", classes=3))


@pytest.mark.parametrize(
    ("target", "labels", "message"),
    [
        (pa.array([1.0, float("nan")]), 1, "row 1's target is not finite"),
        (pa.array([[1.0], [1.0, 2.0]], pa.list_(pa.float64())), 1, "row 1's target has 2 values"),
        (pa.array([1.0, 2.0]), 2, "give each row a list"),
        (pa.array(["a", "b"]), 1, "not a number or a list of numbers"),
        (pa.array([1.0, None]), 1, "include a null image or label"),
    ],
)
def test_a_regression_split_is_checked_row_by_row(
    tmp_path: Path, target: pa.Array, labels: int, message: str
) -> None:
    path = _split(tmp_path, target)
    problems = split_problems(path, labels=labels, encoding="npy", count=2, target="values")
    assert any(message in problem for problem in problems), problems


def test_a_split_without_targets_is_refused_naming_the_column(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"input": pa.array([b"x"]), "label": pa.array([1])}), path)
    problems = split_problems(path, labels=1, encoding="npy", count=1, target="values")
    assert (
        problems
        and "needs the columns 'image' (or 'audio', or 'input') and 'target'" in problems[0]
    )


def test_what_the_regression_loop_cannot_run_is_refused_naming_it() -> None:
    data = Catalog().find_model("diabetes-mlp", "*", "onnxruntime").data
    assert unsupported(data) is None
    logits = {**data["outputs"][0], "type": "logits", "parameters": {"top_k": 1, "labels": ["p"]}}
    assert "a regression model's scored output is values" in str(
        unsupported({**data, "outputs": [logits]})
    )
    classifier = Catalog().find_model("digits-cnn", "*", "onnxruntime").data
    values = {"name": "logits", "type": "values", "parameters": {"labels": ["a"]}}
    assert "model's scored output is logits, probabilities, binary_probability or " in str(
        unsupported({**classifier, "outputs": [values]})
    )


def test_a_results_metrics_are_checked_against_its_task() -> None:
    # A regression's error is in the target's units; everything else is a fraction.
    assert metric_problem("regression", "top1", 46.8) is None
    assert "fraction from 0 to 1" in str(metric_problem("image_classification", "top1", 46.8))
    assert ">= 0" in str(metric_problem("regression", "top1", -1.0))
    assert "finite" in str(metric_problem("regression", "top5", float("inf")))
    assert metric_problem("image_classification", "top5", None) is None
