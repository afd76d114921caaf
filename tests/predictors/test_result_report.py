"""The loop's report typed in the protocol (`predictors.protocol.Report`): a real result reads
back as itself, through the agent's upload too, and an unknown key or a value of another type
is refused, naming its path."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from predictors.agent.results import result_upload, with_spans
from predictors.data import DataManager
from predictors.evaluation import Evaluation, EvaluationOptions, evaluate
from predictors.manifests.catalog import Catalog
from predictors.protocol import (
    ABSENT,
    LATENCY_KEYS,
    BatchLatency,
    Job,
    JobOptions,
    ManifestRef,
    ProtocolError,
    Report,
    ResultUpload,
)
from predictors.protocol.accuracy import (
    Accuracy,
    DetectionAccuracy,
    MultiLabelAccuracy,
    RegressionAccuracy,
    SegmentationAccuracy,
    SequenceAccuracy,
)
from predictors.protocol.report import Latency
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    """The zoo's digits-cnn on digits, at two batch sizes, traced down to its layers."""
    catalog = Catalog()
    return evaluate(
        catalog.find_model("digits-cnn", "*", "onnxruntime"),
        catalog.find_dataset("digits"),
        EvaluationOptions(batch_sizes=(1, 4), limit=24, threads=1, trace_level="framework"),
        DataManager(store_dir=zoo_store(("digits-cnn",))).fetch,
    )


@pytest.fixture(scope="module")
def upload(evaluation: Evaluation) -> ResultUpload:
    job = Job(
        "e",
        "c" * 32,
        1,
        "cpu",
        ManifestRef(1, "digits-cnn", "1.0.0", "onnxruntime", "0" * 64, ""),
        ManifestRef(2, "digits", "1.0.0", "", "0" * 64, ""),
        JobOptions(trace_level="framework"),
    )
    return result_upload(job, evaluation)


def _refused(read: Any, data: dict[str, Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as refused:
        read(data)
    return refused.value


# -- a real result ------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_a_real_result_reads_back_as_itself(evaluation: Evaluation) -> None:
    result = evaluation.result
    report = Report.from_dict(result)

    assert report.to_dict() == result
    # Typed all the way down: a section, a batch size, its latency, the task's accuracy.
    assert report.model is not ABSENT and report.model.name == "digits-cnn"
    assert report.batch_sizes is not ABSENT
    first = report.batch_sizes[0]
    assert isinstance(first.latency, Latency) and first.latency.count == 24
    assert type(report.accuracy) is Accuracy and report.accuracy.count == 24
    assert report.trace is not ABSENT and report.trace.layer_spans not in (ABSENT, 0)
    # As it travels: plain JSON, key for key and in the same order.
    assert json.dumps(report.to_dict()) == json.dumps(result)


@pytest.mark.frameworks
def test_the_upload_reads_back_as_itself_and_carries_the_report(
    evaluation: Evaluation, upload: ResultUpload
) -> None:
    payload = json.loads(json.dumps(upload.to_dict()))

    assert ResultUpload.from_dict(payload) == upload
    assert isinstance(upload.details, Report)
    assert upload.details.trace_level_requested == "framework"
    # The samples travel once, in `latency`; the report keeps the rest of each batch size's.
    assert (
        upload.latency["1"].samples_ms
        == evaluation.result["batch_sizes"][0]["latency"]["samples_ms"]
    )
    assert all("samples_ms" not in entry["latency"] for entry in payload["details"]["batch_sizes"])
    assert payload["accuracy"] == {
        key: evaluation.result["accuracy"][key] for key in ("top1", "top5", "count")
    }
    # What became of the spans, as the agent adds it.
    spans = {"sent": 10, "stored": 8, "refused": 0, "spooled": 2, "retries": 1, "note": "2 kept"}
    added = with_spans(upload, spans).to_dict()["details"]
    assert added["spans"] == spans and added["trace_export"] == "2 kept"


def test_a_latency_record_holds_every_latency_key() -> None:
    for record in (Latency, BatchLatency):
        assert set(LATENCY_KEYS) <= {spec.name for spec in dataclasses.fields(record)}


# -- refusals, naming the path ------------------------------------------------------------------


@pytest.mark.frameworks
@pytest.mark.parametrize(
    ("where", "path"),
    [
        (lambda d: d, "colour"),
        (lambda d: d["batch_sizes"][1], "batch_sizes.1.colour"),
        (lambda d: d["batch_sizes"][0]["latency"], "batch_sizes.0.latency.colour"),
        (lambda d: d["accuracy"], "accuracy.colour"),
        (lambda d: d["theoretical"]["roofline"]["peaks"], "theoretical.roofline.peaks.colour"),
        (lambda d: d["hygiene"][0], "hygiene.0.colour"),
        (lambda d: d["trace"]["overhead"], "trace.overhead.colour"),
    ],
)
def test_an_unknown_key_is_refused_naming_its_path(
    evaluation: Evaluation, where: Any, path: str
) -> None:
    result = copy.deepcopy(evaluation.result)
    where(result)["colour"] = "blue"

    refused = _refused(Report.from_dict, result)

    assert (refused.path, refused.message) == (path, "unknown field")
    assert str(refused) == f"{path}: unknown field"


@pytest.mark.frameworks
@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (lambda d: d["model"].update(name=7), "model.name", "must be a string; got 7"),
        (
            lambda d: d["batch_sizes"][0]["latency"].update(p50_ms="fast"),
            "batch_sizes.0.latency.p50_ms",
            "must be a finite number; got 'fast'",
        ),
        (
            lambda d: d["batch_sizes"][1].update(batch_size=4.0),
            "batch_sizes.1.batch_size",
            "must be an integer; got 4.0",
        ),
        (lambda d: d["accuracy"].update(count=True), "accuracy.count", "must be an integer"),
        (lambda d: d.update(notes="none"), "notes", "must be a list; got 'none'"),
        (lambda d: d.update(notes=["a", 2]), "notes", "must hold strings only; item 1 is 2"),
        (lambda d: d.update(state=[]), "state", "must be an object"),
        (lambda d: d["trace"].update(levels={"model": "12"}), "trace.levels.model", "integer"),
        (
            lambda d: d["batch_sizes"][0]["latency"].update(p50_ms=float("nan")),
            "batch_sizes.0.latency.p50_ms",
            "must be a finite number; got nan",
        ),
        (lambda d: d.update(load_ms=float("inf")), "load_ms", "must be a finite number; got inf"),
        (lambda d: d["trace"].update(levels={1: 3}), "trace.levels", "keys must be strings"),
        (
            lambda d: d["accuracy"].update(map=0.5, miou=0.5),
            "accuracy",
            "no one kind of object holds all of count, map, miou",
        ),
        (lambda d: d.update(accuracy=3), "accuracy", "must be an object; got 3"),
        (lambda d: d["options"].update(warmupp=1), "options.warmupp", "unknown job option"),
        (lambda d: d["options"].update(warmup=-1), "options.warmup", "must be at least 0"),
    ],
)
def test_a_value_of_another_type_is_refused_naming_its_path(
    evaluation: Evaluation, change: Any, path: str, message: str
) -> None:
    result = copy.deepcopy(evaluation.result)
    change(result)

    refused = _refused(Report.from_dict, result)

    assert refused.path == path and message in refused.message


