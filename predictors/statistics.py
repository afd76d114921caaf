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
- **A series of re-runs** (a watch) labels each run regression, improvement or noise against
  the noise the series itself shows (`series_verdicts`: a sequential change-point test, a
  prediction interval from the spread of the runs' medians and the Mann–Whitney test of
  `difference`), not against a fixed threshold.
- **One rounding rule** (`ms`, `percent`): what a page, the CSV and the CLI print.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
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
# Several runs a side (`difference(..., per_run=True)`): one value per run, each run's median.
RUNS_TEST = "Mann–Whitney U, two-sided, on one value per run (each run's median)"
RUNS_INTERVAL = (
    f"95 % bootstrap interval of the ratio of the medians of the runs' values "
    f"({BOOTSTRAP_RESAMPLES:,} resamples)"
)
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
    low, high = _order_statistics(int(array.size), p, confidence)
    ordered = np.sort(array)
    return (
        None if low is None else float(ordered[low]),
        None if high is None else float(ordered[high]),
    )


@functools.lru_cache(maxsize=1024)
def _order_statistics(size: int, p: float, confidence: float) -> tuple[int | None, int | None]:
    """The ranks (from 0) of the order statistics that bound the p-quantile's interval of
    `size` samples (`scipy.stats.quantile_test`, which depends on the ranks only: asked once
    per size, of the ranks themselves); None for an end they cannot bound."""
    ranks = np.arange(size, dtype=np.float64)
    interval = stats.quantile_test(ranks, q=float(np.median(ranks)), p=p).confidence_interval(
        confidence
    )
    low, high = float(interval.low), float(interval.high)
    return (None if math.isnan(low) else int(low)), (None if math.isnan(high) else int(high))


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
    per_run: bool = False,
) -> Difference:
    """Whether `other`'s samples (latencies: lower is faster) differ from `baseline`'s: the
    ratio of medians with its bootstrap interval, the Mann–Whitney U test, and the verdict
    (see the module docstring). Needs at least two samples on each side. `resamples` and
    `most` (the samples of a side the bootstrap draws from, an even thinning) trade the
    interval's precision for time where many differences are tested at once (per layer).

    `per_run`: each sample is one run's value (its median of what is compared, runs of
    several processes or machines): the runs are independent units as they are (no
    stretches), and their spread holds the drift between runs already (no `DRIFT` term)."""
    a, b = _samples(baseline), _samples(other)
    if a.size < 2 or b.size < 2:
        raise ValueError("a comparison needs at least two samples on each side")
    if np.median(a) <= 0 or np.median(b) <= 0:
        raise ValueError("medians must be positive to be compared as a ratio")
    if not 0 <= noise < 1:
        raise ValueError(f"noise must be a share in [0, 1); got {noise!r}")
    ratio_value = float(np.median(b) / np.median(a))
    if not per_run and a.size >= MIN_SEGMENTED and b.size >= MIN_SEGMENTED:
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
    if not per_run:
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
        drift=0.0 if per_run else DRIFT,
        test=RUNS_TEST if per_run else LATENCY_TEST,
        interval=_interval_text(resamples, per_run),
    )


