"""`evaluate`: one model, one dataset split, one framework, several batch sizes."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from predictors.analysis import flops, roofline
from predictors.analysis.hygiene import Watch, overhead_warnings, tracing_overhead
from predictors.data import (
    DatasetReader,
    DetectionReader,
    MaskReader,
    StreamReader,
    lockstep_calls,
    target_of,
)
from predictors.evaluation import detection, loadgen, segmentation, streams
from predictors.evaluation import state as model_state
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.fixed_batches import (
    CLOCK_CUDA,
    CLOCK_HOST,
    FixedBatches,
    Progress,
    _ModelSpec,
)
from predictors.evaluation.latency import LatencyOnly
from predictors.evaluation.multilabel import MultiLabel
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.regression import Regression
from predictors.evaluation.sinks import SpanList, SpanSink
from predictors.evaluation.summaries import _notes, _trace_notes
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
    PredictorOptions,
    predictor_class,
)
from predictors.manifests import Manifest, apply_overrides, versioning
from predictors.manifests.labels import REFUSAL_HINT as LABEL_HINT
from predictors.manifests.labels import is_untrained
from predictors.manifests.labels import mismatch as label_mismatch
from predictors.processing import (
    load_labels,
    preprocessor_for,
)
from predictors.processing.custom_code import (
    RUNS_WHERE,
    CustomCode,
    CustomPreprocessor,
    fields_with_code,
)
from predictors.protocol import (
    at_least,
    data_input_name,
    loadgen_problem,
    scored_output_name,
    unsupported,
)
from predictors.tracing import Span
from predictors.tracing.counters import CounterSampler

# The scenarios of the tasks scored like classification, input by input, with other targets.
_TARGET_SCENARIOS: dict[str, type[FixedBatches]] = {
    "multi_label_classification": MultiLabel,
    "regression": Regression,
}

Fetch = Callable[[str, str | None], Path]
"""`fetch(url, sha256)`: a local file for a manifest's URL (e.g. `DataManager.fetch`)."""


@dataclass
class Evaluation:
    """What `evaluate` returns.

    `result` is the JSON-able summary. `outputs` holds the model's raw outputs for every input
    (dataset order, float32, one row per input) at the first batch size, first pass; `labels`
    the dataset labels; `predictions` the top-k (class, label, probability) of every input at
    the first batch size (a detector's: its detections' classes and scores, best first, and
    `detections` their boxes); `spans` the recorded spans (none at trace level `none`).
    """

    result: dict[str, Any]
    outputs: np.ndarray
    labels: np.ndarray
    predictions: list[list[tuple[int, str, float]]]
    spans: list[Span]
    # An object detector's detections per image, (m, 6): x, y, w, h (COCO's, in the image's
    # pixels), score, class, best first; None for other tasks.
    detections: list[np.ndarray] | None = None


