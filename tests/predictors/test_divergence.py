"""Every layer's output in each framework (`Predictor.layer_outputs`) and where two runs of one
model part (`predictors.analysis.divergence`), on the test zoo's real models: ONNX copies with
one layer changed by construction (its weights scaled, or computed in float16) must be found
at exactly that layer; the same model in PyTorch and ONNX Runtime must agree at every layer;
inputs preprocessed differently must be found at the input.

One intra-op thread throughout: TensorFlow sizes its thread pools once per process, and the
tests of one session must agree on the number.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors.analysis.divergence import (
    DEFAULT_TOLERANCE,
    NO_DIVERGENCE,
    Capture,
    diverge,
)
from predictors.data import DataManager
from predictors.data.readers import rows_at
from predictors.frameworks.layer_outputs import LayerOutput, exporter_scope, numbered
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
    PredictorOptions,
    predictor_class,
    register,
    unregister,
)
from predictors.manifests import Manifest
from predictors.manifests.catalog import Catalog
from predictors.processing import ImagePreprocessor
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]

THREADS = 1
CATALOG = Catalog()
INDICES = [0, 1, 2, 3]
RESNET_INPUT = (2, 3, 224, 224)


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn", "shapes-color", "resnet-18"))


def manifest(model: str, framework: str) -> Manifest:
    return CATALOG.find_model(model, "*", framework)


def graph_file(store: Path, model: str, framework: str) -> Path:
    path: Path = DataManager(store_dir=store).fetch(
        manifest(model, framework).data["model"]["graph_path"]
    )
    return path


def preprocessed(
    store: Path, model: str, framework: str, dataset: str, **parameters: Any
) -> np.ndarray:
    """The validation images `INDICES` of `dataset`, preprocessed as the model's manifest for
    `framework` says (with `parameters` overriding its input parameters)."""
    spec = manifest(model, framework).data["inputs"][0]["parameters"]
    preprocess = ImagePreprocessor({**spec, **parameters})
    images = rows_at(store / "datasets" / dataset / "1.0.0" / "validation.parquet", INDICES)
    return np.stack([preprocess(image) for image in images])


def capture(
    store: Path,
    model: str,
    framework: str,
    batch: np.ndarray,
    graph: Path | None = None,
    **options: Any,
) -> Capture:
    """`batch` run through `model` in `framework` (from `graph` where given), every layer."""
    predictor = predictor_class(framework)()
    file = graph or graph_file(store, model, framework)
    predictor.load(
        manifest(model, framework),
        PredictorOptions(graph_file=file, threads=THREADS, seed=0, **options),
    )
    try:
        return Capture(framework, batch, predictor.layer_outputs(batch), list(INDICES))
    finally:
        predictor.close()


def onnx_copy(store: Path, model: str, tmp_path: Path, change: Callable[[Any], None]) -> Path:
    """A copy of the model's ONNX file, changed by `change(model_proto)`."""
    import onnx

    proto = onnx.load(str(graph_file(store, model, "onnxruntime")))
    change(proto)
    onnx.checker.check_model(proto)
    path = tmp_path / f"{model}-changed.onnx"
    onnx.save(proto, str(path))
    return path


def scale_weights(node_name: str, factor: float) -> Callable[[Any], None]:
    """Multiply the weights (second input) of node `node_name` by `factor`."""
    from onnx import numpy_helper

    def change(proto: Any) -> None:
        graph = proto.graph
        node = next(n for n in graph.node if n.name == node_name)
        weight = node.input[1]
        assert sum(weight in n.input for n in graph.node) == 1, "a shared weight"
        tensor = next(t for t in graph.initializer if t.name == weight)
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * factor, weight))

    return change


