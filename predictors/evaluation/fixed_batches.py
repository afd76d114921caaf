"""The fixed-batch closed loop: today's scenario (see `predictors.evaluation.scenario`)."""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from predictors import statistics
from predictors.analysis.hygiene import batch_size_warnings
from predictors.data import DatasetReader
from predictors.evaluation import state as model_state
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.sinks import SpanSink
from predictors.evaluation.summaries import (
    _accuracy,
    _shown,
    probabilities,
    sequence_metrics,
)
from predictors.evaluation.target_ci import TargetCi
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
)
from predictors.manifests import Manifest
from predictors.processing import (
    postprocess,
)
from predictors.processing.custom_code import CustomCode, custom_outputs
from predictors.protocol import Attr, at_least
from predictors.tracing import Layer, Span

CLOCK_HOST = "perf_counter (host wall clock)"
CLOCK_CUDA = "perf_counter after cuda synchronize"

_REPORT_NS = 50_000_000  # progress reports and cancellation checks: at most every 50 ms
# While a batch size runs, its batch spans go to the sink at least this often (at a report,
# between two timed calls; the time it takes is not counted in the loop's wall time).
_STREAM_NS = 1_000_000_000

Progress = Callable[[int, int], None]


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
    labels: list[Any]
    # The inputs as read (encoded images), kept only where the scenario needs them
    # (`keep_inputs`: a detector's boxes are mapped back to each image's own size).
    images: list[Any] = field(default_factory=list)


