"""Serializers of the evaluations API: the launch request, evaluations, results, agent reports."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from evaluations import outputs
from evaluations.listing import EvaluationSerializer
from evaluations.models import Evaluation, Result, StatusChange
from hub.api.fields import (
    BIGINT_MAX,
    BIGINT_MIN,
    FLOAT32_MAX,
    INTEGER_MAX,
    SMALLINT_MAX,
    KnownFields,
)
from predictors import statistics
from predictors.frameworks.predictor import FRAMEWORKS
from predictors.manifests.versioning import InvalidRange, validate_range
from predictors.protocol import (
    CPU,
    DEVICES,
    GPU,
    LATENCY_KEYS,
    LOST,
    MAX_REASON,
    JobOptions,
    ProtocolError,
    default_warmup,
)
from traces.actions import spans_stored


class _StrictFloatField(serializers.FloatField):
    """A number; `true` and `false` are refused (DRF's FloatField reads them as 1.0 and 0.0)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool):
            raise serializers.ValidationError(f"must be a number; got {str(data).lower()}")
        return super().to_internal_value(data)


def _option_field(spec: dataclasses.Field[Any]) -> serializers.Field[Any, Any, Any, Any]:
    """The launch request's field for a job option (`predictors.protocol.JobOptions`), with its
    bounds."""
    meta = spec.metadata
    common: dict[str, Any] = {"help_text": meta["help"]}
    default = spec.default
    if meta.get("nullable"):
        common["allow_null"] = True
    bounds = {
        key: meta[name]
        for key, name in (("min_value", "minimum"), ("max_value", "maximum"))
        if name in meta
    }
    if isinstance(default, bool):
        return serializers.BooleanField(default=default, **common)
    if isinstance(default, tuple):
        child: serializers.Field[Any, Any, Any, Any] = (
            serializers.CharField(max_length=meta["item_max_length"], trim_whitespace=False)
            if meta.get("item") == "str"
            else serializers.IntegerField(**bounds)
        )
        return serializers.ListField(
            child=child,
            min_length=meta.get("min_items", 1),
            max_length=meta.get("max_items"),
            default=list(default),
            **common,
        )
    if "choices" in meta:
        return serializers.ChoiceField(choices=list(meta["choices"]), default=default, **common)
    if "pattern" in meta:
        return serializers.RegexField(meta["pattern"], default=default, **common)
    if meta.get("number") == "float":
        return _StrictFloatField(default=default, **bounds, **common)
    return serializers.IntegerField(default=default, **bounds, **common)


class _JobOptionFields(serializers.SerializerMetaclass):
    """Adds a field per job option to the launch request serializer."""

    def __new__(mcs, name: str, bases: tuple[type, ...], attrs: dict[str, Any]) -> Any:
        for spec in dataclasses.fields(JobOptions):
            attrs.setdefault(spec.name, _option_field(spec))
        return super().__new__(mcs, name, bases, attrs)


class VersionRangeField(serializers.CharField):
    """An npm version range (`^1.2`, `>=1 <2`, `*`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 256)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = str(super().to_internal_value(data)).strip()
        if value:
            try:
                validate_range(value)
            except InvalidRange as error:
                raise serializers.ValidationError(str(error)) from None
        return value


class EvaluationRequestSerializer(KnownFields, metaclass=_JobOptionFields):
    """`POST /api/v1/evaluations/`. Unknown fields are refused, so a typo is never ignored.

    The fields that say where it runs are written here; those that say how the agent runs it
    are `predictors.protocol.JobOptions`'s, added by the metaclass."""

    model = serializers.RegexField(r"^[a-z0-9][a-z0-9._-]{0,63}$", help_text="model name")
    model_version = VersionRangeField(default="*", help_text="npm range, e.g. ^1.0")
    framework = serializers.ChoiceField(choices=list(FRAMEWORKS))
    framework_version = VersionRangeField(
        default="", allow_blank=True, help_text="npm range the host's framework must satisfy"
    )
    dataset = serializers.RegexField(r"^[a-z0-9][a-z0-9._-]{0,63}$", help_text="dataset name")
    dataset_version = VersionRangeField(default="*")
    device = serializers.ChoiceField(choices=list(DEVICES), default=CPU)
    gpu_model = serializers.CharField(
        max_length=128, allow_blank=True, default="", help_text="a substring of the GPU's name"
    )
    min_memory_gb = serializers.FloatField(
        min_value=0,
        allow_null=True,
        default=None,
        help_text="memory of the device it runs on: the GPU's for gpu, the host's for cpu",
    )
    arch = serializers.RegexField(
        r"^[a-z0-9_]{0,32}$", allow_blank=True, default="", help_text="amd64, arm64, …"
    )
    container_cpus = serializers.FloatField(
        min_value=0.01,
        max_value=1024,
        allow_null=True,
        default=None,
        help_text="CPUs the evaluation's container may use (runs only on hosts whose agent runs "
        "jobs in containers, `mlms agent --docker`; the host's own limit caps it)",
    )
    container_memory_mb = serializers.IntegerField(
        min_value=6,
        max_value=2**20,
        allow_null=True,
        default=None,
        help_text="memory (MiB) the evaluation's container may use (as container_cpus); a "
        "container that goes over it fails with 'out of memory'",
    )
    hosts = serializers.ChoiceField(choices=["one", "all"], default="one")
    host = serializers.RegexField(
        r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127})?$",
        allow_blank=True,
        default="",
        help_text="run on this host (one you may use: your own, your groups', the shared "
        "pool); empty to let the hub choose",
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            # A dict, as DRF's own non-field errors: a bare string here breaks `.errors`.
            raise serializers.ValidationError(
                {"non_field_errors": ["the request body must be a JSON object"]}
            )
        return super().to_internal_value(data)  # type: ignore[no-any-return]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["host"] and attrs["hosts"] == "all":
            raise serializers.ValidationError(
                {"host": ["names one host; hosts 'all' runs on every host that can"]}
            )
        if attrs["gpu_model"] and attrs["device"] != GPU:
            raise serializers.ValidationError({"gpu_model": ["needs device gpu"]})
        if "warmup" not in self.initial_data:  # none for a cold start (`predictors.protocol`)
            attrs["warmup"] = default_warmup(attrs["cold_start"])
        try:
            JobOptions.from_dict({name: attrs[name] for name in JobOptions.names()}, path="")
        except ProtocolError as error:
            raise serializers.ValidationError({error.path.strip("."): [error.message]}) from None
        return attrs


