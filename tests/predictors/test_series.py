"""The change-point test of a series of re-runs (`predictors.statistics.series_verdicts`): on
synthetic series whose truth is known by construction (each run's level drawn around the
configuration's, its batches around the run's level; a slower setting multiplies a run's
level), over many seeds, and on real runs of the zoo's digits-cnn recorded by
benchmarks/watch_series.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from predictors import statistics
from predictors.statistics import (
    IMPROVEMENT,
    MIN_HISTORY,
    REGRESSION,
    SERIES_NOISE,
    TOO_LITTLE_HISTORY,
    series_verdicts,
)

pytestmark = pytest.mark.database_free

SERIES = Path(__file__).resolve().parents[1] / "fixtures" / "series"
SEEDS = range(50)
NOISE = [SERIES_NOISE] * 10


def _series(
    seed: int,
    *,
    slower: dict[int, float] | None = None,
    runs: int = 10,
    between: float = 0.02,
    within: float = 0.1,
    batches: int = 100,
) -> list[np.ndarray]:
    """Ten runs (by default) of a 2 ms configuration: each run's level off by `between` (log
    sd) from run to run, its batches by `within`; run `n` (from 1) of `slower` is that many
    times slower."""
    rng = np.random.default_rng(seed)
    slower = slower or {}
    levels = np.log(2.0) + rng.normal(0, between, runs)
    return [
        np.exp(rng.normal(level, within, batches)) * slower.get(number, 1.0)
        for number, level in enumerate(levels, 1)
    ]


def _labels(runs: list[np.ndarray] | list[list[float]]) -> list[str]:
    return [verdict.verdict for verdict in series_verdicts(runs)]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_eighth_run_slower_is_the_regression_and_the_rest_noise(seed: int) -> None:
    verdicts = series_verdicts(_series(seed, slower={8: 1.5}))

    assert [v.verdict for v in verdicts] == NOISE[:7] + [REGRESSION] + NOISE[8:]
    eighth = verdicts[7]
    assert eighth.returned_at == 8 and eighth.note() == "an outlier: run 9 returned to the level"
    # Compared with the stable segment, not with the outlier (which never joins it).
    assert verdicts[8].segment == tuple(range(7)) and verdicts[8].reference == 6
    assert verdicts[9].segment == (*range(7), 8) and verdicts[9].reference == 8


@pytest.mark.parametrize("seed", SEEDS)
def test_a_level_shift_is_one_regression_then_noise_at_the_new_level(seed: int) -> None:
    verdicts = series_verdicts(_series(seed, slower={8: 1.5, 9: 1.5, 10: 1.5}))

    assert [v.verdict for v in verdicts] == NOISE[:7] + [REGRESSION] + NOISE[8:]
    assert verdicts[7].confirmed_by == 8
    assert verdicts[8].level_since == 7 and verdicts[8].segment == (7,)
    assert verdicts[9].segment == (7, 8) and verdicts[9].ratio == pytest.approx(1, abs=0.15)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_series_with_no_change_is_noise_everywhere(seed: int) -> None:
    assert _labels(_series(seed)) == NOISE


def test_false_alarms_stay_near_the_prediction_intervals_share() -> None:
    tested = called = 0
    for seed in range(1000, 1200):
        labels = _labels(_series(seed))
        tested += sum(label != TOO_LITTLE_HISTORY for label in labels) - MIN_HISTORY
        called += sum(label in (REGRESSION, IMPROVEMENT) for label in labels)
    # 1,400 runs tested at a 1-in-1,000 prediction interval: a handful at most.
    assert tested == 1400 and called <= 4


@pytest.mark.parametrize("seed", range(10))
def test_a_faster_run_is_an_improvement(seed: int) -> None:
    assert _labels(_series(seed, slower={6: 0.6})) == NOISE[:5] + [IMPROVEMENT] + NOISE[6:]


def test_the_threshold_is_the_noise_the_series_shows() -> None:
    """One 1.3× slower run: a regression in a quiet series, noise in one whose runs spread."""
    quiet = series_verdicts(_series(0, slower={8: 1.3}, between=0.005))
    noisy = series_verdicts(_series(0, slower={8: 1.3}, between=0.15))

    assert quiet[7].verdict == REGRESSION and noisy[7].verdict == SERIES_NOISE
    assert quiet[7].noise is not None and noisy[7].noise is not None
    assert quiet[7].noise < 0.1 < 0.3 < noisy[7].noise
    assert quiet[7].run_noise is not None and quiet[7].run_noise < 0.02
    assert quiet[7].words.startswith("regression (×1.")
    assert noisy[7].words.startswith("noise (×")


def test_the_first_runs_only_measure() -> None:
    runs = _series(0, runs=MIN_HISTORY)
    assert _labels(runs) == [TOO_LITTLE_HISTORY] * MIN_HISTORY
    assert series_verdicts(runs)[0].words == "too little history (3 runs measure the noise)"
    # Even a run four times slower: three runs are too few to know the noise.
    assert _labels([*runs[:2], runs[2] * 4]) == [TOO_LITTLE_HISTORY] * 3


@pytest.mark.parametrize("seed", range(10))
def test_an_early_outlier_is_called_and_leaves_the_noise_alone(seed: int) -> None:
    """The first run slow (a cold host): called against the runs after it, left out of the
    noise they measure, so that a later slower run is still seen."""
    verdicts = series_verdicts(_series(seed, slower={1: 1.5, 8: 1.3}, between=0.01))

    assert [v.verdict for v in verdicts] == [REGRESSION] + NOISE[1:7] + [REGRESSION] + NOISE[8:]
    assert verdicts[0].hindsight and verdicts[0].note() == "beyond the noise of the runs after it"
    assert 0 not in verdicts[7].segment


def test_each_verdict_carries_its_evidence() -> None:
    verdicts = series_verdicts(_series(1, slower={8: 2.0}))
    eighth = verdicts[7].to_dict()

    assert eighth["verdict"] == REGRESSION and eighth["index"] == 7
    assert eighth["low"] <= eighth["ratio"] * 1.05 and eighth["high"] >= 1.5
    assert eighth["p_value"] < statistics.ALPHA and eighth["history"] == 7
    assert eighth["segment"] == list(range(7)) and eighth["reference"] == 6
    assert eighth["median_low_ms"] < eighth["median_ms"] < eighth["median_high_ms"]
    assert "prediction interval" in eighth["test"] and "Mann–Whitney" in eighth["test"]
    assert eighth["note"] == "an outlier: run 9 returned to the level"


def test_a_run_whose_median_cannot_be_bounded_is_never_called() -> None:
    runs = [*_series(2, runs=7), np.full(3, 9.0)]
    last = series_verdicts(runs)[-1]
    assert last.verdict == SERIES_NOISE and last.noise is None
    assert last.words.endswith("its median's interval not bounded)")


@pytest.mark.parametrize(
    ("runs", "message"),
    [([[1.0], []], "no samples"), ([[1.0], [0.0, 0.0]], "positive"), ([[1.0, np.nan]], "finite")],
)
def test_bad_runs_are_refused(runs: list[list[float]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        series_verdicts(runs)


@pytest.mark.parametrize(
    ("name", "slower"),
    [("eighth-slower", {8}), ("eighth-on-slower", {8, 9, 10}), ("unchanged", set())],
)
def test_real_runs(name: str, slower: set[int]) -> None:
    """Ten real runs of digits-cnn on ONNX Runtime at batch size 1 on a shared two-core
    machine (benchmarks/watch_series.py), those in `slower` at trace level `framework` (the
    profiler on: about 2× by construction). The first of them is a regression. The host has
    runs about 1.3–1.5× slower with nothing changed (other work on the same cores), which the
    series rightly calls; nothing smaller than that is called, and nothing faster."""
    (runs,) = json.loads((SERIES / f"{name}.json").read_text())["series"]
    assert [run["trace_level"] == "framework" for run in runs] == [
        number in slower for number in range(1, 11)
    ]
    verdicts = series_verdicts([run["samples_ms"] for run in runs])

    if slower:
        first = verdicts[min(slower) - 1]
        assert first.verdict == REGRESSION and first.ratio is not None and first.ratio > 1.8
    for verdict in verdicts:
        assert verdict.verdict != IMPROVEMENT
        if verdict.verdict == REGRESSION and verdict.ratio is not None:
            assert verdict.ratio > 1.25, verdict
