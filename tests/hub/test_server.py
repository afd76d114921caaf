"""The hub as `make run` serves it: migrate, load the built-in manifests, daphne on a port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback only)
        return response.status, response.read()


def test_daphne_serves_the_builtin_manifests_on_the_embedded_default(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CHANNEL_LAYER_URL")
    }
    env["MLMS_VAR_DIR"] = str(tmp_path / "var")
    manage = [sys.executable, "manage.py"]
    for command in (["migrate", "--noinput"], ["load_manifests"]):
        done = subprocess.run(
            manage + command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    builtin = sorted((ROOT / "manifests").rglob("*.yaml"))
    assert builtin, "the repository ships built-in manifests"

    port = _free_port()
    daphne = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "mlmodelscope.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/api/v1/manifests/?page_size=500")
                break
            except OSError:
                assert daphne.poll() is None, daphne.stderr.read().decode() if daphne.stderr else ""
                assert time.monotonic() < deadline, "daphne did not answer within 30 s"
                time.sleep(0.3)
        assert status == 200
        listing = json.loads(body)
        assert listing["count"] == len(builtin)
        names = {item["name"] for item in listing["results"]}
        assert {"digits-cnn", "digits"} <= names
        status, page = _get(f"http://127.0.0.1:{port}/")
        assert status == 200 and b"digits-cnn" in page
        status, docs = _get(f"http://127.0.0.1:{port}/api/docs/")
        assert status == 200
    finally:
        daphne.terminate()
        daphne.wait(timeout=10)
