"""Custom processing code that takes every output of the model by name, and that reads files its
manifest names (`code_files`): real ONNX models built here, run through the evaluation loop in
this process as a predictor container runs it (`custom_code=True`), the sandbox's refusals, the
container's end of the files (the relay), and the hub's limits on the files at upload."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnx
import onnxruntime
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from onnx import TensorProto, helper
from PIL import Image

from predictors import manifests
from predictors.agent.relay import FILES_MOUNT, JobCalls, Relay, RunFolders
from predictors.evaluation import EvaluationError
from predictors.manifests import Manifest
from predictors.processing import custom_code
from predictors.processing.custom_code import CustomCodeError
from predictors.protocol import Job, JobOptions, ManifestRef
from predictors.tasks import trace_level_problem, unsupported
from tests.predictors.conftest import RunEvaluation

Test = TypeVar("Test", bound=Callable[..., Any])


def _free(test: Test) -> Test:
    """A test of the loop and the sandbox (all but the hub's upload, at the end): it needs the
    framework stack and touches no database."""
    marked: Test = pytest.mark.frameworks(pytest.mark.database_free(test))
    return marked


LABELS = [i % 3 for i in range(10)]  # 0 1 2 0 1 2 0 1 2 0
LEVELS = (20, 120, 220)  # the gray level of each class: dark, mid, bright
# Each class's mean pixel after the manifest's normalization ((level / 255 - 0.5) / 0.5).
MEANS = np.array([(level / 255 - 0.5) / 0.5 for level in LEVELS], np.float32)
NAMESPACE = "models/twohead/1.0.0"

DATASET = """
kind: dataset
name: grays
version: 1.0.0
description: Ten 4x4 gray PNG images in three gray levels.
license: MIT
task: image_classification
format: parquet
encoding: png
labels: [dark, mid, bright]
splits:
  validation:
    path: repo://datasets/grays/1.0.0/validation.parquet
    count: 10
"""

IMAGE = {
    "decoder": "pillow",
    "jpeg_dct_method": "islow",
    "color_mode": "GRAY",
    "layout": "NCHW",
    "resize_method": "nearest",
    "resize_size": None,
    "keep_aspect_ratio": False,
    "crop_method": "none",
    "crop_size": None,
    "element_type": "float32",
    "normalization_order": "convert_then_normalize",
    "scale": 255.0,
    "mean": [0.5],
    "std": [0.5],
}


def _two_heads() -> bytes:
    """A gray-level classifier whose logits come in two halves, neither right alone: `a` favours
    mid by 5, `b` takes those 5 back and adds the rest; a + b is -(x - mean)² per class, less
    the x² that all classes share (x: the image's mean pixel)."""
    slope = helper.make_tensor("slope", TensorProto.FLOAT, [1, 3], (2 * MEANS).tolist())
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [1, 3], [0.0, 0.0, 0.0])
    bias_a = helper.make_tensor("bias_a", TensorProto.FLOAT, [3], [0.0, 5.0, 0.0])
    bias_b = helper.make_tensor(
        "bias_b", TensorProto.FLOAT, [3], (np.array([0, -5, 0]) - MEANS**2).tolist()
    )
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["image"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["x"]),
            helper.make_node("MatMul", ["x", "slope"], ["ax"]),
            helper.make_node("Add", ["ax", "bias_a"], ["a"]),
            helper.make_node("MatMul", ["x", "zero"], ["bx"]),
            helper.make_node("Add", ["bx", "bias_b"], ["b"]),
        ],
        "two-heads",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 3]),
        ],
        [slope, zero, bias_a, bias_b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _model(**extra: Any) -> Manifest:
    """The two-headed model's manifest: `a` is the scored output (logits), `b` a tensor."""
    data: dict[str, Any] = {
        "kind": "model",
        "name": "twohead",
        "version": "1.0.0",
        "description": "Logits in two halves that custom code adds up.",
        "license": "MIT",
        "task": "image_classification",
        "framework": {"name": "onnxruntime", "version": "*"},
        "inputs": [{"name": "image", "type": "image", "parameters": dict(IMAGE)}],
        "outputs": [
            {
                "name": "a",
                "type": "logits",
                "parameters": {"top_k": 2, "labels": ["dark", "mid", "bright"]},
            },
            {"name": "b", "type": "tensor"},
        ],
        "model": {"graph_path": f"repo://{NAMESPACE}/twohead.onnx"},
        **extra,
    }
    return manifests.load(yaml.safe_dump(data), kind="model")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    images = []
    for label in LABELS:
        buffer = io.BytesIO()
        Image.new("L", (4, 4), LEVELS[label]).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    split = tmp_path / "datasets/grays/1.0.0/validation.parquet"
    split.parent.mkdir(parents=True)
    table = pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(LABELS)})
    pq.write_table(table, split)
    graph = tmp_path / NAMESPACE / "twohead.onnx"
    graph.parent.mkdir(parents=True)
    graph.write_bytes(_two_heads())
    return tmp_path


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "dataset": manifests.load(DATASET),
        "batch_sizes": (1, 4),
        "warmup": 1,
        "repeat": 2,
        "threads": 1,
        "custom_code": True,
    }