@pytest.mark.frameworks
@pytest.mark.parametrize(
    ("where", "path"),
    [
        (lambda d: d, "colour"),
        (lambda d: d["accuracy"], "accuracy.colour"),
        (lambda d: d["latency"]["4"], "latency.4.colour"),
        (lambda d: d["predictions"], "predictions.colour"),
        (lambda d: d["details"]["batch_sizes"][0], "details.batch_sizes.0.colour"),
    ],
)
def test_the_upload_refuses_an_unknown_key_at_any_level(
    upload: ResultUpload, where: Any, path: str
) -> None:
    payload = upload.to_dict()
    where(payload)["colour"] = 1

    assert _refused(ResultUpload.from_dict, payload).path == path


@pytest.mark.frameworks
def test_the_claim_beside_an_upload_is_no_unknown_key(upload: ResultUpload) -> None:
    assert ResultUpload.from_dict({"claim": "c" * 32, **upload.to_dict()}) == upload


# -- each task's accuracy -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accuracy", "record"),
    [
        ({"top1": 0.9, "top5": None, "count": 10}, Accuracy),
        (
            {
                "top1": 1.0,
                "top5": None,
                "count": 4,
                "accuracy": 1.0,
                "precision": 1.0,
                "recall": 1.0,
                "f1": 1.0,
                "roc_auc": None,
                "average": "binary",
            },
            SequenceAccuracy,
        ),  # fmt: skip
        (
            {
                "top1": 0.69,
                "top5": 0.97,
                "count": 40,
                "map": 0.69,
                "map_50": 0.97,
                "mar_100": 0.75,
                "objects": 812,
                "detections": 900,
                "library": "pycocotools",
            },
            DetectionAccuracy,
        ),  # fmt: skip
        (
            {"miou": 0.64, "pixel_accuracy": 0.95, "iou": {"background": 0.95, "circle": None}},
            SegmentationAccuracy,
        ),
        (
            {"map": 0.97, "map_micro": 0.98, "average_precision": {"ring": None}},
            MultiLabelAccuracy,
        ),
        (
            {"mae": 46.8, "rmse": 59.1, "r2": None, "per_value": {"y": {"mae": 46.8}}},
            RegressionAccuracy,
        ),
    ],
)
def test_each_tasks_accuracy_reads_as_its_record(accuracy: dict[str, Any], record: type) -> None:
    report = Report.from_dict({"accuracy": accuracy})

    assert type(report.accuracy) is record
    assert report.to_dict() == {"accuracy": accuracy}


def test_an_accuracy_no_task_gives_is_refused_naming_the_key() -> None:
    refused = _refused(Report.from_dict, {"accuracy": {"top1": 0.5, "miou": 0.4, "nope": 1}})
    assert (refused.path, refused.message) == ("accuracy.nope", "unknown field")

    refused = _refused(Report.from_dict, {"accuracy": {"top1": "high"}})
    assert refused.path == "accuracy.top1"


def test_a_partial_report_keeps_what_it_holds_and_no_more() -> None:
    """A result posted by hand holds what it holds: nothing is added on the way back."""
    partial = {"device": "cpu", "model": {"task": "regression"}, "state": None}

    assert Report.from_dict(partial).to_dict() == partial
    assert Report.from_dict({}).to_dict() == {}
