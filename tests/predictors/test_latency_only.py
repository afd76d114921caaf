"""Latency only: models timed without scoring (`predictors.evaluation.scenarios.latency`): a feature
extractor whose outputs have no labels, in ONNX Runtime and TorchScript; a classifier timed on
a dataset of another task; what the mode refuses; the command line."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from predictors import manifests
from predictors.cli import main
from predictors.evaluation import compare
from predictors.manifests import Manifest
from predictors.manifests.catalog import Catalog
from predictors.tasks import unsupported
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

NAMESPACE = "models/digit-features/1.0.0"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zoo's digits and shapes-color (datasets and models), and a feature extractor of
    digits (8x8 grayscale): an embedding (N, 16) and a feature map (N, 4, 8, 8), in ONNX and
    TorchScript from the same seeded weights."""
    import torch
    from torch import nn

    from predictors.zoo import export

    zoo = zoo_store(("digits-cnn", "shapes-color"))
    root = tmp_path_factory.mktemp("store")
    # A copy: the store serves no file outside itself (a link out is refused).
    for entry in ("datasets/digits", "datasets/shapes-color", "models/digits-cnn"):
        shutil.copytree(zoo / entry, root / entry)

    class Extractor(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
            self.embed = nn.Linear(4 * 8 * 8, 16)

        def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            features = self.features(image)
            return self.embed(features.flatten(1)), features

    torch.manual_seed(3)
    model = Extractor().eval()
    example = torch.zeros(1, 1, 8, 8)
    folder = root / NAMESPACE
    folder.mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter, on purpose
        torch.onnx.export(
            model,
            (example,),
            folder / "extractor.onnx",
            dynamo=False,
            input_names=["image"],
            output_names=["embedding", "features"],
            dynamic_axes={name: {0: "batch"} for name in ("image", "embedding", "features")},
        )
    (folder / "extractor.pt").write_bytes(export.torchscript_bytes(model, example))

    class TimeFirst(nn.Module):
        """The extractor's feature map as a sequence, time first: (64 positions, N, 4)."""

        def __init__(self) -> None:
            super().__init__()
            self.features = model.features

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            return self.features(image).flatten(2).permute(2, 0, 1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            TimeFirst().eval(),
            (example,),
            folder / "time-first.onnx",
            dynamo=False,
            input_names=["image"],
            output_names=["sequence"],
            dynamic_axes={"image": {0: "batch"}, "sequence": {1: "batch"}},
        )
    return root


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"dataset": "digits", "threads": 1, "repeat": 1, "latency_only": True}


def _extractor_data(framework: str) -> dict[str, Any]:
    data = Catalog().find_model("digits-cnn", "*", "onnxruntime").data
    data.update(name="digit-features", task="feature_extraction", description="Features.")
    data["framework"] = {
        "name": framework,
        "version": ">=1.16.0 <2.0.0" if framework == "onnxruntime" else ">=2.0.0 <3.0.0",
    }
    data["inputs"][0]["name"] = "image"
    data["outputs"] = [
        {"name": "embedding", "type": "tensor"},
        {"name": "features", "type": "tensor"},
    ]
    file = "extractor.onnx" if framework == "onnxruntime" else "extractor.pt"
    data["model"] = {"graph_path": f"repo://{NAMESPACE}/{file}"}
    data.pop("container", None)
    data.pop("attributes", None)
    return data


def _extractor(framework: str) -> Manifest:
    return manifests.load(yaml.safe_dump(_extractor_data(framework)))


def test_a_feature_extractor_is_timed_in_both_frameworks_and_its_outputs_compared(
    run_evaluation: RunEvaluation,
) -> None:
    onnx = run_evaluation(model=_extractor("onnxruntime"), batch_sizes=[1, 16], limit=64)
    result = onnx.result
    assert result["accuracy"] is None and result["output_type"] == "tensor"
    assert result["options"]["latency_only"] is True
    assert result["dataset"]["count"] == 64
    assert any(note.startswith("latency only:") for note in result["notes"])
    for entry in result["batch_sizes"]:
        assert entry["accuracy"] is None and entry["inputs"] == 64
        assert entry["latency"]["count"] == 64 // entry["batch_size"]
    # The first output, kept per input: the embedding.
    assert onnx.outputs.shape == (64, 16) and onnx.predictions == [[]] * 64

    torchscript = run_evaluation(model=_extractor("pytorch"), batch_sizes=[8], limit=64)
    assert torchscript.outputs.shape == (64, 16)
    agreement = compare(onnx, torchscript)
    assert agreement["top1_agreement"] is None and agreement["max_abs_diff"] < 1e-4


