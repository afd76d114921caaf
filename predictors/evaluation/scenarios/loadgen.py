"""MLPerf LoadGen scenarios: after an evaluation's fixed batches (which score the model and time
each batch size), LoadGen (`mlcommons-loadgen`) drives the same loaded model in one of its
scenarios, and the result keeps LoadGen's summary (VALID or INVALID, and why), its detail log and
its settings (`result["loadgen"]`).

- **single_stream**: one sample per query, the next sent when the last completes; LoadGen reports
  the 90th-percentile latency.
- **multi_stream**: `samples_per_query` samples per query (default 8), run as one batch.
- **server**: queries of one sample arrive at random (Poisson) times at `target_qps`; a worker
  batches what waits, up to the largest batch size of the request, and the run is valid when
  the 99th percentile of the latency stays under `latency_bound_ms` (LoadGen's early stopping
  decides whether enough queries back that percentile).
- **offline**: every sample at once, run in batches of the largest batch size; LoadGen reports
  samples per second. Without `target_qps` it expects three times the fixed batches' best throughput
  (LoadGen sends expected QPS x minimum duration samples).

The samples are the split's inputs (the first `limit`), read and preprocessed once into memory
(LoadGen's query sample library), before LoadGen starts. LoadGen's seeds (QSL, sample index and
schedule) are the evaluation's `seed`. In `accuracy` mode every sample is sent once and the
outputs are scored (top-1 and top-5, as the fixed batches score them). LoadGen's early stopping
is always on in its scenarios; its verdict is part of the summary.

`find_peak_qps` (server): runs at rising target QPS (doubling from `target_qps`, or from half
the fixed batches' throughput at the smallest batch size) until the p99 passes the bound (or,
where the start does not hold, halving at most `MAX_HALVINGS` times, never below
`MIN_SEARCH_QPS` nor below the rate at which `min_query_count` queries would take over
`MAX_PROBE_SECONDS`), then bisects, and keeps every run as the curve it walked: its number (the
order it ran), target QPS, completed QPS, p99, whether the latency held, LoadGen's verdict and
why, and its summary. The peak is the highest target QPS LoadGen judged VALID (the p99 under the
bound, backed by enough queries for early stopping; a short run can hold its latency and still be
INVALID). One run is reported, and the verdict, summary, settings and log of the result are all
that run's (`reported` says which and why): the run at the peak, or, where no run was VALID, the
run at the lowest target, INVALID.

Each run's summary and detail log are read apart into LoadGen's verdict and the reasons of an
INVALID one (`invalid_reasons`: each "… satisfied : NO" line, early stopping's explanation where
it is one of them, LoadGen's recommendations), its own warnings and errors (`problems`: the detail
log's entries marked `is_warning` or `is_error`), and what is only information (`notes`, such as
"Early stopping: Run successful.").

The sample library holds the first inputs that fit in the loop's `stage_bytes` (256 MiB), so
that a large split is not held whole in memory; the settings say when it was capped. A server
accuracy run without `target_qps` sends at the fixed batches' throughput.

The model is driven untraced: tracing stops with the fixed batches.
"""

from __future__ import annotations

import queue
import tempfile
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from predictors.data import DatasetReader
from predictors.evaluation.base import Scenario
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.scenario import follows
from predictors.evaluation.scenarios.loadgen_logs import (
    held,
    parse_detail,
    parse_summary,
    point,
    reported_run,
)
from predictors.evaluation.summaries import top_accuracy
from predictors.processing.custom_code import custom_outputs
from predictors.protocol import SCENARIOS

__all__ = ["LOADGEN_SCENARIOS", "SEARCH_STEPS", "drive"]

# The job option `scenario`'s values that LoadGen drives (all but the fixed batches alone).
LOADGEN_SCENARIOS = tuple(name for name in SCENARIOS if name != "fixed")

DEFAULT_SAMPLES_PER_QUERY = 8
# The bisection steps of the QPS search after the doubling found a bound, and the most doublings.
SEARCH_STEPS = 4
MAX_DOUBLINGS = 12
MAX_HALVINGS = 6
MIN_SEARCH_QPS = 1.0
MAX_PROBE_SECONDS = 60.0
MAX_LOG_CHARS = 64_000


def _loadgen() -> Any:
    try:
        import mlperf_loadgen
    except ImportError:
        raise EvaluationError(
            "LoadGen scenarios need mlcommons-loadgen (pip install mlcommons-loadgen); this "
            "host has none"
        ) from None
    return mlperf_loadgen


