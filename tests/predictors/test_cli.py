"""`mlms evaluate`: the JSON report, the table, and one-line errors with a non-zero status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from predictors.cli import main
from tests.predictors.zoo_store import REPO_ROOT, zoo_store


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn", "shapes-color"))


def evaluate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["evaluate", *argv, "--no-progress"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def fails(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status, out, err = evaluate(capsys, *argv)
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("mlms: error: "), err
    return status, err


@pytest.mark.frameworks
def test_json_report_has_every_field(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = evaluate(
        capsys,
        "digits-cnn",
        "--framework", "pytorch,onnxruntime",
        "--dataset", "digits:validation",
        "--batch-sizes", "1,8",
        "--limit", "40",
        "--repeat", "2",
        "--warmup", "3",
        "--threads", "1",
        "--seed", "7",
        "--store", str(store),
        "--format", "json",
    )  # fmt: skip
    assert status == 0, err
    report = json.loads(out)

    assert [r["framework"]["name"] for r in report["results"]] == ["pytorch", "onnxruntime"]
    for result in report["results"]:
        assert result["model"]["name"] == "digits-cnn" and result["model"]["version"] == "1.0.0"
        assert result["dataset"] == {
            "name": "digits",
            "version": "1.0.0",
            "split": "validation",
            "count": 40,
            "split_count": 360,
        }
        assert set(result["accuracy"]) == {"top1", "top5", "count"}
        assert result["accuracy"]["top1"] >= 0.9
        assert result["clock"] == "perf_counter (host wall clock)"
        assert result["settings"]["intra_op_threads"] == 1
        assert result["settings"]["seed"] == 7
        assert result["framework"]["version"]
        assert [b["batch_size"] for b in result["batch_sizes"]] == [1, 8]
        for entry in result["batch_sizes"]:
            latency = entry["latency"]
            for key in ("mean_ms", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "std_ms"):
                assert latency[key] >= 0
            assert latency["min_ms"] <= latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
            assert latency["count"] == 2 * 40 // entry["batch_size"]
            assert entry["throughput_ips"] > 0
            assert entry["timed_inputs"] == 80
            assert (entry["warmup"], entry["repeat"]) == (3, 2)
        trace = result["trace"]
        assert trace["level"] == "model" and trace["levels"]["model"] == 2 * (40 + 5)
        assert trace["spans"] == sum(trace["levels"].values())
    (comparison,) = report["comparisons"]
    assert comparison["frameworks"] == ["pytorch", "onnxruntime"]
    assert comparison["count"] == 40
    assert comparison["top1_agreement"] == 1.0
    assert comparison["max_abs_diff"] < 1e-3
    stack = report["stack"]
    assert stack["cpu"]["logical_cores"] >= 1 and stack["memory_bytes"] > 0
    assert stack["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert stack["frameworks"]["pytorch"] and stack["frameworks"]["onnxruntime"]
    assert set(stack) >= {"os", "architecture", "gpus", "numpy", "container"}


@pytest.mark.frameworks
def test_table_and_overrides(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ("shapes-color", "--framework", "onnxruntime", "--dataset", "shapes-color")
    common = ("--store", str(store), "--limit", "90", "--batch-sizes", "30")
    status, out, _ = evaluate(capsys, *base, *common)
    assert status == 0
    assert "onnxruntime" in out and "top1" in out and "inputs/s" in out
    row = next(line for line in out.splitlines() if line.startswith("onnxruntime "))
    baseline = float(row.split()[3].rstrip("%"))

    override = "inputs.0.parameters.color_mode=BGR"
    status, out, _ = evaluate(capsys, *base, *common, "--set", override)
    assert status == 0
    assert f"overrides: {override}" in out
    row = next(line for line in out.splitlines() if line.startswith("onnxruntime "))
    assert float(row.split()[3].rstrip("%")) <= baseline - 30


def test_a_label_mismatch_is_refused_unless_allowed(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("digits-cnn", "--framework", "onnxruntime", "--dataset", "shapes-color")
    common = ("--store", str(store), "--limit", "9")
    code, err = fails(capsys, *argv, *common)
    assert code == 1
    assert "model digits-cnn 1.0.0 has 10 labels [0, 1, 2, 3, …, 8, 9]" in err
    assert "dataset shapes-color 1.0.0 has 9 labels [red-circle, red-square" in err
    assert "--allow-label-mismatch" in err
    status, out, err = evaluate(
        capsys, *argv, *common, "--allow-label-mismatch", "--format", "json"
    )
    assert status == 0, err
    (result,) = json.loads(out)["results"]
    assert any(note.startswith("labels differ: model digits-cnn") for note in result["notes"])


def test_unknown_model_and_bad_batch_sizes_are_one_line_from_the_command() -> None:
    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "predictors.cli", "evaluate", *argv],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    result = cli("digits-cnm", "--framework", "pytorch", "--dataset", "digits")
    assert result.returncode == 1
    assert result.stdout == ""
    assert (
        result.stderr.splitlines() == [result.stderr.strip()]
        and "unknown model 'digits-cnm'" in result.stderr
    )
    assert "did you mean digits-cnn?" in result.stderr

    result = cli(
        "digits-cnn", "--framework", "pytorch", "--dataset", "digits", "--batch-sizes", "1,x"
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "mlms: error: --batch-sizes: 'x' is not a positive integer (write e.g. 1,32)"
    )


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["--framework", "mxnet"], 2, "--framework: unknown framework 'mxnet' (known: "),
        (["--version", ">=2"], 1, "no version of digits-cnn satisfies '>=2' (versions: 1.0.0)"),
        (["--version", "not a range"], 1, "'not a range' is not a valid version range"),
        (["--batch-sizes", "0"], 2, "--batch-sizes: '0' is not a positive integer"),
        (["--batch-sizes", "4,4"], 2, "names a batch size twice"),
        (["--limit", "0"], 2, "argument --limit: 0 is less than 1"),
        (["--trace-level", "kernels"], 2, "argument --trace-level: invalid choice: 'kernels'"),
        (["--dataset", "digits:test"], 1, "dataset digits 1.0.0 has no split 'test'"),
        (["--dataset", "digitz"], 1, "unknown dataset 'digitz'"),
        (
            ["--set", "inputs.0.parameters.colour_mode=BGR"],
            1,
            "--set on digits-cnn 1.0.0 (pytorch): inputs.0.parameters",
        ),
        (["--set", "inputs.3.parameters.color_mode=BGR"], 1, "no item 'inputs.3' to override"),
        (["--set", "inputs.0.parameters.layout=NWHC"], 1, "inputs.0.parameters.layout"),
        (["--set", "color_mode"], 1, "expected PATH=VALUE"),
        (["--device", "tpu"], 1, "device must be cpu, cuda or cuda:N"),
    ],
)
def test_user_errors_are_one_line(
    store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], status: int, message: str
) -> None:
    base = ["digits-cnn", "--framework", "pytorch", "--dataset", "digits", "--store", str(store)]
    code, err = fails(capsys, *base, *argv)
    assert code == status
    assert message in err


def test_a_missing_artifact_says_how_to_build_the_zoo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["digits-cnn", "--framework", "onnxruntime", "--dataset", "digits"]
    code, err = fails(capsys, *argv, "--store", str(tmp_path))
    assert code == 1
    assert "repo://models/digits-cnn/1.0.0/digits-cnn.onnx" in err
    assert f"is not in the artifact store {tmp_path}" in err
    assert f"python -m predictors.zoo build --store {tmp_path}" in err


@pytest.mark.frameworks
def test_cuda_without_a_device_is_one_line(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    argv = ["digits-cnn", "--framework", "pytorch", "--dataset", "digits", "--device", "cuda"]
    code, err = fails(capsys, *argv, "--store", str(store))
    assert code == 1
    assert "pytorch cannot use cuda: torch.cuda.is_available() is false" in err


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--trace-file", "t.json"], "--trace-file"),
        (["--graph-optimization", "none"], "--graph-optimization"),
        (["--store", "somewhere"], "--store"),
        (["--device", "cuda:1"], "--device"),
        (["--repeat", "0"], "--repeat"),
        (["--trace-level", "everything"], "--trace-level"),
    ],
)
def test_a_flag_the_hub_cannot_honour_is_refused_before_anything_is_sent(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    # Nothing listens at the hub's address: a refusal comes before any request.
    argv = ["digits-cnn", "--framework", "onnxruntime", "--dataset", "digits:validation"]
    status, err = fails(capsys, *argv, "--hub", "http://127.0.0.1:9", "--token", "mlms_x", *extra)
    assert status == 2, err
    assert flag in err


def test_the_history_marks_results_of_untrained_models() -> None:
    from predictors.cli.history import _detail, _listing

    def evaluation(name: str, untrained: bool) -> dict:
        return {
            "id": f"{name:0<32}",
            "model": {"name": name, "version": "1.0.0"},
            "framework": "onnxruntime",
            "framework_version": "1.31.1",
            "dataset": {"name": "digits", "version": "1.0.0", "split": "validation"},
            "device": "cpu",
            "host": "h",
            "status": "succeeded",
            "user": "alice",
            "created_at": "2026-11-25T12:00:00Z",
            "untrained": untrained,
            "accuracy": {"top1": 0.1, "top5": 0.5, "count": 360},
        }

    table = _listing({"results": [evaluation("resnet", True), evaluation("digits", False)]}, None)
    marked = [line for line in table.splitlines() if "(not trained)" in line]
    assert len(marked) == 1 and "resnet" in marked[0]
    seeded = evaluation("resnet", True)
    seeded["result"] = {"accuracy": seeded["accuracy"], "latency": {}, "throughput": {}}
    assert "marked not trained" in _detail(seeded)
