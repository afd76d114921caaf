"""The statistics layer's figures for runs compared as runs (`difference(..., per_run=True)`:
one value per run, as the diff of traces tests five runs against five) and the median's
distribution-free interval from order statistics, on cases whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from predictors import statistics


def test_five_runs_twice_as_slow_as_five_are_slower_x2_at_the_least_p_value() -> None:
    a = np.array([10.0, 10.2, 9.9, 10.1, 10.3])
    found = statistics.difference(a, 2 * a, per_run=True)

    assert found.verdict == "slower" and found.ratio == pytest.approx(2.0)
    # Complete separation of five against five: the exact two-sided p-value 2 / C(10, 5).
    assert found.p_value == pytest.approx(2 / 252)
    assert found.low <= 2.0 <= found.high
    # The runs' spread holds the drift between runs: no term added for it.
    assert found.drift == 0 and (found.low, found.high) == (found.sampling_low, found.sampling_high)
    assert found.test == statistics.RUNS_TEST
    assert found.baseline_count == found.other_count == 5
    assert found.words == "slower (×2.00)"


def test_identical_runs_are_no_detectable_difference() -> None:
    a = [10.0, 10.2, 9.9, 10.1, 10.3]
    found = statistics.difference(a, list(a), per_run=True)

    assert found.verdict == statistics.NO_DIFFERENCE and found.ratio == 1.0
    assert found.p_value == 1.0


def test_three_runs_against_three_cannot_show_a_difference() -> None:
    # The least two-sided p-value of three against three is 2 / C(6, 3) = 0.1.
    found = statistics.difference([1.0, 1.1, 1.2], [3.0, 3.1, 3.2], per_run=True)

    assert found.p_value == pytest.approx(0.1) and found.verdict == statistics.NO_DIFFERENCE


def test_many_runs_are_tested_one_value_each_not_in_stretches() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.normal(100, 5, 25), rng.normal(104, 5, 25)

    found = statistics.difference(a, b, per_run=True)
    within = statistics.difference(a, b)

    expected = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    assert found.p_value == pytest.approx(expected)
    # The loop's samples of one run are tested as ten stretches' medians instead.
    assert within.p_value != pytest.approx(expected) and within.test == statistics.LATENCY_TEST


@pytest.mark.parametrize("size", [2, 5, 6, 7, 16, 31, 100, 1000])
@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_the_quantile_interval_is_scipys_order_statistics(size: int, p: float) -> None:
    rng = np.random.default_rng(size)
    values = rng.lognormal(0, 1, size)
    values[: size // 3] = values[0]  # ties
    interval = stats.quantile_test(values, q=float(np.median(values)), p=p).confidence_interval(
        statistics.CONFIDENCE
    )
    expected = tuple(None if np.isnan(end) else float(end) for end in (interval.low, interval.high))

    assert statistics.quantile_interval(values, p) == expected


def test_five_runs_cannot_bound_the_median_six_can() -> None:
    # P(all five on one side of the median) = 2 / 32 > 5 %; with six, 2 / 64 < 5 %.
    assert statistics.quantile_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == (None, None)
    assert statistics.quantile_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.5) == (1.0, 6.0)
