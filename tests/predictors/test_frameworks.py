"""The three framework predictors on the zoo's real models, through the one evaluation loop.

Every evaluation here runs with one intra-op thread: TensorFlow sizes its thread pools once per
process, so the tests of one session must agree on the number.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors.data import DataManager
from predictors.evaluation import (
    CLOCK_CUDA,
    compare,
)
from predictors.frameworks.predictor import (
    FRAMEWORKS,
    PredictorError,
    PredictorOptions,
    predictor_class,
)
from predictors.manifests.catalog import Catalog
from tests.helpers import has_cuda
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

THREADS = 1
CATALOG = Catalog()


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn", "shapes-color"))


@pytest.fixture
def evaluation_defaults(evaluation_defaults: dict[str, Any]) -> dict[str, Any]:
    return {**evaluation_defaults, "threads": THREADS}


def test_digits_cnn_is_accurate_in_every_framework_and_they_agree(
    run_evaluation: RunEvaluation,
) -> None:
    evaluations = [
        run_evaluation("digits-cnn", framework, "digits", batch_sizes=(32,))
        for framework in FRAMEWORKS
    ]

    top1 = [e.result["accuracy"]["top1"] for e in evaluations]
    assert all(value >= 0.95 for value in top1), top1
    assert max(top1) - min(top1) <= 0.005, top1
    for evaluation in evaluations:
        assert evaluation.result["dataset"]["count"] == 360
        assert evaluation.result["settings"]["intra_op_threads"] == THREADS
    for a, b in itertools.combinations(evaluations, 2):
        comparison = compare(a, b)
        assert comparison["count"] == 360
        assert comparison["top1_agreement"] >= 0.99, comparison
        assert comparison["max_abs_diff"] < 1e-3, comparison


def test_shapes_color_pitfall_overrides_drop_accuracy(run_evaluation: RunEvaluation) -> None:
    def top1(*overrides: str) -> float:
        evaluation = run_evaluation(
            "shapes-color", "onnxruntime", "shapes-color", overrides=overrides
        )
        return float(evaluation.result["accuracy"]["top1"])

    baseline = top1()
    assert baseline >= 0.9
    assert top1("inputs.0.parameters.color_mode=BGR") <= baseline - 0.3
    assert top1("inputs.0.parameters.normalization_order=normalize_then_convert") <= baseline - 0.3


@pytest.mark.parametrize(
    ("framework", "layout", "message"),
    [
        ("onnxruntime", "NHWC", r"takes input of shape \(N, 3, 32, 32\).*\(1, 32, 32, 3\).*layout"),
        ("tensorflow", "NCHW", r"takes input of shape \(N, 32, 32, 3\).*\(1, 3, 32, 32\).*layout"),
        ("pytorch", "NHWC", r"pytorch failed to run .* shape \(1, 32, 32, 3\).*channels"),
    ],
)
def test_a_layout_the_model_does_not_take_is_an_error_not_a_silent_one(
    run_evaluation: RunEvaluation, framework: str, layout: str, message: str
) -> None:
    override = f"inputs.0.parameters.layout={layout}"
    with pytest.raises(PredictorError, match=message):
        run_evaluation("shapes-color", framework, "shapes-color", overrides=(override,), limit=4)


def test_an_onnx_manifest_that_does_not_fit_its_graph_is_refused_when_loaded(
    run_evaluation: RunEvaluation,
) -> None:
    """A file the hub never read (https://, a local store) is checked when ONNX Runtime loads
    it: the names the manifest declares are the ones the predictor feeds and reads."""
    for override, words in (
        (
            "inputs.0.name=image",
            "inputs.0.name: 'image' is not an input of the graph (its "
            "inputs: input (float32, rank 4))",
        ),
        ("outputs.0.name=probs", "outputs.0.name: 'probs' is not an output of the graph"),
    ):
        with pytest.raises(PredictorError) as refused:
            run_evaluation("digits-cnn", "onnxruntime", "digits", overrides=(override,), limit=4)
        assert "digits-cnn 1.0.0: the manifest does not fit its ONNX graph" in str(refused.value)
        assert words in str(refused.value), str(refused.value)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_predict_returns_host_arrays_batch_first(store: Path, framework: str) -> None:
    manifest = CATALOG.find_model("digits-cnn", "*", framework)
    graph = DataManager(store_dir=store).fetch(manifest.data["model"]["graph_path"])
    predictor = predictor_class(framework)()
    predictor.load(manifest, PredictorOptions(graph_file=graph, threads=THREADS, seed=0))
    try:
        layout = manifest.data["inputs"][0]["parameters"]["layout"]
        shape = (3, 1, 8, 8) if layout == "NCHW" else (3, 8, 8, 1)
        outputs = predictor.predict(np.zeros(shape, dtype=np.float32))
        assert isinstance(outputs, np.ndarray)
        assert outputs.shape == (3, 10) and outputs.dtype == np.float32
        assert np.isfinite(outputs).all()
        assert predictor.settings()["intra_op_threads"] == THREADS
        assert predictor_class(framework).software()["version"]
    finally:
        predictor.close()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_file_that_is_not_a_model_is_refused(tmp_path: Path, framework: str) -> None:
    manifest = CATALOG.find_model("digits-cnn", "*", framework)
    extension = Path(manifest.data["model"]["graph_path"]).suffix
    garbage = tmp_path / f"broken{extension}"
    garbage.write_bytes(b"this is not a model")
    with pytest.raises(PredictorError, match=f"{framework} cannot load broken"):
        predictor_class(framework)().load(manifest, PredictorOptions(graph_file=garbage))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_devices_a_framework_cannot_use_are_refused(framework: str) -> None:
    cls = predictor_class(framework)
    cls.check_device("cpu")
    with pytest.raises(PredictorError, match="use cpu or cuda"):
        cls.check_device("tpu")
    with pytest.raises(PredictorError, match="cuda:7|cuda"):
        cls.check_device("cuda:7") if has_cuda() else cls.check_device("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not has_cuda(), reason="needs a CUDA device (torch.cuda.is_available())")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_digits_cnn_on_cuda(run_evaluation: RunEvaluation, framework: str) -> None:
    try:
        predictor_class(framework).check_device("cuda")
    except PredictorError as exc:
        pytest.skip(str(exc))
    evaluation = run_evaluation(
        "digits-cnn", framework, "digits", batch_sizes=(1, 32), device="cuda"
    )
    assert evaluation.result["clock"] == CLOCK_CUDA
    assert evaluation.result["accuracy"]["top1"] >= 0.95
    assert evaluation.result["batch_sizes"][1]["latency"]["count"] == 360 // 32
