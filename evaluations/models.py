"""Evaluation jobs, every change of their status, and their results.

An evaluation moves `queued → dispatched → running → succeeded | failed | cancelled`; a running
job whose host stops heartbeating goes back to `dispatched` (a new attempt) or fails after
EVALUATION_MAX_ATTEMPTS. Every transition is a StatusChange row, written by
`evaluations.actions`, never by a view.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db import models
from django.db.models import Q

from hub import trust
from hub.models import ContainerImage, Host, Manifest
from predictors import protocol, statistics


def new_trace_id() -> str:
    """A W3C trace id: 32 lowercase hex digits, not all zero."""
    return secrets.token_hex(16)


class EvaluationQuerySet(models.QuerySet["Evaluation"]):
    def visible_to(self, user: AbstractBaseUser | AnonymousUser) -> EvaluationQuerySet:
        """Who reads an evaluation (`evaluations.sharing`): anyone, once it is published (only
        an evaluation of a public model and dataset can be, and one whose manifest turns
        private is unpublished then); its owner; the members of a group it is shared with;
        staff."""
        published = Q(published=True)
        if not user.is_authenticated:
            return self.filter(published)
        if user.is_staff:  # type: ignore[union-attr]
            return self
        shared = Evaluation.shared_groups.through.objects.filter(group__user=user).values(
            "evaluation_id"
        )
        return self.filter(published | Q(user=user) | Q(pk__in=shared))

    def active(self) -> EvaluationQuerySet:
        return self.filter(status__in=Evaluation.ACTIVE)


class Evaluation(models.Model):
    # The statuses (`predictors.protocol`), at hand on the model.
    QUEUED = protocol.QUEUED
    DISPATCHED = protocol.DISPATCHED
    RUNNING = protocol.RUNNING
    SUCCEEDED = protocol.SUCCEEDED
    FAILED = protocol.FAILED
    CANCELLED = protocol.CANCELLED
    STATUSES = [(s, s) for s in protocol.STATUSES]
    ACTIVE = protocol.ACTIVE
    FINISHED = protocol.FINISHED

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluations"
    )
    # The manifests may be deleted later; the evaluation keeps their identity in the fields
    # below and their content hash in its result.
    model = models.ForeignKey(
        Manifest, null=True, on_delete=models.SET_NULL, related_name="model_evaluations"
    )
    dataset = models.ForeignKey(
        Manifest, null=True, on_delete=models.SET_NULL, related_name="dataset_evaluations"
    )
    model_name = models.CharField(max_length=64)
    model_version = models.CharField(max_length=128)
    framework = models.CharField(max_length=32)
    dataset_name = models.CharField(max_length=64)
    dataset_version = models.CharField(max_length=128)
    split = models.CharField(max_length=64)
    device = models.CharField(max_length=8)
    # The model's task (from its manifest): a leaderboard is a task and a dataset.
    task = models.CharField(max_length=64, blank=True, default="")
    # The model is marked not trained (`attributes.trained: false`, seeded weights): its
    # accuracy means nothing, and every page and answer that shows the result says so.
    untrained = models.BooleanField(default=False)
    # The request as validated, with its defaults filled in; the keys people compare and
    # filter on are columns of their own too.
    request = models.JSONField()
    trace_level = models.CharField(max_length=16, default="model")
    threads = models.PositiveIntegerField(null=True, blank=True)
    seed = models.BigIntegerField(default=0)
    # The manifest parameters it overrides, PATH=VALUE, one per line in the order applied.
    overrides = models.CharField(max_length=1024, blank=True, default="", db_index=True)

    # The result's accuracy, copied here when it arrives: the history sorts by it, and an
    # evaluation without a result (yet) sorts last.
    top1 = models.FloatField(null=True, blank=True)
    top5 = models.FloatField(null=True, blank=True)
    # Private to its owner until published (`evaluations.sharing`), or shared with groups.
    published = models.BooleanField(default=False)
    published_at = models.DateTimeField(null=True, blank=True)
    shared_groups = models.ManyToManyField(Group, blank=True, related_name="shared_evaluations")

    status = models.CharField(max_length=16, choices=STATUSES, default=QUEUED)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)

    # Where it goes: the Celery queue of its last dispatch, and the host it is pinned to (set
    # for `hosts: all` and when no capability queue serves only eligible hosts).
    queue = models.CharField(max_length=160, blank=True, default="")
    target_host = models.ForeignKey(
        Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Where it runs: the host that claimed it, with the framework version installed there.
    host = models.ForeignKey(
        Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="evaluations"
    )
    framework_version = models.CharField(max_length=64, blank=True, default="")
    # Each dispatch sends one broker message carrying its number; only a message of the
    # current dispatch can be claimed. Each claim is an attempt, and gets a fresh claim id that
    # the agent's later reports must carry.
    dispatches = models.PositiveIntegerField(default=0)
    # The transactional outbox of the current dispatch: when it was committed, and when the
    # broker accepted its message (null until then). The sweep sends a dispatch that was never
    # sent (the hub stopped between commit and send), and one whose message was lost (not
    # claimed although a host that consumes its queue sat idle).
    dispatched_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    claim = models.CharField(max_length=32, blank=True, default="")
    # When the claimant last reported (claim, progress): the agent reports at least every few
    # seconds while it works, so a running job with no recent report has been lost.
    last_report_at = models.DateTimeField(null=True, blank=True)

    trace_id = models.CharField(max_length=32, default=new_trace_id, editable=False)
    # The caller's span (16 hex digits) when the launch carried a W3C `traceparent`: the parent
    # of the evaluation's root span. `hosts: all` gives every evaluation launched the same one.
    trace_parent_span_id = models.CharField(max_length=16, blank=True, default="", editable=False)
    # The evaluations launched by one request (`hosts: all` launches one per host).
    group = models.UUIDField(default=uuid.uuid4, db_index=True)
    # The watch it is a run of (`evaluations.watches`): a re-run of a pinned request.
    watch = models.ForeignKey(
        "Watch", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = EvaluationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(fields=["user", "-created_at"]),
            models.Index(fields=["status"]),
            models.Index(fields=["model_name"]),
            models.Index(fields=["framework", "framework_version"]),
            models.Index(fields=["dataset_name", "dataset_version", "split"]),
            models.Index(fields=["device"]),
            models.Index(fields=["trace_level"]),
            # The trace receiver and the trace API find an evaluation by its trace id.
            models.Index(fields=["trace_id"]),
            # The leaderboards: published results of one task and dataset.
            models.Index(fields=["published", "task", "dataset_name", "status"]),
            # The history's default order, over everything a user may read; and who may read
            # (`visible_to`), so that a count reads the index alone.
            models.Index(fields=["-created_at"], name="evaluation_newest"),
            models.Index(fields=["published", "user", "id"], name="evaluation_readers"),
            # …and, with a framework filter, the same count from one index.
            models.Index(
                fields=["framework", "published", "user", "id"], name="evaluation_readers_fw"
            ),
            # PostgreSQL also indexes accuracy either way with evaluations without one last
            # (`evaluation_best_top1`, `evaluation_worst_top1`, migration 0013: SQLite has no
            # NULLS LAST in an index).
        ]

    def __str__(self) -> str:
        return f"evaluation {self.pk} ({self.model_name} {self.model_version}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    def why_not_on(self, host: Host) -> str | None:
        """Why `host` may not run this evaluation (`hub.trust`: its launcher does not trust
        the host, or the host's owner may not read its model or dataset), or None. A manifest
        deleted since the launch is left out (the claim or the run says what that means)."""
        manifests = [m for m in (self.model, self.dataset) if m is not None]
        named = str((self.request or {}).get("host") or "")
        if not trust.trusts(self.user, host, named=named):
            return f"its launcher does not trust host {host.name}"
        if not trust.reads(host, manifests):
            return f"the owner of host {host.name} may not read its model or dataset"
        return None


class StatusChange(models.Model):
    """One transition of an evaluation, with when and why."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="history")
    status = models.CharField(max_length=16, choices=Evaluation.STATUSES)
    reason = models.TextField(blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    host = models.ForeignKey(
        Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.evaluation_id} → {self.status}"


class Result(models.Model):
    """What a finished evaluation measured; one per evaluation."""

    evaluation = models.OneToOneField(Evaluation, on_delete=models.CASCADE, related_name="result")
    # At the first batch size (accuracy does not depend on the batch size); null for a
    # latency-only evaluation (nothing scored).
    top1 = models.FloatField(null=True, blank=True)
    # Null where it says nothing: top-5 of five classes or fewer.
    top5 = models.FloatField(null=True, blank=True)
    count = models.PositiveIntegerField()
    # The per-input outputs (true class, top-k classes and probabilities of every input): a
    # columnar file in the artifact store (`evaluations.outputs`), not rows of JSON here.
    predictions_path = models.CharField(max_length=255, blank=True, default="")
    top_k = models.PositiveSmallIntegerField(default=1)
    # The content hash of the model manifest that ran (as the agent computed it).
    content_hash = models.CharField(max_length=64, db_index=True)
    # The hardware it ran on, as the agent read it (from `stack`), to filter and compare on.
    cpu_model = models.CharField(max_length=256, blank=True, default="", db_index=True)
    gpu_model = models.CharField(max_length=256, blank=True, default="", db_index=True)
    # What the leaderboards show and sort by: the latency at batch size 1 (null when it was not
    # measured), and the best throughput with its batch size.
    p50_ms_at_1 = models.FloatField(null=True, blank=True, db_index=True)
    # The interval of that median (None: not bounded, or no samples kept).
    p50_low_ms_at_1 = models.FloatField(null=True, blank=True)
    p50_high_ms_at_1 = models.FloatField(null=True, blank=True)
    p99_ms_at_1 = models.FloatField(null=True, blank=True)
    best_throughput_ips = models.FloatField(null=True, blank=True, db_index=True)
    best_batch_size = models.PositiveIntegerField(null=True, blank=True)
    # The configuration it ran (`evaluations.leaderboards.configuration_of`: model content,
    # framework version, dataset, device, CPU, GPU, threads, seed, overrides) and how many
    # published runs of it agree with this one, itself included (kept by the leaderboards).
    configuration = models.CharField(max_length=64, blank=True, default="", db_index=True)
    agreeing_runs = models.PositiveIntegerField(default=1)
    # The host's hardware/software stack as the agent read it when the job finished.
    stack = models.JSONField()
    # The evaluation loop's whole report (settings, per-batch-size timings, notes, …).
    details = models.JSONField()
    host = models.ForeignKey(
        Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The predictor image it ran in (an agent with --docker), when its host registered it.
    image = models.ForeignKey(
        ContainerImage, null=True, blank=True, on_delete=models.SET_NULL, related_name="results"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # PostgreSQL also indexes the best throughput first, rows without one last
        # (`result_best_throughput`, migration 0013).
        indexes = [models.Index(fields=["top1"])]

    def __str__(self) -> str:
        return f"result of {self.evaluation_id}"

    def summarize(self, rows: list[BatchResult]) -> None:
        """Set the leaderboard columns from the result's rows."""
        at_1 = next((row for row in rows if row.batch_size == 1), None)
        self.p50_ms_at_1 = at_1.p50_ms if at_1 else None
        self.p50_low_ms_at_1 = at_1.p50_low_ms if at_1 else None
        self.p50_high_ms_at_1 = at_1.p50_high_ms if at_1 else None
        self.p99_ms_at_1 = at_1.p99_ms if at_1 else None
        best = max(rows, key=lambda row: (row.throughput_ips, -row.batch_size), default=None)
        self.best_throughput_ips = best.throughput_ips if best else None
        self.best_batch_size = best.batch_size if best else None

    @property
    def latency(self) -> dict[str, dict[str, Any]]:
        """{"<batch size>": {mean_ms, p50_ms, p90_ms, p99_ms, min_ms, max_ms, std_ms,
        p50_low_ms, p50_high_ms, p90_bounded, p99_bounded, count}}"""
        return {str(row.batch_size): row.latency for row in self.batch_results.all()}

    @property
    def throughput(self) -> dict[str, float]:
        """{"<batch size>": inputs per second}"""
        return {str(row.batch_size): row.throughput_ips for row in self.batch_results.all()}


class BatchResult(models.Model):
    """What one batch size of a result measured: a row per batch size, to filter, sort and
    compare on."""

    LATENCY_FIELDS = protocol.LATENCY_KEYS
    # What `predictors.statistics.latency` adds: the median's interval and whether the samples
    # bound p90 and p99 (None: a result stored without its samples).
    INTERVAL_FIELDS = ("p50_low_ms", "p50_high_ms", "p90_bounded", "p99_bounded")

    result = models.ForeignKey(Result, on_delete=models.CASCADE, related_name="batch_results")
    evaluation = models.ForeignKey(
        Evaluation, on_delete=models.CASCADE, related_name="batch_results"
    )
    batch_size = models.PositiveIntegerField()
    # A float column per latency key (mean_ms, p50_ms, …), in the protocol's order.
    locals().update({key: models.FloatField() for key in LATENCY_FIELDS})
    p50_low_ms = models.FloatField(null=True, blank=True)
    p50_high_ms = models.FloatField(null=True, blank=True)
    p90_bounded = models.BooleanField(null=True, blank=True)
    p99_bounded = models.BooleanField(null=True, blank=True)
    # The batches the latency statistics cover.
    count = models.PositiveIntegerField()
    throughput_ips = models.FloatField()

    class Meta:
        ordering = ["batch_size"]
        constraints = [
            models.UniqueConstraint(fields=["result", "batch_size"], name="one_row_per_batch_size")
        ]
        indexes = [
            models.Index(fields=["batch_size", "p50_ms"]),
            models.Index(fields=["batch_size", "throughput_ips"]),
            # The history's `batch_size` filter, counted from the index alone.
            models.Index(fields=["batch_size", "evaluation"], name="batchresult_size_evaluation"),
        ]

    def __str__(self) -> str:
        return f"batch size {self.batch_size} of {self.evaluation_id}"

    @property
    def latency(self) -> dict[str, Any]:
        """The row's figures and, in `text`, each as every surface prints it (the statistics
        layer's rounding rule)."""
        values: dict[str, Any] = {
            **{name: getattr(self, name) for name in self.LATENCY_FIELDS + self.INTERVAL_FIELDS},
            "count": self.count,
        }
        return values | {"text": statistics.latency_text(values)}


class LatencySamples(models.Model):
    """Each timed batch's latency (ms, in the order timed) of one batch size of a result: what
    a comparison tests a difference on. Apart from `BatchResult` so that listings never load
    them. Results stored before samples were kept have none."""

    batch_result = models.OneToOneField(
        BatchResult, on_delete=models.CASCADE, related_name="samples"
    )
    samples_ms = models.JSONField()

    def __str__(self) -> str:
        return f"samples of {self.batch_result}"


class Watch(models.Model):
    """A pinned launch request, re-run by hand or every `every` minutes: its runs are a series
    that `evaluations.watches` labels regression, improvement or noise against the noise the
    series itself shows. Private to its owner."""

    # The schedule's bounds, in minutes: from five minutes to four weeks.
    MIN_EVERY = 5
    MAX_EVERY = 4 * 7 * 24 * 60

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="watches"
    )
    name = models.CharField(max_length=64)
    # The launch request as `POST /api/v1/evaluations/` takes it, kept as given (checked when
    # the watch is made and again at every run); the model's name again as a column (the model
    # page lists them).
    request = models.JSONField()
    model_name = models.CharField(max_length=64)
    # The batch size whose latency the series follows (one the request times).
    batch_size = models.PositiveIntegerField()
    # The host the request names (`request["host"]`), when it is pinned to one.
    host = models.ForeignKey(
        Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="watches"
    )
    # Minutes between scheduled runs (None: run by hand only), and when the next one is due.
    every = models.PositiveIntegerField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # Why the last scheduled run could not be launched ("" once one was).
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="one_watch_name")]
        indexes = [models.Index(fields=["user", "model_name"], name="watch_user_model")]

    def __str__(self) -> str:
        return f"watch {self.name} of {self.user_id}"


class Divergence(models.Model):
    """Where two evaluations of one model part: each re-run on a few chosen inputs with every
    layer's output captured (`capture_a`, `capture_b`: evaluations launched with the job option
    `capture_inputs`), then matched layer by layer (`evaluations.divergences`). Its owner's own,
    like the evaluations it launched."""

    PENDING, DONE, FAILED = "pending", "done", "failed"
    STATUSES = [(PENDING, PENDING), (DONE, DONE), (FAILED, FAILED)]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="divergences"
    )
    # The two evaluations compared (A the reference); null once deleted.
    a = models.ForeignKey(
        Evaluation, null=True, on_delete=models.SET_NULL, related_name="divergences_as_a"
    )
    b = models.ForeignKey(
        Evaluation, null=True, on_delete=models.SET_NULL, related_name="divergences_as_b"
    )
    # The dataset indices whose layer outputs are compared, and why these ("disagreeing",
    # "first" or "chosen", per input).
    inputs = models.JSONField()
    chosen_because = models.JSONField(default=list)
    # The relative error a layer's output may reach before it diverges.
    tolerance = models.FloatField()
    capture_a = models.ForeignKey(
        Evaluation, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    capture_b = models.ForeignKey(
        Evaluation, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=STATUSES, default=PENDING)
    reason = models.TextField(blank=True, default="")
    # The comparison (`predictors.analysis.divergence.diverge`), with what differs between
    # A and B (`evaluations.compare.differences`).
    report = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "id"]

    def __str__(self) -> str:
        return f"divergence {self.pk} ({self.status})"
