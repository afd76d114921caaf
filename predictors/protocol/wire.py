"""The typed objects that cross the wire: a claim's `Job` and an agent's `ResultUpload` (its
accuracy columns, latency, predictions and the loop's `Report`), each with `to_dict` and a strict
`from_dict` that names the field at fault."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from predictors.protocol.errors import ProtocolError, get_field, mapping
from predictors.protocol.options import JobOptions
from predictors.protocol.records import ABSENT, Maybe, Record
from predictors.protocol.report import Report
from predictors.protocol.vocabulary import DEVICES


@dataclass(frozen=True)
class ManifestRef:
    """A manifest as a job carries it: its identity and its YAML source."""

    id: int
    name: str
    version: str
    framework: str
    content_hash: str
    source: str

    @classmethod
    def from_dict(cls, data: Any, path: str) -> ManifestRef:
        data = mapping(data, path)
        return cls(
            id=get_field(data, path, "id", int),
            name=get_field(data, path, "name", str),
            version=get_field(data, path, "version", str),
            framework=get_field(data, path, "framework", str),
            content_hash=get_field(data, path, "content_hash", str),
            source=get_field(data, path, "source", str),
        )


@dataclass(frozen=True)
class Job:
    """What a claim answers: the evaluation to run, under which claim, on which device."""

    id: str
    claim: str
    attempt: int
    device: str
    model: ManifestRef
    dataset: ManifestRef
    options: JobOptions
    trace_id: str | None = None
    parent_span_id: str | None = None
    # The request's limits for the evaluation's container ({"cpus": float | None,
    # "memory_mb": int | None}); None when it set none (`mlms agent --docker` applies them).
    limits: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.limits is not None:
            cpus, memory = self.limits.get("cpus"), self.limits.get("memory_mb")
            if set(self.limits) - {"cpus", "memory_mb"}:
                raise ProtocolError("limits", "takes cpus and memory_mb only")
            if cpus is not None and (
                isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0
            ):
                raise ProtocolError("limits.cpus", f"must be a positive number; got {cpus!r}")
            if memory is not None and (
                isinstance(memory, bool) or not isinstance(memory, int) or memory < 6
            ):
                raise ProtocolError(
                    "limits.memory_mb", f"must be an integer of at least 6; got {memory!r}"
                )
        if self.device not in DEVICES:
            raise ProtocolError(
                "device", f"must be one of {', '.join(DEVICES)}; got {self.device!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["options"] = self.options.to_dict()
        return values

    @classmethod
    def from_dict(cls, data: Any) -> Job:
        data = mapping(data, "")
        return cls(
            id=get_field(data, "", "id", str),
            claim=get_field(data, "", "claim", str),
            attempt=get_field(data, "", "attempt", int),
            device=get_field(data, "", "device", str),
            model=ManifestRef.from_dict(data.get("model"), "model"),
            dataset=ManifestRef.from_dict(data.get("dataset"), "dataset"),
            options=JobOptions.from_dict(data.get("options")),
            trace_id=get_field(data, "", "trace_id", str, optional=True),
            parent_span_id=get_field(data, "", "parent_span_id", str, optional=True),
            limits=get_field(data, "", "limits", dict, optional=True),
        )


@dataclass(frozen=True)
class Headline(Record):
    """A result's accuracy columns: the task's two headline metrics (`top1`, `top5`; both None
    for a latency-only evaluation, `top5` where it says nothing) and the inputs counted."""

    top1: float | None
    top5: float | None
    count: int


@dataclass(frozen=True)
class BatchLatency(Record):
    """One batch size's latency in ms, as uploaded: the keys of `LATENCY_KEYS` and the count of
    timed batches, the median's interval and whether the samples bound p90 and p99, and the
    samples themselves (`samples_ms`, `count` of them, from which the hub computes the rest)."""

    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    count: int
    p50_low_ms: Maybe[float | None] = ABSENT
    p50_high_ms: Maybe[float | None] = ABSENT
    p90_bounded: Maybe[bool] = ABSENT
    p99_bounded: Maybe[bool] = ABSENT
    samples_ms: Maybe[list[float]] = ABSENT


@dataclass(frozen=True)
class Predictions(Record):
    """Every input's predictions, one row per input: its label, its `top_k` classes and their
    probabilities, a detector's boxes (`[x, y, w, h]` in the image's pixels, one per class),
    and a text recognizer's decoded text (its `classes` are [0], its probability the text's
    confidence; no probability, [], where the text was decoded from emitted token ids)."""

    top_k: int
    labels: list[int]
    classes: list[list[int]]
    probabilities: list[list[float]]
    boxes: Maybe[list[list[list[float]]]] = ABSENT
    texts: Maybe[list[str]] = ABSENT
    # In a result: the number of pages the rows were posted in beforehand
    # (`PredictionsPage`), the lists above then empty; absent where the rows are here.
    pages: Maybe[int] = ABSENT

    @property
    def count(self) -> int:
        """The rows held here."""
        return len(self.labels)


# The most pages a result's predictions may come in (`PredictionsPage`).
MAX_PAGES = 10_000


@dataclass(frozen=True)
class PredictionsPage(Record):
    """A page of a result's predictions, posted before the result when they are too many for
    one body (`POST /api/v1/evaluations/<id>/result/predictions/`): page `page` (from 0) holds
    the rows from input `first` on, in order; the result then names the number of pages."""

    page: int
    first: int
    predictions: Predictions

    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> PredictionsPage:
        data = mapping(data, path)
        return super().from_dict(
            {key: value for key, value in data.items() if key != "claim"}, path
        )


@dataclass(frozen=True)
class ResultUpload(Record):
    """What an agent posts for a finished evaluation (with its claim beside it, which
    `from_dict` passes over).

    `latency` and `throughput` are keyed by batch size (as a string, JSON's keys); `stack` is
    the host's hardware and software; `details` the loop's full report."""

    accuracy: Headline
    latency: dict[str, BatchLatency]
    throughput: dict[str, float]
    predictions: Predictions
    content_hash: str
    stack: dict[str, Any]
    details: Report
    # The layer outputs of the job's `capture_inputs`: the capture file
    # (`predictors.analysis.divergence.Capture`), base64.
    layer_outputs: Maybe[str] = ABSENT

    @classmethod
    def from_dict(cls, data: Any, path: str = "") -> ResultUpload:
        data = mapping(data, path)
        return super().from_dict(
            {key: value for key, value in data.items() if key != "claim"}, path
        )