class StatusChangeSerializer(serializers.ModelSerializer[StatusChange]):
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = StatusChange
        fields = ["status", "reason", "at", "attempt", "host"]


class LatencyRowSerializer(serializers.Serializer[dict[str, Any]]):
    # A number per latency key (`predictors.protocol.LATENCY_KEYS`), first, then these.
    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        latency = {key: serializers.FloatField() for key in LATENCY_KEYS}
        return latency | super().get_fields()

    p50_low_ms = serializers.FloatField(
        allow_null=True, help_text=f"{statistics.MEDIAN_INTERVAL}: low end (null: not bounded)"
    )
    p50_high_ms = serializers.FloatField(
        allow_null=True, help_text=f"{statistics.MEDIAN_INTERVAL}: high end (null: not bounded)"
    )
    p90_bounded = serializers.BooleanField(
        allow_null=True, help_text="whether the samples bound p90's interval"
    )
    p99_bounded = serializers.BooleanField(
        allow_null=True, help_text="whether the samples bound p99's interval"
    )
    count = serializers.IntegerField(help_text="the batches the statistics cover")
    text = serializers.DictField(
        child=serializers.CharField(),
        help_text="each figure as the pages, CSV and CLI print it: p50, p50_interval, p90, "
        "p99, mean, std, min, max, headline",
    )


class ResultSerializer(serializers.ModelSerializer[Result]):
    accuracy = serializers.SerializerMethodField()
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    latency = serializers.DictField(
        child=LatencyRowSerializer(), read_only=True, help_text="by batch size"
    )
    throughput = serializers.DictField(
        child=serializers.FloatField(), read_only=True, help_text="inputs per second, by batch size"
    )

    class Meta:
        model = Result
        fields = [
            "accuracy",
            "latency",
            "throughput",
            "content_hash",
            "cpu_model",
            "gpu_model",
            "host",
            "stack",
            "details",
            "created_at",
        ]

    def get_accuracy(self, result: Result) -> dict[str, Any]:
        return {"top1": result.top1, "top5": result.top5, "count": result.count}


