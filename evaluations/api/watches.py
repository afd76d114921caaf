"""`/api/v1/watches/`: a pinned launch request re-run by hand or on a schedule, and the series of
its runs, each labelled regression, improvement or noise (`evaluations.watches`).

    GET, POST /api/v1/watches/              your watches; create one
    GET, DELETE /api/v1/watches/<id>/       one, with its series; delete it (its runs stay)
    POST /api/v1/watches/<id>/runs/         launch a run, job options changed for it only

A watch is its owner's alone: another user's is a 404 on every path.
"""

from __future__ import annotations

import copy
from typing import Any
from uuid import UUID

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import watches
from evaluations.api.evaluations import READ_SCOPES, visible_evaluations
from evaluations.api.serializers import (
    EvaluationDetailSerializer,
    EvaluationRequestSerializer,
    LatencyRowSerializer,
)
from evaluations.models import Watch
from hub.api.errors import ApiError, valid_body
from hub.api.fields import KnownFields
from hub.api.openapi import error_response
from predictors import statistics
from predictors.protocol import JobOptions

WRITE_SCOPES = ("write", "evaluate")
NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class WatchCreateSerializer(KnownFields):
    name = serializers.RegexField(NAME, help_text="unique among your watches")
    request = serializers.JSONField(
        help_text="the launch request, exactly what POST /api/v1/evaluations/ takes (its "
        "`host` pins the watch to a host); `hosts: all` is refused"
    )
    batch_size = serializers.IntegerField(
        min_value=1,
        allow_null=True,
        default=None,
        help_text="the batch size whose latency the series follows: one of the request's "
        "(default: its first)",
    )
    every = serializers.IntegerField(
        min_value=Watch.MIN_EVERY,
        max_value=Watch.MAX_EVERY,
        allow_null=True,
        default=None,
        help_text="minutes between scheduled runs (null: run by hand only); the first is due "
        "at once",
    )


class WatchSerializer(serializers.ModelSerializer[Watch]):
    model = serializers.CharField(source="model_name", read_only=True)
    framework = serializers.SerializerMethodField()
    dataset = serializers.SerializerMethodField()
    host = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    runs = serializers.IntegerField(read_only=True, source="run_count", help_text="its runs")

    class Meta:
        model = Watch
        fields = [
            "id",
            "name",
            "model",
            "framework",
            "dataset",
            "batch_size",
            "host",
            "every",
            "next_run_at",
            "last_error",
            "request",
            "runs",
            "created_at",
            "updated_at",
        ]

    def get_framework(self, watch: Watch) -> str:
        return str(watch.request.get("framework", ""))

    def get_dataset(self, watch: Watch) -> str:
        return str(watch.request.get("dataset", ""))


class ChangeSerializer(serializers.Serializer[dict[str, Any]]):
    section = serializers.CharField(help_text="request, processing, stack or image packages")
    key = serializers.CharField()
    # The values as the runs hold them: a string, a number, a list, null.
    before = serializers.JSONField(help_text="the reference run's value")
    after = serializers.JSONField(help_text="this run's value")


class EvidenceSerializer(serializers.Serializer[dict[str, Any]]):
    level_ms = serializers.FloatField(
        allow_null=True,
        help_text="the level of the runs compared with (geometric mean of their medians)",
    )
    ratio = serializers.FloatField(
        allow_null=True,
        help_text="this run's median over the median of its segment's samples (low and high "
        "are its interval)",
    )
    low = serializers.FloatField(
        allow_null=True,
        help_text="95 % interval of the ratio of medians against the segment's samples: low",
    )
    high = serializers.FloatField(allow_null=True, help_text="… high")
    p_value = serializers.FloatField(allow_null=True, help_text="Mann–Whitney U, two-sided")
    noise = serializers.FloatField(
        allow_null=True,
        help_text="the share beyond which this run is called: the prediction interval of one "
        "more run, from the measured noise",
    )
    run_noise = serializers.FloatField(
        allow_null=True,
        help_text="the measured spread of the runs' medians (a standard deviation, as a share)",
    )
    history = serializers.IntegerField(help_text="the runs behind the measured noise")
    segment = serializers.ListField(
        child=serializers.IntegerField(), help_text="the runs (numbers) compared with"
    )
    test = serializers.CharField()


class RunSerializer(serializers.Serializer[dict[str, Any]]):
    number = serializers.IntegerField(help_text="its place in the series, from 1")
    evaluation = serializers.UUIDField()
    status = serializers.CharField()
    created_at = serializers.DateTimeField()
    host = serializers.CharField(allow_null=True)
    options = serializers.DictField(help_text="the job options this run changed against the watch")
    latency = LatencyRowSerializer(
        allow_null=True, help_text="at the watch's batch size (`statistics.latency`)"
    )
    verdict = serializers.ChoiceField(
        choices=list(statistics.SERIES_VERDICTS),
        allow_null=True,
        help_text="null: not measured (not succeeded, or no samples)",
    )
    words = serializers.CharField(help_text="the verdict as the pages print it")
    note = serializers.CharField(
        help_text="what later runs showed of it (an outlier, a level shift)"
    )
    evidence = EvidenceSerializer(allow_null=True)
    reference = serializers.IntegerField(
        allow_null=True, help_text="the run (number) what changed is named against"
    )
    changed = ChangeSerializer(many=True, help_text="what differs from the reference run")
    changed_text = serializers.CharField()


