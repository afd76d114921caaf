"""ONNX graphs whose weights lie beside them (external data): loaded by the ONNX Runtime
predictor from the manifest's `weights_path`, and checked by `graph_check.external_data_problems`
(the hub's upload check).

The agent's cache names the files it fetches after their content, not as the graph names its
weights, so the files are copied here under names of that kind before they are loaded."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
import yaml

from predictors import manifests
from predictors.frameworks.onnxruntime import OnnxRuntimePredictor
from predictors.frameworks.predictor import PredictorError, PredictorOptions
from predictors.manifests.graph_check import Port, external_data_problems

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.database_free,
    # torch 2.13 warns that the TorchScript-based exporter is the legacy one.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

INPUT = np.random.default_rng(0).standard_normal((3, 1, 8, 8)).astype(np.float32)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def _manifest(weights: bool) -> manifests.Manifest:
    model: dict[str, Any] = {"graph_path": "repo://models/tiny/1.0.0/net.onnx"}
    if weights:
        model["weights_path"] = "repo://models/tiny/1.0.0/weights.bin"
    document = {
        "kind": "model",
        "name": "tiny",
        "version": "1.0.0",
        "task": "feature_extraction",
        "framework": {"name": "onnxruntime", "version": ">=1.16"},
        "inputs": [
            {
                "name": "input",
                "type": "tensor",
                "parameters": {"element_type": "float32", "shape": [1, 8, 8]},
            }
        ],
        "outputs": [{"name": "logits", "type": "tensor"}],
        "model": model,
    }
    return manifests.load(yaml.safe_dump(document))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The module, its graph with the weights inside, and the same graph with them beside it
    (`weights.bin`), then copied under cache-like names."""
    folder = tmp_path_factory.mktemp("onnx-external")
    torch.manual_seed(0)
    net = Net().eval()
    inside = folder / "inside.onnx"
    torch.onnx.export(
        net,
        (torch.from_numpy(INPUT),),
        str(inside),
        dynamo=False,
        input_names=["input"],
        output_names=["logits"],
        dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
    )
    beside = folder / "beside"
    beside.mkdir()
    onnx.save_model(
        onnx.load(str(inside)),
        str(beside / "net.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    cache = folder / "cache"
    cache.mkdir()
    shutil.copyfile(beside / "net.onnx", cache / "3e1f-graph")
    shutil.copyfile(beside / "weights.bin", cache / "9c2d-weights")
    with torch.inference_mode():
        expected = net(torch.from_numpy(INPUT)).numpy()
    return {
        "inside": inside,
        "graph": cache / "3e1f-graph",
        "weights": cache / "9c2d-weights",
        "expected": expected,
        "folder": folder,
    }


def _load(manifest: manifests.Manifest, graph: Path, weights: Path | None) -> OnnxRuntimePredictor:
    predictor = OnnxRuntimePredictor()
    predictor.load(manifest, PredictorOptions(graph_file=graph, weights_file=weights, threads=1))
    return predictor


def _refused(manifest: manifests.Manifest, graph: Path, weights: Path | None) -> str:
    with pytest.raises(PredictorError) as refused:
        _load(manifest, graph, weights).close()
    return str(refused.value)


def test_a_graph_with_external_data_under_cache_names_gives_its_module_outputs(
    exported: dict[str, Any],
) -> None:
    predictor = _load(_manifest(weights=True), exported["graph"], exported["weights"])
    try:
        np.testing.assert_allclose(predictor.predict(INPUT), exported["expected"], atol=1e-5)
        signature = predictor.signature()
        assert signature is not None
        assert signature.inputs == (Port("input", "float32", 4, ("N", 1, 8, 8)),)
        assert [(p.name, p.element_type, p.rank) for p in signature.outputs] == [
            ("logits", "float32", 2)
        ]
        layers = predictor.layer_outputs(INPUT)
        assert [layer.name for layer in layers][0] == "conv"
        np.testing.assert_allclose(layers[-1].array, exported["expected"], atol=1e-5)
        staged = predictor._staged
        assert staged is not None and (staged.folder / "weights.bin").exists()
    finally:
        predictor.close()
    assert not staged.folder.exists()
    assert exported["graph"].exists() and exported["weights"].exists()


def test_external_data_the_manifest_does_not_give_is_named(exported: dict[str, Any]) -> None:
    message = _refused(_manifest(weights=False), exported["graph"], None)
    assert message.startswith("onnxruntime cannot load 3e1f-graph: model.weights_path: ONNX ")
    assert "external data: the graph keeps its weights in weights.bin (4 tensors) beside it" in (
        message
    )


def test_a_short_weights_file_is_refused(exported: dict[str, Any], tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_bytes(exported["weights"].read_bytes()[:-8])
    message = _refused(_manifest(weights=True), exported["graph"], short)
    size = exported["weights"].stat().st_size
    assert message == (
        "onnxruntime cannot load 3e1f-graph with its external data short: model.weights_path: "
        f"ONNX external data: short holds {size - 8} bytes, but the graph reads weights.bin up "
        f"to byte {size} (tensor fc.bias): is it truncated, or the weights of another graph?"
    )


def test_weights_given_to_a_graph_that_holds_its_own_are_refused(
    exported: dict[str, Any],
) -> None:
    message = _refused(_manifest(weights=True), exported["inside"], exported["weights"])
    assert "ONNX external data: the graph holds its weights itself" in message
    assert "drop model.weights_path" in message


def _two_files(exported: dict[str, Any], folder: Path) -> Path:
    folder.mkdir()
    onnx.save_model(
        onnx.load(str(exported["inside"])),
        str(folder / "net.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=False,
        size_threshold=0,
    )
    return folder / "net.onnx"


def test_external_data_problems_names_each_mismatch(
    exported: dict[str, Any], tmp_path: Path
) -> None:
    graph, weights, inside = exported["graph"], exported["weights"], exported["inside"]
    assert external_data_problems(graph, weights) == []
    assert external_data_problems(inside, None) == []
    ((field, message),) = external_data_problems(graph, None)
    assert field == "model.weights_path" and message.startswith("ONNX external data: the graph")
    ((field, message),) = external_data_problems(inside, weights)
    assert field == "model.weights_path" and "holds its weights itself" in message
    short = tmp_path / "short"
    short.write_bytes(b"\0" * 10)
    ((field, message),) = external_data_problems(graph, short)
    assert field == "model.weights_path" and "short holds 10 bytes" in message
    several = _two_files(exported, tmp_path / "several")
    ((field, message),) = external_data_problems(several, weights)
    assert field == "model.graph_path"
    assert message.startswith("ONNX external data: the graph's tensors name 4 external-data files")
    assert "all_tensors_to_one_file=True" in message
    message = _refused(_manifest(weights=True), several, weights)
    assert "model.graph_path: ONNX external data: the graph's tensors name 4" in message
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xff" * 64)
    ((field, message),) = external_data_problems(garbage, weights)
    assert field == "model.graph_path" and message.startswith("not a readable ONNX model")
