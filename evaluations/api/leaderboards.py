"""`GET /api/v1/leaderboards/` and `GET /api/v1/leaderboards/<task>/<dataset>/`: the public
leaderboards (`evaluations.leaderboards`), readable without signing in, as JSON or as CSV
(`?format=csv`: every row that matches the filters, not a page)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import generics, renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import leaderboards
from hub.errors import Invalid

READ_SCOPES = ("read", "evaluate")


class CSVRenderer(renderers.BaseRenderer):
    """Lets `?format=csv` (and `Accept: text/csv`) through content negotiation; the view writes
    the CSV itself, streaming every row."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        # Nothing reaches here: the view streams the rows itself, and an error is answered in
        # JSON whatever format was asked for (`finalize_response`).
        return b""


BOARDS = inline_serializer(
    "Leaderboard",
    many=True,
    fields={
        "task": serializers.CharField(),
        "dataset": serializers.CharField(),
        "title": serializers.CharField(),
        "entries": serializers.IntegerField(help_text="published results on the board"),
        "url": serializers.CharField(help_text="the board's page"),
        "api_url": serializers.CharField(),
    },
)

ROW = inline_serializer(
    "LeaderboardRow",
    {
        "evaluation": serializers.UUIDField(),
        "url": serializers.CharField(help_text="the evaluation's page"),
        "model": serializers.CharField(),
        "model_version": serializers.CharField(),
        "framework": serializers.CharField(),
        "framework_version": serializers.CharField(),
        "device": serializers.CharField(),
        "hardware": serializers.CharField(help_text="the GPU's name for a GPU run, else the CPU's"),
        "cpu_model": serializers.CharField(),
        "gpu_model": serializers.CharField(),
        "host": serializers.CharField(),
        "dataset_version": serializers.CharField(),
        "split": serializers.CharField(),
        "count": serializers.IntegerField(help_text="inputs evaluated"),
        "top1": serializers.FloatField(),
        "top5": serializers.FloatField(allow_null=True, help_text="null for five classes or fewer"),
        "p50_ms": serializers.FloatField(
            allow_null=True, help_text="the median latency at batch size 1 (the headline)"
        ),
        "p50_low_ms": serializers.FloatField(
            allow_null=True,
            help_text="its distribution-free 95 % interval: low end (null: not bounded)",
        ),
        "p50_high_ms": serializers.FloatField(
            allow_null=True, help_text="its 95 % interval: high end (null: not bounded)"
        ),
        "p99_ms": serializers.FloatField(allow_null=True, help_text="at batch size 1"),
        "throughput": serializers.FloatField(allow_null=True, help_text="the best, inputs/s"),
        "throughput_batch_size": serializers.IntegerField(allow_null=True),
        "date": serializers.DateTimeField(allow_null=True),
        "content_hash": serializers.CharField(help_text="the model manifest's content hash"),
        "os": serializers.CharField(),
        "python": serializers.CharField(),
        "threads": serializers.IntegerField(allow_null=True),
        "seed": serializers.IntegerField(),
        "overrides": serializers.ListField(child=serializers.CharField()),
        "trace_level": serializers.CharField(),
        "agreeing_runs": serializers.IntegerField(
            help_text="published runs of this configuration that agree with this one, itself "
            "included (tolerance: " + leaderboards.TOLERANCE_TEXT + ")"
        ),
    },
)

_CSV_COLUMNS = (
    "model",
    "model_version",
    "framework",
    "framework_version",
    "device",
    "hardware",
    "host",
    "dataset_version",
    "split",
    "count",
    "top1",
    "top5",
    "p50_ms",
    "p50_low_ms",
    "p50_high_ms",
    "p99_ms",
    "throughput",
    "throughput_batch_size",
    "date",
    "content_hash",
    "threads",
    "seed",
    "overrides",
    "agreeing_runs",
    "evaluation",
)


class LeaderboardList(generics.GenericAPIView[Any]):
    anonymous_methods = ("GET", "HEAD")
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}
    query_parameters = ()
    pagination_class = None

    @extend_schema(summary="The public leaderboards, one per task and dataset", responses=BOARDS)
    def get(self, request: Request) -> Response:
        return Response(
            [
                {
                    "task": board.task,
                    "dataset": board.dataset,
                    "title": board.title,
                    "entries": board.entries,
                    "url": board.url(),
                    "api_url": board.api_url(),
                }
                for board in leaderboards.boards()
            ]
        )


@extend_schema(
    summary="One leaderboard's rows (JSON, a page at a time; or CSV, every row)",
    parameters=[
        OpenApiParameter(
            name,
            OpenApiTypes.STR,
            enum=list(choices) or None,
            description=f"only rows of this {name}"
            + (" (exact: the GPU's or the CPU's name)" if name == "hardware" else ""),
        )
        for name, (_lookup, choices) in leaderboards.FILTERS.items()
    ]
    + [
        OpenApiParameter(
            "ordering",
            OpenApiTypes.STR,
            enum=list(leaderboards.ORDERINGS),
            description=f"sort by a column, `-` for descending (default: the best first, "
            f"{leaderboards.DEFAULT_ORDERING}; on a board of errors, a regression's, top1); rows "
            "without the value come last",
        ),
        OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"]),
    ],
    responses={(200, "application/json"): ROW, (200, "text/csv"): OpenApiTypes.STR},
)
class LeaderboardDetail(generics.ListAPIView[Any]):
    anonymous_methods = ("GET", "HEAD")
    required_scopes = {"GET": READ_SCOPES, "HEAD": READ_SCOPES}
    query_parameters = (*leaderboards.FILTERS, "ordering", "format")
    renderer_classes = [renderers.JSONRenderer, renderers.BrowsableAPIRenderer, CSVRenderer]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        given = request.query_params.get("format")
        if given is not None and given not in ("json", "csv"):
            # Content negotiation takes an empty format for none given: refuse it, naming it.
            raise Invalid(f"format must be json or csv; got {given!r}", path="format")
        entries = leaderboards.board_entries(
            kwargs["task"], kwargs["dataset"], request.query_params
        )
        if getattr(request.accepted_renderer, "format", "") == "csv":
            paged = [name for name in ("page", "page_size") if name in request.query_params]
            if paged:
                raise Invalid(
                    f"format=csv answers every row: leave out {' and '.join(paged)}",
                    path=paged[0],
                )
            name = f"leaderboard-{kwargs['dataset']}-{kwargs['task']}.csv"
            response = StreamingHttpResponse(_csv(entries), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            return response
        page = self.paginate_queryset(entries)  # type: ignore[arg-type]
        return self.get_paginated_response(leaderboards.rows(page or []))

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        # An error is JSON, whatever format was asked for.
        if response.status_code >= 400 and getattr(request, "accepted_renderer", None):
            if getattr(request.accepted_renderer, "format", "") == "csv":
                request.accepted_renderer = renderers.JSONRenderer()
                request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)


def _csv(entries: Any) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def flush() -> str:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    writer.writerow(_CSV_COLUMNS)
    yield flush()
    chunk: list[Any] = []
    for item in entries.iterator(chunk_size=500):
        chunk.append(item)
        if len(chunk) == 500:
            yield from _csv_rows(writer, chunk, flush)
            chunk = []
    yield from _csv_rows(writer, chunk, flush)


def _csv_rows(writer: Any, chunk: list[Any], flush: Any) -> Iterator[str]:
    for row in leaderboards.rows(chunk):
        row["overrides"] = " ".join(row["overrides"])
        writer.writerow(["" if row[name] is None else row[name] for name in _CSV_COLUMNS])
    yield flush()
