"""The fixed-batch closed loop: the scenario of classification, and the loop the other
scenarios of staged batches build on (`predictors.evaluation` describes its steps).

For each batch size: the split read and preprocessed into stages of `stage_bytes`, the model's
input and state checked on the first batch, `warmup` untimed calls, each staged batch timed back
to back, `repeat` times (and on toward `target_ci`), the first pass's outputs postprocessed and
scored (top-1 and top-5; a binary classifier's precision, recall, F1 and ROC AUC too).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from predictors import statistics
from predictors.analysis.hygiene import batch_size_warnings
from predictors.data import DatasetReader, target_of
from predictors.evaluation.base import FirstPass, Prediction, Scenario, Setup, Staged, Windowed
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.scenario import DEFAULT, register
from predictors.evaluation.summaries import sequence_metrics, shown, top_accuracy
from predictors.evaluation.target_ci import TargetCi
from predictors.frameworks.predictor import PredictorError
from predictors.processing import ImagePreprocessor, ProcessingError, postprocess
from predictors.processing.custom_code import custom_outputs
from predictors.processing.frames import pool_frames
from predictors.tasks import input_columns

_REPORT_NS = 50_000_000  # progress reports and cancellation checks: at most every 50 ms
# While a batch size runs, its batch spans go to the sink at least this often (at a report,
# between two timed calls; the time it takes is not counted in the loop's wall time).
_STREAM_NS = 1_000_000_000


def full_batches(durations: list[int], sizes: list[int], batch_size: int) -> list[int]:
    """The durations of the full batches (`sizes`: each batch's inputs)."""
    return [d for d, n in zip(durations, sizes, strict=True) if n == batch_size]


def latency_summary(
    batch_size: int, durations: list[int], sizes: list[int], target: TargetCi | None
) -> dict[str, Any]:
    """A batch size's latency statistics and hygiene warnings, of its full batches only (a
    split smaller than one batch has none, and is timed as is), and how `target_ci` went."""
    full = full_batches(durations, sizes, batch_size)
    return {
        "latency": statistics.latency(full or durations, samples=True),
        "latency_batches": "full" if full else "partial",
        **({"target_ci": target.report()} if target is not None else {}),
        "hygiene": batch_size_warnings(batch_size, full or durations),
    }


@register(DEFAULT, tasks=("image_classification",))
class FixedBatches(Scenario):
    """The fixed-batch closed loop: for each batch size, staged batches timed back to back,
    `repeat` times (state shared across batch sizes)."""

    @classmethod
    def readers(cls, setup: Setup) -> tuple[list[Any], int]:
        options = setup.options
        readers = [cls.reader(setup, size) for size in options.batch_sizes]
        return readers, sum(options.warmup + options.repeat * len(reader) for reader in readers)

    @classmethod
    def reader(cls, setup: Setup, batch_size: int) -> Any:
        """The split read in batches of `batch_size`, with the targets the task scores."""
        target = cls.target(setup)
        return DatasetReader(
            setup.split_file,
            batch_size,
            limit=setup.options.limit,
            target=target,
            classes=len(setup.labels) if target != "class" else None,
            columns=input_columns(setup.model.data),
        )

    @classmethod
    def target(cls, setup: Setup) -> str:
        """The targets the split's rows carry for the task (`predictors.data.TARGETS`)."""
        return target_of(setup.model.task)

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
        self.start_collecting()
        postprocess_ns = 0
        reused: list[Staged] | None = None
        warm = options.warmup
        self.first_call_ns: int | None = None
        for repetition in range(options.repeat):
            stages: Iterator[Staged] | list[Staged]
            if reused is not None:
                stages = reused
            else:
                timings = (read_ns, preprocess_ns) if repetition == 0 else None
                stages = self.staged(reader, preprocessor, timings)
            # A pass that fits in one stage is staged once; holding more would defeat the
            # bound of `stage_bytes`.
            staged = 0
            for stage in stages:
                staged += 1
                if repetition == 0:
                    reused = [stage] if staged == 1 else None
                if not self.checked:
                    self.check_input(stage.batches[0])
                    self.sample = stage.batches[0]
                    if not options.cold_start:  # else after the cold calls, below
                        self.check_state(stage.batches[0])
                with self.predictor.inference_context():
                    if warm:
                        warm_start = time.perf_counter_ns()
                        self.warm_up(stage.batches, warm)
                        self.stage_span(
                            "warm-up",
                            warm_start,
                            time.perf_counter_ns(),
                            {"batch_size": batch_size, "predictions": warm},
                        )
                        warm = 0
                    stage_outputs, stage_wall = self.timed(
                        stage.batches, durations, sizes, batch_size, repetition, stage.inputs
                    )
                wall_ns += stage_wall
                if repetition == 0:
                    start = time.perf_counter_ns()
                    self.collect(stage, stage_outputs)
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
            wall_ns += self.time_to_target(target, stage, durations, sizes, batch_size)
        if self.state is None and self.sample is not None:
            self.check_state(self.sample, after_cold=True)
        accuracy, count = self.score()

        inputs = sum(sizes)
        return {
            "batch_size": batch_size,
            "batches": len(reader),
            "inputs": count,
            "warmup": options.warmup,
            "repeat": options.repeat,
            "accuracy": accuracy,
            **self.extras(),
            **latency_summary(batch_size, durations, sizes, target),
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

    def time_to_target(
        self,
        target: TargetCi,
        stage: Staged,
        durations: list[int],
        sizes: list[int],
        batch_size: int,
    ) -> int:
        """Time the last stage's batches, round and round, in rounds until `target` stops
        (`predictors.evaluation.target_ci`); the wall time of the timed loops. Each round's
        calls are added to the progress total."""
        full = full_batches(durations, sizes, batch_size)
        wall_ns = 0
        cursor = 0
        batches = stage.batches
        while count := target.more(full or durations, len(durations)):
            picked = [(cursor + i) % len(batches) for i in range(count)]
            chosen = [batches[index] for index in picked]
            cursor = (cursor + count) % len(batches)
            self.total += count
            before = len(durations)
            with self.predictor.inference_context():
                _, wall = self.timed(
                    chosen,
                    durations,
                    sizes,
                    batch_size,
                    self.options.repeat + target.rounds - 1,
                    [stage.inputs[index] for index in picked],
                )
            wall_ns += wall
            full += full_batches(durations[before:], sizes[before:], batch_size)
        return wall_ns

    # -- what the first pass keeps, and its score (classification; other tasks override) ------

    def start_collecting(self) -> None:
        self.collected_outputs: list[np.ndarray] = []
        self.collected_labels: list[np.ndarray] = []
        self.collected_predictions: list[Sequence[Prediction]] = []

    def collect(self, stage: Staged, stage_outputs: list[Any]) -> None:
        """Postprocess a stage's outputs of the first pass, and keep them with their labels."""
        pairs = [
            self.per_input(outputs, labels)
            for outputs, labels in zip(stage_outputs, stage.labels, strict=True)
        ]
        read = [self.read(outputs) for outputs, _ in pairs]
        for batch_outputs in read:
            self.collected_predictions.extend(self.postprocess_batch(batch_outputs))
        self.collected_outputs.extend(read)
        self.collected_labels.extend(labels for _, labels in pairs)

    def per_input(self, outputs: Any, labels: Any) -> tuple[Any, Any]:
        """A batch's outputs and labels, an output per input: its frames pooled (the output
        parameter `frames`), through the manifest's `postprocess` code (one row per row of the
        batch), and, where each input was cut into
        windows (`Windowed`), its windows' rows combined into its own."""
        windowed = isinstance(labels, Windowed)
        frames = self.spec.output_parameters.get("frames")
        if frames:
            try:
                outputs = pool_frames(outputs, frames)
            except ProcessingError as error:
                raise EvaluationError(f"{self.what}'s output: {error}") from error
        if self.custom_postprocess is not None:
            rows = sum(labels.counts) if windowed else len(labels)
            outputs = custom_outputs(self.custom_postprocess, outputs, rows)
        if windowed:
            try:
                outputs = self.setup.preprocessor.windowing.combined(
                    np.asarray(outputs), labels.counts
                )
            except ProcessingError as error:
                raise EvaluationError(f"{self.what}: {error}") from error
            labels = labels.labels
        return outputs, labels

    def score(self) -> tuple[dict[str, Any], int]:
        """The accuracy of what `collect` kept, and the count of inputs; the first batch
        size's is kept (`first`)."""
        outputs = np.concatenate(
            [o.reshape(o.shape[0], -1) for o in self.collected_outputs]
        ).astype(np.float32, copy=False)
        labels = np.concatenate(self.collected_labels)
        if self.first is None:
            self.first = FirstPass(outputs, labels, self.collected_predictions)
        if self.binary:  # precision, recall, F1 and ROC AUC of the second label, too
            return sequence_metrics(outputs.astype(np.float64), labels), len(labels)
        return top_accuracy(outputs, labels), len(labels)

    def extras(self) -> dict[str, Any]:
        """More of a batch size's result, where a scenario has more to say (none here)."""
        return {}

    def staged(
        self,
        reader: DatasetReader,
        preprocessor: Any,
        timings: tuple[list[int], list[int]] | None,
    ) -> Iterator[Staged]:
        """Preprocessed batches, `stage_bytes` at a time."""
        stage = Staged([], [])
        size = 0
        for batch, labels, values in self.preprocessed(reader, preprocessor, timings):
            stage.batches.append(batch)
            if self.keep_inputs:
                stage.images.append(values)
            stage.labels.append(labels)
            stage.inputs.append(len(labels))
            size += batch.nbytes
            if size >= self.options.stage_bytes:
                yield stage
                stage, size = Staged([], []), 0
        if stage.batches:
            yield stage

    def check_input(self, batch: np.ndarray) -> None:
        """Compare the first batch with the model's input, where the framework records it."""
        self.checked = True
        expected = self.predictor.expected_input()
        if expected is None:
            return
        shape, element_type = expected
        parameters = self.spec.input.get("parameters") or {}
        what = self.what
        fits = len(shape) == batch.ndim and all(
            d is None or d == n for d, n in zip(shape, batch.shape, strict=False)
        )
        if not fits:
            shape_text = "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"
            if (
                shape
                and shape[0] is not None
                and len(shape) == batch.ndim
                and all(
                    d is None or d == n for d, n in zip(shape[1:], batch.shape[1:], strict=True)
                )
            ):
                raise PredictorError(
                    f"{what} takes batches of exactly {shape[0]} (input shape {shape_text}); "
                    f"use batch size {shape[0]}"
                )
            hints = ", ".join(
                f"{key} {shown(parameters[key])}"
                for key in ("layout", "color_mode", "resize_size", "crop_size")
                if key in parameters
            )
            raise PredictorError(
                f"{what} takes input of shape {shape_text}, but the preprocessing gives "
                f"{tuple(batch.shape)}: check the input parameters ({hints})"
            )
        if str(batch.dtype) != element_type:
            raise PredictorError(
                f"{what} takes {element_type} input, but the preprocessing gives {batch.dtype}: "
                f"check the input parameter element_type ({parameters.get('element_type')})"
            )

    def check_state(self, batch: np.ndarray, after_cold: bool = False) -> None:
        """Before the warm-up: whether the model keeps a state between calls (two calls on the
        first batch), refused or reset before each call (`predictors.evaluation.state`). The
        first of its calls is the model's first: the cold call (`first_call_ns`). With
        `cold_start`, after the first batch size's timed calls instead (`after_cold`), so that
        those are the model's first."""

        def call() -> Any:
            outputs = self.predict(batch)
            if self.layers:
                self.calls.append(0)  # untimed, as a warm-up call
            if self.options.device != "cpu":
                self.predictor.synchronize()
            return outputs

        first_ns = self.judge_state(call, "call", after_cold)
        if not after_cold:
            self.first_call_ns = first_ns

    def warm_up(self, batches: list[np.ndarray], count: int) -> None:
        """`count` untimed calls; the first is timed apart (the cold call, `first_call_ns`)
        unless the state check made the model's first call."""
        for index in range(count):
            self.stop_if_cancelled()
            start = time.perf_counter_ns()
            self.predict(batches[index % len(batches)])
            if self.layers:
                self.calls.append(0)
            if self.options.device != "cpu":
                self.predictor.synchronize()
            if index == 0 and self.first_call_ns is None:
                self.first_call_ns = time.perf_counter_ns() - start
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, self.total)

    def timed(
        self,
        batches: list[np.ndarray],
        durations: list[int],
        sizes: list[int],
        batch_size: int,
        repetition: int,
        inputs: list[int],
    ) -> tuple[list[np.ndarray], int]:
        """Time `predict` on each batch (of `inputs` inputs each); the outputs, and the wall
        time of the whole loop.

        Progress is reported, and cancellation checked, at most every `_REPORT_NS` (and after
        the last batch), so that a caller's callbacks add nothing measurable to a fast model.
        """
        if not self.tracing:
            # Right before the first timed call: a profiler starts here, after the warm-up.
            self.predictor.start_tracing()
            self.tracing = True
        predict = self.call
        synchronize = self.predictor.synchronize if self.options.device != "cpu" else None
        reset = self.reset  # a model that keeps a state: reset before each call, untimed
        record = self.batches
        self.stop_if_cancelled()
        stage_id = self.reserve()
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
                    self.report(len(outputs))
                    if record and end - self.streamed_at >= _STREAM_NS:
                        self.add_batch_spans(
                            batches,
                            marks,
                            streamed,
                            first_index,
                            batch_size,
                            repetition,
                            stage_id,
                            inputs,
                        )
                        streamed = len(marks)
                        self.flush()
                        self.streamed_at = perf()
                        streaming_ns += self.streamed_at - end
        except EvaluationCancelled:
            # What was measured is kept: the stage so far and its batch spans (the caller
            # flushes them to the sink).
            self.predict_stage(
                stage_id,
                loop_start,
                perf(),
                {
                    "batch_size": batch_size,
                    "batches": len(outputs),
                    "repetition": repetition,
                    "cancelled": True,
                },
            )
            if record:
                self.add_batch_spans(
                    batches, marks, streamed, first_index, batch_size, repetition, stage_id, inputs
                )
            raise
        except PredictorError:
            raise
        except Exception as exc:  # a framework's own error: the model did not accept the batch
            raise self.failed(batches[len(outputs)], exc) from exc
        finally:
            if collecting:
                gc.enable()
        loop_end = perf()
        wall = loop_end - loop_start - streaming_ns
        self.predict_stage(
            stage_id,
            loop_start,
            loop_end,
            {"batch_size": batch_size, "batches": len(batches), "repetition": repetition},
        )
        if record:
            self.add_batch_spans(
                batches, marks, streamed, first_index, batch_size, repetition, stage_id, inputs
            )
        if perf() - self.streamed_at >= _STREAM_NS:
            self.flush()  # many short loops (passes, stages) stream too
        # Recorded first: a cancel that this report finds keeps them.
        self.report(len(outputs))
        self.done += len(outputs)
        sizes.extend(inputs)
        return outputs, wall

    def postprocess_batch(self, outputs: np.ndarray) -> list[list[tuple[int, str, float]]]:
        return postprocess(
            outputs,
            output_type=self.read_type,  # type: ignore[arg-type]
            top_k=int(self.spec.output_parameters.get("top_k", 5)),
            labels=self.labels,
        )


class PerImage(FixedBatches):
    """The base of the scenarios that score each image in its own pixels (detection,
    segmentation): the model's input is an image, the encoded images are kept to map the
    outputs back to them, and the trace goes down to each call."""

    finest_trace_level = "model"
    reader_type: ClassVar[Callable[..., Any]]  # the split's reader, with its targets

    @classmethod
    def reader(cls, setup: Setup, batch_size: int) -> Any:
        return cls.reader_type(setup.split_file, batch_size, limit=setup.options.limit)

    def configure(self) -> None:
        preprocessor = self.setup.preprocessor
        if not isinstance(preprocessor, ImagePreprocessor):
            task = str(self.model.task)
            article = "an" if task[:1] in "aeiou" else "a"
            raise EvaluationError(f"{article} {task} model's input is an image")
        self.preprocessor = preprocessor
        self.keep_inputs = True

    def classes(self) -> int:
        return len(self.labels)