def evaluate(
    model: Manifest,
    dataset: Manifest,
    options: EvaluationOptions,
    fetch: Fetch,
    *,
    progress: Progress | None = None,
    cancelled: Callable[[], bool] | None = None,
    sink: SpanSink | None = None,
) -> Evaluation:
    """Evaluate `model` on a split of `dataset` (see the module docstring for the loop).

    The spans go to `sink` as the loop goes (an agent's sink exports them, so that no span is
    held twice); by default they are kept, in `Evaluation.spans`."""
    kept = SpanList() if sink is None else None
    sink = sink if sink is not None else kept
    assert sink is not None
    started = datetime.now(UTC)
    if options.overrides:
        model = apply_overrides(model.data, list(options.overrides))
    spec = _model_spec(model, options.latency_only)
    problem = loadgen_problem(
        model.data, options.scenario, options.loadgen_mode, options.latency_only
    )
    if problem:
        raise EvaluationError(problem)
    split = split_entry(dataset, options.split)
    split_file = fetch(split["path"], split.get("sha256"))
    predictor_type = predictor_class(model.framework)
    software = predictor_type.software()
    _check_version(model, software["version"])
    predictor_type.check_device(options.device)
    custom = _custom_code(model, options)
    preprocessor: Any = preprocessor_for(spec.input)
    if custom is not None and "preprocess" in custom.functions:
        preprocessor = CustomPreprocessor(preprocessor, custom)
    timing = options.latency_only
    # Labels are read to score; a latency-only evaluation reads none (its outputs may have none).
    labels = [] if timing else load_labels(spec.output_parameters, lambda url: fetch(url, None))
    dataset_labels = (
        load_labels(dataset.data, lambda url: fetch(url, None))
        if not timing and ("labels" in dataset.data or "labels_path" in dataset.data)
        else None
    )
    if not timing:
        _check_labels(model, dataset, labels, dataset_labels, options)
    streaming = model.task == "sequence_labelling" and not timing
    detecting = model.task == "object_detection" and not timing
    segmenting = model.task == "semantic_segmentation" and not timing
    readers: list[Any]
    if streaming or detecting or segmenting:
        streams.check_trace_level(options.trace_level, model.task)
    if detecting or segmenting:
        reader_type = DetectionReader if detecting else MaskReader
        readers = [
            reader_type(split_file, size, limit=options.limit) for size in options.batch_sizes
        ]
        total = sum(options.warmup + options.repeat * len(reader) for reader in readers)
    elif streaming:
        ports = streams.ports(model)
        stream_reader: Any
        if spec.input.get("type") == "audio":
            from predictors.processing.audio import AudioPreprocessor, ClipStreams

            framer = preprocessor_for(spec.input)
            assert isinstance(framer, AudioPreprocessor)
            stream_reader = ClipStreams(split_file, framer, limit=options.limit)
        else:
            stream_reader = StreamReader(split_file, limit=options.limit)
        readers = [stream_reader.with_batch_size(size) for size in options.batch_sizes]
        calls = [lockstep_calls(stream_reader.lengths, size) for size in options.batch_sizes]
        # The state-reset pass, at the first batch size.
        total = sum(options.warmup + options.repeat * n for n in calls) + (
            calls[0] if ports.states else 0
        )
    else:
        target = "none" if timing else target_of(model.task)
        readers = [
            DatasetReader(
                split_file,
                size,
                limit=options.limit,
                target=target,
                classes=len(labels) if target != "class" else None,
            )
            for size in options.batch_sizes
        ]
        total = sum(options.warmup + options.repeat * len(reader) for reader in readers)
    if readers[0].count == 0:
        raise EvaluationError(f"the {options.split} split of {dataset.name} has no rows")

    # The machine's state from here to the end of the run (`hygiene`).
    watch = Watch.start()
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
        ),
    )
    load_end = time.perf_counter_ns()
    load_ns = load_end - load_start
    sampler = None
    loop: FixedBatches | None = None
    try:
        scenario = (
            streams.Streams
            if streaming
            else detection.Detections
            if detecting
            else segmentation.Segmentation
            if segmenting
            else LatencyOnly
            if timing
            else _TARGET_SCENARIOS.get(model.task, FixedBatches)
        )
        loop = scenario(
            model, predictor, options, spec, labels, total, progress, cancelled, sink, custom
        )
        if isinstance(loop, streams.Streams):
            loop.configure(ports)
        elif isinstance(loop, detection.Detections):
            loop.configure(preprocessor)
        elif isinstance(loop, segmentation.Segmentation):
            loop.configure(preprocessor, dataset.data.get("ignore_label"))
        elif isinstance(loop, (MultiLabel, Regression, LatencyOnly)):
            loop.configure()
        loop.stage_span("load", load_start, load_end, {})
        if at_least(options.trace_level, "hardware"):
            sampler = CounterSampler(
                options.device, attributes={"framework": model.framework, "model": model.name}
            )
            sampler.start()
        per_batch_size = []
        watch.timing()
        streams_layers = loop.layers and predictor.layers_as_they_come()
        for reader in readers:
            per_batch_size.append(loop.run(reader, preprocessor))
            if streams_layers:
                loop.add_layer_spans(predictor.take_layers())  # this batch size's layers
            loop.flush()  # this batch size's spans
        if sampler is not None:
            loop.spans.extend(sampler.stop())
        settings = predictor.settings()
        predictor.stop_tracing()
        if loop.layers:
            loop.add_layer_spans(predictor.take_layers())
        profiler_summary = predictor.trace_summary()
        loop.flush()
        # An MLPerf LoadGen scenario drives the same model after the fixed batches.
        driven = (
            loadgen.drive(
                loop,
                readers[0],
                preprocessor,
                options,
                start_qps=max(
                    1.0, min(per_batch_size, key=lambda e: e["batch_size"])["throughput_ips"] / 2
                ),
                measured_qps=max(entry["throughput_ips"] for entry in per_batch_size),
                cancelled=cancelled,
            )
            if options.scenario != "fixed"
            else None
        )
    except BaseException:
        # A cancelled or failed run: what it measured so far goes to the sink all the same.
        if loop is not None:
            if loop.layers and predictor.layers_as_they_come():
                try:
                    loop.add_layer_spans(predictor.take_layers())
                except EvaluationError:
                    pass  # the calls traced and the batches timed part ways: no layers
            if sampler is not None:
                loop.spans.extend(sampler.stop())
            loop.flush()
        raise
    finally:
        if sampler is not None:
            sampler.stop()
        predictor.close()

    first = loop.first
    assert first is not None
    overhead = tracing_overhead(
        loop,
        per_batch_size[0],
        lambda: _untraced(model, predictor_type, options, graph_file, weights_file),
    )
    # Parameters and multiply-adds per layer at the shape fed, the FLOP/s achieved, and where
    # they sit on the roofline of this framework on this device at the run's threads.
    theoretical = roofline.attach(
        flops.theoretical(
            model.framework, graph_file, spec.input["name"], loop.sample, per_batch_size
        ),
        options.device,
        model.framework,
        options.threads,
        loop.sample,
    )
    hygiene = (
        watch.finish(options.threads)
        + [warning for entry in per_batch_size for warning in entry["hygiene"]]
        + overhead_warnings(overhead)
    )
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
        "output_type": "detections"
        if detecting
        else "class_shares"
        if segmenting
        else "tensor"
        if timing
        else spec.output_type,
        "device": options.device,
        "clock": CLOCK_HOST if options.device == "cpu" else CLOCK_CUDA,
        "settings": {"threads_requested": options.threads, "seed": options.seed, **settings},
        "options": {
            "batch_sizes": list(options.batch_sizes),
            "limit": options.limit,
            "warmup": options.warmup,
            "repeat": options.repeat,
            "cold_start": options.cold_start,
            "overrides": list(options.overrides),
            "trace_level": options.trace_level,
            "latency_only": timing,
            "scenario": options.scenario,
            "target_ci": options.target_ci,
            "target_ci_seconds": options.target_ci_seconds if options.target_ci else None,
        },
        "load_ms": load_ns / 1e6,
        # What makes these numbers less defensible, as labelled warnings (`hygiene`).
        "hygiene": hygiene,
        "accuracy": per_batch_size[0]["accuracy"],
        **(
            {"accuracy_state_reset": per_batch_size[0]["accuracy_state_reset"]}
            if "accuracy_state_reset" in per_batch_size[0]
            else {}
        ),
        "batch_sizes": per_batch_size,
        "theoretical": theoretical,
        **({"loadgen": driven} if driven is not None else {}),
        "trace": {
            "level": options.trace_level,
            # Traced against untraced calls of the same batch (`hygiene.tracing_overhead`).
            "overhead": overhead,
            "spans": loop.written,
            "levels": dict(loop.level_counts),
            **({"layer_spans": loop.layer_spans} if loop.layers else {}),
            **(
                {"gpu_activity_spans": loop.gpu_spans}
                if at_least(options.trace_level, "system_library")
                else {}
            ),
            **({"profiler": profiler_summary} if profiler_summary else {}),
        },
        "notes": (
            [
                "latency only: the model was timed, not scored (no labels read, no accuracy); "
                "its every output was computed in each call"
            ]
            if timing
            else _notes(
                model,
                dataset,
                labels,
                dataset_labels,
                len(labels) if detecting or segmenting else first.outputs.shape[1],
            )
        )
        + model_state.note(loop.what, loop.state)
        + _trace_notes(options, predictor_type, sampler),
        # Whether the model keeps a state between calls, and what the loop did about it.
        "state": loop.state,
        "started_at": started.isoformat(timespec="seconds"),
        "duration_s": (datetime.now(UTC) - started).total_seconds(),
    }
    return Evaluation(
        result=result,
        outputs=first.outputs,
        labels=first.labels,
        predictions=first.predictions,
        spans=kept.spans if kept is not None else [],
        detections=loop.detections if isinstance(loop, detection.Detections) else None,
    )


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