class FixedBatches:
    """The fixed-batch closed loop (a `Scenario`): for each batch size, staged batches timed back
    to back, `repeat` times (state shared across batch sizes)."""

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
        sink: SpanSink,
        custom: CustomCode | None = None,
    ) -> None:
        self.model = model
        # The manifest's custom postprocess, applied to each batch's outputs (first pass).
        self.custom_postprocess = (
            custom if custom is not None and "postprocess" in custom.functions else None
        )
        self.sink = sink
        # Span ids are numbered from 1 in the order they are given (a stage span's id is given
        # before its children's, though it is written after them).
        self.last_id = 0
        self.written = 0  # spans written to the sink
        self.streamed_at = time.perf_counter_ns()  # when spans last went to the sink
        self.level_counts: Counter[str] = Counter()
        # The batch spans, by id, that the predictor's layers will be nested in.
        self.batch_spans: dict[int, Span] = {}
        self.predictor = predictor
        # What a timed call runs on a batch: the predictor's `predict` (one input, one output);
        # a scenario that feeds or reads more sets its own.
        self._call: Callable[[np.ndarray], Any] = predictor.predict
        self.keep_inputs = False
        # A binary classifier's one number per input, read as both labels' probabilities.
        self.binary = spec.output_type in ("binary_probability", "binary_logit")
        # How `_read`'s scores are ranked into predictions (`postprocess`'s output type).
        self.read_type = "probabilities" if self.binary else spec.output_type
        self.options = options
        self.spec = spec
        self.labels = labels
        self.total = total
        self.progress = progress
        self.cancelled = cancelled
        self.done = 0
        self.checked = False
        # The first batch timed, kept for the untraced calibration of the tracing overhead.
        self.sample: np.ndarray | None = None
        # Whether the model keeps a state between calls (`predictors.evaluation.state`): the
        # result's `state`, once checked, and the model's own reset where it must be reset.
        self.state: dict[str, Any] | None = None
        self._reset: Callable[[], None] | None = None
        self.first: _FirstPass | None = None
        self.spans: list[Span] = []
        # At trace level framework: the batch span id of every predict call, in call order (0
        # for a warm-up call), to nest the predictor's layers in their batch span.
        self.layers = at_least(options.trace_level, "framework")
        self.stages = at_least(options.trace_level, "application")
        self.batches = at_least(options.trace_level, "model")
        self.calls: list[int] = []
        self.tracing = False  # whether the predictor's tracing started
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
        span id (0 when stages are not traced). `at`: the id `_reserve` gave it."""
        if not self.stages:
            return 0
        offset = self.epoch_offset_ns
        span_id = at if at is not None else self._new_id()
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
        self.spans.append(span)
        return span_id

    def _new_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def _reserve(self) -> int | None:
        """The id of a stage span that its children name before it ends (None when stages are
        not traced)."""
        return self._new_id() if self.stages else None

    def run(self, reader: DatasetReader, preprocessor: Any) -> dict[str, Any]:
        options = self.options
        batch_size = reader.batch_size
        self.batch_size = batch_size
        started = time.perf_counter_ns()  # the batch size's first read: target_ci's clock
        read_ns: list[int] = []
        preprocess_ns: list[int] = []
        durations: list[int] = []
        sizes: list[int] = []
        wall_ns = 0
        self._start_collecting()
        postprocess_ns = 0
        reused: list[_Staged] | None = None
        warm = options.warmup
        self.first_call_ns: int | None = None
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
                    self.sample = stage.batches[0]
                    if not options.cold_start:  # else after the cold calls, below
                        self._check_state(stage.batches[0])
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
                    self._collect(stage, stage_outputs)
                    end = time.perf_counter_ns()
                    postprocess_ns += end - start
                    self.stage_span(
                        "postprocess",
                        start,
                        end,
                        {"batch_size": batch_size, "batches": len(stage_outputs)},
                    )
        # Past the repeat passes, until the median's interval is within target_ci.
        target = TargetCi.start(options, started)
        if target is not None:
            wall_ns += self._time_to_target(target, stage.batches, durations, sizes, batch_size)
        if self.state is None and self.sample is not None:
            self._check_state(self.sample, after_cold=True)
        accuracy, count = self._score()

        full = [d for d, n in zip(durations, sizes, strict=True) if n == batch_size]
        inputs = sum(sizes)
        return {
            "batch_size": batch_size,
            "batches": len(reader),
            "inputs": count,
            "warmup": options.warmup,
            "repeat": options.repeat,
            "accuracy": accuracy,
            **self._extras(),
            # Full batches only; a split smaller than one batch has none, and is timed as is.
            "latency": statistics.latency(full or durations, samples=True),
            "latency_batches": "full" if full else "partial",
            **({"target_ci": target.report()} if target is not None else {}),
            "hygiene": batch_size_warnings(batch_size, full or durations),
            # The first call at this batch size, cold (the warm-up's first, or with no warm-up
            # the first timed one), apart from the warm latency above.
            "first_call_ms": (
                self.first_call_ns if self.first_call_ns is not None else durations[0]
            )
            / 1e6,
            "throughput_ips": inputs / (wall_ns / 1e9),
            "timed_inputs": inputs,
            "timed_wall_ms": wall_ns / 1e6,
            "read_ms_per_batch": float(np.mean(read_ns)) / 1e6,
            "preprocess_ms_per_batch": float(np.mean(preprocess_ns)) / 1e6,
            "postprocess_ms_per_batch": postprocess_ns / 1e6 / len(reader),
        }

    def _time_to_target(
        self,
        target: TargetCi,
        batches: list[np.ndarray],
        durations: list[int],
        sizes: list[int],
        batch_size: int,
    ) -> int:
        """Time `batches` (the last stage's, round and round) in rounds until `target` stops
        (`predictors.evaluation.target_ci`); the wall time of the timed loops. Each round's
        calls are added to the progress total."""
        full = [d for d, n in zip(durations, sizes, strict=True) if n == batch_size]
        wall_ns = 0
        cursor = 0
        while count := target.more(full or durations, len(durations)):
            chosen = [batches[(cursor + i) % len(batches)] for i in range(count)]
            cursor = (cursor + count) % len(batches)
            self.total += count
            before = len(durations)
            with self.predictor.inference_context():
                _, wall = self._timed(
                    chosen, durations, sizes, batch_size, self.options.repeat + target.rounds - 1
                )
            wall_ns += wall
            full += [
                d
                for d, n in zip(durations[before:], sizes[before:], strict=True)
                if n == batch_size
            ]
        return wall_ns

    # -- what the first pass keeps, and its score (classification; other tasks override) ------

    def _start_collecting(self) -> None:
        self._outputs: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []
        self._predictions: list[list[tuple[int, str, float]]] = []

    def _collect(self, stage: _Staged, stage_outputs: list[Any]) -> None:
        """Postprocess a stage's outputs of the first pass, and keep them with their labels."""
        if self.custom_postprocess is not None:
            stage_outputs = [
                custom_outputs(self.custom_postprocess, outputs, len(labels))
                for outputs, labels in zip(stage_outputs, stage.labels, strict=True)
            ]
        stage_outputs = [self._read(outputs) for outputs in stage_outputs]
        for batch_outputs in stage_outputs:
            self._predictions.extend(self._postprocess(batch_outputs))
        self._outputs.extend(stage_outputs)
        self._labels.extend(stage.labels)

    def _read(self, outputs: Any) -> Any:
        """A batch of the scored output as `_score` reads it: as it is, but a binary
        classifier's one number per input, read as both labels' probabilities."""
        if self.binary:
            return probabilities(np.asarray(outputs), self.spec.output_type)
        return outputs

    def _score(self) -> tuple[dict[str, Any], int]:
        """The accuracy of what `_collect` kept, and the count of inputs; the first batch
        size's is kept (`first`)."""
        outputs = np.concatenate([o.reshape(o.shape[0], -1) for o in self._outputs]).astype(
            np.float32, copy=False
        )
        labels = np.concatenate(self._labels)
        if self.first is None:
            self.first = _FirstPass(outputs, labels, self._predictions)
        if self.binary:  # precision, recall, F1 and ROC AUC of the second label, too
            return sequence_metrics(outputs.astype(np.float64), labels), len(labels)
        return _accuracy(outputs, labels), len(labels)

    def _extras(self) -> dict[str, Any]:
        """More of a batch size's result, where a scenario has more to say (none here)."""
        return {}

    def _stages(
        self,
        reader: DatasetReader,
        preprocessor: Any,
        timings: tuple[list[int], list[int]] | None,
    ) -> Iterator[_Staged]:
        """Preprocessed batches, `stage_bytes` at a time."""
        stage = _Staged([], [])
        size = 0
        for batch, labels, values in self._preprocessed(reader, preprocessor, timings):
            stage.batches.append(batch)
            if self.keep_inputs:
                stage.images.append(values)
            stage.labels.append(labels)
            size += batch.nbytes
            if size >= self.options.stage_bytes:
                yield stage
                stage, size = _Staged([], []), 0
        if stage.batches:
            yield stage

    def _preprocessed(
        self,
        reader: Iterable[tuple[Any, np.ndarray]],
        preprocessor: Any,
        timings: tuple[list[int], list[int]] | None,
    ) -> Iterator[tuple[np.ndarray, Any, Any]]:
        """Each `(values, labels)` of `reader` as `(batch, labels, values)`, the values
        preprocessed into the batch; the reading and the preprocessing timed apart into
        `timings` (and traced as stages) when it is given."""
        iterator = iter(reader)
        perf = time.perf_counter_ns
        while True:
            start = perf()
            item = next(iterator, None)
            read = perf()
            if item is None:
                return
            values, labels = item
            if hasattr(preprocessor, "stream"):  # a clip framed into chunks and their labels
                batch, labels = preprocessor.stream(values, labels)
            else:
                batch = preprocessor.batch(values)
            done = perf()
            if timings is not None:
                timings[0].append(read - start)
                timings[1].append(done - read)
                if self.stages:
                    attributes = {"batch_size": self.batch_size, "inputs": len(labels)}
                    self.stage_span("read", start, read, attributes)
                    self.stage_span("preprocess", read, done, attributes)
            yield batch, labels, values

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

    @property
    def what(self) -> str:
        """The model as messages name it."""
        return f"{self.model.name} {self.model.version} in {self.model.framework}"

    def _check_state(self, batch: np.ndarray, after_cold: bool = False) -> None:
        """Before the warm-up: whether the model keeps a state between calls (two calls on the
        first batch), refused or reset before each call (`predictors.evaluation.state`). The
        first of its calls is the model's first: the cold call (`first_call_ns`). With
        `cold_start`, after the first batch size's timed calls instead (`after_cold`), so that
        those are the model's first."""

        def call() -> Any:
            outputs = self._predict(batch)
            if self.layers:
                self.calls.append(0)  # untimed, as a warm-up call
            if self.options.device != "cpu":
                self.predictor.synchronize()
            return outputs

        with self.predictor.inference_context():
            self.state, self._reset, first_ns = model_state.check(
                self.what,
                call,
                self.predictor.state_reset,
                "call",
                device=self.options.device,
                after_cold=after_cold,
            )
        if not after_cold:
            self.first_call_ns = first_ns

    def _warm_up(self, batches: list[np.ndarray], count: int) -> None:
        """`count` untimed calls; the first is timed apart (the cold call, `first_call_ns`)
        unless the state check made the model's first call."""
        for index in range(count):
            self._stop_if_cancelled()
            start = time.perf_counter_ns()
            self._predict(batches[index % len(batches)])
            if self.layers:
                self.calls.append(0)
            if self.options.device != "cpu":
                self.predictor.synchronize()
            if index == 0 and self.first_call_ns is None:
                self.first_call_ns = time.perf_counter_ns() - start
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
        if not self.tracing:
            # Right before the first timed call: a profiler starts here, after the warm-up.
            self.predictor.start_tracing()
            self.tracing = True
        predict = self._call
        synchronize = self.predictor.synchronize if self.options.device != "cpu" else None
        reset = self._reset  # a model that keeps a state: reset before each call, untimed
        record = self.batches
        self._stop_if_cancelled()
        stage_id = self._reserve()
        perf = time.perf_counter_ns
        marks: list[tuple[int, int]] = []
        outputs: list[np.ndarray] = []
        collecting = gc.isenabled()
        gc.disable()  # as timeit does: a collection of the loop's own garbage is no model's time
        first_index = len(durations)
        # Spans are streamed at reports, between timed calls: the time that takes is no model's.
        streamed = 0
        streaming_ns = 0
        loop_start = reported = perf()
        try:
            for batch in batches:
                if reset is not None:
                    reset()
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
                    if record and end - self.streamed_at >= _STREAM_NS:
                        self._batch_spans(
                            batches, marks, streamed, first_index, batch_size, repetition, stage_id
                        )
                        streamed = len(marks)
                        self.flush()
                        self.streamed_at = perf()
                        streaming_ns += self.streamed_at - end
        except EvaluationCancelled:
            # What was measured is kept: the stage so far and its batch spans (the caller
            # flushes them to the sink).
            if stage_id is not None:
                self.stage_span(
                    "predict",
                    loop_start,
                    perf(),
                    {
                        "batch_size": batch_size,
                        "batches": len(outputs),
                        "repetition": repetition,
                        "cancelled": True,
                    },
                    at=stage_id,
                )
            if record:
                self._batch_spans(
                    batches, marks, streamed, first_index, batch_size, repetition, stage_id
                )
            raise
        except PredictorError:
            raise
        except Exception as exc:  # a framework's own error: the model did not accept the batch
            raise self._failed(batches[len(outputs)], exc) from exc
        finally:
            if collecting:
                gc.enable()
        loop_end = perf()
        wall = loop_end - loop_start - streaming_ns
        if stage_id is not None:
            self.stage_span(
                "predict",
                loop_start,
                loop_end,
                {"batch_size": batch_size, "batches": len(batches), "repetition": repetition},
                at=stage_id,
            )
        if record:
            self._batch_spans(
                batches, marks, streamed, first_index, batch_size, repetition, stage_id
            )
        if perf() - self.streamed_at >= _STREAM_NS:
            self.flush()  # many short loops (passes, stages) stream too
        # Recorded first: a cancel that this report finds keeps them.
        self._report(len(outputs))
        self.done += len(outputs)
        sizes.extend(len(batch) for batch in batches)
        return outputs, wall

    def _batch_spans(
        self,
        batches: list[np.ndarray],
        marks: list[tuple[int, int]],
        first: int,
        first_index: int,
        batch_size: int,
        repetition: int,
        stage_id: int | None,
    ) -> None:
        """Record the batch spans of `marks[first:]` (the perf_counter start and end of each
        timed call on `batches`; `first_index`: the batch index of `marks[0]` among all the
        timed calls of the batch size)."""
        offset = self.epoch_offset_ns
        for index, (start, end) in enumerate(marks[first:], start=first):
            attributes = {
                "framework": self.model.framework,
                "model": self.model.name,
                "batch_size": batch_size,
                "inputs": len(batches[index]),
                "repetition": repetition,
                "batch_index": first_index + index,
                Attr.LEVEL: "model",
            }
            span_id = self._new_id()
            batch_span = Span(
                "predict",
                start + offset,
                end + offset,
                attributes,
                span_id=span_id,
                parent_id=stage_id or 0,
            )
            self.spans.append(batch_span)
            if self.layers:
                self.calls.append(span_id)
                self.batch_spans[span_id] = batch_span

    def add_layer_spans(self, calls: list[list[Layer]] | None) -> None:
        """Nest what the predictor traced in each timed predict call in its batch span
        (`calls`: the steps of every predict call since the last time, warm-up included, in
        call order; None where the predictor does not trace). Layers (level `framework`) are numbered in call order;
        a finer step carries the index and name of the layer it is in. A step's times are
        clipped to its batch span."""
        if not calls:
            self.calls, self.batch_spans = [], {}  # nothing traced in these calls
            return
        if len(calls) != len(self.calls):
            raise EvaluationError(
                f"the predictor traced {len(calls)} predict calls; the loop made {len(self.calls)}"
            )
        # Taken: the batch spans are not held any longer (layers may come per batch size).
        pending, self.calls = self.calls, []
        batches, self.batch_spans = self.batch_spans, {}
        device = self.options.device
        gpu = ("kernel", "memcpy", "memset")
        for batch_id, steps in zip(pending, calls, strict=True):
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
                span_id = self._new_id()
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

    def flush(self) -> None:
        """Write the spans recorded since the last flush to the sink, and forget them."""
        if not self.spans:
            return
        spans, self.spans = self.spans, []
        self.written += len(spans)
        self.level_counts.update(str(span.attributes.get(Attr.LEVEL, "")) for span in spans)
        self.sink.write(spans)
        self.streamed_at = time.perf_counter_ns()

    def _report(self, done_here: int) -> None:
        """Report progress (`done_here` predictions into the current loop); stop if cancelled."""
        if self.progress is not None:
            self.progress(self.done + done_here, self.total)
        self._stop_if_cancelled()

    def _predict(self, batch: np.ndarray) -> Any:
        try:
            if self._reset is not None:
                self._reset()
            return self._call(batch)
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
            output_type=self.read_type,  # type: ignore[arg-type]
            top_k=int(self.spec.output_parameters.get("top_k", 5)),
            labels=self.labels,
        )

    def _stop_if_cancelled(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise EvaluationCancelled("the evaluation was cancelled")