class ResultWithPredictionsSerializer(ResultSerializer):
    """With every input's predictions (`?predictions=1`; a page at a time:
    `GET /api/v1/evaluations/<id>/predictions/`)."""

    predictions = serializers.SerializerMethodField()

    class Meta(ResultSerializer.Meta):
        fields = [*ResultSerializer.Meta.fields, "predictions"]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_predictions(self, result: Result) -> dict[str, Any] | None:
        """{"top_k", "labels", "classes", "probabilities"}: one row per input."""
        if not result.predictions_path:
            return None
        return {"top_k": result.top_k, **outputs.read_all(result.predictions_path)}


class SpanCountsSerializer(serializers.Serializer[dict[str, Any]]):
    sent = serializers.IntegerField(
        allow_null=True,
        help_text="the spans the agent sent for the attempt that produced the result "
        "(null until a result says)",
    )
    stored = serializers.IntegerField(
        help_text="the spans the hub stored for the evaluation's current attempt"
    )


class EvaluationDetailSerializer(EvaluationSerializer):
    """One evaluation with its request, status history, result and span counts."""

    history = StatusChangeSerializer(many=True, read_only=True)
    result = serializers.SerializerMethodField()
    spans = serializers.SerializerMethodField()

    class Meta(EvaluationSerializer.Meta):
        fields = [*EvaluationSerializer.Meta.fields, "request", "history", "result", "spans"]
        read_only_fields = fields

    @extend_schema_field(SpanCountsSerializer)
    def get_spans(self, evaluation: Evaluation) -> dict[str, Any]:
        result = getattr(evaluation, "result", None)
        sent = None
        if result is not None and isinstance(result.details.get("spans"), dict):
            sent = result.details["spans"].get("sent")
        return {"sent": sent, "stored": spans_stored(evaluation)}

    def get_result(self, evaluation: Evaluation) -> dict[str, Any] | None:
        result = getattr(evaluation, "result", None)
        if result is None:
            return None
        full = self.context.get("predictions", False)
        serializer = ResultWithPredictionsSerializer if full else ResultSerializer
        return dict(serializer(result).data)


# -- what agents send ------------------------------------------------------------------------


class ClaimSerializer(serializers.Serializer[dict[str, Any]]):
    host = serializers.IntegerField(
        min_value=1, max_value=BIGINT_MAX, help_text="the id of the agent's host"
    )
    dispatch = serializers.IntegerField(
        min_value=1, max_value=INTEGER_MAX, help_text="the message's dispatch number"
    )


class ProgressSerializer(serializers.Serializer[dict[str, Any]]):
    claim = serializers.RegexField(r"^[0-9a-f]{32}$")
    done = serializers.IntegerField(min_value=0, max_value=INTEGER_MAX)
    total = serializers.IntegerField(min_value=0, max_value=INTEGER_MAX)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["done"] > attrs["total"]:
            raise serializers.ValidationError({"done": ["is more than total"]})
        return attrs


class AgentStatusSerializer(serializers.Serializer[dict[str, Any]]):
    claim = serializers.RegexField(r"^[0-9a-f]{32}$")
    status = serializers.ChoiceField(choices=[Evaluation.FAILED, Evaluation.CANCELLED, LOST])
    reason = serializers.CharField(max_length=MAX_REASON, allow_blank=True, default="")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["status"] in (Evaluation.FAILED, LOST) and not attrs["reason"].strip():
            raise serializers.ValidationError(
                {"reason": [f"a {attrs['status']} report must say why"]}
            )
        return attrs


class AccuracySerializer(serializers.Serializer[dict[str, Any]]):
    top1 = serializers.FloatField(
        min_value=0,
        allow_null=True,
        help_text="the task's first metric: a fraction from 0 to 1 (top-1, mAP, mIoU, …), or "
        "for regression the mean absolute error in the target's units, for text_recognition "
        "the character error rate (0 is perfect; insertions can take it past 1), for "
        "feature_extraction the recall@1 of retrieval; null for a "
        "latency-only evaluation (nothing scored)",
    )
    top5 = serializers.FloatField(
        min_value=0,
        allow_null=True,
        help_text="the task's second metric (top-5, F1, pixel accuracy, …; for regression the "
        "RMSE, for text_recognition the word error rate, for feature_extraction the recall@5); null where it says nothing, as top-5 of five classes or fewer",
    )
    count = serializers.IntegerField(min_value=0, max_value=INTEGER_MAX)