class _Samples:
    """The split's inputs, preprocessed into memory (LoadGen's query sample library)."""

    def __init__(
        self, loop: Scenario, reader: DatasetReader, preprocessor: Any, max_bytes: int
    ) -> None:
        self.inputs: list[np.ndarray] = []
        self.labels: list[Any] = []
        # At most `max_bytes` of them (the loop's `stage_bytes`): the first inputs that fit.
        self.capped = False
        size = 0
        for batch, labels, _ in loop.preprocessed(reader, preprocessor, None):
            for index in range(batch.shape[0]):
                if self.inputs and size + batch[index].nbytes > max_bytes:
                    self.capped = True
                    break
                self.inputs.append(batch[index : index + 1])
                self.labels.append(labels[index])
                size += batch[index].nbytes
            if self.capped:
                break
        if not self.inputs:
            raise EvaluationError("LoadGen has no samples: the split read no inputs")

    def batch(self, indices: list[int]) -> np.ndarray:
        return np.concatenate([self.inputs[i] for i in indices])


class _Driver:
    """One LoadGen run's system under test: it runs the queries LoadGen issues on the model."""

    def __init__(
        self,
        loop: Scenario,
        samples: _Samples,
        options: EvaluationOptions,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        self.loop, self.samples, self.options = loop, samples, options
        self.cancelled = cancelled
        self.batch_size = max(options.batch_sizes)
        self.scores: dict[int, np.ndarray] = {}
        self.error: BaseException | None = None
        self.calls = 0

    def run(self, indices: list[int]) -> None:
        """Run the samples at `indices` as one batch; keep their scores in accuracy mode."""
        if self.error is not None:
            return
        try:
            if self.cancelled is not None and self.cancelled():
                raise EvaluationCancelled("the evaluation was cancelled")
            # In the framework's inference context, as the fixed batches' calls (thread-local:
            # LoadGen calls from threads of its own).
            with self.loop.predictor.inference_context():
                outputs = self.loop.predict(self.samples.batch(indices))
                if self.options.device != "cpu":
                    self.loop.predictor.synchronize()
            self.calls += 1
            if self.options.loadgen_mode == "accuracy":
                if self.loop.custom_postprocess is not None:  # as the fixed batches read it
                    outputs = custom_outputs(self.loop.custom_postprocess, outputs, len(indices))
                scores = np.asarray(self.loop.read(outputs))
                for row, index in enumerate(indices):
                    self.scores[index] = scores[row].reshape(-1)
        except BaseException as exc:  # noqa: BLE001 - reported after LoadGen returns
            self.error = exc


def _settings(lg: Any, options: EvaluationOptions, target_qps: float | None) -> Any:
    settings = lg.TestSettings()
    settings.scenario = {
        "single_stream": lg.TestScenario.SingleStream,
        "multi_stream": lg.TestScenario.MultiStream,
        "server": lg.TestScenario.Server,
        "offline": lg.TestScenario.Offline,
    }[options.scenario]
    settings.mode = (
        lg.TestMode.AccuracyOnly
        if options.loadgen_mode == "accuracy"
        else lg.TestMode.PerformanceOnly
    )
    settings.min_duration_ms = options.min_duration_ms
    settings.min_query_count = options.min_query_count
    settings.qsl_rng_seed = options.seed
    settings.sample_index_rng_seed = options.seed
    settings.schedule_rng_seed = options.seed
    if options.scenario == "multi_stream":
        settings.multi_stream_samples_per_query = (
            options.samples_per_query or DEFAULT_SAMPLES_PER_QUERY
        )
    if options.scenario == "server":
        if target_qps is not None:
            settings.server_target_qps = target_qps
        if options.latency_bound_ms is not None:
            settings.server_target_latency_ns = int(options.latency_bound_ms * 1e6)
    if options.scenario == "offline" and target_qps is not None:
        settings.offline_expected_qps = target_qps
    return settings


def _run_once(
    lg: Any,
    driver: _Driver,
    options: EvaluationOptions,
    target_qps: float | None,
    outdir: Path,
) -> dict[str, Any]:
    """One LoadGen run; its summary, detail log and how long it took."""
    scenario = options.scenario
    waiting: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()

    def complete(ids: list[int]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(i, 0, 0) for i in ids])

    def worker() -> None:
        # Server: batch what waits, up to the batch size, and answer it.
        while not stop.is_set():
            try:
                first = waiting.get(timeout=0.05)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < driver.batch_size:
                try:
                    batch.append(waiting.get_nowait())
                except queue.Empty:
                    break
            driver.run([sample.index for sample in batch])
            complete([sample.id for sample in batch])

    def issue(query_samples: list[Any]) -> None:
        if scenario == "server":
            for sample in query_samples:
                waiting.put(sample)
            return
        step = 1 if scenario == "single_stream" else len(query_samples)
        if scenario == "offline":
            step = driver.batch_size
        for start in range(0, len(query_samples), step):
            part = query_samples[start : start + step]
            driver.run([sample.index for sample in part])
            complete([sample.id for sample in part])

    def flush() -> None:
        pass

    count = len(driver.samples.inputs)
    sut = lg.ConstructSUT(issue, flush)
    qsl = lg.ConstructQSL(count, count, lambda indices: None, lambda indices: None)
    thread = threading.Thread(target=worker, name="loadgen-server", daemon=True)
    if scenario == "server":
        thread.start()
    outdir.mkdir(parents=True, exist_ok=True)
    output = lg.LogOutputSettings()
    output.outdir = str(outdir)
    output.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = output
    log.enable_trace = False
    start = time.perf_counter()
    try:
        lg.StartTestWithLogSettings(sut, qsl, _settings(lg, options, target_qps), log)
    finally:
        stop.set()
        if scenario == "server":
            thread.join()
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    if driver.error is not None:
        raise driver.error
    summary_text = (outdir / "mlperf_log_summary.txt").read_text(encoding="utf-8")
    detail = (outdir / "mlperf_log_detail.txt").read_text(encoding="utf-8", errors="replace")
    # Its warnings and errors are read from the whole log, before it is cut.
    problems = parse_detail(detail)
    if len(detail) > MAX_LOG_CHARS:
        keep = MAX_LOG_CHARS // 2
        detail = detail[:keep] + "\n[… cut …]\n" + detail[-keep:]
    parsed = parse_summary(summary_text)
    # The detail log's own reason, where the summary does not already give it.
    reason = " ".join((problems["invalid_reason"] or "").split())
    if (
        parsed["valid"] is False
        and reason
        and not any(reason in given for given in parsed["invalid_reasons"])
    ):
        parsed["invalid_reasons"].append(reason)
    return {
        "target_qps": target_qps,
        "seconds": round(time.perf_counter() - start, 3),
        "summary_text": summary_text,
        "log": detail,
        "problems": problems["problems"],
        **parsed,
    }


