"""Theoretical performance: parameters and multiply-adds per layer and in total, counted from
each framework's own file of the zoo's models (`predictors.analysis.flops`), the `mlms flops` command,
and the counts and achieved FLOP/s on a result."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from predictors.analysis.flops import CountError, count, model_input_shape
from predictors.cli import main
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

STANDARD = ("alexnet", "resnet-18", "resnet-50", "mobilenet-v2")


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn", *STANDARD))


def _files(store: Path, name: str) -> tuple[Path, Path]:
    folder = store / "models" / name / "1.0.0"
    return folder / f"{name}.onnx", folder / f"{name}.pt"


@pytest.mark.parametrize("name", STANDARD)
def test_the_standard_models_agree_across_onnx_and_torchscript_layer_by_layer(
    store: Path, name: str
) -> None:
    """At 224x224 the ONNX graph (onnx's shape inference) and the TorchScript module (its ops
    under torch's flop formulas) count the same multiply-adds in every layer and in total, and
    the total is what torch's own FlopCounterMode counts for the module."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    onnx_file, torchscript_file = _files(store, name)
    shape = {"input": [3, 224, 224]}
    onnx_count = count("onnxruntime", onnx_file, shape)
    torch_count = count("pytorch", torchscript_file, shape)

    onnx_layers = {layer.module: layer.macs for layer in onnx_count.layers if layer.macs}
    torch_layers = {layer.module: layer.macs for layer in torch_count.layers if layer.macs}
    assert onnx_layers == torch_layers
    assert onnx_count.macs == torch_count.macs == sum(onnx_layers.values())

    module = torch.jit.load(str(torchscript_file)).eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(torch.zeros(1, 3, 224, 224))
    assert torch_count.macs == counter.get_total_flops() // 2
    # Each module's own parameters, as torch holds them.
    assert torch_count.params == sum(p.numel() for p in module.parameters())


def test_the_totals_are_the_published_figures(store: Path) -> None:
    """ResNet-50 4.09 G, ResNet-18 1.81 G, AlexNet 0.71 G, MobileNet-v2 0.30 G multiply-adds at
    224x224; and one layer worked out by hand: ResNet's first convolution makes 64 channels
    of 112x112 from 3 channels through 7x7 kernels."""
    totals = {
        name: count("onnxruntime", _files(store, name)[0], {"input": [3, 224, 224]}).macs
        for name in STANDARD
    }
    assert totals == {
        "alexnet": 714_188_480,
        "resnet-18": 1_814_073_344,
        "resnet-50": 4_089_184_256,
        "mobilenet-v2": 300_774_272,
    }
    resnet = count("onnxruntime", _files(store, "resnet-18")[0], {"input": [3, 224, 224]})
    first = resnet.layers[0]
    assert (first.module, first.op_type) == ("conv1", "Conv")
    assert first.macs == 64 * 112 * 112 * 3 * 7 * 7
    assert first.params == 64 * 3 * 7 * 7 + 64  # the exporter folded the batch norm into a bias
    # FLOPs per byte: 2 MACs over the input, output and weights it moves, in float32.
    moved = 4 * (3 * 224 * 224 + 64 * 112 * 112) + 4 * first.params
    assert first.intensity() == pytest.approx(2 * first.macs / moved)
    assert first.intensity(8) > first.intensity(1)  # the weights are read once per batch


def test_onnx_runtimes_fused_nodes_meet_their_layers(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    """ONNX Runtime fuses a convolution with the element-wise ops after it and names the node
    after their output tensor: every layer span of a framework-level trace of resnet-18 that
    does a convolution's work is matched to a counted convolution, and each convolution to
    one span; pooling is matched to nothing."""
    from predictors.analysis.flops import layer_of
    from predictors.protocol import Attr

    evaluation = run_evaluation(
        "resnet-18", "onnxruntime", trace_level="framework", batch_sizes=(1,), limit=1
    )
    counted = evaluation.result["theoretical"]
    spans = {
        span.name: span.attributes.get(Attr.OP_TYPE)
        for span in evaluation.spans
        if span.attributes.get(Attr.LEVEL) == "framework"
    }
    matched = {name: layer_of(counted, name) for name in spans}
    convolutions = {layer["name"] for layer in counted["layers"] if layer["op_type"] == "Conv"}
    fused = [name for name, op in spans.items() if op == "Conv"]
    assert fused and all(matched[name] in convolutions for name in fused)
    assert sorted(matched[name] for name in fused) == sorted(convolutions)
    assert matched["/relu/Relu_output_0_nchwc"] == "/conv1/Conv"
    assert matched["/fc/Gemm"] == "/fc/Gemm"
    assert matched["/maxpool/MaxPool_output_0_nchwc"] is None


def test_the_counts_follow_the_input_size(store: Path) -> None:
    """A convolution's multiply-adds follow the pixels (a quarter at half the side), and the
    two formats agree at any size."""
    onnx_file, torchscript_file = _files(store, "resnet-18")
    full = count("onnxruntime", onnx_file, {"input": [3, 224, 224]})
    half = count("onnxruntime", onnx_file, {"input": [3, 112, 112]})
    assert half.macs == count("pytorch", torchscript_file, {"input": [3, 112, 112]}).macs
    assert half.layers[0].macs * 4 == full.layers[0].macs
    assert 3.5 * half.macs < full.macs < 4.5 * half.macs


def test_digits_cnn_agrees_in_all_three_frameworks(store: Path) -> None:
    """The zoo exports digits-cnn to ONNX, TorchScript and Keras: the layers that multiply-add
    agree in the order they run (Keras names its layers its own way), and so do the
    parameters."""
    folder = store / "models" / "digits-cnn" / "1.0.0"
    # Keras in a process of its own: loading a model sets up TensorFlow's thread pools, which
    # this test process's later TensorFlow evaluations set themselves.
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        keras = pool.submit(
            count, "tensorflow", folder / "digits-cnn.keras", {"input": [8, 8, 1]}
        ).result()
    counts = [
        count("onnxruntime", folder / "digits-cnn.onnx", {"input": [1, 8, 8]}),
        count("pytorch", folder / "digits-cnn.pt", {"input": [1, 8, 8]}),
        keras,
    ]
    working = [[(layer.macs, layer.params) for layer in c.layers if layer.macs] for c in counts]
    assert working[0] == working[1] == working[2]
    assert len(working[0]) == 4
    assert len({c.params for c in counts}) == 1
    assert [layer.name for layer in counts[1].layers][:2] == ["0 (Conv2d)", "2 (Conv2d)"]


def test_bad_inputs_are_refused_naming_them(store: Path) -> None:
    onnx_file, torchscript_file = _files(store, "resnet-18")
    with pytest.raises(CountError, match="'image' is not an input of the graph"):
        count("onnxruntime", onnx_file, {"image": [3, 224, 224]})
    with pytest.raises(CountError, match="rank 2"):
        count("onnxruntime", onnx_file, {"input": [224, 224]})
    with pytest.raises(CountError, match="did not run on an input of shape"):
        count("pytorch", torchscript_file, {"input": [5, 224, 224]})
    with pytest.raises(CountError, match="not an ONNX model"):
        count("onnxruntime", torchscript_file, {"input": [3, 224, 224]})
    with pytest.raises(CountError, match="no counter for framework 'jax'"):
        count("jax", onnx_file, {})
    assert model_input_shape({"crop_size": [224, 224], "layout": "NHWC"}) == [224, 224, 3]
    assert model_input_shape({"resize_side": {"side": "shorter"}, "crop_size": None}) is None


def test_a_layer_of_unknown_shapes_is_listed_not_silently_counted_zero(
    store: Path, tmp_path: Path
) -> None:
    """A MatMul whose operand's shape inference cannot know counts none, and says so: the
    total is then a lower bound."""
    import onnx
    from onnx import TensorProto, helper

    known = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    weights = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], [0.0] * 12)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"], name="/fc/MatMul"),
            # NonZero's output size depends on the data: the second product's operands have a
            # dimension no shape inference can know.
            helper.make_node("NonZero", ["y"], ["n"], name="/nonzero"),
            helper.make_node("Cast", ["n"], ["r"], to=TensorProto.FLOAT, name="/cast"),
            helper.make_node("Transpose", ["r"], ["t"], name="/transpose"),
            helper.make_node("MatMul", ["r", "t"], ["z"], name="/square/MatMul"),
        ],
        "g",
        [known],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        [weights],
    )
    path = tmp_path / "partial.onnx"
    onnx.save(helper.make_model(graph), str(path))
    counted = count("onnxruntime", path, {"x": [4]})
    assert counted.macs == 4 * 3
    assert counted.uncounted == ["/square/MatMul"]
    assert counted.as_dict()["uncounted_layers"] == ["/square/MatMul"]


