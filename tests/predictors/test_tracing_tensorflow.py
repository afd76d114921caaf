"""Trace level `framework` on TensorFlow: one span per Keras layer, for models that are a chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors.evaluation import Evaluation
from predictors.frameworks.predictor import PredictorOptions
from predictors.tracing import CLOCK_TF_LAYERS, Span
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> None:
    """TensorFlow sizes its thread pools once per process, when it first runs anything: size
    them as the evaluations below ask (threads=1) before a test builds or loads a Keras model."""
    from predictors.frameworks.tensorflow import _apply_threads

    _apply_threads(1)


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn",))


@pytest.fixture
def evaluation_defaults(evaluation_defaults: dict[str, Any]) -> dict[str, Any]:
    """digits-cnn on TensorFlow, 32 images in batches of 8."""
    return {**evaluation_defaults, "framework": "tensorflow", "batch_sizes": (8,), "limit": 32}


@pytest.fixture(scope="module")
def keras_layers(store: Path) -> list[tuple[str, str]]:
    """digits-cnn's Keras layers (name, class), in order, its InputLayer left out."""
    import keras

    (path,) = store.glob("models/digits-cnn/*/digits-cnn.keras")
    model = keras.saving.load_model(path, compile=False)
    return [
        (layer.name, type(layer).__name__)
        for layer in model.layers
        if not isinstance(layer, keras.layers.InputLayer)
    ]


def batches_and_layers(evaluation: Evaluation) -> tuple[list[Span], dict[int, list[Span]]]:
    batches = [s for s in evaluation.spans if s.attributes["mlms.level"] == "model"]
    layers: dict[int, list[Span]] = {b.span_id: [] for b in batches}
    for span in evaluation.spans:
        if span.attributes["mlms.level"] == "framework":
            layers[span.parent_id].append(span)
    return batches, layers


def test_tensorflow_framework_level_has_one_span_per_keras_layer_per_batch_nested_in_it(
    run_evaluation: RunEvaluation, keras_layers: list[tuple[str, str]]
) -> None:
    evaluation = run_evaluation(trace_level="framework")

    count = len(keras_layers)
    assert keras_layers[0] == ("pad0", "ZeroPadding2D") and keras_layers[-1] == ("logits", "Dense")
    batches, layers = batches_and_layers(evaluation)
    assert len(batches) == 4
    assert evaluation.result["trace"]["level"] == "framework"
    assert evaluation.result["trace"]["layer_spans"] == 4 * count
    assert sum(len(children) for children in layers.values()) == 4 * count
    for batch in batches:
        children = layers[batch.span_id]
        assert [(s.name, s.attributes["mlms.op_type"]) for s in children] == keras_layers
        assert [s.attributes["mlms.layer_name"] for s in children] == [n for n, _ in keras_layers]
        assert [s.attributes["mlms.layer_index"] for s in children] == list(range(count))
        assert all(s.parent_id == batch.span_id for s in children)
        assert all(batch.start_ns <= s.start_ns <= s.end_ns <= batch.end_ns for s in children)
        assert all(a.end_ns <= b.start_ns for a, b in zip(children, children[1:], strict=False))
        assert children[0].attributes["mlms.output_shape"] == [8, 10, 10, 1]  # pad0, NHWC
        assert children[-1].attributes["mlms.output_shape"] == [8, 10]
        assert all(s.attributes["mlms.clock"] == CLOCK_TF_LAYERS for s in children)
        assert all(s.attributes["mlms.device"] == "cpu" for s in children)

    # Layer by layer, the model computes what its traced graph computes.
    model = run_evaluation(trace_level="model")
    np.testing.assert_allclose(evaluation.outputs, model.outputs, atol=1e-5)
    assert evaluation.result["accuracy"] == model.result["accuracy"]
    assert (evaluation.outputs.argmax(axis=-1) == model.outputs.argmax(axis=-1)).all()


def test_tensorflow_model_level_has_no_layer_spans(run_evaluation: RunEvaluation) -> None:
    model = run_evaluation(trace_level="model")

    levels = [s.attributes["mlms.level"] for s in model.spans]
    assert levels.count("model") == 4 and "framework" not in levels
    assert all(s.name == "predict" for s in model.spans if s.attributes["mlms.level"] == "model")
    assert not model.result["trace"].get("layer_spans")


# Keras 3.15's `Model.save` converts variables with np.array(copy=False), which NumPy 2 warns about.
KERAS_SAVE_WARNING = "ignore:__array__ implementation doesn't accept a copy keyword"


def _predictor(path: Path, trace_level: str) -> Any:
    from predictors.frameworks.tensorflow import TensorFlowPredictor

    predictor = TensorFlowPredictor()
    predictor.load(None, PredictorOptions(graph_file=path, threads=1, trace_level=trace_level))
    return predictor


