"""The hub's Celery app. The hub dispatches work by task name; it never imports a framework.

A worker of this app (`celery -A mlmodelscope worker`) refuses to start on a Redis that a
client without a password may read, as daphne and `manage.py sweep` do
(`evaluations.broker_access.refuse_open_redis`; BROKER_ALLOW_OPEN_DEFAULT_USER overrides).
"""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlmodelscope.settings")

app = Celery("mlmodelscope")
app.set_default()  # every thread's `celery.current_app` (what the apps send with)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _refuse_open_redis(sender: Any = None, **_: Any) -> None:
    # Signals are process-wide: only a worker of this app (not an agent's, nor a test's).
    if getattr(sender, "app", None) is not app:
        return
    from evaluations.broker_access import refuse_open_redis

    refuse_open_redis()
