"""The public leaderboards (`evaluations.leaderboards`): readable without signing in."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from evaluations import leaderboards
from frontend import display
from hub.errors import Invalid
from predictors.frameworks.predictor import FRAMEWORKS
from predictors.protocol import DEVICES
from predictors.tasks import LOWER_IS_BETTER, PERCENT_ERRORS

# The most points the accuracy-against-latency plot draws (the most accurate first).
PLOT_POINTS = 2000
PAGE_SIZE = 50
# An evaluation URL's id, replaced per point (reverse() per point costs more than the query).
_PLACEHOLDER = "00000000-0000-4000-8000-000000000000"


def index(request: HttpRequest) -> HttpResponse:
    boards = leaderboards.boards()
    return render(request, "frontend/leaderboards.html", {"boards": boards})


def board(request: HttpRequest, task: str, dataset: str) -> HttpResponse:
    if not leaderboards.scored().filter(task=task, dataset_name=dataset).exists():
        raise Http404(f"No leaderboard for {dataset} ({task}).")
    params = {
        name: value
        for name, value in request.GET.items()
        if name in (*leaderboards.FILTERS, "ordering") and value != ""
    }
    error = ""
    try:
        entries = leaderboards.board_entries(task, dataset, params)
    except Invalid as problem:
        error = problem.message
        params = {}
        entries = leaderboards.board_entries(task, dataset, {})
    paginator = Paginator(entries, PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    rows = leaderboards.rows(page.object_list)
    for row in rows:
        row["framework_name"] = display.framework_name(row["framework"])
    ordering = params.get("ordering", leaderboards.default_ordering(task))
    return render(
        request,
        "frontend/leaderboard.html",
        {
            "board": leaderboards.Board(task, dataset, paginator.count),
            "rows": rows,
            "page": page,
            "params": params,
            "error": error,
            "ordering": ordering,
            "columns": _columns(params, ordering, task),
            "accuracy_heading": display.accuracy_headings(task)[0].replace(
                "Top-1", "Top-1 accuracy"
            ),
            "frameworks": [(f, display.framework_name(f)) for f in FRAMEWORKS],
            "devices": [(device, device.upper()) for device in DEVICES],
            "hardware": [(name, name) for name in leaderboards.hardware_choices(task, dataset)],
            "plot": _plot(entries.rows, task),
            "task": task,
            "lower_is_better": task in LOWER_IS_BETTER,
            "tolerance": leaderboards.TOLERANCE_TEXT,
            "csv_url": reverse("api-leaderboard", kwargs={"task": task, "dataset": dataset})
            + "?"
            + urlencode({**params, "format": "csv"}),
            "query": urlencode(params),
        },
        status=400 if error else 200,
    )


_HEADINGS = (
    ("model", "Model", False),
    ("framework", "Framework", False),
    ("hardware", "Hardware", False),
    ("top1", "Top-1", True),
    ("top5", "Top-5", True),
    ("p50_ms", "Median (ms, batch 1, 95 % CI)", True),
    ("p99_ms", "p99 (ms, batch 1)", True),
    ("throughput", "Best throughput", True),
    ("date", "Date", False),
)


def _columns(params: dict[str, str], ordering: str, task: str) -> list[dict[str, Any]]:
    """Each column's heading with the link that sorts by it (again: the other way); the two
    accuracy columns are named by the board's task (`display.accuracy_headings`)."""
    columns = []
    named = dict(zip(("top1", "top5"), display.accuracy_headings(task), strict=True))
    for name, default, numeric in _HEADINGS:
        heading = named.get(name, default)
        current = ordering.lstrip("-") == name
        descending = ordering.startswith("-")
        if current:
            next_ordering = name if descending else f"-{name}"
        else:
            # Higher is better for accuracy and throughput; lower for latency and errors.
            better_high = ("throughput", "date") + (
                () if task in LOWER_IS_BETTER else ("top1", "top5")
            )
            next_ordering = f"-{name}" if name in better_high else name
        columns.append(
            {
                "name": name,
                "heading": heading,
                "numeric": numeric,
                "sorted": ("descending" if descending else "ascending") if current else "",
                "href": "?" + urlencode({**params, "ordering": next_ordering}),
            }
        )
    return columns


def _plot(entries: Any, task: str) -> dict[str, Any]:
    """The accuracy-against-latency plot: a point per row (p50 at batch size 1, top-1 in
    percent, a text recognizer's CER too; a regression's MAE as it is), by framework, and the
    Pareto front."""
    errors = task in LOWER_IS_BETTER
    percent = not errors or task in PERCENT_ERRORS
    scale = 100 if percent else 1
    points = list(
        entries.filter(result__p50_ms_at_1__isnull=False)
        .order_by("result__top1" if errors else "-result__top1", "result__p50_ms_at_1")
        .values_list(
            "pk", "model_name", "framework", "hardware", "result__p50_ms_at_1", "result__top1"
        )[:PLOT_POINTS]
    )
    front = set(
        leaderboards.pareto_front(((p[0], p[4], p[5]) for p in points), lower_is_better=errors)
    )
    url = reverse("evaluation", kwargs={"pk": _PLACEHOLDER})
    series: dict[str, dict[str, list[Any]]] = {}
    for pk, model, framework, hardware, latency, top1 in points:
        entry = series.setdefault(
            display.framework_name(framework), {"x": [], "y": [], "text": [], "url": []}
        )
        entry["x"].append(latency)
        entry["y"].append(round(top1 * scale, 3))
        entry["text"].append(f"{model} · {display.framework_name(framework)} · {hardware}")
        entry["url"].append(url.replace(_PLACEHOLDER, str(pk)))
    pareto = sorted((p[4], round(p[5] * scale, 3)) for p in points if p[0] in front)
    return {
        "series": series,
        "front": {"x": [x for x, _ in pareto], "y": [y for _, y in pareto]},
        "shown": len(points),
        # The vertical axis: the board's first accuracy column, in percent unless an error.
        "metric": display.accuracy_headings(task)[0],
        "unit": "%" if percent else "",
        "lower_is_better": errors,
    }
