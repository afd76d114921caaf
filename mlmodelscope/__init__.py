"""The MLModelScope hub project: settings, URLs, ASGI application and Celery app."""

from mlmodelscope.celery import app as celery_app

__all__ = ["celery_app"]
