"""A binary image classifier: one number per input (binary_logit or binary_probability), read
as the probabilities of both labels; its accuracy, precision, recall, F1 and ROC AUC are
scikit-learn's on them. The model is a real ONNX graph made here (the mean of the input's
pixels as a logit), run by ONNX Runtime on the zoo's text-lines."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from sklearn import metrics

from predictors import manifests
from predictors.manifests.catalog import Catalog
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


def _graph(path: Path, sigmoid: bool) -> None:
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[1, 2, 3], keepdims=0),
        helper.make_node("Unsqueeze", ["mean", "axis"], ["logit"]),
    ]
    output = "logit"
    if sigmoid:
        nodes.append(helper.make_node("Sigmoid", ["logit"], ["p"]))
        output = "p"
    graph = helper.make_graph(
        nodes,
        "binary",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 48, 192])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, [None, 1])],
        initializer=[helper.make_tensor("axis", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("binary-store")
    shutil.copytree(
        zoo_store(("text-lines",)) / "datasets/text-lines", root / "datasets/text-lines"
    )
    folder = root / "models/text-binary/1.0.0"
    folder.mkdir(parents=True)
    _graph(folder / "logit.onnx", sigmoid=False)
    _graph(folder / "probability.onnx", sigmoid=True)
    return root


def _manifest(kind: str) -> manifests.Manifest:
    data: dict[str, Any] = Catalog().find_model("text-direction", "*", "onnxruntime").data
    data = {
        **data,
        "name": "text-binary",
        "inputs": [{**data["inputs"][0], "name": "x"}],
        "outputs": [
            {
                "name": "p" if kind == "binary_probability" else "logit",
                "type": kind,
                "parameters": {"top_k": 2, "labels": ["0", "180"]},
            }
        ],
        "model": {
            "graph_path": "repo://models/text-binary/1.0.0/"
            + ("probability.onnx" if kind == "binary_probability" else "logit.onnx")
        },
        "attributes": {"trained": True},
    }
    return manifests.load(yaml.safe_dump(data))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"dataset": "text-lines", "framework": "onnxruntime", "threads": 1, "repeat": 1}


def test_a_binary_classifier_is_scored_by_scikit_learn(run_evaluation: RunEvaluation) -> None:
    logit = run_evaluation(model=_manifest("binary_logit"), batch_sizes=[8])
    probability = run_evaluation(model=_manifest("binary_probability"), batch_sizes=[8])
    np.testing.assert_allclose(logit.outputs, probability.outputs, atol=1e-6)
    outputs, labels = logit.outputs, logit.labels
    assert outputs.shape == (600, 2)
    np.testing.assert_allclose(outputs.sum(axis=1), 1.0, atol=1e-6)
    accuracy = logit.result["accuracy"]
    predicted = outputs.argmax(axis=1)
    assert accuracy["top1"] == pytest.approx(metrics.accuracy_score(labels, predicted))
    assert accuracy["f1"] == pytest.approx(metrics.f1_score(labels, predicted, zero_division=0))
    assert accuracy["roc_auc"] == pytest.approx(metrics.roc_auc_score(labels, outputs[:, 1]))
    assert accuracy["top5"] is None  # two classes: top-5 says nothing
    assert logit.result["accuracy"] == probability.result["accuracy"]
    assert [row[0][1] for row in logit.predictions] == [["0", "180"][i] for i in predicted]
