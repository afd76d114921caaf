"""Ordered streams, side by side: the scenario of sequence-labelling models (task
`sequence_labelling`), stateful or not.

A split of such a dataset is a set of streams (`predictors.data.StreamReader`), each a
sequence of inputs with one label per input: the chunks of an audio clip, the frames of a
video. The model is called once per step, on one input of each of `batch_size` streams side by
side (one stream per batch row, *slot*); a slot whose stream ends takes the next stream at the
next step, so a call holds fewer rows only at the end of the split. Every call gets:

- the data input: the step's input of every stream, preprocessed as the manifest says;
- every constant input, as its manifest value (not batched);
- every state input: for each stream, its `initial` value at the stream's first step, and the
  value its `from_output` returned for the same stream at the step before; the streams' states
  are stacked on the state's `batch_axis`.

The loop is `FixedBatches`' (warm-up, timed calls back to back, repetitions, spans, progress,
cancellation), with these differences:

- a *stage* holds whole streams, preprocessed, up to `stage_bytes`; between two calls the loop
  only stacks the step's rows and states, which is counted in the wall time (throughput) but
  not in any call's latency;
- the warm-up calls run the first steps of the first streams, and are discarded;
- for a model with state inputs, a second pass at the first batch size resets every state to
  its initial value at every call: the accuracy the model would have if it could not carry its
  state (`accuracy_state_reset`), next to the accuracy with the state carried (`accuracy`).

Accuracy, precision, recall, F1 and ROC AUC of the labels are scikit-learn's
(`summaries.sequence_metrics`). The scored output may be logits, probabilities, or a binary
output (`binary_probability`, `binary_logit`: one number per input, read as the probability of
the second label); the outputs kept for comparisons are the probabilities of every class.
Traces: the pipeline's stages and one span per timed call (levels application and model);
a finer trace level is refused before the model loads.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictors.custom_code import custom_outputs
from predictors.data import StreamReader, lockstep_calls
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.fixed_batches import FixedBatches, _FirstPass
from predictors.evaluation.summaries import latency_summary, sequence_metrics
from predictors.manifests import Manifest
from predictors.predictor import PredictorError
from predictors.processing import ELEMENT_TYPES, postprocess
from predictors.protocol import DATA_INPUTS, at_least

# The finest trace level of this scenario (layers inside the calls are not traced yet).
FINEST_TRACE_LEVEL = "model"


@dataclass(frozen=True)
class _State:
    name: str
    shape: tuple[int, ...]  # one stream's, without the batch axis
    axis: int
    initial: np.ndarray  # one stream's initial value
    source: str  # the output that carries it


@dataclass(frozen=True)
class Ports:
    """A model's inputs and outputs as the streaming loop feeds and reads them."""

    data: str
    constants: dict[str, np.ndarray]
    states: tuple[_State, ...]
    scored: str
    scored_type: str
    output_axes: dict[str, int]
    context: int = 0  # the data input's context window (values of the input before)

    @property
    def outputs(self) -> list[str]:
        return [self.scored, *(state.source for state in self.states)]


def ports(model: Manifest) -> Ports:
    """The model's ports (its manifest, checked by the schema and `unsupported`)."""
    data = ""
    context = 0
    constants: dict[str, np.ndarray] = {}
    states: list[_State] = []
    for entry in model.data["inputs"]:
        parameters = entry.get("parameters") or {}
        kind = entry["type"]
        if kind in DATA_INPUTS:
            if not data:
                data = str(entry["name"])
                context = int(parameters.get("context") or 0)
            continue
        dtype = ELEMENT_TYPES[parameters["element_type"]]
        if kind == "constant":
            constants[str(entry["name"])] = np.asarray(parameters["value"], dtype=dtype)
        elif kind == "state":
            shape = tuple(int(d) for d in parameters["shape"])
            states.append(
                _State(
                    str(entry["name"]),
                    shape,
                    int(parameters["batch_axis"]),
                    np.full(shape, parameters["initial"], dtype=dtype),
                    str(parameters["from_output"]),
                )
            )
    scored = next(o for o in model.data["outputs"] if o["type"] != "state")
    axes = {
        str(o["name"]): int((o.get("parameters") or {}).get("batch_axis", 0))
        for o in model.data["outputs"]
        if o["type"] == "state"
    }
    return Ports(data, constants, tuple(states), str(scored["name"]), scored["type"], axes, context)