def in_float16(node_name: str) -> Callable[[Any], None]:
    """Compute node `node_name` in float16: its input cast to float16 (node `to_half`), its
    weights and bias stored in float16, its output cast back to float32 (node `to_float`)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def change(proto: Any) -> None:
        graph = proto.graph
        node = next(n for n in graph.node if n.name == node_name)
        initializers = {t.name: t for t in graph.initializer}
        source, *parameters = node.input
        for name in parameters:
            half = numpy_helper.to_array(initializers[name]).astype(np.float16)
            graph.initializer.remove(initializers[name])
            graph.initializer.append(numpy_helper.from_array(half, f"{name}.half"))
        output = node.output[0]
        to_half = helper.make_node(
            "Cast", [source], [f"{source}.half"], name="to_half", to=TensorProto.FLOAT16
        )
        to_float = helper.make_node(
            "Cast", [f"{output}.half"], [output], name="to_float", to=TensorProto.FLOAT
        )
        node.input[:] = [f"{source}.half", *(f"{name}.half" for name in parameters)]
        node.output[0] = f"{output}.half"
        nodes = list(graph.node)
        at = nodes.index(node)
        nodes[at : at + 1] = [to_half, node, to_float]
        del graph.node[:]
        graph.node.extend(nodes)
        onnx.checker.check_model(proto)

    return change


@pytest.fixture(scope="module")
def digits(store: Path) -> np.ndarray:
    return preprocessed(store, "digits-cnn", "onnxruntime", "digits")


@pytest.fixture(scope="module")
def digits_onnx(store: Path, digits: np.ndarray) -> Capture:
    return capture(store, "digits-cnn", "onnxruntime", digits)


@pytest.fixture(scope="module")
def resnet_input() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(RESNET_INPUT).astype(np.float32)


@pytest.fixture(scope="module")
def resnet_onnx(store: Path, resnet_input: np.ndarray) -> Capture:
    return capture(store, "resnet-18", "onnxruntime", resnet_input)


def diverging(report: dict[str, Any]) -> list[str]:
    return [row["a"]["name"] for row in report["layers"] if row["diverges"]]


# -- capturing ---------------------------------------------------------------------------------


def test_pytorch_captures_every_module_leaves_and_containers_with_paths(
    store: Path, resnet_input: np.ndarray
) -> None:
    predictor = predictor_class("pytorch")()
    predictor.load(
        manifest("resnet-18", "pytorch"),
        PredictorOptions(graph_file=graph_file(store, "resnet-18", "pytorch"), threads=THREADS),
    )
    try:
        before = predictor.predict(resnet_input)
        layers = predictor.layer_outputs(resnet_input)
        after = predictor.predict(resnet_input)
        timed_graphs = "".join(str(module.graph) for module in predictor._model.modules())  # type: ignore[attr-defined]
    finally:
        predictor.close()
    names = [layer.name for layer in layers]
    # The order ResNet-18's forward computes them; a block after its own modules, its second
    # ReLU call numbered; the model's output last.
    assert names[:12] == [
        "conv1",
        "bn1",
        "relu",
        "maxpool",
        "layer1.0.conv1",
        "layer1.0.bn1",
        "layer1.0.relu",
        "layer1.0.conv2",
        "layer1.0.bn2",
        "layer1.0.relu#2",
        "layer1.0",
        "layer1.1.conv1",
    ]
    assert names[-3:] == ["avgpool", "fc", "(model)"]
    assert "layer2.0.downsample.0" in names and "layer4" in names
    assert len(names) == len(set(names))
    types = {layer.name: layer.op_type for layer in layers}
    assert types["conv1"] == "Conv2d" and types["layer1.0"] == "BasicBlock"
    assert types["layer1"] == "Sequential" and types["(model)"] == "ResNet"
    # A block's output is the one after its last ReLU; the model's is fc's and predict's.
    outputs = {layer.name: layer.array for layer in layers}
    np.testing.assert_array_equal(outputs["layer1.0"], outputs["layer1.0.relu#2"])
    np.testing.assert_array_equal(outputs["(model)"], before)
    assert outputs["conv1"].shape == (2, 64, 112, 112)
    # The timed module is left as it was.
    np.testing.assert_array_equal(before, after)
    assert "mlms_capture" not in timed_graphs


def test_a_scripted_module_gives_the_module_paths_of_a_traced_one(
    store: Path, tmp_path: Path
) -> None:
    """`torch.jit.script` compiles a Sequential's loop into a call per child, a module called
    twice into one graph shared by its calls: the paths are those of the traced zoo file."""
    import torch

    from predictors.zoo.architectures import resnet18

    scripted = tmp_path / "resnet-18-scripted.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated upstream; scripted on purpose
        torch.jit.script(resnet18().eval()).save(str(scripted))
    batch = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32)
    traced_run = capture(store, "resnet-18", "pytorch", batch)
    scripted_run = capture(store, "resnet-18", "pytorch", batch, scripted)
    assert [x.name for x in scripted_run.layers] == [x.name for x in traced_run.layers]
    assert [x.op_type for x in scripted_run.layers] == [x.op_type for x in traced_run.layers]
    assert [x.array.shape for x in scripted_run.layers] == [
        x.array.shape for x in traced_run.layers
    ]


def test_onnxruntime_names_each_node_by_its_module_path(resnet_onnx: Capture) -> None:
    layers = {layer.name: layer for layer in resnet_onnx.layers}
    # Constant nodes (the exporter's weight Identities) are no layers.
    assert not any(layer.op_type == "Identity" for layer in resnet_onnx.layers)
    assert layers["conv1"].node == "/conv1/Conv" and layers["conv1"].op_type == "Conv"
    assert layers["layer1.0.conv1"].node == "/layer1/layer1.0/conv1/Conv"
    assert layers["layer2.0.downsample.0"].op_type == "Conv"
    assert layers["layer1.0.relu_1"].node == "/layer1/layer1.0/relu_1/Relu"
    assert layers["layer1.0"].op_type == "Add"  # the block's own node: its residual add
    assert layers["(model)"].node == "/Flatten"
    assert resnet_onnx.layers[-1].name == "fc" and resnet_onnx.layers[-1].array.shape[0] == 2


def test_exporter_scopes_and_numbering() -> None:
    assert exporter_scope("/layer1/layer1.0/conv1/Conv") == ("layer1", "0", "conv1")
    assert exporter_scope("/layer2/layer2.0/downsample/downsample.0/Conv") == (
        "layer2",
        "0",
        "downsample",
        "0",
    )
    assert exporter_scope("/Flatten") == ()
    assert exporter_scope("Identity_3") is None
    assert numbered(["a", "b", "a", "a"]) == ["a", "b", "a#2", "a#3"]


def test_tensorflow_captures_every_keras_layer(store: Path) -> None:
    batch = preprocessed(store, "digits-cnn", "tensorflow", "digits")
    keras_run = capture(store, "digits-cnn", "tensorflow", batch)
    assert [layer.name for layer in keras_run.layers][:3] == ["pad0", "conv0", "relu1"]
    assert keras_run.layers[1].op_type == "Conv2D"
    assert keras_run.layers[-1].array.shape == (len(INDICES), 10)


@pytest.mark.parametrize(
    ("framework", "model"),
    [("pytorch", "digits-cnn"), ("onnxruntime", "digits-cnn"), ("tensorflow", "digits-cnn")],
)
def test_a_capture_over_its_bound_is_refused_naming_the_sizes(
    store: Path, framework: str, model: str
) -> None:
    layout = manifest(model, framework).data["inputs"][0]["parameters"]["layout"]
    batch = np.zeros((2, 1, 8, 8) if layout == "NCHW" else (2, 8, 8, 1), dtype=np.float32)
    predictor = predictor_class(framework)()
    predictor.load(
        manifest(model, framework),
        PredictorOptions(graph_file=graph_file(store, model, framework), threads=THREADS),
    )
    try:
        with pytest.raises(PredictorError, match=r"over the bound of 1000 bytes \(max_bytes\)"):
            predictor.layer_outputs(batch, max_bytes=1000)
        assert predictor.layer_outputs(batch)  # within the default bound
    finally:
        predictor.close()


def test_a_predictor_that_cannot_capture_says_so() -> None:
    @register("no-capture")
    class NoCapture(Predictor):
        @classmethod
        def check_device(cls, device: str) -> None:
            pass

        @classmethod
        def software(cls) -> dict[str, Any]:
            return {"version": "0"}

        def load(self, manifest: Manifest, options: PredictorOptions) -> None:
            pass

        def predict(self, batch: np.ndarray) -> np.ndarray:
            return batch

        def close(self) -> None:
            pass

    try:
        with pytest.raises(PredictorError, match="the no-capture predictor does not capture"):
            NoCapture().layer_outputs(np.zeros((1, 1)))
    finally:
        unregister("no-capture")


# -- first divergence, by construction -----------------------------------------------------------


def test_an_unchanged_copy_does_not_diverge_and_its_errors_are_zero(
    store: Path, digits: np.ndarray, digits_onnx: Capture, tmp_path: Path
) -> None:
    copy = capture(
        store,
        "digits-cnn",
        "onnxruntime",
        digits,
        onnx_copy(store, "digits-cnn", tmp_path, lambda proto: None),
    )
    report = diverge(digits_onnx, copy)
    assert report["first_divergence"] is None and report["verdict"] == NO_DIVERGENCE
    assert report["matched_by"] == "name"
    assert report["counts"]["matched"] == len(digits_onnx.layers) == 9
    assert report["unmatched"] == {"a": [], "b": []}
    assert all(row["max_abs_error"] == 0 and row["relative_error"] == 0 for row in report["layers"])
    assert all(row["cosine"] == 1 for row in report["layers"])
    assert report["input"]["relative_error"] == 0 and not report["input"]["differs"]
    json.dumps(report, allow_nan=False)


@pytest.mark.parametrize(
    ("model", "node", "layer"),
    [
        ("digits-cnn", "/2/Conv", "2"),
        ("resnet-18", "/layer2/layer2.0/conv2/Conv", "layer2.0.conv2"),
    ],
)
def test_one_layers_weights_scaled_is_the_first_divergence(
    store: Path,
    digits: np.ndarray,
    resnet_input: np.ndarray,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    model: str,
    node: str,
    layer: str,
) -> None:
    batch = digits if model == "digits-cnn" else resnet_input
    reference = request.getfixturevalue("digits_onnx" if model == "digits-cnn" else "resnet_onnx")
    changed = onnx_copy(store, model, tmp_path, scale_weights(node, 1.01))
    report = diverge(reference, capture(store, model, "onnxruntime", batch, changed))
    first = report["first_divergence"]
    assert first is not None and first["at"] == "layer"
    assert first["name"] == layer and first["op_type"] == "Conv"
    assert report["verdict"] == f"first divergence at {layer} (Conv)"
    # Every layer before it is exactly the same; the error it passes on is not blamed again.
    rows = report["layers"]
    assert all(row["relative_error"] == 0 for row in rows[: first["row"]])
    assert first["input_error"] == 0
    assert 1e-3 < first["relative_error"] <= 0.0101
    assert diverging(report) == [layer]
    assert rows[-1]["relative_error"] > 0


def test_a_layer_computed_in_float16_is_the_first_divergence(
    store: Path, digits: np.ndarray, digits_onnx: Capture, tmp_path: Path
) -> None:
    changed = onnx_copy(store, "digits-cnn", tmp_path, in_float16("/2/Conv"))
    half = capture(store, "digits-cnn", "onnxruntime", digits, changed)
    report = diverge(digits_onnx, half)
    first = report["first_divergence"]
    assert first is not None and first["name"] == "2" and first["op_type"] == "Conv"
    assert first["dtypes"] == {"a": "float32", "b": "float16"}
    assert DEFAULT_TOLERANCE < first["relative_error"] < 1e-2
    assert (first["input_error"], first["input_error_from"]) == (0, "1")
    assert report["unmatched"] == {"a": [], "b": ["to_half", "to_float"]}
    assert diverging(report) == ["2"]


@pytest.mark.parametrize("model", ["digits-cnn", "resnet-18"])
def test_pytorch_and_onnxruntime_agree_at_every_layer(
    store: Path,
    digits: np.ndarray,
    resnet_input: np.ndarray,
    request: pytest.FixtureRequest,
    model: str,
) -> None:
    batch = digits if model == "digits-cnn" else resnet_input
    onnx_run = request.getfixturevalue("digits_onnx" if model == "digits-cnn" else "resnet_onnx")
    torch_run = capture(store, model, "pytorch", batch)
    for a, b in ((torch_run, onnx_run), (onnx_run, torch_run)):
        report = diverge(a, b)
        assert report["first_divergence"] is None, report["first_divergence"]
        assert report["verdict"] == NO_DIVERGENCE
        assert report["matched_by"] == "module path"
        assert max(row["relative_error"] for row in report["layers"]) < DEFAULT_TOLERANCE / 10
        assert min(row["cosine"] for row in report["layers"]) > 0.99999
    report = diverge(torch_run, onnx_run)
    # Every PyTorch module is compared or folded into a node; most nodes are compared (those
    # left are the nodes of no module of their own: a block's residual add, a flatten).
    assert report["unmatched"]["a"] == []
    onnx_unmatched = report["unmatched"]["b"]
    assert len(onnx_unmatched) <= len(onnx_run.layers) // 5
    assert all(
        layer.op_type in ("Add", "Flatten")
        for layer in onnx_run.layers
        if layer.name in onnx_unmatched
    )
    rows = {row["a"]["name"]: row for row in report["layers"]}
    if model == "resnet-18":
        # The BatchNorm folded into the Conv before it: the node is compared with bn1.
        assert rows["bn1"]["b"]["node"] == "/conv1/Conv"
        assert rows["bn1"]["fused"] == ["conv1", "bn1"]
        assert rows["layer1.0.relu#2"]["b"]["name"] == "layer1.0.relu_1"
        assert rows["layer1.0"]["b"]["name"] == "layer1.0.relu_1"
    else:
        assert rows["6"]["fused"] == ["5", "6"]  # a Dropout exports to nothing


def test_keras_against_pytorch_matches_in_order_across_layouts(store: Path) -> None:
    """NHWC against NCHW: 4-axis outputs compared transposed; Keras' flatten (channels last)
    holds the same values in another order, which is no divergence."""
    nchw = preprocessed(store, "shapes-color", "pytorch", "shapes-color")
    nhwc = preprocessed(store, "shapes-color", "tensorflow", "shapes-color")
    report = diverge(
        capture(store, "shapes-color", "pytorch", nchw),
        capture(store, "shapes-color", "tensorflow", nhwc),
    )
    assert report["first_divergence"] is None and report["verdict"] == NO_DIVERGENCE
    assert report["matched_by"] == "order and shape"
    assert report["layout"] is not None and "NCHW" in report["layout"]
    assert report["input"]["relative_error"] == 0
    permuted = [row["b"]["name"] for row in report["layers"] if row["permuted"]]
    assert permuted == ["flatten9"]
    assert report["counts"]["matched"] >= 12


def test_inputs_preprocessed_in_another_color_order_diverge_at_the_input(
    store: Path,
) -> None:
    rgb = preprocessed(store, "shapes-color", "pytorch", "shapes-color")
    bgr = preprocessed(store, "shapes-color", "onnxruntime", "shapes-color", color_mode="BGR")
    np.testing.assert_array_equal(bgr, rgb[:, ::-1])  # by construction: the channels swapped
    report = diverge(
        capture(store, "shapes-color", "pytorch", rgb),
        capture(store, "shapes-color", "onnxruntime", bgr),
    )
    first = report["first_divergence"]
    assert first is not None and first["at"] == "input"
    assert report["verdict"] == "the inputs differ: preprocessing"
    assert report["input"]["differs"] and report["input"]["relative_error"] > 0.01
    assert report["layers"], "the layers are still compared"


def test_an_input_rounded_to_float16_diverges_at_the_input(resnet_input: np.ndarray) -> None:
    """float16 keeps 11 significant bits: rounding normal values to it moves them by about
    2e-4 of their norm, past the float32 tolerance."""
    rounded = resnet_input.astype(np.float16).astype(np.float32)
    report = diverge(Capture("pytorch", resnet_input, []), Capture("pytorch", rounded, []))
    assert report["first_divergence"] is not None
    assert report["first_divergence"]["at"] == "input"
    assert 1e-4 < report["input"]["relative_error"] < 5e-4
    looser = diverge(
        Capture("pytorch", resnet_input, []), Capture("pytorch", rounded, []), tolerance=1e-3
    )
    assert looser["first_divergence"] is None
    assert looser["verdict"].startswith("no layer of one run matched a layer of the other")


# -- capture files -----------------------------------------------------------------------------


def test_a_capture_survives_a_save_and_load(digits_onnx: Capture, tmp_path: Path) -> None:
    path = tmp_path / "digits.capture"
    digits_onnx.save(path)
    assert path.exists() and not (tmp_path / "digits.capture.npz").exists()
    loaded = Capture.load(path)
    assert loaded.framework == "onnxruntime" and loaded.indices == INDICES
    np.testing.assert_array_equal(loaded.input, digits_onnx.input)
    assert [(x.name, x.op_type, x.node) for x in loaded.layers] == [
        (x.name, x.op_type, x.node) for x in digits_onnx.layers
    ]
    for x, y in zip(loaded.layers, digits_onnx.layers, strict=True):
        assert x.array.dtype == y.array.dtype
        np.testing.assert_array_equal(x.array, y.array)
    assert diverge(digits_onnx, loaded)["verdict"] == NO_DIVERGENCE


def small_capture() -> Capture:
    layers = [LayerOutput("conv", "Conv", np.ones((2, 3), dtype=np.float32), "/conv/Conv")]
    return Capture("onnxruntime", np.zeros((2, 4), dtype=np.float32), layers, [5, 6])


def test_a_file_that_is_not_a_capture_is_refused(tmp_path: Path) -> None:
    good = tmp_path / "good.npz"
    small_capture().save(good)
    # Truncated.
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"truncated.npz is not a capture \(.npz\)"):
        Capture.load(truncated)
    # Larger than the bound: on disk, and uncompressed.
    with pytest.raises(ValueError, match=r"good.npz: \d+ bytes, over the bound of 100 bytes"):
        Capture.load(good, max_bytes=100)
    zeros = tmp_path / "zeros.npz"
    Capture("pytorch", np.zeros((64, 1024), dtype=np.float32), []).save(zeros)
    assert zeros.stat().st_size < 10_000  # 256 KiB of zeros, compressed
    with pytest.raises(ValueError, match=r"its arrays take \d+ bytes uncompressed, over 10000"):
        Capture.load(zeros, max_bytes=10_000)
    # Not an npz at all.
    text = tmp_path / "text.npz"
    text.write_text("layer outputs")
    with pytest.raises(ValueError, match="is not a capture"):
        Capture.load(text)


def test_a_capture_holding_pickles_is_refused_unread(tmp_path: Path) -> None:
    pickled = tmp_path / "pickled.npz"
    index = json.dumps({"format": "mlms-capture"}).encode()
    np.savez(
        pickled,
        index=np.frombuffer(index, dtype=np.uint8),
        input=np.array([{"a": 1}], dtype=object),
    )
    with pytest.raises(ValueError, match=r"input.npy holds Python objects \(a pickle\)"):
        Capture.load(pickled)


def test_an_array_claiming_more_data_than_its_file_holds_is_refused_unread(
    tmp_path: Path,
) -> None:
    """numpy would allocate what an array's header claims before reading it."""
    path = tmp_path / "claims.npz"
    index = np.frombuffer(json.dumps({"format": "mlms-capture"}).encode(), dtype=np.uint8)
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("index.npy", "w") as file:
            np.lib.format.write_array(file, index)
        with archive.open("input.npy", "w") as file:
            header = {"descr": "<f4", "fortran_order": False, "shape": (10**9,)}
            np.lib.format.write_array_header_1_0(file, header)
            file.write(bytes(16))
    with pytest.raises(ValueError, match="input.npy claims more data than it holds"):
        Capture.load(path)


