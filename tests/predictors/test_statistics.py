"""The statistics layer (`predictors.statistics`) against cases whose answers are known by
construction: order statistics of 1..n, distributions of known median, proportions with
published Wilson intervals, paired counts with exact binomial p-values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from predictors import statistics

pytestmark = pytest.mark.database_free


def test_a_latency_summary_of_one_to_a_hundred_ms() -> None:
    summary = statistics.latency(np.arange(1, 101) * 1_000_000, samples=True)
    assert summary["count"] == 100
    assert summary["p50_ms"] == pytest.approx(50.5)
    assert summary["mean_ms"] == pytest.approx(50.5)
    assert summary["p90_ms"] == pytest.approx(90.1)
    assert (summary["min_ms"], summary["max_ms"]) == (1.0, 100.0)
    assert summary["std_ms"] == pytest.approx(np.arange(1, 101).std())
    # The interval of the median is made of order statistics: two of the samples, around it.
    low, high = summary["p50_low_ms"], summary["p50_high_ms"]
    assert low in range(1, 101) and high in range(1, 101)
    assert 40 <= low < 50.5 < high <= 61
    # 100 samples bound the p90 but not the p99 (at most one sample above it).
    assert summary["p90_bounded"] is True and summary["p99_bounded"] is False
    assert summary["samples_ms"] == [float(v) for v in range(1, 101)]


def test_few_samples_bound_no_interval() -> None:
    summary = statistics.latency([1_000_000, 2_000_000, 3_000_000])
    assert summary["p50_ms"] == 2.0
    assert summary["p50_low_ms"] is None and summary["p50_high_ms"] is None
    assert "samples_ms" not in summary
    assert statistics.median_text(summary) == "2.000 ms (interval not bounded, n=3)"


def test_enough_samples_bound_the_p99() -> None:
    assert statistics.latency(np.arange(1, 1001) * 1000)["p99_bounded"] is True


def test_the_median_interval_covers_the_true_median_about_95_times_in_100() -> None:
    rng = np.random.default_rng(1)
    true_median = math.log(2)  # of an exponential distribution of rate 1
    covered = 0
    for _ in range(400):
        low, high = statistics.quantile_interval(rng.exponential(size=60), 0.5)
        assert low is not None and high is not None
        covered += low <= true_median <= high
    assert 0.92 <= covered / 400 <= 0.99


def test_a_difference_known_by_construction() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(0, 0.1, 300)
    slower = statistics.difference(base, rng.lognormal(0, 0.1, 300) * 1.5)
    assert slower.verdict == "slower"
    assert slower.low <= 1.5 <= slower.high
    assert slower.p_value < 0.001  # ten stretches a side: the test cannot go much lower
    assert slower.words.startswith("slower (×1.5")
    faster = statistics.difference(base, rng.lognormal(0, 0.1, 300) * 0.5)
    assert faster.verdict == "faster" and faster.low <= 0.5 <= faster.high
    # The same distribution: no detectable difference, saying how small a one it could see.
    same = statistics.difference(base, rng.lognormal(0, 0.1, 300))
    assert same.verdict == "no detectable difference"
    assert same.detectable >= statistics.NOISE
    assert same.words == f"no detectable difference (±{same.detectable * 100:.1f} %)"


def test_a_real_but_small_difference_is_noise_unless_asked_finer() -> None:
    """4 % slower, measured very precisely: beyond the test's doubt, within the default 5 %
    noise; with a 1 % threshold it is called."""
    rng = np.random.default_rng(3)
    base = rng.normal(10.0, 0.05, 2000)
    other = rng.normal(10.4, 0.05, 2000)
    assert statistics.difference(base, other).verdict == "no detectable difference"
    finer = statistics.difference(base, other, noise=0.01)
    assert finer.verdict == "slower" and finer.low <= 1.04 <= finer.high


def test_the_interval_adds_the_drift_between_two_runs() -> None:
    """The sampling interval of two precise runs is narrow; the reported one adds DRIFT in
    quadrature on the log scale."""
    rng = np.random.default_rng(6)
    difference = statistics.difference(rng.normal(10, 0.01, 500), rng.normal(20, 0.02, 500))
    assert difference.sampling_low is not None and difference.sampling_high is not None
    assert difference.low < difference.sampling_low <= 2.0 <= difference.sampling_high
    assert difference.sampling_high < difference.high
    sampling = math.log(difference.sampling_high / difference.ratio)
    expected = difference.ratio * math.exp(math.hypot(sampling, math.log1p(statistics.DRIFT)))
    assert difference.high == pytest.approx(expected)
    assert difference.high / difference.ratio == pytest.approx(1 + statistics.DRIFT, rel=0.01)


def test_the_ratio_interval_holds_the_true_ratio_most_of_the_time() -> None:
    rng = np.random.default_rng(4)
    held = 0
    for _ in range(60):
        base = rng.exponential(size=200) + 1
        other = (rng.exponential(size=200) + 1) * 2
        difference = statistics.difference(base, other)
        held += difference.low <= 2.0 <= difference.high
    assert held >= 52


def test_a_difference_refuses_what_it_cannot_test() -> None:
    with pytest.raises(ValueError, match="two samples"):
        statistics.difference([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        statistics.difference([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match="noise"):
        statistics.difference([1.0, 2.0], [1.0, 2.0], noise=1.5)
    constant = statistics.difference([2.0, 2.0, 2.0], [2.0, 2.0])
    assert constant.verdict == "no detectable difference" and constant.ratio == 1.0


@pytest.mark.parametrize(
    ("successes", "total", "low", "high"),
    # Wilson score intervals (95 %) as published (Newcombe 1998, table I; Brown, Cai and
    # DasGupta 2001).
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (81, 263, 0.2553, 0.3662)],
)
def test_wilson_intervals(successes: int, total: int, low: float, high: float) -> None:
    interval = statistics.proportion(successes, total)
    assert interval["value"] == successes / total
    assert interval["low"] == pytest.approx(low, abs=1e-4)
    assert interval["high"] == pytest.approx(high, abs=1e-4)


def test_mcnemar_on_known_counts() -> None:
    baseline = np.array([True] * 50 + [False] * 10 + [True] * 2 + [False] * 38)
    other = np.array([True] * 50 + [True] * 10 + [False] * 2 + [False] * 38)
    paired = statistics.paired_accuracy(baseline, other)
    assert (paired["only_baseline"], paired["only_other"], paired["count"]) == (2, 10, 100)
    # Exact: P(X <= 2 or X >= 10), X ~ Binomial(12, 1/2).
    expected = 2 * sum(math.comb(12, k) for k in range(3)) / 2**12
    assert paired["p_value"] == pytest.approx(expected)
    assert paired["verdict"] == "more accurate"
    assert statistics.paired_accuracy(baseline, baseline)["verdict"] == "no detectable difference"
    with pytest.raises(ValueError, match="different inputs"):
        statistics.paired_accuracy(baseline, other[:10])


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.12434, "0.1243"),
        (2.9481, "2.948"),
        (12.345, "12.35"),
        (123.44, "123.4"),
        (12345.6, "12346"),
        (0.00012346, "0.0001235"),
        (0.0, "0"),
        (None, "—"),
    ],
)
def test_one_rounding_rule_for_times(value: float | None, text: str) -> None:
    assert statistics.ms(value) == text


def test_a_latency_text_is_what_every_surface_prints() -> None:
    summary = statistics.latency(np.arange(1, 101) * 1_000_000)
    text = statistics.latency_text(summary)
    assert text["p50"] == "50.50"
    assert (
        text["p50_interval"]
        == f"{statistics.ms(summary['p50_low_ms'])}–{statistics.ms(summary['p50_high_ms'])}"
    )
    assert text["p99"] == "99.01 (not bounded)"
    assert text["headline"].startswith("50.50 ms (95 % CI ")


def test_between_runs() -> None:
    summary = statistics.between_runs([10.0, 12.0, 14.0])
    assert summary["mean"] == 12.0 and summary["std"] == 2.0
    # t(0.975, 2) = 4.302653
    assert summary["ci95"] == pytest.approx(4.302653 * 2.0 / math.sqrt(3), rel=1e-6)
    assert statistics.between_runs([5.0])["ci95"] is None
