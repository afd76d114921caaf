"""The evaluation loop's logic, on a pure-NumPy predictor and a tiny dataset made here.

The predictor is registered under the name "fake" for each test; it records every batch it is
given, so that the tests can count warm-ups, repetitions and batches exactly. The end-to-end
claims on real frameworks are in test_frameworks.py.
"""

from __future__ import annotations

import dataclasses
import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from predictors import manifests
from predictors.evaluation import (
    CLOCK_HOST,
    EvaluationCancelled,
    EvaluationError,
    EvaluationOptions,
    compare,
)
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
    PredictorOptions,
    predictor_class,
    register,
    unregister,
)
from predictors.manifests import Manifest
from predictors.processing.custom_code import CustomCodeError
from predictors.tracing.chrome import chrome_trace, rows_of_spans
from tests.predictors.conftest import RunEvaluation

pytestmark = pytest.mark.database_free

COUNT = 10
CLASSES = ("dark", "mid", "bright")
LABELS = [i % 3 for i in range(COUNT)]  # 0 1 2 0 1 2 0 1 2 0
LEVELS = (20, 120, 220)  # the gray level of each class

MODEL = """
kind: model
name: tiny
version: 1.0.0
description: A 4x4 gray-level classifier for the loop's tests.
license: MIT
task: image_classification
framework: {name: onnxruntime, version: "*"}
inputs:
  - name: image
    type: image
    parameters:
      decoder: pillow
      jpeg_dct_method: islow
      color_mode: GRAY
      layout: NCHW
      resize_method: nearest
      resize_size: null
      keep_aspect_ratio: false
      crop_method: none
      crop_size: null
      element_type: float32
      normalization_order: convert_then_normalize
      scale: 255.0
      mean: [0.5]
      std: [0.5]
outputs:
  - name: logits
    type: logits
    parameters: {top_k: 2, labels: [dark, mid, bright]}
model:
  graph_path: repo://models/tiny/1.0.0/tiny.bin
"""

DATASET = """
kind: dataset
name: tiny
version: 1.0.0
description: Ten 4x4 gray PNG images in three gray levels.
license: MIT
task: image_classification
format: parquet
encoding: png
labels: [dark, mid, bright]
splits:
  validation:
    path: repo://datasets/tiny/1.0.0/validation.parquet
    count: 10
"""


class FakePredictor(Predictor):
    """Classifies a 4x4 gray image by its mean level: the nearest of LEVELS wins."""

    calls: ClassVar[list[int]] = []  # the batch size of every predict call, in order
    closed: ClassVar[int] = 0
    fail: ClassVar[Exception | None] = None
    expected: ClassVar[tuple[tuple[int | None, ...], str] | None] = None
    wrong_class: ClassVar[int | None] = None  # this class is always predicted as the next one
    on_predict: ClassVar[Any] = None

    @classmethod
    def check_device(cls, device: str) -> None:
        if device != "cpu":
            raise PredictorError(f"fake cannot use {device}")

    @classmethod
    def software(cls) -> dict[str, Any]:
        return {"version": "1.2.3"}

    def load(self, manifest: Manifest, options: PredictorOptions) -> None:
        assert options.graph_file.read_bytes() == b"weights"

    def expected_input(self) -> tuple[tuple[int | None, ...], str] | None:
        return self.expected

    def predict(self, batch: np.ndarray) -> np.ndarray:
        type(self).calls.append(len(batch))
        if self.on_predict is not None:
            self.on_predict()
        if self.fail is not None:
            raise self.fail
        level = (batch.reshape(len(batch), -1).mean(axis=1) * 0.5 + 0.5) * 255
        distance = np.abs(level[:, None] - np.asarray(LEVELS, dtype=np.float64)[None, :])
        logits = -distance / 10
        if self.wrong_class is not None:
            hit = logits.argmax(axis=1) == self.wrong_class
            logits[hit] = np.roll(logits[hit], 1, axis=1)
        return logits.astype(np.float32)

    def close(self) -> None:
        type(self).closed += 1