@follows("loadgen", LOADGEN_SCENARIOS)
def drive(
    loop: Scenario,
    reader: DatasetReader,
    preprocessor: Any,
    options: EvaluationOptions,
    *,
    start_qps: float | None = None,
    measured_qps: float | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """LoadGen's run (or QPS search) of the loaded model behind `loop` over `reader`'s inputs:
    `result["loadgen"]` (see the module docstring). `start_qps`: where the QPS search starts
    when the request gives no target QPS; `measured_qps`: the fixed batches' best throughput,
    of which offline expects three times when the request gives no target QPS (LoadGen sends
    expected QPS x minimum duration samples: too few, and the run ends before its minimum
    duration, INVALID)."""
    lg = _loadgen()
    target_qps = options.target_qps
    if options.scenario == "offline" and target_qps is None and measured_qps:
        target_qps = round(3 * measured_qps, 3)
    if options.scenario == "server" and target_qps is None and not options.find_peak_qps:
        # An accuracy run (performance needs a target): every sample once, at the rate the
        # fixed batches ran (LoadGen's default, one query a second, would take a second a
        # sample).
        target_qps = round(measured_qps, 3) if measured_qps else None
    samples = _Samples(loop, reader, preprocessor, options.stage_bytes)
    driver = _Driver(loop, samples, options, cancelled)
    search_start = (options.target_qps or start_qps or 1.0) if options.find_peak_qps else None
    with tempfile.TemporaryDirectory(prefix="mlms-loadgen-") as folder:
        if search_start is not None:
            runs = _search(lg, driver, options, search_start, Path(folder))
        else:
            runs = [{**_run_once(lg, driver, options, target_qps, Path(folder) / "run"), "run": 1}]
    reported = reported_run(runs, options.find_peak_qps)
    run = runs[reported["run"] - 1]
    settings = {
        "scenario": options.scenario,
        "mode": options.loadgen_mode,
        # The reported run's target (of a QPS search, the run at the peak).
        "target_qps": run["target_qps"],
        # Where the target came from: the request, the fixed batches' throughput (offline: x 3),
        # or the QPS search (which started at `start_qps`).
        "target_qps_from": (
            "QPS search (the reported run's target)"
            if options.find_peak_qps
            else "request"
            if options.target_qps is not None
            else "fixed batches' throughput x 3"
            if target_qps is not None and options.scenario == "offline"
            else "fixed batches' throughput"
            if target_qps is not None
            else None
        ),
        "start_qps": search_start,
        "start_qps_from": (
            None
            if not options.find_peak_qps
            else "request"
            if options.target_qps is not None
            else "half the fixed batches' throughput at the smallest batch size"
            if start_qps
            else "LoadGen's minimum"
        ),
        "latency_bound_ms": options.latency_bound_ms,
        "min_duration_ms": options.min_duration_ms,
        "min_query_count": options.min_query_count,
        "samples_per_query": (
            (options.samples_per_query or DEFAULT_SAMPLES_PER_QUERY)
            if options.scenario == "multi_stream"
            else None
        ),
        "batch_size": driver.batch_size if options.scenario in ("server", "offline") else None,
        "seeds": {"qsl": options.seed, "sample_index": options.seed, "schedule": options.seed},
        "samples": len(samples.inputs),
        # The sample library holds the first inputs that fit in the loop's stage_bytes.
        "samples_capped_at_bytes": options.stage_bytes if samples.capped else None,
        "loadgen_version": _version(),
    }
    # Everything below is the reported run's: its verdict, why, its summary and its log.
    result: dict[str, Any] = {
        "settings": settings,
        "reported": reported,
        "valid": run["valid"],
        "invalid_reasons": run["invalid_reasons"],
        "problems": run["problems"],
        "notes": run["notes"],
        "summary": run["values"],
        "early_stopping": run["early_stopping"],
        "summary_text": run["summary_text"],
        "log": run["log"],
        "calls": driver.calls,
    }
    if options.find_peak_qps:
        held_targets = [r["target_qps"] for r in runs if held(r)]
        result["search"] = {
            # The highest target LoadGen judged VALID (the reported run's), None where none was.
            "peak_qps": run["target_qps"] if run["valid"] is True else None,
            # The highest target whose p99 held, VALID or not (a run too short for early
            # stopping can hold its latency and still be INVALID).
            "highest_held_qps": max(held_targets) if held_targets else None,
            "latency_bound_ms": options.latency_bound_ms,
            "start_qps": search_start,
            "reported_run": reported["run"],
            "curve": sorted(
                ({**point(r), "reported": r is run} for r in runs),
                key=lambda point: point["target_qps"],
            ),
        }
    if options.loadgen_mode == "accuracy":
        result["accuracy"] = _accuracy(driver, samples)
    return result


def _search(
    lg: Any,
    driver: _Driver,
    options: EvaluationOptions,
    start_qps: float,
    folder: Path,
) -> list[dict[str, Any]]:
    """The QPS search (see the module docstring): its runs in the order they ran, numbered
    from 1."""
    runs: list[dict[str, Any]] = []

    def probe(qps: float) -> bool:
        qps = round(qps, 3)
        run = _run_once(lg, driver, options, qps, folder / f"run-{len(runs) + 1}")
        runs.append({**run, "run": len(runs) + 1})
        return held(run)

    qps = start_qps
    low: float | None = None
    high: float | None = None
    for _ in range(MAX_DOUBLINGS):
        if probe(qps):
            low = qps
            qps *= 2
        else:
            high = qps
            break
    if high is not None and low is None:
        # Not even the start held: halve until one does, or give up at MAX_HALVINGS or where a
        # run would last over MAX_PROBE_SECONDS (its queries at its rate): a bound the model
        # cannot hold at any rate must not keep the search going for days.
        floor = max(MIN_SEARCH_QPS, options.min_query_count / MAX_PROBE_SECONDS)
        for _ in range(MAX_HALVINGS):
            if qps / 2 < floor:
                break
            qps /= 2
            if probe(qps):
                low = qps
                break
            high = qps
    if low is not None and high is not None:
        for _ in range(SEARCH_STEPS):
            middle = (low + high) / 2
            if probe(middle):
                low = middle
            else:
                high = middle
    return runs


def _accuracy(driver: _Driver, samples: _Samples) -> dict[str, Any]:
    """Top-1 and top-5 of the samples LoadGen sent once each (accuracy mode)."""
    indices = sorted(driver.scores)
    if not indices:
        raise EvaluationError("LoadGen's accuracy run sent no samples")
    outputs = np.stack([driver.scores[i] for i in indices]).astype(np.float32)
    labels = np.asarray([samples.labels[i] for i in indices])
    return {**top_accuracy(outputs, labels), "samples": len(indices)}


def _version() -> str | None:
    try:
        return metadata.version("mlcommons-loadgen")
    except metadata.PackageNotFoundError:
        return None
