"""Truth: a model that keeps a state hidden inside itself is refused, or reset where its module
offers a reset, and never run with that state silently carried from one input or stream to
the next (`predictors.evaluation.state`).

The models are TorchScript modules made here, whose right answers are known by construction:
on inputs that name their own label, a stateless model scores exactly 1; a hidden counter or
switch that the calls before leave behind makes a carried run score less (shown by running
the module by hand), so a score of exactly 1 through the loop shows that the state was reset
where it had to be. Everything runs through the one evaluation loop (`evaluate`), as the CLI
and the agent run it.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from predictors import manifests
from predictors.data import DataManager
from predictors.evaluation import Evaluation, EvaluationError, EvaluationOptions, evaluate
from predictors.evaluation import state as model_state
from predictors.manifests.catalog import Catalog

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

CLASSES = 4
INPUTS = 40
# The streams: lengths, and the positions of their clicks (each flips the switch). Every stream
# starts with a click and ends with the switch on, so that a switch carried into the next
# stream gets that stream's labels wrong until its next click.
STREAMS = [
    (5, [0, 3, 4]),
    (4, [0]),
    (6, [0, 2, 5]),
    (3, [0]),
    (7, [0, 1, 2]),
    (4, [0, 2, 3]),
]


# -- the modules ---------------------------------------------------------------------------------


def _modules() -> dict[str, Any]:
    import torch
    from torch import nn

    class Echo(nn.Module):
        """Stateless: its logits are its input, scaled."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 10.0

    class Counter(nn.Module):
        """A hidden call counter: from the second call on, class 0 wins every input."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("count", torch.zeros(()))
            self.register_buffer("first", torch.eye(CLASSES)[0])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.count += 1.0
            return x * 10.0 + (self.count - 1.0) * 100.0 * self.first

    class CounterWithReset(Counter):
        @torch.jit.export
        def reset_state(self) -> None:
            self.count.zero_()

    class CounterWithUselessReset(Counter):
        @torch.jit.export
        def reset_state(self) -> None:
            pass

    class Toggle(nn.Module):
        """A hidden switch per stream (batch row), flipped by a click (the chunk's first
        value); its logits say off or on."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("on", torch.zeros(1))

        def forward(self, chunk: torch.Tensor) -> torch.Tensor:
            on = torch.remainder(self.on + chunk[:, 0], 2.0)
            self.on = on
            return torch.stack([1.0 - on, on], 1) * 10.0

    class ToggleWithReset(Toggle):
        @torch.jit.export
        def reset(self) -> None:
            self.on = torch.zeros(1, device=self.on.device)

    return {
        "echo": Echo,
        "counter": Counter,
        "counter-reset": CounterWithReset,
        "counter-useless-reset": CounterWithUselessReset,
        "toggle": Toggle,
        "toggle-reset": ToggleWithReset,
    }


def _script(module: Any) -> Any:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated upstream; scripted on purpose
        return torch.jit.script(module.eval())


# -- the data ------------------------------------------------------------------------------------


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _vectors() -> tuple[np.ndarray, np.ndarray]:
    """Inputs that name their label: the one-hot vector of it."""
    labels = np.arange(INPUTS, dtype=np.int64) % CLASSES
    return np.eye(CLASSES, dtype=np.float32)[labels], labels


def _streams() -> list[tuple[np.ndarray, np.ndarray]]:
    """Each stream's chunks (length, 2) and labels: the switch's position after each chunk."""
    made = []
    for length, clicks in STREAMS:
        chunks = np.zeros((length, 2), np.float32)
        chunks[sorted(set(clicks)), 0] = 1.0
        labels = (np.cumsum(chunks[:, 0]) % 2).astype(np.int64)
        assert labels[-1] == 1
        made.append((chunks, labels))
    return made


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("hidden-state-store"))