def test_mlms_flops_prints_per_layer_counts_and_the_agreement(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["flops", "resnet-18", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "1.814 G" in out and "3.628 G" in out
    assert "layer4.1.conv2" in out
    assert "the totals agree; the 21 layers that multiply-add, matched by module, agree" in out

    assert main(["flops", "resnet-18", "--framework", "pytorch", "--input-size", "112,112",
                 "--format", "json", "--store", str(store)]) == 0  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    (result,) = report["counts"]
    assert result["input_shapes"] == {"input": [3, 112, 112]}
    assert result["flops"] == 2 * result["macs"]
    assert report["agreement"] == {"frameworks": 1, "totals_agree": True, "layers_matched": None}


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["--input-size", "0,4"], 2, "--input-size: '0' is not a positive integer"),
        (["--input-size", "224"], 2, "--input-size: give 2 integers"),
        (["--input-shape", "3,224,224"], 2, "takes an image: give --input-size H,W"),
        (["--framework", "jax"], 2, "unknown framework 'jax'"),
        (["--store", "/nonexistent"], 1, "the artifact store /nonexistent does not exist"),
    ],
)
def test_mlms_flops_refuses_bad_flags_naming_them(
    store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], status: int, message: str
) -> None:
    arguments = ["flops", "resnet-18", *argv]
    if "--store" not in argv:
        arguments += ["--store", str(store)]
    assert main(arguments) == status
    assert message in capsys.readouterr().err


