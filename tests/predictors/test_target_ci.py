"""`target_ci`: past its repeat passes, a batch size is timed until the median's 95 % interval is
within the share asked, or until its time bound, and the result says which, in the loop, the
streaming scenario and `mlms evaluate --target-ci`; a share that is no share is refused by
name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors import statistics
from predictors.cli import main
from predictors.evaluation import EvaluationError, EvaluationOptions
from predictors.evaluation.target_ci import STOPS, target_ci_text
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn", "toggle-gru"))


@pytest.fixture
def evaluation_defaults(evaluation_defaults: dict[str, Any]) -> dict[str, Any]:
    """The zoo's digits-cnn in ONNX Runtime, 32 inputs, untraced."""
    return {
        **evaluation_defaults,
        "framework": "onnxruntime",
        "limit": 32,
        "trace_level": "none",
    }


def _entry(result: dict[str, Any], batch_size: int = 1) -> dict[str, Any]:
    return next(e for e in result["batch_sizes"] if e["batch_size"] == batch_size)


def test_a_fast_model_stops_when_the_medians_interval_is_within_the_share(
    run_evaluation: RunEvaluation,
) -> None:
    seen: list[tuple[int, int]] = []
    evaluation = run_evaluation(
        batch_sizes=(1, 4),
        target_ci=0.05,
        target_ci_seconds=120,
        progress=lambda done, total: seen.append((done, total)),
    )

    for size in (1, 4):
        entry = _entry(evaluation.result, size)
        target = entry["target_ci"]
        assert target["stopped"] == "interval", target
        assert target["asked"] == 0.05 and target["seconds_bound"] == 120
        assert target["reached"] is not None and target["reached"] <= 0.05
        # The interval it stopped on is the one the result reports, from the same samples.
        latency = entry["latency"]
        assert target["batches"] == latency["count"] == len(latency["samples_ms"])
        p50, low, high = latency["p50_ms"], latency["p50_low_ms"], latency["p50_high_ms"]
        assert target["reached"] == pytest.approx(max(p50 - low, high - p50) / p50)
        assert target["reached"] == pytest.approx(
            statistics.median_interval_width(latency["samples_ms"])
        )
        assert 0 < target["seconds"] < 120
        assert target["text"] == target_ci_text(target)
        assert target["text"].startswith("median within ±")
    # Every timed round is counted: the progress never passes its total and ends on it.
    assert all(done <= total for done, total in seen)
    assert seen[-1][0] == seen[-1][1]
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


def test_an_impossible_target_stops_at_the_time_bound_and_says_so(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(batch_sizes=(1,), target_ci=1e-6, target_ci_seconds=0.5)

    entry = _entry(evaluation.result)
    target = entry["target_ci"]
    assert target["stopped"] == "time bound", target
    assert target["reached"] is None or target["reached"] > 1e-6
    # Timed past the 32 inputs of its one pass, up to the bound and about a batch beyond.
    assert target["batches"] > 32 and target["batches"] == entry["latency"]["count"]
    assert 0.5 <= target["seconds"] < 3
    assert target["text"].startswith("stopped at the time bound (0.5 s) with ±")


def test_without_target_ci_the_repeat_passes_alone_are_timed(run_evaluation: RunEvaluation) -> None:
    entry = _entry(run_evaluation(batch_sizes=(1,), repeat=2).result)
    assert "target_ci" not in entry
    assert entry["latency"]["count"] == 64


def test_a_streaming_model_is_timed_in_whole_passes_to_its_bound(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(
        model="toggle-gru",
        dataset="toggle-clicks",
        limit=4,
        batch_sizes=(2,),
        target_ci=1e-6,
        target_ci_seconds=0.5,
    )
    entry = _entry(evaluation.result, 2)
    target = entry["target_ci"]
    assert target["stopped"] == "time bound" and target["stopped"] in STOPS
    # Whole passes: the timed calls are a multiple of one pass's.
    assert target["batches"] % entry["batches"] == 0
    assert target["batches"] >= 2 * entry["batches"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target_ci": 0.0}, "target_ci must be a share more than 0 and less than 1"),
        ({"target_ci": -0.02}, "target_ci must be a share"),
        ({"target_ci": 1.0}, "target_ci must be a share"),
        ({"target_ci_seconds": 5.0}, "target_ci_seconds applies with target_ci only"),
        ({"target_ci": 0.02, "target_ci_seconds": 0}, "target_ci_seconds must be at least 0.1"),
    ],
)
def test_the_loops_options_refuse_a_target_that_is_no_share(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(EvaluationError, match=message):
        EvaluationOptions(**options)


# -- mlms evaluate --target-ci ---------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], store: Path, *argv: str) -> tuple[int, str, str]:
    status = main(
        [
            "evaluate",
            "digits-cnn",
            "--framework",
            "onnxruntime",
            "--dataset",
            "digits",
            "--limit",
            "32",
            "--store",
            str(store),
            "--no-progress",
            *argv,
        ]
    )
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_cli_takes_a_percentage_and_prints_what_stopped_each_batch_size(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _cli(capsys, store, "--target-ci", "5%", "--format", "json")
    assert status == 0, err
    target = json.loads(out)["results"][0]["batch_sizes"][0]["target_ci"]
    assert target["asked"] == pytest.approx(0.05) and target["stopped"] == "interval"

    status, out, err = _cli(capsys, store, "--target-ci", "0.000001", "--target-ci-seconds", "0.3")
    assert status == 0, err
    lines = [line for line in out.splitlines() if "stopped at the time bound" in line]
    assert len(lines) == 1, out
    assert lines[0].startswith("onnxruntime: batch size 1: stopped at the time bound (0.3 s)")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target-ci", "0"], "argument --target-ci: 0 is not a share more than 0"),
        (["--target-ci", "0%"], "argument --target-ci: 0% is not a share"),
        (["--target-ci=-2%"], "argument --target-ci: -2% is not a share"),
        (["--target-ci", "-0.02"], "argument --target-ci: -0.02 is not a share"),
        (["--target-ci", "100%"], "argument --target-ci: 100% is not a share"),
        (["--target-ci", "2"], "argument --target-ci: 2 is not a share"),
        (["--target-ci", "two"], "argument --target-ci: 'two' is not a share: write e.g. 2%"),
        (["--target-ci-seconds", "5"], "--target-ci-seconds: applies with target_ci only"),
        (["--target-ci", "2%", "--target-ci-seconds", "0"], "argument --target-ci-seconds"),
        (["--target-ci", "2%", "--target-ci-seconds", "0.01"], "--target-ci-seconds: must be"),
    ],
)
def test_the_cli_refuses_a_target_that_is_no_share_naming_the_flag(
    store: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = _cli(capsys, store, *argv)
    assert (status, out) == (2, "")
    assert err.startswith("mlms: error: ") and message in err, err


def test_the_median_interval_narrows_with_more_samples() -> None:
    """What the stop relies on: the same spread, ten times the samples, a narrower interval."""
    rng = np.random.default_rng(0)
    few = statistics.median_interval_width(rng.lognormal(0, 0.2, 50))
    many = statistics.median_interval_width(rng.lognormal(0, 0.2, 5000))
    assert few is not None and many is not None and many < few / 5