def _interval_text(resamples: int, per_run: bool) -> str:
    if per_run:
        return RUNS_INTERVAL.replace(f"{BOOTSTRAP_RESAMPLES:,}", f"{resamples:,}")
    if resamples == BOOTSTRAP_RESAMPLES:
        return RATIO_INTERVAL
    return (
        f"95 % bootstrap interval of the ratio of medians ({resamples:,} resamples), "
        f"with ±{DRIFT:.0%} for the drift of a machine between two runs"
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


# -- a series of re-runs: regression, improvement or noise --------------------------------------

REGRESSION = "regression"
IMPROVEMENT = "improvement"
SERIES_NOISE = "noise"
TOO_LITTLE_HISTORY = "too little history"
SERIES_VERDICTS = (REGRESSION, IMPROVEMENT, SERIES_NOISE, TOO_LITTLE_HISTORY)
# The runs a series needs before it calls anything: the first ones measure its noise.
MIN_HISTORY = 3
# The chance that a run with nothing changed lies beyond the prediction interval of its
# segment (the interval is 1 − SERIES_ALPHA, two-sided): one in a thousand, so that a long
# series of unchanged runs stays noise.
SERIES_ALPHA = 0.001
# The runs of a segment its level and reference samples are taken from: the latest ones.
SERIES_WINDOW = 20
# The bootstrap resamples of a run's ratio to its segment (evidence; the test decides): fewer
# than a comparison's, so that a long series is read quickly.
SERIES_RESAMPLES = 400
SERIES_TEST = (
    f"{(1 - SERIES_ALPHA) * 100:.1f} % prediction interval (Student's t) of a run's log median from the "
    "spread of the runs' medians in the series' stable segments, widened by the run's own "
    f"median interval and ±{DRIFT:.0%} for the drift of a machine between runs; and "
    f"{LATENCY_TEST} (the run against its segment's runs)"
)


@dataclass(frozen=True)
class SeriesVerdict:
    """One run of a series (`series_verdicts`): its median with its interval and its verdict
    against the stable segment before it, with the evidence.

    `segment` holds the runs (indices) it was compared with and `reference` the latest of
    them (what changed is named against it); `level_ms` is their level (the geometric mean of
    their medians), `ratio` the run's median over it, `low`/`high` and `p_value` what the
    test on the samples (`difference`) gives against the segment's samples, `noise` the
    share beyond which a run is called (the prediction interval's half-width) and
    `run_noise` the measured spread of the runs' medians (a standard deviation, as a share),
    from `history` runs. What a later run showed of this one: `returned_at`, the run that
    returned to the level (this one was an outlier), or `confirmed_by`, the run that
    confirmed it as a new level; `level_since`, the run where the level this one is noise
    against began; `hindsight`, one of the first runs judged against the runs after it.
    `note` says it in words."""

    index: int
    verdict: str
    median_ms: float
    median_low_ms: float | None
    median_high_ms: float | None
    count: int
    segment: tuple[int, ...] = ()
    reference: int | None = None
    level_ms: float | None = None
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    noise: float | None = None
    run_noise: float | None = None
    history: int = 0
    returned_at: int | None = None
    confirmed_by: int | None = None
    level_since: int | None = None
    hindsight: bool = False
    test: str = SERIES_TEST

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "segment": list(self.segment),
            "words": self.words,
            "note": self.note(),
        }

    def note(self, number: Callable[[int], Any] = lambda index: index + 1) -> str:
        """What later runs showed of this one, naming runs by `number` (by default their
        place in the series, from 1)."""
        if self.returned_at is not None:
            return f"an outlier: run {number(self.returned_at)} returned to the level"
        if self.confirmed_by is not None:
            return f"a level shift, confirmed by run {number(self.confirmed_by)}"
        if self.level_since is not None:
            return f"noise against the new level since run {number(self.level_since)}"
        if self.hindsight:
            return (
                "within the noise of the runs after it"
                if self.verdict == SERIES_NOISE
                else "beyond the noise of the runs after it"
            )
        return ""

    @property
    def words(self) -> str:
        """The verdict as the pages print it."""
        if self.verdict == TOO_LITTLE_HISTORY or self.ratio is None:
            return f"{TOO_LITTLE_HISTORY} ({MIN_HISTORY} runs measure the noise)"
        if self.noise is None:
            return f"{self.verdict} (×{ratio(self.ratio)}, its median's interval not bounded)"
        if self.verdict == SERIES_NOISE:
            return f"noise (×{ratio(self.ratio)}, within ±{self.noise * 100:.1f} %)"
        return (
            f"{self.verdict} (×{ratio(self.ratio)}, beyond ±{self.noise * 100:.1f} %, "
            f"{p_value(self.p_value)})"
        )


def _pooled_spread(logs: np.ndarray, segments_of: list[list[int]]) -> tuple[float, int]:
    """The standard deviation of the runs' log medians about their segment's mean, pooled
    over the segments (the latest `SERIES_WINDOW` runs of each), and its degrees of freedom."""
    squares, freedom = 0.0, 0
    for segment in segments_of:
        values = logs[segment[-SERIES_WINDOW:]]
        squares += float(np.sum((values - values.mean()) ** 2))
        freedom += values.size - 1
    return (math.sqrt(squares / freedom) if freedom > 0 else 0.0), freedom


