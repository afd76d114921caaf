"""The model and dataset pages, and the upload form that adds manifests."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from evaluations import leaderboards
from evaluations.models import Evaluation
from frontend import display
from frontend.forms import UploadForm
from frontend.views import watches
from frontend.views.catalog import entries
from hub import actions
from hub.errors import DomainError
from hub.models import Manifest
from predictors import manifests as spec
from predictors.manifests.versioning import version_key
from predictors.tasks import LOWER_IS_BETTER, decoded_outputs


def _versions_of(request: HttpRequest, kind: str, name: str) -> list[Manifest]:
    """The visible manifests of one name, highest version first (then by framework); 404 if
    there is none."""
    manifests = list(
        Manifest.objects.visible_to(request.user)
        .filter(kind=kind, name=name)
        .select_related("owner")
        .prefetch_related("artifacts")
    )
    if not manifests:
        raise Http404(f"No {kind} named {name!r} that you can see.")
    manifests.sort(key=lambda m: m.framework)
    manifests.sort(key=lambda m: version_key(m.version), reverse=True)
    return manifests


def _chosen(request: HttpRequest, manifests: list[Manifest]) -> Manifest:
    """The manifest the query asks for; by default the highest stable version (as npm does)."""
    version = request.GET.get("version")
    framework = request.GET.get("framework")
    if version is None and framework is None:
        stable = [m for m in manifests if "-" not in m.version]
        return (stable or manifests)[0]
    for manifest in manifests:
        if (version is None or manifest.version == version) and (
            framework is None or manifest.framework == framework
        ):
            return manifest
    raise Http404("No such version.")


def _page_url(kind: str, manifest: Manifest) -> str:
    query = {"version": manifest.version}
    if manifest.framework:
        query["framework"] = manifest.framework
    return reverse(kind, args=[manifest.name]) + "?" + urlencode(query)


def model(request: HttpRequest, name: str) -> HttpResponse:
    manifests = _versions_of(request, Manifest.MODEL, name)
    chosen = _chosen(request, manifests)
    frameworks = sorted({m.framework for m in manifests})
    versions = sorted({m.version for m in manifests}, key=version_key, reverse=True)
    by_cell = {(m.version, m.framework): m for m in manifests}
    matrix = [
        (
            version,
            [
                (
                    display.framework_name(framework),
                    by_cell.get((version, framework)),
                    _page_url("model", by_cell[(version, framework)])
                    if (version, framework) in by_cell
                    else None,
                )
                for framework in frameworks
            ],
        )
        for version in versions
    ]
    content = chosen.content
    shown_watches = watches.of_model(request, chosen.name)
    dataset_name = (content.get("attributes") or {}).get("training_dataset")
    dataset_visible = bool(
        dataset_name
        and Manifest.objects.visible_to(request.user)
        .filter(kind=Manifest.DATASET, name=dataset_name)
        .exists()
    )
    return render(
        request,
        "frontend/model.html",
        {
            "name": name,
            "manifest": chosen,
            "content": content,
            "matrix": matrix,
            "frameworks": [(f, display.framework_name(f)) for f in frameworks],
            "inputs": [
                {"entry": entry, "rows": display.parameter_rows(entry)}
                for entry in content.get("inputs") or []
            ],
            "outputs": content.get("outputs") or [],
            "decoded_outputs": decoded_outputs(content),
            "files": display.file_rows(chosen),
            "accuracy": display.accuracy_rows(content),
            "attributes": display.attribute_rows(content),
            "dataset_name": dataset_name,
            "dataset_visible": dataset_visible,
            "framework_name": display.framework_name(chosen.framework),
            "task_name": display.task_name(chosen.task),
            "evaluations": _evaluations_of(request, chosen.name),
            "watches": shown_watches,
            "plots": [entry["plot"] for entry in shown_watches],
            "published": _published_of(chosen.name, chosen.task),
            "metric_heading": display.accuracy_headings(chosen.task)[0],
        },
    )


def dataset(request: HttpRequest, name: str) -> HttpResponse:
    manifests = _versions_of(request, Manifest.DATASET, name)
    chosen = _chosen(request, manifests)
    content = chosen.content
    splits = []
    files = {row.field: row for row in display.file_rows(chosen)}
    for split, entry in (content.get("splits") or {}).items():
        splits.append(
            {"name": split, "count": entry.get("count"), "file": files.get(f"splits.{split}.path")}
        )
    trained = entries(
        list(
            Manifest.objects.visible_to(request.user).filter(
                kind=Manifest.MODEL, content__attributes__training_dataset=name
            )
        )
    )
    return render(
        request,
        "frontend/dataset.html",
        {
            "name": name,
            "manifest": chosen,
            "content": content,
            "versions": [(m.version, _page_url("dataset", m), m == chosen) for m in manifests],
            "splits": splits,
            "labels_file": files.get("labels_path"),
            "attributes": display.attribute_rows(content),
            "models": trained,
            "task_name": display.task_name(chosen.task),
        },
    )


def _evaluations_of(request: HttpRequest, model_name: str) -> list[Evaluation]:
    """The latest evaluations of a model that the user launched (staff: anyone's)."""
    if not request.user.is_authenticated:
        return []
    mine = Evaluation.objects.visible_to(request.user).filter(model_name=model_name)
    if not request.user.is_staff:
        mine = mine.filter(user=request.user)
    return list(mine.select_related("result", "host")[:20])


def _published_of(model_name: str, task: str) -> list[dict[str, Any]]:
    """The model's published results, as its leaderboard rows (the most accurate first)."""
    entries = leaderboards.published().filter(model_name=model_name)
    rows = leaderboards.rows(
        leaderboards.with_hardware(entries)
        .select_related("result", "host")
        .order_by(
            # The best first; latency-only results (no accuracy) last.
            F("result__top1").asc(nulls_last=True)
            if task in LOWER_IS_BETTER
            else F("result__top1").desc(nulls_last=True),
            "result__p50_ms_at_1",
        )[:20]
    )
    for row in rows:
        row["framework_name"] = display.framework_name(row["framework"])
    return rows


# -- upload ----------------------------------------------------------------------------------


@dataclass
class SourceLine:
    number: int
    text: str
    errors: list[dict[str, Any]]


def _listing(source: str, errors: list[dict[str, Any]]) -> list[SourceLine]:
    """The manifest's lines, numbered, each with the errors that point at it."""
    by_line: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for error in errors:
        if error.get("line"):
            by_line[int(error["line"])].append(error)
    return [
        SourceLine(number, text, by_line.get(number, []))
        for number, text in enumerate(source.splitlines() or [""], start=1)
    ]


def _with_lines(source: str, errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fill in the YAML line of errors that name a field but no line (the registry's errors
    about files and identity are about fields of a manifest that has parsed already)."""
    if all(e.get("line") or not e.get("path") for e in errors):
        return errors
    try:
        _data, lines = spec.parse_with_lines(source)  # the validator's map of path → line
    except spec.ManifestError:
        return errors
    filled = []
    for error in errors:
        line = error.get("line")
        if not line and error.get("path"):
            parts = str(error["path"]).split(".")
            for end in range(len(parts), 0, -1):
                line = lines.get(".".join(parts[:end]))
                if line:
                    break
        filled.append({**error, "line": line})
    return filled


@login_required
def upload(request: HttpRequest) -> HttpResponse:
    form = UploadForm()
    errors: list[dict[str, Any]] = []
    source = ""
    if request.method == "POST":
        form = UploadForm(request.POST, request.FILES)
        if form.is_valid():
            source = form.cleaned_data["manifest"]
            try:
                doc = spec.load(source, max_bytes=settings.MANIFEST_MAX_BYTES)
                manifest = actions.register_manifest(
                    doc,
                    owner=request.user,  # type: ignore[arg-type]
                    visibility=form.cleaned_data["visibility"] or None,
                    uploads={f.name: f for f in form.cleaned_data["files"]},
                )
            except spec.ManifestError as invalid:
                errors = invalid.errors
            except DomainError as refused:
                errors = _with_lines(source, refused.errors)
            else:
                messages.success(
                    request,
                    f"Uploaded {manifest.kind} {manifest.name} {manifest.version}"
                    f" ({manifest.visibility}).",
                )
                return redirect(_page_url(manifest.kind, manifest))
            # Show what was submitted (a chosen file included) in the textarea, to fix it there.
            form.data = form.data.copy()
            form.data["manifest"] = source
    by_field: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for error in errors:
        path = str(error.get("path") or "")
        if path.startswith("files."):
            by_field["files"].append(error)
        elif path == "visibility":
            by_field["visibility"].append(error)
        else:
            by_field["manifest"].append(error)
    status = 200 if not (errors or form.errors) else 400
    return render(
        request,
        "frontend/upload.html",
        {
            "form": form,
            "errors": errors,
            "manifest_errors": by_field["manifest"],
            "files_errors": by_field["files"],
            "visibility_errors": by_field["visibility"],
            "listing": _listing(source, by_field["manifest"]) if by_field["manifest"] else [],
        },
        status=status,
    )
