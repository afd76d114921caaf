"""The evaluation loop: one model, one dataset split, one framework, several batch sizes.

This is the only evaluation loop; every framework runs through it, so warm-up, batching, timing,
repetitions and the result mean the same thing in all of them. For each batch size:

1. *stage*: read the split (`DatasetReader`) and preprocess it batch by batch (`processing`),
   timing the read and the preprocessing apart, until `stage_bytes` of input tensors are staged
   in memory (or the split, or `limit`, ends). Staging keeps the timed predictions back to back,
   as a serving system sees them, with no decoding between them. A split that fits in one stage
   is staged once and reused by every repetition.
2. *warm up*: `warmup` untimed predictions on the first staged batches, before the first timed
   one (the first calls of a framework allocate, compile and pick kernels).
3. *time*: for each staged batch, `time.perf_counter_ns()` before and after `predictor.predict`;
   on a CUDA device `predictor.synchronize()` runs before the second reading, so the time covers
   the device's work (the result's `clock` says which). The timed predictions run inside the
   predictor's `inference_context()` and with Python's garbage collector paused, as `timeit`
   does.
4. *postprocess* (first pass only): softmax and top-k of the outputs (`processing.postprocess`),
   timed apart; top-1/top-5 accuracy against the dataset's labels.
5. *repeat*: steps 3 (and 1 when the split does not fit in one stage) `repeat` times; the
   latency statistics cover every timed batch of every repetition.

What is traced depends on the trace level (`predictors.protocol.TRACE_LEVELS`), each level adding to
the ones before it; nothing beyond the requested level is recorded:

- `application`: the pipeline's stages as spans: `load`, and per batch size `read` and
  `preprocess` per batch, `warm-up`, `predict` (the timed loop) and `postprocess`;
- `model`: one span per timed batch, nested in its `predict` stage;
- `framework` and finer: what the predictor traces in every call (`Predictor.take_layers`):
  layers, then framework ops (`ml_library`), then CUDA runtime calls and GPU kernels
  (`system_library`), nested in their batch span, after the last batch size;
- `hardware`: counter samples (`predictors.counters`) while the batch sizes run.

The latency statistics cover full batches only: the last batch of a split is usually smaller,
and its time is not a time for `batch_size` inputs. It is timed and counted in the throughput
(inputs / wall time of the timed loops, which includes the loop's own bookkeeping).

`evaluate` reports progress as `progress(done, total)`, counted in predictions (warm-up
included), and checks `cancelled()`: both at most every 50 ms during the timed predictions (so
that callbacks cost nothing measurable next to a fast model), after every warm-up prediction and
at the end of every stage. Once `cancelled()` is true it stops with `EvaluationCancelled`.
"""

from __future__ import annotations

import gc
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from predictors import versioning
from predictors.counters import CounterSampler
from predictors.data import AssetError, DatasetError, DatasetReader
from predictors.manifests import Manifest, ManifestError
from predictors.predictor import (
    DEVICES,
    Predictor,
    PredictorError,
    PredictorOptions,
    predictor_class,
)
from predictors.processing import (
    ProcessingError,
    load_labels,
    postprocess,
    preprocessor_for,
)
from predictors.protocol import TRACE_LEVELS, Attr, JobOptions, at_least
from predictors.tracing import Layer, Span

__all__ = [
    "USER_ERRORS",
    "Evaluation",
    "EvaluationCancelled",
    "EvaluationError",
    "EvaluationOptions",
    "Fetch",
    "GRAPH_OPTIMIZATIONS",
    "Span",
    "chrome_trace",
    "compare",
    "evaluate",
    "latency_summary",
    "split_entry",
]

# The trace levels (see the module docstring for what each records).

# ONNX Runtime's graph optimization levels (`--graph-optimization`); None leaves its default.
GRAPH_OPTIMIZATIONS = ("none", "basic", "extended", "all")

CLOCK_HOST = "perf_counter (host wall clock)"
CLOCK_CUDA = "perf_counter after cuda synchronize"

_REPORT_NS = 50_000_000  # progress reports and cancellation checks: at most every 50 ms

Fetch = Callable[[str, str | None], Path]
"""`fetch(url, sha256)`: a local file for a manifest's URL (e.g. `DataManager.fetch`)."""

Progress = Callable[[int, int], None]


