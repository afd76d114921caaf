"""A watch's page (`/watches/<id>/`) and the watches the model page shows: each watch's series
plotted (each run's median with its interval, regressions and improvements marked;
frontend/static/frontend/watch.js) and its runs' verdicts and what changed
(`evaluations.watches`). A watch is its owner's alone."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from evaluations import watches
from evaluations.models import Watch
from frontend import display
from hub.errors import NotFound

# The watches of a model its page shows (the latest created first).
ON_MODEL_PAGE = 10


def shown(watch: Watch) -> dict[str, Any]:
    """A watch as the pages show it: its settings, its series and summary, and what its plot
    draws (the runs measured: number, median, interval, verdict, words, what changed)."""
    series = watches.series(watch)
    framework = str(watch.request.get("framework", ""))
    return {
        "watch": watch,
        "framework": framework,
        "framework_name": display.framework_name(framework),
        "dataset": str(watch.request.get("dataset", "")),
        "series": series,
        "summary": watches.summary(series),
        "plot": {
            "id": str(watch.pk),
            "name": watch.name,
            "runs": [
                {
                    "number": run["number"],
                    "median": run["latency"]["p50_ms"],
                    "low": run["latency"]["p50_low_ms"],
                    "high": run["latency"]["p50_high_ms"],
                    "verdict": run["verdict"],
                    "words": run["words"],
                    "changed": run["changed_text"],
                }
                for run in series
                if run["verdict"] is not None
            ],
        },
    }


def of_model(request: HttpRequest, model_name: str) -> list[dict[str, Any]]:
    """The user's watches of a model, as `shown`."""
    found = watches.watches_of(request.user).filter(model_name=model_name)
    return [shown(watch) for watch in found[:ON_MODEL_PAGE]]


@login_required
def watch(request: HttpRequest, pk: UUID) -> HttpResponse:
    try:
        found = watches.get_watch(request.user, pk)
    except NotFound:
        raise Http404("No such watch of yours.") from None
    entry = shown(found)
    return render(
        request,
        "frontend/watch.html",
        {"entry": entry, "watches": [entry], "plots": [entry["plot"]]},
    )
