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
`MAX_PROBE_SECONDS`), then bisects, and keeps every run as the curve it walked: target QPS,
completed QPS, p99, whether the latency held. The peak is the highest target QPS whose p99
held.

The sample library holds the first inputs that fit in the loop's `stage_bytes` (256 MiB), so
that a large split is not held whole in memory; the settings say when it was capped. A server
accuracy run without `target_qps` sends at the fixed batches' throughput.

The model is driven untraced: tracing stops with the fixed batches.
"""

from __future__ import annotations

import queue
import re
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from predictors.custom_code import custom_outputs
from predictors.data import DatasetReader
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.options import EvaluationOptions

__all__ = ["SEARCH_STEPS", "drive", "parse_summary"]

DEFAULT_SAMPLES_PER_QUERY = 8
# The bisection steps of the QPS search after the doubling found a bound, and the most doublings.
SEARCH_STEPS = 4
MAX_DOUBLINGS = 12
MAX_HALVINGS = 6
MIN_SEARCH_QPS = 1.0
MAX_PROBE_SECONDS = 60.0
MAX_LOG_CHARS = 64_000
_LINE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")


def _loadgen() -> Any:
    try:
        import mlperf_loadgen
    except ImportError:
        raise EvaluationError(
            "LoadGen scenarios need mlcommons-loadgen (pip install mlcommons-loadgen); this "
            "host has none"
        ) from None
    return mlperf_loadgen


def parse_summary(text: str) -> dict[str, Any]:
    """LoadGen's `mlperf_log_summary.txt` as `key: value` pairs (the first of each key), with
    `valid` (the result line: true, false, or None where there is none) and `early_stopping`
    (its block's lines) apart."""
    values: dict[str, str] = {}
    early: list[str] = []
    in_early = False
    for line in text.splitlines():
        if line.startswith("Early Stopping Result"):
            in_early = True
            continue
        if in_early:
            if not line.strip() or line.startswith("="):
                in_early = False
            else:
                early.append(line.strip())
                continue
        match = _LINE.match(line)
        if match and match.group(1) not in values:
            values[match.group(1)] = match.group(2)
    verdict = values.get("Result is")
    return {
        # None where LoadGen judged nothing (an accuracy run writes no result line).
        "valid": None if verdict is None else verdict == "VALID",
        "values": values,
        "early_stopping": early,
    }


def _number(values: dict[str, str], key: str) -> float | None:
    try:
        return float(values[key])
    except (KeyError, ValueError):
        return None


class _Samples:
    """The split's inputs, preprocessed into memory (LoadGen's query sample library)."""

    def __init__(self, loop: Any, reader: DatasetReader, preprocessor: Any, max_bytes: int) -> None:
        self.inputs: list[np.ndarray] = []
        self.labels: list[Any] = []
        # At most `max_bytes` of them (the loop's `stage_bytes`): the first inputs that fit.
        self.capped = False
        size = 0
        for batch, labels, _ in loop._preprocessed(reader, preprocessor, None):
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
        loop: Any,
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
                outputs = self.loop._predict(self.samples.batch(indices))
                if self.options.device != "cpu":
                    self.loop.predictor.synchronize()
            self.calls += 1
            if self.options.loadgen_mode == "accuracy":
                if self.loop.custom_postprocess is not None:  # as the fixed batches read it
                    outputs = custom_outputs(self.loop.custom_postprocess, outputs, len(indices))
                scores = np.asarray(self.loop._read(outputs))
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
    if len(detail) > MAX_LOG_CHARS:
        keep = MAX_LOG_CHARS // 2
        detail = detail[:keep] + "\n[… cut …]\n" + detail[-keep:]
    parsed = parse_summary(summary_text)
    return {
        "target_qps": target_qps,
        "seconds": round(time.perf_counter() - start, 3),
        "summary_text": summary_text,
        "log": detail,
        **parsed,
    }


def _point(run: dict[str, Any]) -> dict[str, Any]:
    """A run of the QPS search as a point of its curve."""
    values = run["values"]
    p99 = _number(values, "99.00 percentile latency (ns)")
    return {
        "target_qps": run["target_qps"],
        "completed_qps": _number(values, "Completed samples per second"),
        "p99_ms": None if p99 is None else round(p99 / 1e6, 3),
        "latency_held": values.get("Performance constraints satisfied") == "Yes",
        "valid": run["valid"],
    }


def drive(
    loop: Any,
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
    settings = {
        "scenario": options.scenario,
        "mode": options.loadgen_mode,
        "target_qps": target_qps,
        # Where the target came from: the request, or (offline) the fixed batches' throughput.
        "target_qps_from": (
            "request"
            if options.target_qps is not None
            else "fixed batches' throughput x 3"
            if target_qps is not None and options.scenario == "offline"
            else "fixed batches' throughput"
            if target_qps is not None
            else None
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
    with tempfile.TemporaryDirectory(prefix="mlms-loadgen-") as folder:
        if options.find_peak_qps:
            curve, best = _search(lg, driver, options, start_qps, Path(folder))
            run = best
        else:
            run = _run_once(lg, driver, options, target_qps, Path(folder) / "run")
            curve = None
    result: dict[str, Any] = {
        "settings": settings,
        "valid": run["valid"],
        "summary": run["values"],
        "early_stopping": run["early_stopping"],
        "summary_text": run["summary_text"],
        "log": run["log"],
        "calls": driver.calls,
    }
    if curve is not None:
        result["search"] = {
            "peak_qps": run["target_qps"] if _point(run)["latency_held"] else None,
            "latency_bound_ms": options.latency_bound_ms,
            "curve": curve,
        }
    if options.loadgen_mode == "accuracy":
        result["accuracy"] = _accuracy(driver, samples)
    return result


def _search(
    lg: Any,
    driver: _Driver,
    options: EvaluationOptions,
    start_qps: float | None,
    folder: Path,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The QPS search (see the module docstring): the curve, and the run at the peak (the
    lowest run, where none held)."""
    runs: list[dict[str, Any]] = []

    def probe(qps: float) -> bool:
        qps = round(qps, 3)
        run = _run_once(lg, driver, options, qps, folder / f"run-{len(runs)}")
        runs.append(run)
        return bool(_point(run)["latency_held"])

    qps = options.target_qps or start_qps or 1.0
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
    curve = sorted((_point(run) for run in runs), key=lambda p: p["target_qps"])
    held = [run for run in runs if _point(run)["latency_held"]]
    best = (
        max(held, key=lambda run: run["target_qps"])
        if held
        else min(runs, key=lambda run: run["target_qps"])
    )
    return curve, best


def _accuracy(driver: _Driver, samples: _Samples) -> dict[str, Any]:
    """Top-1 and top-5 of the samples LoadGen sent once each (accuracy mode)."""
    from predictors.evaluation.summaries import _accuracy as accuracy

    indices = sorted(driver.scores)
    if not indices:
        raise EvaluationError("LoadGen's accuracy run sent no samples")
    outputs = np.stack([driver.scores[i] for i in indices]).astype(np.float32)
    labels = np.asarray([samples.labels[i] for i in indices])
    return {**accuracy(outputs, labels), "samples": len(indices)}


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("mlcommons-loadgen")
    except metadata.PackageNotFoundError:
        return None