def _untraced(
    model: Manifest,
    predictor_type: type[Predictor],
    options: EvaluationOptions,
    graph_file: Path,
    weights_file: Path | None,
) -> Predictor:
    """The model loaded again as the run loaded it, but tracing nothing (the calibration of
    the tracing overhead)."""
    untraced = predictor_type()
    untraced.load(
        model,
        PredictorOptions(
            graph_file=graph_file,
            weights_file=weights_file,
            device=options.device,
            threads=options.threads,
            seed=options.seed,
            trace_level="none",
            graph_optimization=options.graph_optimization,
        ),
    )
    return untraced


def _model_spec(model: Manifest, latency_only: bool = False) -> _ModelSpec:
    problem = unsupported(model.data, latency_only=latency_only)
    if problem:
        raise EvaluationError(problem)
    # The input fed from the dataset, and the output scored (whose parameters name the labels).
    fed = data_input_name(model.data)
    scored = scored_output_name(model.data)
    data_input = next(entry for entry in model.data["inputs"] if entry["name"] == fed)
    output = next(entry for entry in model.data["outputs"] if entry["name"] == scored)
    files = model.data["model"]
    return _ModelSpec(
        input=data_input,
        output_type=output["type"],
        output_parameters=output.get("parameters") or {},
        graph_path=files["graph_path"],
        graph_sha256=files.get("graph_sha256"),
        weights_path=files.get("weights_path"),
        weights_sha256=files.get("weights_sha256"),
    )


