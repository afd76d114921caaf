"""The trace reads under /api/v1/ (the OTLP receiver, `traces.api.receiver.otlp_receiver`, is
served at `/v1/traces`, OTLP/HTTP's standard path: see mlmodelscope/urls.py)."""

from django.urls import path

from traces.api import evaluation_trace, export, layers, search, timeline

urlpatterns = [
    path(
        "evaluations/<uuid:pk>/trace",
        evaluation_trace.EvaluationTrace.as_view(),
        name="api-evaluation-trace",
    ),
    path("traces/<str:trace_id>", export.TraceExport.as_view(), name="api-trace"),
    path(
        "traces/<str:trace_id>/timeline",
        timeline.TraceTimeline.as_view(),
        name="api-trace-timeline",
    ),
    path("traces/<str:trace_id>/layers", layers.TraceLayers.as_view(), name="api-trace-layers"),
    path("traces/<str:trace_id>/search", search.TraceSearch.as_view(), name="api-trace-search"),
    path(
        "traces/<str:trace_id>/selection",
        search.TraceSelection.as_view(),
        name="api-trace-selection",
    ),
    path(
        "traces/<str:trace_id>/spans/<str:span_id>",
        search.TraceSpan.as_view(),
        name="api-trace-span",
    ),
]
