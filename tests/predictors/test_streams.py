"""Stateful streaming models (task sequence_labelling): the zoo's toggle-gru on toggle-clicks, in
ONNX Runtime and TorchScript, through the one evaluation loop
(`predictors.evaluation.scenarios.streams`): named inputs, a constant input, a state carried from
call to call within a stream and reset between streams (batch axis 1), streams side by side, metrics
from scikit-learn; and the checks of manifests, datasets and launches around it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from sklearn import metrics

from predictors import manifests
from predictors.data import DatasetError, StreamReader, lockstep_calls, split_problems
from predictors.evaluation import EvaluationError, compare
from predictors.frameworks.predictor import PredictorError
from predictors.manifests import graph_check
from predictors.manifests.catalog import Catalog
from predictors.tasks import unsupported
from predictors.zoo import streams
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("toggle-gru",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "toggle-gru", "dataset": "toggle-clicks", "threads": 1, "repeat": 1}


def _manifest(framework: str) -> manifests.Manifest:
    return Catalog().find_model("toggle-gru", "*", framework)


def test_state_carried_and_reset_are_both_reported_and_the_two_formats_agree(
    run_evaluation: RunEvaluation,
) -> None:
    onnx = run_evaluation(framework="onnxruntime", batch_sizes=[1])
    torchscript = run_evaluation(framework="pytorch", batch_sizes=[1])

    for evaluation in (onnx, torchscript):
        result = evaluation.result
        assert result["dataset"]["count"] == 5478
        # Carried: the clicks are remembered; reset at every call: a guess between clicks.
        assert result["accuracy"]["top1"] >= 0.97
        assert result["accuracy_state_reset"]["top1"] <= 0.7
        assert result["batch_sizes"][0]["streams"] == 128
    # Input by input, the ONNX and TorchScript forms give the same classes and probabilities.
    agreement = compare(onnx, torchscript)
    assert agreement["top1_agreement"] == 1.0
    assert agreement["max_abs_diff"] < 1e-4
    assert onnx.result["accuracy"]["top1"] == torchscript.result["accuracy"]["top1"]
    assert (
        onnx.result["accuracy_state_reset"]["top1"]
        == torchscript.result["accuracy_state_reset"]["top1"]
    )


def test_the_loop_matches_a_hand_run_of_the_model_stream_by_stream(
    run_evaluation: RunEvaluation, store: Path
) -> None:
    """The loop's calls are the model's own, one stream at a time from the zero state (the
    zoo's check, `_run_both`), whatever the number of streams side by side."""
    validation = streams.make_streams("validation")
    paths = {
        "onnxruntime": store / "models/toggle-gru/1.0.0/toggle-gru.onnx",
        "pytorch": store / "models/toggle-gru/1.0.0/toggle-gru.pt",
    }
    carried = streams._run_both(paths, validation, carry=True)["onnxruntime"]
    expected = np.exp(carried - carried.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)

    evaluation = run_evaluation(framework="onnxruntime", batch_sizes=[5, 1])
    assert np.array_equal(evaluation.labels, validation.labels)
    np.testing.assert_allclose(evaluation.outputs, expected, atol=1e-5)
    by_size = {entry["batch_size"]: entry for entry in evaluation.result["batch_sizes"]}
    assert by_size[5]["accuracy"]["top1"] == by_size[1]["accuracy"]["top1"]
    # One call per step of the lockstep schedule; only the last calls hold fewer rows.
    lengths = StreamReader(store / "datasets/toggle-clicks/1.0.0/validation.parquet").lengths
    assert by_size[5]["batches"] == lockstep_calls(lengths, 5) < len(validation.labels)
    assert by_size[1]["batches"] == len(validation.labels)
    assert by_size[5]["latency_batches"] == "full"


def test_progress_counts_every_call_when_each_pass_reads_the_streams_again(
    run_evaluation: RunEvaluation, store: Path
) -> None:
    """A split larger than stage_bytes is read again by each pass, stream by stream: the same
    calls, counted once each, and a warm-up longer than the split goes round again."""
    seen: list[tuple[int, int]] = []
    evaluation = run_evaluation(
        framework="onnxruntime",
        batch_sizes=[3],
        limit=200,
        stage_bytes=1,
        warmup=250,
        repeat=2,
        progress=lambda done, total: seen.append((done, total)),
    )
    lengths = StreamReader(
        store / "datasets/toggle-clicks/1.0.0/validation.parquet", limit=200
    ).lengths
    calls = lockstep_calls(lengths, 3)
    entry = evaluation.result["batch_sizes"][0]
    assert entry["batches"] == calls and entry["timed_inputs"] == 2 * 200
    assert all(done <= total for done, total in seen), seen[-5:]
    # warm-up, two timed passes and the state-reset pass
    assert seen[-1] == (250 + 3 * calls, 250 + 3 * calls)
    held = run_evaluation(framework="onnxruntime", batch_sizes=[3], limit=200, repeat=1)
    np.testing.assert_array_equal(held.outputs, evaluation.outputs)


def test_the_metrics_are_scikit_learns_on_the_reported_probabilities(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(framework="onnxruntime", batch_sizes=[8], limit=1500)
    accuracy = evaluation.result["accuracy"]
    probabilities, labels = evaluation.outputs, evaluation.labels
    predicted = probabilities.argmax(axis=1)
    assert accuracy["count"] == len(labels) == 1500  # the limit cuts the last stream short
    assert accuracy["top1"] == pytest.approx(metrics.accuracy_score(labels, predicted))
    assert accuracy["f1"] == pytest.approx(metrics.f1_score(labels, predicted))
    assert accuracy["precision"] == pytest.approx(metrics.precision_score(labels, predicted))
    assert accuracy["recall"] == pytest.approx(metrics.recall_score(labels, predicted))
    assert accuracy["roc_auc"] == pytest.approx(
        metrics.roc_auc_score(labels, probabilities[:, 1]), abs=1e-6
    )
    # Each input's predictions are the probabilities, best first.
    first = evaluation.predictions[0]
    assert first[0][2] == pytest.approx(float(probabilities[0].max()), abs=1e-6)


def test_a_wrong_batch_axis_fails_naming_the_call(run_evaluation: RunEvaluation) -> None:
    data = _manifest("onnxruntime").data
    data["inputs"][2]["parameters"]["batch_axis"] = 0
    model = manifests.load(yaml.safe_dump(data))
    with pytest.raises(PredictorError, match="onnxruntime failed to run toggle-gru"):
        run_evaluation(model=model, framework="onnxruntime", batch_sizes=[4], limit=200)


def test_layer_tracing_of_a_streaming_model_is_refused_not_ignored(
    run_evaluation: RunEvaluation,
) -> None:
    with pytest.raises(EvaluationError, match="trace level framework: .* ask for model"):
        run_evaluation(framework="onnxruntime", trace_level="framework", limit=10)
    traced = run_evaluation(framework="onnxruntime", trace_level="model", limit=200)
    levels = traced.result["trace"]["levels"]
    assert levels["model"] == 200 and levels["application"] > 0


# -- the stream split ---------------------------------------------------------------------------


def _split(path: Path, rows: list[tuple[Any, int, int]], *, columns: bool = True) -> Path:
    chunk = io.BytesIO()
    np.save(chunk, np.zeros(16, np.float32))
    arrays = {
        "stream": pa.array([r[0] for r in rows]),
        "position": pa.array([r[1] for r in rows], pa.int64()),
        "input": pa.array([chunk.getvalue()] * len(rows), pa.binary()),
        "label": pa.array([r[2] for r in rows], pa.int64()),
    }
    if not columns:
        del arrays["stream"], arrays["position"]
    pq.write_table(pa.table(arrays), path)
    return path


def test_a_stream_split_is_read_a_stream_at_a_time(tmp_path: Path) -> None:
    path = _split(tmp_path / "s.parquet", [("a", 0, 0), ("a", 1, 1), ("b", 0, 1), ("c", 0, 0)])
    reader = StreamReader(path)
    assert reader.lengths == [2, 1, 1]
    assert [labels.tolist() for _, labels in reader] == [[0, 1], [1], [0]]
    assert [len(inputs) for inputs, _ in StreamReader(path, limit=3)] == [2, 1]
    assert lockstep_calls([2, 1, 1], 2) == 2 and lockstep_calls([2, 1, 1], 1) == 4


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([(1, 0, 0), (2, 0, 0), (1, 1, 0)], "row 2 is of stream 1, whose rows came earlier"),
        ([(1, 0, 0), (1, 2, 0)], "row 1 is at position 2 of stream 1, but 1 comes next"),
        ([(1, 1, 0)], "row 0 is at position 1 of stream 1, but 0 comes next"),
    ],
)
def test_a_stream_split_out_of_order_is_refused_naming_the_row(
    tmp_path: Path, rows: list[tuple[Any, int, int]], message: str
) -> None:
    path = _split(tmp_path / "s.parquet", rows)
    with pytest.raises(DatasetError, match=message):
        StreamReader(path)
    problems = split_problems(path, labels=2, encoding="npy", count=None, streams=True)
    assert any(message in problem for problem in problems), problems