class _Series:
    """The runs of a series as the test reads them: each run's samples, its median's log and
    the log half-width of the median's interval (infinite where the samples cannot bound
    it)."""

    def __init__(self, runs: Sequence[Sequence[float] | np.ndarray]) -> None:
        self.arrays = [_samples(run) for run in runs]
        self.medians = np.asarray([float(np.median(array)) for array in self.arrays])
        if np.any(self.medians <= 0):
            raise ValueError("a series' medians must be positive")
        self.logs = np.log(self.medians)
        self.intervals = [quantile_interval(array, 0.5) for array in self.arrays]
        self.halves = [
            math.inf
            if low is None or high is None or low <= 0
            else max(math.log(median / low), math.log(high / median))
            for (low, high), median in zip(self.intervals, self.medians, strict=True)
        ]

    def entry(self, index: int) -> dict[str, Any]:
        low, high = self.intervals[index]
        return {
            "index": index,
            "verdict": TOO_LITTLE_HISTORY,
            "median_ms": float(self.medians[index]),
            "median_low_ms": low,
            "median_high_ms": high,
            "count": int(self.arrays[index].size),
        }

    def against(self, segment: list[int], index: int, pooled: list[list[int]]) -> dict[str, Any]:
        """Run `index` against the runs of `segment`, the noise measured over the segments
        `pooled`: the evidence, and its `direction` (+1 slower, −1 faster, 0 within the
        noise). Beyond the noise: the log median lies past the prediction interval of one
        more run, t·s·√(1 + 1/n) combined in quadrature with the run's own median interval
        and the drift of a machine between two runs (`DRIFT`), and the Mann–Whitney test of
        `difference` rejects at ALPHA."""
        spread, freedom = _pooled_spread(self.logs, pooled)
        level = float(self.logs[segment].mean())
        threshold = math.inf
        if freedom > 0:
            t = float(stats.t.ppf(1 - SERIES_ALPHA / 2, freedom))
            # As every difference of two runs here (`difference`), the drift of one machine
            # between runs (`DRIFT`) joins the interval: a series of a few very quiet runs
            # would otherwise take a 2 % step of the clock for a change.
            threshold = math.hypot(
                t * spread * math.sqrt(1 + 1 / len(segment)),
                self.halves[index],
                math.log1p(DRIFT),
            )
        reference = np.concatenate([self.arrays[j] for j in segment])
        tested = difference(reference, self.arrays[index], noise=0.0, resamples=SERIES_RESAMPLES)
        shift = float(self.logs[index]) - level
        direction = 0
        if abs(shift) > threshold and tested.p_value < ALPHA:
            direction = 1 if shift > 0 else -1
        return {
            "direction": direction,
            "segment": tuple(segment),
            "reference": segment[-1],
            "level_ms": math.exp(level),
            # The ratio its interval belongs to: the run's median over the median of the
            # segment's samples (the threshold reads the run's log median against the level).
            "ratio": tested.ratio,
            "low": tested.low,
            "high": tested.high,
            "p_value": tested.p_value,
            "noise": math.expm1(threshold) if math.isfinite(threshold) else None,
            "run_noise": math.expm1(spread),
            "history": sum(len(part[-SERIES_WINDOW:]) for part in pooled),
        }


def series_verdicts(runs: Sequence[Sequence[float] | np.ndarray]) -> list[SeriesVerdict]:
    """Each run of a series of re-runs of one configuration (each run: its timed batches'
    latencies in ms at one batch size, in the order timed; the runs in the order run)
    labelled `regression`, `improvement` or `noise` against the noise the series itself
    shows, or `too little history`.

    A sequential change-point test. The series is cut into stable segments (runs at one
    level). The noise is measured from the series: the standard deviation of the runs' log
    medians about their segment's mean, pooled over the segments (the latest `SERIES_WINDOW`
    runs of each). Each run is compared with the current segment: a regression (an
    improvement) when its log median lies above (below) the segment's mean by more than the
    `1 − SERIES_ALPHA` prediction interval of one more run (Student's t on the pooled degrees
    of freedom, so that few runs give a wide interval), combined with the run's own median
    interval, *and* the Mann–Whitney test of `difference` on the run's samples against the
    segment's rejects at `ALPHA`.

    The first `MIN_HISTORY` runs only measure. Once more runs joined the segments, each of
    them is judged against the runs of its segment after and around it (leave one out); one
    beyond their noise is labelled as such and left out of the segment, and the series is
    read again without it (so that an early outlier does not widen the noise of all).

    A run called out stays out of the segment. When the next run returns to the segment's
    level, the called run was an outlier (`returned_at`) and the next is noise against the
    segment; when the next run is called in the same direction and lies within the noise of
    the called one, the level moved: the two start a new segment (the next is noise against
    the new level, `level_since`; the called run keeps its verdict, `confirmed_by`)."""
    series = _Series(runs)
    skipped: set[int] = set()
    for _ in range(MIN_HISTORY + 1):
        found, stable = _sequential(series, skipped)
        beyond = _hindsight(series, found, stable, skipped)
        if beyond <= skipped:
            break
        skipped |= beyond
    for entry in found:
        entry.pop("direction", None)
    return [SeriesVerdict(**entry) for entry in found]


