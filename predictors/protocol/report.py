"""The evaluation loop's report, typed: what `predictors.evaluation.evaluate` answers as
`Evaluation.result` and an agent uploads as `ResultUpload.details`, section by section.

`Report` is the whole: the model, the dataset and the framework that ran, the settings and the
options, each batch size's summary (`BatchSize`: its latency, throughput and accuracy, typed
per task in `predictors.protocol.accuracy`), the hygiene warnings, the theoretical work and its
roofline, LoadGen's run, what the trace recorded and what became of its spans, the notes and the
model's state. Each is a `Record`: `to_dict` gives the JSON the
pages, the CSV and the compare API read, and `from_dict` reads it back strictly, refusing an
unknown key or a value of another type with a `ProtocolError` naming its path. Every field may
be left out (`ABSENT`): a result posted by hand, or by an older agent, holds what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from predictors.protocol.accuracy import Accuracy, SequenceAccuracy, TaskAccuracy
from predictors.protocol.options import JobOptions
from predictors.protocol.records import ABSENT, Absent, Maybe, Record

__all__ = [
    "Achieved",
    "Bandwidth",
    "BatchSize",
    "CountedLayer",
    "CurvePoint",
    "DatasetIdentity",
    "FrameworkIdentity",
    "HygieneWarning",
    "InputSizes",
    "Latency",
    "LoadGen",
    "LoadGenAccuracy",
    "LoadGenProblem",
    "LoadGenSeeds",
    "LoadGenSettings",
    "ModelIdentity",
    "ModelState",
    "Overhead",
    "Peak",
    "Peaks",
    "Profiler",
    "QpsSearch",
    "Report",
    "ReportedRun",
    "Roof",
    "Roofline",
    "Settings",
    "SpanCounts",
    "TargetCiReport",
    "Theoretical",
    "Trace",
]


# -- what ran ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelIdentity(Record):
    """The model manifest that ran (`trained`: its attribute, None where it says nothing)."""

    name: Maybe[str] = ABSENT
    version: Maybe[str] = ABSENT
    task: Maybe[str] = ABSENT
    content_hash: Maybe[str] = ABSENT
    trained: Maybe[bool | None] = ABSENT


@dataclass(frozen=True)
class DatasetIdentity(Record):
    """The dataset split read: the inputs evaluated (`count`) of the split's (`split_count`)."""

    name: Maybe[str] = ABSENT
    version: Maybe[str] = ABSENT
    split: Maybe[str] = ABSENT
    count: Maybe[int] = ABSENT
    split_count: Maybe[int | None] = ABSENT


@dataclass(frozen=True)
class FrameworkIdentity(Record):
    """The framework: the manifest's name and version range, and the predictor's software
    (`Predictor.software`: ONNX Runtime's providers, PyTorch's and TensorFlow's CUDA)."""

    name: Maybe[str] = ABSENT
    range: Maybe[str] = ABSENT
    version: Maybe[str] = ABSENT
    keras: Maybe[str] = ABSENT
    providers: Maybe[list[str]] = ABSENT
    cuda: Maybe[str | None] = ABSENT
    cudnn: Maybe[int | str | None] = ABSENT
    mkldnn: Maybe[bool] = ABSENT


@dataclass(frozen=True)
class Settings(Record):
    """The settings the loaded model ran with, as applied: the threads asked for and the seed,
    then the predictor's own (`Predictor.settings`)."""

    threads_requested: Maybe[int | None] = ABSENT
    seed: Maybe[int] = ABSENT
    graph_optimization: Maybe[str] = ABSENT
    providers: Maybe[list[str]] = ABSENT
    intra_op_threads: Maybe[int] = ABSENT
    inter_op_threads: Maybe[int] = ABSENT
    execution_mode: Maybe[str] = ABSENT
    cudnn_allow_tf32: Maybe[bool] = ABSENT
    matmul_allow_tf32: Maybe[bool] = ABSENT
    cudnn_benchmark: Maybe[bool] = ABSENT
    device: Maybe[str] = ABSENT
    # The model file's format as loaded (`model.format`), a SavedModel's signature, and a
    # TFLite model's quantization as applied to its inputs and outputs (scale, zero point).
    format: Maybe[str] = ABSENT
    signature: Maybe[str] = ABSENT
    quantization: Maybe[dict[str, Any]] = ABSENT