def test_an_output_whose_first_axis_is_not_the_batch_is_named_and_inputs_are_counted(
    run_evaluation: RunEvaluation,
) -> None:
    data = _extractor_data("onnxruntime")
    data["outputs"] = [{"name": "sequence", "type": "tensor"}]
    data["model"] = {"graph_path": f"repo://{NAMESPACE}/time-first.onnx"}
    timed = run_evaluation(model=manifests.load(yaml.safe_dump(data)), batch_sizes=[16], limit=32)
    result = timed.result
    assert result["dataset"]["count"] == 32
    assert [entry["inputs"] for entry in result["batch_sizes"]] == [32]
    assert (
        "the output 'sequence' is (64, 16, 4) for a batch of 16 inputs: its first axis is not "
        "the batch" in " ".join(result["notes"])
    )
    assert timed.outputs.shape == (32, 0)  # nothing kept to compare, nothing miscounted


def test_an_output_too_large_to_keep_is_timed_and_not_compared(
    run_evaluation: RunEvaluation, monkeypatch: pytest.MonkeyPatch
) -> None:
    from predictors.evaluation.scenarios import latency

    monkeypatch.setattr(latency, "KEPT_VALUES", 8)  # the embedding (16 values) is too large
    onnx = run_evaluation(model=_extractor("onnxruntime"), batch_sizes=[16], limit=32)
    torchscript = run_evaluation(model=_extractor("pytorch"), batch_sizes=[16], limit=32)
    assert onnx.outputs.shape == (32, 0)
    agreement = compare(onnx, torchscript)
    assert agreement["max_abs_diff"] is None and agreement["count"] == 32


def test_every_output_is_computed_in_each_timed_call(run_evaluation: RunEvaluation) -> None:
    import onnxruntime as ort

    asked: list[list[str]] = []
    real = ort.InferenceSession.run

    def recording(self: Any, names: Any, feeds: Any, *rest: Any) -> Any:
        asked.append(list(names or []))
        return real(self, names, feeds, *rest)

    ort.InferenceSession.run = recording  # type: ignore[method-assign]
    try:
        run_evaluation(model=_extractor("onnxruntime"), batch_sizes=[16], limit=32)
    finally:
        ort.InferenceSession.run = real  # type: ignore[method-assign]
    assert asked and all(names == ["embedding", "features"] for names in asked)


def test_a_classifier_is_timed_on_a_dataset_of_other_labels(
    run_evaluation: RunEvaluation,
) -> None:
    # digits-cnn's labels are not shapes-color's: a scored run is refused; timed, it runs.
    timed = run_evaluation(
        model="digits-cnn", framework="onnxruntime", dataset="shapes-color", limit=30
    )
    assert timed.result["accuracy"] is None and timed.result["dataset"]["count"] == 30
    assert timed.outputs.shape == (30, 10)


def test_what_a_latency_only_run_cannot_feed_is_refused_naming_it() -> None:
    data = _extractor_data("onnxruntime")
    assert unsupported(data, latency_only=True) is None
    assert "evaluate it for latency only (latency_only" in str(unsupported(data))
    vad = Catalog().find_model("silero-vad", "*", "onnxruntime").data
    assert "a latency-only evaluation feeds one image, tensor, bytes, text or whole-clip" in str(
        unsupported(vad, latency_only=True)
    )
    with_code = {**data, "postprocess": "def postprocess(outputs):\n    return outputs\n"}
    assert "custom postprocess code" in str(unsupported(with_code, latency_only=True))
    # A tensor output is not read: it takes no parameters.
    data["outputs"][0]["parameters"] = {"top_k": 1}
    with pytest.raises(manifests.ManifestError) as caught:
        manifests.load(yaml.safe_dump(data))
    assert any(e["path"] == "outputs.0.parameters" for e in caught.value.errors)


def test_the_command_line_times_without_scoring(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["evaluate", "digits-cnn", "--framework", "all", "--dataset", "shapes-color"]
    # One intra-op thread, as every evaluation of the session (TensorFlow sizes its pools once).
    common = [
        *("--store", str(store), "--limit", "20", "--threads", "1"),
        *("--latency-only", "--no-progress"),
    ]
    assert main([*argv, *common]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("framework"))
    assert header.split()[3] == "accuracy"
    rows = [line for line in out.splitlines() if line.startswith(("onnxruntime ", "pytorch "))]
    assert rows and all(row.split()[3] == "-" for row in rows[:2])
    assert "latency only: the model was timed, not scored" in out
    assert main([*argv, *common, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert all(result["accuracy"] is None for result in report["results"])
    assert all(np.isfinite(c["max_abs_diff"]) for c in report["comparisons"])
