"""The production stack of `docker-compose.yml`, as `make compose-up` brings it up, with
Debian's docker-compose 1.29: PostgreSQL and Redis, the hub, the sweeper and an agent per
framework image. A user's token is made in the hub's container; an evaluation submitted with
`curl` succeeds in the onnxruntime agent's container, and its result names that image and its
digest; `docker-compose down` leaves no container behind.

The stack runs as a project of its own (its own containers, networks and volumes, removed at the
end) on a free port, with a store of only the two zoo entries it evaluates.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.livehub import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.postgres, pytest.mark.redis]

ONNXRUNTIME = "mlmodelscope/onnxruntime:1.31-cpu"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Stack:
    def __init__(self, folder: Path) -> None:
        self.project = f"mlmstest{secrets.token_hex(4)}"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        digests = subprocess.run(
            [sys.executable, "docker/build.py", "--digests"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        self.environment = (
            os.environ
            | dict(line.split("=", 1) for line in digests.split())
            | {
                "MLMS_PORT": str(self.port),
                "MLMS_REDIS_PASSWORD": secrets.token_hex(16),
                "MLMS_ZOO": str(folder),
            }
        )

    def compose(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["docker-compose", "-p", self.project, "-f", "docker-compose.yml", *arguments],
            cwd=ROOT,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(arguments)}:\n{done.stderr}")
        return done

    def curl(self, method: str, path: str, token: str, body: dict[str, Any] | None = None) -> Any:
        command = ["curl", "-sS", "-X", method, "-H", f"Authorization: Bearer {token}"]
        if body is not None:
            command += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        done = subprocess.run(
            [*command, f"{self.url}{path}"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "60", check=False).stdout


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed (make engine installs it)")
    from tests.predictors.zoo_store import zoo_store

    store = zoo_store(("digits", "digits-cnn"))
    # Readable by the hub's unprivileged user (pytest's own temporary folders are not).
    zoo = Path(tempfile.mkdtemp(prefix="mlms-compose-zoo-"))
    zoo.chmod(0o755)
    for part in ("models/digits-cnn", "datasets/digits"):
        shutil.copytree(store / part, zoo / part)
    stack = Stack(zoo)
    try:
        stack.compose("up", "-d")
        deadline = time.monotonic() + 240
        while True:  # the hub migrates and loads the manifests first
            probe = subprocess.run(
                [
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    f"{stack.url}/api/v1/manifests/",
                ],
                capture_output=True,
                text=True,
            )
            if probe.stdout == "200":
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the hub did not answer:\n{stack.logs()}")
            time.sleep(2)
        yield stack
    finally:
        stack.compose("down", "-v", "--remove-orphans", check=False)
        shutil.rmtree(zoo, ignore_errors=True)


def test_an_evaluation_submitted_with_curl_succeeds_in_a_container(stack: Stack) -> None:
    made = stack.compose(
        "exec",
        "-T",
        "hub",
        "django-admin",
        "create_token",
        "--user",
        "alice",
        "--create-user",
        "--scopes",
        "read,evaluate",
    )
    token = made.stdout.strip().splitlines()[-1]
    # The agents start once the hub has written their token, and Docker restarts them with a
    # growing delay until it is there: wait for the host that runs ONNX Runtime to be live, as
    # a user would (the other agent may register first).
    deadline = time.monotonic() + 180
    while not any(
        host.get("live")
        and any(framework["name"] == "onnxruntime" for framework in host.get("frameworks", []))
        for host in stack.curl("GET", "/api/v1/hosts/", token).get("results", [])
    ):
        assert time.monotonic() < deadline, f"no agent registered:\n{stack.logs()}"
        time.sleep(2)
    launched = stack.curl(
        "POST",
        "/api/v1/evaluations/",
        token,
        {"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits"},
    )
    assert "evaluations" in launched, launched
    evaluation_id = launched["evaluations"][0]["id"]
    deadline = time.monotonic() + 300
    while True:
        body = stack.curl("GET", f"/api/v1/evaluations/{evaluation_id}/", token)
        if body["status"] in ("succeeded", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, f"{body['status']}:\n{stack.logs()}"
        time.sleep(2)
    assert body["status"] == "succeeded", f"{body['history']}\n{stack.logs()}"
    assert body["host"] == "compose-onnxruntime"
    result = body["result"]
    assert result["accuracy"]["top1"] >= 0.95
    container = result["stack"]["container"]
    digest = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", ONNXRUNTIME],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert container["image"] == ONNXRUNTIME and container["digest"] == digest, container
    # The agent in the image registered the image: the hub serves its packages.
    image = stack.curl("GET", f"/api/v1/images/{digest}/", token)
    assert image["environment"]["python_packages"]["onnxruntime"] == "1.31.1", image


def test_compose_down_stops_the_stack(stack: Stack) -> None:
    running = stack.compose("ps", "-q").stdout.split()
    assert len(running) == 7, stack.compose("ps").stdout  # 2 services, hub, sweeper, 3 agents
    stack.compose("down", "-v", "--remove-orphans")
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={stack.project}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert left == []
