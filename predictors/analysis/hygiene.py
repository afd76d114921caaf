"""Measurement hygiene: what makes a result's numbers less defensible, checked on every run and
stored with it as labelled warnings (`result["hygiene"]`: each `{"code", "message"}`, with the
measured values).

- `threads_over_cores`: more framework threads than the cores this process may use.
- `loaded_at_start`: other processes used more than `OTHERS_SHARE` of the machine's CPU time
  while the run set up (fetched, loaded the model), measured as `others_busy` over that window
  when it lasts at least `START_WINDOW` seconds (the one-minute load average, which this
  process's own earlier work also raises, is recorded beside it, not judged).
- `others_busy`: other processes used more than `OTHERS_SHARE` of the machine's CPU time while
  the run went on: the machine's busy time (psutil's system-wide CPU times) less this process's
  own and its children's, over the wall time and the usable cores.
- `spread`: a batch size whose batch latencies have an interquartile range above
  `SPREAD_OF_MEDIAN` of their median (torch.utils.benchmark's rule).
- `few_samples_for_p99`: fewer timed batches than a p99 needs for its 95 % interval to be
  bounded (`predictors.statistics.samples_to_bound`: 368; the result's `p99_bounded` says the
  same).
- `warmup_not_converged`: the first tenth of a batch size's timed batches still slower, by more
  than `WARMUP_RATIO`, than the median of the rest (at least 20 batches).
- `cpu_governor`: a CPU frequency governor other than `performance` (where Linux says), and
  `cpu_boost`: frequency boost on (turbo: clocks vary with load and temperature).
- `tracing_overhead`: the run's calls, traced at its trace level, slower by more than
  `TRACING_OVERHEAD` than the same calls untraced (`tracing_overhead`: after the run, the model is
  loaded again tracing nothing and the first batch is timed `CALIBRATION_CALLS` times, at most
  `CALIBRATION_SECONDS`; the medians are compared).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from predictors import statistics

if TYPE_CHECKING:
    from predictors.evaluation.base import Scenario
    from predictors.frameworks.predictor import Predictor

# The warnings that question a run's latencies themselves: other processes competing for the
# CPU while it ran or loaded, batch latencies spread wide, a warm-up not over. A difference
# called between two runs is in question where either has one (`latency_questions`); the others
# (threads over cores, the CPU's governor and boost, tracing overhead, too few samples for a
# p99) describe a run's conditions, which its evaluation page lists.
QUESTION_LATENCY = ("others_busy", "loaded_at_start", "spread", "warmup_not_converged")

START_WINDOW = 0.1
OTHERS_SHARE = 0.25
SPREAD_OF_MEDIAN = 0.10
WARMUP_RATIO = 1.10
P99_CONFIDENCE = 0.95
TRACING_OVERHEAD = 0.10
CALIBRATION_CALLS = 32
CALIBRATION_SECONDS = 0.25
_CPUFREQ = Path("/sys/devices/system/cpu")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def latency_questions(warnings: Iterable[Any], batch_size: int) -> list[dict[str, Any]]:
    """Of a run's hygiene warnings, those that question its latencies at `batch_size`
    (`QUESTION_LATENCY`: the run-wide ones, and that batch size's own), as they were stored."""
    found = []
    for warning in warnings:
        if not isinstance(warning, dict) or warning.get("code") not in QUESTION_LATENCY:
            continue
        if warning.get("batch_size", batch_size) == batch_size:
            found.append(warning)
    return found


def _warning(code: str, message: str, **values: Any) -> dict[str, Any]:
    return {"code": code, "message": message, **values}


@dataclass
class Watch:
    """The machine's state when a run starts, to compare with when its timing starts
    (`timing`) and when it ends (`finish`)."""

    wall: float
    busy: float
    own: float
    load: float | None
    cores: int
    opening: float | None = None  # other processes' share of the CPU while the run set up

    @classmethod
    def start(cls) -> Watch:
        return cls(time.perf_counter(), _busy_seconds(), _own_seconds(), _load(), usable_cores())

    def others_share(self) -> tuple[float, float]:
        """Other processes' share of the machine's CPU time since the start, and the seconds
        it spans."""
        wall = time.perf_counter() - self.wall
        if wall <= 0:
            return 0.0, 0.0
        others = (_busy_seconds() - self.busy) - (_own_seconds() - self.own)
        return max(0.0, others) / (wall * self.cores), wall

    def timing(self) -> None:
        """The set-up is over: the timed calls start (`loaded_at_start` is judged on the
        window until here)."""
        share, wall = self.others_share()
        self.opening = share if wall >= START_WINDOW else None

    def finish(self, threads: int | None) -> list[dict[str, Any]]:
        """The run-wide warnings (`threads_over_cores`, `loaded_at_start`, `others_busy`, the
        CPU's governor and boost)."""
        found = []
        cores = self.cores
        if threads is not None and threads > cores:
            found.append(
                _warning(
                    "threads_over_cores",
                    f"{threads} threads on {cores} usable cores: the threads take turns, and "
                    "the latency measures the contention as much as the model",
                    threads=threads,
                    cores=cores,
                )
            )
        if self.opening is not None and self.opening > OTHERS_SHARE:
            found.append(
                _warning(
                    "loaded_at_start",
                    f"the machine was loaded when the run started: other processes used "
                    f"{self.opening:.0%} of its CPU time while the model loaded",
                    share=round(self.opening, 3),
                    load_average=None if self.load is None else round(self.load, 2),
                    cores=cores,
                )
            )
        share, wall = self.others_share()
        if wall > 0:
            if share > OTHERS_SHARE:
                found.append(
                    _warning(
                        "others_busy",
                        f"other processes used {share:.0%} of the machine's CPU time during "
                        "the run: the latency includes waiting for them",
                        share=round(share, 3),
                    )
                )
        found += _cpu_frequency()
        return found


def batch_size_warnings(
    batch_size: int, durations_ns: list[int] | np.ndarray
) -> list[dict[str, Any]]:
    """The warnings of one batch size's timed batches (`spread`, `few_samples_for_p99`,
    `warmup_not_converged`)."""
    ms = np.asarray(durations_ns, dtype=np.float64) / 1e6
    found: list[dict[str, Any]] = []
    if ms.size == 0:
        return found
    median = float(np.median(ms))
    low, high = np.percentile(ms, [25, 75])
    if median > 0 and (high - low) / median > SPREAD_OF_MEDIAN:
        found.append(
            _warning(
                "spread",
                f"batch size {batch_size}: the batch latencies' interquartile range is "
                f"{(high - low) / median:.0%} of their median (above "
                f"{SPREAD_OF_MEDIAN:.0%}): the machine or the model did not run steadily",
                batch_size=batch_size,
                iqr_of_median=round(float((high - low) / median), 4),
            )
        )
    needed = statistics.samples_to_bound(0.99, P99_CONFIDENCE)
    if ms.size < needed:
        found.append(
            _warning(
                "few_samples_for_p99",
                f"batch size {batch_size}: {ms.size} timed batches; a p99's "
                f"{P99_CONFIDENCE:.0%} interval needs {needed} to be bounded (the p99 of fewer "
                "is one of the largest few, shown as not bounded)",
                batch_size=batch_size,
                samples=int(ms.size),
                needed=needed,
            )
        )
    if ms.size >= 20:
        head = max(2, ms.size // 10)
        first, rest = float(ms[:head].mean()), float(np.median(ms[head:]))
        if rest > 0 and first / rest > WARMUP_RATIO:
            found.append(
                _warning(
                    "warmup_not_converged",
                    f"batch size {batch_size}: the first {head} timed batches took "
                    f"{first / rest:.2f}× the median of the rest: more warm-up was needed",
                    batch_size=batch_size,
                    ratio=round(first / rest, 3),
                )
            )
    return found


def _busy_seconds() -> float:
    import psutil

    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def _own_seconds() -> float:
    times = os.times()
    return float(times.user + times.system + times.children_user + times.children_system)


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _cpu_frequency() -> list[dict[str, Any]]:
    found = []
    try:
        governor = (_CPUFREQ / "cpu0/cpufreq/scaling_governor").read_text().strip()
    except OSError:
        governor = ""
    if governor and governor != "performance":
        found.append(
            _warning(
                "cpu_governor",
                f"the CPU frequency governor is {governor}, not performance: clocks change "
                "with load",
                governor=governor,
            )
        )
    boost = None
    try:
        boost = (_CPUFREQ / "cpufreq/boost").read_text().strip() == "1"
    except OSError:
        try:
            boost = (_CPUFREQ / "intel_pstate/no_turbo").read_text().strip() == "0"
        except OSError:
            pass
    if boost:
        found.append(
            _warning(
                "cpu_boost",
                "CPU frequency boost (turbo) is on: clocks vary with load and temperature",
            )
        )
    return found


def tracing_overhead(
    loop: Scenario, first: dict[str, Any], untraced: Callable[[], Predictor]
) -> dict[str, Any]:
    """The tracing overhead of a run (`first`: its first batch size's result): its traced
    calls' median latency against the median of the same batch's calls on the model loaded
    again tracing nothing (`untraced()`); `measured` False, saying why, where it cannot be."""
    level = loop.options.trace_level
    if level == "none":
        return {"measured": False, "reason": "nothing was traced (trace level none)"}
    if loop.call != loop.predictor.predict or loop.sample is None:
        return {
            "measured": False,
            "reason": "the calibration times one-input predict calls; this task's calls feed "
            "or read more",
        }
    batch = loop.sample
    predictor = untraced()
    durations: list[int] = []
    try:
        with predictor.inference_context():
            for _ in range(2):  # warm, as the run was
                predictor.predict(batch)
            synchronize = predictor.synchronize if loop.options.device != "cpu" else None
            deadline = time.perf_counter_ns() + int(CALIBRATION_SECONDS * 1e9)
            while len(durations) < CALIBRATION_CALLS and (
                len(durations) < 5 or time.perf_counter_ns() < deadline
            ):
                start = time.perf_counter_ns()
                predictor.predict(batch)
                if synchronize is not None:
                    synchronize()
                durations.append(time.perf_counter_ns() - start)
    finally:
        predictor.close()
    untraced_ms = float(np.median(durations)) / 1e6
    traced_ms = float(first["latency"]["p50_ms"])
    return {
        "measured": True,
        "level": level,
        "batch_size": int(len(batch)),
        "calls": len(durations),
        "traced_p50_ms": traced_ms,
        "untraced_p50_ms": untraced_ms,
        "overhead": traced_ms / untraced_ms - 1.0 if untraced_ms > 0 else None,
    }


def overhead_warnings(overhead: dict[str, Any]) -> list[dict[str, Any]]:
    """`tracing_overhead` as a warning, where it passes TRACING_OVERHEAD."""
    ratio = overhead.get("overhead")
    if not overhead.get("measured") or ratio is None or ratio <= TRACING_OVERHEAD:
        return []
    return [
        _warning(
            "tracing_overhead",
            f"tracing at level {overhead['level']} made the calls {ratio:.0%} slower than "
            f"untraced (p50 {overhead['traced_p50_ms']:.3f} ms against "
            f"{overhead['untraced_p50_ms']:.3f} ms at batch size {overhead['batch_size']}): "
            "compare latencies of runs traced alike",
            overhead=round(ratio, 4),
        )
    ]