@dataclass(frozen=True)
class HygieneWarning(Record):
    """What makes the numbers less defensible (`predictors.analysis.hygiene`): a `code`, its
    `message`, and the values measured for it."""

    code: Maybe[str] = ABSENT
    message: Maybe[str] = ABSENT
    threads: Maybe[int] = ABSENT
    share: Maybe[float] = ABSENT
    load_average: Maybe[float | None] = ABSENT
    cores: Maybe[int] = ABSENT
    batch_size: Maybe[int] = ABSENT
    iqr_of_median: Maybe[float] = ABSENT
    samples: Maybe[int] = ABSENT
    needed: Maybe[int] = ABSENT
    ratio: Maybe[float] = ABSENT
    governor: Maybe[str] = ABSENT
    overhead: Maybe[float] = ABSENT


# -- each batch size -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency(Record):
    """One batch size's latency (`predictors.statistics.latency`), in ms: the keys of
    `predictors.protocol.LATENCY_KEYS`, the median's interval and whether the samples bound
    p90 and p99, the count of timed batches, and (in `Evaluation.result`; in an upload they
    travel in `ResultUpload.latency`) the samples themselves."""

    count: Maybe[int] = ABSENT
    p50_ms: Maybe[float] = ABSENT
    p50_low_ms: Maybe[float | None] = ABSENT
    p50_high_ms: Maybe[float | None] = ABSENT
    p90_ms: Maybe[float] = ABSENT
    p90_bounded: Maybe[bool] = ABSENT
    p99_ms: Maybe[float] = ABSENT
    p99_bounded: Maybe[bool] = ABSENT
    mean_ms: Maybe[float] = ABSENT
    std_ms: Maybe[float] = ABSENT
    min_ms: Maybe[float] = ABSENT
    max_ms: Maybe[float] = ABSENT
    samples_ms: Maybe[list[float]] = ABSENT


@dataclass(frozen=True)
class TargetCiReport(Record):
    """How `target_ci` went at a batch size (`predictors.evaluation.target_ci`)."""

    asked: Maybe[float] = ABSENT
    reached: Maybe[float | None] = ABSENT
    stopped: Maybe[str | None] = ABSENT
    batches: Maybe[int] = ABSENT
    seconds: Maybe[float] = ABSENT
    seconds_bound: Maybe[float] = ABSENT
    text: Maybe[str] = ABSENT


@dataclass(frozen=True)
class InputSizes(Record):
    """The input sizes a detector's batches ran at (each image at its own)."""

    distinct: Maybe[int] = ABSENT
    smallest: Maybe[list[int]] = ABSENT
    largest: Maybe[list[int]] = ABSENT


@dataclass(frozen=True)
class BatchSize(Record):
    """One batch size's summary: what ran, its accuracy, latency and throughput, its hygiene
    warnings, and the time read, preprocessing and postprocessing took."""

    batch_size: Maybe[int] = ABSENT
    batches: Maybe[int] = ABSENT
    streams: Maybe[int] = ABSENT
    inputs: Maybe[int] = ABSENT
    warmup: Maybe[int] = ABSENT
    repeat: Maybe[int] = ABSENT
    accuracy: Maybe[TaskAccuracy | None] = ABSENT
    input_sizes: Maybe[InputSizes] = ABSENT
    latency: Maybe[Latency] = ABSENT
    latency_batches: Maybe[str] = ABSENT
    target_ci: Maybe[TargetCiReport] = ABSENT
    hygiene: Maybe[list[HygieneWarning]] = ABSENT
    first_call_ms: Maybe[float] = ABSENT
    throughput_ips: Maybe[float] = ABSENT
    timed_inputs: Maybe[int] = ABSENT
    timed_wall_ms: Maybe[float] = ABSENT
    read_ms_per_batch: Maybe[float] = ABSENT
    preprocess_ms_per_batch: Maybe[float] = ABSENT
    postprocess_ms_per_batch: Maybe[float] = ABSENT
    accuracy_state_reset: Maybe[SequenceAccuracy] = ABSENT


# -- the theoretical work and its roofline -------------------------------------------------------