def with_context(inputs: np.ndarray, size: int) -> np.ndarray:
    """A stream's inputs (length, …, n), each with the last `size` values of the input before
    it (zeros for the first) put in front on the last axis: (length, …, size + n)."""
    if inputs.shape[-1] < size:
        raise EvaluationError(
            f"the inputs have {inputs.shape[-1]} values on their last axis, fewer than the "
            f"context window of {size} (parameters.context)"
        )
    before = np.zeros_like(inputs[..., -size:])
    before[1:] = inputs[:-1, ..., -size:]
    return np.concatenate([before, inputs], axis=-1)


def check_trace_level(level: str, task: str = "sequence_labelling") -> None:
    """Refuse a trace level finer than the scenarios of several inputs or outputs record."""
    if at_least(level, "framework"):
        raise EvaluationError(
            f"trace level {level}: {task} models are traced down to "
            f"{FINEST_TRACE_LEVEL} (each call); layers inside the calls are not traced yet, "
            f"so ask for {FINEST_TRACE_LEVEL} or coarser"
        )


def probabilities(scores: np.ndarray, output_type: str) -> np.ndarray:
    """The probability of every class, (N, classes), from a batch of the scored output."""
    scores = scores.reshape(scores.shape[0], -1).astype(np.float64)
    if output_type in ("binary_probability", "binary_logit"):
        if scores.shape[1] != 1:
            raise EvaluationError(
                f"a {output_type} output gives one number per input; this one gives "
                f"{scores.shape[1]}"
            )
        positive = scores[:, 0]
        if output_type == "binary_logit":
            positive = 1.0 / (1.0 + np.exp(-positive))
        return np.stack([1.0 - positive, positive], axis=1)
    if output_type == "logits":
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    return scores


class _InContext:
    """A preprocessor whose batch (one whole stream) gets its context window."""

    def __init__(self, preprocessor: Any, size: int) -> None:
        self.preprocessor, self.size = preprocessor, size

    def batch(self, values: Any) -> np.ndarray:
        return with_context(self.preprocessor.batch(values), self.size)


@dataclass
class _Slot:
    stream: int  # the stream's index in the split
    row: int  # the split row of its first input
    inputs: np.ndarray  # (length, ...) preprocessed
    labels: np.ndarray
    step: int
    states: list[np.ndarray]


@dataclass
class _StreamStage:
    first: int  # the index of its first stream in the split
    row: int  # the split row of its first input
    inputs: list[np.ndarray]
    labels: list[np.ndarray]


