"""Several inputs from the dataset, each from a column of its own
(`predictors.processing.columns`): an image and a tensor read from each row, preprocessed each
by its own input, packed into one batch and fed each to its own input of the model, through the
real loop on a real ONNX graph and its TorchScript twin made here; and the rules of such
manifests.

The known answer: the model scores class 0 by the image's mean gray level and class 1 by the
tensor's first value, so each row's predicted class is known from its two columns; the labels
of two rows of eight say otherwise, so the accuracy is 6 / 8 exactly."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from predictors import manifests
from predictors.data import DatasetError
from predictors.evaluation import compare
from predictors.processing import ProcessingError
from predictors.processing.columns import ColumnsPreprocessor
from predictors.processing.tensor import TensorPreprocessor
from predictors.tasks import (
    dataset_problem,
    latency_only_problem,
    loadgen_problem,
    trace_level_problem,
    unsupported,
)
from tests.predictors.conftest import RunEvaluation

pytestmark = pytest.mark.database_free

FOLDER = "models/two-columns/1.0.0"
# Each row: the image's gray level (0..255), the tensor's first value, and the label.
ROWS = [
    (51, 0.5, 1),  # image 0.2 < 0.5: class 1
    (204, 0.5, 0),  # image 0.8 > 0.5: class 0
    (102, 0.1, 0),
    (153, 0.9, 1),
    (25, 0.3, 1),
    (230, 0.95, 1),
    (128, 0.2, 1),  # class 0 by its columns: labelled 1, wrong
    (77, 0.6, 0),  # class 1 by its columns: labelled 0, wrong
]
EXPECTED = [1, 0, 0, 1, 1, 1, 0, 1]


def _png(level: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 4), level, np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def _npy(value: float) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array([value, -1.0], np.float32))
    return buffer.getvalue()


def _onnx(path: Path) -> None:
    """logits = [mean(image), extra[:, 0]]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["image"], ["level"], axes=[1, 2, 3], keepdims=0),
            helper.make_node("Unsqueeze", ["level", "one"], ["column0"]),
            helper.make_node("Slice", ["extra", "zero", "one", "one"], ["column1"]),
            helper.make_node("Concat", ["column0", "column1"], ["logits"], axis=1),
        ],
        "two-columns",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, [None, 1, 4, 4]),
            helper.make_tensor_value_info("extra", TensorProto.FLOAT, [None, 2]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 2])],
        initializer=[
            numpy_helper.from_array(np.array([0], np.int64), "zero"),
            numpy_helper.from_array(np.array([1], np.int64), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)


def _torchscript(path: Path) -> None:
    import torch

    class TwoColumns(torch.nn.Module):
        def forward(self, image: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
            return torch.stack([image.mean(dim=(1, 2, 3)), extra[:, 0]], dim=1)

    torch.jit.script(TwoColumns()).save(str(path))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("columns-store")
    folder = root / FOLDER
    folder.mkdir(parents=True)
    _onnx(folder / "two-columns.onnx")
    _torchscript(folder / "two-columns.pt")
    data = root / "datasets/gray-and-values/1.0.0"
    data.mkdir(parents=True)
    table = pa.table(
        {
            "image": [_png(level) for level, _, _ in ROWS],
            "extra": [_npy(value) for _, value, _ in ROWS],
            "label": pa.array([label for _, _, label in ROWS], pa.int64()),
        }
    )
    pq.write_table(table, data / "validation.parquet")
    return root


def _model_data(framework: str = "onnxruntime", **changes: Any) -> dict[str, Any]:
    graph, version = (
        ("two-columns.onnx", ">=1.16.0 <2.0.0")
        if framework == "onnxruntime"
        else ("two-columns.pt", ">=2.0.0 <3.0.0")
    )
    data = {
        "kind": "model",
        "name": "two-columns",
        "version": "1.0.0",
        "description": "Class 0 by an image's gray level, class 1 by a tensor's first value.",
        "license": "MIT",
        "task": "image_classification",
        "framework": {"name": framework, "version": version},
        "inputs": [
            {
                "name": "image",
                "type": "image",
                "column": "image",
                "parameters": {
                    "decoder": "pillow",
                    "jpeg_dct_method": "islow",
                    "color_mode": "GRAY",
                    "layout": "NCHW",
                    "resize_method": "bilinear",
                    "resize_size": [4, 4],
                    "keep_aspect_ratio": False,
                    "crop_method": "none",
                    "crop_size": None,
                    "element_type": "float32",
                    "normalization_order": "convert_then_normalize",
                    "scale": 255.0,
                    "mean": [0.0],
                    "std": [1.0],
                },
            },
            {
                "name": "extra",
                "type": "tensor",
                "column": "extra",
                "parameters": {"element_type": "float32", "shape": [2]},
            },
        ],
        "outputs": [
            {
                "name": "logits",
                "type": "probabilities",
                "parameters": {"top_k": 1, "labels": ["image", "extra"]},
            }
        ],
        "model": {"graph_path": f"repo://{FOLDER}/{graph}"},
        "attributes": {"trained": True},
    }
    return {**data, **changes}


def _model(framework: str = "onnxruntime", **changes: Any) -> manifests.Manifest:
    return manifests.load(yaml.safe_dump(_model_data(framework, **changes)))


def _dataset() -> manifests.Manifest:
    data = {
        "kind": "dataset",
        "name": "gray-and-values",
        "version": "1.0.0",
        "description": "Gray images, each with a tensor beside it.",
        "license": "MIT",
        "task": "image_classification",
        "format": "parquet",
        "encoding": "png",
        "labels": ["image", "extra"],
        "splits": {
            "validation": {
                "path": "repo://datasets/gray-and-values/1.0.0/validation.parquet",
                "count": len(ROWS),
            }
        },
    }
    return manifests.load(yaml.safe_dump(data))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"threads": 1, "repeat": 1, "warmup": 1}


@pytest.mark.frameworks
def test_each_input_reads_its_own_column_and_the_accuracy_is_known(
    run_evaluation: RunEvaluation,
) -> None:
    onnx = run_evaluation(
        model=_model(), framework="onnxruntime", dataset=_dataset(), batch_sizes=[1, 3]
    )
    assert [row[0][0] for row in onnx.predictions] == EXPECTED
    levels = np.array([level / 255 for level, _, _ in ROWS], np.float32)
    values = np.array([value for _, value, _ in ROWS], np.float32)
    np.testing.assert_allclose(onnx.outputs, np.stack([levels, values], axis=1), atol=1e-6)
    assert onnx.result["accuracy"]["top1"] == 6 / 8
    by_size = {entry["batch_size"]: entry["accuracy"] for entry in onnx.result["batch_sizes"]}
    assert by_size[1] == by_size[3]

    torch = run_evaluation(
        model=_model("pytorch"), framework="pytorch", dataset=_dataset(), batch_sizes=[4]
    )
    agreement = compare(onnx, torch)
    assert agreement["top1_agreement"] == 1.0 and agreement["max_abs_diff"] < 1e-6

    # Several inputs of their own types: FLOPs are not counted, and the result says why.
    theoretical = onnx.result["theoretical"]
    assert theoretical["counted"] is False
    assert "several inputs from the dataset's columns (image, extra)" in theoretical["reason"]

    # Timed only: the same columns, no labels read.
    timed = run_evaluation(
        model=_model(), framework="onnxruntime", dataset=_dataset(), latency_only=True
    )
    assert timed.result["accuracy"] is None and timed.outputs.shape == (8, 2)


@pytest.mark.frameworks
def test_a_column_the_split_lacks_is_named(run_evaluation: RunEvaluation, store: Path) -> None:
    data = _model_data()
    data["inputs"][1]["column"] = "values"
    with pytest.raises(DatasetError, match=r"needs the columns 'image' and 'values' and 'label'"):
        run_evaluation(
            model=manifests.load(yaml.safe_dump(data)),
            framework="onnxruntime",
            dataset=_dataset(),
        )


def test_the_packed_batch_is_each_inputs_rows_side_by_side() -> None:
    first = TensorPreprocessor({"element_type": "float32", "shape": [2]})
    second = TensorPreprocessor({"element_type": "int64", "shape": [3]})
    packer = ColumnsPreprocessor(["a", "b"], [first, second])
    rows = [
        ([1.5, -2.0], [1, 2, 3]),
        ([0.25, 8.0], [4, 5, 6]),
    ]
    batch = packer.batch(rows)
    assert batch.dtype == np.uint8 and batch.shape == (2, 2 * 4 + 3 * 8)
    assert packer.is_packed(batch) and not packer.is_packed(batch[:, 1:])
    feeds = packer.unpack(batch)
    assert feeds["a"].dtype == np.float32 and feeds["a"].tolist() == [[1.5, -2.0], [0.25, 8.0]]
    assert feeds["b"].dtype == np.int64 and feeds["b"].tolist() == [[1, 2, 3], [4, 5, 6]]
    # An input whose shape the manifest leaves open: its rows keep the first batch's shape.
    any_shape = ColumnsPreprocessor(
        ["a", "b"], [first, TensorPreprocessor({"element_type": "int64"})]
    )
    any_shape.batch([([1.0, 2.0], [1, 2, 3])])
    with pytest.raises(ProcessingError, match=r"input b gives rows of int64 \(4,\) here, "):
        any_shape.batch([([1.0, 2.0], [1, 2, 3, 4])])
    with pytest.raises(ProcessingError, match="input a: "):
        packer.batch([([1.0], [1, 2, 3])])
    with pytest.raises(ProcessingError, match="one value per column"):
        packer.batch([[1.0, 2.0]])


def test_the_rules_of_inputs_from_several_columns() -> None:
    data = _model_data()
    assert unsupported(data) is None
    assert latency_only_problem(data) is None
    # The dataset's encoding is its input column's: a column of the model's own is not it.
    assert dataset_problem(data, {**_dataset().data, "encoding": "text"}) is None
    assert "LoadGen scenarios drive samples of one input" in str(loadgen_problem(data, "offline"))
    torch = _model_data("pytorch")
    assert "takes several inputs from the dataset's columns (image, extra)" in str(
        trace_level_problem(torch, "framework")
    )
    assert trace_level_problem(data, "framework") is None  # ONNX Runtime traces them

    def inputs(*changes: dict[str, Any]) -> dict[str, Any]:
        return {
            **data,
            "inputs": [
                {**entry, **change} for entry, change in zip(data["inputs"], changes, strict=True)
            ],
        }

    unnamed = inputs({}, {"column": None})
    unnamed["inputs"][1].pop("column")
    assert "each names the dataset column it reads (column), and extra names none" in str(
        unsupported(unnamed)
    )
    assert "read the column 'image' more than once" in str(
        unsupported(inputs({}, {"column": "image"}))
    )
    assert "reads the column 'label', which holds what each row is scored against" in str(
        unsupported(inputs({}, {"column": "label"}))
    )
    detector = {**data, "task": "object_detection"}
    assert "the evaluation loop feeds one to an object_detection model (several, each" in str(
        unsupported(detector)
    )
    one = {**detector, "inputs": data["inputs"][:1]}
    assert "inputs read columns of their own in image_classification" in str(unsupported(one))
    assert "custom preprocess code does not run" in str(
        unsupported({**data, "preprocess": "x = 1"})
    )
    # A column on an input that reads none, or the audio column, is refused, timed or scored.
    for kind, words in (
        ("constant", "is constant, which reads no column"),
        ("audio", "is audio, which reads the dataset's audio column"),
    ):
        odd = {**data, "inputs": [*data["inputs"], {"name": "c", "type": kind, "column": "c"}]}
        assert words in str(unsupported(odd)), kind
        assert words in str(latency_only_problem(odd)), kind
    one = {**data, "inputs": [{**data["inputs"][0], "column": "label"}]}
    assert "reads the column 'label', which holds what each row" in str(latency_only_problem(one))

    bad = inputs({"column": "../image"}, {})
    with pytest.raises(manifests.ManifestError) as raised:
        manifests.load(yaml.safe_dump(bad))
    assert [e["path"] for e in raised.value.errors] == ["inputs.0.column"]


def test_two_texts_of_two_lengths_are_checked_each_against_its_own(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from predictors.manifests.graph_check import onnx_problems

    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["question"], ["q"], keepdims=1),
            helper.make_node("ReduceSum", ["passage"], ["p"], keepdims=1),
            helper.make_node("Concat", ["q", "p"], ["both"], axis=1),
            helper.make_node("Cast", ["both"], ["logits"], to=TensorProto.FLOAT),
        ],
        "two-texts",
        [
            helper.make_tensor_value_info("question", TensorProto.INT64, [None, 32]),
            helper.make_tensor_value_info("passage", TensorProto.INT64, [None, 128]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, tmp_path / "two-texts.onnx")

    def text(name: str, length: int) -> dict[str, Any]:
        parameters = {"tokenizer_path": "repo://t/tokenizer.json", "max_length": length}
        return {"name": name, "type": "text", "column": name, "parameters": parameters}

    data = {**_model_data(), "inputs": [text("question", 32), text("passage", 128)]}
    assert unsupported(data) is None
    assert onnx_problems(data, tmp_path / "two-texts.onnx") == []
    data["inputs"][1] = text("passage", 64)
    assert onnx_problems(data, tmp_path / "two-texts.onnx") == [
        (
            "inputs.1.parameters.max_length",
            "the text input's max_length is 64, but the graph's input 'passage' takes rows of 128",
        )
    ]
