"""The formats real pretrained models come in, through the hub: a SavedModel archive, a TFLite
file, a state dict with its module's source and an ONNX graph with its weights beside it each
upload (loaded at upload, in a process of its own) and run, giving the same outputs as the same
model in ONNX; a broken file of each kind is refused at upload with a 400 that names the format
and the problem, and nothing of it is kept."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from hub.models import Artifact, Manifest
from predictors import manifests
from predictors.data import DataManager
from predictors.evaluation import EvaluationOptions, evaluate
from tests.hub.factories import (
    dataset_manifest,
    model_manifest,
    onnx_graph,
    parquet_split,
    to_yaml,
    upload,
)

pytestmark = [pytest.mark.django_db, pytest.mark.frameworks]

# The test model of `onnx_graph`: each channel averaged, then scores = means @ WEIGHTS.
WEIGHTS = np.array([[1.0, -1.0]] * 3, np.float32)

MODULE_SOURCE = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scores = torch.nn.Linear(3, 2, bias=False)

    def forward(self, image):
        return self.scores(image.mean(dim=(2, 3)))
"""


def _state_dict(weights: np.ndarray = WEIGHTS) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save({"scores.weight": torch.from_numpy(weights.T.copy())}, buffer)
    return buffer.getvalue()


def _one_thread() -> None:
    """TensorFlow's pools sized as every evaluation of the session sizes them, before this
    process first runs TensorFlow (they are made once per process)."""
    from predictors.frameworks.tensorflow import thread_pools_problem

    assert thread_pools_problem(1) is None


def _saved_model_archive(folder: Path, *, with_graph: bool = True) -> bytes:
    _one_thread()
    import tensorflow as tf

    class Scores(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3, 8, 8], tf.float32, name="image")])
        def serve(self, image: Any) -> dict[str, Any]:
            return {"probabilities": tf.matmul(tf.reduce_mean(image, axis=[2, 3]), WEIGHTS)}

    module = Scores()
    saved = folder / "scores"
    tf.saved_model.save(module, str(saved), signatures={"serving_default": module.serve})
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(saved.rglob("*")):
            if with_graph or path.name != "saved_model.pb":
                archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def _tflite(folder: Path) -> bytes:
    import tensorflow as tf

    _saved_model_archive(folder)  # writes folder/scores
    converter = tf.lite.TFLiteConverter.from_saved_model(str(folder / "scores"))
    return bytes(converter.convert())


