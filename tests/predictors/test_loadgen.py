"""MLPerf LoadGen scenarios after the fixed batches (`predictors.evaluation.scenarios.loadgen`), run
by the real LoadGen on the zoo's digits-cnn: its summary and log kept with the result, the accuracy
run scored as the fixed batches score, the QPS search's curve with the verdict, summary and marked
row all of one run, LoadGen's warnings apart from its notes, and the options refused where they
would do nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from predictors.cli import main
from predictors.evaluation import EvaluationError, EvaluationOptions
from predictors.evaluation.scenarios.loadgen_logs import parse_detail, parse_summary, reported_run
from predictors.protocol import JobOptions, ProtocolError
from predictors.tasks import loadgen_problem
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
    # Early stopping's lines are information unless they are why the run is INVALID; what is
    # in the warning lists is LoadGen's verdict's reasons and its own warnings and errors.
    assert loadgen["early_stopping"]
    early_failed = loadgen["summary"].get("Early stopping satisfied") == "NO"
    for line in loadgen["early_stopping"]:
        assert (f"Early stopping: {line}" in loadgen["notes"]) is not early_failed
    assert bool(loadgen["invalid_reasons"]) is (loadgen["valid"] is False)
    assert all(problem["level"] in ("warning", "error") for problem in loadgen["problems"])
    assert loadgen["reported"]["run"] == loadgen["reported"]["runs"] == 1


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


def _agrees_with_its_row(loadgen: dict[str, Any]) -> dict[str, Any]:
    """Assert that the verdict, target, settings, summary and reasons of `loadgen` are those of
    the one curve point marked as reported; that point."""
    search, reported = loadgen["search"], loadgen["reported"]
    curve = search["curve"]
    marked = [point for point in curve if point["reported"]]
    assert len(marked) == 1
    row = marked[0]
    assert row["run"] == reported["run"] == search["reported_run"]
    assert reported["runs"] == len(curve)
    assert sorted(point["run"] for point in curve) == list(range(1, len(curve) + 1))
    # The verdict, the target and the settings are the row's.
    assert loadgen["valid"] is row["valid"] is reported["valid"]
    assert loadgen["settings"]["target_qps"] == row["target_qps"] == reported["target_qps"]
    assert loadgen["invalid_reasons"] == row["invalid_reasons"]
    # So is the summary, as LoadGen wrote it: its verdict, its target (to the six significant
    # digits LoadGen prints), its completed QPS.
    summary = loadgen["summary"]
    assert summary == row["summary"]
    assert summary["Result is"] == ("VALID" if row["valid"] else "INVALID")
    assert float(summary["target_qps"]) == pytest.approx(row["target_qps"], rel=1e-5)
    assert float(summary["Completed samples per second"]) == row["completed_qps"]
    text = loadgen["summary_text"]
    assert f"Result is : {summary['Result is']}" in text
    assert f"Completed samples per second    : {summary['Completed samples per second']}" in text
    # Which run it is, and why, in words.
    qps = f"{row['target_qps']:.3f}".rstrip("0").rstrip(".")
    assert reported["statement"].startswith(f"run {row['run']} of {len(curve)}: {qps} QPS, ")
    valid = [point["target_qps"] for point in curve if point["valid"] is True]
    if valid:
        assert row["target_qps"] == max(valid) == search["peak_qps"]
        assert reported["why"] == "the highest valid target"
    else:
        assert row["target_qps"] == min(point["target_qps"] for point in curve)
        assert row["valid"] is False and search["peak_qps"] is None
        assert "no run was VALID" in reported["why"]
    held = [point["target_qps"] for point in curve if point["latency_held"]]
    assert search["highest_held_qps"] == (max(held) if held else None)
    # Informational lines are never among the warnings.
    warnings = loadgen["invalid_reasons"] + [p["message"] for p in loadgen["problems"]]
    assert not any("Run successful" in line for line in warnings)
    if row["valid"]:
        assert "Early stopping: Run successful." in loadgen["notes"]
    return row


def test_a_server_peak_search_reports_one_run_verdict_summary_and_row_alike(
    run_evaluation: RunEvaluation,
) -> None:
    """A LoadGen server run with find_peak_qps: every run of the search is recorded (its
    number, target, verdict and why, summary), and the verdict, target, settings and summary
    of the result are those of the run it reports, the highest target LoadGen judged VALID."""
    bound = 25.0
    loadgen = run_evaluation(
        scenario="server",
        find_peak_qps=True,
        latency_bound_ms=bound,
        target_qps=100,
        limit=32,
        min_duration_ms=100,
        min_query_count=32,
    ).result["loadgen"]
    search = loadgen["search"]
    curve = search["curve"]
    assert len(curve) >= 2
    assert [p["target_qps"] for p in curve] == sorted(p["target_qps"] for p in curve)
    # LoadGen's own latency verdict agrees with the p99 it reports against the bound; VALID
    # implies it held, never the other way round.
    for point in curve:
        assert point["latency_held"] == (point["p99_ms"] <= bound)
        assert point["latency_held"] or point["valid"] is False
        assert float(point["summary"]["target_qps"]) == pytest.approx(point["target_qps"], rel=1e-5)
        assert bool(point["invalid_reasons"]) is (point["valid"] is False)
    assert loadgen["summary"]["Scenario"] == "Server"
    assert loadgen["settings"]["start_qps"] == 100
    assert loadgen["settings"]["start_qps_from"] == "request"
    _agrees_with_its_row(loadgen)


def test_a_peak_search_with_no_valid_run_shows_its_lowest_run_invalid(
    run_evaluation: RunEvaluation,
) -> None:
    """No rate keeps the p99 under 10 microseconds: every run is INVALID, the result says so
    and reports the lowest target's run, INVALID, with LoadGen's reasons."""
    loadgen = run_evaluation(
        scenario="server",
        find_peak_qps=True,
        latency_bound_ms=0.01,
        target_qps=400,
        limit=16,
        min_duration_ms=100,
        min_query_count=8,
    ).result["loadgen"]
    row = _agrees_with_its_row(loadgen)
    assert all(point["valid"] is False for point in loadgen["search"]["curve"])
    assert loadgen["valid"] is False and loadgen["search"]["peak_qps"] is None
    assert loadgen["reported"]["statement"] == (
        f"run {row['run']} of {len(loadgen['search']['curve'])}: "
        f"{row['target_qps']:g} QPS, INVALID: no run was VALID, so the lowest target is shown"
    )
    assert "Performance constraints not satisfied" in loadgen["invalid_reasons"]


def test_the_reported_run_is_the_highest_valid_target_in_any_order() -> None:
    """Validity need not rise or fall with the rate (a slow run can be too short for early
    stopping): the highest VALID target is reported, not the highest that held nor the last."""
    runs = [
        {"run": 1, "target_qps": 100.0, "valid": False},
        {"run": 2, "target_qps": 200.0, "valid": True},
        {"run": 3, "target_qps": 400.0, "valid": False},
        {"run": 4, "target_qps": 300.0, "valid": True},
        {"run": 5, "target_qps": 350.0, "valid": False},
    ]
    reported = reported_run(runs, search=True)
    assert (reported["run"], reported["runs"], reported["valid"]) == (4, 5, True)
    assert reported["statement"] == "run 4 of 5: 300 QPS, the highest valid target"
    none_valid = [{**run, "valid": False} for run in runs]
    assert reported_run(none_valid, search=True)["run"] == 1
    assert reported_run(runs[:1], search=False)["statement"] == (
        "run 1 of 1: 100 QPS, INVALID, the only run"
    )


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


def test_parse_summary_reads_the_verdict_and_why_apart_from_its_notes() -> None:
    """As LoadGen 6 writes its summary: an INVALID run's "satisfied : NO" lines are its
    reasons, early stopping's explanation with them where early stopping failed; a VALID run's
    "Run successful." is a note."""
    invalid = (
        "Scenario : Server\nResult is : INVALID\n  Performance constraints satisfied : Yes\n"
        "  Min duration satisfied : Yes\n  Early stopping satisfied: NO\nRecommendations:\n"
        "Early Stopping Result:\n * Run unsuccessful.\n * Processed 190 queries.\n"
        " * Would need to run at least 269 more queries,\n with the run being successful if "
        "every additional\n query were under latency.\n\n"
        "99.00 percentile latency (ns)   : 2581894\n"
    )
    parsed = parse_summary(invalid)
    assert parsed["valid"] is False
    assert parsed["values"]["99.00 percentile latency (ns)"] == "2581894"
    assert parsed["early_stopping"] == [
        "Run unsuccessful.",
        "Processed 190 queries.",
        "Would need to run at least 269 more queries, with the run being successful if every "
        "additional query were under latency.",
    ]
    assert parsed["invalid_reasons"] == [
        "Early stopping not satisfied: " + " ".join(parsed["early_stopping"])
    ]
    assert parsed["notes"] == []

    too_fast = (
        "Result is : INVALID\n  Performance constraints satisfied : NO\n"
        "  Early stopping satisfied: Yes\nRecommendations:\n"
        " * Reduce target QPS to improve latency.\nEarly Stopping Result:\n"
        " * Run successful.\n\n"
    )
    parsed = parse_summary(too_fast)
    assert parsed["invalid_reasons"] == [
        "Performance constraints not satisfied",
        "LoadGen recommends: Reduce target QPS to improve latency.",
    ]
    assert parsed["notes"] == ["Early stopping: Run successful."]

    valid = parse_summary(
        "Result is : VALID\n  Early stopping satisfied: Yes\nEarly Stopping Result:\n"
        " * Run successful.\n\n"
    )
    assert valid["valid"] is True and valid["invalid_reasons"] == []
    assert valid["notes"] == ["Early stopping: Run successful."]
    assert parse_summary("Mode : AccuracyOnly\n")["valid"] is None


def test_parse_detail_keeps_loadgens_warnings_and_errors_only() -> None:
    """The detail log's `:::MLLOG` entries marked is_warning or is_error, counted once per
    message; every other entry (the verdict, early stopping's result) is not a warning."""

    def entry(key: str, value: object, *, error: bool = False, warning: bool = False) -> str:
        metadata = {"is_error": error, "is_warning": warning, "file": "results.cc"}
        return ":::MLLOG " + json.dumps({"key": key, "value": value, "metadata": metadata})

    log = "\n".join(
        [
            entry("result_validity", "VALID"),
            entry("early_stopping_result", " * Run successful."),
            entry("warning_generic_message", "Logging allocation detected: tid: 7", warning=True),
            entry("error_runtime", "Attempted to complete a sample twice.", error=True),
            entry("error_runtime", "Attempted to complete a sample twice.", error=True),
            ':::MLLOG {"key": "cut short',
        ]
    )
    assert parse_detail(log)["problems"] == [
        {
            "level": "warning",
            "key": "warning_generic_message",
            "message": "Logging allocation detected: tid: 7",
            "count": 1,
        },
        {
            "level": "error",
            "key": "error_runtime",
            "message": "Attempted to complete a sample twice.",
            "count": 2,
        },
    ]


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


def test_mlms_evaluate_peak_search_prints_one_run_throughout(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's heading (verdict and target), the run it says it shows, LoadGen's summary
    and the row marked in the curve are all of one run."""
    argv = ["evaluate", "digits-cnn", "--framework", "onnxruntime", "--dataset", "digits",
            "--limit", "32", "--store", str(store), "--no-progress", "--scenario", "server",
            "--find-peak-qps", "--target-qps", "100", "--latency-bound", "25",
            "--min-duration-ms", "100", "--min-query-count", "32"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    heading = re.search(
        r"^LoadGen server \(onnxruntime, performance mode, 32 samples\): (VALID|INVALID), "
        r"target (\S+) QPS$",
        out,
        re.MULTILINE,
    )
    assert heading, out
    verdict, target = heading.groups()
    shown = re.search(r"^QPS search: showing run (\d+) of (\d+): (\S+) QPS, ", out, re.MULTILINE)
    assert shown, out
    assert shown.group(3) == target
    rows = [line.split() for line in out.splitlines() if line.endswith("<- reported")]
    assert len(rows) == 1
    run, row_target, _completed, _p99, _held, row_verdict = rows[0][:6]
    assert (run, row_target, row_verdict) == (shown.group(1), target, verdict)
    # LoadGen's summary, as printed, is that run's.
    assert f"Result is : {verdict}" in out
    printed = re.search(r"^target_qps : (\S+)$", out, re.MULTILINE)  # LoadGen's 6 digits
    assert printed and float(printed.group(1)) == pytest.approx(float(target), rel=1e-5)
    if verdict == "VALID":
        assert "note: Early stopping: Run successful." in out
    assert "INVALID: Early stopping: Run successful." not in out