@pytest.mark.filterwarnings(KERAS_SAVE_WARNING)
def test_a_sequential_model_is_traced_layer_by_layer_with_the_same_outputs(
    tmp_path: Path,
) -> None:
    import keras

    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(5, activation="relu", name="hidden"),
            keras.layers.Dropout(0.5, name="drop"),
            keras.layers.Dense(3, name="out"),
        ]
    )
    path = tmp_path / "sequential.keras"
    model.save(path)
    batch = np.random.default_rng(0).random((4, 6), dtype=np.float32)

    plain = _predictor(path, "model")
    expected = plain.predict(batch)
    assert plain.take_layers() is None
    plain.close()
    traced = _predictor(path, "framework")
    outputs = [traced.predict(batch), traced.predict(batch)]
    calls = traced.take_layers()
    traced.close()

    for output in outputs:  # Dropout is off (training=False), as in the graph
        np.testing.assert_allclose(output, expected, atol=1e-5)
    assert len(calls) == 2  # one list per predict call, in order
    for layers in calls:
        assert [(layer.name, layer.op_type) for layer in layers] == [
            ("hidden", "Dense"),
            ("drop", "Dropout"),
            ("out", "Dense"),
        ]
        assert [layer.attributes["mlms.output_shape"] for layer in layers] == [
            [4, 5],
            [4, 5],
            [4, 3],
        ]
        assert all(
            a.offset_ns + a.duration_ns == b.offset_ns
            for a, b in zip(layers, layers[1:], strict=False)
        )


@pytest.mark.filterwarnings(KERAS_SAVE_WARNING)
def test_a_model_that_is_not_a_chain_traces_no_layers(tmp_path: Path) -> None:
    import keras

    inputs = keras.Input((6,), name="x")
    left = keras.layers.Dense(4, name="left")(inputs)
    right = keras.layers.Dense(4, name="right")(inputs)
    outputs = keras.layers.Dense(2, name="out")(keras.layers.Add(name="add")([left, right]))
    path = tmp_path / "branches.keras"
    keras.Model(inputs, outputs).save(path)
    batch = np.random.default_rng(1).random((3, 6), dtype=np.float32)

    plain = _predictor(path, "model")
    expected = plain.predict(batch)
    plain.close()
    traced = _predictor(path, "framework")
    np.testing.assert_allclose(traced.predict(batch), expected, atol=1e-5)
    assert traced.take_layers() is None
    traced.close()


def test_ml_library_nests_the_graphs_ops_in_their_keras_layers(
    run_evaluation: RunEvaluation, keras_layers: list[tuple[str, str]]
) -> None:
    evaluation = run_evaluation(trace_level="ml_library")
    spans = evaluation.spans
    by_id = {s.span_id: s for s in spans}
    batches = [s for s in spans if s.attributes["mlms.level"] == "model"]
    layers = [s for s in spans if s.attributes["mlms.level"] == "framework"]
    ops = [s for s in spans if s.attributes["mlms.level"] == "ml_library"]
    assert len(batches) == 4 and layers and ops
    names = dict(keras_layers)
    for layer in layers:
        assert by_id[layer.parent_id] in batches
        assert names.get(layer.name) == layer.attributes["mlms.op_type"]
    for op in ops:
        layer = by_id[op.parent_id]
        assert layer.attributes["mlms.level"] == "framework"
        assert op.attributes["mlms.layer_name"] == layer.name
        # An op is named by its graph node, scoped by its Keras layer.
        assert f"/{layer.name}" in op.name
    # The op types are the kernels TensorFlow ran, which depend on the CPU: the stock kernels
    # (`Pad`, `MaxPool`, `_FusedConv2D`) or, where oneDNN takes over, its own
    # (`_MklNativeMaxPool`, `_MklNativePadWithFusedConv2D`, the pad fused into the convolution).
    types = {op.attributes["mlms.op_type"] for op in ops}
    assert any(t.endswith("MaxPool") for t in types), types
    assert "Pad" in types or any("PadWithFusedConv2D" in t for t in types), types
    # Grappler fuses each convolution with the ReLU after it: the fused op is the ReLU's.
    fused = [op for op in ops if op.attributes["mlms.op_type"].endswith("FusedConv2D")]
    assert fused and all(op.attributes["mlms.layer_name"].startswith("relu") for op in fused)
    summary = evaluation.result["trace"]["profiler"]
    assert summary["calls"] == 4 and summary["ops"] == len(ops)
    assert summary["ops_outside_calls"] == 0
    untraced = run_evaluation(trace_level="none")
    np.testing.assert_allclose(evaluation.outputs, untraced.outputs, atol=1e-5)
    assert not any("traces down to" in note for note in evaluation.result["notes"])
