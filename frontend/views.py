"""Browser pages. They read through the same querysets and write through the same actions as
the API (`hub.actions`), so a page can never do what the API would refuse."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from frontend import display
from frontend.forms import TokenForm, UploadForm
from hub import actions
from hub.api.errors import ApiError
from hub.api.manifests import filter_manifests
from hub.models import ApiToken, Host, Manifest
from predictors import manifests as spec
from predictors.versioning import version_key

# -- catalog ---------------------------------------------------------------------------------


@dataclass
class CatalogEntry:
    """One model or dataset name, with every version and framework the user can see."""

    kind: str
    name: str
    latest: Manifest
    versions: list[str] = field(default_factory=list)
    frameworks: list[str] = field(default_factory=list)
    private: bool = False

    @property
    def training_dataset(self) -> str:
        return str((self.latest.content.get("attributes") or {}).get("training_dataset") or "")

    @property
    def task_label(self) -> str:
        return display.task_name(self.latest.task)

    @property
    def framework_labels(self) -> list[tuple[str, str]]:
        return [(f, display.framework_name(f)) for f in self.frameworks]

    @property
    def url(self) -> str:
        view = "model" if self.kind == Manifest.MODEL else "dataset"
        return reverse(view, args=[self.name])


def _entries(manifests: list[Manifest]) -> list[CatalogEntry]:
    groups: dict[tuple[str, str], list[Manifest]] = defaultdict(list)
    for manifest in manifests:
        groups[(manifest.kind, manifest.name)].append(manifest)
    entries = []
    for (kind, name), group in sorted(groups.items()):
        group.sort(key=lambda m: version_key(m.version), reverse=True)
        versions = sorted({m.version for m in group}, key=version_key, reverse=True)
        frameworks = sorted({m.framework for m in group if m.framework})
        entries.append(
            CatalogEntry(
                kind=kind,
                name=name,
                latest=group[0],
                versions=versions,
                frameworks=frameworks,
                private=any(m.visibility == Manifest.PRIVATE for m in group),
            )
        )
    return entries


def catalog(request: HttpRequest) -> HttpResponse:
    visible = Manifest.objects.visible_to(request.user)
    params = request.GET
    chosen = {key: params.get(key, "").strip() for key in ("search", "framework", "task", "dataset")}

    models = filter_manifests(
        visible.filter(kind=Manifest.MODEL),
        {k: chosen[k] for k in ("search", "framework", "task")},
    )
    if chosen["dataset"]:
        models = models.filter(content__attributes__training_dataset=chosen["dataset"])
    datasets = filter_manifests(
        visible.filter(kind=Manifest.DATASET), {k: chosen[k] for k in ("search", "task")}
    )
    if chosen["dataset"]:
        datasets = datasets.filter(name=chosen["dataset"])
    if chosen["framework"]:
        datasets = datasets.none()

    all_models = visible.filter(kind=Manifest.MODEL)
    frameworks = set(all_models.values_list("framework", flat=True))
    tasks = set(visible.values_list("task", flat=True)) - {""}
    trained_on = all_models.values_list("content__attributes__training_dataset", flat=True)
    dataset_names = {str(d) for d in trained_on if d} | set(
        visible.filter(kind=Manifest.DATASET).values_list("name", flat=True)
    )
    options = {
        "framework": [(f, display.framework_name(f)) for f in sorted(frameworks)],
        "task": [(t, display.task_name(t)) for t in sorted(tasks)],
        "dataset": [(d, d) for d in sorted(dataset_names)],
    }
    return render(
        request,
        "frontend/catalog.html",
        {
            "models": _entries(list(models)),
            "datasets": _entries(list(datasets)),
            "chosen": chosen,
            "filtered": any(chosen.values()),
            "options": options,
            "live_hosts": Host.objects.live().count(),
        },
    )


# -- model and dataset pages -----------------------------------------------------------------


def _versions_of(request: HttpRequest, kind: str, name: str) -> list[Manifest]:
    """The visible manifests of one name, highest version first; 404 if there is none."""
    manifests = list(
        Manifest.objects.visible_to(request.user)
        .filter(kind=kind, name=name)
        .select_related("owner")
        .prefetch_related("artifacts")
    )
    if not manifests:
        raise Http404(f"No {kind} named {name!r} that you can see.")
    manifests.sort(key=lambda m: (version_key(m.version), m.framework), reverse=True)
    return manifests


def _chosen(request: HttpRequest, manifests: list[Manifest]) -> Manifest:
    version = request.GET.get("version")
    framework = request.GET.get("framework")
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
                    framework,
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
            "frameworks": frameworks,
            "inputs": [
                {"entry": entry, "rows": display.parameter_rows(entry)}
                for entry in content.get("inputs") or []
            ],
            "outputs": content.get("outputs") or [],
            "files": display.file_rows(chosen),
            "accuracy": display.accuracy_rows(content),
            "attributes": display.attribute_rows(content),
            "dataset_name": dataset_name,
            "dataset_visible": dataset_visible,
            "framework_name": display.framework_name(chosen.framework),
            "task_name": display.task_name(chosen.task),
            "evaluations": _evaluations_of(request, chosen.name),
        },
    )


def dataset(request: HttpRequest, name: str) -> HttpResponse:
    manifests = _versions_of(request, Manifest.DATASET, name)
    chosen = _chosen(request, manifests)
    content = chosen.content
    splits = []
    files = {row.field: row for row in display.file_rows(chosen)}
    for split, entry in (content.get("splits") or {}).items():
        splits.append({"name": split, "count": entry.get("count"), "file": files.get(f"splits.{split}.path")})
    trained = _entries(
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


def _evaluations_of(request: HttpRequest, model_name: str) -> list[Any]:
    """The evaluations of a model that the user can see (filled in by the evaluations app)."""
    return []


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
        _data, lines = spec._parse(source)  # the validator's own map of path → line
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
            except spec.ManifestError as error:
                errors = error.errors
            except ApiError as error:
                errors = _with_lines(source, error.errors)
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


# -- tokens ----------------------------------------------------------------------------------


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    created = None
    form = TokenForm()
    if request.method == "POST" and "revoke" in request.POST:
        pk = request.POST["revoke"]
        if not (pk.isascii() and pk.isdigit()):
            raise Http404("No such token.")
        token = get_object_or_404(ApiToken, pk=int(pk), user=request.user)
        actions.revoke_token(token)
    elif request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            token, raw = ApiToken.issue(
                request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                expires_in_days=form.cleaned_data["expires_in_days"],
            )
            created = {"token": token, "raw": raw}
            form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user)
    return render(
        request, "frontend/tokens.html", {"form": form, "tokens": tokens, "created": created}
    )
