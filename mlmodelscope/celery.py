"""The hub's Celery app. The hub dispatches work by task name; it never imports a framework."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlmodelscope.settings")

app = Celery("mlmodelscope")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