def _external_onnx(folder: Path) -> tuple[bytes, bytes]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(onnx_graph())
    # As raw data, which is what goes beside the graph.
    tensors = [
        numpy_helper.from_array(numpy_helper.to_array(t), t.name) for t in model.graph.initializer
    ]
    del model.graph.initializer[:]
    model.graph.initializer.extend(tensors)
    onnx.save_model(
        model,
        str(folder / "scores.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="scores.weights",
        size_threshold=0,
    )
    return (folder / "scores.onnx").read_bytes(), (folder / "scores.weights").read_bytes()


def _manifest(name: str, framework: str, files: dict[str, Any]) -> dict[str, Any]:
    ranges = {"tensorflow": ">=2.0.0 <3.0.0", "pytorch": ">=2.0.0 <3.0.0"}
    data = model_manifest(name=name, framework=framework, graph_file="x")
    if framework in ranges:
        data["framework"]["version"] = ranges[framework]
    data["model"] = {
        key: f"repo://models/{name}/1.0.0/{value}" if key.endswith("_path") else value
        for key, value in files.items()
    }
    return data


# name: (framework, the manifest's `model`, the files uploaded) for a good file of each format.
Case = Callable[[Path], tuple[str, dict[str, Any], dict[str, bytes]]]
GOOD: dict[str, Case] = {
    "saved-model": lambda tmp: (
        "tensorflow",
        {"graph_path": "scores.tar.gz", "format": "saved_model"},
        {"scores.tar.gz": _saved_model_archive(tmp)},
    ),
    "tflite": lambda tmp: (
        "tensorflow",
        {"graph_path": "scores.tflite", "format": "tflite"},
        {"scores.tflite": _tflite(tmp)},
    ),
    "state-dict": lambda tmp: (
        "pytorch",
        {
            "graph_path": "net.py",
            "weights_path": "net.pt",
            "format": "state_dict",
            "entry": "Net",
        },
        {"net.py": MODULE_SOURCE.encode(), "net.pt": _state_dict()},
    ),
    "external-onnx": lambda tmp: (
        "onnxruntime",
        {"graph_path": "scores.onnx", "weights_path": "scores.weights"},
        dict(zip(("scores.onnx", "scores.weights"), _external_onnx(tmp), strict=True)),
    ),
}


@pytest.fixture
def alice(make_user, make_client):  # type: ignore[no-untyped-def]
    return make_client(make_user("alice"))


def _outputs(store: Path, model: dict[str, Any], **options: Any) -> np.ndarray:
    """The model's scores on the uploaded dataset, through the evaluation loop, from the
    files the hub stored."""
    dataset = manifests.load(to_yaml(dataset_manifest(name="pair", split_file="pair.parquet")))
    evaluation = evaluate(
        manifests.load(yaml.safe_dump(model)),
        dataset,
        EvaluationOptions(batch_sizes=(1, 2), threads=1, repeat=1, **options),
        DataManager(store_dir=store).fetch,
    )
    return np.asarray(evaluation.outputs)


@pytest.mark.parametrize("case", sorted(GOOD))
def test_each_format_uploads_and_runs_as_its_onnx_twin(  # type: ignore[no-untyped-def]
    alice, artifact_root, tmp_path, case
) -> None:
    response = upload(
        alice,
        to_yaml(dataset_manifest(name="pair", split_file="pair.parquet")),
        {"pair.parquet": parquet_split()},
        url="/api/v1/datasets/",
    )
    assert response.status_code == 201, response.content
    reference = model_manifest(name="reference", graph_file="reference.onnx")
    response = upload(alice, to_yaml(reference), {"reference.onnx": onnx_graph()})
    assert response.status_code == 201, response.content

    framework, files, uploads = GOOD[case](tmp_path)
    data = _manifest(case, framework, files)
    response = upload(alice, to_yaml(data), uploads)

    assert response.status_code == 201, response.content
    stored = Manifest.objects.get(name=case)
    assert sorted(a.path.rsplit("/", 1)[1] for a in stored.artifacts.all()) == sorted(uploads)
    # The module source of a state dict is the manifest's own code: it runs where custom code
    # runs (here, in-process, as a container's loop runs it).
    code = {"custom_code": True} if case == "state-dict" else {}
    ours = _outputs(artifact_root, data, **code)
    theirs = _outputs(artifact_root, reference)
    assert ours.shape == theirs.shape == (2, 2)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


# name: (framework, the manifest's `model`, the files, the field refused, words of its message)
BROKEN: dict[str, Callable[[Path], tuple[str, dict[str, Any], dict[str, bytes], str, str]]] = {
    "saved-model": lambda tmp: (
        "tensorflow",
        {"graph_path": "scores.tar.gz", "format": "saved_model"},
        {"scores.tar.gz": _saved_model_archive(tmp, with_graph=False)},
        "model.graph_path",
        "saved_model.pb",
    ),
    "tflite": lambda tmp: (
        "tensorflow",
        {"graph_path": "scores.tflite", "format": "tflite"},
        {"scores.tflite": _tflite(tmp)[:-600]},
        "model.graph_path",
        "TFLite",
    ),
    "state-dict": lambda tmp: (
        "pytorch",
        {
            "graph_path": "net.py",
            "weights_path": "net.pt",
            "format": "state_dict",
            "entry": "Net",
        },
        {"net.py": MODULE_SOURCE.encode(), "net.pt": b"PK\x03\x04 not a state dict"},
        "model.weights_path",
        "state dict",
    ),
    "external-onnx": lambda tmp: (
        "onnxruntime",
        {"graph_path": "scores.onnx", "weights_path": "scores.weights"},
        {
            "scores.onnx": _external_onnx(tmp)[0],
            "scores.weights": _external_onnx(tmp)[1][:10],
        },
        "model.weights_path",
        "external data",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_file_of_each_format_is_refused_naming_the_format_and_nothing_is_kept(  # type: ignore[no-untyped-def]
    alice, artifact_root, tmp_path, case
) -> None:
    framework, files, uploads, field, words = BROKEN[case](tmp_path)

    response = upload(alice, to_yaml(_manifest(case, framework, files)), uploads)

    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert [error["path"] for error in errors] == [field], errors
    assert words in errors[0]["message"], errors
    assert not Manifest.objects.filter(name=case).exists()
    assert Artifact.objects.count() == 0
    assert not [path for path in artifact_root.rglob("*") if path.is_file()]


def test_a_saved_model_is_read_at_upload_and_a_signature_it_lacks_named(  # type: ignore[no-untyped-def]
    alice, artifact_root, tmp_path
) -> None:
    """The hub reads a SavedModel's signatures from its saved_model.pb, without loading it
    (loading runs its graph's initializers)."""
    files = {"graph_path": "scores.tar.gz", "format": "saved_model", "signature": "predict"}
    data = _manifest("named", "tensorflow", files)

    response = upload(alice, to_yaml(data), {"scores.tar.gz": _saved_model_archive(tmp_path)})

    assert response.status_code == 400, response.content
    (error,) = response.json()["errors"]
    assert error["path"] == "model.signature"
    assert "no signature 'predict'; its signatures: serving_default" in error["message"]
    assert Artifact.objects.count() == 0
