"""Timing until the answer is known: the job option `target_ci`.

Past its `repeat` passes, a batch size is timed again, over the batches already staged in
memory, until the median's 95 % distribution-free interval is within ± `target_ci` of the
median (`predictors.statistics.median_interval_width`: the larger half-width, as a share of the
median; the same interval the result's `p50_low_ms` and `p50_high_ms` give), or until
`target_ci_seconds` have passed since the batch size's first read, whichever comes first. A
run that would time more than `MAX_BATCHES` batches at one batch size stops there.

The fixed-batch loop checks between rounds of timed calls: each round times at least
`MIN_ROUND` batches and at least `GROWTH` of the samples so far (a check costs about a
millisecond), and no more than the time left is expected to hold, so that the time bound is
overshot by about one batch. The streaming scenario
(`predictors.evaluation.scenarios.streams`) times whole passes over its streams, each stream's
state carried from call to call, and checks between passes.

The batch size's result says what happened (`target_ci`): `asked` (the share), `reached` (the
interval's half-width as a share when timing stopped; null where the samples could not bound
it), `stopped` (`interval`, `time bound` or `batch bound`), `batches` (the timed batches in
all), `seconds` (from the batch size's first read to the stop), `seconds_bound`, and `text`,
all of it in words.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from predictors import statistics

__all__ = ["MAX_BATCHES", "STOPS", "TargetCi", "target_ci_text"]

# Why timing stopped.
INTERVAL = "interval"
TIME_BOUND = "time bound"
BATCH_BOUND = "batch bound"
STOPS = (INTERVAL, TIME_BOUND, BATCH_BOUND)
# The most batches one batch size times for a target (the result carries every sample).
MAX_BATCHES = 500_000
MIN_ROUND = 8
GROWTH = 0.05


class TargetCi:
    """One batch size's timing toward `asked`, started (its first read) at `started_ns`
    (`time.perf_counter_ns`)."""

    def __init__(self, asked: float, seconds: float, started_ns: int) -> None:
        self.asked = asked
        self.seconds_bound = seconds
        self.started_ns = started_ns
        self.reached: float | None = None
        self.stopped: str | None = None
        self.rounds = 0  # rounds timed past the repeat passes
        self.batches = 0
        self.elapsed_ns = 0

    @classmethod
    def start(cls, options: Any, started_ns: int) -> TargetCi | None:
        """The target of `options` (an `EvaluationOptions`); None where none is asked."""
        if options.target_ci is None:
            return None
        return cls(float(options.target_ci), float(options.target_ci_seconds), started_ns)

    def more(self, samples: Sequence[int], batches: int) -> int:
        """How many batches to time before the next check (`samples`: the durations the
        latency summary is computed from, in ns; `batches`: every batch timed so far at this
        batch size); 0 when timing stops (`stopped` says why)."""
        now = time.perf_counter_ns()
        self.batches = batches
        self.elapsed_ns = now - self.started_ns
        self.reached = statistics.median_interval_width(samples) if len(samples) else None
        if self.reached is not None and self.reached <= self.asked:
            self.stopped = INTERVAL
            return 0
        left_ns = self.seconds_bound * 1e9 - self.elapsed_ns
        if left_ns <= 0:
            self.stopped = TIME_BOUND
            return 0
        if batches >= MAX_BATCHES:
            self.stopped = BATCH_BOUND
            return 0
        self.rounds += 1
        per_batch = max(float(np.median(samples)), 1.0) if len(samples) else left_ns
        return max(
            1,
            min(
                max(MIN_ROUND, math.ceil(len(samples) * GROWTH)),
                math.ceil(left_ns / per_batch),
                MAX_BATCHES - batches,
            ),
        )

    def report(self) -> dict[str, Any]:
        """The batch size's `target_ci` entry (after `more` answered 0), with `text`, the
        entry in words (`target_ci_text`) as the CLI and the evaluation page show it."""
        entry: dict[str, Any] = {
            "asked": self.asked,
            "reached": self.reached,
            "stopped": self.stopped,
            "batches": self.batches,
            "seconds": round(self.elapsed_ns / 1e9, 3),
            "seconds_bound": self.seconds_bound,
        }
        return entry | {"text": target_ci_text(entry)}


def target_ci_text(target: Mapping[str, Any]) -> str:
    """A `target_ci` entry in words, as the CLI prints it and the evaluation page shows it:
    "median within ±1.30 % (asked ±2.00 %): 812 batches in 3.2 s"."""
    asked = f"±{statistics.percent(target['asked'])}"
    reached = target.get("reached")
    at = "an interval not yet bounded" if reached is None else f"±{statistics.percent(reached)}"
    stopped = target.get("stopped")
    if stopped == INTERVAL:
        head = f"median within {at} (asked {asked})"
    elif stopped == TIME_BOUND:
        head = (
            f"stopped at the time bound ({target['seconds_bound']:g} s) with {at} (asked {asked})"
        )
    else:
        head = f"stopped at the batch bound ({MAX_BATCHES:,} batches) with {at} (asked {asked})"
    seconds = target["seconds"]
    return f"{head}: {target['batches']:,} batches in {seconds:.{2 if seconds < 10 else 1}f} s"
