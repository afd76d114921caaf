"""`manage.py sweep`: the hub's sweep for lost evaluations in a process of its own (the
sweeper of docker-compose.yml), for hubs started with EVALUATION_SWEEP_SECONDS=0.

    manage.py sweep [--every S] [--once]
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from evaluations.broker_access import refuse_open_redis
from evaluations.sweeper import sweep_once


class Command(BaseCommand):
    help = "Sweep for lost evaluations (dispatch again or fail), every few seconds."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--every",
            type=float,
            default=None,
            help="seconds between sweeps (default: EVALUATION_SWEEP_SECONDS, or 5 when it is 0)",
        )
        parser.add_argument("--once", action="store_true", help="sweep once and exit")

    def handle(self, *args: Any, **options: Any) -> None:
        every = options["every"]
        if every is None:
            every = float(settings.EVALUATION_SWEEP_SECONDS or 5)
        if not 0 < every <= 3600:
            raise CommandError(f"--every must be more than 0 and at most 3600 seconds; got {every}")
        # Not on a Redis that anyone may read (BROKER_ALLOW_OPEN_DEFAULT_USER overrides).
        try:
            refuse_open_redis()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        while True:
            changed = sweep_once()
            if changed:
                self.stdout.write(f"{changed} evaluation(s) dispatched again or failed")
            if options["once"]:
                return
            time.sleep(every)
