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

- streams are preprocessed whole; when the split fits in `stage_bytes` they are held and every
  pass reuses them, else each pass reads and preprocesses them again, a stream at a time, as
  slots free up. The time spent taking streams between two calls is not counted in the wall
  time (throughput); stacking the step's rows and states is (the loop's own bookkeeping), and
  neither is in any call's latency;
- the warm-up calls run the first steps of the first streams (going round again when the split
  has fewer calls), and are discarded;
- for a model with state inputs, a second pass at the first batch size resets every state to
  its initial value at every call: the accuracy the model would have if it could not carry its
  state (`accuracy_state_reset`), next to the accuracy with the state carried (`accuracy`);
- a model that keeps a state inside itself (`predictors.evaluation.state`, checked on the first
  call before the warm-up) is refused, or, where its module offers a reset, reset before each
  stream's first call, one stream per call (its reset concerns every row of a call at once).

Accuracy, precision, recall, F1 and ROC AUC of the labels are scikit-learn's
(`summaries.sequence_metrics`). The scored output may be logits, probabilities, or a binary
output (`binary_probability`, `binary_logit`: one number per input, read as the probability of
the second label); the outputs kept for comparisons are the probabilities of every class.
Traces: the pipeline's stages and one span per timed call (levels application and model);
a finer trace level is refused before the model loads.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictors.data import ClipStreams, StreamReader, lockstep_calls
from predictors.evaluation.base import FirstPass, Scenario, Setup
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import full_batches, latency_summary
from predictors.evaluation.summaries import probabilities, sequence_metrics
from predictors.evaluation.target_ci import TargetCi
from predictors.frameworks.predictor import PredictorError
from predictors.manifests import Manifest
from predictors.processing import ELEMENT_TYPES, postprocess, preprocessor_for
from predictors.processing.audio import AudioPreprocessor
from predictors.processing.custom_code import custom_outputs
from predictors.tasks import DATA_INPUTS, named_outputs


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
    # The outputs custom postprocess takes by name (`custom_code.named_outputs`), the scored
    # one first; none: the scored output alone is read.
    named: tuple[str, ...] = ()

    @property
    def read(self) -> list[str]:
        """The outputs read for every input (the state outputs are carried, not read)."""
        return list(self.named) or [self.scored]

    @property
    def outputs(self) -> list[str]:
        return [*self.read, *(state.source for state in self.states)]


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
    named = tuple(named_outputs(model.data))
    return Ports(
        data, constants, tuple(states), str(scored["name"]), scored["type"], axes, context, named
    )


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


class _InContext:
    """A preprocessor whose batch (one whole stream) gets its context window."""

    def __init__(self, preprocessor: Any, size: int) -> None:
        self.preprocessor, self.size = preprocessor, size
        if hasattr(preprocessor, "stream"):  # clips framed into chunks: framed, then in context
            self.stream = self._stream

    def batch(self, values: Any) -> np.ndarray:
        return with_context(self.preprocessor.batch(values), self.size)

    def _stream(self, values: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
        """A clip framed into chunks (`predictors.processing.audio`), each with its context."""
        chunks, chunk_labels = self.preprocessor.stream(values, labels)
        return with_context(chunks, self.size), chunk_labels


@dataclass
class _Slot:
    row: int  # the split row of its stream's first input
    inputs: np.ndarray  # (length, ...) preprocessed
    length: int
    step: int
    states: list[np.ndarray]


Source = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]
"""`source()`: the split's streams in order, `(inputs, labels)` each, inputs preprocessed."""


