"""What every scenario shares: the base class `Scenario` and the records it passes around.

`Scenario` holds the machinery of every way the loop drives a model: span ids and stage spans,
the batch spans and the predictor's layers nested in them, writing spans to the sink, progress
and cancellation, a predict call and the error of a failed one, the check for a state kept
inside the model, and reading a batch from the dataset and preprocessing it, timed. A scenario
(`predictors.evaluation.scenarios`) adds how it reads the split (`readers`), runs one batch size
(`run`) and scores it; `Setup` is what `evaluate` prepared for it before the model loaded.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from predictors.evaluation import state as model_state
from predictors.evaluation.errors import EvaluationCancelled, EvaluationError
from predictors.evaluation.options import EvaluationOptions
from predictors.evaluation.sinks import SpanSink
from predictors.evaluation.summaries import label_notes, probabilities
from predictors.frameworks.predictor import Predictor, PredictorError
from predictors.manifests import Manifest
from predictors.processing.custom_code import CustomCode
from predictors.protocol import Attr, at_least
from predictors.tasks import data_input_name
from predictors.tracing import Layer, Span

__all__ = [
    "CLOCK_CUDA",
    "CLOCK_HOST",
    "FirstPass",
    "ModelSpec",
    "Progress",
    "Scenario",
    "Setup",
    "Staged",
    "Windowed",
]

CLOCK_HOST = "perf_counter (host wall clock)"
CLOCK_CUDA = "perf_counter after cuda synchronize"

Progress = Callable[[int, int], None]
"""`progress(done, total)`, counted in predictions (warm-up included)."""


@dataclass(frozen=True)
class ModelSpec:
    """The model's files, the input fed from the dataset and the output scored."""

    input: dict[str, Any]
    output_type: str
    output_parameters: dict[str, Any]
    graph_path: str
    graph_sha256: str | None
    weights_path: str | None
    weights_sha256: str | None


# An input's prediction: a class, its name (a text recognizer's: its text) and its probability,
# None where the output gives none (a text decoded from the token ids a model emitted).
Prediction = tuple[int, str, float | None]


@dataclass
class FirstPass:
    """What the first batch size kept of its first pass (`Evaluation`'s outputs, labels and
    predictions)."""

    outputs: np.ndarray
    labels: np.ndarray
    predictions: Sequence[Sequence[Prediction]]

    @classmethod
    def unlabelled(
        cls, outputs: np.ndarray, predictions: Sequence[Sequence[Prediction]]
    ) -> FirstPass:
        """The first pass of a task whose inputs have no one class each (a set of classes,
        values, boxes, nothing scored): every input's label is -1."""
        return cls(outputs.astype(np.float32), np.full(len(outputs), -1, np.int64), predictions)


@dataclass
class Staged:
    """A stage: preprocessed batches in memory, with their labels."""

    batches: list[np.ndarray]
    labels: list[Any]
    # The inputs as read (encoded images), kept only where the scenario needs them
    # (`keep_inputs`: a detector's boxes are mapped back to each image's own size).
    images: list[Any] = field(default_factory=list)
    # The inputs of each batch (its rows, but for clips cut into windows: its clips).
    inputs: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Windowed:
    """A batch's labels where each input is cut into windows, the batch's rows: the inputs'
    `labels`, and how many windows (rows) each input makes (`counts`)."""

    labels: Any
    counts: list[int]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Setup:
    """What a scenario is given: the job as `evaluate` prepared it before the model loaded."""

    model: Manifest
    dataset: Manifest
    options: EvaluationOptions
    spec: ModelSpec
    labels: list[str]  # the model's (none for a latency-only run)
    dataset_labels: list[str] | None  # the dataset's, where it names them
    preprocessor: Any
    split_file: Path
    custom: CustomCode | None = None
    # Brings a file the manifest names (`fetch(url, sha256)`: an output's tokenizer file).
    fetch: Callable[[str, str | None], Path] | None = None


