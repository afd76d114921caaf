"""The PyTorch predictor's formats besides TorchScript: torch.export programs and state dicts
with their module's source (`model.format`), on tiny modules built here.

The agent's cache names the files it fetches after their content, so every file is saved here
under a name of that kind (no `.pt2` or `.pt` suffix)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from predictors import manifests
from predictors.frameworks.predictor import PredictorError, PredictorOptions
from predictors.frameworks.pytorch import PyTorchPredictor
from predictors.frameworks.torch_formats import state_dict_problems
from predictors.manifests.graph_check import Port

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.database_free,
    # The TorchScript file the tests save (torch 2.13 deprecates torch.jit).
    pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning"),
]

# The module source a state dict comes with: `Net` (a block with a residual add inside),
# `make_chain` (a Sequential), and entries that are not what the manifest needs.
SOURCE = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.c(x)) + x


class Net(nn.Module):
    def __init__(self, width=3):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.block = Block()
        self.fc = nn.Linear(2, width)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(self.block(self.conv(x)).mean((2, 3)))

    def reset_state(self):
        self.calls = 0


def make_chain():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(72, 4))


def wide():
    return Net(width=5)


def not_a_module():
    return 42


def needs_arguments(depth):
    return Net()


NUMBER = 7
"""

INPUT = np.random.default_rng(0).standard_normal((3, 1, 8, 8)).astype(np.float32)


def _manifest(model: dict[str, Any], *, outputs: int = 1) -> manifests.Manifest:
    document = {
        "kind": "model",
        "name": "tiny",
        "version": "1.0.0",
        "task": "feature_extraction",
        "framework": {"name": "pytorch", "version": ">=2.0"},
        "inputs": [
            {
                "name": "x",
                "type": "tensor",
                "parameters": {"element_type": "float32", "shape": [1, 8, 8]},
            }
        ],
        "outputs": [{"name": f"out{i}", "type": "tensor"} for i in range(outputs)],
        "model": {"graph_path": "repo://models/tiny/1.0.0/model", **model},
    }
    return manifests.load(yaml.safe_dump(document))


def _namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(SOURCE, "net.py", "exec"), namespace)  # noqa: S102 - the test's own source
    return namespace


def _reference(entry: str = "Net") -> torch.nn.Module:
    torch.manual_seed(0)
    module: torch.nn.Module = _namespace()[entry]().eval()
    return module