# The most timed batches one batch size of a result may carry.
MAX_SAMPLES = 1_000_000


@extend_schema_field({"type": "array", "items": {"type": "number", "minimum": 0}})
class SamplesField(serializers.Field):  # type: ignore[type-arg]
    """A list of latencies in ms, each a finite number ≥ 0, at most `MAX_SAMPLES` (checked
    with numpy: a result may carry many)."""

    def to_internal_value(self, data: Any) -> list[float]:
        if not isinstance(data, list):
            raise serializers.ValidationError(
                f"must be a list of numbers; got {type(data).__name__}"
            )
        if not data or len(data) > MAX_SAMPLES:
            raise serializers.ValidationError(
                f"must hold 1 to {MAX_SAMPLES:,} samples; got {len(data):,}"
            )
        if any(isinstance(value, bool) or not isinstance(value, int | float) for value in data):
            raise serializers.ValidationError("must hold numbers only")
        values = np.asarray(data, dtype=np.float64)
        if not np.all(np.isfinite(values)) or values.min() < 0:
            raise serializers.ValidationError("must hold finite numbers of 0 or more")
        return values.tolist()

    def to_representation(self, value: Any) -> Any:
        return value


class LatencySerializer(serializers.Serializer[dict[str, Any]]):
    # A number of 0 or more per latency key (`predictors.protocol.LATENCY_KEYS`), first, then
    # these.
    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        latency = {key: serializers.FloatField(min_value=0) for key in LATENCY_KEYS}
        return latency | super().get_fields()

    count = serializers.IntegerField(min_value=1, max_value=INTEGER_MAX)
    p50_low_ms = serializers.FloatField(min_value=0, allow_null=True, required=False)
    p50_high_ms = serializers.FloatField(min_value=0, allow_null=True, required=False)
    p90_bounded = serializers.BooleanField(required=False)
    p99_bounded = serializers.BooleanField(required=False)
    samples_ms = SamplesField(
        required=False,
        help_text="each timed batch's latency in ms, in the order timed (`count` of them): "
        "the hub computes every figure above from them (`predictors.statistics`)",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        samples = attrs.get("samples_ms")
        if samples is not None and len(samples) != attrs["count"]:
            raise serializers.ValidationError(
                {"samples_ms": [f"must hold count ({attrs['count']}) samples; got {len(samples)}"]}
            )
        return attrs


class PredictionsSerializer(serializers.Serializer[dict[str, Any]]):
    top_k = serializers.IntegerField(min_value=1, max_value=SMALLINT_MAX)
    labels = serializers.ListField(child=serializers.IntegerField())
    classes = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))
    probabilities = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField())
    )
    boxes = serializers.ListField(
        child=serializers.ListField(
            child=serializers.ListField(
                child=serializers.FloatField(min_value=-1e7, max_value=1e7),
                min_length=4,
                max_length=4,
            )
        ),
        required=False,
        help_text="a detector's: per input, the [x, y, w, h] of each of its classes",
    )
    texts = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=10_000),
        required=False,
        help_text="a text recognizer's: per input, the text it decoded",
    )
    pages = serializers.IntegerField(
        min_value=1,
        max_value=outputs.MAX_PAGES,
        required=False,
        help_text="in a result: the number of pages its rows were posted in beforehand "
        "(`POST …/result/predictions/`); the lists above are then empty",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        count = len(attrs["labels"])
        if "pages" in attrs:
            held = [
                name
                for name in ("labels", "classes", "probabilities", "boxes", "texts")
                if attrs.get(name)
            ]
            if held:
                raise serializers.ValidationError(
                    {held[0]: ["must be empty where pages is given (the rows come in pages)"]}
                )
        # The stored columns' ranges (`evaluations.outputs`): int64 classes (a form's values are
        # text, which no parser bounds) and float32 probabilities (a larger double would be
        # stored as infinity, which no answer can carry).
        for name, rows, low, high, kind in (
            ("labels", [attrs["labels"]], BIGINT_MIN, BIGINT_MAX, "a 64-bit integer"),
            ("classes", attrs["classes"], BIGINT_MIN, BIGINT_MAX, "a 64-bit integer"),
            ("probabilities", attrs["probabilities"], -FLOAT32_MAX, FLOAT32_MAX, "a 32-bit float"),
        ):
            for index, row in enumerate(rows):
                if row and (min(row) < low or max(row) > high):
                    where = name if name == "labels" else f"{name}.{index}"
                    raise serializers.ValidationError(
                        {where: [f"holds a value beyond the range of {kind}"]}
                    )
        for name in ("classes", "probabilities", "boxes", "texts"):
            if name in attrs and len(attrs[name]) != count:
                raise serializers.ValidationError(
                    {name: [f"has {len(attrs[name])} rows for {count} labels"]}
                )
        texts = "texts" in attrs
        for row, (classes, probabilities) in enumerate(
            zip(attrs["classes"], attrs["probabilities"], strict=False)
        ):
            # One probability per class; none only for a text decoded from emitted token ids.
            if len(probabilities) != len(classes) and not (texts and not probabilities):
                raise serializers.ValidationError(
                    {
                        f"probabilities.{row}": [
                            f"has {len(probabilities)} values for {len(classes)} classes"
                        ]
                    }
                )
        for row, (classes, boxes) in enumerate(
            zip(attrs["classes"], attrs.get("boxes") or [], strict=False)
        ):
            if len(boxes) != len(classes):
                raise serializers.ValidationError(
                    {"boxes": [f"row {row} has {len(boxes)} boxes for {len(classes)} classes"]}
                )
        return attrs


class PredictionsPageSerializer(serializers.Serializer[dict[str, Any]]):
    """The values of a page of a result's predictions (its shape is the protocol's
    `PredictionsPage`)."""

    claim = serializers.RegexField(r"^[0-9a-f]{32}$")
    page = serializers.IntegerField(
        min_value=0, max_value=outputs.MAX_PAGES - 1, help_text="the page's number, from 0"
    )
    first = serializers.IntegerField(
        min_value=0, max_value=INTEGER_MAX, help_text="the index of the page's first input"
    )
    predictions = PredictionsSerializer(help_text="the page's rows (no `pages`)")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "pages" in attrs["predictions"]:
            raise serializers.ValidationError(
                {"predictions": ["pages is for the result, not for one of its pages"]}
            )
        if not attrs["predictions"]["labels"]:
            raise serializers.ValidationError({"predictions": ["a page holds at least one row"]})
        return attrs


class ResultUploadSerializer(serializers.Serializer[dict[str, Any]]):
    """The values of a result upload (its shape, every key and type, is the protocol's:
    `evaluations.api.result` reads it with `ResultUpload.from_dict` first)."""

    claim = serializers.RegexField(r"^[0-9a-f]{32}$")
    accuracy = AccuracySerializer()
    latency = serializers.DictField(child=LatencySerializer(), help_text="by batch size")
    throughput = serializers.DictField(
        child=serializers.FloatField(min_value=0), help_text="inputs per second, by batch size"
    )
    predictions = PredictionsSerializer()
    content_hash = serializers.RegexField(r"^[0-9a-f]{64}$")
    stack = serializers.DictField(help_text="the host's hardware and software")
    details = serializers.DictField(
        help_text="the evaluation loop's report (`predictors.protocol.Report`): the keys it "
        "names and no other, at any level (an unknown key is refused, naming its path)"
    )
    layer_outputs = serializers.CharField(
        required=False,
        trim_whitespace=False,
        help_text="the layer outputs of the job's capture_inputs: the capture file "
        "(`predictors.analysis.divergence.Capture`), base64; only for a job that named "
        "capture_inputs",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if set(attrs["throughput"]) != set(attrs["latency"]):
            raise serializers.ValidationError(
                {"throughput": ["must name the same batch sizes as latency"]}
            )
        paged = "pages" in attrs["predictions"]  # counted when the pages are assembled
        if not paged and len(attrs["predictions"]["labels"]) != attrs["accuracy"]["count"]:
            raise serializers.ValidationError(
                {"predictions": ["must hold one row per input that accuracy counts"]}
            )
        spans = attrs["details"].get("spans")
        if spans is not None and not (
            isinstance(spans, dict)
            and isinstance(spans.get("sent"), int)
            and not isinstance(spans.get("sent"), bool)
            and spans["sent"] >= 0
        ):
            raise serializers.ValidationError(
                {"details": ["spans must be an object whose 'sent' is a count (0 or more)"]}
            )
        return attrs