def _custom_code(model: Manifest, options: EvaluationOptions) -> CustomCode | None:
    """The manifest's custom processing code, compiled in the sandbox; None when it has none.
    Refused where it would not run (outside a container whose agent opts in)."""
    fields = fields_with_code(model.data)
    if not fields:
        return None
    if not options.custom_code:
        raise EvaluationError(
            f"{model.name} {model.version} has custom {' and '.join(fields)} code, and "
            f"{RUNS_WHERE}; here it would not run, so the evaluation is refused rather than "
            "run without it"
        )
    return CustomCode(model.data, call_seconds=options.custom_code_seconds)


def _check_labels(
    model: Manifest,
    dataset: Manifest,
    labels: list[str],
    dataset_labels: list[str] | None,
    options: EvaluationOptions,
) -> None:
    """A trained model whose labels are not the dataset's is refused unless the options allow
    it (`predictors.manifests.labels`); the result's notes show an allowed mismatch."""
    if options.allow_label_mismatch or dataset_labels is None:
        return
    if is_untrained(model.data):
        return
    problem = label_mismatch(
        f"{model.name} {model.version}", labels, f"{dataset.name} {dataset.version}", dataset_labels
    )
    if problem:
        raise EvaluationError(f"{problem}. {LABEL_HINT}")


def _check_version(model: Manifest, version: str) -> None:
    if not versioning.satisfies(version, model.framework_range):
        raise PredictorError(
            f"{model.name} {model.version} needs {model.framework} {model.framework_range}, "
            f"but {model.framework} {version} is installed"
        )
