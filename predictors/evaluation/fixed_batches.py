"""The fixed-batch closed loop: today's scenario (see `predictors.evaluation.scenario`)."""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictors.data import DatasetReader
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.sinks import SpanSink
from predictors.evaluation.summaries import _accuracy, _shown, latency_summary
from predictors.manifests import Manifest
from predictors.predictor import (
    Predictor,
    PredictorError,
)
from predictors.processing import (
    postprocess,
)
from predictors.protocol import Attr, at_least
from predictors.tracing import Layer, Span

CLOCK_HOST = "perf_counter (host wall clock)"
CLOCK_CUDA = "perf_counter after cuda synchronize"

_REPORT_NS = 50_000_000  # progress reports and cancellation checks: at most every 50 ms

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
    labels: list[np.ndarray]


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
    ) -> None:
        self.model = model
        self.sink = sink
        # Spans not yet written to the sink; ids count on from those written.
        self.written = 0
        self.level_counts: Counter[str] = Counter()
        # The batch spans, by id, that the predictor's layers will be nested in.
        self.batch_spans: dict[int, Span] = {}
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
        span id (0 when stages are not traced). `at` fills a slot reserved by `_reserve`."""
        if not self.stages:
            return 0
        offset = self.epoch_offset_ns
        span_id = self.written + (at + 1 if at is not None else len(self.spans) + 1)
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
        if not self.tracing:
            # Right before the first timed call: a profiler starts here, after the warm-up.
            self.predictor.start_tracing()
            self.tracing = True
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
                span_id = self.written + len(self.spans) + 1
                batch_span = Span(
                    "predict",
                    start + offset,
                    end + offset,
                    attributes,
                    span_id=span_id,
                    parent_id=stage_id,
                )
                self.spans.append(batch_span)
                if self.layers:
                    self.calls.append(span_id)
                    self.batch_spans[span_id] = batch_span
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
        batches = self.batch_spans
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
                span_id = self.written + len(self.spans) + 1
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
