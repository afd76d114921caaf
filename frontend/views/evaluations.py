"""The launch form and the evaluation pages.

The launch form validates with the API's own request serializer and launches with
`evaluations.actions.launch_evaluation`; the evaluation page embeds the evaluation as
`GET /api/v1/evaluations/<id>/` shows it, and its script keeps it current from the WebSocket
`/ws/evaluations/<id>/` (or, when the socket closes, by polling that endpoint).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from evaluations import actions, history, sharing
from evaluations.api.serializers import EvaluationDetailSerializer, EvaluationRequestSerializer
from evaluations.models import Evaluation
from frontend import display
from frontend.forms import LaunchForm, shown
from hub import groups
from hub.api.errors import flatten_errors  # the API's own DRF → path mapping
from hub.errors import DomainError
from hub.models import Host, Manifest
from predictors.frameworks.predictor import FRAMEWORKS
from predictors.manifests.versioning import version_key
from predictors.protocol import (
    SPAN_LEVELS,
    JobOptions,
    ProtocolError,
)

# The launch request's error paths that name no field of the form, and the field that shows them.
_ERROR_FIELDS = {"version": "model_version"}


def _catalog(request: HttpRequest) -> dict[str, Any]:
    """What the user can launch: models with their versions and frameworks, and datasets."""
    visible = Manifest.objects.visible_to(request.user)
    models: dict[str, dict[str, Any]] = {}
    for name, version, framework, content in visible.filter(kind=Manifest.MODEL).values_list(
        "name", "version", "framework", "content"
    ):
        entry = models.setdefault(name, {"versions": set(), "frameworks": set(), "dataset": ""})
        entry["versions"].add(version)
        entry["frameworks"].add(framework)
        attributes = content.get("attributes") or {}
        entry["dataset"] = (
            entry["dataset"]
            or attributes.get("reference_dataset")
            or attributes.get("training_dataset", "")
        )
    for entry in models.values():
        entry["versions"] = sorted(entry["versions"], key=version_key, reverse=True)
        entry["frameworks"] = sorted(entry["frameworks"])
    datasets: dict[str, dict[str, Any]] = {}
    for name, version, content in visible.filter(kind=Manifest.DATASET).values_list(
        "name", "version", "content"
    ):
        entry = datasets.setdefault(name, {"versions": set(), "splits": set()})
        entry["versions"].add(version)
        entry["splits"].update((content.get("splits") or {}).keys())
    for entry in datasets.values():
        entry["versions"] = sorted(entry["versions"], key=version_key, reverse=True)
        entry["splits"] = sorted(entry["splits"])
    return {"models": dict(sorted(models.items())), "datasets": dict(sorted(datasets.items()))}


def _form(request: HttpRequest, catalog: dict[str, Any], data: Any = None) -> LaunchForm:
    initial: dict[str, Any] = {}
    chosen = request.GET.get("model", "")
    if chosen and chosen not in catalog["models"] and request.method == "GET":
        # A link to a model the user may not run (another user's private one, or none by
        # that name) says so rather than offering another model in its place.
        # (The name is not repeated: the page says the same of a private model and of none.)
        messages.error(
            request, "The model this link names is none that you may run: choose one below."
        )
    if chosen in catalog["models"]:
        model = catalog["models"][chosen]
        initial["model"] = chosen
        initial["model_version"] = request.GET.get("version") or "*"
        framework = request.GET.get("framework", "")
        initial["framework"] = (
            framework if framework in model["frameworks"] else model["frameworks"][0]
        )
        if model["dataset"] in catalog["datasets"]:
            initial["dataset"] = model["dataset"]
    initial.update(_reproduced(request, catalog))
    initial["nonce"] = secrets.token_hex(16)
    return LaunchForm(
        data,
        initial=initial,
        models=[(name, name) for name in catalog["models"]],
        frameworks=[(f, display.framework_name(f)) for f in FRAMEWORKS],
        datasets=[(name, name) for name in catalog["datasets"]],
        hosts=[(host.name, _host_label(host)) for host in _usable_hosts(request)],
    )


# The request fields other than the job options that Reproduce copies as they were (the host
# is the user's choice; the model and dataset versions are pinned to those that ran).
_REPRODUCED = ("framework_version", "device", "gpu_model", "min_memory_gb", "arch")


def _reproduced(request: HttpRequest, catalog: dict[str, Any]) -> dict[str, Any]:
    """The form's fields for `?reproduce=<evaluation id>`: that evaluation's request (one the
    user may read), to launch again on a host of the user's choice. Every job option is
    copied as the evaluation ran with it (`predictors.protocol.JobOptions`, as its agent
    received it: an option newer than the evaluation takes the default it ran under)."""
    raw = request.GET.get("reproduce", "")
    if not raw:
        return {}
    try:
        source = _visible(request).filter(pk=UUID(raw)).first()
    except ValueError:
        source = None
    if source is None or source.model_name not in catalog["models"]:
        messages.error(request, "reproduce: no such evaluation that you may read")
        return {}
    asked = source.request if isinstance(source.request, dict) else {}
    given = {name: asked[name] for name in JobOptions.names() if name in asked}
    try:
        ran = JobOptions.from_dict(given).to_dict()
    except ProtocolError:  # a request the hub stored before a check it now makes
        ran = given
    initial = {name: asked[name] for name in _REPRODUCED if asked.get(name) not in (None, "")}
    # An option that ran as null leaves its field empty: the option's default, null.
    initial.update({name: shown(name, value) for name, value in ran.items() if value is not None})
    initial.update(
        model=source.model_name,
        model_version=source.model_version,
        framework=source.framework,
        dataset=source.dataset_name,
        dataset_version=source.dataset_version,
    )
    return initial


def _usable_hosts(request: HttpRequest) -> Any:
    """The live hosts the user may name in a launch (`hub.trust`; never another user's own
    host)."""
    return Host.objects.live().usable_by(request.user).select_related("group")


def _host_label(host: Host) -> str:
    if host.pool:
        return f"{host.name} (shared pool)"
    if host.group is not None:
        return f"{host.name} (group {host.group.name})"
    return f"{host.name} (yours)"


_LAUNCHED = "frontend.launched"


def _launched_before(request: HttpRequest) -> HttpResponse | None:
    """Where the first submission of this form went, when the form was submitted before."""
    nonce = str(request.POST.get("nonce", ""))
    previous = (request.session.get(_LAUNCHED) or {}).get(nonce) if nonce else None
    if not isinstance(previous, dict):
        return None
    if previous.get("count") == 1:
        return redirect("evaluation", pk=previous["first"])
    return redirect(reverse("evaluations") + f"?group={previous['group']}")


def _remember_launch(request: HttpRequest, launched: list[Any]) -> None:
    nonce = str(request.POST.get("nonce", ""))
    if not nonce:
        return
    seen = dict(request.session.get(_LAUNCHED) or {})
    seen[nonce] = {
        "first": str(launched[0].pk),
        "group": str(launched[0].group),
        "count": len(launched),
    }
    request.session[_LAUNCHED] = dict(list(seen.items())[-50:])


def _add_errors(form: LaunchForm, errors: list[dict[str, Any]]) -> None:
    """Show each error of the API's format beside the field its path names."""
    for error in errors:
        path = str(error.get("path") or "")
        head, _, rest = path.partition(".")
        name = _ERROR_FIELDS.get(head, head)
        message = str(error["message"])
        if name in form.fields:
            if rest.isdigit():  # an item of batch_sizes
                message = f"item {int(rest) + 1}: {message}"
            form.add_error(name, message)
        else:
            form.add_error(None, f"{path}: {message}" if path else message)