@dataclass(frozen=True)
class CountedLayer(Record):
    """One layer's multiply-adds, parameters and bytes (`predictors.analysis.flops`)."""

    name: Maybe[str] = ABSENT
    module: Maybe[str] = ABSENT
    op_type: Maybe[str] = ABSENT
    macs: Maybe[int] = ABSENT
    params: Maybe[int] = ABSENT
    activation_bytes: Maybe[int] = ABSENT
    weight_bytes: Maybe[int] = ABSENT
    intensity: Maybe[float | None] = ABSENT


@dataclass(frozen=True)
class Achieved(Record):
    """The FLOP/s a batch size's p50 latency achieved, where it sits on the roofline."""

    batch_size: Maybe[int] = ABSENT
    gflops_per_s: Maybe[float] = ABSENT
    intensity: Maybe[float | None] = ABSENT
    bytes: Maybe[int] = ABSENT
    of_peak: Maybe[float] = ABSENT
    note: Maybe[str] = ABSENT


@dataclass(frozen=True)
class Peak(Record):
    """A compute peak (GFLOP/s) and how it was obtained, or why there is none."""

    framework: Maybe[str] = ABSENT
    dtype: Maybe[str] = ABSENT
    gflops: Maybe[float | None] = ABSENT
    size: Maybe[int] = ABSENT
    method: Maybe[str] = ABSENT
    reason: Maybe[str] = ABSENT


@dataclass(frozen=True)
class Peaks(Record):
    measured: Maybe[Peak] = ABSENT
    theoretical: Maybe[Peak] = ABSENT


@dataclass(frozen=True)
class Bandwidth(Record):
    """The memory bandwidth (GB/s) and how it was measured, or why it was not."""

    gb_per_s: Maybe[float | None] = ABSENT
    method: Maybe[str] = ABSENT
    reason: Maybe[str] = ABSENT


@dataclass(frozen=True)
class Roof(Record):
    """The roof the points are set against: its GFLOP/s, which peak it is, and why."""

    gflops: Maybe[float] = ABSENT
    source: Maybe[str] = ABSENT
    why: Maybe[str] = ABSENT


@dataclass(frozen=True)
class Roofline(Record):
    """The roofline of the run's framework on its device (`predictors.analysis.roofline`)."""

    device: Maybe[str] = ABSENT
    framework: Maybe[str] = ABSENT
    threads: Maybe[int | None] = ABSENT
    dtype: Maybe[str] = ABSENT
    peaks: Maybe[Peaks] = ABSENT
    bandwidth: Maybe[Bandwidth] = ABSENT
    measured: Maybe[bool] = ABSENT
    reason: Maybe[str] = ABSENT
    roof: Maybe[Roof] = ABSENT
    peak_gflops_per_s: Maybe[float] = ABSENT
    bandwidth_gb_per_s: Maybe[float | None] = ABSENT
    ridge_flop_per_byte: Maybe[float | None] = ABSENT
    method: Maybe[str] = ABSENT


@dataclass(frozen=True)
class Theoretical(Record):
    """The model's work at the shape fed, counted (`predictors.analysis.flops`), or why it
    could not be (`counted` false, `reason`); the FLOP/s achieved and the roofline."""

    counted: Maybe[bool] = ABSENT
    reason: Maybe[str] = ABSENT
    framework: Maybe[str] = ABSENT
    input_shapes: Maybe[dict[str, list[int]]] = ABSENT
    macs: Maybe[int] = ABSENT
    flops: Maybe[int] = ABSENT
    params: Maybe[int] = ABSENT
    layers: Maybe[list[CountedLayer]] = ABSENT
    aliases: Maybe[dict[str, str]] = ABSENT
    uncounted_layers: Maybe[list[str]] = ABSENT
    achieved: Maybe[list[Achieved]] = ABSENT
    roofline: Maybe[Roofline] = ABSENT


# -- LoadGen -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadGenSeeds(Record):
    qsl: Maybe[int] = ABSENT
    sample_index: Maybe[int] = ABSENT
    schedule: Maybe[int] = ABSENT