@pytest.fixture
def fake() -> Iterator[type[FakePredictor]]:
    cls = type("Fake", (FakePredictor,), {"calls": [], "closed": 0})
    register("fake")(cls)
    yield cls
    unregister("fake")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    images = []
    for label in LABELS:
        buffer = io.BytesIO()
        Image.new("L", (4, 4), LEVELS[label]).save(buffer, format="PNG")
        images.append(buffer.getvalue())
    table = pa.table(
        {"image": pa.array(images, pa.binary()), "label": pa.array(LABELS, pa.int64())}
    )
    split = tmp_path / "datasets/tiny/1.0.0/validation.parquet"
    split.parent.mkdir(parents=True)
    pq.write_table(table, split, row_group_size=4)
    weights = tmp_path / "models/tiny/1.0.0/tiny.bin"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"weights")
    return tmp_path


def model(framework_range: str = "*") -> Manifest:
    loaded = manifests.load(MODEL)
    return dataclasses.replace(loaded, framework="fake", framework_range=framework_range)


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    """The fake model on the tiny dataset, one batch size, no warm-up, one pass."""
    return {
        "model": model(),
        "dataset": manifests.load(DATASET),
        "batch_sizes": (1,),
        "warmup": 0,
        "repeat": 1,
    }


def test_warmup_repeats_and_batches_are_counted_per_batch_size(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    # Untraced: no calibration of the tracing overhead loads the model again.
    evaluation = run_evaluation(batch_sizes=(1, 4), warmup=2, repeat=3, trace_level="none")

    # batch size 1: the state check's 2 calls on the first batch (before anything is timed,
    # once per run), 2 warm-ups, then 3 passes of 10; batch size 4: 2 warm-ups on the first
    # staged batches, then 3 passes of 4 + 4 + 2.
    assert fake.calls == [1] * (2 + 2 + 3 * 10) + [4, 4] + [4, 4, 2] * 3
    assert fake.closed == 1
    one, four = evaluation.result["batch_sizes"]
    assert (one["batch_size"], one["batches"], one["inputs"]) == (1, 10, 10)
    assert (four["batch_size"], four["batches"], four["inputs"]) == (4, 3, 10)
    assert one["latency"]["count"] == 30
    assert four["latency"]["count"] == 6  # full batches only: the batches of 2 are left out
    assert one["timed_inputs"] == four["timed_inputs"] == 30
    assert four["throughput_ips"] == pytest.approx(30 / (four["timed_wall_ms"] / 1e3))
    assert evaluation.result["clock"] == CLOCK_HOST


def test_every_timed_batch_is_a_span_at_trace_level_model(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    evaluation = run_evaluation(batch_sizes=(1, 4), warmup=2, repeat=3)

    every = evaluation.spans
    spans = [s for s in every if s.attributes["mlms.level"] == "model"]
    stages = [s for s in every if s.attributes["mlms.level"] == "application"]
    assert len(spans) == 30 + 9
    assert len(every) == len(spans) + len(stages) == evaluation.result["trace"]["spans"]
    # load; per batch size: a read and a preprocess per batch, a warm-up, a predict stage per
    # pass, a postprocess.
    assert len(stages) == 1 + (2 * 10 + 1 + 3 + 1) + (2 * 3 + 1 + 3 + 1)
    assert evaluation.result["trace"]["levels"] == {"application": len(stages), "model": 39}
    assert [s.attributes["inputs"] for s in spans[30:]] == [4, 4, 2] * 3
    assert [s.attributes["repetition"] for s in spans[:30]] == [0] * 10 + [1] * 10 + [2] * 10
    assert all(s.name == "predict" and s.end_ns >= s.start_ns for s in spans)
    assert all(a.end_ns <= b.start_ns for a, b in zip(spans, spans[1:], strict=False))
    assert {by.span_id for by in stages if by.name == "predict"} == {s.parent_id for s in spans}
    # The Chrome trace (`mlms evaluate --trace-file`, and the hub's): a process per framework,
    # a thread per level, the span ids in the events' args.
    events = chrome_trace(rows_of_spans(every))["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(every)
    first = next(e for e in complete if e["args"]["span_id"] == spans[0].span_id)
    assert first["dur"] == (spans[0].end_ns - spans[0].start_ns) / 1e3
    assert first["args"]["parent_span_id"] == spans[0].parent_id
    names = {(e["name"], e["args"]["name"]) for e in events if e["ph"] == "M"}
    assert names == {
        ("process_name", "fake"),
        ("thread_name", "application"),
        ("thread_name", "model"),
    }
    assert {e["tid"] for e in complete if e["cat"] == "model"} == {2}


class _Recording:
    """A span sink that notes, at each write, how many predict calls the model had made."""

    def __init__(self, fake: type[FakePredictor]) -> None:
        self.fake = fake
        self.writes: list[tuple[int, list[Any]]] = []

    def write(self, spans: Any) -> None:
        self.writes.append((len(self.fake.calls), list(spans)))

    @property
    def spans(self) -> list[Any]:
        return [span for _, spans in self.writes for span in spans]


def test_batch_spans_reach_the_sink_while_the_batch_size_still_runs(
    fake: type[FakePredictor], run_evaluation: RunEvaluation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streaming: the batch spans timed so far go to the sink at least every `_STREAM_NS`,
    between timed calls; their stage span (the parent) comes after them, when it ends."""
    from predictors.evaluation.scenarios import fixed_batches

    monkeypatch.setattr(fixed_batches, "_REPORT_NS", 5_000_000)
    monkeypatch.setattr(fixed_batches, "_STREAM_NS", 40_000_000)
    fake.on_predict = staticmethod(lambda: time.sleep(0.01))

    class _Slow(_Recording):
        def write(self, spans: Any) -> None:
            super().write(spans)
            time.sleep(0.05)  # a sink that takes its time (an export waiting on the hub)

    sink = _Slow(fake)

    evaluation = run_evaluation(batch_sizes=(1,), repeat=4, sink=sink)

    total = 40
    batches = [
        (calls, [s for s in spans if s.name == "predict" and s.parent_id])
        for calls, spans in sink.writes
    ]
    during = [(calls, spans) for calls, spans in batches if spans and calls < total]
    assert len(during) >= 2, [calls for calls, _ in sink.writes]  # written as the loop ran
    every = [s for s in sink.spans if s.attributes.get("mlms.level") == "model"]
    assert len(every) == total == len({s.span_id for s in every})
    stages = {s.span_id: s for s in sink.spans if s.name == "predict" and not s.parent_id}
    assert {s.parent_id for s in every} <= set(stages)  # each batch's stage came, after it
    written_at = {s.span_id: n for n, (_, spans) in enumerate(sink.writes) for s in spans}
    assert all(written_at[s.parent_id] >= written_at[s.span_id] for s in every)
    # The time spent handing spans over (50 ms a write, several writes inside the loop) is not
    # the model's: the loop's wall time is its predict calls' time and little more.
    entry = evaluation.result["batch_sizes"][0]
    calls_ms = entry["latency"]["mean_ms"] * entry["latency"]["count"]
    assert calls_ms <= entry["timed_wall_ms"] < calls_ms + 40


def test_a_cancelled_run_writes_what_it_measured(
    fake: type[FakePredictor], run_evaluation: RunEvaluation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel found between two timed calls: every call timed so far is a span, in a stage
    span that ends there, marked cancelled."""
    from predictors.evaluation.scenarios import fixed_batches

    monkeypatch.setattr(fixed_batches, "_REPORT_NS", 1_000_000)
    fake.on_predict = staticmethod(lambda: time.sleep(0.002))
    sink = _Recording(fake)
    with pytest.raises(EvaluationCancelled):
        run_evaluation(
            batch_sizes=(1,), repeat=5, sink=sink, cancelled=lambda: len(fake.calls) >= 13
        )

    timed = [s for s in sink.spans if s.attributes.get("mlms.level") == "model"]
    # Every call but the state check's two (untimed, before the warm-up) is timed.
    assert len(timed) == len(fake.calls) - 2 >= 11
    stages = [
        s for s in sink.spans if s.name == "predict" and s.attributes.get("mlms.op_type") == "stage"
    ]
    assert stages[-1].attributes["cancelled"] is True
    assert {s.parent_id for s in timed} == {stage.span_id for stage in stages}


def test_trace_level_none_records_no_spans(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    evaluation = run_evaluation(trace_level="none", repeat=2)
    assert evaluation.spans == []
    assert evaluation.result["batch_sizes"][0]["latency"]["count"] == 20


def test_accuracy_and_predictions(fake: type[FakePredictor], run_evaluation: RunEvaluation) -> None:
    evaluation = run_evaluation(batch_sizes=(3,))
    # Three classes: top-5 would hold every label, so it says nothing (None).
    assert evaluation.result["accuracy"] == {"top1": 1.0, "top5": None, "count": 10}
    assert evaluation.labels.tolist() == LABELS
    assert evaluation.outputs.shape == (10, 3)
    assert [p[0][1] for p in evaluation.predictions] == [CLASSES[i] for i in LABELS]
    assert all(len(p) == 2 for p in evaluation.predictions)  # the manifest's top_k

    fake.wrong_class = 2  # the three "bright" images come out "dark"
    evaluation = run_evaluation(batch_sizes=(3,))
    assert evaluation.result["accuracy"]["top1"] == pytest.approx(7 / 10)
    assert evaluation.result["accuracy"]["top5"] is None


def test_progress_is_monotonic_and_reaches_the_total(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    seen: list[tuple[int, int]] = []
    run_evaluation(
        batch_sizes=(1, 4), warmup=1, repeat=2, progress=lambda d, t: seen.append((d, t))
    )
    total = (1 + 2 * 10) + (1 + 2 * 3)
    assert seen[-1] == (total, total)
    assert all(t == total for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_cancellation_stops_the_loop_and_closes_the_model(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    with pytest.raises(EvaluationCancelled):
        run_evaluation(
            batch_sizes=(1, 2),
            warmup=EvaluationOptions.warmup,
            repeat=5,
            cancelled=lambda: len(fake.calls) >= 3,
        )
    # stopped within the first stage of batch size 1 (warm-ups and 10 batches)
    assert 3 <= len(fake.calls) <= EvaluationOptions.warmup + 10
    assert fake.closed == 1


def test_staging_in_small_stages_gives_the_same_result(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    whole = run_evaluation(batch_sizes=(4,), warmup=1, repeat=2, trace_level="none")
    calls = list(fake.calls)
    fake.calls.clear()
    staged = run_evaluation(batch_sizes=(4,), warmup=1, repeat=2, stage_bytes=1, trace_level="none")
    # The state check's 2 calls, a warm-up, 2 passes.
    assert fake.calls == calls == [4, 4] + [4] + [4, 4, 2] * 2
    np.testing.assert_array_equal(staged.outputs, whole.outputs)
    assert staged.result["batch_sizes"][0]["latency"]["count"] == 4


def test_a_framework_error_names_the_batch(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    fake.fail = ValueError("matrix sizes do not match\nmore detail")
    with pytest.raises(PredictorError, match=r"shape \(2, 1, 4, 4\) float32: matrix sizes"):
        run_evaluation(batch_sizes=(2,))
    assert fake.closed == 1


def test_an_input_that_does_not_fit_the_model_names_the_layout(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    fake.expected = ((None, 4, 4, 1), "float32")
    with pytest.raises(PredictorError, match=r"shape \(N, 4, 4, 1\).*\(1, 1, 4, 4\).*layout NCHW"):
        run_evaluation()
    assert fake.calls == []  # refused before the first prediction

    fake.expected = ((1, 1, 4, 4), "float32")
    with pytest.raises(PredictorError, match="batches of exactly 1"):
        run_evaluation(batch_sizes=(2,))

    fake.expected = ((None, 1, 4, 4), "float16")
    with pytest.raises(PredictorError, match="takes float16 input.*element_type"):
        run_evaluation()


def test_a_framework_version_outside_the_range_is_refused(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    with pytest.raises(PredictorError, match=r"needs fake >=2.*fake 1\.2\.3 is installed"):
        run_evaluation(model(framework_range=">=2"))
    assert fake.calls == []


def test_unknown_split_and_unknown_framework(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    with pytest.raises(EvaluationError, match="no split 'test' .*validation"):
        run_evaluation(split="test")
    with pytest.raises(PredictorError, match="unknown framework 'mxnet'"):
        predictor_class("mxnet")


def _dataset_labelled(labels: list[str]) -> Manifest:
    return manifests.load(DATASET.replace("labels: [dark, mid, bright]", f"labels: {labels}"))


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        (["dark", "mid"], "1 only the model's \\(e.g. bright\\)"),
        (["bright", "mid", "dark"], "the same labels in another order"),
        (["dark", "mid", "bright", "white"], "1 only the dataset's \\(e.g. white\\)"),
    ],
)
def test_a_model_whose_labels_are_not_the_datasets_is_refused_before_it_loads(
    fake: type[FakePredictor], run_evaluation: RunEvaluation, labels: list[str], why: str
) -> None:
    dataset = _dataset_labelled(labels)
    with pytest.raises(EvaluationError) as refused:
        run_evaluation(dataset=dataset)
    message = str(refused.value)
    assert "model tiny 1.0.0 has 3 labels [dark, mid, bright]" in message
    assert f"dataset tiny 1.0.0 has {len(labels)} labels [{', '.join(labels)}]" in message
    assert re.search(why, message), message
    assert "allow_label_mismatch" in message
    assert fake.calls == []  # refused before a single prediction


def test_an_allowed_label_mismatch_runs_and_the_result_says_so(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    evaluation = run_evaluation(
        dataset=_dataset_labelled(["bright", "mid", "dark"]), allow_label_mismatch=True
    )
    notes = evaluation.result["notes"]
    assert any(note.startswith("labels differ: model tiny 1.0.0 has 3 labels") for note in notes)
    # The matching dataset gives no such note.
    assert not any("labels differ" in note for note in run_evaluation().result["notes"])


def test_an_untrained_model_runs_on_any_labels(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    untrained = manifests.load(MODEL + "attributes: {trained: false}\n")
    untrained = dataclasses.replace(untrained, framework="fake")
    evaluation = run_evaluation(untrained, dataset=_dataset_labelled(["dark", "mid"]))
    notes = evaluation.result["notes"]
    assert any("is not trained" in note for note in notes)
    assert any("labels differ" in note for note in notes)


def test_compare_reports_agreement_and_the_largest_difference(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    a = run_evaluation()
    b = run_evaluation()
    b.outputs = b.outputs.copy()
    b.outputs[0] += np.asarray([0.0, 0.0, 25.0], dtype=np.float32)  # dark (0, -10, -20) to bright
    comparison = compare(a, b)
    assert comparison["top1_agreement"] == pytest.approx(9 / 10)
    assert comparison["top1_disagreements"] == 1
    assert comparison["max_abs_diff"] == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_sizes": (0,)}, "batch_sizes must be at least 1"),
        ({"batch_sizes": ()}, "batch_sizes must be a non-empty list"),
        ({"batch_sizes": (2, 2)}, "batch_sizes names a value twice"),
        ({"repeat": 0}, "repeat must be"),
        ({"warmup": -1}, "warmup must be"),
        ({"trace_level": "kernels"}, "trace_level must be one of none, application, model"),
        ({"device": "tpu"}, "device must be cpu, cuda or cuda:N"),
    ],
)
def test_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(EvaluationError, match=message):
        EvaluationOptions(**options)


def test_the_spans_go_to_the_sink_as_the_loop_goes_and_are_not_kept(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    """An agent's sink exports each batch size's spans when it ends: nothing is held twice."""
    writes: list[list[Any]] = []

    class Sink:
        def write(self, spans: Any) -> None:
            writes.append(list(spans))

    evaluation = run_evaluation(batch_sizes=(1, 4), repeat=2, sink=Sink())

    assert evaluation.spans == []  # the sink has them
    # One write per batch size, with that batch size's batch spans.
    batch_sizes = [
        {s.attributes["batch_size"] for s in w if s.attributes["mlms.level"] == "model"}
        for w in writes
    ]
    assert batch_sizes == [{1}, {4}]
    written = [span for w in writes for span in w]
    assert len(written) == evaluation.result["trace"]["spans"]
    # Ids count on across writes, and every parent is written before its children.
    assert [s.span_id for s in written] == list(range(1, len(written) + 1))
    seen: set[int] = set()
    for span in written:
        assert not span.parent_id or span.parent_id in seen
        seen.add(span.span_id)


# -- custom processing code (runs here as it runs in a container: `custom_code=True`) --------

INVERT = "def preprocess(example):\n    return -example\n"
REVERSE = "def postprocess(outputs):\n    return outputs[:, ::-1]\n"


def _coded(**code: str) -> Manifest:
    data = manifests.load(MODEL).data
    data.update(code)
    return dataclasses.replace(manifests.load(yaml.safe_dump(data)), framework="fake")


def test_custom_code_runs_after_the_built_in_steps(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    # Inverted gray levels turn dark into bright and back; mid stays: 3 of 10 right.
    inverted = run_evaluation(_coded(preprocess=INVERT), custom_code=True)
    assert inverted.result["accuracy"]["top1"] == pytest.approx(0.3)
    # Reversing the class scores undoes it: every input right again.
    both = run_evaluation(_coded(preprocess=INVERT, postprocess=REVERSE), custom_code=True)
    assert both.result["accuracy"]["top1"] == 1.0
    assert [p[0][1] for p in both.predictions] == [CLASSES[i] for i in LABELS]


def test_custom_code_is_refused_where_it_would_not_run(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    with pytest.raises(EvaluationError, match="has custom preprocess and postprocess code") as e:
        run_evaluation(_coded(preprocess=INVERT, postprocess=REVERSE))
    assert "mlms agent --docker --allow-custom-code" in str(e.value)
    assert "refused rather than run without it" in str(e.value)
    assert fake.calls == []


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (
            "def preprocess(example):\n    scale = 0\n    return example * (1 // scale)\n",
            [
                "custom preprocess code failed on input 0 of a batch of 1: ZeroDivisionError",
                'File "<manifest preprocess>", line 3, in preprocess',
                "return example * (1 // scale)",
            ],
        ),
        (
            "import socket\ndef preprocess(example):\n"
            "    socket.create_connection(('192.0.2.1', 80), timeout=1)\n",
            ["custom preprocess code tried to use the network", "the sandbox has none"],
        ),
        (
            "def preprocess(example):\n    open('/etc/mlms-sandbox-test', 'w')\n",
            ["tried to write /etc/mlms-sandbox-test outside its sandbox", "only under /tmp"],
        ),
        (
            "import os\ndef preprocess(example):\n    os.remove('/etc/hostname')\n",
            ["tried to change /etc/hostname (os.remove) outside its sandbox"],
        ),
        (
            "import subprocess\ndef preprocess(example):\n    subprocess.run(['true'])\n",
            ["tried to start or signal a process", "subprocess.Popen"],
        ),
        (
            "import os\ndef preprocess(example):\n    os.replace('/tmp/x', '/etc/x')\n",
            ["tried to change /etc/x (os.rename) outside its sandbox"],
        ),
        (
            "def preprocess(example):\n    return 'text'\n",
            ["returned str for input 0 of a batch of 1, which is not a numeric array"],
        ),
        (
            "raise RuntimeError('at import')\ndef preprocess(x):\n    return x\n",
            ["loading the code"],
        ),
    ],
)
def test_custom_code_that_fails_or_breaks_the_sandbox_says_what_it_did(
    fake: type[FakePredictor], run_evaluation: RunEvaluation, code: str, words: list[str]
) -> None:
    with pytest.raises(CustomCodeError) as failed:
        run_evaluation(_coded(preprocess=code), custom_code=True, batch_sizes=(1,))
    for word in words:
        assert word in str(failed.value), str(failed.value)
    assert not Path("/etc/mlms-sandbox-test").exists()
    assert Path("/etc/hostname").exists() or not Path("/etc").exists()


def test_custom_code_may_write_in_its_sandbox_folder(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    code = (
        "import tempfile\ndef preprocess(example):\n"
        "    with tempfile.NamedTemporaryFile(dir='/tmp') as scratch:\n"
        "        scratch.write(b'x')\n"
        "    return example\n"
    )
    evaluation = run_evaluation(_coded(preprocess=code), custom_code=True)
    assert evaluation.result["accuracy"]["top1"] == 1.0


def test_custom_postprocess_must_return_a_row_per_input(
    fake: type[FakePredictor], run_evaluation: RunEvaluation
) -> None:
    code = "def postprocess(outputs):\n    return outputs[:1]\n"
    with pytest.raises(CustomCodeError, match=r"one row per input \(4 here\).*\(1, 3\)"):
        run_evaluation(_coded(postprocess=code), custom_code=True, batch_sizes=(4,))
