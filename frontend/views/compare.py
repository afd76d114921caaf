"""The comparison page (`/compare/?evaluations=<id>,<id>,…`), built by `evaluations.compare`,
and the diff of many traces (`/compare/traces/?a=<id>,…&b=<id>,…`, `evaluations.compare.diff`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from evaluations import compare as comparison
from evaluations.compare import diff
from frontend import display
from hub.errors import DomainError, NotFound


def compare(request: HttpRequest) -> HttpResponse:
    # `?evaluations=a,b` or, from the evaluations page's checkboxes, `?evaluations=a&evaluations=b`.
    raw = ",".join(request.GET.getlist("evaluations"))
    baseline = request.GET.get("baseline") or None
    show_all = request.GET.get("all") in ("1", "true")
    try:
        ids = comparison.parse_ids(raw)
        noise = comparison.parse_noise(request.GET.get("noise"))
        evaluations = comparison.load(request.user, ids, baseline)
    except DomainError as error:
        return render(
            request,
            "frontend/compare.html",
            {"error": error.message},
            status=404 if isinstance(error, NotFound) else 400,
        )
    report = comparison.compare(evaluations, show_all=show_all, noise=noise)
    for summary in report["evaluations"]:
        summary["framework_name"] = display.framework_name(summary["framework"])
    ids_text = comparison.ids_text(evaluations)
    # A noise threshold asked for stays with the page's own links.
    kept = {"noise": request.GET["noise"]} if request.GET.get("noise") else {}
    return render(
        request,
        "frontend/compare.html",
        {
            "report": report,
            "columns": report["evaluations"],
            "headings": display.accuracy_headings(report["task"]),
            "plots": _plots(report),
            "all_url": "?"
            + urlencode({"evaluations": ids_text, "all": "0" if show_all else "1", **kept}),
            "show_all": show_all,
            "baseline_urls": [
                "?" + urlencode({"evaluations": ids_text, "baseline": summary["id"], **kept})
                for summary in report["evaluations"]
            ],
            "api_url": "/api/v1/compare/?" + urlencode({"evaluations": ids_text}),
            # The same evaluations as two sides: the baseline against the others.
            "diff_url": reverse("compare-traces")
            + "?"
            + urlencode(
                {"a": str(evaluations[0].pk), "b": comparison.ids_text(evaluations[1:]), **kept}
            ),
        },
    )


def trace_diff(request: HttpRequest) -> HttpResponse:
    """Two sides of runs, item by item down the levels of their traces; the page draws the
    API's answer (the same function's) and asks it again to drill down."""
    try:
        report = diff.from_query(request.user, request.GET)
    except DomainError as error:
        return render(
            request,
            "frontend/trace_diff.html",
            {"error": error.message, "path": error.errors[0]["path"]},
            status=404 if isinstance(error, NotFound) else 400,
        )
    ids = [side["id"] for key in ("a", "b") for side in report["sides"][key]]
    query = {
        key: request.GET[key] for key in ("a", "b", "batch_size", "noise") if request.GET.get(key)
    }
    return render(
        request,
        "frontend/trace_diff.html",
        {
            "report": report,
            "api_url": reverse("api-compare-traces") + "?" + urlencode(query),
            # Side by side, where they are few enough to be.
            "compare_url": reverse("compare") + "?" + urlencode({"evaluations": ",".join(ids)})
            if len(ids) <= comparison.MAX_EVALUATIONS
            else None,
            "drills": diff.DRILLS,
        },
    )


def _plots(report: dict[str, Any]) -> dict[str, Any]:
    """Latency (the median with its 95 % interval) and throughput against batch size, a series per
    evaluation; and the normalised latency across systems."""
    names = [summary["label"] for summary in report["evaluations"]]
    latency = [
        {"name": name, "x": [], "y": [], "error": [], "error_minus": [], "throughput": []}
        for name in names
    ]
    for size in report["latency"]["batch_sizes"]:
        for position, cell in enumerate(size["cells"]):
            if cell is None:
                continue
            latency[position]["x"].append(size["batch_size"])
            median = cell["p50_ms"]
            latency[position]["y"].append(median)
            # The median's interval as asymmetric error bars (none where not bounded).
            low, high = cell["p50_low_ms"], cell["p50_high_ms"]
            latency[position]["error"].append(high - median if high is not None else 0)
            latency[position]["error_minus"].append(median - low if low is not None else 0)
            latency[position]["throughput"].append(cell["throughput_ips"])
    systems = report.get("systems")
    return {
        "latency": latency,
        "systems": [
            {
                "name": f"{serie['host']} ({serie['hardware']})",
                "x": [p["batch_size"] for p in serie["points"]],
                "y": [p["normalised"] for p in serie["points"]],
            }
            for serie in (systems or {}).get("series", [])
        ],
        "reference": (systems or {}).get("reference"),
    }