def _by_hand(store: Path) -> tuple[np.ndarray, np.ndarray]:
    """The model's two outputs for the split's images, run by ONNX Runtime directly on the
    pixels normalized as the manifest says."""
    pixels = np.stack(
        [np.full((1, 4, 4), (LEVELS[label] / 255 - 0.5) / 0.5, np.float32) for label in LABELS]
    )
    session = onnxruntime.InferenceSession(
        str(store / NAMESPACE / "twohead.onnx"), providers=["CPUExecutionProvider"]
    )
    a, b = session.run(["a", "b"], {"image": pixels})
    return a, b


# -- every output by name ---------------------------------------------------------------------

ADD = """
def postprocess(outputs):
    assert isinstance(outputs, dict), type(outputs)
    assert list(outputs) == ["a", "b"], list(outputs)
    return outputs["a"] + outputs["b"]
"""


@_free
def test_postprocess_gets_every_output_by_name_and_scores_what_it_makes_of_them(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    evaluation = run_evaluation(_model(postprocess=ADD))

    a, b = _by_hand(store)
    scores = a + b
    truth = np.asarray(LABELS)
    # Neither half is right alone (each says "mid" for every image); the sum is.
    assert float(np.mean(a.argmax(axis=1) == truth)) == pytest.approx(0.3)
    assert float(np.mean(b.argmax(axis=1) == truth)) == pytest.approx(0.3)
    expected_top1 = float(np.mean(scores.argmax(axis=1) == truth))
    assert expected_top1 == 1.0
    for entry in evaluation.result["batch_sizes"]:
        assert entry["accuracy"]["top1"] == pytest.approx(expected_top1)
    np.testing.assert_allclose(evaluation.outputs, scores, rtol=1e-6, atol=1e-6)
    assert [row[0][0] for row in evaluation.predictions] == scores.argmax(axis=1).tolist()
    assert [row[0][1] for row in evaluation.predictions] == [
        ("dark", "mid", "bright")[label] for label in LABELS
    ]
    # The calls computed both outputs: not the one-output calls the tracing calibration times.
    assert evaluation.result["trace"]["overhead"]["measured"] is False


@_free
def test_one_output_besides_states_still_reaches_postprocess_as_an_array(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    """The rule of one output is as it was: postprocess takes the scored output's batch."""
    model = _model(postprocess="def postprocess(outputs):\n    return outputs[:, ::-1]\n")
    data = dict(model.data)
    data["outputs"] = data["outputs"][:1]
    one = manifests.load(yaml.safe_dump(data), kind="model")
    assert custom_code.named_outputs(one.data) == []
    a, _ = _by_hand(store)
    evaluation = run_evaluation(one, batch_sizes=(4,))
    np.testing.assert_allclose(evaluation.outputs, a[:, ::-1], rtol=1e-6, atol=1e-6)


@_free
def test_the_rule_of_outputs_by_name() -> None:
    assert custom_code.named_outputs(_model(postprocess=ADD).data) == ["a", "b"]
    # Without postprocess code the loop reads the scored output alone; an output of type
    # tensor beside it is computed and not read.
    assert custom_code.named_outputs(_model().data) == []
    assert "declares" not in (unsupported(_model(postprocess=ADD).data) or "")
    assert unsupported(_model().data) is None
    stated = dict(_model().data)
    stated["outputs"] = [*stated["outputs"], {"name": "c", "type": "state"}]
    assert "constant or state inputs or state outputs" in (unsupported(stated) or "")
    # The first output read is the scored one: its type must be one the task scores.
    data = dict(_model(postprocess=ADD).data)
    data["outputs"] = [data["outputs"][1], data["outputs"][0]]
    assert "output b is tensor" in (unsupported(data) or "")


@_free
def test_a_tensor_output_beside_the_scored_one_is_not_read(run_evaluation: RunEvaluation) -> None:
    """Without code the loop reads `a` alone (half the logits), and runs."""
    evaluation = run_evaluation(_model(), batch_sizes=(2,), repeat=1)
    added = run_evaluation(_model(postprocess=ADD), batch_sizes=(2,), repeat=1)
    assert evaluation.outputs.shape == added.outputs.shape
    assert evaluation.result["accuracy"]["count"] == added.result["accuracy"]["count"]
    assert not np.allclose(evaluation.outputs, added.outputs)


@_free
def test_layers_of_calls_that_compute_several_outputs_are_traced_in_onnx_runtime(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(
        _model(postprocess=ADD), batch_sizes=(2,), repeat=1, trace_level="framework"
    )
    levels = evaluation.result["trace"]["levels"]
    assert levels.get("framework", 0) > 0, levels
    assert evaluation.result["accuracy"]["top1"] == 1.0
    # PyTorch and TensorFlow trace one-output calls: refused before a run (and at launch).
    data = {**_model(postprocess=ADD).data, "framework": {"name": "pytorch", "version": "*"}}
    problem = trace_level_problem(data, "framework")
    assert problem == (
        "trace level framework: twohead 1.0.0's custom postprocess takes its outputs by name "
        "(a, b), and the pytorch predictor traces the layers of one-output calls only; ask for "
        "trace level model or coarser (ONNX Runtime traces them)"
    )
    assert trace_level_problem(data, "model") is None
    assert trace_level_problem(_model(postprocess=ADD).data, "framework") is None


# -- files the code reads ------------------------------------------------------------------------

CHARSET = """
def postprocess(outputs):
    with open(files["charset.txt"], encoding="utf-8") as charset:
        classes = charset.read().split()
    scores = outputs["a"] + outputs["b"]
    # The model's classes in the order the file lists them, put in the dataset's order.
    return scores[:, [classes.index(name) for name in ("dark", "mid", "bright")]]
"""


def _with_charset(store: Path, text: str, code: str = CHARSET) -> Manifest:
    (store / NAMESPACE / "charset.txt").write_text(text, encoding="utf-8")
    return _model(
        postprocess=code,
        code_files=[{"name": "charset.txt", "path": f"repo://{NAMESPACE}/charset.txt"}],
    )


@_free
@pytest.mark.parametrize(
    ("charset", "top1"),
    [
        ("dark\nmid\nbright\n", 1.0),  # the model's own order: every image right
        ("bright\nmid\ndark\n", 0.3),  # dark and bright swapped: only the mid images right
    ],
)
def test_custom_code_reads_a_file_its_manifest_names(
    store: Path, run_evaluation: RunEvaluation, charset: str, top1: float
) -> None:
    evaluation = run_evaluation(_with_charset(store, charset), batch_sizes=(4,))
    assert evaluation.result["accuracy"]["top1"] == pytest.approx(top1)
    a, b = _by_hand(store)
    order = [charset.split().index(name) for name in ("dark", "mid", "bright")]
    np.testing.assert_allclose(evaluation.outputs, (a + b)[:, order], rtol=1e-6, atol=1e-6)


@_free
def test_the_files_mapping_is_read_only_names_each_file_and_is_there_when_the_code_loads(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    code = (
        "with open(files['charset.txt'], encoding='utf-8') as charset:\n"
        "    CLASSES = charset.read().split()\n"
        "def postprocess(outputs):\n"
        "    assert dict(files) == {'charset.txt': files['charset.txt']}\n"
        "    try:\n"
        "        files['other'] = '/etc/passwd'\n"
        "    except TypeError:\n"
        "        order = [CLASSES.index(name) for name in ('dark', 'mid', 'bright')]\n"
        "        return (outputs['a'] + outputs['b'])[:, order]\n"
        "    raise AssertionError('files could be changed')\n"
    )
    model = _with_charset(store, "bright mid dark", code)
    evaluation = run_evaluation(model, batch_sizes=(4,))
    assert evaluation.result["accuracy"]["top1"] == pytest.approx(0.3)


@_free
@pytest.mark.parametrize(
    ("write", "words"),
    [
        (
            "open(files['charset.txt'], 'a').write('x')",
            [
                "tried to write",
                "charset.txt, one of the manifest's code files, which are read-only",
            ],
        ),
        (
            "import os\n    os.remove(files['charset.txt'])",
            ["tried to change", "(os.remove), one of the manifest's code files"],
        ),
        (
            "open('/etc/mlms-sandbox-test', 'w')",
            ["tried to write /etc/mlms-sandbox-test outside its sandbox", "only under /tmp"],
        ),
        (
            f"open({str(Path.home() / 'mlms-sandbox-test')!r}, 'w')",
            ["mlms-sandbox-test outside its sandbox"],
        ),
    ],
)
def test_writes_outside_the_sandbox_and_to_the_code_files_are_refused(
    store: Path, run_evaluation: RunEvaluation, write: str, words: list[str]
) -> None:
    code = f"def postprocess(outputs):\n    {write}\n    return outputs['a']\n"
    model = _with_charset(store, "dark mid bright", code)
    with pytest.raises(CustomCodeError) as refused:
        run_evaluation(model, batch_sizes=(4,))
    for word in words:
        assert word in str(refused.value), str(refused.value)
    assert (store / NAMESPACE / "charset.txt").read_text(encoding="utf-8") == "dark mid bright"
    assert not Path("/etc/mlms-sandbox-test").exists()
    assert not (Path.home() / "mlms-sandbox-test").exists()


@_free
def test_a_code_file_over_the_limit_is_refused_by_the_evaluation_naming_it(
    store: Path, run_evaluation: RunEvaluation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An https:// file is measured only once fetched: the evaluation refuses it there."""
    monkeypatch.setattr(custom_code, "MAX_CODE_FILE_BYTES", 8)
    with pytest.raises(EvaluationError, match=r"code_files\.0\.path .*over the limit of 8 bytes"):
        run_evaluation(_with_charset(store, "dark mid bright"), batch_sizes=(4,))


@_free
def test_the_limits_of_the_code_files() -> None:
    mib = 1024 * 1024
    assert custom_code.code_files_problems([(0, 16 * mib), (1, 16 * mib)]) == []
    [(index, problem)] = custom_code.code_files_problems([(0, mib), (3, 16 * mib + 1)])
    assert index == 3 and "over the limit of 16 MiB for one code file" in problem
    # Five files of 15 MiB: the fifth takes them past 64 MiB together.
    [(index, problem)] = custom_code.code_files_problems([(i, 15 * mib) for i in range(5)])
    assert index == 4 and "come to 75 MiB, over the limit of 64 MiB" in problem


# -- the files in a predictor container ----------------------------------------------------------


@_free
def test_a_container_is_given_the_code_files_in_its_read_only_files_folder(
    tmp_path: Path,
) -> None:
    """In a container the evaluation fetches through the agent (`Relay`): a code file is a file
    of the job's manifest, linked into the folder the container sees read-only at FILES_MOUNT,
    and the path it answers is what `files` maps the name to."""
    charset = tmp_path / "cache" / "sha256" / "ab" / "charset.txt"
    charset.parent.mkdir(parents=True)
    charset.write_text("dark mid bright", encoding="utf-8")
    url = f"repo://{NAMESPACE}/charset.txt"
    model = _model(postprocess=ADD, code_files=[{"name": "charset.txt", "path": url}]).source
    job = Job(
        id="0" * 32,
        claim="1" * 32,
        attempt=1,
        device="cpu",
        model=ManifestRef(1, "twohead", "1.0.0", "onnxruntime", "0" * 64, model),
        dataset=ManifestRef(2, "grays", "1.0.0", "", "0" * 64, DATASET),
        options=JobOptions(),
    )
    fetched: list[str] = []

    def fetch(asked: str, sha256: str | None) -> Path:
        fetched.append(asked)
        return charset

    work = RunFolders(tmp_path / "cache", job)
    relay = Relay(job, JobCalls(fetch, lambda done, total: None, lambda: False, None), work)
    try:
        answer = relay.answer({"op": "fetch", "url": url, "sha256": None})
        assert fetched == [url]
        assert answer["path"].startswith(f"{FILES_MOUNT}/")
        assert answer["path"].endswith("-charset.txt")
        linked = work.files / answer["path"].removeprefix(f"{FILES_MOUNT}/")
        assert linked.read_text(encoding="utf-8") == "dark mid bright"
        assert linked.stat().st_mode & 0o004  # the container's user reads it
        with pytest.raises(EvaluationError, match="not a file of this job's manifests"):
            relay.answer({"op": "fetch", "url": f"repo://{NAMESPACE}/other.txt"})
    finally:
        relay._server.close()
        work.remove()


# -- the hub's limits at upload ------------------------------------------------------------------


@pytest.fixture
def artifact_root(tmp_path: Path, settings: Any) -> Path:
    root = tmp_path / "artifacts"
    root.mkdir()
    settings.ARTIFACT_ROOT = root
    return root


@pytest.mark.django_db
def test_the_hub_refuses_a_code_file_over_the_limit_and_keeps_nothing(
    make_user: Any, make_client: Any, artifact_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hub.models import Artifact
    from hub.models import Manifest as Stored
    from tests.hub.factories import model_manifest, to_yaml, upload

    alice = make_client(make_user("alice"))
    monkeypatch.setattr(custom_code, "MAX_CODE_FILE_BYTES", 1024)
    document = model_manifest(name="coded")
    document["postprocess"] = "def postprocess(outputs):\n    return outputs\n"
    document["code_files"] = [
        {"name": "charset.txt", "path": "repo://models/coded/1.0.0/charset.txt"},
        {"name": "vocab.txt", "path": "repo://models/coded/1.0.0/vocab.txt"},
    ]
    files = {"charset.txt": b"dark mid bright", "vocab.txt": b"x" * 1025}
    response = upload(alice, to_yaml(document), files)

    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]
    assert error["path"] == "code_files.1.path"
    assert "over the limit of 1 KiB for one code file" in error["message"], error
    assert not Stored.objects.filter(name="coded").exists()
    assert not Artifact.objects.exists()
    assert not [path for path in artifact_root.rglob("*") if path.is_file()]

    # Within the limit, the same upload is stored with both files.
    files["vocab.txt"] = b"x" * 1024
    response = upload(alice, to_yaml(document), files)
    assert response.status_code == 201, response.content
    stored = sorted(path.name for path in artifact_root.rglob("*") if path.is_file())
    assert stored == ["charset.txt", "vocab.txt"]


# -- every output by name, in streams ------------------------------------------------------------

# Three streams of one-number chunks: a switch is on while their running sum is above 0.5.
STREAMS = [[1.0, 0.0, 0.0, -1.0, 0.0], [0.0, 1.0, 0.0], [1.0, -1.0, 1.0, 0.0]]

STREAM_DATASET = """
kind: dataset
name: sums
version: 1.0.0
description: Streams of numbers whose running sum says whether a switch is on.
license: MIT
task: sequence_labelling
format: parquet
encoding: npy
labels: ["off", "on"]
splits:
  validation:
    path: repo://datasets/sums/1.0.0/validation.parquet
    count: 12
"""


def _summing() -> bytes:
    """A stateful model: its state is the running sum s of its chunks (next_state), and its
    logits come in two halves, `a` = (10.5 - s, s - 0.5) and `b` = (-10, 0): `a` alone says
    off, a + b says on where s is above 0.5."""
    constants = [
        helper.make_tensor(name, TensorProto.FLOAT, [1], [value])
        for name, value in (("c10_5", 10.5), ("c0_5", 0.5), ("cm10", -10.0), ("c0", 0.0))
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["state", "chunk"], ["s"]),
            helper.make_node("Identity", ["s"], ["next_state"]),
            helper.make_node("Sub", ["c10_5", "s"], ["off"]),
            helper.make_node("Sub", ["s", "c0_5"], ["on"]),
            helper.make_node("Concat", ["off", "on"], ["a"], axis=1),
            helper.make_node("Mul", ["s", "c0"], ["zeros"]),
            helper.make_node("Add", ["zeros", "cm10"], ["minus"]),
            helper.make_node("Concat", ["minus", "zeros"], ["b"], axis=1),
        ],
        "summing",
        [
            helper.make_tensor_value_info("chunk", TensorProto.FLOAT, ["N", 1]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, ["N", 1]),
        ],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 2]),
            helper.make_tensor_value_info("next_state", TensorProto.FLOAT, ["N", 1]),
        ],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _summing_model() -> Manifest:
    data: dict[str, Any] = {
        "kind": "model",
        "name": "summing",
        "version": "1.0.0",
        "description": "A running sum, its logits in two halves that custom code adds up.",
        "license": "MIT",
        "task": "sequence_labelling",
        "framework": {"name": "onnxruntime", "version": "*"},
        "inputs": [
            {
                "name": "chunk",
                "type": "tensor",
                "parameters": {"element_type": "float32", "shape": [1]},
            },
            {
                "name": "state",
                "type": "state",
                "parameters": {
                    "element_type": "float32",
                    "shape": [1],
                    "batch_axis": 0,
                    "initial": 0.0,
                    "from_output": "next_state",
                },
            },
        ],
        "outputs": [
            {"name": "a", "type": "logits", "parameters": {"top_k": 2, "labels": ["off", "on"]}},
            {"name": "b", "type": "tensor"},
            {"name": "next_state", "type": "state", "parameters": {"batch_axis": 0}},
        ],
        "model": {"graph_path": "repo://models/summing/1.0.0/summing.onnx"},
        "postprocess": ADD,
    }
    return manifests.load(yaml.safe_dump(data), kind="model")


@_free
def test_a_stream_models_outputs_reach_postprocess_by_name_beside_its_carried_state(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    rows = []
    for number, stream in enumerate(STREAMS):
        for position, value in enumerate(stream):
            chunk = io.BytesIO()
            np.save(chunk, np.array([value], np.float32))
            running = sum(stream[: position + 1])
            rows.append((number, position, chunk.getvalue(), int(running > 0.5)))
    split = store / "datasets/sums/1.0.0/validation.parquet"
    split.parent.mkdir(parents=True)
    columns = ("stream", "position", "input", "label")
    pq.write_table(
        pa.table({name: [row[i] for row in rows] for i, name in enumerate(columns)}), split
    )
    graph = store / "models/summing/1.0.0/summing.onnx"
    graph.parent.mkdir(parents=True)
    graph.write_bytes(_summing())

    evaluation = run_evaluation(
        _summing_model(), dataset=manifests.load(STREAM_DATASET), batch_sizes=(1, 2)
    )

    truth = [row[3] for row in rows]
    # The running sum carried from call to call: every chunk right, at both batch sizes.
    assert [entry["accuracy"]["top1"] for entry in evaluation.result["batch_sizes"]] == [1.0, 1.0]
    # Reset at every call, the sum is the chunk's own value.
    alone = [int(value > 0.5) for stream in STREAMS for value in stream]
    expected = float(np.mean(np.asarray(alone) == np.asarray(truth)))
    assert expected == pytest.approx(8 / 12)
    assert evaluation.result["accuracy_state_reset"]["top1"] == pytest.approx(expected)
    # The kept outputs are the probabilities of a + b = (0.5 - s, s - 0.5).
    sums = np.array([sum(stream[: i + 1]) for stream in STREAMS for i in range(len(stream))])
    logits = np.stack([0.5 - sums, sums - 0.5], axis=1)
    softmax = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(evaluation.outputs, softmax, rtol=1e-5, atol=1e-6)