@register("streams", tasks=("sequence_labelling",))
class Streams(Scenario):
    """The streaming scenario; see the module docstring."""

    # Layers inside the calls are not traced yet.
    finest_trace_level = "model"

    @classmethod
    def readers(cls, setup: Setup) -> tuple[list[Any], int]:
        options = setup.options
        states = ports(setup.model).states
        stream_reader: Any
        if setup.spec.input.get("type") == "audio":
            framer = preprocessor_for(setup.spec.input)
            assert isinstance(framer, AudioPreprocessor)
            stream_reader = ClipStreams(setup.split_file, framer, limit=options.limit)
        else:
            stream_reader = StreamReader(setup.split_file, limit=options.limit)
        readers = [stream_reader.with_batch_size(size) for size in options.batch_sizes]
        calls = [lockstep_calls(stream_reader.lengths, size) for size in options.batch_sizes]
        # The state-reset pass, at the first batch size.
        total = sum(options.warmup + options.repeat * n for n in calls)
        return readers, total + (calls[0] if states else 0)

    def configure(self) -> None:
        self.ports = ports(self.model)
        self.reset_result: dict[str, Any] | None = None

    def run(self, reader: Any, preprocessor: Any) -> dict[str, Any]:
        options = self.options
        width = reader.batch_size
        self.batch_size = width
        started = time.perf_counter_ns()  # the batch size's first read: target_ci's clock
        if self.ports.context:
            preprocessor = _InContext(preprocessor, self.ports.context)
        timings: tuple[list[int], list[int]] = ([], [])
        source = self._source(reader, preprocessor, timings)
        if self.state is None and not options.cold_start:  # else after the cold calls
            self._check_streams_state(source, width)
        durations: list[int] = []
        sizes: list[int] = []
        wall_ns = 0
        scores: Any = None  # the first pass's (`_lockstep`)
        if options.warmup:
            start = time.perf_counter_ns()
            with self.predictor.inference_context():
                self._lockstep(source, width, reader.count, carry=True, limit=options.warmup)
            self.stage_span(
                "warm-up",
                start,
                time.perf_counter_ns(),
                {"batch_size": width, "predictions": options.warmup},
            )
        for repetition in range(options.repeat):
            pass_scores, pass_wall = self._timed_pass(
                source, width, reader.count, durations, sizes, repetition
            )
            wall_ns += pass_wall
            if repetition == 0:
                scores = pass_scores
        assert scores is not None
        if self.state is None:
            self._check_streams_state(source, width, after_cold=True)
        # Past the repeat passes, whole passes until the median's interval is within target_ci.
        target = TargetCi.start(options, started)
        while target is not None and target.more(
            full_batches(durations, sizes, width) or durations, len(durations)
        ):
            self.total += lockstep_calls(reader.lengths, width)
            repetition = options.repeat + target.rounds - 1
            wall_ns += self._timed_pass(source, width, reader.count, durations, sizes, repetition)[
                1
            ]
        labels = np.concatenate([labels for _, labels in source()])
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
            self.first = FirstPass(probabilities_.astype(np.float32), labels, predictions)
            if self.ports.states:
                self.reset_result = self._reset_pass(source, width, labels)
        inputs = sum(sizes)
        calls = lockstep_calls(reader.lengths, width)
        read_ns, preprocess_ns = timings
        result = {
            "batch_size": width,
            "batches": calls,
            "streams": reader.streams,
            "inputs": len(labels),
            "warmup": options.warmup,
            "repeat": options.repeat,
            "accuracy": metrics,
            **latency_summary(width, durations, sizes, target),
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

    def _probabilities(self, scores: Any, count: int) -> np.ndarray:
        """The probabilities of every input's classes, from the scored output (or, for custom
        postprocess code that takes the outputs by name, from each of them: `Ports.read`)."""
        if self.custom_postprocess is not None:
            scores = custom_outputs(self.custom_postprocess, scores, count)
        return probabilities(scores, self.ports.scored_type)

    def _source(
        self, reader: StreamReader, preprocessor: Any, timings: tuple[list[int], list[int]]
    ) -> Source:
        """The streams, preprocessed: held once read when the whole split fits in
        `stage_bytes` (every pass reuses them), else read and preprocessed again by each pass,
        a stream at a time. The first reading is timed into `timings` (read, preprocess)."""
        held: list[tuple[np.ndarray, np.ndarray]] = []
        size = 0
        for batch, labels, _ in self.preprocessed(reader, preprocessor, timings):
            held.append((batch, labels))
            size += batch.nbytes
            if size > self.options.stage_bytes:
                held = []
                break
        else:
            return lambda: iter(held)

        def again() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for batch, labels, _ in self.preprocessed(reader, preprocessor, None):
                yield batch, labels

        return again

    def _timed_pass(
        self,
        source: Source,
        width: int,
        rows: int,
        durations: list[int],
        sizes: list[int],
        repetition: int,
    ) -> tuple[Any, int]:
        """One timed pass over every stream: the scored outputs (`_lockstep`), and the pass's
        wall time less the time spent reading and preprocessing streams between calls."""
        if not self.tracing:
            self.predictor.start_tracing()
            self.tracing = True
        self.stop_if_cancelled()
        stage_id = self.reserve()
        marks: list[tuple[int, int]] = []
        first_index = len(durations)
        collecting = gc.isenabled()
        gc.disable()
        loop_start = time.perf_counter_ns()
        try:
            with self.predictor.inference_context():
                scores, staging_ns = self._lockstep(
                    source,
                    width,
                    rows,
                    carry=True,
                    durations=durations,
                    sizes=sizes,
                    marks=marks,
                )
        except EvaluationCancelled:
            self.predict_stage(
                stage_id,
                loop_start,
                time.perf_counter_ns(),
                {"batch_size": width, "repetition": repetition, "cancelled": True},
            )
            self._call_spans(marks, sizes, first_index, width, repetition, stage_id)
            raise
        finally:
            if collecting:
                gc.enable()
        loop_end = time.perf_counter_ns()
        self.predict_stage(
            stage_id,
            loop_start,
            loop_end,
            {"batch_size": width, "batches": len(marks), "repetition": repetition},
        )
        self._call_spans(marks, sizes, first_index, width, repetition, stage_id)
        assert scores is not None
        return scores, loop_end - loop_start - staging_ns

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
        self.add_batch_spans(rows, marks, 0, first_index, width, repetition, stage_id)  # type: ignore[arg-type]

    def _check_streams_state(self, source: Source, width: int, after_cold: bool = False) -> None:
        """Before the warm-up: whether the model keeps a state inside itself between calls
        (`predictors.evaluation.state`), on the first call of the first batch size (the first
        input of its first streams, every state at its initial value). A model whose module
        resets it is reset before each stream, which needs one stream per call: its reset
        concerns every row of a call at once. With `cold_start`, after the first batch size's
        timed calls instead (`after_cold`)."""
        ports = self.ports
        taken = list(itertools.islice(source(), width))
        feeds = dict(ports.constants)
        feeds[ports.data] = np.stack([inputs[0] for inputs, _ in taken])
        for state in ports.states:
            feeds[state.name] = np.stack([state.initial] * len(taken), state.axis)
        names = ports.outputs
        synchronize = self.options.device != "cpu"

        def call() -> Any:
            try:
                outputs = self.predictor.run(feeds, names)
            except PredictorError:
                raise
            except Exception as exc:  # the framework's own: the model did not take the call
                raise self.failed(feeds[ports.data], exc) from exc
            if synchronize:
                self.predictor.synchronize()
            return outputs

        self.judge_state(call, "stream", after_cold)
        wide = [size for size in self.options.batch_sizes if size != 1]
        if self.reset is not None and self.state is not None and wide:
            raise EvaluationError(
                f"{self.what} keeps a state inside itself, which "
                f"{self.state['reset']} resets for every stream of a "
                "call at once: it runs one stream per call, each from its own reset; use batch "
                f"size 1 (asked for {', '.join(str(size) for size in wide)})"
            )

    def _reset_pass(self, source: Source, width: int, labels: np.ndarray) -> dict[str, Any]:
        """The accuracy with every state reset to its initial value at every call (untimed)."""
        start = time.perf_counter_ns()
        with self.predictor.inference_context():
            scores, _ = self._lockstep(source, width, len(labels), carry=False)
        assert scores is not None
        self.stage_span("state-reset pass", start, time.perf_counter_ns(), {"batch_size": width})
        return sequence_metrics(self._probabilities(scores, len(labels)), labels)

    def _lockstep(
        self,
        source: Source,
        width: int,
        rows: int,
        *,
        carry: bool,
        durations: list[int] | None = None,
        sizes: list[int] | None = None,
        marks: list[tuple[int, int]] | None = None,
        limit: int | None = None,
    ) -> tuple[Any, int]:
        """Run the streams side by side, `width` at a time, each slot taking the next stream
        as soon as its own ends; the scored output of every input, in split order (`rows` of
        them, one row each; a list of each output of `Ports.read` where custom postprocess
        takes them by name), and the time spent taking streams from `source`. Timed (each call
        into `durations`, its rows into `sizes`) when `durations` is given. With `limit` (the
        warm-up): that many calls, the streams taken again from the start as often as needed,
        and no scores kept."""
        ports = self.ports
        states = ports.states
        names = ports.outputs
        read = len(ports.read)
        run = self.predictor.run
        perf = time.perf_counter_ns
        synchronize = self.predictor.synchronize if self.options.device != "cpu" else None
        # A model that keeps a state inside itself, one stream per call: reset before each
        # stream's first call (before every call when no state is carried), untimed.
        reset = self.reset
        pending = source()
        row = 0
        slots: list[_Slot | None] = [None] * width
        scored: list[np.ndarray] | None = None
        staging_ns = 0
        calls = 0
        reported = perf()
        while limit is None or calls < limit:
            taking = perf()
            for index in range(width):
                if slots[index] is None:
                    taken = next(pending, None)
                    if taken is None and limit is not None and row:
                        pending, row = source(), 0  # the warm-up goes round again
                        taken = next(pending, None)
                    if taken is not None:
                        inputs, labels = taken
                        slots[index] = _Slot(
                            row,
                            inputs,
                            len(labels),
                            0,
                            [state.initial for state in states],
                        )
                        row += len(labels)
            staging_ns += perf() - taking
            active = [slot for slot in slots if slot is not None]
            if not active:
                break
            feeds = dict(ports.constants)
            feeds[ports.data] = np.stack([slot.inputs[slot.step] for slot in active])
            for number, state in enumerate(states):
                feeds[state.name] = np.stack([slot.states[number] for slot in active], state.axis)
            if reset is not None and (not carry or any(slot.step == 0 for slot in active)):
                reset()
            try:
                start = perf()
                outputs = run(feeds, names)
                if synchronize is not None:
                    synchronize()
                end = perf()
            except PredictorError:
                raise
            except Exception as exc:  # the framework's own: the model did not take the call
                raise self.failed(feeds[ports.data], exc) from exc
            calls += 1
            if durations is not None and sizes is not None:
                durations.append(end - start)
                sizes.append(len(active))
                if marks is not None and self.batches:
                    marks.append((start, end))
            if limit is None:
                batch_scores = [np.asarray(o).reshape(len(active), -1) for o in outputs[:read]]
                if scored is None:
                    scored = [np.empty((rows, b.shape[1]), dtype=b.dtype) for b in batch_scores]
                for kept, batch in zip(scored, batch_scores, strict=True):
                    for number, slot in enumerate(active):
                        kept[slot.row + slot.step] = batch[number]
            for number, state in enumerate(states):
                self._carry(state, np.asarray(outputs[read + number]), active, number, carry)
            for index, held in enumerate(slots):
                if held is not None:
                    held.step += 1
                    if held.step == held.length:
                        slots[index] = None
            self.done += 1
            if end - reported >= 50_000_000:
                reported = end
                self.report(0)
        if limit is None and scored is None:
            raise EvaluationError("the split holds no input")
        self.report(0)
        if scored is not None and len(scored) == 1:
            return scored[0], staging_ns
        return scored, staging_ns

    def _carry(
        self, state: _State, value: np.ndarray, active: list[_Slot], number: int, carry: bool
    ) -> None:
        """Give each active stream its row of a state output (on the output's batch axis),
        checked against the state's declared shape."""
        axis = self.ports.output_axes.get(state.source, state.axis)
        if value.ndim != len(state.shape) + 1 or value.shape[axis] != len(active):
            raise EvaluationError(
                f"state output {state.source} has shape {tuple(value.shape)} for "
                f"{len(active)} streams; with batch_axis {axis} and the state's shape "
                f"{list(state.shape)} it would be "
                f"{tuple(state.shape[:axis]) + (len(active),) + tuple(state.shape[axis:])}"
            )
        if not carry:
            return
        for index, slot in enumerate(active):
            row = np.take(value, index, axis=axis)
            if row.shape != state.shape:
                raise EvaluationError(
                    f"state output {state.source} gives each stream shape {row.shape}, but "
                    f"state input {state.name} has shape {list(state.shape)}"
                )
            slot.states[number] = row.astype(state.initial.dtype, copy=False)