def _sequential(series: _Series, skipped: set[int]) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """One pass over the series (the runs in `skipped` left out): each run's verdict, and the
    stable segments."""
    found = [series.entry(index) for index in range(len(series.arrays))]
    stable: list[list[int]] = []
    called: list[int] = []  # the run called out just before, not (yet) in a segment
    for index in range(len(series.arrays)):
        if index in skipped:
            continue
        if sum(len(segment) for segment in stable) < MIN_HISTORY:
            stable = stable or [[]]
            stable[-1].append(index)
            continue
        entry = found[index]
        entry.update(series.against(stable[-1][-SERIES_WINDOW:], index, stable))
        direction = entry["direction"]
        if direction == 0:
            entry["verdict"] = SERIES_NOISE
            stable[-1].append(index)
            for earlier in called:
                found[earlier]["returned_at"] = index
            called = []
            continue
        if called and found[called[0]]["direction"] == direction:
            again = series.against(called, index, stable)
            if again["direction"] == 0:
                entry.update(again, verdict=SERIES_NOISE, level_since=called[0])
                found[called[0]]["confirmed_by"] = index
                stable.append([*called, index])
                called = []
                continue
        entry["verdict"] = REGRESSION if direction > 0 else IMPROVEMENT
        called = [index]
    return found, stable


def _hindsight(
    series: _Series, found: list[dict[str, Any]], stable: list[list[int]], skipped: set[int]
) -> set[int]:
    """The first `MIN_HISTORY` runs of the first segment, and those left out of it, judged
    against the segment's other runs once later runs joined; the ones beyond their noise.
    The runs they are judged against are the segment's earliest `SERIES_WINDOW` less the
    outliers among them by the generalized extreme Studentized deviate test (Rosner, at
    SERIES_ALPHA, on their log medians), so that a later outlier the widened noise let in
    does not hide an early one."""
    if sum(len(segment) for segment in stable) <= MIN_HISTORY:
        return set()
    rest = stable[1:]
    window = stable[0][:SERIES_WINDOW]
    outliers = _extreme_deviates(series.logs[window], len(window) - MIN_HISTORY)
    kept = [index for place, index in enumerate(window) if place not in outliers]
    beyond = set()
    for index in sorted({*stable[0][:MIN_HISTORY], *skipped}):
        others = [j for j in kept if j != index]
        earlier = [j for j in others if j < index]
        entry = found[index]
        entry.update(series.against(others, index, [others, *rest]))
        entry.update(hindsight=True, reference=earlier[-1] if earlier else None)
        direction = entry["direction"]
        entry["verdict"] = (SERIES_NOISE, REGRESSION, IMPROVEMENT)[direction]
        if direction:
            beyond.add(index)
    return beyond


def _extreme_deviates(values: np.ndarray, most: int) -> set[int]:
    """The places of the outliers among `values`, at most `most` of them, by the generalized
    extreme Studentized deviate test (Rosner 1983) at SERIES_ALPHA: the farthest from the
    mean is taken out, `most` times over; the outliers are the first i taken out, i the last
    step whose deviate exceeds its critical value (so that two outliers cannot mask each
    other)."""
    remaining = list(range(values.size))
    taken: list[int] = []
    count = 0
    for step in range(1, min(most, values.size - 2) + 1):
        subset = values[remaining]
        spread = float(subset.std(ddof=1))
        if spread == 0:
            break
        deviations = np.abs(subset - subset.mean()) / spread
        farthest = int(np.argmax(deviations))
        size = values.size - step + 1
        t = float(stats.t.ppf(1 - SERIES_ALPHA / (2 * size), size - 2))
        critical = (size - 1) * t / math.sqrt((size - 2 + t * t) * size)
        taken.append(remaining.pop(farthest))
        if deviations[farthest] > critical:
            count = step
    return set(taken[:count])
