"""Measurement hygiene (`predictors.analysis.hygiene`): every result carries labelled
warnings of what makes its numbers less defensible; here more threads than cores and a machine
that other processes keep busy, in real runs, and each batch-size rule on measured shapes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors import statistics
from predictors.analysis.hygiene import (
    Watch,
    batch_size_warnings,
    usable_cores,
)
from predictors.cli.report import format_table
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "digits-cnn", "dataset": "digits", "framework": "onnxruntime", "repeat": 1}


def _codes(result: dict[str, Any]) -> set[str]:
    return {warning["code"] for warning in result["hygiene"]}


@pytest.mark.frameworks
def test_more_threads_than_cores_is_a_warning_on_the_result(
    run_evaluation: RunEvaluation,
) -> None:
    cores = usable_cores()
    crowded = run_evaluation(threads=cores * 8, limit=64, batch_sizes=[8])
    (warning,) = [w for w in crowded.result["hygiene"] if w["code"] == "threads_over_cores"]
    assert warning["threads"] == cores * 8 and warning["cores"] == cores
    assert f"{cores * 8} threads on {cores} usable cores" in warning["message"]
    report = {"results": [crowded.result], "comparisons": [], "overrides": [], "stack": _stack()}
    assert "warning (threads_over_cores): " in format_table(report)
    fitting = run_evaluation(threads=1, limit=64, batch_sizes=[8])
    assert "threads_over_cores" not in _codes(fitting.result)


@pytest.mark.frameworks
def test_a_run_while_other_processes_load_the_machine_says_so(
    run_evaluation: RunEvaluation,
) -> None:
    # (Whether the machine is quiet otherwise is not this test's to know: only the loaded run
    # is asserted.)
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(usable_cores())
    ]
    try:
        busy = run_evaluation(threads=1, batch_sizes=[1], repeat=10)  # about a second
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    (warning,) = [w for w in busy.result["hygiene"] if w["code"] == "others_busy"]
    assert warning["share"] > 0.25
    assert "other processes used" in warning["message"]


@pytest.mark.frameworks
def test_the_tracing_overhead_is_measured_against_untraced_calls(
    run_evaluation: RunEvaluation,
) -> None:
    traced = run_evaluation(framework="pytorch", trace_level="framework", limit=64, batch_sizes=[4])
    overhead = traced.result["trace"]["overhead"]
    assert overhead["measured"] is True and overhead["level"] == "framework"
    assert overhead["batch_size"] == 4 and 5 <= overhead["calls"] <= 32
    assert overhead["traced_p50_ms"] == traced.result["batch_sizes"][0]["latency"]["p50_ms"]
    assert overhead["untraced_p50_ms"] > 0
    expected = overhead["traced_p50_ms"] / overhead["untraced_p50_ms"] - 1
    assert overhead["overhead"] == pytest.approx(expected)
    flagged = "tracing_overhead" in _codes(traced.result)
    assert flagged == (overhead["overhead"] > 0.10)

    untraced = run_evaluation(trace_level="none", limit=64, batch_sizes=[4])
    assert untraced.result["trace"]["overhead"] == {
        "measured": False,
        "reason": "nothing was traced (trace level none)",
    }


@pytest.mark.frameworks
def test_the_first_call_is_reported_apart_from_the_warm_latency(
    run_evaluation: RunEvaluation,
) -> None:
    warm = run_evaluation(limit=64, batch_sizes=[1, 16], warmup=2)
    for entry in warm.result["batch_sizes"]:
        assert entry["first_call_ms"] > 0
    cold = run_evaluation(limit=64, batch_sizes=[16], warmup=0, cold_start=True)
    (entry,) = cold.result["batch_sizes"]
    # With no warm-up the first timed call is the cold one: among the timed, no faster.
    assert entry["latency"]["min_ms"] <= entry["first_call_ms"] <= entry["latency"]["max_ms"]


def test_a_machine_busy_while_the_run_sets_up_is_loaded_at_start() -> None:
    watch = Watch.start()
    # Other processes (not yet reaped: a reaped child's time would count as this process's).
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(usable_cores())
    ]
    try:
        time.sleep(0.6)
        watch.timing()  # the set-up (here: 0.6 s while the spinners run) is over
        found = {warning["code"]: warning for warning in watch.finish(threads=None)}
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert found["loaded_at_start"]["share"] > 0.25
    assert "while the model loaded" in found["loaded_at_start"]["message"]
    # This process's own work is no other process's: spinning here counts for nothing.
    own = Watch.start()
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:
        pass
    own.timing()
    assert own.opening is not None
    assert own.opening < 0.25  # below the threshold: no loaded_at_start for one's own work
    # A set-up too short to judge says nothing.
    quick = Watch.start()
    quick.timing()
    assert quick.opening is None


def test_a_p99_needs_368_samples_for_its_95_percent_interval() -> None:
    assert statistics.samples_to_bound(0.99) == 368
    # The rule is the interval's own: 368 samples bound it, 367 do not.
    for n, bounded in ((368, True), (367, False)):
        assert (statistics.quantile_interval(np.arange(n) + 1.0, 0.99)[1] is not None) is bounded
        assert statistics.latency(np.arange(n) + 1)["p99_bounded"] is bounded
    assert statistics.samples_to_bound(0.9) == 36


def test_each_batch_size_rule_on_measured_shapes() -> None:
    rng = np.random.default_rng(0)
    steady = rng.normal(1_000_000, 10_000, 400).astype(np.int64)  # 1 ms ± 1 %
    assert batch_size_warnings(8, steady) == []

    spread = np.concatenate([steady[:200], steady[200:] * 2])
    (warning,) = batch_size_warnings(8, spread)
    assert warning["code"] == "spread" and warning["iqr_of_median"] > 0.1

    few = batch_size_warnings(1, steady[:50])
    assert [w["code"] for w in few] == ["few_samples_for_p99"]
    assert few[0]["samples"] == 50 and few[0]["needed"] == 368

    cold = steady.copy()
    cold[:40] *= 3  # the first tenth still three times slower
    codes = [w["code"] for w in batch_size_warnings(4, cold)]
    assert codes == ["warmup_not_converged"]


def _stack() -> dict[str, Any]:
    return {
        "cpu": {"model": "cpu", "usable_cores": usable_cores()},
        "memory_bytes": 2**30,
        "os": {"platform": "linux"},
        "python": {"version": "3.11"},
        "gpus": [],
    }