def test_a_capture_whose_index_lies_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lying.npz"
    small_capture().save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with np.load(path) as data:
        index = json.loads(data["index"].tobytes())
    index["layers"][0]["shape"] = [2, 4]
    lied = tmp_path / "lied.npz"
    with zipfile.ZipFile(lied, "w") as archive:
        for name, data in members.items():
            if name != "index.npy":
                archive.writestr(name, data)
    with zipfile.ZipFile(lied, "a") as archive, archive.open("index.npy", "w") as file:
        np.lib.format.write_array(file, np.frombuffer(json.dumps(index).encode(), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"layer_00000 is .* its index says <f4 \[2, 4\]"):
        Capture.load(lied)
    del index["layers"][0]["op_type"]
    missing = tmp_path / "missing.npz"
    np.savez(
        missing,
        index=np.frombuffer(json.dumps(index).encode(), dtype=np.uint8),
        input=np.zeros((2, 4), dtype=np.float32),
        layer_00000=np.ones((2, 3), dtype=np.float32),
    )
    with pytest.raises(ValueError, match="lacks one of name, op_type, node"):
        Capture.load(missing)


def test_growth_keeps_a_carried_error_from_being_blamed_again() -> None:
    """Known by construction: layer `b` adds an error of 1e-2; `c` carries it, grown 5-fold;
    `d` adds 100 times as much again."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 50)) for _ in range(4)]
    errors = [0.0, 1e-2, 5e-2, 5.0]
    noise = [rng.standard_normal((2, 50)) for _ in range(4)]
    names = ["a", "b", "c", "d"]

    def run(scale: float) -> Capture:
        layers = [
            LayerOutput(
                name,
                "Op",
                x + scale * e * np.linalg.norm(x) * n / np.linalg.norm(n),
            )
            for name, x, e, n in zip(names, arrays, errors, noise, strict=True)
        ]
        return Capture("onnxruntime", np.zeros((2, 1)), layers, [0, 1])

    report = diverge(run(0), run(1))
    assert [round(row["relative_error"], 6) for row in report["layers"]] == errors
    assert diverging(report) == ["b", "d"]
    assert report["first_divergence"]["name"] == "b"  # type: ignore[index]
    assert report["first_divergence"]["input_error_from"] == "a"  # type: ignore[index]
    assert report["first_divergence"]["input_error"] == 0  # type: ignore[index]
    assert diverging(diverge(run(0), run(1), growth=1000)) == ["b"]


def test_one_shared_name_across_frameworks_does_not_stand_for_the_model() -> None:
    """PyTorch's conv1, flatten, fc against Keras' conv2d, flatten, dense (their only shared
    name is `flatten`), Keras' conv2d doubled: matched by order and shape, which pairs all
    three layers, the first divergence is the convolution."""
    rng = np.random.default_rng(1)
    conv, flat, fc = (rng.standard_normal(shape) for shape in ((2, 4, 3, 3), (2, 36), (2, 5)))

    def capture(framework: str, names: list[str], scale: float) -> Capture:
        arrays = [conv * scale, flat * scale, fc * scale]
        layers = [LayerOutput(n, "Op", a) for n, a in zip(names, arrays, strict=True)]
        return Capture(framework, np.zeros((2, 1)), layers, [0, 1])

    report = diverge(
        capture("pytorch", ["conv1", "flatten", "fc"], 1.0),
        capture("tensorflow", ["conv2d", "flatten", "dense"], 2.0),
    )
    assert report["matched_by"] == "order and shape"
    assert len(report["layers"]) == 3
    assert report["first_divergence"]["name"] == "conv1"  # type: ignore[index]