def test_a_result_carries_its_counts_and_the_flops_it_achieved(
    run_evaluation: RunEvaluation,
) -> None:
    """The evaluation counts the model at the shape it fed, and sets each batch size's p50
    latency against its FLOPs."""
    evaluation = run_evaluation(framework="onnxruntime", batch_sizes=(1, 4), limit=16)
    theoretical = evaluation.result["theoretical"]
    assert theoretical["counted"] is True
    assert theoretical["input_shapes"] == {"input": [1, 8, 8]}
    assert theoretical["macs"] == 1_330_432
    for entry, achieved in zip(
        evaluation.result["batch_sizes"], theoretical["achieved"], strict=True
    ):
        seconds = entry["latency"]["p50_ms"] / 1e3
        assert achieved["batch_size"] == entry["batch_size"]
        expected = 2 * theoretical["macs"] * entry["batch_size"] / seconds / 1e9
        assert achieved["gflops_per_s"] == pytest.approx(expected, rel=1e-3)
        # Its place on the roofline: FLOPs per byte of its layers' activations for the batch
        # and their weights once, and its share of the roof its run states (predictors.analysis.roofline).
        layers = theoretical["layers"]
        moved = sum(x["activation_bytes"] for x in layers) * entry["batch_size"] + sum(
            x["weight_bytes"] for x in layers
        )
        assert achieved["bytes"] == moved
        assert achieved["intensity"] == pytest.approx(
            2 * theoretical["macs"] * entry["batch_size"] / moved, rel=1e-3
        )
        assert 0 < achieved["of_peak"] <= 1
    assert [layer["name"] for layer in theoretical["layers"]] == ["/0/Conv", "/2/Conv",
                                                                   "/7/Gemm", "/10/Gemm"]  # fmt: skip