class Streams(FixedBatches):
    """The streaming scenario (a `Scenario`); see the module docstring."""

    def configure(self, ports: Ports) -> None:
        self.ports = ports
        self.reset_result: dict[str, Any] | None = None

    def run(self, reader: Any, preprocessor: Any) -> dict[str, Any]:
        assert isinstance(reader, StreamReader)
        options = self.options
        width = reader.batch_size
        self.batch_size = width
        read_ns: list[int] = []
        preprocess_ns: list[int] = []
        durations: list[int] = []
        sizes: list[int] = []
        wall_ns = 0
        scores: np.ndarray | None = None
        kept_labels: list[np.ndarray] = []
        reused: list[_StreamStage] | None = None
        warm = options.warmup
        for repetition in range(options.repeat):
            if reused is not None:
                stages: Any = reused
            else:
                timings = (read_ns, preprocess_ns) if repetition == 0 else None
                stages = self._stream_stages(reader, preprocessor, timings)
            staged = 0
            for stage in stages:
                staged += 1
                if repetition == 0:
                    reused = [stage] if staged == 1 else None
                if warm:
                    start = time.perf_counter_ns()
                    with self.predictor.inference_context():
                        self._lockstep(stage, width, None, None, carry=True, limit=warm)
                    self.stage_span(
                        "warm-up",
                        start,
                        time.perf_counter_ns(),
                        {"batch_size": width, "predictions": warm},
                    )
                    warm = 0
                stage_scores, stage_wall = self._timed_stage(
                    stage, width, durations, sizes, repetition
                )
                wall_ns += stage_wall
                if repetition == 0:
                    kept_labels.extend(stage.labels)
                    scores = (
                        stage_scores if scores is None else np.concatenate([scores, stage_scores])
                    )
        assert scores is not None
        labels = np.concatenate(kept_labels)
        start = time.perf_counter_ns()
        probabilities_ = self._probabilities(scores, len(labels))
        predictions = postprocess(
            probabilities_.astype(np.float32),
            output_type="probabilities",
            top_k=int(self.spec.output_parameters.get("top_k", 5)),
            labels=self.labels,
        )
        end = time.perf_counter_ns()
        self.stage_span("postprocess", start, end, {"batch_size": width, "inputs": len(labels)})
        metrics = sequence_metrics(probabilities_, labels)
        if self.first is None:
            self.first = _FirstPass(probabilities_.astype(np.float32), labels, predictions)
            if self.ports.states:
                self.reset_result = self._reset_pass(reader, preprocessor, width, labels)
        full = [d for d, n in zip(durations, sizes, strict=True) if n == width]
        inputs = sum(sizes)
        calls = lockstep_calls(reader.lengths, width)
        result = {
            "batch_size": width,
            "batches": calls,
            "streams": reader.streams,
            "inputs": len(labels),
            "warmup": options.warmup,
            "repeat": options.repeat,
            "accuracy": metrics,
            "latency": latency_summary(full or durations),
            "latency_batches": "full" if full else "partial",
            "throughput_ips": inputs / (wall_ns / 1e9),
            "timed_inputs": inputs,
            "timed_wall_ms": wall_ns / 1e6,
            "read_ms_per_batch": float(np.sum(read_ns)) / 1e6 / calls,
            "preprocess_ms_per_batch": float(np.sum(preprocess_ns)) / 1e6 / calls,
            "postprocess_ms_per_batch": (end - start) / 1e6 / calls,
        }
        if self.reset_result is not None and width == self.options.batch_sizes[0]:
            result["accuracy_state_reset"] = self.reset_result
        return result

    def _probabilities(self, scores: np.ndarray, count: int) -> np.ndarray:
        if self.custom_postprocess is not None:
            scores = custom_outputs(self.custom_postprocess, scores, count)
        return probabilities(scores, self.ports.scored_type)

    def _stream_stages(
        self, reader: StreamReader, preprocessor: Any, timings: tuple[list[int], list[int]] | None
    ) -> Any:
        """Whole streams, preprocessed, up to `stage_bytes` at a time."""
        stage = _StreamStage(0, 0, [], [])
        size = 0
        index = row = 0
        if self.ports.context:
            preprocessor = _InContext(preprocessor, self.ports.context)
        for batch, labels, _ in self._preprocessed(reader, preprocessor, timings):
            stage.inputs.append(batch)
            stage.labels.append(labels)
            size += batch.nbytes
            index += 1
            row += len(labels)
            if size >= self.options.stage_bytes:
                yield stage
                stage, size = _StreamStage(index, row, [], []), 0
        if stage.labels:
            yield stage

    def _timed_stage(
        self,
        stage: _StreamStage,
        width: int,
        durations: list[int],
        sizes: list[int],
        repetition: int,
    ) -> tuple[np.ndarray, int]:
        if not self.tracing:
            self.predictor.start_tracing()
            self.tracing = True
        self._stop_if_cancelled()
        stage_id = self._reserve()
        marks: list[tuple[int, int]] = []
        first_index = len(durations)
        collecting = gc.isenabled()
        gc.disable()
        loop_start = time.perf_counter_ns()
        try:
            with self.predictor.inference_context():
                scores = self._lockstep(stage, width, durations, sizes, carry=True, marks=marks)
        except EvaluationCancelled:
            if stage_id is not None:
                self.stage_span(
                    "predict",
                    loop_start,
                    time.perf_counter_ns(),
                    {"batch_size": width, "repetition": repetition, "cancelled": True},
                    at=stage_id,
                )
            self._call_spans(marks, sizes, first_index, width, repetition, stage_id)
            raise
        finally:
            if collecting:
                gc.enable()
        loop_end = time.perf_counter_ns()
        if stage_id is not None:
            self.stage_span(
                "predict",
                loop_start,
                loop_end,
                {"batch_size": width, "batches": len(marks), "repetition": repetition},
                at=stage_id,
            )
        self._call_spans(marks, sizes, first_index, width, repetition, stage_id)
        return scores, loop_end - loop_start

    def _call_spans(
        self,
        marks: list[tuple[int, int]],
        sizes: list[int],
        first_index: int,
        width: int,
        repetition: int,
        stage_id: int | None,
    ) -> None:
        if not self.batches or not marks:
            return
        rows = [np.empty(n) for n in sizes[first_index : first_index + len(marks)]]
        self._batch_spans(rows, marks, 0, first_index, width, repetition, stage_id)  # type: ignore[arg-type]

    def _reset_pass(
        self, reader: StreamReader, preprocessor: Any, width: int, labels: np.ndarray
    ) -> dict[str, Any]:
        """The accuracy with every state reset to its initial value at every call (untimed)."""
        start = time.perf_counter_ns()
        parts = []
        with self.predictor.inference_context():
            for stage in self._stream_stages(reader, preprocessor, None):
                parts.append(self._lockstep(stage, width, None, None, carry=False))
        scores = np.concatenate(parts)
        self.stage_span("state-reset pass", start, time.perf_counter_ns(), {"batch_size": width})
        return sequence_metrics(self._probabilities(scores, len(labels)), labels)

    def _lockstep(
        self,
        stage: _StreamStage,
        width: int,
        durations: list[int] | None,
        sizes: list[int] | None,
        *,
        carry: bool,
        limit: int | None = None,
        marks: list[tuple[int, int]] | None = None,
    ) -> np.ndarray:
        """Run the stage's streams side by side, `width` at a time; the scored output of every
        input, in split order. Timed (each call into `durations`, its rows into `sizes`) when
        `durations` is given; `limit` calls at most (the warm-up)."""
        ports = self.ports
        states = ports.states
        names = ports.outputs
        run = self.predictor.run
        perf = time.perf_counter_ns
        synchronize = self.predictor.synchronize if self.options.device != "cpu" else None
        pending = iter(range(len(stage.labels)))
        row = stage.row
        slots: list[_Slot | None] = [None] * width
        total = sum(len(labels) for labels in stage.labels)
        scored: np.ndarray | None = None
        calls = 0
        reported = perf()
        while True:
            for index in range(width):
                if slots[index] is None:
                    taken = next(pending, None)
                    if taken is not None:
                        labels = stage.labels[taken]
                        slots[index] = _Slot(
                            taken,
                            row,
                            stage.inputs[taken],
                            labels,
                            0,
                            [state.initial for state in states],
                        )
                        row += len(labels)
            active = [slot for slot in slots if slot is not None]
            if not active or (limit is not None and calls >= limit):
                break
            feeds = dict(ports.constants)
            feeds[ports.data] = np.stack([slot.inputs[slot.step] for slot in active])
            for number, state in enumerate(states):
                feeds[state.name] = np.stack([slot.states[number] for slot in active], state.axis)
            try:
                start = perf()
                outputs = run(feeds, names)
                if synchronize is not None:
                    synchronize()
                end = perf()
            except PredictorError:
                raise
            except Exception as exc:  # the framework's own: the model did not take the call
                raise self._failed(feeds[ports.data], exc) from exc
            calls += 1
            if durations is not None and sizes is not None:
                durations.append(end - start)
                sizes.append(len(active))
                if marks is not None and self.batches:
                    marks.append((start, end))
            batch_scores = outputs[0].reshape(len(active), -1)
            if scored is None:
                scored = np.empty((total, batch_scores.shape[1]), dtype=batch_scores.dtype)
            for number, slot in enumerate(active):
                scored[slot.row - stage.row + slot.step] = batch_scores[number]
            for position, state in enumerate(states, start=1):
                value = outputs[position]
                if value.shape[state.axis] != len(active):
                    raise EvaluationError(
                        f"state output {state.source} has {value.shape[state.axis]} rows on its "
                        f"batch axis {state.axis} for {len(active)} streams: check batch_axis"
                    )
                if carry:
                    for number, slot in enumerate(active):
                        slot.states[position - 1] = np.take(value, number, axis=state.axis)
            for index, held in enumerate(slots):
                if held is not None:
                    held.step += 1
                    if held.step == len(held.labels):
                        slots[index] = None
            self.done += 1
            if end - reported >= 50_000_000:
                reported = end
                self._report(0)
        if scored is None:
            raise EvaluationError("the stage holds no input")
        self._report(0)
        return scored
