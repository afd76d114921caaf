"""Settings come from the environment; a bad value stops start-up with a message naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _start(env_overrides: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CHANNEL_LAYER_URL")
    }
    env.update(
        {"MLMS_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "mlmodelscope.settings"}
    )
    env.update(env_overrides)
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['ENGINE']); print(settings.CELERY_BROKER_URL); "
        "print(settings.CHANNEL_LAYERS['default']['BACKEND'])"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_embedded_default_needs_no_server(tmp_path: Path) -> None:
    result = _start({}, tmp_path)
    assert result.returncode == 0, result.stderr
    engine, broker, layer = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert broker == "filesystem://"
    assert layer == "channels.layers.InMemoryChannelLayer"
    assert (tmp_path / "var" / "broker" / "queue").is_dir()


def test_production_services_are_selected_by_environment(tmp_path: Path) -> None:
    result = _start(
        {
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/x",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
            "CHANNEL_LAYER_URL": "redis://127.0.0.1:6379/1",
        },
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    engine, broker, layer = result.stdout.split()
    assert engine == "django.db.backends.postgresql"
    assert broker == "redis://127.0.0.1:6379/0"
    assert layer == "channels_redis.core.RedisChannelLayer"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql://root@localhost/x"),
        ("CELERY_BROKER_URL", "kafka://localhost"),
        ("CHANNEL_LAYER_URL", "memory://"),
        ("DEBUG", "maybe"),
        ("SECRET_KEY", "short"),
        ("HOST_LIVE_SECONDS", "soon"),
        ("MANIFEST_MAX_BYTES", "-5"),
    ],
)
def test_a_bad_value_fails_loudly_naming_the_variable(
    tmp_path: Path, name: str, value: str
) -> None:
    result = _start({name: value}, tmp_path)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert name in result.stderr