def build_store(root: Path) -> Path:
    """The datasets and the TorchScript modules, as an artifact store under `root`."""
    import torch

    for kind in ("vectors", "streams"):
        (root / f"datasets/hidden-{kind}/1.0.0").mkdir(parents=True)
    inputs, labels = _vectors()
    pq.write_table(
        pa.table(
            {
                "input": pa.array([_npy(row) for row in inputs], pa.binary()),
                "label": pa.array(labels, pa.int64()),
            }
        ),
        root / "datasets/hidden-vectors/1.0.0/vectors.parquet",
    )
    rows: dict[str, list[Any]] = {"stream": [], "position": [], "input": [], "label": []}
    for number, (chunks, classes) in enumerate(_streams()):
        for position, (chunk, label) in enumerate(zip(chunks, classes, strict=True)):
            rows["stream"].append(number)
            rows["position"].append(position)
            rows["input"].append(_npy(chunk))
            rows["label"].append(int(label))
    pq.write_table(
        pa.table(
            {
                "stream": pa.array(rows["stream"], pa.int64()),
                "position": pa.array(rows["position"], pa.int64()),
                "input": pa.array(rows["input"], pa.binary()),
                "label": pa.array(rows["label"], pa.int64()),
            }
        ),
        root / "datasets/hidden-streams/1.0.0/streams.parquet",
    )
    for name, module in _modules().items():
        folder = root / f"models/hidden-{name}/1.0.0"
        folder.mkdir(parents=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.save is deprecated upstream
            torch.jit.save(_script(module()), str(folder / f"{name}.pt"))
    return root


def _dataset(kind: str) -> manifests.Manifest:
    streaming = kind == "streams"
    count = sum(length for length, _ in STREAMS) if streaming else INPUTS
    return manifests.load(
        yaml.safe_dump(
            {
                "kind": "dataset",
                "name": f"hidden-{kind}",
                "version": "1.0.0",
                "description": "inputs whose labels are known by construction",
                "license": "BSD-3-Clause",
                "task": "sequence_labelling" if streaming else "image_classification",
                "format": "parquet",
                "encoding": "npy",
                "labels": ["off", "on"] if streaming else [str(c) for c in range(CLASSES)],
                "splits": {
                    "validation": {
                        "path": f"repo://datasets/hidden-{kind}/1.0.0/{kind}.parquet",
                        "count": count,
                    }
                },
            }
        )
    )


def _model(name: str, framework: str = "pytorch") -> manifests.Manifest:
    streaming = name.startswith("toggle")
    ranges = {"pytorch": ">=2.0.0 <3.0.0", "tensorflow": ">=2.15.0 <3.0.0"}
    extension = {"pytorch": "pt", "tensorflow": "keras"}[framework]
    return manifests.load(
        yaml.safe_dump(
            {
                "kind": "model",
                "name": f"hidden-{name}",
                "version": "1.0.0",
                "description": "a TorchScript module made by the truth suite",
                "license": "BSD-3-Clause",
                "task": "sequence_labelling" if streaming else "image_classification",
                "framework": {"name": framework, "version": ranges[framework]},
                "inputs": [
                    {
                        "name": "chunk" if streaming else "input",
                        "type": "tensor",
                        "parameters": {
                            "element_type": "float32",
                            "shape": [2] if streaming else [CLASSES],
                        },
                    }
                ],
                "outputs": [
                    {
                        "name": "logits",
                        "type": "logits",
                        "parameters": {
                            "top_k": 2,
                            "labels": (
                                ["off", "on"] if streaming else [str(c) for c in range(CLASSES)]
                            ),
                        },
                    }
                ],
                "model": {"graph_path": f"repo://models/hidden-{name}/1.0.0/{name}.{extension}"},
                "attributes": {"trained": True},
            }
        )
    )


def _evaluate(store: Path, model: str, framework: str = "pytorch", **options: Any) -> Evaluation:
    kind = "streams" if model.startswith("toggle") else "vectors"
    settings: dict[str, Any] = {"threads": 1, "repeat": 2, "warmup": 3, **options}
    return evaluate(
        _model(model, framework),
        _dataset(kind),
        EvaluationOptions(**settings),
        DataManager(store_dir=store).fetch,
    )


# -- inputs one by one ---------------------------------------------------------------------------


def test_a_stateless_model_passes_the_check_and_its_result_says_so(store: Path) -> None:
    evaluation = _evaluate(store, "echo", batch_sizes=[1, 8])
    result = evaluation.result
    assert result["state"] == {
        "stateful": False,
        "checked": "before timing",
        "rtol": model_state.RTOL_CPU,
        "atol": model_state.ATOL,
    }
    assert result["accuracy"]["top1"] == 1.0
    assert not any("state" in note for note in result["notes"])


def test_the_hidden_counter_matters_when_carried(store: Path) -> None:
    """By hand: the module run batch after batch without a reset gets the inputs after its
    first call wrong, all but those of class 0."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.load is deprecated upstream
        module = torch.jit.load(str(store / "models/hidden-counter-reset/1.0.0/counter-reset.pt"))
    inputs, labels = _vectors()
    with torch.inference_mode():
        carried = np.concatenate(
            [module(torch.from_numpy(inputs[i : i + 8])).numpy() for i in range(0, INPUTS, 8)]
        )
    assert float(np.mean(carried.argmax(1) == labels)) == pytest.approx(8 / 40 + 32 / 40 / 4)


def test_a_hidden_state_without_a_reset_is_refused_naming_the_model(store: Path) -> None:
    with pytest.raises(EvaluationError) as refused:
        _evaluate(store, "counter", batch_sizes=[4])
    message = str(refused.value)
    assert message.startswith(
        "hidden-counter 1.0.0 in pytorch returned different outputs for the same input on two "
        "calls (the output: 4 of 16 values differ, largest difference 100, 0.0011 allowed)"
    )
    assert "it keeps a state between calls" in message
    assert "reset_state()" in message


def test_a_hidden_state_with_a_reset_is_reset_before_each_call(store: Path) -> None:
    evaluation = _evaluate(store, "counter-reset", batch_sizes=[8, 1, 3])
    result = evaluation.result
    how = "the TorchScript module's reset_state()"
    assert result["state"]["stateful"] is True
    assert result["state"]["reset"] == how
    assert result["state"]["handling"] == f"reset before each call via {how}"
    assert "largest difference 100" in result["state"]["difference"]
    # Reset before every call, warm-up and repetitions included: every input is right.
    assert result["accuracy"]["top1"] == 1.0
    assert [entry["accuracy"]["top1"] for entry in result["batch_sizes"]] == [1.0, 1.0, 1.0]
    assert any(f"it was reset before each call via {how}" in note for note in result["notes"])
    # The check's first call is the cold one.
    first = result["batch_sizes"][0]
    assert first["first_call_ms"] > 0


def test_a_reset_that_does_not_help_is_refused(store: Path) -> None:
    with pytest.raises(
        EvaluationError,
        match=r"hidden-counter-useless-reset 1\.0\.0 in pytorch returned different outputs .*"
        r"and again with the TorchScript module's reset_state\(\) before each call .*"
        r"does not make its calls repeatable",
    ):
        _evaluate(store, "counter-useless-reset", batch_sizes=[4])


def test_with_cold_start_the_check_comes_after_the_cold_calls(store: Path) -> None:
    """The first timed calls of a cold start are the model's first: the check follows them,
    and a model found to keep a state is refused then, its reset notwithstanding (its cold
    calls were not reset)."""
    stateless = _evaluate(store, "echo", batch_sizes=[4, 8], cold_start=True, warmup=0)
    assert stateless.result["state"]["stateful"] is False
    assert stateless.result["state"]["checked"] == (
        "after the cold calls of the first batch size (cold_start)"
    )
    for model, sizes in (("counter-reset", [4]), ("toggle-reset", [1])):
        with pytest.raises(EvaluationError, match="With cold_start the check comes after"):
            _evaluate(store, model, batch_sizes=sizes, cold_start=True, warmup=0)


def test_the_command_line_refuses_or_reports_the_reset(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mlms evaluate`, as a user runs it: a refusal is one line naming the model, exit 1; a
    reset is in the JSON report's `state` and in its notes."""
    import json

    from predictors.cli import main

    for name in ("counter", "counter-reset"):
        folder = tmp_path / f"models/hidden-{name}"
        folder.mkdir(parents=True)
        (folder / "pytorch.yaml").write_text(yaml.safe_dump(_model(name).data))
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets/hidden-vectors.yaml").write_text(yaml.safe_dump(_dataset("vectors").data))
    common = ["--framework", "pytorch", "--dataset", "hidden-vectors", "--threads", "1"]
    where = ["--manifests", str(tmp_path), "--store", str(store), "--no-progress"]

    status = main(["evaluate", "hidden-counter", *common, *where])
    captured = capsys.readouterr()
    assert status == 1 and captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(
        "mlms: error: hidden-counter 1.0.0 in pytorch returned different outputs for the same "
        "input on two calls"
    )

    status = main(["evaluate", "hidden-counter-reset", *common, *where, "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    (result,) = report["results"]
    assert result["state"]["handling"] == (
        "reset before each call via the TorchScript module's reset_state()"
    )
    assert result["accuracy"]["top1"] == 1.0
    assert any("keeps a state inside itself" in note for note in result["notes"])


def test_layer_tracing_counts_the_checks_calls_as_untimed(store: Path) -> None:
    """The check's calls are traced as warm-up calls are: no layer spans, none lost."""
    evaluation = _evaluate(store, "counter-reset", batch_sizes=[8], trace_level="framework")
    assert evaluation.result["accuracy"]["top1"] == 1.0
    assert evaluation.result["state"]["stateful"] is True


def _keras_gru(path: Path) -> None:
    """A Keras model whose GRU is stateful (its state kept from call to call), untrained;
    stateful layers take a fixed batch size, here 4."""
    import os

    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import tensorflow as tf

    # TensorFlow sizes its thread pools once per process: as the evaluations here ask (one).
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # already sized, by an evaluation of this session (which asked for one too)
    keras.utils.set_random_seed(7)
    inputs = keras.Input(batch_shape=(4, CLASSES))
    steps = keras.layers.Reshape((1, CLASSES))(inputs)
    recurrent = keras.layers.GRU(8, stateful=True, name="gru")(steps)
    model = keras.Model(inputs, keras.layers.Dense(CLASSES)(recurrent))
    path.parent.mkdir(parents=True)
    with warnings.catch_warnings():
        # Keras saves the GRU's state variable through NumPy's old __array__ protocol.
        warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
        model.save(path)


def test_a_keras_stateful_layer_is_reset_before_each_call(store: Path) -> None:
    """Keras's own reset: the loop's outputs are the model's, from its initial state, call by
    call (a hand run, reset before each batch)."""
    import keras

    path = store / "models/hidden-keras-gru/1.0.0/keras-gru.keras"
    if not path.exists():
        _keras_gru(path)
    evaluation = _evaluate(store, "keras-gru", "tensorflow", batch_sizes=[4])
    state = evaluation.result["state"]
    assert state["stateful"] is True
    assert state["handling"] == (
        "reset before each call via reset_state() of the Keras model's stateful layers (gru)"
    )
    model = keras.saving.load_model(path, compile=False)
    inputs, _ = _vectors()
    expected = []
    for start in range(0, INPUTS, 4):
        model.get_layer("gru").reset_state()
        expected.append(model(inputs[start : start + 4], training=False).numpy())
    np.testing.assert_allclose(evaluation.outputs, np.concatenate(expected), rtol=1e-5, atol=1e-6)


# -- streams -------------------------------------------------------------------------------------


def test_the_hidden_switch_matters_when_carried_across_streams() -> None:
    """By hand: the switch carried from stream to stream gets labels wrong; reset before each
    stream it gets every one right."""
    import torch

    module = _script(_modules()["toggle-reset"]())
    streams = _streams()
    scores: dict[bool, list[bool]] = {True: [], False: []}
    with torch.inference_mode():
        for reset in (False, True):
            module.reset()
            for chunks, labels in streams:
                if reset:
                    module.reset()
                for chunk, label in zip(chunks, labels, strict=True):
                    out = module(torch.from_numpy(chunk[None]))
                    scores[reset].append(int(out.argmax(1)) == label)
    assert np.mean(scores[True]) == 1.0
    assert np.mean(scores[False]) < 0.7


def test_a_hidden_state_across_streams_without_a_reset_is_refused(store: Path) -> None:
    with pytest.raises(
        EvaluationError,
        match=r"hidden-toggle 1\.0\.0 in pytorch returned different outputs for the same input "
        r"on two calls \(the output: 2 of 2 values differ, largest difference 10, .* allowed\): "
        r".*so each "
        r"stream would see what the ones before it left behind",
    ):
        _evaluate(store, "toggle", batch_sizes=[1])


def test_a_hidden_state_with_a_reset_is_reset_before_each_stream(store: Path) -> None:
    evaluation = _evaluate(store, "toggle-reset", batch_sizes=[1], warmup=7)
    result = evaluation.result
    how = "the TorchScript module's reset()"
    assert result["state"]["stateful"] is True
    assert result["state"]["handling"] == f"reset before each stream via {how}"
    assert result["accuracy"]["top1"] == 1.0
    assert result["batch_sizes"][0]["streams"] == len(STREAMS)
    assert any(f"it was reset before each stream via {how}" in note for note in result["notes"])
    # No state inputs: there is no state-reset pass to report.
    assert "accuracy_state_reset" not in result


def test_a_reset_of_every_stream_at_once_refuses_streams_side_by_side(store: Path) -> None:
    with pytest.raises(
        EvaluationError,
        match=r"hidden-toggle-reset 1\.0\.0 in pytorch keeps a state inside itself, which the "
        r"TorchScript module's reset\(\) resets for every stream of a call at once: .*use batch "
        r"size 1 \(asked for 2\)",
    ):
        _evaluate(store, "toggle-reset", batch_sizes=[1, 2])


def test_a_model_whose_state_is_its_inputs_and_outputs_is_stateless() -> None:
    """The zoo's toggle-gru carries its state as an input and an output: the same call twice
    gives the same outputs, in both of its formats."""
    from tests.predictors.zoo_store import zoo_store

    store = zoo_store(("toggle-gru",))
    catalog = Catalog()
    for framework in ("onnxruntime", "pytorch"):
        evaluation = evaluate(
            catalog.find_model("toggle-gru", "*", framework),
            catalog.find_dataset("toggle-clicks"),
            EvaluationOptions(threads=1, repeat=1, batch_sizes=(4,), limit=300),
            DataManager(store_dir=store).fetch,
        )
        assert evaluation.result["state"]["stateful"] is False
        assert evaluation.result["accuracy"]["top1"] > 0.9


# -- the comparison itself -----------------------------------------------------------------------


def test_the_comparison_allows_float_noise_and_nothing_more() -> None:
    base = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    assert model_state.difference(base, base.copy()) is None
    # A few units in the last place of float32: the noise of a reordered sum.
    assert model_state.difference(base, base * np.float32(1 + 4e-7)) is None
    assert model_state.difference([base, base], [base, base + 1e-3]) == (
        "output 1: 12 of 12 values differ, largest difference 0.001, 3.1e-05 allowed"
    )
    # Relative to the output's scale, not to each value: a logit near zero moves with the
    # rounding of the large terms it is summed from.
    logits = np.array([[10.0, 1e-7, -4.0]], np.float32)
    noisy = logits + np.array([[0.0, 2e-5, 0.0]], np.float32)
    assert model_state.difference(logits, noisy) is None
    # On a GPU (TF32, kernels that change from call to call) the tolerance is wider.
    drifted = logits + np.float32(3e-3)
    assert model_state.difference(logits, drifted).startswith("the output: 3 of 3 values differ")
    assert model_state.difference(logits, drifted, model_state.tolerance("cuda:0")) is None
    assert model_state.difference(logits, logits + 1.0, model_state.tolerance("cuda")) == (
        "the output: 3 of 3 values differ, largest difference 1, 0.011 allowed"
    )
    # Never less than a few units in the last place of the output's type.
    half = logits.astype(np.float16)
    assert model_state.difference(half, half + np.float16(0.06)) is None
    nan = base.copy()
    nan[0, 0] = np.nan
    assert model_state.difference(nan, nan.copy()) is None
    assert model_state.difference(nan, base) == (
        "the output: 1 of 12 values differ, NaN or infinity in different places"
    )
    assert model_state.difference(base, base[:2]) == (
        "the output has shape (3, 4) on the first call, (2, 4) on the second"
    )
    counts = np.arange(5)
    assert model_state.difference(counts, counts + np.eye(5, dtype=int)[0]) == (
        "the output: 1 of 5 values differ, largest difference 1"
    )