@dataclass(frozen=True)
class LoadGenSettings(Record):
    """The settings LoadGen ran with, and where its target came from."""

    scenario: Maybe[str] = ABSENT
    mode: Maybe[str] = ABSENT
    target_qps: Maybe[float | None] = ABSENT
    target_qps_from: Maybe[str | None] = ABSENT
    start_qps: Maybe[float | None] = ABSENT
    start_qps_from: Maybe[str | None] = ABSENT
    latency_bound_ms: Maybe[float | None] = ABSENT
    min_duration_ms: Maybe[int] = ABSENT
    min_query_count: Maybe[int] = ABSENT
    samples_per_query: Maybe[int | None] = ABSENT
    batch_size: Maybe[int | None] = ABSENT
    seeds: Maybe[LoadGenSeeds] = ABSENT
    samples: Maybe[int] = ABSENT
    samples_capped_at_bytes: Maybe[int | None] = ABSENT
    loadgen_version: Maybe[str | None] = ABSENT


@dataclass(frozen=True)
class ReportedRun(Record):
    """Which of LoadGen's runs the result reports, and why."""

    run: Maybe[int] = ABSENT
    runs: Maybe[int] = ABSENT
    target_qps: Maybe[float | None] = ABSENT
    valid: Maybe[bool | None] = ABSENT
    why: Maybe[str] = ABSENT
    statement: Maybe[str] = ABSENT


@dataclass(frozen=True)
class LoadGenProblem(Record):
    """A warning or error of LoadGen's detail log, and how many times it came."""

    level: Maybe[str] = ABSENT
    key: Maybe[str] = ABSENT
    message: Maybe[str] = ABSENT
    count: Maybe[int] = ABSENT


@dataclass(frozen=True)
class CurvePoint(Record):
    """A run of the QPS search."""

    run: Maybe[int] = ABSENT
    target_qps: Maybe[float | None] = ABSENT
    completed_qps: Maybe[float | None] = ABSENT
    p99_ms: Maybe[float | None] = ABSENT
    latency_held: Maybe[bool] = ABSENT
    valid: Maybe[bool | None] = ABSENT
    invalid_reasons: Maybe[list[str]] = ABSENT
    problems: Maybe[list[LoadGenProblem]] = ABSENT
    seconds: Maybe[float] = ABSENT
    summary: Maybe[dict[str, str]] = ABSENT
    reported: Maybe[bool] = ABSENT


@dataclass(frozen=True)
class QpsSearch(Record):
    """The QPS search: the peak LoadGen judged valid, and the curve of its runs."""

    peak_qps: Maybe[float | None] = ABSENT
    highest_held_qps: Maybe[float | None] = ABSENT
    latency_bound_ms: Maybe[float | None] = ABSENT
    start_qps: Maybe[float | None] = ABSENT
    reported_run: Maybe[int] = ABSENT
    curve: Maybe[list[CurvePoint]] = ABSENT


@dataclass(frozen=True)
class LoadGenAccuracy(Accuracy):
    """Top-1 and top-5 of the samples LoadGen sent once each (accuracy mode)."""

    samples: Maybe[int] = ABSENT


@dataclass(frozen=True)
class LoadGen(Record):
    """MLPerf LoadGen's run of the loaded model (`predictors.evaluation.scenarios.loadgen`):
    the reported run's verdict, why, its summary and its log."""

    settings: Maybe[LoadGenSettings] = ABSENT
    reported: Maybe[ReportedRun] = ABSENT
    valid: Maybe[bool | None] = ABSENT
    invalid_reasons: Maybe[list[str]] = ABSENT
    problems: Maybe[list[LoadGenProblem]] = ABSENT
    notes: Maybe[list[str]] = ABSENT
    summary: Maybe[dict[str, str]] = ABSENT
    early_stopping: Maybe[list[str]] = ABSENT
    summary_text: Maybe[str] = ABSENT
    log: Maybe[str] = ABSENT
    calls: Maybe[int] = ABSENT
    search: Maybe[QpsSearch] = ABSENT
    accuracy: Maybe[LoadGenAccuracy] = ABSENT


# -- the trace -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Overhead(Record):
    """The tracing overhead: the traced calls' p50 against the same calls untraced
    (`predictors.analysis.hygiene.tracing_overhead`), or why it was not measured."""

    measured: Maybe[bool] = ABSENT
    reason: Maybe[str] = ABSENT
    level: Maybe[str] = ABSENT
    batch_size: Maybe[int] = ABSENT
    calls: Maybe[int] = ABSENT
    traced_p50_ms: Maybe[float] = ABSENT
    untraced_p50_ms: Maybe[float] = ABSENT
    overhead: Maybe[float | None] = ABSENT


