"""PostgreSQL connections stay within the hub's pool (DATABASE_POOL_SIZE) under daphne, where
every request's sync code runs in a thread of its own; see docs/reliability.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import _production

ROOT = Path(__file__).resolve().parents[2]
POOL_SIZE = 4
# Each ingest process of the hub (traces.ingest_processes) holds one connection of its own.
INGEST_PROCESSES = 2
CLIENTS = 4
SECONDS = 15


def _database_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The hub's DATABASES["default"] as a fresh process on `env` configures it."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "database = settings.DATABASES['default']; "
        "print(database['CONN_MAX_AGE'], database['OPTIONS'].get('pool'))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **os.environ,
            "MLMS_VAR_DIR": str(tmp_path / "var"),
            "DJANGO_SETTINGS_MODULE": "mlmodelscope.settings",
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/x",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_postgres_connections_come_from_a_pool_of_database_pool_size(tmp_path: Path) -> None:
    result = _database_settings(tmp_path, DATABASE_POOL_SIZE="7")

    assert result.returncode == 0, result.stderr
    assert result.stdout.split(" ", 1) == [
        "0",
        "{'min_size': 1, 'max_size': 7, 'timeout': 30}\n",
    ]


@pytest.mark.parametrize("value", ["0", "many"])
def test_a_bad_database_pool_size_fails_loudly(tmp_path: Path, value: str) -> None:
    result = _database_settings(tmp_path, DATABASE_POOL_SIZE=value)

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "DATABASE_POOL_SIZE" in result.stderr


@pytest.mark.postgres
@pytest.mark.redis
def test_four_busy_clients_stay_within_the_pool_and_get_no_server_error(tmp_path: Path) -> None:
    """4 clients alternate GET /api/v1/manifests/ and OTLP exports for 15 s against daphne in
    production mode; the hub's connections, counted every 0.5 s, never exceed its pool and
    one per ingest process."""
    with _production.production_hub(
        tmp_path,
        DATABASE_POOL_SIZE=str(POOL_SIZE),
        TRACE_INGEST_PROCESSES=str(INGEST_PROCESSES),
    ) as hub:
        sampler = _production.ConnectionSampler(hub.database, interval=0.5)
        sampler.start()
        load = _production.drive(hub, CLIENTS, SECONDS)
        samples = sampler.stop()
        log = hub.logs()

    assert load.requests > 0
    assert load.server_errors == 0, f"{load.statuses}\n{log}"
    assert not load.errors, load.errors[:3]
    assert set(load.statuses) == {200}, load.statuses
    assert len(samples) >= SECONDS * 2 - 2
    # The sampler counts from the server's `postgres` database: only the hub's own
    # connections are in its database.
    assert max(samples) <= POOL_SIZE + INGEST_PROCESSES, samples
