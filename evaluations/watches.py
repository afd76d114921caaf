"""Watches: a pinned launch request re-run by hand (`POST /api/v1/watches/<id>/runs/`,
`mlms watch run`) or every `every` minutes by the hub's sweep, and the series of its runs.

Each run is launched through `actions.launch_evaluation`, the path of every launch, with the
watch's request and the job options changed for that run only. The series labels each run
regression, improvement or noise against the noise the series itself shows
(`predictors.statistics.series_verdicts`, on each run's timed batches at the watch's batch
size), and names what changed between the run and the reference of its segment: the request,
the processing parameters and the stack as compare shows them
(`evaluations.compare.differences`).

A watch is private to its owner: another user's is a NotFound on every path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import ObjectDoesNotExist
from django.db import IntegrityError, transaction
from django.db.models import Count, QuerySet
from django.utils import timezone

from evaluations import actions
from evaluations.api.serializers import EvaluationRequestSerializer
from evaluations.compare import differences
from evaluations.models import BatchResult, Evaluation, Watch
from hub.api.errors import flatten_errors
from hub.error_codes import HubErrorCode
from hub.errors import Conflict, DomainError, Invalid, NotFound
from hub.models import Host, Manifest
from predictors import statistics
from predictors.protocol import JOB_DEFAULTS, SUCCEEDED, JobOptions

logger = logging.getLogger(__name__)

# The latest runs a series shows and tests.
MAX_RUNS = 200
# The scheduled runs one sweep launches at most (the rest wait for the next sweep).
MAX_DUE_PER_SWEEP = 20


def watches_of(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Watch]:
    """The user's own watches (none for an anonymous caller)."""
    if not user.is_authenticated:
        return Watch.objects.none()
    return (
        Watch.objects.filter(user=user)
        .select_related("host")
        .annotate(run_count=Count("runs"))
        .order_by("-created_at", "id")
    )


def get_watch(user: AbstractBaseUser | AnonymousUser, watch_id: Any) -> Watch:
    watch = watches_of(user).filter(pk=watch_id).first()
    if watch is None:
        raise NotFound("No such watch of yours.", path="watch")
    return watch


def validated_request(request: Any, *, path: str = "request") -> dict[str, Any]:
    """A launch request checked as `POST /api/v1/evaluations/` checks it (one serializer), with
    its defaults filled in; Invalid naming `path.<field>`."""
    if not isinstance(request, Mapping):
        raise Invalid("must be a JSON object: the body of POST /api/v1/evaluations/", path=path)
    serializer = EvaluationRequestSerializer(data=dict(request))
    if not serializer.is_valid():
        raise Invalid(
            [
                {**error, "path": ".".join(part for part in (path, error["path"]) if part)}
                for error in flatten_errors(serializer.errors)
            ]
        )
    return dict(serializer.validated_data)


def create_watch(
    user: AbstractBaseUser,
    *,
    name: str,
    request: Mapping[str, Any],
    batch_size: int | None = None,
    every: int | None = None,
) -> Watch:
    """A watch of `request` (what `POST /api/v1/evaluations/` takes, kept as given): one
    host's runs (`hosts: all` is refused), its model and dataset ones the user may read, the
    host it names one the user may use. With `every` (minutes) its first run is due at once."""
    launch = validated_request(request)
    if launch["hosts"] != "one":
        raise Invalid(
            "a watch follows one configuration: leave hosts at 'one' (name a host to pin it)",
            path="request.hosts",
        )
    sizes = list(launch["batch_sizes"])
    size = sizes[0] if batch_size is None else batch_size
    if size not in sizes:
        raise Invalid(
            f"must be one of the request's batch sizes ({', '.join(map(str, sizes))})",
            path="batch_size",
        )
    visible = Manifest.objects.visible_to(user)
    if not visible.filter(
        kind=Manifest.MODEL, name=launch["model"], framework=launch["framework"]
    ).exists():
        raise NotFound(
            f"no model {launch['model']!r} for {launch['framework']} that you may use",
            path="request.model",
        )
    if not visible.filter(kind=Manifest.DATASET, name=launch["dataset"]).exists():
        raise NotFound(f"no dataset {launch['dataset']!r} that you may use", path="request.dataset")
    host = None
    if launch["host"]:
        host = Host.objects.usable_by(user).filter(name=launch["host"]).first()
        if host is None:
            raise NotFound(f"no host {launch['host']!r} that you may use", path="request.host")
    try:
        with transaction.atomic():
            return Watch.objects.create(
                user=user,
                name=name,
                request=dict(request),
                model_name=launch["model"],
                batch_size=size,
                host=host,
                every=every,
                next_run_at=timezone.now() if every else None,
            )
    except IntegrityError:
        raise Conflict(
            f"you have a watch named {name!r} already", path="name", code=HubErrorCode.NAME_TAKEN
        ) from None