class Scenario:
    """One way to drive the model (see the module docstring): state shared across batch
    sizes."""

    # The finest trace level the scenario records, where it is coarser than every level
    # (`check_trace_level`); None: every level.
    finest_trace_level: ClassVar[str | None] = None
    # An object detector's detections per image (`Evaluation.detections`); None for others.
    detections: list[np.ndarray] | None = None

    @classmethod
    def check_trace_level(cls, level: str, task: str) -> None:
        """Refuse a trace level finer than the scenario records, before the model loads."""
        finest = cls.finest_trace_level
        if finest is not None and at_least(level, "framework"):
            raise EvaluationError(
                f"trace level {level}: {task} models are traced down to "
                f"{finest} (each call); layers inside the calls are not traced yet, "
                f"so ask for {finest} or coarser"
            )

    @classmethod
    def readers(cls, setup: Setup) -> tuple[list[Any], int]:
        """A reader of the split for each batch size, and the predictions they will make in
        all (the progress total)."""
        raise NotImplementedError

    def __init__(
        self,
        setup: Setup,
        predictor: Predictor,
        total: int,
        progress: Progress | None,
        cancelled: Callable[[], bool] | None,
        sink: SpanSink,
    ) -> None:
        self.setup = setup
        self.model = setup.model
        custom = setup.custom
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
        self.call: Callable[[np.ndarray], Any] = predictor.predict
        # Custom postprocess code that takes several outputs by name: each call computes them
        # all, in the order `custom_outputs` names them.
        named = self.custom_postprocess.outputs if self.custom_postprocess is not None else ()
        if named and not setup.options.latency_only:  # timed only: nothing is postprocessed
            feed, run = data_input_name(self.model.data), predictor.run
            self.call = lambda batch: run({feed: batch}, named)
        self.keep_inputs = False
        spec = setup.spec
        # A binary classifier's one number per input, read as both labels' probabilities.
        self.binary = spec.output_type in ("binary_probability", "binary_logit")
        # How `read`'s scores are ranked into predictions (`postprocess`'s output type).
        self.read_type = "probabilities" if self.binary else spec.output_type
        self.options = options = setup.options
        self.spec = spec
        self.labels = setup.labels
        self.total = total
        self.progress = progress
        self.cancelled = cancelled
        self.batch_size = 0  # the batch size running
        self.done = 0
        self.checked = False
        # The first batch timed, kept for the untraced calibration of the tracing overhead.
        self.sample: np.ndarray | None = None
        # Whether the model keeps a state between calls (`predictors.evaluation.state`): the
        # result's `state`, once checked, and the model's own reset where it must be reset.
        self.state: dict[str, Any] | None = None
        self.reset: Callable[[], None] | None = None
        self.first: FirstPass | None = None
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
        # (A trace level whose layers the predictor cannot record in such calls is refused
        # before the model loads: `predictors.tasks.trace_level_problem`.)
        self.configure()

    def configure(self) -> None:
        """What a scenario sets up past the shared state (its calls, its outputs)."""

    def run(self, reader: Any, preprocessor: Any) -> dict[str, Any]:
        """Run one batch size (`reader.batch_size`) and answer its summary."""
        raise NotImplementedError

    # -- what the result says of the scenario ---------------------------------------------------

    def output_type(self) -> str:
        """The result's `output_type`: what `Evaluation.outputs` holds."""
        return self.spec.output_type

    def classes(self) -> int:
        """The classes the model's output gives per input (the notes compare it with its
        labels)."""
        assert self.first is not None
        return int(self.first.outputs.shape[1])

    def notes(self) -> list[str]:
        """The result's notes on the model and its labels."""
        setup = self.setup
        return label_notes(
            self.model, setup.dataset, self.labels, setup.dataset_labels, self.classes()
        )

    # -- spans ------------------------------------------------------------------------------------

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
        span id (0 when stages are not traced). `at`: the id `reserve` gave it."""
        if not self.stages:
            return 0
        offset = self.epoch_offset_ns
        span_id = at if at is not None else self.new_id()
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

    def new_id(self) -> int:
        self.last_id += 1
        return self.last_id

    def reserve(self) -> int | None:
        """The id of a stage span that its children name before it ends (None when stages are
        not traced)."""
        return self.new_id() if self.stages else None

    def predict_stage(
        self, stage_id: int | None, start: int, end: int, attributes: dict[str, Any]
    ) -> None:
        """Record the stage span of a timed loop (`predict`), under the id `reserve` gave it."""
        if stage_id is not None:
            self.stage_span("predict", start, end, attributes, at=stage_id)

    def add_batch_spans(
        self,
        batches: list[np.ndarray],
        marks: list[tuple[int, int]],
        first: int,
        first_index: int,
        batch_size: int,
        repetition: int,
        stage_id: int | None,
        inputs: list[int] | None = None,
    ) -> None:
        """Record the batch spans of `marks[first:]` (the perf_counter start and end of each
        timed call on `batches`, of `inputs` inputs each where given, else of its rows;
        `first_index`: the batch index of `marks[0]` among all the timed calls of the batch
        size)."""
        offset = self.epoch_offset_ns
        for index, (start, end) in enumerate(marks[first:], start=first):
            attributes = {
                "framework": self.model.framework,
                "model": self.model.name,
                "batch_size": batch_size,
                "inputs": inputs[index] if inputs is not None else len(batches[index]),
                "repetition": repetition,
                "batch_index": first_index + index,
                Attr.LEVEL: "model",
            }
            span_id = self.new_id()
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
        call order; None where the predictor does not trace). Layers (level `framework`) are
        numbered in call order; a finer step carries the index and name of the layer it is in.
        A step's times are clipped to its batch span."""
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
                span_id = self.new_id()
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

    # -- progress, calls and checks ---------------------------------------------------------------

    def report(self, done_here: int) -> None:
        """Report progress (`done_here` predictions into the current loop); stop if cancelled."""
        if self.progress is not None:
            self.progress(self.done + done_here, self.total)
        self.stop_if_cancelled()

    def stop_if_cancelled(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise EvaluationCancelled("the evaluation was cancelled")

    def predict(self, batch: np.ndarray) -> Any:
        """An untimed call on `batch`, after the model's reset where it has one."""
        try:
            if self.reset is not None:
                self.reset()
            return self.call(batch)
        except PredictorError:
            raise
        except Exception as exc:  # a framework's own error: the model did not accept the batch
            raise self.failed(batch, exc) from exc

    def failed(self, batch: np.ndarray, exc: Exception) -> PredictorError:
        """A framework's own error on `batch`, as the loop reports it."""
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        # TorchScript puts the interpreter's traceback first and the error last.
        message = lines[-1] if lines and "Traceback" in str(exc) else " ".join(lines[:3])
        if len(message) > 300:
            message = message[:297] + "..."
        shown = f"a batch of shape {tuple(batch.shape)} {batch.dtype}"
        layout = getattr(self.setup.preprocessor, "layout", None)
        if layout and getattr(self.setup.preprocessor, "is_packed", lambda _: False)(batch):
            # Several columns' inputs, packed: each as the model was fed it.
            shown = "a batch of " + ", ".join(
                f"{entry.name} {(len(batch), *entry.shape)} {entry.dtype}" for entry in layout
            )
        return PredictorError(
            f"{self.model.framework} failed to run {self.model.name} {self.model.version} on "
            f"{shown}: {message or type(exc).__name__}"
        )

    @property
    def what(self) -> str:
        """The model as messages name it."""
        return f"{self.model.name} {self.model.version} in {self.model.framework}"

    def judge_state(self, call: Callable[[], Any], unit: str, after_cold: bool) -> int:
        """Whether the model keeps a state between calls (`predictors.evaluation.state`), by
        `call()`, its first call as the scenario makes it: the result's `state`, and the reset
        to make before each `unit`; the duration of the first call (ns)."""
        with self.predictor.inference_context():
            self.state, self.reset, first_ns = model_state.check(
                self.what,
                call,
                self.predictor.state_reset,
                unit,
                device=self.options.device,
                after_cold=after_cold,
            )
        return first_ns

    # -- the inputs ---------------------------------------------------------------------------------

    def preprocessed(
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
            values, labels = item  # type: tuple[Any, Any]
            if hasattr(preprocessor, "stream"):  # a clip framed into chunks and their labels
                batch, labels = preprocessor.stream(values, labels)
            elif getattr(preprocessor, "windowed", False):  # clips cut into windows, the rows
                batch, counts = preprocessor.windows(values)
                labels = Windowed(labels, counts)
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

    def read(self, outputs: Any) -> Any:
        """A batch of the scored output as the scenario scores it: as it is, but a binary
        classifier's one number per input, read as both labels' probabilities."""
        if self.binary:
            return probabilities(np.asarray(outputs), self.spec.output_type)
        return outputs