def test_a_split_without_stream_columns_is_refused_for_a_sequence_dataset(
    tmp_path: Path,
) -> None:
    path = _split(tmp_path / "s.parquet", [(1, 0, 0)], columns=False)
    (problem,) = split_problems(path, labels=2, encoding="npy", count=1, streams=True)
    assert "without the column(s) stream, position" in problem
    assert split_problems(path, labels=2, encoding="npy", count=1) == []
    (problem,) = split_problems(path, labels=2, encoding="png", count=1)
    assert problem == "row 0's input is not PNG (the manifest's encoding)"


# -- manifests ---------------------------------------------------------------------------------


def _errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(manifests.ManifestError) as caught:
        manifests.load(yaml.safe_dump(data))
    return {error["path"]: error["message"] for error in caught.value.errors}


def test_state_and_constant_inputs_are_checked_naming_the_field() -> None:
    data = _manifest("onnxruntime").data
    data["inputs"][2]["parameters"]["from_output"] = "logits"
    data["inputs"][2]["parameters"]["batch_axis"] = 3
    data["inputs"][1]["parameters"]["value"] = [[1, 2], [3]]
    errors = _errors(data)
    assert (
        "'logits' is not a state output of this model (its state outputs: next_state)"
        in (errors["inputs.2.parameters.from_output"])
    )
    assert "3 is past the tensor's last axis" in errors["inputs.2.parameters.batch_axis"]
    assert "the same length" in errors["inputs.1.parameters.value"]
    assert "state output 'next_state' is carried to no input" in errors["outputs.1"]

    data = _manifest("onnxruntime").data
    data["inputs"][1]["parameters"] = {"element_type": "int64", "value": 0.5}
    data["outputs"][0]["type"] = "binary_probability"
    data["outputs"][0]["parameters"]["labels"] = ["a", "b", "c"]
    errors = _errors(data)
    assert "whole numbers for element type int64" in errors["inputs.1.parameters.value"]
    assert "reads two classes" in errors["outputs.0.parameters.labels"]

    data = _manifest("onnxruntime").data
    data["inputs"][1]["parameters"]["value"] = [0.0] * 5000
    assert "at most 4096" in _errors(data)["inputs.1.parameters.value"]
    del data["inputs"][2]["parameters"]["initial"]
    assert "initial" in " ".join(_errors(data).values())