@login_required
def launch(request: HttpRequest) -> HttpResponse:
    catalog = _catalog(request)
    form = _form(request, catalog)
    if request.method == "POST":
        form = _form(request, catalog, request.POST)
        done = _launched_before(request)
        if done is not None:
            return done
        if form.is_valid():
            serializer = EvaluationRequestSerializer(data=form.request())
            if serializer.is_valid():
                try:
                    launched = actions.launch_evaluation(
                        request.user,  # type: ignore[arg-type]
                        serializer.validated_data,
                    )
                except DomainError as error:
                    _add_errors(form, error.errors)
                else:
                    first = launched[0]
                    _remember_launch(request, launched)
                    if len(launched) == 1:
                        return redirect("evaluation", pk=first.pk)
                    messages.success(
                        request, f"Launched {len(launched)} evaluations, one on each host."
                    )
                    return redirect(reverse("evaluations") + f"?group={first.group}")
            else:
                _add_errors(form, flatten_errors(serializer.errors))
    hosts = _usable_hosts(request)
    return render(
        request,
        "frontend/launch.html",
        {"form": form, "catalog": catalog, "hosts": hosts},
        status=400 if form.errors else 200,
    )


def _visible(request: HttpRequest) -> Any:
    return (
        Evaluation.objects.visible_to(request.user)
        .select_related("user", "host", "result")
        .prefetch_related("history", "result__batch_results")
    )


def evaluation(request: HttpRequest, pk: UUID) -> HttpResponse:
    """One evaluation; an anonymous visitor sees a published one."""
    item = get_object_or_404(_visible(request), pk=pk)
    detail = EvaluationDetailSerializer(item).data
    user = request.user
    is_owner = user.is_authenticated and (item.user_id == user.pk or user.is_staff)
    return render(
        request,
        "frontend/evaluation.html",
        {
            "evaluation": item,
            "detail": detail,
            "is_owner": is_owner,
            "publication_refusal": sharing.publication_refusal(item) if is_owner else None,
            "shared_groups": sharing.shared_with(user, item) if user.is_authenticated else [],  # type: ignore[arg-type]
            "my_groups": list(groups.groups_of(user).values_list("name", flat=True))
            if is_owner
            else [],
            "framework_name": display.framework_name(item.framework),
            "api_url": reverse("api-evaluation-detail", kwargs={"pk": item.pk}),
            "socket_path": f"/ws/evaluations/{item.pk}/",
        },
    )