def run_request(watch: Watch, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The launch request of one run: the watch's, with the job options in `options` changed
    for this run (only job options: a run keeps the watch's model, dataset and host), checked
    as a launch; Invalid naming the option."""
    options = dict(options or {})
    names = set(JobOptions.names())
    unknown = sorted(key for key in options if key not in names)
    if unknown:
        raise Invalid(
            [
                {
                    "path": key,
                    "message": "not a job option: a run may change how the job runs (threads, "
                    "trace_level, overrides, …), not what or where it runs",
                }
                for key in unknown
            ]
        )
    if "split" in options and options["split"] != watch.request.get("split", JOB_DEFAULTS["split"]):
        raise Invalid(
            "a run keeps the watch's split: its series compares runs on the same inputs",
            path="split",
        )
    launch = validated_request({**watch.request, **options}, path="")
    if watch.batch_size not in launch["batch_sizes"]:
        raise Invalid(
            f"must include {watch.batch_size}, the batch size the watch's series follows",
            path="batch_sizes",
        )
    # The host by identity: a host of the same name registered since is another host.
    named = launch.get("host")
    if named and (watch.host is None or watch.host.name != named):
        raise Invalid(
            f"the watch's host {named} is gone (a host registered under that name since is "
            "another one): make a new watch to pin it",
            path="host",
        )
    return launch


def run_watch(watch: Watch, options: Mapping[str, Any] | None = None) -> Evaluation:
    """Launch one run of the watch (`actions.launch_evaluation`), with `options` changed for it;
    the domain errors of a launch otherwise (no live host, …)."""
    launch = run_request(watch, options)
    with transaction.atomic():
        # The launch dispatches on commit: the run is the watch's before any agent sees it.
        (evaluation,) = actions.launch_evaluation(watch.user, launch)
        Evaluation.objects.filter(pk=evaluation.pk).update(watch=watch)
        evaluation.watch = watch
    return evaluation


def take_due(watch: Watch, now: datetime) -> bool:
    """Move a due watch's `next_run_at` on by `every`, if no other process did since it was
    read (a conditional update); whether this caller launches the run."""
    assert watch.every is not None
    following = now + timedelta(minutes=watch.every)
    taken = Watch.objects.filter(pk=watch.pk, next_run_at=watch.next_run_at).update(
        next_run_at=following
    )
    if taken:
        watch.next_run_at = following
    return bool(taken)


def run_due(now: datetime | None = None) -> list[Evaluation]:
    """The sweep's part: launch each scheduled watch that is due, once even with several hub
    processes sweeping (a conditional update moves `next_run_at` on; only the process whose
    update changed the row launches). A launch refused (no live host, the model gone) is kept
    in `last_error` and the schedule goes on."""
    now = now or timezone.now()
    due = Watch.objects.filter(
        every__isnull=False, next_run_at__lte=now, user__is_active=True
    ).select_related("user", "host")
    launched = []
    for watch in due.order_by("next_run_at")[:MAX_DUE_PER_SWEEP]:
        if not take_due(watch, now):
            continue  # another hub process launched it
        try:
            launched.append(run_watch(watch))
            error = ""
        except DomainError as refused:
            error = "; ".join(
                f"{e['path']}: {e['message']}" if e["path"] else str(e["message"])
                for e in refused.errors
            )
            logger.info("scheduled run of watch %s refused: %s", watch.pk, error)
        if error != watch.last_error:
            Watch.objects.filter(pk=watch.pk).update(last_error=error)
    return launched


# -- the series ---------------------------------------------------------------------------------


def series(watch: Watch) -> list[dict[str, Any]]:
    """The watch's runs, oldest first (the latest MAX_RUNS): each with its status, host, the
    job options it changed against the watch, its median with its interval at the watch's
    batch size, and, for a run with samples, its verdict with the evidence and what changed
    against the reference run of its segment."""
    runs = list(
        watch.runs.select_related("host", "model", "result", "result__image").order_by(
            "-created_at", "-id"
        )[:MAX_RUNS]
    )
    runs.reverse()
    rows = {
        row.evaluation_id: row
        for row in BatchResult.objects.filter(
            evaluation__in=runs, batch_size=watch.batch_size
        ).select_related("samples")
    }
    try:
        pinned = validated_request(watch.request)
    except Invalid:
        pinned = {}  # a request the hub no longer takes: its runs show no changed options
    entries = [_entry(pinned, number, run, rows.get(run.pk)) for number, run in enumerate(runs, 1)]
    for entry in entries:
        if entry["_samples"] is not None and len(entry["_samples"].samples_ms) < 2:
            # One timed batch has no spread to judge a change by.
            entry["_samples"] = None
            entry["words"] = "too few timed batches at this batch size to judge"
    measured = [e for e in entries if e["status"] == SUCCEEDED and e["_samples"] is not None]
    samples = [entry["_samples"].samples_ms for entry in measured]
    verdicts = statistics.series_verdicts(samples) if samples else []
    for entry, verdict in zip(measured, verdicts, strict=True):
        _judge(entry, verdict, measured)
    for entry in entries:
        entry.pop("_samples", None)
        entry.pop("_run", None)
    return entries


def _entry(
    pinned: dict[str, Any], number: int, run: Evaluation, row: BatchResult | None
) -> dict[str, Any]:
    request = run.request if isinstance(run.request, dict) else {}
    try:
        samples = row.samples if row is not None else None
    except ObjectDoesNotExist:
        samples = None  # a result stored before samples were kept
    return {
        "number": number,
        "evaluation": str(run.pk),
        "status": run.status,
        "created_at": run.created_at,
        "host": run.host.name if run.host else None,
        "options": {
            key: request[key]
            for key in JobOptions.names()
            if key in request and key in pinned and request[key] != _as_stored(pinned[key])
        },
        "latency": row.latency if row is not None else None,
        "verdict": None,
        "words": "no samples at this batch size"
        if run.status == SUCCEEDED
        else f"not measured ({run.status})",
        "note": "",
        "evidence": None,
        "reference": None,
        "changed": [],
        "changed_text": "",
        "_run": run,
        "_samples": samples,
    }


def _as_stored(value: Any) -> Any:
    """A validated value as the evaluation's JSON request holds it (a tuple as a list)."""
    return list(value) if isinstance(value, tuple) else value


def _judge(
    entry: dict[str, Any], verdict: statistics.SeriesVerdict, measured: list[dict[str, Any]]
) -> None:
    """Fill a run's verdict and evidence, naming runs by their number in the series."""

    def number(index: int) -> int:
        return int(measured[index]["number"])

    entry["verdict"] = verdict.verdict
    entry["words"] = verdict.words
    entry["note"] = verdict.note(number)
    evidence = {
        key: getattr(verdict, key)
        for key in (
            "level_ms",
            "ratio",
            "low",
            "high",
            "p_value",
            "noise",
            "run_noise",
            "history",
            "test",
        )
    }
    entry["evidence"] = evidence | {"segment": [number(index) for index in verdict.segment]}
    if verdict.reference is not None:
        reference = measured[verdict.reference]
        entry["reference"] = reference["number"]
        entry["changed"] = changes(reference["_run"], entry["_run"])
        entry["changed_text"] = changed_text(entry["changed"])


def changes(reference: Evaluation, run: Evaluation) -> list[dict[str, Any]]:
    """What differs between two runs: the model's version, then compare's rows
    (`evaluations.compare.differences`: the request, the processing parameters, the stack,
    the image's packages), each key once: {section, key, before, after}."""
    rows = differences.compare([reference, run])["rows"]
    named: dict[str, dict[str, Any]] = {}
    # The manifest that ran (the request holds the range it was chosen by).
    if reference.model_version != run.model_version:
        named["model version"] = {
            "section": "model",
            "key": "model version",
            "before": reference.model_version,
            "after": run.model_version,
        }
    for row in rows:
        before, after = row["values"]
        # The first section that names a key (threads: the request's, and the stack's alike).
        named.setdefault(
            row["key"],
            {"section": row["section"], "key": row["key"], "before": before, "after": after},
        )
    return list(named.values())


def _shown(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    return str(value)


def changed_text(changed: list[dict[str, Any]]) -> str:
    """What changed, in one line: "threads: — → 1; trace_level: model → framework"."""
    return "; ".join(
        f"{item['key']}: {_shown(item['before'])} → {_shown(item['after'])}" for item in changed
    )


def summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """How many runs, regressions and improvements a series holds, and its latest verdict."""
    judged = [entry for entry in entries if entry["verdict"] is not None]
    return {
        "runs": len(entries),
        "regressions": sum(1 for e in judged if e["verdict"] == statistics.REGRESSION),
        "improvements": sum(1 for e in judged if e["verdict"] == statistics.IMPROVEMENT),
        "latest": judged[-1]["verdict"] if judged else None,
    }
