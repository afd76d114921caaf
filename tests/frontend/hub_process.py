"""A hub served by daphne in a process of its own, as `make run` serves it, for the tests that
need what only the ASGI server gives a browser: WebSockets.

The hub runs on the embedded default in a fresh folder (SQLite, the filesystem broker, the
in-process channel layer, its own artifact store), so that the test's browser, the test itself
(over HTTP, as an agent or an API client would) and an agent process all talk to one hub.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct-horse-battery-staple"

# Run inside the hub's environment once it is migrated: a user who signs in with a password,
# her API token, and an operator's agent token. Prints them as JSON.
_SETUP = """
import json, os
from django.contrib.auth import get_user_model
from hub.models import ApiToken
User = get_user_model()
alice = User.objects.create_user("alice", password=os.environ["MLMS_TEST_PASSWORD"])
operator = User.objects.create_user("operator", is_staff=True)
_, user_token = ApiToken.issue(alice, name="tests", scopes=["read", "write", "evaluate"])
_, agent_token = ApiToken.issue(operator, name="agent", scopes=["agent"])
print(json.dumps({"user_token": user_token, "agent_token": agent_token}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class HubProcess:
    url: str
    folder: Path
    env: dict[str, str]
    user_token: str
    agent_token: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _log(self, name: str) -> Any:
        return (self.folder / f"{name}.log").open("wb")

    def logs(self) -> str:
        """Every process's log, for a failing test's report."""
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-4000:]}"
            for path in sorted(self.folder.glob("*.log"))
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """Call the hub's API; `body` is JSON unless it is bytes. Returns (status, JSON)."""
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310
        if data is not None:
            request.add_header("Content-Type", content_type)
        request.add_header("Authorization", f"Bearer {token or self.user_token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def seed_model_and_host(self) -> dict[str, Any]:
        """A public model `m` and dataset `d` (tests/hub/factories.py) and a registered host
        `cpu-1` running onnxruntime on cpu, so that an evaluation of `m` can be launched.
        Returns the host as the API answered its registration."""
        from tests.hub.factories import dataset_yaml, model_yaml

        for text in (model_yaml("m", visibility="public"), dataset_yaml("d", visibility="public")):
            status, body = self.request(
                "POST", "/api/v1/manifests/", text.encode(), content_type="application/x-yaml"
            )
            assert status == 201, body
        status, host = self.request(
            "POST",
            "/api/v1/hosts/",
            {
                "name": "cpu-1",
                "frameworks": [{"name": "onnxruntime", "version": "1.17.0", "devices": ["cpu"]}],
                "queues": ["host.cpu-1", "onnxruntime.cpu"],
                "pool": True,
            },
            token=self.agent_token,
        )
        assert status == 201, host
        return host  # type: ignore[no-any-return]

    def agent(self, name: str, frameworks: str = "onnxruntime") -> subprocess.Popen[bytes]:
        """Start a real agent (`python -m predictors.agent`) for this hub; it logs to
        <folder>/agent-<name>.log."""
        env = {**self.env, "MLMS_AGENT_TOKEN": self.agent_token}
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "predictors.agent",
                "--hub",
                self.url,
                "--name",
                name,
                "--frameworks",
                frameworks,
                "--cache",
                str(self.folder / f"cache-{name}"),
                "--pool",  # the operator's host, in the shared pool: it runs Alice's jobs
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._log(f"agent-{name}"),
        )
        self.processes.append(process)
        return process


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def running_hub(folder: Path) -> Iterator[HubProcess]:
    """Migrate a fresh hub in `folder`, serve it with daphne, and stop it (and its agents)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "CHANNEL_LAYER_URL",
            "ARTIFACT_ROOT",
            "AGENT_BROKER_URL",
            "DJANGO_SETTINGS_MODULE",
            "DJANGO_ALLOW_ASYNC_UNSAFE",
        )
    }
    env.update(MLMS_VAR_DIR=str(folder / "var"), DJANGO_SETTINGS_MODULE="mlmodelscope.settings")
    _manage(env, "migrate", "--noinput")
    setup = _manage({**env, "MLMS_TEST_PASSWORD": PASSWORD}, "shell", "-c", _SETUP)
    tokens = json.loads(setup.strip().splitlines()[-1])
    port = _free_port()
    hub = HubProcess(f"http://127.0.0.1:{port}", folder, env, **tokens)
    daphne = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        + ["mlmodelscope.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=hub._log("daphne-out"),
        stderr=hub._log("daphne"),
    )
    hub.processes.append(daphne)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(hub.url + "/api/v1/manifests/", timeout=5):  # noqa: S310
                    break
            except OSError:
                if daphne.poll() is not None:
                    raise RuntimeError(f"daphne stopped:\n{hub.logs()}")
                if time.monotonic() > deadline:
                    raise RuntimeError("daphne did not answer within 30 s") from None
                time.sleep(0.2)
        yield hub
    finally:
        for process in reversed(hub.processes):
            process.terminate()
        for process in hub.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
