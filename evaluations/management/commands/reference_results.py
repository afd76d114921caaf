"""Evaluate the built-in zoo on the live hosts and publish the results as reference results, so
that a fresh hub's leaderboards are not empty.

    python manage.py reference_results [--wait-for-host 600] [--timeout 1800] [--limit N]

For every built-in model manifest whose training dataset is a built-in dataset, in every
framework a live host of the operators' shared pool runs, it launches one evaluation (owned by
the operators' user `mlmodelscope`), waits for it, and publishes it when it succeeds. A
configuration that already has a reference result for the same model content and host is
skipped, so running it again (every `make run` does, in the background) launches only what is
missing. Progress goes to the standard output, a line per evaluation.
"""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from evaluations import actions, sharing
from evaluations.actions.launch import image_sizes
from evaluations.api.serializers import EvaluationRequestSerializer
from evaluations.models import Evaluation
from hub.errors import DomainError
from hub.models import Host, Manifest

REFERENCE_USER = "mlmodelscope"


class Command(BaseCommand):
    help = "Evaluate the built-in zoo on the live shared hosts and publish reference results."

    def add_arguments(self, parser: Any) -> None:
        for flag, default, what in (
            ("--wait-for-host", 600, "a live host of the shared pool"),
            ("--timeout", 1800, "all the evaluations to finish"),
        ):
            wait = f"seconds to wait for {what} (default {default})"
            parser.add_argument(flag, type=int, default=default, help=wait)
        parser.add_argument(
            "--limit", type=int, default=None, help="inputs per evaluation (default: the split)"
        )
        parser.add_argument(
            "--model", action="append", default=None, help="only this model (repeatable)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be a positive integer")
        user = self._user()
        hosts = self._wait_for_hosts(options["wait_for_host"])
        frameworks = sorted(
            {entry["name"] for host in hosts for entry in host.frameworks if "name" in entry}
        )
        self.stdout.write(
            f"reference results: {len(hosts)} live host(s) with {', '.join(frameworks)}"
        )
        launched: list[Evaluation] = []
        for manifest in self._manifests(frameworks, options["model"]):
            dataset = _reference_dataset(manifest)
            if self._done(manifest, hosts):
                self.stdout.write(f"  {manifest.name} [{manifest.framework}]: reference exists")
                continue
            request = {
                "model": manifest.name,
                "model_version": manifest.version,
                "framework": manifest.framework,
                "dataset": dataset,
                "hosts": "all",
                "batch_sizes": self._batch_sizes(manifest, dataset),
            }
            if options["limit"]:
                request["limit"] = options["limit"]
            serializer = EvaluationRequestSerializer(data=request)
            if not serializer.is_valid():
                self.stderr.write(f"  {manifest.name} [{manifest.framework}]: {serializer.errors}")
                continue
            try:
                evaluations = actions.launch_evaluation(user, serializer.validated_data)
            except DomainError as error:
                self.stderr.write(f"  {manifest.name} [{manifest.framework}]: {error}")
                continue
            launched += evaluations
            self.stdout.write(
                f"  {manifest.name} [{manifest.framework}] on {dataset}: launched "
                f"{len(evaluations)}"
            )
        self._finish(user, launched, options["timeout"])

    def _batch_sizes(self, manifest: Manifest, dataset: str) -> list[int]:
        """1, 8 and 32; 1 alone for a model that keeps each image's size on a dataset whose
        images come in several (a batch holds images of one size: `launch.image_sizes`)."""
        stored = (
            Manifest.objects.filter(kind=Manifest.DATASET, builtin=True, name=dataset)
            .order_by("-created_at")
            .first()
        )
        if stored is not None and len(image_sizes(manifest.content, stored, "validation")) > 1:
            return [1]
        return [1, 8, 32]

    def _user(self) -> Any:
        User = get_user_model()
        user, created = User.objects.get_or_create(username=REFERENCE_USER)
        if created:
            user.set_unusable_password()
            user.save()
        return user

    def _wait_for_hosts(self, seconds: int) -> list[Host]:
        deadline = time.monotonic() + seconds
        announced = False
        while True:
            hosts = [host for host in Host.objects.filter(pool=True) if host.is_live]
            if hosts:
                return hosts
            if time.monotonic() >= deadline:
                raise CommandError(
                    f"no live host in the shared pool after {seconds} s: start an agent with "
                    f"`mlms agent --pool` (make run starts one)"
                )
            if not announced:
                self.stdout.write("reference results: waiting for a live host of the shared pool")
                announced = True
            time.sleep(2)

    def _manifests(self, frameworks: list[str], only: list[str] | None) -> list[Manifest]:
        datasets = set(
            Manifest.objects.filter(kind=Manifest.DATASET, builtin=True).values_list(
                "name", flat=True
            )
        )
        chosen = []
        for manifest in Manifest.objects.filter(
            kind=Manifest.MODEL, builtin=True, visibility=Manifest.PUBLIC
        ).order_by("name", "framework", "-created_at"):
            if only and manifest.name not in only:
                continue
            dataset = _reference_dataset(manifest)
            if manifest.framework in frameworks and dataset in datasets:
                chosen.append(manifest)
        # The newest version of each model and framework.
        newest: dict[tuple[str, str], Manifest] = {}
        for manifest in chosen:
            newest.setdefault((manifest.name, manifest.framework), manifest)
        return list(newest.values())

    def _done(self, manifest: Manifest, hosts: list[Host]) -> bool:
        """Whether every live host has a published or running reference of this manifest."""
        covered = set(
            Evaluation.objects.filter(
                user__username=REFERENCE_USER,
                model_name=manifest.name,
                model_version=manifest.version,
                framework=manifest.framework,
            )
            .filter(status__in=(*Evaluation.ACTIVE, Evaluation.SUCCEEDED))
            .values_list("host_id", "target_host_id")
            .distinct()
        )
        covered_hosts = {host for pair in covered for host in pair if host is not None}
        return all(host.pk in covered_hosts for host in hosts)

    def _finish(self, user: Any, launched: list[Evaluation], timeout: int) -> None:
        deadline = time.monotonic() + timeout
        waiting = {evaluation.pk: evaluation for evaluation in launched}
        published = failed = 0
        while waiting and time.monotonic() < deadline:
            for evaluation in Evaluation.objects.filter(pk__in=list(waiting)).filter(
                status__in=Evaluation.FINISHED
            ):
                waiting.pop(evaluation.pk)
                name = f"{evaluation.model_name} [{evaluation.framework}]"
                if evaluation.status == Evaluation.SUCCEEDED:
                    sharing.publish(user, evaluation.pk)
                    published += 1
                    self.stdout.write(f"  {name}: published ({len(waiting)} to go)")
                else:
                    failed += 1
                    self.stdout.write(f"  {name}: {evaluation.status} ({len(waiting)} to go)")
            if waiting:
                time.sleep(1)
        self.stdout.write(
            f"reference results: {published} published, {failed} failed, "
            f"{len(waiting)} still running"
        )
        if waiting or failed:
            raise CommandError(f"{failed} failed and {len(waiting)} unfinished")


def _reference_dataset(manifest: Manifest) -> str:
    """The built-in dataset a zoo model's reference result is measured on: its
    `reference_dataset` attribute (a pretrained model whose training data is not here), else
    its `training_dataset`."""
    attributes = manifest.content.get("attributes") or {}
    return str(attributes.get("reference_dataset") or attributes.get("training_dataset") or "")
