"""The statistics layer: every figure the product shows about a latency, a difference or an
accuracy is computed here, once, and read by every surface (evaluation page, compare,
history, leaderboards and their CSV, the CLI and the API). Importable without Django.

- **A latency's headline is its median**, with a distribution-free confidence interval from
  order statistics (`scipy.stats.quantile_test`). p90 and p99 come with the number of samples
  behind them; a percentile whose interval the samples cannot bound (too few samples above
  it) is reported as unbounded (`p99_bounded: false`). The mean stays, labelled as a mean.
- **A difference comes with a verdict and its evidence** (`difference`): the ratio of the
  medians with a bootstrap interval (`scipy.stats.bootstrap`, percentile method, each side
  resampled on its own), the two-sided Mann–Whitney U test (`scipy.stats.mannwhitneyu`), and
  the smallest difference the run could have detected. Both resample and test the medians of
  ten consecutive stretches of each run (`segments`, batch means) rather than single batches,
  which are not independent; the interval adds ±`DRIFT` (in quadrature), how far two runs of
  one model on one machine differ with nothing changed. A difference is called "faster" or
  "slower" only when the test rejects "no difference" at `ALPHA` *and* the ratio's whole
  interval lies beyond the noise threshold; otherwise it is "no detectable difference (±x %)",
  x being the larger of the noise threshold and the interval's half-width.
- **Accuracy**: top-1 with a Wilson score interval (`scipy.stats.binomtest`); two models on the
  same inputs are compared per input with the exact McNemar test (a binomial test on the
  inputs only one of them gets right).
- **One rounding rule** (`ms`, `percent`): what a page, the CSV and the CLI print.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
# Differences of the medians smaller than this share are reported as noise: two runs of one
# model on one machine drift by a few per cent (frequency, caches, other processes).
NOISE = 0.05
BOOTSTRAP_RESAMPLES = 2000
# How far the medians of two runs of one model on one machine differ with nothing changed
# (the clock, the caches, other work on the host): a share, added to the sampling interval of
# a ratio of two runs' medians as a systematic term (in quadrature, on the log scale). Two runs
# on the shared 2-core VM the truth suite runs on differ by up to about 1.5 %.
DRIFT = 0.02
# A comparison's unit: the median of one of SEGMENTS consecutive stretches of a run's timed
# batches (`segments`), where each side has at least MIN_SEGMENTED batches.
SEGMENTS = 10
MIN_SEGMENTED = 20
# The most samples of one side a bootstrap resamples: an even thinning of longer runs (their
# order kept), so that a comparison of very long runs stays quick.
BOOTSTRAP_SAMPLES = 5000
# A fixed seed: the same two runs always get the same interval.
BOOTSTRAP_SEED = 20261127
NO_DIFFERENCE = "no detectable difference"
VERDICTS = ("faster", "slower", NO_DIFFERENCE)
ACCURACY_VERDICTS = ("more accurate", "less accurate", NO_DIFFERENCE)

MEDIAN_INTERVAL = "distribution-free 95 % interval of the median (order statistics)"
RATIO_INTERVAL = (
    f"95 % bootstrap interval of the ratio of medians ({BOOTSTRAP_RESAMPLES:,} resamples of "
    f"the stretches' medians), with ±{DRIFT:.0%} for the drift of a machine between two runs"
)
LATENCY_TEST = "Mann–Whitney U, two-sided, on the medians of ten consecutive stretches of each run"
ACCURACY_INTERVAL = "95 % Wilson score interval"
ACCURACY_TEST = "exact McNemar test (binomial test on the inputs only one model gets right)"


def _samples(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    if array.size == 0:
        raise ValueError("no samples")
    if not np.all(np.isfinite(array)):
        raise ValueError("samples must be finite numbers")
    return array


def quantile_interval(
    values: Sequence[float] | np.ndarray, p: float, confidence: float = CONFIDENCE
) -> tuple[float | None, float | None]:
    """The distribution-free interval of the p-quantile from the samples' order statistics;
    an end the samples cannot bound (too few of them on that side) is None."""
    array = _samples(values)
    if array.size < 2:
        return None, None
    interval = stats.quantile_test(array, q=float(np.median(array)), p=p).confidence_interval(
        confidence
    )
    low, high = float(interval.low), float(interval.high)
    return (None if math.isnan(low) else low), (None if math.isnan(high) else high)


def latency(durations_ns: Sequence[int] | np.ndarray, *, samples: bool = False) -> dict[str, Any]:
    """The summary of one batch size's timed batches, in ms: the median and its interval
    (`p50_low_ms`, `p50_high_ms`; None where fewer samples than it takes), p90 and p99 (linear
    interpolation) and whether the samples bound them, the mean and std (population), min,
    max, and the count of samples behind every figure; with `samples`, the samples too
    (`samples_ms`, in the order they were timed), from which a comparison tests a
    difference."""
    ms = _samples(durations_ns) / 1e6
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    low, high = quantile_interval(ms, 0.5)
    return {
        "count": int(ms.size),
        "p50_ms": float(p50),
        "p50_low_ms": low,
        "p50_high_ms": high,
        "p90_ms": float(p90),
        "p90_bounded": quantile_interval(ms, 0.9)[1] is not None,
        "p99_ms": float(p99),
        "p99_bounded": quantile_interval(ms, 0.99)[1] is not None,
        "mean_ms": float(ms.mean()),
        "std_ms": float(ms.std()),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
        **({"samples_ms": ms.tolist()} if samples else {}),
    }


def median_interval_width(values: Sequence[float] | np.ndarray) -> float | None:
    """The half-width of the median's interval as a share of the median (the larger side);
    None where the samples cannot bound it yet."""
    array = _samples(values)
    low, high = quantile_interval(array, 0.5)
    median = float(np.median(array))
    if low is None or high is None or median <= 0:
        return None
    return max(median - low, high - median) / median


@dataclass(frozen=True)
class Difference:
    """How `other` compares with `baseline`: `ratio` is median(other) / median(baseline)."""

    ratio: float
    # The interval of the ratio: the sampling interval (`sampling_low`, `sampling_high`) and
    # the drift of one machine between two runs (`drift`), combined.
    low: float
    high: float
    p_value: float
    verdict: str
    # The smallest relative difference the comparison could have detected.
    detectable: float
    baseline_count: int
    other_count: int
    noise: float = NOISE
    sampling_low: float | None = None
    sampling_high: float | None = None
    drift: float = DRIFT
    test: str = LATENCY_TEST
    interval: str = RATIO_INTERVAL

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def words(self) -> str:
        """The verdict as the pages print it."""
        if self.verdict == NO_DIFFERENCE:
            return f"no detectable difference (±{self.detectable * 100:.1f} %)"
        return f"{self.verdict} (×{ratio(self.ratio)})"


def segments(array: np.ndarray) -> np.ndarray:
    """The medians of `SEGMENTS` consecutive stretches of a run's samples (in the order they
    were timed), where each side has at least `MIN_SEGMENTED`; else the samples themselves.
    Batch means: samples timed one after another are not independent (another process, the
    clock, the caches drift through a run), and a stretch's median carries that drift where a
    resampled single batch would hide it."""
    if array.size < MIN_SEGMENTED:
        return array
    return np.asarray([np.median(part) for part in np.array_split(array, SEGMENTS)])


def _thin(array: np.ndarray, most: int) -> np.ndarray:
    if array.size <= most:
        return array
    return array[np.linspace(0, array.size - 1, most).astype(np.int64)]


def _median_ratio(baseline: np.ndarray, other: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.median(other, axis=axis) / np.median(baseline, axis=axis))


def _with_drift(ratio_value: float, low: float, high: float) -> tuple[float, float]:
    """The sampling interval of a ratio widened by `DRIFT`: each side's half-width on the log
    scale combined in quadrature with log(1 + DRIFT)."""
    drift = math.log1p(DRIFT)
    below = math.log(ratio_value / low) if low > 0 else math.inf
    above = math.log(high / ratio_value)
    return (
        ratio_value * math.exp(-math.hypot(below, drift)),
        ratio_value * math.exp(math.hypot(above, drift)),
    )


def difference(
    baseline: Sequence[float] | np.ndarray,
    other: Sequence[float] | np.ndarray,
    *,
    noise: float = NOISE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    most: int = BOOTSTRAP_SAMPLES,
) -> Difference:
    """Whether `other`'s samples (latencies: lower is faster) differ from `baseline`'s: the
    ratio of medians with its bootstrap interval, the Mann–Whitney U test, and the verdict
    (see the module docstring). Needs at least two samples on each side. `resamples` and
    `most` (the samples of a side the bootstrap draws from, an even thinning) trade the
    interval's precision for time where many differences are tested at once (per layer)."""
    a, b = _samples(baseline), _samples(other)
    if a.size < 2 or b.size < 2:
        raise ValueError("a comparison needs at least two samples on each side")
    if np.median(a) <= 0 or np.median(b) <= 0:
        raise ValueError("medians must be positive to be compared as a ratio")
    if not 0 <= noise < 1:
        raise ValueError(f"noise must be a share in [0, 1); got {noise!r}")
    ratio_value = float(np.median(b) / np.median(a))
    if a.size >= MIN_SEGMENTED and b.size >= MIN_SEGMENTED:
        a_units, b_units = segments(a), segments(b)
    else:
        a_units, b_units = a, b
    if np.ptp(a_units) == 0 and np.ptp(b_units) == 0:
        low = high = ratio_value
        p_value = 1.0 if ratio_value == 1 else 0.0
    else:
        boot = stats.bootstrap(
            (_thin(a_units, most), _thin(b_units, most)),
            _median_ratio,
            vectorized=True,
            paired=False,
            n_resamples=resamples,
            batch=200,
            method="percentile",
            confidence_level=CONFIDENCE,
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
        # The interval always holds the ratio of the runs' own medians it is reported with.
        low = min(float(boot.confidence_interval.low), ratio_value)
        high = max(float(boot.confidence_interval.high), ratio_value)
        p_value = float(stats.mannwhitneyu(a_units, b_units, alternative="two-sided").pvalue)
    sampling_low, sampling_high = low, high
    low, high = _with_drift(ratio_value, low, high)
    half = max(ratio_value - low, high - ratio_value) / ratio_value
    upper, lower = 1 + noise, 1 / (1 + noise)
    faster, slower, verdict = VERDICTS
    if p_value < ALPHA and low > upper:
        verdict = slower
    elif p_value < ALPHA and high < lower:
        verdict = faster
    return Difference(
        ratio=ratio_value,
        low=low,
        high=high,
        p_value=p_value,
        verdict=verdict,
        detectable=max(noise, half),
        sampling_low=sampling_low,
        sampling_high=sampling_high,
        baseline_count=int(a.size),
        other_count=int(b.size),
        noise=noise,
        interval=RATIO_INTERVAL
        if resamples == BOOTSTRAP_RESAMPLES
        else f"95 % bootstrap interval of the ratio of medians ({resamples:,} resamples), "
        f"with ±{DRIFT:.0%} for the drift of a machine between two runs",
    )


def proportion(successes: int, total: int) -> dict[str, Any]:
    """A share (top-1) with its Wilson score interval."""
    if total <= 0 or not 0 <= successes <= total:
        raise ValueError(
            f"a proportion needs 0 <= successes <= total, total > 0; got {successes}/{total}"
        )
    interval = stats.binomtest(successes, total).proportion_ci(CONFIDENCE, method="wilson")
    return {
        "value": successes / total,
        "low": float(interval.low),
        "high": float(interval.high),
        "count": total,
        "interval": ACCURACY_INTERVAL,
    }


def paired_accuracy(baseline_right: np.ndarray, other_right: np.ndarray) -> dict[str, Any]:
    """Two models' per-input correctness on the same inputs, compared: the inputs only the
    baseline gets right (`only_baseline`), only the other (`only_other`), the exact McNemar
    p-value and the verdict of the other against the baseline."""
    a = np.asarray(baseline_right, dtype=bool)
    b = np.asarray(other_right, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"the two models scored different inputs ({a.size} and {b.size})")
    only_a = int(np.count_nonzero(a & ~b))
    only_b = int(np.count_nonzero(b & ~a))
    discordant = only_a + only_b
    p_value = float(stats.binomtest(only_b, discordant, 0.5).pvalue) if discordant else 1.0
    more, less, verdict = ACCURACY_VERDICTS
    if p_value < ALPHA:
        verdict = more if only_b > only_a else less
    return {
        "only_baseline": only_a,
        "only_other": only_b,
        "count": int(a.size),
        "p_value": p_value,
        "verdict": verdict,
        "test": ACCURACY_TEST,
    }


# -- one rounding rule -------------------------------------------------------------------------


def ms(value: float | None) -> str:
    """A time in ms to four significant figures, never in exponent form ("0.1243", "2.948",
    "12345"); "—" for None."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return _significant(value, 4)


def ratio(value: float | None) -> str:
    """A ratio to three significant figures ("0.670", "1.02", "12.3")."""
    if value is None or not math.isfinite(value):
        return "—"
    return _significant(value, 3)


def _significant(value: float, figures: int) -> str:
    """A number to `figures` significant figures, never in exponent form."""
    if value == 0:
        return "0"
    decimals = max(0, figures - 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def percent(share: float | None) -> str:
    """A share as a percentage with two decimals ("97.20 %")."""
    if share is None:
        return "—"
    return f"{share * 100:.2f} %"


def median_text(summary: dict[str, Any]) -> str:
    """A latency summary's headline: "0.1243 ms (95 % CI 0.1201–0.1302, n=200)"."""
    head = f"{ms(summary.get('p50_ms'))} ms"
    low, high = summary.get("p50_low_ms"), summary.get("p50_high_ms")
    count = summary.get("count")
    if low is None or high is None:
        return f"{head} (interval not bounded, n={count})" if count else head
    return f"{head} (95 % CI {ms(low)}–{ms(high)}, n={count})"


def latency_text(summary: dict[str, Any]) -> dict[str, str]:
    """A latency summary's figures as every surface prints them (ms, `ms`'s rule): `p50`,
    `p50_interval` ("low–high", or "not bounded"), `p90` and `p99` (each followed by "(not
    bounded)" where the samples cannot bound it), `mean`, `std`, `min`, `max`, and
    `headline` (`median_text`)."""
    low, high = summary.get("p50_low_ms"), summary.get("p50_high_ms")

    def tail(name: str) -> str:
        value = ms(summary.get(f"{name}_ms"))
        return value + (" (not bounded)" if summary.get(f"{name}_bounded") is False else "")

    return {
        "p50": ms(summary.get("p50_ms")),
        "p50_interval": f"{ms(low)}–{ms(high)}"
        if low is not None and high is not None
        else "not bounded",
        "p90": tail("p90"),
        "p99": tail("p99"),
        "mean": ms(summary.get("mean_ms")),
        "std": ms(summary.get("std_ms")),
        "min": ms(summary.get("min_ms")),
        "max": ms(summary.get("max_ms")),
        "headline": median_text(summary),
    }


def p_value(value: float | None) -> str:
    """A p-value as printed: "p = 0.042", "p < 0.001"."""
    if value is None:
        return "—"
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"


def per_second(value: float | None) -> str:
    """A throughput (inputs per second) as printed: one decimal."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.1f}"


def between_runs(values: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """One metric over repeated runs (each its own process, `mlms study`): the runs' `mean`,
    `std` (ddof 1) and `ci95`, the half-width of the 95 % interval of the mean (Student's t:
    runs are few, and each run's figure is already a median of many batches); std and ci95
    None for a single run; the runs' `values`."""
    array = _samples(values)
    n = array.size
    std = float(array.std(ddof=1)) if n > 1 else None
    ci = float(stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)) if std is not None else None
    return {"mean": float(array.mean()), "std": std, "ci95": ci, "values": array.tolist()}


def samples_to_bound(p: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples whose order statistics bound both ends of the p-quantile's
    `confidence` interval (`quantile_interval`): the outer end needs the largest (or, below the
    median, the smallest) sample to lie beyond the quantile with probability 1 − (1 −
    confidence)/2, that is 1 − max(p, 1 − p)^n ≥ 1 − (1 − confidence)/2. 368 for a p99."""
    if not 0 < p < 1:
        raise ValueError(f"p must be a share strictly between 0 and 1; got {p!r}")
    return math.ceil(math.log((1 - confidence) / 2) / math.log(max(p, 1 - p)))