def _expected(module: torch.nn.Module, batch: np.ndarray = INPUT) -> np.ndarray:
    with torch.inference_mode():
        result: np.ndarray = module(torch.from_numpy(batch)).numpy()
    return result


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Every file of the tests, each under a content-like name of the cache's kind."""
    net = _reference()
    chain = _reference("make_chain")
    found = {
        "source": tmp_path / "6a1f-source",
        "state_dict": tmp_path / "b2c4-weights",
        "state_dict_old": tmp_path / "c3d5-weights-old",
        "chain_weights": tmp_path / "d4e6-chain",
        "program": tmp_path / "e5f7-program",
        "torchscript": tmp_path / "f6a8-script",
        "pickled_module": tmp_path / "a7b9-pickle",
        "checkpoint": tmp_path / "b8ca-checkpoint",
        "garbage": tmp_path / "c9db-garbage",
    }
    found["source"].write_text(SOURCE, encoding="utf-8")
    torch.save(net.state_dict(), found["state_dict"])
    torch.save(net.state_dict(), found["state_dict_old"], _use_new_zipfile_serialization=False)
    torch.save(chain.state_dict(), found["chain_weights"])
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(net, (torch.from_numpy(INPUT),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, found["program"].with_suffix(".pt2"))
    found["program"].with_suffix(".pt2").rename(found["program"])
    torch.jit.save(torch.jit.script(chain), str(found["torchscript"]))
    torch.save(torch.nn.Linear(2, 3), found["pickled_module"])  # a whole module, pickled
    torch.save({"epoch": 3, "state_dict": net.state_dict()}, found["checkpoint"])
    found["garbage"].write_bytes(b"this is not a model at all" * 10)
    return found


def _load(
    manifest: manifests.Manifest, graph: Path, weights: Path | None = None, **options: Any
) -> PyTorchPredictor:
    predictor = PyTorchPredictor()
    predictor.load(
        manifest, PredictorOptions(graph_file=graph, weights_file=weights, threads=1, **options)
    )
    return predictor


def _refused(manifest: manifests.Manifest, graph: Path, weights: Path | None = None) -> str:
    with pytest.raises(PredictorError) as refused:
        _load(manifest, graph, weights).close()
    return str(refused.value)


STATE_DICT = {"format": "state_dict", "entry": "Net", "weights_path": "repo://models/tiny/1.0.0/w"}
PROGRAM = {"format": "torch_export"}


def test_a_program_with_a_dynamic_batch_gives_its_module_outputs(files: dict[str, Path]) -> None:
    predictor = _load(_manifest(PROGRAM), files["program"])
    try:
        net = _reference()
        for rows in (3, 1, 7):
            batch = np.random.default_rng(rows).standard_normal((rows, 1, 8, 8)).astype(np.float32)
            with predictor.inference_context():
                outputs = predictor.predict(batch)
            np.testing.assert_allclose(outputs, _expected(net, batch), atol=1e-5)
        (ran,) = predictor.run({"x": INPUT}, ["out0"])
        np.testing.assert_allclose(ran, _expected(net), atol=1e-5)
        signature = predictor.signature()
        assert signature is not None
        assert signature.inputs == (Port("x", "float32", 4),)
        assert [(p.element_type, p.rank) for p in signature.outputs] == [("float32", 2)]
        assert predictor.expected_input() == ((None, 1, 8, 8), "float32")
    finally:
        predictor.close()


@pytest.mark.parametrize("weights", ["state_dict", "state_dict_old"])
def test_a_state_dict_in_either_torch_save_format_gives_its_module_outputs(
    files: dict[str, Path], weights: str
) -> None:
    predictor = _load(_manifest(STATE_DICT), files["source"], files[weights])
    try:
        with predictor.inference_context():
            outputs = predictor.predict(INPUT)
        np.testing.assert_allclose(outputs, _expected(_reference()), atol=1e-5)
        (ran,) = predictor.run({"x": INPUT}, ["out0"])
        np.testing.assert_allclose(ran, outputs, atol=1e-5)
        assert predictor.signature() is None
        reset = predictor.state_reset()
        assert reset is not None and reset.how == "the module Net()'s reset_state()"
        reset.reset()
    finally:
        predictor.close()


def test_a_state_dict_declared_as_torchscript_is_named_for_what_it_is(
    files: dict[str, Path],
) -> None:
    message = _refused(_manifest({}), files["state_dict"])
    assert message.startswith("pytorch cannot load b2c4-weights as TorchScript: it is a state dict")
    assert "`model.format: state_dict`" in message and "model.entry" in message
    assert "corrupted" not in message
    message = _refused(_manifest({}), files["program"])
    assert "it is a torch.export program" in message and "`model.format: torch_export`" in message
    message = _refused(_manifest({}), files["pickled_module"])
    assert "it is a torch.save pickle of Python objects" in message
    assert "`model.format: state_dict`" in message


def _truncated(path: Path, to: Path) -> Path:
    to.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return to


def test_broken_programs_are_refused_naming_the_format(
    files: dict[str, Path], tmp_path: Path
) -> None:
    manifest = _manifest(PROGRAM)
    prefix = "pytorch cannot load {} as a torch.export program: "
    message = _refused(manifest, files["garbage"])
    assert message.startswith(prefix.format("c9db-garbage") + "it is not a file PyTorch wrote")
    truncated = _truncated(files["program"], tmp_path / "cut")
    assert _refused(manifest, truncated).startswith(prefix.format("cut") + "it is not a file")
    message = _refused(manifest, files["torchscript"])
    assert "it is TorchScript" in message and "`model.format: torchscript`" in message
    message = _refused(manifest, files["state_dict"])
    assert "it is a state dict" in message and "`model.format: state_dict`" in message


def test_a_program_that_carries_pickled_objects_is_refused(
    files: dict[str, Path], tmp_path: Path
) -> None:
    carrying = tmp_path / "carrying"
    shutil.copyfile(files["program"], carrying)
    with zipfile.ZipFile(carrying, "a") as archive:
        folder = archive.namelist()[0].split("/", 1)[0]
        archive.writestr(f"{folder}/data/constants/opaque_obj_0", b"cos\nsystem\n.")
    message = _refused(_manifest(PROGRAM), carrying)
    assert "it carries pickled Python objects" in message


@pytest.mark.parametrize(
    ("model", "weights", "words"),
    [
        ({}, "garbage", "as a state dict: it is not a file PyTorch wrote"),
        (
            {},
            "torchscript",
            "as a state dict: it is TorchScript (written by torch.jit.save); "
            "declare it as `model.format: torchscript`",
        ),
        ({}, "program", "as a state dict: it is a torch.export program"),
        ({}, "pickled_module", "as a state dict: it is a torch.save pickle of Python objects"),
        ({}, "checkpoint", "holds its state dict under the key 'state_dict', beside 'epoch'"),
        ({}, "chain_weights", "into Net(): missing keys conv.weight, conv.bias, block.c.weight"),
        ({}, "chain_weights", "unexpected keys 0.weight, 0.bias, 3.weight, 3.bias"),
        (
            {"entry": "wide"},
            "state_dict",
            "shape mismatches: fc.weight is (3, 2) in the file, (5, 2) in the module",
        ),
        (
            {"entry": "Missing"},
            "state_dict",
            "model.entry 'Missing' is not defined at its top "
            "level (it defines Block, Net, make_chain, needs_arguments, not_a_module, wide)",
        ),
        ({"entry": "NUMBER"}, "state_dict", "model.entry 'NUMBER' is an int, not a class"),
        (
            {"entry": "not_a_module"},
            "state_dict",
            "not_a_module() returned an int, not a torch.nn.Module",
        ),
        ({"entry": "needs_arguments"}, "state_dict", "needs_arguments() failed: TypeError"),
    ],
)
def test_broken_state_dicts_are_refused_naming_the_format_and_the_problem(
    files: dict[str, Path], model: dict[str, str], weights: str, words: str
) -> None:
    message = _refused(_manifest({**STATE_DICT, **model}), files["source"], files[weights])
    assert "pytorch cannot" in message and "state dict" in message, message
    assert words in message, message


def test_a_truncated_state_dict_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    for name in ("state_dict", "state_dict_old"):
        truncated = _truncated(files[name], tmp_path / f"cut-{name}")
        message = _refused(_manifest(STATE_DICT), files["source"], truncated)
        assert message.startswith(f"pytorch cannot load cut-{name} as a state dict: it "), message


def test_the_module_source_fails_with_its_own_traceback_and_under_the_sandbox(
    files: dict[str, Path], tmp_path: Path
) -> None:
    failing = tmp_path / "failing.py"
    failing.write_text("import torch\n\n\ndef Net():\n    return torch.nn.Linear(2, nope)\n")
    message = _refused(_manifest(STATE_DICT), failing, files["state_dict"])
    assert "Net() failed: NameError: name 'nope' is not defined" in message
    assert f'File "{failing}", line 5, in Net' in message
    broken = tmp_path / "broken.py"
    broken.write_text("def Net(:\n    pass\n")
    message = _refused(_manifest(STATE_DICT), broken, files["state_dict"])
    assert "broken.py (model.graph_path): it is not valid Python: " in message
    assert "(line 1)" in message
    calling = tmp_path / "calling.py"
    calling.write_text("import socket\nsocket.create_connection(('127.0.0.1', 9))\n")
    message = _refused(_manifest(STATE_DICT), calling, files["state_dict"])
    assert "custom module code tried to use the network" in message
    message = _refused(_manifest(STATE_DICT), files["state_dict"], files["state_dict"])
    assert "it is not Python source (UTF-8 text); it is a state dict" in message


def test_a_state_dict_without_weights_is_refused(files: dict[str, Path]) -> None:
    message = _refused(_manifest(STATE_DICT), files["source"], None)
    assert message.startswith("pytorch cannot load a state dict without model.weights_path")


def test_state_dict_problems_reads_without_running_the_source(
    files: dict[str, Path], tmp_path: Path
) -> None:
    assert state_dict_problems(files["source"], files["state_dict"], "Net") == []
    assert state_dict_problems(files["source"], files["state_dict_old"], "make_chain") == []
    running = tmp_path / "running.py"
    running.write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n\nclass Net:\n    pass\n"
    )
    assert state_dict_problems(running, files["state_dict"], "Net") == []
    assert not (tmp_path / "ran").exists()
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\ndef Net(:\n")
    (problem,) = state_dict_problems(broken, files["state_dict"], "Net")
    assert problem.startswith("the module source broken.py (model.graph_path) is not valid Python")
    assert problem.endswith("(line 2)")
    (problem,) = state_dict_problems(files["source"], files["state_dict"], "NUMBER")
    assert "model.entry 'NUMBER' is not a class or function defined at the top level" in problem
    (problem,) = state_dict_problems(files["source"], files["state_dict"], "needs_arguments")
    assert "takes required arguments (depth); it is called with none" in problem
    (problem,) = state_dict_problems(files["source"], files["checkpoint"], "Net")
    assert problem.startswith("the state dict b8ca-checkpoint (model.weights_path) is no state")
    assert "under the key 'state_dict'" in problem
    (problem,) = state_dict_problems(files["source"], files["pickled_module"], "Net")
    assert "a torch.save pickle of Python objects" in problem
    (problem,) = state_dict_problems(files["source"], files["torchscript"], "Net")
    assert "it is TorchScript" in problem
    source, weights = state_dict_problems(files["state_dict"], files["garbage"], "Net")
    assert source == (
        "the module source b2c4-weights (model.graph_path) is not Python source (UTF-8 text); "
        "it is a state dict (torch.save of a module's state_dict()): weights without the "
        "module's code"
    )
    assert weights.startswith(
        "the state dict c9db-garbage (model.weights_path) does not load: it is not a file "
        "PyTorch wrote"
    )
    (problem,) = state_dict_problems(files["source"], files["state_dict"], "")
    assert problem.startswith("model.entry is required for format state_dict")


def test_layer_outputs_name_every_module_of_a_program_and_a_state_dict(
    files: dict[str, Path],
) -> None:
    expected_names = ["conv", "block.c", "block", "fc", "(model)"]
    net = _reference()
    with torch.inference_mode():
        conv = net.get_submodule("conv")(torch.from_numpy(INPUT)).numpy()
    for manifest, graph, weights in (
        (_manifest(PROGRAM), files["program"], None),
        (_manifest(STATE_DICT), files["source"], files["state_dict"]),
    ):
        predictor = _load(manifest, graph, weights)
        try:
            layers = predictor.layer_outputs(INPUT)
            assert [layer.name for layer in layers] == expected_names
            assert [layer.op_type for layer in layers] == [
                "Conv2d",
                "Conv2d",
                "Block",
                "Linear",
                "Net",
            ]
            np.testing.assert_allclose(layers[0].array, conv, atol=1e-5)
            np.testing.assert_allclose(layers[-1].array, _expected(net), atol=1e-5)
            with pytest.raises(PredictorError, match="over the bound of 100 bytes"):
                predictor.layer_outputs(INPUT, max_bytes=100)
        finally:
            predictor.close()


def test_a_sequential_state_dict_is_timed_layer_by_layer_at_framework(
    files: dict[str, Path],
) -> None:
    manifest = _manifest({**STATE_DICT, "entry": "make_chain"})
    predictor = _load(manifest, files["source"], files["chain_weights"], trace_level="framework")
    try:
        with predictor.inference_context():
            outputs = predictor.predict(INPUT)
            predictor.predict(INPUT)
        np.testing.assert_allclose(outputs, _expected(_reference("make_chain")), atol=1e-5)
        calls = predictor.take_layers()
        assert calls is not None and len(calls) == 2
        assert [(layer.name, layer.op_type) for layer in calls[0]] == [
            ("0 (Conv2d)", "Conv2d"),
            ("1 (ReLU)", "ReLU"),
            ("2 (Flatten)", "Flatten"),
            ("3 (Linear)", "Linear"),
        ]
    finally:
        predictor.close()


@pytest.mark.parametrize("fmt", ["torch_export", "state_dict"])
def test_the_profiler_records_the_module_of_each_op(files: dict[str, Path], fmt: str) -> None:
    if fmt == "torch_export":
        predictor = _load(_manifest(PROGRAM), files["program"], trace_level="ml_library")
    else:
        predictor = _load(
            _manifest(STATE_DICT), files["source"], files["state_dict"], trace_level="ml_library"
        )
    try:
        with predictor.inference_context():
            predictor.predict(INPUT)  # a warm-up call: not traced
            predictor.start_tracing()
            outputs = predictor.predict(INPUT)
            predictor.predict(INPUT)
        predictor.stop_tracing()
        np.testing.assert_allclose(outputs, _expected(_reference()), atol=1e-5)
        calls = predictor.take_layers()
        assert calls is not None and len(calls) == 3 and calls[0] == []
        layers = [(s.name, s.op_type) for s in calls[1] if s.level == "framework"]
        assert ("conv", "Conv2d") in layers and ("block.c", "Conv2d") in layers
        assert ("block", "Block") in layers and ("fc", "Linear") in layers
        ops = {s.name for s in calls[1] if s.level == "ml_library"}
        assert {"aten::conv2d", "aten::relu", "aten::add"} <= ops
        by_index = calls[1]
        parents = {by_index[s.parent].name for s in by_index if s.name == "aten::add"}
        assert parents == {"block"}
    finally:
        predictor.close()


def test_a_program_whose_symbolic_shapes_are_code_is_refused_before_it_loads(
    tmp_path: Path,
) -> None:
    """torch.export.load hands each symbolic shape to sympy, which evaluates it as Python: a
    shape that is anything but arithmetic on sizes is refused before the program is read."""
    import json
    import zipfile

    from predictors.frameworks.torch_formats import load_program

    class Twice(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    batch = torch.export.Dim("batch")
    program = torch.export.export(Twice(), (torch.zeros(2, 3),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, tmp_path / "twice.pt2")
    assert load_program(tmp_path / "twice.pt2", torch.device("cpu")) is not None
    marker = tmp_path / "ran"

    def tampered(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: f"__import__('os').system('touch {marker}') + {item}"
                if key == "expr_str"
                else tampered(item)
                for key, item in value.items()
            }
        return [tampered(item) for item in value] if isinstance(value, list) else value

    with (
        zipfile.ZipFile(tmp_path / "twice.pt2") as source,
        zipfile.ZipFile(tmp_path / "evil.pt2", "w") as evil,
    ):
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith(".json") and b"expr_str" in data:
                data = json.dumps(tampered(json.loads(data))).encode()
            evil.writestr(info, data)

    with pytest.raises(PredictorError, match="is not an expression of sizes"):
        load_program(tmp_path / "evil.pt2", torch.device("cpu"))
    assert not marker.exists()
