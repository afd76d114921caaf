"""Production mode talks to real PostgreSQL and Redis (these run in the suite's second pass)."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_suite_runs_on_postgresql_when_database_url_names_it() -> None:
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("select version()")
        assert "PostgreSQL" in cursor.fetchone()[0]


@pytest.mark.redis
def test_the_channel_layer_carries_a_message_through_redis() -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    assert type(layer).__module__.startswith("channels_redis")
    channel = async_to_sync(layer.new_channel)()
    group = f"test-{uuid.uuid4().hex}"
    async_to_sync(layer.group_add)(group, channel)
    async_to_sync(layer.group_send)(group, {"type": "status.update", "status": "running"})
    message = async_to_sync(layer.receive)(channel)
    assert message == {"type": "status.update", "status": "running"}


@pytest.mark.redis
def test_celery_publishes_a_task_by_name_on_the_redis_broker() -> None:
    import redis

    from mlmodelscope.celery import app

    assert settings.CELERY_BROKER_URL.startswith("redis://")
    queue = f"test-{uuid.uuid4().hex}"
    app.send_task("mlmodelscope.noop", args=[1], queue=queue)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        assert client.llen(queue) == 1
    finally:
        client.delete(queue)
