"""Repeat studies (`predictors.evaluation.study`, `mlms study`): runs in fresh processes, each metric's
mean, standard deviation and 95 % confidence interval, and the bitwise-determinism verdict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from predictors.cli import main
from predictors.evaluation import EvaluationOptions
from predictors.evaluation.study import run_study, summarize
from predictors.manifests.catalog import Catalog
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn",))


@pytest.mark.frameworks
def test_a_study_runs_each_run_in_a_fresh_process_and_reports_its_statistics(
    store: Path,
) -> None:
    catalog = Catalog()
    model = catalog.find_model("digits-cnn", "*", "onnxruntime")
    dataset = catalog.find_dataset("digits")
    options = EvaluationOptions(batch_sizes=(1, 8), limit=48, warmup=1)
    report = run_study(model, dataset, options, store, runs=3, threads=[1, 2], seeds=[0])
    assert [(g["threads"], g["seed"]) for g in report["groups"]] == [(1, 0), (2, 0)]
    for group in report["groups"]:
        assert group["runs"] == 3 and group["processes"] == 3  # a fresh process per run
        for values in group["metrics"].values():
            runs = np.array(values["values"])
            assert runs.size == 3
            assert values["mean"] == pytest.approx(runs.mean())
            assert values["std"] == pytest.approx(runs.std(ddof=1))
            half = stats.t.ppf(0.975, 2) * runs.std(ddof=1) / np.sqrt(3)
            assert values["ci95"] == pytest.approx(half)
        assert set(group["metrics"]) >= {"top1", "p50_ms@1", "p50_ms@8", "throughput_ips@8"}
        # ONNX Runtime on the CPU at a fixed thread count: the same bits every run.
        assert group["bitwise_identical"] and len(group["output_hashes"]) == 1
        assert group["flipped_inputs"] == 0
        assert group["metrics"]["top1"]["std"] == 0.0


def test_runs_whose_outputs_differ_name_the_inputs_that_flip() -> None:
    def run(sha: str, classes: list[int], p50: float) -> dict:
        return {
            "pid": len(sha),
            "metrics": {"top1": 0.5, "p50_ms@1": p50},
            "outputs_sha256": sha,
            "top1_classes": np.array(classes),
            "hygiene": ["spread"] if p50 > 1.1 else [],
        }

    group = summarize(
        [run("a", [0, 1, 2], 1.0), run("b", [0, 2, 2], 1.2), run("a", [0, 1, 2], 1.1)]
    )
    assert not group["bitwise_identical"] and group["output_hashes"] == ["a", "b"]
    assert group["flipped_inputs"] == 1 and group["flipped_first"] == [1]
    assert group["metrics"]["p50_ms@1"]["mean"] == pytest.approx(1.1)
    assert group["hygiene"] == ["spread"]


def test_the_command_prints_each_groups_verdict_and_statistics(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["study", "digits-cnn", "--framework", "onnxruntime", "--dataset", "digits"]
    common = ["--store", str(store), "--runs", "2", "--threads", "1", "--limit", "32"]
    assert main([*argv, *common, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 runs per group, each in a fresh process" in out
    assert "threads 1, seed 0: outputs bitwise identical in all 2 runs" in out
    assert "95% CI" in out and "p50_ms@1" in out
    assert main([*argv, *common, "--framework", "onnxruntime,pytorch"]) == 2
    assert "a study runs one framework" in capsys.readouterr().err


def test_each_device_is_compared_with_the_first_input_by_input() -> None:
    from predictors.evaluation.study import across_devices

    cpu = np.array([[0.9, 0.1], [0.4, 0.6], [0.7, 0.3]], dtype=np.float32)
    gpu = cpu + np.array([[0.0, 0.0], [0.2, -0.2], [0.0, 1e-3]], dtype=np.float32)
    (entry,) = across_devices({("cpu", 1, 0): cpu, ("cuda", 1, 0): gpu, ("cpu", 2, 0): cpu})
    assert entry["devices"] == ["cpu", "cuda"] and (entry["threads"], entry["seed"]) == (1, 0)
    assert entry["flipped_inputs"] == 1 and entry["flipped_first"] == [1]
    assert entry["top1_agreement"] == pytest.approx(2 / 3)
    assert entry["max_abs_diff"] == pytest.approx(0.2)
    assert entry["bitwise_identical"] is False
    assert across_devices({("cpu", None, 0): cpu}) == []


def test_text_recognizers_are_compared_by_their_texts_across_runs_and_devices() -> None:
    """A text recognizer's prediction is its decoded text: runs flip where their texts differ,
    and emitted token ids (of other lengths on two devices) are compared by their texts, with
    no difference of ids reported."""
    from predictors.evaluation.study import across_devices

    def run(sha: str, texts: list[str]) -> dict:
        return {
            "pid": 1,
            "metrics": {"top1": 0.1},
            "outputs_sha256": sha,
            "top1_classes": np.array(texts, dtype=object),
            "hygiene": [],
        }

    group = summarize([run("a", ["hello", "world"]), run("b", ["hello", "word"])])
    assert group["flipped_inputs"] == 1 and group["flipped_first"] == [1]
    cpu = np.array([[2, 4, 3, -1], [2, 5, 3, -1]], np.float32)
    gpu = np.array([[2, 4, 3], [2, 6, 3]], np.float32)
    texts = {
        ("cpu", 1, 0): np.array(["hello", "world"], dtype=object),
        ("cuda", 1, 0): np.array(["hello", "the"], dtype=object),
    }
    (entry,) = across_devices({("cpu", 1, 0): cpu, ("cuda", 1, 0): gpu}, texts, ids=True)
    assert entry["max_abs_diff"] is None and entry["bitwise_identical"] is False
    assert entry["flipped_inputs"] == 1 and entry["top1_agreement"] == 0.5
    assert entry["flipped_first"] == [1]


def test_a_device_this_host_lacks_is_refused_naming_it(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["study", "digits-cnn", "--framework", "pytorch", "--dataset", "digits"]
    common = ["--store", str(store), "--runs", "2", "--limit", "8", "--no-progress"]
    assert main([*argv, *common, "--device", "cpu,cpu"]) == 2
    assert "names a device twice" in capsys.readouterr().err
    assert main([*argv, *common, "--device", "cpu,tpu"]) == 2
    assert "--device:" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(
    not __import__("importlib").util.find_spec("torch")
    or not __import__("torch").cuda.is_available(),
    reason="needs a CUDA device",
)
def test_pytorch_on_the_cpu_and_the_gpu_input_by_input(store: Path) -> None:
    """digits-cnn in PyTorch, two runs on each device: each device's determinism, and the GPU's
    outputs against the CPU's input by input."""
    catalog = Catalog()
    model = catalog.find_model("digits-cnn", "*", "pytorch")
    dataset = catalog.find_dataset("digits")
    options = EvaluationOptions(batch_sizes=(8,), limit=64, warmup=1)
    report = run_study(
        model, dataset, options, store, runs=2, threads=[1], seeds=[0], devices=["cpu", "cuda"]
    )
    assert [g["device"] for g in report["groups"]] == ["cpu", "cuda"]
    (entry,) = report["across_devices"]
    assert entry["devices"] == ["cpu", "cuda"] and entry["inputs"] == 64
    assert entry["top1_agreement"] >= 0.98 and entry["max_abs_diff"] < 1e-2