SERIES_SUMMARY = inline_serializer(
    "WatchSummary",
    {
        "runs": serializers.IntegerField(),
        "regressions": serializers.IntegerField(),
        "improvements": serializers.IntegerField(),
        "latest": serializers.CharField(
            allow_null=True, help_text="the latest measured run's verdict (null: none yet)"
        ),
    },
)


class WatchDetailSerializer(WatchSerializer):
    series = RunSerializer(many=True, read_only=True)
    summary = SERIES_SUMMARY

    class Meta(WatchSerializer.Meta):
        fields = [*WatchSerializer.Meta.fields, "summary", "series"]


# The body of a run: the job options of a launch, each optional.
RUN_OPTIONS = inline_serializer(
    "WatchRunOptions",
    {
        name: copy.deepcopy(EvaluationRequestSerializer().fields[name])
        for name in JobOptions.names()
    },
)


def watch_detail(watch: Watch) -> dict[str, Any]:
    """A watch (of `watches.watches_of`) with its series and summary, as
    `GET /api/v1/watches/<id>/` answers."""
    entries = watches.series(watch)
    body = dict(WatchSerializer(watch).data)
    body["summary"] = watches.summary(entries)
    body["series"] = RunSerializer(entries, many=True).data
    return body


@extend_schema_view(
    get=extend_schema(
        summary="Your watches",
        parameters=[
            OpenApiParameter("model", OpenApiTypes.STR, description="only watches of this model"),
            OpenApiParameter("name", OpenApiTypes.STR, description="the watch of this name"),
        ],
    ),
    post=extend_schema(
        summary="Watch a launch request: re-run it by hand or every `every` minutes",
        request=WatchCreateSerializer,
        responses={
            201: WatchSerializer,
            404: error_response(404, "No such model, dataset or host (that you may use)."),
            409: error_response(409, "You have a watch of that name already."),
        },
    ),
)
class WatchList(generics.ListAPIView[Watch]):
    query_parameters = {"GET": ("model", "name"), "POST": ()}
    serializer_class = WatchSerializer
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES, "POST": "evaluate"}

    def get_queryset(self) -> QuerySet[Watch]:
        found = watches.watches_of(self.request.user)
        for parameter, field in (("model", "model_name"), ("name", "name")):
            value = self.request.query_params.get(parameter)
            if value is not None:
                found = found.filter(**{field: value})
        return found

    def post(self, request: Request) -> Response:
        data = valid_body(WatchCreateSerializer, request)
        watch = watches.create_watch(request.user, **data)  # type: ignore[arg-type]
        return Response(
            WatchSerializer(watches.watches_of(request.user).get(pk=watch.pk)).data,
            status=status.HTTP_201_CREATED,
        )


@extend_schema_view(
    get=extend_schema(
        summary="A watch with its series: each run's median and interval, verdict, evidence "
        "and what changed",
        responses=WatchDetailSerializer,
    ),
    delete=extend_schema(summary="Delete a watch (its runs stay, as evaluations)"),
)
class WatchDetail(generics.GenericAPIView[Watch]):
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES, "DELETE": WRITE_SCOPES}
    serializer_class = WatchDetailSerializer

    def get(self, request: Request, pk: UUID) -> Response:
        watch = generics.get_object_or_404(watches.watches_of(request.user), pk=pk)
        return Response(watch_detail(watch))

    def delete(self, request: Request, pk: UUID) -> Response:
        watches.get_watch(request.user, pk).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


LAUNCHED_RUN = inline_serializer(
    "WatchRun",
    {"watch": serializers.UUIDField(), "evaluation": EvaluationDetailSerializer()},
)


@extend_schema_view(
    post=extend_schema(
        summary="Launch a run of a watch now, with job options changed for this run only",
        request=RUN_OPTIONS,
        responses={201: LAUNCHED_RUN},
    )
)
class WatchRuns(generics.GenericAPIView[Watch]):
    required_scopes = {"POST": "evaluate"}
    serializer_class = None

    def post(self, request: Request, pk: UUID) -> Response:
        watch = watches.get_watch(request.user, pk)
        if not isinstance(request.data, dict):
            raise ApiError([{"path": "", "message": "the body must be a JSON object"}])
        evaluation = watches.run_watch(watch, request.data)
        detail = EvaluationDetailSerializer(
            visible_evaluations(request).get(pk=evaluation.pk), context={"request": request}
        ).data
        return Response(
            {"watch": str(watch.pk), "evaluation": detail}, status=status.HTTP_201_CREATED
        )
