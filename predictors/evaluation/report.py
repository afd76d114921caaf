"""What an evaluation answers: `Evaluation` (the result and what the run kept), the typed report
built from what the run measured (`result_of`; `Evaluation.result` is its dict), and `compare`,
of two evaluations of the same inputs."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from predictors.evaluation import state as model_state
from predictors.evaluation.base import CLOCK_CUDA, CLOCK_HOST, Prediction, Scenario, Setup
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.summaries import trace_notes
from predictors.frameworks.predictor import Predictor
from predictors.protocol import ABSENT, JobOptions, Report, at_least
from predictors.protocol.accuracy import SequenceAccuracy, TaskAccuracy
from predictors.protocol.records import read
from predictors.protocol.report import (
    BatchSize,
    DatasetIdentity,
    FrameworkIdentity,
    HygieneWarning,
    ModelIdentity,
    ModelState,
    Overhead,
    Profiler,
    Settings,
    Theoretical,
    Trace,
)
from predictors.tracing import Span
from predictors.tracing.counters import CounterSampler

if TYPE_CHECKING:
    from predictors.analysis.divergence import Capture

__all__ = ["Evaluation", "Measured", "compare", "result_of"]


@dataclass
class Evaluation:
    """What `evaluate` returns.

    `result` is the JSON-able summary, the typed report's dict (`report` reads it back).
    `capture` the layer outputs the job's `capture_inputs` asked for. `outputs` holds the model's raw outputs for every input (dataset order, float32, one row per
    input) at the first batch size, first pass; `labels` the dataset labels; `predictions` the
    top-k (class, label, probability) of every input at the first batch size (a detector's: its
    detections' classes and scores, best first, and `detections` their boxes; a text
    recognizer's: (0, text, confidence), the confidence None for emitted token ids); `spans` the
    recorded spans (none at trace level `none`).
    """

    result: dict[str, Any]
    outputs: np.ndarray
    labels: np.ndarray
    predictions: Sequence[Sequence[Prediction]]
    spans: list[Span]
    # An object detector's detections per image, (m, 6): x, y, w, h (COCO's, in the image's
    # pixels), score, class, best first; None for other tasks.
    detections: list[np.ndarray] | None = None
    # The layer outputs of the job's `capture_inputs` (`predictors.evaluation.capture`).
    capture: Capture | None = None

    @functools.cached_property
    def report(self) -> Report:
        """`result` read as the typed report (`predictors.protocol.Report`)."""
        return Report.from_dict(self.result)


@dataclass
class Measured:
    """What a run measured, from the model's load to its last call."""

    loop: Scenario
    per_batch_size: list[dict[str, Any]]
    settings: dict[str, Any]  # the settings the loaded model ran with, as applied
    profiler: dict[str, Any] | None  # what the predictor's profiler itself counted
    followed: dict[str, Any]  # a follow-up's answer under its key (LoadGen's), or nothing
    sampler: CounterSampler | None  # the hardware counters' sampler (trace level hardware)
    load_ns: int
    # The layer outputs of the job's `capture_inputs` (None: none asked).
    capture: Capture | None = None


def result_of(
    setup: Setup,
    measured: Measured,
    *,
    split: dict[str, Any],
    software: dict[str, Any],
    predictor_type: type[Predictor],
    overhead: dict[str, Any],
    theoretical: dict[str, Any],
    hygiene: list[dict[str, Any]],
    started: datetime,
) -> Report:
    """The report of an evaluation: the model, the dataset, the framework, the options, each
    batch size's summary, what the trace recorded, the notes. What other modules measured
    (the batch sizes, the hygiene warnings, the theoretical work, a follow-up's answer) is read
    strictly into its record: a key the report does not know fails here, not at the hub."""
    model, dataset, options = setup.model, setup.dataset, setup.options
    loop, first = measured.loop, measured.per_batch_size[0]
    assert loop.first is not None
    reset = first.get("accuracy_state_reset")
    return Report(
        model=ModelIdentity(
            name=model.name,
            version=model.version,
            task=model.task,
            content_hash=model.content_hash(),
            trained=(model.data.get("attributes") or {}).get("trained"),
        ),
        dataset=DatasetIdentity(
            name=dataset.name,
            version=dataset.version,
            split=options.split,
            count=len(loop.first.labels),
            split_count=split.get("count"),
        ),
        framework=FrameworkIdentity.from_dict(
            {"name": model.framework, "range": model.framework_range, **software}, "framework"
        ),
        output_type=loop.output_type(),
        device=options.device,
        clock=CLOCK_HOST if options.device == "cpu" else CLOCK_CUDA,
        settings=Settings.from_dict(
            {"threads_requested": options.threads, "seed": options.seed, **measured.settings},
            "settings",
        ),
        options=_options(options),
        load_ms=measured.load_ns / 1e6,
        # What makes these numbers less defensible, as labelled warnings (`hygiene`).
        hygiene=read(hygiene, list[HygieneWarning], "hygiene"),
        accuracy=read(first["accuracy"], TaskAccuracy | None, "accuracy"),
        accuracy_state_reset=(
            ABSENT if reset is None else SequenceAccuracy.from_dict(reset, "accuracy_state_reset")
        ),
        batch_sizes=read(measured.per_batch_size, list[BatchSize], "batch_sizes"),
        theoretical=Theoretical.from_dict(theoretical, "theoretical"),
        **_followed(measured.followed),
        trace=_trace(options, measured, overhead),
        notes=loop.notes()
        + model_state.note(loop.what, loop.state)
        + trace_notes(options, predictor_type, measured.sampler),
        # Whether the model keeps a state between calls, and what the loop did about it.
        state=None if loop.state is None else ModelState.from_dict(loop.state, "state"),
        started_at=started.isoformat(timespec="seconds"),
        duration_s=(datetime.now(UTC) - started).total_seconds(),
    )


def _followed(followed: dict[str, Any]) -> dict[str, Any]:
    """A follow-up's answer, under its key: a field of the report (LoadGen's, `loadgen`)."""
    read_back = Report.from_dict(followed)
    return {key: getattr(read_back, key) for key in followed}


def _options(options: EvaluationOptions) -> dict[str, Any]:
    """The job options the result records: every one, as the run had it."""
    return {name: value for name, value in options.to_dict().items() if name in JobOptions.names()}


def _trace(options: EvaluationOptions, measured: Measured, overhead: dict[str, Any]) -> Trace:
    """What the trace recorded: spans by level, layers and GPU activity, the profiler's own
    count, and the tracing overhead."""
    loop, profiler = measured.loop, measured.profiler
    return Trace(
        level=options.trace_level,
        # Traced against untraced calls of the same batch (`hygiene.tracing_overhead`).
        overhead=Overhead.from_dict(overhead, "trace.overhead"),
        spans=loop.written,
        levels=dict(loop.level_counts),
        layer_spans=loop.layer_spans if loop.layers else ABSENT,
        gpu_activity_spans=(
            loop.gpu_spans if at_least(options.trace_level, "system_library") else ABSENT
        ),
        profiler=Profiler.from_dict(profiler, "trace.profiler") if profiler else ABSENT,
    )


def compare(a: Evaluation, b: Evaluation) -> dict[str, Any]:
    """How far two evaluations of the same inputs agree: the share of inputs with the same
    top-1 class (a text recognizer's: the same decoded text; None for a regression's values
    and a latency-only run's outputs, which have no best class), and the largest absolute
    difference between their raw outputs (None where a latency-only run kept no output, and for
    emitted token ids, which are no scores: two runs may emit sequences of other lengths)."""
    names = [e.result["framework"]["name"] for e in (a, b)]
    output_type = a.result.get("output_type")
    ids = output_type == "token_ids"
    shapes = (len(a.outputs), len(b.outputs)) if ids else (a.outputs.shape, b.outputs.shape)
    if shapes[0] != shapes[1] or not np.array_equal(a.labels, b.labels):
        raise EvaluationError(
            f"{names[0]} and {names[1]} did not evaluate the same inputs "
            f"(outputs {a.outputs.shape} and {b.outputs.shape}); they cannot be compared"
        )
    difference = (
        np.empty(0) if ids else np.abs(a.outputs.astype(np.float64) - b.outputs.astype(np.float64))
    )
    same: np.ndarray | None = None
    if output_type == "detections":
        # Each image's best detection (x, y, w, h, score, class): the same class.
        same = a.outputs[:, 5] == b.outputs[:, 5]
    elif output_type in ("frame_confidences", "token_ids"):
        # A text recognizer's: each input's decoded text, (0, text, confidence).
        same = np.array(
            [x[0][1] == y[0][1] for x, y in zip(a.predictions, b.predictions, strict=True)], bool
        )
    elif output_type not in ("values", "tensor"):
        same = a.outputs.argmax(axis=1) == b.outputs.argmax(axis=1)
    return {
        "frameworks": names,
        "count": int(len(a.outputs)),
        "top1_agreement": None if same is None else float(same.mean()),
        "top1_disagreements": None if same is None else int(same.size - same.sum()),
        "max_abs_diff": float(difference.max()) if difference.size else None,
        "output_type": output_type,
    }