class EvaluationError(ValueError):
    """An evaluation cannot run as asked (a split that does not exist, a task the loop does not
    handle, a framework version outside the manifest's range, …)."""


class EvaluationCancelled(Exception):
    """`cancelled()` became true; the evaluation stopped between two predictions."""


# Every error whose message is meant for the user (a bad manifest, a missing file, a model that
# does not fit its input); anything else is a bug.
USER_ERRORS: tuple[type[Exception], ...] = (
    EvaluationError,
    PredictorError,
    ProcessingError,
    AssetError,
    DatasetError,
    ManifestError,
)


@dataclass(frozen=True)
class EvaluationOptions:
    """What to run. `threads` None leaves each framework's default thread pools."""

    batch_sizes: tuple[int, ...] = (1,)
    split: str = "validation"
    limit: int | None = None
    device: str = "cpu"
    # TorchScript profiles its first run and compiles an optimized graph on the second.
    warmup: int = 2
    repeat: int = 1
    threads: int | None = None
    seed: int = 0
    trace_level: str = "model"
    stage_bytes: int = 256 * 1024 * 1024
    graph_optimization: str | None = None
    # Time the first predictions, with no warm-up (warmup must be 0); the report says so.
    cold_start: bool = False

    @classmethod
    def from_job(cls, options: JobOptions, *, device: str) -> EvaluationOptions:
        """The loop's options for a hub job: every job option, by name."""
        values = options.to_dict()
        values["batch_sizes"] = tuple(values["batch_sizes"])
        return cls(device=device, **values)

    def __post_init__(self) -> None:
        def positive(name: str, value: Any, minimum: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise EvaluationError(f"{name} must be an integer >= {minimum}; got {value!r}")

        if not self.batch_sizes:
            raise EvaluationError("batch_sizes must name at least one batch size")
        for size in self.batch_sizes:
            positive("a batch size", size, 1)
        if len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise EvaluationError(f"batch_sizes repeats a batch size: {list(self.batch_sizes)}")
        if self.limit is not None:
            positive("limit", self.limit, 1)
        positive("warmup", self.warmup, 0)
        positive("repeat", self.repeat, 1)
        if self.threads is not None:
            positive("threads", self.threads, 1)
        positive("seed", self.seed, 0)
        positive("stage_bytes", self.stage_bytes, 1)
        if self.cold_start and self.warmup:
            raise EvaluationError(f"a cold start runs no warm-up; got warmup {self.warmup}")
        if self.trace_level not in TRACE_LEVELS:
            raise EvaluationError(
                f"trace level must be one of {', '.join(TRACE_LEVELS)}; got {self.trace_level!r}"
            )
        if self.graph_optimization not in (None, *GRAPH_OPTIMIZATIONS):
            raise EvaluationError(
                f"graph optimization must be one of {', '.join(GRAPH_OPTIMIZATIONS)}; "
                f"got {self.graph_optimization!r}"
            )
        if self.device not in DEVICES and not self.device.startswith("cuda:"):
            raise EvaluationError(f"device must be cpu, cuda or cuda:N; got {self.device!r}")


@dataclass
class Evaluation:
    """What `evaluate` returns.

    `result` is the JSON-able summary. `outputs` holds the model's raw outputs for every input
    (dataset order, float32, one row per input) at the first batch size, first pass; `labels`
    the dataset labels; `predictions` the top-k (class, label, probability) of every input at
    the first batch size; `spans` the recorded spans (none at trace level `none`).
    """

    result: dict[str, Any]
    outputs: np.ndarray
    labels: np.ndarray
    predictions: list[list[tuple[int, str, float]]]
    spans: list[Span]


def evaluate(
    model: Manifest,
    dataset: Manifest,
    options: EvaluationOptions,
    fetch: Fetch,
    *,
    progress: Progress | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Evaluation:
    """Evaluate `model` on a split of `dataset` (see the module docstring for the loop)."""
    started = datetime.now(UTC)
    spec = _model_spec(model)
    split = split_entry(dataset, options.split)
    split_file = fetch(split["path"], split.get("sha256"))
    predictor_type = predictor_class(model.framework)
    software = predictor_type.software()
    _check_version(model, software["version"])
    predictor_type.check_device(options.device)
    preprocessor = preprocessor_for(spec.input)
    labels = load_labels(spec.output_parameters, lambda url: fetch(url, None))
    readers = [DatasetReader(split_file, size, limit=options.limit) for size in options.batch_sizes]
    if readers[0].count == 0:
        raise EvaluationError(f"the {options.split} split of {dataset.name} has no rows")
    total = sum(options.warmup + options.repeat * len(reader) for reader in readers)

    random.seed(options.seed)
    np.random.seed(options.seed)
    graph_file = fetch(spec.graph_path, spec.graph_sha256)
    weights_file = fetch(spec.weights_path, spec.weights_sha256) if spec.weights_path else None
    predictor = predictor_type()
    load_start = time.perf_counter_ns()
    predictor.load(
        model,
        PredictorOptions(
            graph_file=graph_file,
            weights_file=weights_file,
            device=options.device,
            threads=options.threads,
            seed=options.seed,
            trace_level=options.trace_level,
            graph_optimization=options.graph_optimization,
            warmup_calls=options.warmup,
        ),
    )
    load_end = time.perf_counter_ns()
    load_ns = load_end - load_start
    sampler = None
    try:
        loop = _Loop(model, predictor, options, spec, labels, total, progress, cancelled)
        loop.stage_span("load", load_start, load_end, {})
        if at_least(options.trace_level, "hardware"):
            sampler = CounterSampler(
                options.device, attributes={"framework": model.framework, "model": model.name}
            )
            sampler.start()
        per_batch_size = [loop.run(reader, preprocessor) for reader in readers]
        if sampler is not None:
            loop.spans.extend(sampler.stop())
        settings = predictor.settings()
        if loop.layers:
            loop.add_layer_spans(predictor.take_layers())
        profiler_summary = predictor.trace_summary()
    finally:
        if sampler is not None:
            sampler.stop()
        predictor.close()

    first = loop.first
    assert first is not None
    result = {
        "model": {
            "name": model.name,
            "version": model.version,
            "task": model.task,
            "content_hash": model.content_hash(),
            "trained": (model.data.get("attributes") or {}).get("trained"),
        },
        "dataset": {
            "name": dataset.name,
            "version": dataset.version,
            "split": options.split,
            "count": len(first.labels),
            "split_count": split.get("count"),
        },
        "framework": {"name": model.framework, "range": model.framework_range, **software},
        "output_type": spec.output_type,
        "device": options.device,
        "clock": CLOCK_HOST if options.device == "cpu" else CLOCK_CUDA,
        "settings": {"threads_requested": options.threads, "seed": options.seed, **settings},
        "options": {
            "batch_sizes": list(options.batch_sizes),
            "limit": options.limit,
            "warmup": options.warmup,
            "repeat": options.repeat,
            "cold_start": options.cold_start,
            "trace_level": options.trace_level,
        },
        "load_ms": load_ns / 1e6,
        "accuracy": per_batch_size[0]["accuracy"],
        "batch_sizes": per_batch_size,
        "trace": {
            "level": options.trace_level,
            "spans": len(loop.spans),
            "levels": _level_counts(loop.spans),
            **({"layer_spans": loop.layer_spans} if loop.layers else {}),
            **(
                {"gpu_activity_spans": loop.gpu_spans}
                if at_least(options.trace_level, "system_library")
                else {}
            ),
            **({"profiler": profiler_summary} if profiler_summary else {}),
        },
        "notes": _notes(model, dataset, labels, first.outputs.shape[1])
        + _trace_notes(options, predictor_type, sampler),
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": (datetime.now(UTC) - started).total_seconds(),
    }
    return Evaluation(
        result=result,
        outputs=first.outputs,
        labels=first.labels,
        predictions=first.predictions,
        spans=loop.spans,
    )


def compare(a: Evaluation, b: Evaluation) -> dict[str, Any]:
    """How far two evaluations of the same inputs agree: the share of inputs with the same
    top-1 class, and the largest absolute difference between their raw outputs."""
    names = [e.result["framework"]["name"] for e in (a, b)]
    if a.outputs.shape != b.outputs.shape or not np.array_equal(a.labels, b.labels):
        raise EvaluationError(
            f"{names[0]} and {names[1]} did not evaluate the same inputs "
            f"(outputs {a.outputs.shape} and {b.outputs.shape}); they cannot be compared"
        )
    same = a.outputs.argmax(axis=1) == b.outputs.argmax(axis=1)
    difference = np.abs(a.outputs.astype(np.float64) - b.outputs.astype(np.float64))
    return {
        "frameworks": names,
        "count": int(same.size),
        "top1_agreement": float(same.mean()),
        "top1_disagreements": int(same.size - same.sum()),
        "max_abs_diff": float(difference.max()),
        "output_type": a.result["output_type"],
    }


def latency_summary(durations_ns: Sequence[int] | np.ndarray) -> dict[str, float | int]:
    """mean, p50/p90/p99 (linear interpolation), min, max and std (population) in ms."""
    ms = np.asarray(durations_ns, dtype=np.float64) / 1e6
    if ms.size == 0:
        raise ValueError("no durations to summarise")
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {
        "count": int(ms.size),
        "mean_ms": float(ms.mean()),
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
        "std_ms": float(ms.std()),
    }


def split_entry(dataset: Manifest, split: str) -> dict[str, Any]:
    """The manifest entry of a dataset split (`path`, `sha256`, `count`), checked."""
    if dataset.kind != "dataset":
        raise EvaluationError(f"{dataset.name} is a {dataset.kind} manifest, not a dataset")
    if dataset.data.get("format") != "parquet":
        raise EvaluationError(
            f"dataset {dataset.name} is in {dataset.data.get('format')!r} format; the loop "
            "reads parquet"
        )
    splits = dataset.data["splits"]
    if split not in splits:
        raise EvaluationError(
            f"dataset {dataset.name} {dataset.version} has no split {split!r} "
            f"(it has {', '.join(splits)})"
        )
    entry: dict[str, Any] = splits[split]
    return entry


def chrome_trace(spans: Sequence[Span]) -> dict[str, Any]:
    """Spans as a Chrome trace / Perfetto JSON document: one process per framework, one thread
    per batch size, complete events in microseconds."""
    events: list[dict[str, Any]] = []
    processes: dict[str, int] = {}
    threads: set[tuple[int, int]] = set()
    for span in spans:
        framework = str(span.attributes.get("framework", ""))
        if framework not in processes:
            processes[framework] = len(processes) + 1
            events.append(
                {
                    "name": "process_name",
                    "ph": "M",
                    "pid": processes[framework],
                    "args": {"name": framework},
                }
            )
        pid, tid = processes[framework], int(span.attributes.get("batch_size", 0))
        if (pid, tid) not in threads:
            threads.add((pid, tid))
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": pid,
                    "tid": tid,
                    "args": {"name": f"batch size {tid}"},
                }
            )
        events.append(
            {
                "name": span.name,
                "ph": "X",
                "ts": span.start_ns / 1e3,
                "dur": (span.end_ns - span.start_ns) / 1e3,
                "pid": pid,
                "tid": tid,
                "args": span.attributes,
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# -- the loop ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ModelSpec:
    input: dict[str, Any]
    output_type: str
    output_parameters: dict[str, Any]
    graph_path: str
    graph_sha256: str | None
    weights_path: str | None
    weights_sha256: str | None


@dataclass
class _FirstPass:
    outputs: np.ndarray
    labels: np.ndarray
    predictions: list[list[tuple[int, str, float]]]


@dataclass
class _Staged:
    """A stage: preprocessed batches in memory, with their labels."""

    batches: list[np.ndarray]
    labels: list[np.ndarray]


class _Loop:
    """The per-batch-size loop of one evaluation (state shared across batch sizes)."""

    def __init__(
        self,
        model: Manifest,
        predictor: Predictor,
        options: EvaluationOptions,
        spec: _ModelSpec,
        labels: list[str],
        total: int,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        self.model = model
        self.predictor = predictor
        self.options = options
        self.spec = spec
        self.labels = labels
        self.total = total
        self.progress = progress
        self.cancelled = cancelled
        self.done = 0
        self.checked = False
        self.first: _FirstPass | None = None
        self.spans: list[Span] = []
        # At trace level framework: the batch span id of every predict call, in call order (0
        # for a warm-up call), to nest the predictor's layers in their batch span.
        self.layers = at_least(options.trace_level, "framework")
        self.stages = at_least(options.trace_level, "application")
        self.batches = at_least(options.trace_level, "model")
        self.calls: list[int] = []
        self.layer_spans = 0
        self.gpu_spans = 0
        # perf_counter has no epoch; spans are anchored to the wall clock once.
        self.epoch_offset_ns = time.time_ns() - time.perf_counter_ns()

    def stage_span(
        self,
        name: str,
        start: int,
        end: int,
        attributes: dict[str, Any],
        *,
        at: int | None = None,
    ) -> int:
        """Record a pipeline stage (trace level `application`) from perf_counter readings; its
        span id (0 when stages are not traced). `at` fills a slot reserved by `_reserve`."""
        if not self.stages:
            return 0
        offset = self.epoch_offset_ns
        span_id = (at + 1) if at is not None else len(self.spans) + 1
        span = Span(
            name,
            start + offset,
            end + offset,
            {
                "framework": self.model.framework,
                "model": self.model.name,
                **attributes,
                Attr.LEVEL: "application",
                Attr.OP_TYPE: "stage",
            },
            span_id=span_id,
        )
        if at is not None:
            self.spans[at] = span
        else:
            self.spans.append(span)
        return span_id

    def _reserve(self) -> int | None:
        """A slot for a stage span that must come before its children but ends after them."""
        if not self.stages:
            return None
        self.spans.append(Span("", 0, 0))
        return len(self.spans) - 1

    def run(self, reader: DatasetReader, preprocessor: Any) -> dict[str, Any]:
        options = self.options
        batch_size = reader.batch_size
        self.batch_size = batch_size
        read_ns: list[int] = []
        preprocess_ns: list[int] = []
        durations: list[int] = []
        sizes: list[int] = []
        wall_ns = 0
        outputs: list[np.ndarray] = []
        kept_labels: list[np.ndarray] = []
        postprocess_ns = 0
        predictions: list[list[tuple[int, str, float]]] = []
        reused: list[_Staged] | None = None
        warm = options.warmup
        for repetition in range(options.repeat):
            stages: Iterator[_Staged] | list[_Staged]
            if reused is not None:
                stages = reused
            else:
                timings = (read_ns, preprocess_ns) if repetition == 0 else None
                stages = self._stages(reader, preprocessor, timings)
            # A pass that fits in one stage is staged once; holding more would defeat the
            # bound of `stage_bytes`.
            staged = 0
            for stage in stages:
                staged += 1
                if repetition == 0:
                    reused = [stage] if staged == 1 else None
                if not self.checked:
                    self._check_input(stage.batches[0])
                with self.predictor.inference_context():
                    if warm:
                        warm_start = time.perf_counter_ns()
                        self._warm_up(stage.batches, warm)
                        self.stage_span(
                            "warm-up",
                            warm_start,
                            time.perf_counter_ns(),
                            {"batch_size": batch_size, "predictions": warm},
                        )
                        warm = 0
                    stage_outputs, stage_wall = self._timed(
                        stage.batches, durations, sizes, batch_size, repetition
                    )
                wall_ns += stage_wall
                if repetition == 0:
                    start = time.perf_counter_ns()
                    for batch_outputs in stage_outputs:
                        predictions.extend(self._postprocess(batch_outputs))
                    end = time.perf_counter_ns()
                    postprocess_ns += end - start
                    self.stage_span(
                        "postprocess",
                        start,
                        end,
                        {"batch_size": batch_size, "batches": len(stage_outputs)},
                    )
                    outputs.extend(stage_outputs)
                    kept_labels.extend(stage.labels)
        all_outputs = np.concatenate([o.reshape(o.shape[0], -1) for o in outputs]).astype(
            np.float32, copy=False
        )
        all_labels = np.concatenate(kept_labels)
        if self.first is None:
            self.first = _FirstPass(all_outputs, all_labels, predictions)

        full = [d for d, n in zip(durations, sizes, strict=True) if n == batch_size]
        inputs = sum(sizes)
        count = len(all_labels)
        return {
            "batch_size": batch_size,
            "batches": len(reader),
            "inputs": count,
            "warmup": options.warmup,
            "repeat": options.repeat,
            "accuracy": _accuracy(all_outputs, all_labels),
            # Full batches only; a split smaller than one batch has none, and is timed as is.
            "latency": latency_summary(full or durations),
            "latency_batches": "full" if full else "partial",
            "throughput_ips": inputs / (wall_ns / 1e9),
            "timed_inputs": inputs,
            "timed_wall_ms": wall_ns / 1e6,
            "read_ms_per_batch": float(np.mean(read_ns)) / 1e6,
            "preprocess_ms_per_batch": float(np.mean(preprocess_ns)) / 1e6,
            "postprocess_ms_per_batch": postprocess_ns / 1e6 / len(reader),
        }

    def _stages(
        self,
        reader: DatasetReader,
        preprocessor: Any,
        timings: tuple[list[int], list[int]] | None,
    ) -> Iterator[_Staged]:
        """Preprocessed batches, `stage_bytes` at a time."""
        stage = _Staged([], [])
        size = 0
        iterator = iter(reader)
        perf = time.perf_counter_ns
        while True:
            start = perf()
            item = next(iterator, None)
            read = perf()
            if item is None:
                break
            images, labels = item
            batch = preprocessor.batch(images)
            done = perf()
            if timings is not None:
                timings[0].append(read - start)
                timings[1].append(done - read)
                if self.stages:
                    attributes = {"batch_size": self.batch_size, "inputs": len(labels)}
                    self.stage_span("read", start, read, attributes)
                    self.stage_span("preprocess", read, done, attributes)
            stage.batches.append(batch)
            stage.labels.append(labels)
            size += batch.nbytes
            if size >= self.options.stage_bytes:
                yield stage
                stage, size = _Staged([], []), 0
        if stage.batches:
            yield stage

    def _check_input(self, batch: np.ndarray) -> None:
        """Compare the first batch with the model's input, where the framework records it."""
        self.checked = True
        expected = self.predictor.expected_input()
        if expected is None:
            return
        shape, element_type = expected
        parameters = self.spec.input.get("parameters") or {}
        what = f"{self.model.name} {self.model.version} in {self.model.framework}"
        fits = len(shape) == batch.ndim and all(
            d is None or d == n for d, n in zip(shape, batch.shape, strict=False)
        )
        if not fits:
            shown = "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"
            if (
                shape
                and shape[0] is not None
                and len(shape) == batch.ndim
                and all(
                    d is None or d == n for d, n in zip(shape[1:], batch.shape[1:], strict=True)
                )
            ):
                raise PredictorError(
                    f"{what} takes batches of exactly {shape[0]} (input shape {shown}); "
                    f"use batch size {shape[0]}"
                )
            hints = ", ".join(
                f"{key} {_shown(parameters[key])}"
                for key in ("layout", "color_mode", "resize_size", "crop_size")
                if key in parameters
            )
            raise PredictorError(
                f"{what} takes input of shape {shown}, but the preprocessing gives "
                f"{tuple(batch.shape)}: check the input parameters ({hints})"
            )
        if str(batch.dtype) != element_type:
            raise PredictorError(
                f"{what} takes {element_type} input, but the preprocessing gives {batch.dtype}: "
                f"check the input parameter element_type ({parameters.get('element_type')})"
            )

    def _warm_up(self, batches: list[np.ndarray], count: int) -> None:
        for index in range(count):
            self._stop_if_cancelled()
            self._predict(batches[index % len(batches)])
            if self.layers:
                self.calls.append(0)
            if self.options.device != "cpu":
                self.predictor.synchronize()
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, self.total)

    def _timed(
        self,
        batches: list[np.ndarray],
        durations: list[int],
        sizes: list[int],
        batch_size: int,
        repetition: int,
    ) -> tuple[list[np.ndarray], int]:
        """Time `predict` on each batch; the outputs, and the wall time of the whole loop.

        Progress is reported, and cancellation checked, at most every `_REPORT_NS` (and after
        the last batch), so that a caller's callbacks add nothing measurable to a fast model.
        """
        predict = self.predictor.predict
        synchronize = self.predictor.synchronize if self.options.device != "cpu" else None
        record = self.batches
        stage_slot = self._reserve()
        perf = time.perf_counter_ns
        marks: list[tuple[int, int]] = []
        outputs: list[np.ndarray] = []
        self._stop_if_cancelled()
        collecting = gc.isenabled()
        gc.disable()  # as timeit does: a collection of the loop's own garbage is no model's time
        loop_start = reported = perf()
        try:
            for batch in batches:
                start = perf()
                output = predict(batch)
                if synchronize is not None:
                    synchronize()
                end = perf()
                durations.append(end - start)
                if record:
                    marks.append((start, end))
                outputs.append(output)
                if end - reported >= _REPORT_NS:
                    reported = end
                    self._report(len(outputs))
        except (EvaluationCancelled, PredictorError):
            raise
        except Exception as exc:  # a framework's own error: the model did not accept the batch
            raise self._failed(batches[len(outputs)], exc) from exc
        finally:
            if collecting:
                gc.enable()
        loop_end = perf()
        wall = loop_end - loop_start
        stage_id = 0
        if stage_slot is not None:
            stage_id = self.stage_span(
                "predict",
                loop_start,
                loop_end,
                {"batch_size": batch_size, "batches": len(batches), "repetition": repetition},
                at=stage_slot,
            )
        self._report(len(outputs))
        self.done += len(outputs)
        sizes.extend(len(batch) for batch in batches)
        if record:
            offset = self.epoch_offset_ns
            base = len(durations) - len(marks)
            for index, (start, end) in enumerate(marks):
                attributes = {
                    "framework": self.model.framework,
                    "model": self.model.name,
                    "batch_size": batch_size,
                    "inputs": len(batches[index]),
                    "repetition": repetition,
                    "batch_index": base + index,
                    Attr.LEVEL: "model",
                }
                span_id = len(self.spans) + 1
                self.spans.append(
                    Span(
                        "predict",
                        start + offset,
                        end + offset,
                        attributes,
                        span_id=span_id,
                        parent_id=stage_id,
                    )
                )
                if self.layers:
                    self.calls.append(span_id)
        return outputs, wall

    def add_layer_spans(self, calls: list[list[Layer]] | None) -> None:
        """Nest what the predictor traced in each timed predict call in its batch span
        (`calls`: the steps of every predict call, warm-up included, in call order; None where
        the predictor does not trace). Layers (level `framework`) are numbered in call order;
        a finer step carries the index and name of the layer it is in. A step's times are
        clipped to its batch span."""
        if not calls:
            return
        if len(calls) != len(self.calls):
            raise EvaluationError(
                f"the predictor traced {len(calls)} predict calls; the loop made {len(self.calls)}"
            )
        batches = {span.span_id: span for span in self.spans}
        device = self.options.device
        gpu = ("kernel", "memcpy", "memset")
        for batch_id, steps in zip(self.calls, calls, strict=True):
            if not batch_id:
                continue
            batch = batches[batch_id]
            ids: list[int] = []
            layer_of: list[tuple[int, str] | None] = []
            layers = 0
            for step in steps:
                layer: tuple[int, str] | None
                if step.level == "framework":
                    layer = (layers, step.name)
                    layers += 1
                else:
                    layer = layer_of[step.parent] if step.parent >= 0 else None
                start = batch.start_ns + step.offset_ns
                attributes = {
                    "framework": batch.attributes["framework"],
                    "batch_size": batch.attributes["batch_size"],
                    "batch_index": batch.attributes["batch_index"],
                    Attr.LEVEL: step.level,
                    Attr.OP_TYPE: step.op_type,
                    Attr.DEVICE: device,
                    **(
                        {Attr.LAYER_INDEX: layer[0], Attr.LAYER_NAME: layer[1]}
                        if layer is not None
                        else {}
                    ),
                    **step.attributes,
                }
                span_id = len(self.spans) + 1
                self.spans.append(
                    Span(
                        step.name,
                        min(start, batch.end_ns),
                        min(start + step.duration_ns, batch.end_ns),
                        attributes,
                        span_id=span_id,
                        parent_id=ids[step.parent] if step.parent >= 0 else batch_id,
                    )
                )
                ids.append(span_id)
                layer_of.append(layer)
                if step.level == "framework":
                    self.layer_spans += 1
                elif step.op_type in gpu:
                    self.gpu_spans += 1

    def _report(self, done_here: int) -> None:
        """Report progress (`done_here` predictions into the current loop); stop if cancelled."""
        if self.progress is not None:
            self.progress(self.done + done_here, self.total)
        self._stop_if_cancelled()

    def _predict(self, batch: np.ndarray) -> np.ndarray:
        try:
            return self.predictor.predict(batch)
        except PredictorError:
            raise
        except Exception as exc:  # a framework's own error: the model did not accept the batch
            raise self._failed(batch, exc) from exc

    def _failed(self, batch: np.ndarray, exc: Exception) -> PredictorError:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        # TorchScript puts the interpreter's traceback first and the error last.
        message = lines[-1] if lines and "Traceback" in str(exc) else " ".join(lines[:3])
        if len(message) > 300:
            message = message[:297] + "..."
        return PredictorError(
            f"{self.model.framework} failed to run {self.model.name} {self.model.version} on a "
            f"batch of shape {tuple(batch.shape)} {batch.dtype}: "
            f"{message or type(exc).__name__}"
        )

    def _postprocess(self, outputs: np.ndarray) -> list[list[tuple[int, str, float]]]:
        return postprocess(
            outputs,
            output_type=self.spec.output_type,  # type: ignore[arg-type]
            top_k=int(self.spec.output_parameters.get("top_k", 5)),
            labels=self.labels,
        )

    def _stop_if_cancelled(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise EvaluationCancelled("the evaluation was cancelled")


# -- checks and summaries ----------------------------------------------------------------------


def _model_spec(model: Manifest) -> _ModelSpec:
    if model.kind != "model":
        raise EvaluationError(f"{model.name} is a {model.kind} manifest, not a model")
    if model.task != "image_classification":
        raise EvaluationError(
            f"{model.name} is a {model.task} model; the evaluation loop scores "
            "image_classification models only"
        )
    inputs, outputs = model.data["inputs"], model.data["outputs"]
    if len(inputs) != 1:
        raise EvaluationError(f"{model.name} has {len(inputs)} inputs; the loop feeds one")
    files = model.data["model"]
    return _ModelSpec(
        input=inputs[0],
        output_type=outputs[0]["type"],
        output_parameters=outputs[0].get("parameters") or {},
        graph_path=files["graph_path"],
        graph_sha256=files.get("graph_sha256"),
        weights_path=files.get("weights_path"),
        weights_sha256=files.get("weights_sha256"),
    )


def _check_version(model: Manifest, version: str) -> None:
    if not versioning.satisfies(version, model.framework_range):
        raise PredictorError(
            f"{model.name} {model.version} needs {model.framework} {model.framework_range}, "
            f"but {model.framework} {version} is installed"
        )


def _shown(value: Any) -> str:
    """A manifest value as the manifest would show it: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _accuracy(outputs: np.ndarray, labels: np.ndarray) -> dict[str, float | int]:
    k = min(5, outputs.shape[1])
    # A stable sort of the negated outputs breaks ties towards the lower class index, as
    # `postprocess` does; softmax keeps the order, so logits rank like probabilities.
    top = np.argsort(-outputs, axis=1, kind="stable")[:, :k]
    hits = top == labels[:, None]
    return {
        "top1": float(hits[:, 0].mean()),
        "top5": float(hits.any(axis=1).mean()),
        "count": int(labels.size),
    }


def _notes(model: Manifest, dataset: Manifest, labels: list[str], classes: int) -> list[str]:
    notes = []
    if (model.data.get("attributes") or {}).get("trained") is False:
        notes.append(
            f"{model.name} is not trained (attributes.trained: false): its accuracy is "
            "meaningless; use it for latency and throughput"
        )
    dataset_labels = dataset.data.get("labels")
    if isinstance(dataset_labels, list) and dataset_labels != labels:
        notes.append(
            f"the model's {len(labels)} labels are not the dataset's {len(dataset_labels)} "
            "labels: accuracy compares class indices"
        )
    if classes != len(labels):
        notes.append(f"the model gives {classes} outputs per input for {len(labels)} labels")
    return notes


def _level_counts(spans: Sequence[Span]) -> dict[str, int]:
    """How many spans each level recorded."""
    counts: dict[str, int] = {}
    for span in spans:
        level = str(span.attributes.get(Attr.LEVEL, ""))
        counts[level] = counts.get(level, 0) + 1
    return counts


def _trace_notes(
    options: EvaluationOptions, predictor_type: type[Predictor], sampler: CounterSampler | None
) -> list[str]:
    """What the requested trace level could not record here, in words."""
    level = options.trace_level
    notes: list[str] = []
    finest = predictor_type.finest_trace_level
    framework = predictor_type.framework
    if at_least(level, "ml_library") and not at_least(finest, level):
        notes.append(
            f"trace level {level}: the {framework} predictor traces down to {finest}; "
            "finer steps inside its calls are not recorded"
        )
    if at_least(level, "system_library") and options.device == "cpu":
        notes.append(
            f"trace level {level} on the CPU: there are no CUDA runtime calls or GPU kernels "
            "to record"
        )
    if sampler is not None:
        notes.extend(sampler.notes)
    return notes
