"""MLPerf LoadGen scenarios after the fixed batches (`predictors.evaluation.loadgen`), run by the
real LoadGen on the zoo's digits-cnn: its summary and log kept with the result, the accuracy
run scored as the fixed batches score, the QPS search's curve, and the options refused where
they would do nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from predictors.cli import main
from predictors.evaluation import EvaluationError, EvaluationOptions
from predictors.evaluation.loadgen import parse_summary
from predictors.protocol import JobOptions, ProtocolError, loadgen_problem
from tests.predictors.conftest import RunEvaluation, _catalog
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

FAST = {"min_duration_ms": 100, "min_query_count": 64}


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn",))


@pytest.fixture
def evaluation_defaults(evaluation_defaults: dict[str, object]) -> dict[str, object]:
    return {**evaluation_defaults, "framework": "onnxruntime", "limit": 48}


def test_single_stream_keeps_loadgens_summary_and_log(run_evaluation: RunEvaluation) -> None:
    result = run_evaluation(scenario="single_stream", seed=7, **FAST).result
    loadgen = result["loadgen"]
    summary = loadgen["summary"]
    assert summary["Scenario"] == "SingleStream" and summary["Mode"] == "PerformanceOnly"
    assert loadgen["valid"] is (summary["Result is"] == "VALID")
    assert "90.00 percentile latency (ns)" in summary
    # LoadGen sent at least the queries asked for, one sample each, all run on the model.
    assert loadgen["calls"] >= 64
    assert int(summary["min_query_count"]) == 64
    assert summary["qsl_rng_seed"] == summary["schedule_rng_seed"] == "7"
    assert loadgen["settings"]["samples"] == 48
    assert "MLPerf Results Summary" in loadgen["summary_text"]
    assert "loadgen_version" in loadgen["log"] or ":::MLLOG" in loadgen["log"]
    assert result["options"]["scenario"] == "single_stream"


def test_multi_stream_runs_queries_of_several_samples(run_evaluation: RunEvaluation) -> None:
    loadgen = run_evaluation(scenario="multi_stream", samples_per_query=4, **FAST).result["loadgen"]
    assert loadgen["summary"]["Scenario"] == "MultiStream"
    assert loadgen["summary"]["samples_per_query"] == "4"
    assert loadgen["settings"]["samples_per_query"] == 4


def test_an_offline_accuracy_run_scores_as_the_fixed_batches_do(
    run_evaluation: RunEvaluation,
) -> None:
    """Every sample sent once, in batches of the largest batch size: the same top-1 as the
    fixed batches on the same inputs, and no performance verdict."""
    result = run_evaluation(
        scenario="offline", loadgen_mode="accuracy", batch_sizes=(1, 8), **FAST
    ).result
    loadgen = result["loadgen"]
    assert "Result is" not in loadgen["summary"]
    assert loadgen["valid"] is None
    assert loadgen["accuracy"]["samples"] == 48
    assert loadgen["accuracy"]["top1"] == result["accuracy"]["top1"]
    assert loadgen["settings"]["batch_size"] == 8
    assert loadgen["calls"] == 6  # 48 samples in batches of 8


def test_the_qps_search_walks_a_curve_and_keeps_the_run_at_the_peak(
    run_evaluation: RunEvaluation,
) -> None:
    bound = 20.0
    loadgen = run_evaluation(
        scenario="server", find_peak_qps=True, latency_bound_ms=bound, target_qps=50, **FAST
    ).result["loadgen"]
    search = loadgen["search"]
    curve = search["curve"]
    assert len(curve) >= 2
    assert [p["target_qps"] for p in curve] == sorted(p["target_qps"] for p in curve)
    # LoadGen's own latency verdict agrees with the p99 it reports against the bound.
    for point in curve:
        assert point["latency_held"] == (point["p99_ms"] <= bound)
    held = [p["target_qps"] for p in curve if p["latency_held"]]
    assert search["peak_qps"] == (max(held) if held else None)
    if held:
        assert float(loadgen["summary"]["target_qps"]) == pytest.approx(search["peak_qps"])
    assert loadgen["summary"]["Scenario"] == "Server"


def test_offline_without_a_target_expects_the_fixed_batches_throughput(
    run_evaluation: RunEvaluation,
) -> None:
    """Offline sends expected QPS x minimum duration samples: expecting three times what the fixed
    batches measured, the run lasts its minimum duration."""
    result = run_evaluation(scenario="offline", batch_sizes=(8,), min_duration_ms=300).result
    loadgen = result["loadgen"]
    expected = 3 * result["batch_sizes"][0]["throughput_ips"]
    assert loadgen["settings"]["target_qps"] == pytest.approx(expected, rel=1e-3)
    assert loadgen["settings"]["target_qps_from"] == "fixed batches' throughput x 3"
    assert loadgen["summary"]["Min duration satisfied"] == "Yes"
    assert loadgen["summary"]["Scenario"] == "Offline"


def test_the_sample_library_holds_what_fits_in_the_stage(run_evaluation: RunEvaluation) -> None:
    """A split larger than the loop's stage_bytes is not held whole: the first inputs that fit
    (a digits input is 8x8 float32, 256 bytes), and the settings say so."""
    loadgen = run_evaluation(
        scenario="single_stream", stage_bytes=256 * 10, min_query_count=16, min_duration_ms=100
    ).result["loadgen"]
    assert loadgen["settings"]["samples"] == 10
    assert loadgen["settings"]["samples_capped_at_bytes"] == 2560
    assert int(loadgen["summary"]["performance_sample_count"]) == 10


def test_a_server_accuracy_run_sends_at_the_fixed_batches_rate(
    run_evaluation: RunEvaluation,
) -> None:
    result = run_evaluation(scenario="server", loadgen_mode="accuracy", **FAST).result
    loadgen = result["loadgen"]
    assert loadgen["settings"]["target_qps_from"] == "fixed batches' throughput"
    assert loadgen["settings"]["target_qps"] == pytest.approx(
        result["batch_sizes"][0]["throughput_ips"], rel=1e-3
    )
    assert loadgen["accuracy"]["top1"] == result["accuracy"]["top1"]


def test_parse_summary_reads_the_verdict_and_early_stopping() -> None:
    text = (
        "Scenario : Server\nResult is : INVALID\n  Performance constraints satisfied : Yes\n"
        "Early Stopping Result:\n * Run unsuccessful.\n * Processed 190 queries.\n\n"
        "99.00 percentile latency (ns)   : 2581894\n"
    )
    parsed = parse_summary(text)
    assert parsed["valid"] is False
    assert parsed["values"]["99.00 percentile latency (ns)"] == "2581894"
    assert parsed["early_stopping"] == ["* Run unsuccessful.", "* Processed 190 queries."]
    assert parse_summary("Mode : AccuracyOnly\n")["valid"] is None


@pytest.mark.parametrize(
    ("options", "field", "message"),
    [
        ({"target_qps": 5.0}, "target_qps", "scenario is fixed"),
        ({"min_query_count": 500}, "min_query_count", "scenario is fixed"),
        ({"scenario": "server", "target_qps": 5.0}, "latency_bound_ms", "needs the latency"),
        ({"scenario": "server", "latency_bound_ms": 5.0}, "target_qps", "needs a target QPS"),
        ({"scenario": "offline", "latency_bound_ms": 5.0}, "latency_bound_ms", "offline"),
        ({"scenario": "single_stream", "samples_per_query": 4}, "samples_per_query", "single"),
        (
            {"scenario": "offline", "find_peak_qps": True},
            "find_peak_qps",
            "does not apply to scenario offline",
        ),
        (
            {
                "scenario": "server",
                "find_peak_qps": True,
                "latency_bound_ms": 5.0,
                "loadgen_mode": "accuracy",
            },
            "find_peak_qps",
            "performance mode only",
        ),  # fmt: skip
    ],
)
def test_options_that_would_do_nothing_are_refused_naming_them(
    options: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ProtocolError) as refused:
        JobOptions.from_dict(options)
    assert refused.value.path == f"options.{field}" and message in refused.value.message
    with pytest.raises(EvaluationError, match=field):
        EvaluationOptions(**options)  # type: ignore[arg-type]


def test_models_loadgen_cannot_drive_are_refused() -> None:
    gru = _catalog().find_model("toggle-gru", "*", "onnxruntime").data
    assert "state or constant inputs" in (loadgen_problem(gru, "server") or "")
    detector = _catalog().find_model("shapes-detector", "*", "onnxruntime").data
    assert "object_detection" in (loadgen_problem(detector, "offline") or "")
    tagger = _catalog().find_model("shapes-tagger", "*", "onnxruntime").data
    assert loadgen_problem(tagger, "offline") is None
    assert "accuracy scores image classification" in (
        loadgen_problem(tagger, "offline", "accuracy") or ""
    )
    assert loadgen_problem(gru, "fixed") is None


def test_mlms_evaluate_prints_loadgens_summary_and_refuses_misplaced_flags(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["digits-cnn", "--framework", "onnxruntime", "--dataset", "digits", "--limit", "16",
              "--store", str(store), "--no-progress"]  # fmt: skip
    argv = ["evaluate", *common, "--scenario", "server", "--target-qps", "40",
            "--latency-bound", "50", "--min-duration-ms", "200", "--min-query-count", "16"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "LoadGen server (onnxruntime, performance mode, 16 samples):" in out
    assert "MLPerf Results Summary" in out and "Scenario : Server" in out
    assert "target_qps : 40" in out

    assert main(["evaluate", *common, "--target-qps", "3"]) == 2
    assert "--target-qps: applies to a LoadGen scenario" in capsys.readouterr().err
    assert main(["evaluate", *common, "--scenario", "server", "--target-qps", "3"]) == 2
    assert "--latency-bound-ms: scenario server needs" in capsys.readouterr().err
    assert main(["evaluate", *common, "--scenario", "offline", "--target-qps", "nan"]) == 2
    assert "--target-qps" in capsys.readouterr().err