def test_what_the_loop_cannot_run_is_refused_at_launch_naming_it() -> None:
    data = _manifest("onnxruntime").data
    assert unsupported(data) is None
    classifier = {**data, "task": "image_classification"}
    assert "constant or state inputs" in str(unsupported(classifier))
    # TensorFlow feeds every input by name (tests/predictors/test_tf_by_name.py runs one).
    keras = {**data, "framework": {"name": "tensorflow", "version": "^2.15"}}
    assert unsupported(keras) is None
    two = {**data, "inputs": [data["inputs"][0], {**data["inputs"][0], "name": "other"}]}
    assert (
        "2 inputs fed from the dataset (type image, tensor, audio, bytes or text: chunk, other)"
        in str(unsupported(two))
    )
    scored = {**data, "outputs": [data["outputs"][0], {**data["outputs"][0], "name": "x"}]}
    assert "2 scored outputs (logits, x)" in str(unsupported(scored))


def test_the_graph_check_knows_constant_and_state_ranks(store: Path) -> None:
    data = _manifest("onnxruntime").data
    path = store / "models/toggle-gru/1.0.0/toggle-gru.onnx"
    assert graph_check.onnx_problems(data, path) == []
    data["inputs"][1]["parameters"]["value"] = [1.0]
    data["inputs"][2]["parameters"]["shape"] = [24]
    found = dict(graph_check.onnx_problems(data, path))
    assert "has rank 0, but the constant's value (not batched) has rank 1" in found["inputs.1"]
    assert "has rank 3, but the batch axis + shape has rank 2" in found["inputs.2"]


def test_a_stream_column_of_another_type_is_a_problem_named_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    pq.write_table(
        pa.table(
            {
                "stream": pa.array([[1], [1]], pa.list_(pa.int64())),
                "position": pa.array([0, 1], pa.int64()),
                "input": pa.array([b"\x93NUMPY", b"\x93NUMPY"], pa.binary()),
                "label": pa.array([0, 1], pa.int64()),
            }
        ),
        path,
    )
    problems = split_problems(path, labels=2, encoding="npy", count=2, streams=True)
    assert any(
        "column 'stream' is list<element: int64>, not an integer or a string" in p for p in problems
    )


@pytest.mark.parametrize(
    ("element_type", "value", "message"),
    [
        ("float32", 10**400, "too large for any element type"),
        ("uint8", 300, "outside uint8's 0..255"),
        ("int64", [3e23], "outside int64's"),
        ("float16", 1e6, "beyond float16's largest"),
    ],
)
def test_a_constant_that_does_not_fit_its_element_type_is_refused(
    element_type: str, value: Any, message: str
) -> None:
    data = _manifest("onnxruntime").data
    data["inputs"][1]["parameters"] = {"element_type": element_type, "value": value}
    assert message in _errors(data)["inputs.1.parameters.value"]


def test_outputs_the_metrics_cannot_read_fail_saying_why() -> None:
    from predictors.evaluation.summaries import sequence_metrics

    with pytest.raises(EvaluationError, match="output for input 1 is not finite"):
        sequence_metrics(np.array([[0.5, 0.5], [np.nan, 1.0]]), np.array([0, 1]))
    with pytest.raises(EvaluationError, match="has label 2, but the model's output reads 2"):
        sequence_metrics(np.array([[0.5, 0.5], [0.2, 0.8]]), np.array([0, 2]))
    # Scores that are no probabilities: no ROC AUC, rather than a crash.
    scores = np.array([[0.9, 0.9, 0.9], [0.1, 0.1, 0.1], [0.3, 0.2, 0.9]])
    assert sequence_metrics(scores, np.array([0, 1, 2]))["roc_auc"] is None
