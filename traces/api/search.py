"""`GET /api/v1/traces/<trace_id>/search?q=&fields=&offset=&limit=`: spans anywhere in a
trace whose name, op type or layer name holds a text; and
`GET /api/v1/traces/<trace_id>/spans/<span_id>`: one span's place, parent and children."""

from __future__ import annotations

import re

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from hub.api.errors import ApiError
from traces import search
from traces.api.common import TRACE_ID, TraceView, int_param, int_schema, readable

MAX_QUERY = 200
MAX_LIMIT = 1000
_SPAN_ID = re.compile(r"^[0-9a-f]{16}$")


class TraceSearch(TraceView):
    query_parameters = ("q", "fields", "offset", "limit")

    @extend_schema(
        summary="Spans anywhere in a trace whose name, op type or layer name holds a text",
        description=(
            "Case is ignored. The matches come in time order (then longest first); `total` "
            "counts all of them, `spans` holds `limit` of them from the `offset`-th. Counter "
            "samples are not searched."
        ),
        parameters=[
            TRACE_ID,
            OpenApiParameter(
                "q",
                {"type": "string", "minLength": 1, "maxLength": MAX_QUERY},
                required=True,
                description="the text to find, e.g. Conv",
            ),
            OpenApiParameter(
                "fields",
                OpenApiTypes.STR,
                description="comma-separated, of " + ", ".join(search.FIELDS) + " (default all)",
            ),
            OpenApiParameter("offset", int_schema(0), description="default 0"),
            OpenApiParameter(
                "limit", int_schema(1), description=f"default 100, at most {MAX_LIMIT}"
            ),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        readable(request, trace_id)
        text = request.query_params.get("q", "")
        if not text.strip():
            raise ApiError([{"path": "q", "message": "q must name the text to find."}])
        if len(text) > MAX_QUERY:
            raise ApiError([{"path": "q", "message": f"q may be at most {MAX_QUERY} characters."}])
        raw_fields = request.query_params.get("fields")
        fields = tuple(search.FIELDS)
        if raw_fields is not None:
            fields = tuple(f.strip() for f in raw_fields.split(",") if f.strip())
            unknown = [f for f in fields if f not in search.FIELDS]
            if unknown or not fields:
                raise ApiError(
                    [
                        {
                            "path": "fields",
                            "message": "fields must be a comma-separated list of "
                            + ", ".join(search.FIELDS)
                            + (f"; not {', '.join(unknown)}" if unknown else ""),
                        }
                    ]
                )
        offset = int_param(request, "offset", 0) or 0
        limit = min(int_param(request, "limit", 100, minimum=1) or 100, MAX_LIMIT)
        found = search.search(trace_id, text, fields, offset, limit)
        return Response(
            {
                "trace_id": trace_id,
                "q": text,
                "fields": list(fields),
                "total": found.total,
                "offset": offset,
                "spans": found.spans,
            }
        )


class TraceSpan(TraceView):
    @extend_schema(
        summary="One span of a trace: its place, its parent and its children",
        parameters=[
            TRACE_ID,
            OpenApiParameter(
                "span_id",
                OpenApiTypes.STR,
                OpenApiParameter.PATH,
                pattern="^[0-9a-f]{16}$",
                description="16 lowercase hex digits",
            ),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str, span_id: str) -> Response:
        readable(request, trace_id)
        if not _SPAN_ID.match(span_id):
            raise ApiError([{"path": "span_id", "message": "span_id must be 16 hex digits."}])
        found, children = search.span(trace_id, span_id)
        if found is None:
            raise Http404(f"Trace {trace_id} has no span {span_id}.")
        return Response(
            {
                "trace_id": trace_id,
                "span": found,
                "children": children,
                "children_shown": len(children),
                "max_children": search.MAX_CHILDREN,
            }
        )


MAX_TOP = 100


class TraceSelection(TraceView):
    query_parameters = ("start", "end", "top")

    @extend_schema(
        summary="Statistics of every span of a trace in a time range (an area selection)",
        description=(
            "Every span overlapping [start, end], not only those a window draws: `total`, how "
            "many per level (`levels`), per level the time in the range covered by its spans "
            "(`busy_ns`: overlapping spans counted once), and per (level, name, op type) the "
            "count and the time spent inside the range (`inside_ns`, clipped to it), the `top` "
            "of most time first. Counter samples are left out."
        ),
        parameters=[
            TRACE_ID,
            OpenApiParameter("start", int_schema(0), required=True, description="Unix ns"),
            OpenApiParameter(
                "end", int_schema(0), required=True, description="Unix ns, after start"
            ),
            OpenApiParameter("top", int_schema(1), description=f"default 20, at most {MAX_TOP}"),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, trace_id: str) -> Response:
        readable(request, trace_id)
        start = int_param(request, "start", None)
        end = int_param(request, "end", None)
        for name, value in (("start", start), ("end", end)):
            if value is None:
                raise ApiError([{"path": name, "message": f"{name} is required (Unix ns)."}])
        assert start is not None and end is not None
        if end <= start:
            raise ApiError(
                [{"path": "end", "message": f"end ({end}) must be after start ({start})."}]
            )
        top = min(int_param(request, "top", 20, minimum=1) or 20, MAX_TOP)
        chosen = search.selection(trace_id, start, end, top)
        return Response(
            {
                "trace_id": trace_id,
                "start": start,
                "end": end,
                "total": chosen.total,
                "levels": chosen.levels,
                "busy_ns": chosen.busy_ns,
                "top": chosen.top,
            }
        )
