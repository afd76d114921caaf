"""The divergence pages: `POST /divergence/` (from the compare page's button) launches one, and
`/divergence/<id>/` shows it, its error by layer plotted (`evaluations.divergences`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from evaluations import divergences
from hub.errors import DomainError, NotFound


@login_required
@require_POST
def launch(request: HttpRequest) -> HttpResponse:
    a, b = request.POST.get("a", ""), request.POST.get("b", "")
    try:
        divergence = divergences.launch(request.user, a, b)  # type: ignore[arg-type]
    except DomainError as error:
        where = error.errors[0].get("path") if error.errors else ""
        messages.error(request, f"first divergence: {where}: {error.message}")
        return redirect("/compare/?" + urlencode({"evaluations": f"{a},{b}"}))
    return redirect("divergence", pk=divergence.pk)


@login_required
def divergence(request: HttpRequest, pk: UUID) -> HttpResponse:
    try:
        found = divergences.refresh(divergences.visible(request.user, pk))  # type: ignore[arg-type]
    except NotFound as error:
        return render(request, "frontend/divergence.html", {"error": error.message}, status=404)
    shown = divergences.as_dict(found)
    return render(
        request,
        "frontend/divergence.html",
        {"divergence": shown, "report": shown["report"], "plot": _plot(shown["report"])},
    )


def _plot(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """The relative error of each matched layer, in the order they run, and the first
    divergence's position."""
    if not report:
        return None
    rows = report.get("layers") or []
    first = (report.get("first_divergence") or {}).get("name")
    return {
        "names": [row["name"] for row in rows],
        "relative": [row["relative_error"] for row in rows],
        "cosine": [row["cosine"] for row in rows],
        "first": first,
        "tolerance": report.get("tolerance"),
    }