@dataclass(frozen=True)
class Profiler(Record):
    """What the predictor's profiler itself counted (`Predictor.trace_summary`)."""

    profiler: Maybe[str] = ABSENT
    profiled_calls: Maybe[int] = ABSENT
    profiler_gpu_activities: Maybe[int] = ABSENT
    profiler_gpu_annotations: Maybe[int] = ABSENT
    calls: Maybe[int] = ABSENT
    gpu_activities: Maybe[int] = ABSENT
    gpu_activities_matched: Maybe[int] = ABSENT
    gpu_activities_unmatched: Maybe[int] = ABSENT
    ops: Maybe[int] = ABSENT
    ops_outside_calls: Maybe[int] = ABSENT


@dataclass(frozen=True)
class Trace(Record):
    """What the trace recorded: its level, the spans written by level, the layers and GPU
    activities among them, the profiler's own count, and the tracing overhead."""

    level: Maybe[str] = ABSENT
    overhead: Maybe[Overhead] = ABSENT
    spans: Maybe[int] = ABSENT
    levels: Maybe[dict[str, int]] = ABSENT
    layer_spans: Maybe[int] = ABSENT
    gpu_activity_spans: Maybe[int] = ABSENT
    profiler: Maybe[Profiler] = ABSENT


@dataclass(frozen=True)
class SpanCounts(Record):
    """What became of the spans an agent exported (`predictors.agent.results.close_trace`):
    `note` says why, where not all were stored."""

    sent: Maybe[int] = ABSENT
    stored: Maybe[int] = ABSENT
    refused: Maybe[int] = ABSENT
    spooled: Maybe[int] = ABSENT
    retries: Maybe[int] = ABSENT
    note: Maybe[str] = ABSENT


@dataclass(frozen=True)
class ModelState(Record):
    """Whether the model keeps a state between calls, and what the loop did about it
    (`predictors.evaluation.state`)."""

    stateful: Maybe[bool] = ABSENT
    reset: Maybe[str] = ABSENT
    handling: Maybe[str] = ABSENT
    difference: Maybe[str] = ABSENT
    checked: Maybe[str] = ABSENT
    rtol: Maybe[float] = ABSENT
    atol: Maybe[float] = ABSENT


# -- the whole -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report(Record):
    """The evaluation loop's report (see the module docstring). `accuracy` is the first batch
    size's (None for a latency-only run); an agent adds the trace level asked for, what became
    of the spans, and a note where not all were stored (`trace_export`)."""

    model: Maybe[ModelIdentity] = ABSENT
    dataset: Maybe[DatasetIdentity] = ABSENT
    framework: Maybe[FrameworkIdentity] = ABSENT
    output_type: Maybe[str] = ABSENT
    device: Maybe[str] = ABSENT
    clock: Maybe[str] = ABSENT
    settings: Maybe[Settings] = ABSENT
    # The job options as the run had them (`JobOptions.to_dict()`), each checked as a job's is.
    options: Maybe[dict[str, Any]] = ABSENT
    load_ms: Maybe[float] = ABSENT
    hygiene: Maybe[list[HygieneWarning]] = ABSENT
    accuracy: Maybe[TaskAccuracy | None] = ABSENT
    accuracy_state_reset: Maybe[SequenceAccuracy] = ABSENT
    batch_sizes: Maybe[list[BatchSize]] = ABSENT
    theoretical: Maybe[Theoretical] = ABSENT
    loadgen: Maybe[LoadGen] = ABSENT
    trace: Maybe[Trace] = ABSENT
    notes: Maybe[list[str]] = ABSENT
    state: Maybe[ModelState | None] = ABSENT
    started_at: Maybe[str] = ABSENT
    duration_s: Maybe[float] = ABSENT
    trace_level_requested: Maybe[str] = ABSENT
    spans: Maybe[SpanCounts] = ABSENT
    trace_export: Maybe[str] = ABSENT

    def __post_init__(self) -> None:
        if not isinstance(self.options, Absent):
            JobOptions.from_dict(self.options, path="options")  # names and bounds, as a job's