def timeline(request: HttpRequest, pk: UUID) -> HttpResponse:
    """The evaluation's trace on a zoomable timeline, with per-layer aggregates; the script
    reads `/api/v1/traces/<trace_id>/timeline` for each visible window and `/layers`."""
    item = get_object_or_404(_visible(request), pk=pk)
    return render(
        request,
        "frontend/timeline.html",
        {
            "evaluation": item,
            "framework_name": display.framework_name(item.framework),
            "timeline_url": reverse("api-trace-timeline", kwargs={"trace_id": item.trace_id}),
            "layers_url": reverse("api-trace-layers", kwargs={"trace_id": item.trace_id}),
            "search_url": reverse("api-trace-search", kwargs={"trace_id": item.trace_id}),
            "selection_url": reverse("api-trace-selection", kwargs={"trace_id": item.trace_id}),
            # With the span id appended.
            "span_url": reverse(
                "api-trace-span", kwargs={"trace_id": item.trace_id, "span_id": "0" * 16}
            ).removesuffix("0" * 16),
            "download_name": f"{item.model_name}-{item.framework}-{str(item.pk)[:8]}.trace.json",
            # The span levels, outermost first: one track each (`predictors.protocol`).
            "levels": " ".join(SPAN_LEVELS),
            "api_url": reverse("api-evaluation-detail", kwargs={"pk": item.pk}),
            "chrome_url": reverse("api-evaluation-trace", kwargs={"pk": item.pk})
            + "?format=chrome",
        },
    )


def _act(request: HttpRequest, pk: UUID, act: Callable[[Any], str]) -> HttpResponse:
    """Do `act` (given the user; it returns what to tell them) to an evaluation the user sees,
    and go back to its page, telling them what was done or why it was refused."""
    get_object_or_404(_visible(request), pk=pk)
    try:
        done = act(request.user)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, done)
    return redirect("evaluation", pk=pk)


@login_required
@require_POST
def publish(request: HttpRequest, pk: UUID) -> HttpResponse:
    """Publish (or, with `unpublish`, unpublish) an evaluation of the user's."""

    def act(user: Any) -> str:
        if "unpublish" in request.POST:
            sharing.unpublish(user, pk)
            return "Unpublished: only you (and your groups) see it now."
        sharing.publish(user, pk)
        return "Published: anyone can see it, and it is on the leaderboards."

    return _act(request, pk, act)


@login_required
@require_POST
def share(request: HttpRequest, pk: UUID) -> HttpResponse:
    """Share an evaluation of the user's with one of their groups (or, with `unshare`, stop)."""

    def act(user: Any) -> str:
        if "unshare" in request.POST:
            sharing.unshare(user, pk, str(request.POST["unshare"]))
            return f"No longer shared with '{request.POST['unshare']}'."
        name = str(request.POST.get("group", ""))
        sharing.share(user, pk, name)
        return f"Shared with '{name}'."

    return _act(request, pk, act)


@login_required
@require_POST
def cancel(request: HttpRequest, pk: UUID) -> HttpResponse:
    def act(user: Any) -> str:
        actions.cancel_evaluation(pk, user)
        return "Cancellation requested."

    return _act(request, pk, act)


# The history filters the page offers (the API's, `evaluations.history`), in the form's order.
_PAGE_FILTERS = (
    "model",
    "version",
    "framework",
    "framework_version",
    "dataset",
    "host",
    "device",
    "status",
    "batch_size",
    "trace_level",
    "published",
    "created_after",
    "created_before",
    "group",
)
_PAGE_SIZE = 50


@login_required
def evaluations(request: HttpRequest) -> HttpResponse:
    """The evaluations the user may read, filtered and sorted as `GET /api/v1/evaluations/`
    does, a page at a time; rows update live; two to eight can be compared."""
    params = {
        name: value
        for name, value in request.GET.items()
        if name in (*_PAGE_FILTERS, "ordering") and value.strip()
    }
    error = ""
    if history.sorts_rows(params.get("ordering", "")) and not params.get("batch_size"):
        # A latency is a batch size's: sorted at batch size 1 unless another is chosen.
        params["batch_size"] = "1"
        messages.info(
            request,
            f"Sorted by {history.ordering_label(params['ordering']).split(',')[0]} at batch "
            "size 1: only evaluations with a result at batch size 1 are listed; set Batch "
            "size to sort at another.",
        )
    try:
        items = history.apply(_visible(request), params)
    except DomainError as problem:
        error = problem.message
        items = _visible(request)
        params = {}
    paginator = Paginator(items, _PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    specs = {spec.name: spec for spec in history.FILTERS}
    return render(
        request,
        "frontend/evaluations.html",
        {
            "evaluations": page.object_list,
            "page": page,
            "params": params,
            "filtered": bool(params),
            "error": error,
            "group": params.get("group", ""),
            "choices": {name: specs[name].choices for name in _PAGE_FILTERS if specs[name].choices},
            "orderings": [(value, history.ordering_label(value)) for value in history.ORDERINGS],
            "query": urlencode(params),
            "socket_path": "/ws/evaluations/",
        },
        status=400 if error else 200,
    )
