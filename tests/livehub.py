"""A live hub: the hub served by daphne in a process of its own, as `make run` serves it, with
its agents (`python -m predictors.agent`) and, for the fault tests, a Redis server of its own.
One helper for the test suite and the benchmarks; it needs no pytest.

    with running_hub(folder, manifests=True, users=True) as hub:
        hub.start_agent("cpu-1")
        status, body = hub.get("hosts/?live=1")

A hub lives in `folder`: its var folder (`MLMS_VAR_DIR`: secret key, uploads and, on the
embedded default, its SQLite database, filesystem broker and artifact store) and the log of
every process it starts (`<name>.log`: `hub.log` for daphne, `<agent name>.log`). Its
services (`services=`):

- `"embedded"`: the embedded default of `make run`, whatever this process's environment says;
- `"environ"`: as this process's environment configures the suite: a fresh PostgreSQL database
  of the hub's own on DATABASE_URL's server when DATABASE_URL is postgres://…, and
  CELERY_BROKER_URL and CHANNEL_LAYER_URL as they are when the broker is redis://… (else the
  embedded ones);
- `"production"`: a fresh PostgreSQL database of its own (on DATABASE_URL's server, else the
  local one) and Redis (CHANNEL_LAYER_URL's server, else the local one) as the Celery broker
  (database 0) and the channel layer (database 1).

`settings` are more environment variables of the hub (EVALUATION_SWEEP_SECONDS="0"). A fresh
database is created by `migrate()` and dropped by `close()`.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlsplit

import requests

from predictors.protocol import FINISHED

ROOT = Path(__file__).resolve().parents[1]
# The password of `add_users()`'s alice, who signs in with it.
PASSWORD = "correct-horse-battery-staple"  # noqa: S105 (a test user's)
# The environment variables that choose the hub's services and settings: never inherited.
SERVICE_VARIABLES = (
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "CHANNEL_LAYER_URL",
    "ARTIFACT_ROOT",
    "AGENT_BROKER_URL",
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "MLMS_AGENT_TOKEN",
)

Services = Literal["embedded", "environ", "production"]

# Run by `manage.py shell` (add_users): alice, who signs in with a password, her API token, and
# an operator's agent token; printed as JSON.
_USERS = """
import json, os
from django.contrib.auth import get_user_model
from hub.models import ApiToken
User = get_user_model()
alice = User.objects.create_user("alice", password=os.environ["MLMS_LIVEHUB_PASSWORD"])
operator = User.objects.create_user("operator", is_staff=True)
_, token = ApiToken.issue(alice, name="tests", scopes=["read", "write", "evaluate"])
_, agent_token = ApiToken.issue(operator, name="agent", scopes=["agent"])
print(json.dumps({"token": token, "agent_token": agent_token}))
"""


class LiveHubError(RuntimeError):
    """A process of the live hub failed, or what it was waited for did not come."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _is_postgres(url: str) -> bool:
    return url.startswith(("postgres", "pgsql"))


def postgres_server() -> str:
    """The PostgreSQL server (no database): DATABASE_URL's when it is postgres://…, else the
    local one."""
    url = os.environ.get("DATABASE_URL", "")
    return url.rsplit("/", 1)[0] if _is_postgres(url) else "postgres://postgres@127.0.0.1:5432"


def redis_server() -> str:
    """The Redis server (no database): CHANNEL_LAYER_URL's when it is redis://…, else the local
    one."""
    url = os.environ.get("CHANNEL_LAYER_URL", "")
    return url.rsplit("/", 1)[0] if url.startswith("redis") else "redis://127.0.0.1:6379"


def postgres(statement: str) -> None:
    """Run `statement` on postgres_server()'s `postgres` database (CREATE/DROP DATABASE)."""
    import psycopg

    with psycopg.connect(f"{postgres_server()}/postgres", autocommit=True) as connection:
        connection.execute(statement)  # type: ignore[arg-type]


# The migrated databases that hubs' databases are copies of, made once per process: "postgres"
# (a database's name) and "sqlite" (a file's path); see LiveHub.migrate.
_TEMPLATES: dict[str, str] = {}


class LiveHub:
    """A hub in `folder` and the processes it runs (see the module docstring). A context
    manager: leaving it closes the hub (`close()`)."""

    def __init__(
        self,
        folder: Path,
        *,
        services: Services = "embedded",
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.services = services
        env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
        env.update(MLMS_VAR_DIR=str(folder / "var"), DJANGO_SETTINGS_MODULE="mlmodelscope.settings")
        # The test machine's Redis has a default user without a password, on which a hub
        # refuses to start unless told (evaluations.broker_access.refuse_open_redis); each
        # hub's queues and broker users are its own (`purge_queues` removes them).
        env.update(
            BROKER_ALLOW_OPEN_DEFAULT_USER="true", BROKER_NAMESPACE=f"live-{secrets.token_hex(4)}"
        )
        # The PostgreSQL database of the hub's own, created by migrate(); "" on SQLite.
        self.database = ""
        broker = os.environ.get("CELERY_BROKER_URL", "")
        if services == "production" or (
            services == "environ" and _is_postgres(os.environ.get("DATABASE_URL", ""))
        ):
            self.database = f"mlms_live_{secrets.token_hex(4)}"
            env["DATABASE_URL"] = f"{postgres_server()}/{self.database}"
        if services == "production":
            env["CELERY_BROKER_URL"] = f"{redis_server()}/0"
            env["CHANNEL_LAYER_URL"] = f"{redis_server()}/1"
        elif services == "environ" and broker.startswith("redis"):
            env["CELERY_BROKER_URL"] = broker
            if "CHANNEL_LAYER_URL" in os.environ:
                env["CHANNEL_LAYER_URL"] = os.environ["CHANNEL_LAYER_URL"]
        env.update(settings or {})
        self.env = env
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        # Processes ended on purpose (kill, stop): `wait` does not count them as failures.
        self.ended: set[str] = set()
        self.pool_agents: tuple[str, ...] = ()
        self.token = ""  # a user's API token: the default of request()
        self.agent_token = ""  # an operator's agent token: the default of start_agent()
        self.agent_token_file: Path | None = None
        self._created = False
        self._logs: list[IO[bytes]] = []

    def __enter__(self) -> LiveHub:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- setting up ------------------------------------------------------------------------------

    def manage(self, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300) -> str:
        """`manage.py *args` on the hub's environment; its stdout, stripped."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise LiveHubError(f"manage.py {' '.join(args[:2])} failed:\n{done.stderr}")
        return done.stdout.strip()

    def shell(self, code: str, env: Mapping[str, str] | None = None) -> str:
        """Run `code` with `manage.py shell -c` in the hub's environment; its stdout."""
        return self.manage("shell", "-c", code, env=env)

    def migrate(self) -> None:
        """Create the hub's database, migrated: a copy of this process's migrated template
        (`_template`), made by `manage.py migrate` once per process and kind of database:
        CREATE DATABASE … TEMPLATE on PostgreSQL, a copy of the file on SQLite. A database that
        is there already is migrated in place."""
        if self.database:
            if not self._created:
                postgres(f"CREATE DATABASE {self.database} TEMPLATE {self._template()}")
                self._created = True
                return
        else:
            database = self.folder / "var" / "db.sqlite3"
            if not database.exists():
                database.parent.mkdir(parents=True, exist_ok=True)
                # SQLite's own copy: whole, whatever its journal still holds.
                source, target = sqlite3.connect(self._template()), sqlite3.connect(database)
                try:
                    source.backup(target)
                finally:
                    source.close()
                    target.close()
                return
        self.manage("migrate", "--noinput")

    def _template(self) -> str:
        """This process's migrated database of the hub's kind (made on first use, dropped at
        exit): a PostgreSQL database's name, or an SQLite file's path."""
        kind = "postgres" if self.database else "sqlite"
        if kind not in _TEMPLATES:
            env = dict(self.env)
            if kind == "postgres":
                name = f"mlms_template_{secrets.token_hex(4)}"
                postgres(f"CREATE DATABASE {name}")
                atexit.register(postgres, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                env["DATABASE_URL"] = f"{postgres_server()}/{name}"
                template = name
            else:
                folder = Path(tempfile.mkdtemp(prefix="mlms-template-"))
                atexit.register(shutil.rmtree, folder, True)
                env["MLMS_VAR_DIR"] = str(folder)
                template = str(folder / "db.sqlite3")
            self.manage("migrate", "--noinput", env=env)
            _TEMPLATES[kind] = template
        return _TEMPLATES[kind]

    def load_manifests(self) -> None:
        """The built-in manifests of manifests/, as `make run` loads them."""
        self.manage("load_manifests")

    def add_users(self) -> None:
        """alice, who signs in with PASSWORD and whose API token (read, write, evaluate) becomes
        `token`, and an operator (staff), whose agent token becomes `agent_token`."""
        out = self.shell(_USERS, env={"MLMS_LIVEHUB_PASSWORD": PASSWORD})
        tokens = json.loads(out.splitlines()[-1])
        self.token, self.agent_token = tokens["token"], tokens["agent_token"]

    def create_token(self, user: str, scopes: str, *, create_user: bool = True) -> str:
        """A new API token of `user` (scopes comma-separated) from `manage.py create_token`."""
        extra = ["--create-user"] if create_user else []
        out = self.manage("create_token", "--user", user, *extra, "--scopes", scopes)
        return out.splitlines()[-1]

    def write_agent_token(self, user: str = "local-agent") -> Path:
        """`manage.py agent_token`, as `make run` runs it: an agent token of the operator
        `user` in a file, which becomes `agent_token_file` (and its token `agent_token`)."""
        self.agent_token_file = Path(self.manage("agent_token", "--user", user))
        self.agent_token = self.agent_token_file.read_text().strip()
        return self.agent_token_file

    def purge_queues(self) -> None:
        """Delete this hub's jobs and its agents' broker users from a Redis broker (the keys and
        users of its BROKER_NAMESPACE), which `close()` does too."""
        broker, namespace = self.env.get("CELERY_BROKER_URL", ""), self.env.get("BROKER_NAMESPACE")
        if not broker.startswith("redis") or not namespace:
            return
        import redis

        client = redis.Redis.from_url(broker, socket_connect_timeout=2, socket_timeout=5)
        try:
            for key in client.scan_iter(match=f"{namespace}:*", count=1000):
                client.delete(key)
            for user in client.acl_users():
                name = user.decode() if isinstance(user, bytes) else str(user)
                if name.startswith(f"mlms-{namespace}-"):
                    client.acl_deluser(name)
        finally:
            client.close()

    def use_django(self) -> None:
        """Configure Django in this process on the hub (its settings, database and store), so
        that it can seed the hub with the ORM or call the hub's code in-process."""
        for key in SERVICE_VARIABLES:
            os.environ.pop(key, None)
        os.environ.update({k: v for k, v in self.env.items() if os.environ.get(k) != v})
        import django

        django.setup()

    # -- processes -------------------------------------------------------------------------------

    def spawn(
        self, name: str, command: list[str], env: Mapping[str, str]
    ) -> subprocess.Popen[bytes]:
        """Start `command` as the process `name`; its output goes to <folder>/<name>.log (a
        process started again adds to its log)."""
        log = (self.folder / f"{name}.log").open("ab")
        self._logs.append(log)
        process = subprocess.Popen(
            command, cwd=ROOT, env=dict(env), stdout=log, stderr=subprocess.STDOUT
        )
        self.processes[name] = process
        self.ended.discard(name)
        return process

    def start(self, timeout: float = 60) -> None:
        """Serve the hub with daphne (the process "hub"; again after `kill("hub")`, on the same
        port) and wait until it answers."""
        daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
        self.spawn("hub", [*daphne, "mlmodelscope.asgi:application"], self.env)
        self.wait(lambda: self.get("manifests/")[0] == 200, "the hub to answer", timeout)

    def restart(self, pause: float = 0) -> None:
        """Stop daphne (SIGTERM), wait `pause` seconds, and serve the hub again."""
        self.stop("hub")
        time.sleep(pause)
        self.start()

    def start_agent(
        self,
        name: str,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        pool: bool | None = None,
        frameworks: str = "onnxruntime",
        options: Sequence[str] = (),
    ) -> subprocess.Popen[bytes]:
        """The stock agent as a user runs it (the broker comes from the hub, never from here),
        as the process `name`, caching in <folder>/cache-<name>. Its token: `token_file`, else
        `token`, else the hub's `agent_token_file`, else its `agent_token`. `pool` (by default
        when the token is the hub's operator's) puts the host in the operators' shared pool;
        `options` are more of the agent's flags (`--docker`, `--memory 64m`)."""
        env = {
            k: v
            for k, v in self.env.items()
            if k not in ("DATABASE_URL", "MLMS_VAR_DIR", "CELERY_BROKER_URL")
        }
        command = [
            sys.executable,
            "-m",
            "predictors.agent",
            "--hub",
            self.url,
            "--name",
            name,
        ]
        command += ["--frameworks", frameworks, "--cache", str(self.folder / f"cache-{name}")]
        if pool is None:
            pool = token is None and token_file is None
        if token_file is None and token is None:
            token_file, token = self.agent_token_file, self.agent_token
        if token_file is not None:
            command += ["--token-file", str(token_file)]
        elif token:
            env["MLMS_AGENT_TOKEN"] = token
        if pool:
            command.append("--pool")
        command += list(options)
        return self.spawn(name, command, env)

    def start_pool(self, names: Iterable[str], timeout: float = 60) -> None:
        """Agents `names` of the shared pool (`start_agent`), waiting until all are live; they
        become `pool_agents`."""
        self.pool_agents = tuple(names)
        for name in self.pool_agents:
            self.start_agent(name)
        self.wait(
            lambda: self.live_hosts() >= set(self.pool_agents),
            f"agents {', '.join(self.pool_agents)} to register",
            timeout,
        )

    def kill(self, name: str) -> None:
        """SIGKILL the process `name` (daphne is "hub")."""
        self.ended.add(name)
        self.processes[name].send_signal(signal.SIGKILL)
        self.processes[name].wait(timeout=10)

    def stop(self, name: str, timeout: float = 15) -> None:
        """SIGTERM the process `name`, then SIGKILL it if it has not ended within `timeout`."""
        self.ended.add(name)
        _end([self.processes[name]], timeout)

    def close(self) -> None:
        """Stop every process (the latest started first) and drop the hub's database."""
        self.ended.update(self.processes)
        try:
            _end(list(reversed(self.processes.values())), 15)
        finally:
            for log in self._logs:
                log.close()
            self._logs.clear()
            if self._created:
                postgres(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")
                self._created = False
            try:
                self.purge_queues()
            except Exception:  # noqa: S110 (a Redis a fault test stopped: nothing to purge)
                pass

    def logs(self, tail: int = 4000) -> str:
        """The end of every process's log, for a failure's report."""
        return "\n".join(
            f"--- {path.name} ---\n" + path.read_text(errors="replace")[-tail:]
            for path in sorted(self.folder.glob("*.log"))
        )

    def wait(self, condition: Callable[[], Any], what: str, timeout: float) -> Any:
        """Call `condition` until it returns something true (a connection refused or a
        missing key count as false) and return that; fail, with the logs, when `timeout`
        seconds pass or a process that was not ended on purpose exits."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = condition()
            except (requests.ConnectionError, KeyError):
                value = None
            if value:
                return value
            for name, process in self.processes.items():
                if process.poll() is not None and name not in self.ended:
                    raise LiveHubError(f"{name} exited ({process.returncode})\n{self.logs()}")
            if time.monotonic() > deadline:
                raise LiveHubError(f"waited {timeout} s for {what}\n{self.logs()}")
            time.sleep(0.2)

    # -- the API -------------------------------------------------------------------------------

    def auth_headers(self, token: str | None = None) -> dict[str, str]:
        """An Authorization header with `token`, by default the hub's user `token`; none when
        there is neither (anonymous)."""
        token = token or self.token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> tuple[int, Any]:
        """Call the hub at `path` (/api/v1/…) with `token` (by default the user `token`);
        `body` is sent as JSON unless it is bytes. Returns (status, JSON or None)."""
        headers = self.auth_headers(token)
        if body is not None:
            headers["Content-Type"] = content_type
            if not isinstance(body, bytes):
                body = json.dumps(body).encode()
        response = requests.request(
            method, self.url + path, data=body, headers=headers, timeout=timeout
        )
        return response.status_code, response.json() if response.content else None

    def get(self, path: str) -> tuple[int, Any]:
        """GET /api/v1/<path> as the user `token`."""
        return self.request("GET", f"/api/v1/{path}")

    def live_hosts(self) -> set[str]:
        """The names of the hosts the hub counts live."""
        status, body = self.get("hosts/?live=1")
        if status != 200:
            raise LiveHubError(f"GET hosts/?live=1: {status} {body}")
        return {host["name"] for host in body["results"]}

    def launch(self, **fields: Any) -> str:
        """Launch an evaluation, of the zoo's digits-cnn on onnxruntime on `digits` unless
        `fields` say otherwise; its id."""
        body = {"model": "digits-cnn", "framework": "onnxruntime", "dataset": "digits", **fields}
        status, launched = self.request("POST", "/api/v1/evaluations/", body)
        if status != 201:
            raise LiveHubError(f"launch: {status} {launched}")
        return str(launched["evaluations"][0]["id"])

    def evaluation(self, evaluation_id: str) -> dict[str, Any]:
        status, body = self.get(f"evaluations/{evaluation_id}/")
        if status != 200:
            raise LiveHubError(f"evaluation {evaluation_id}: {status} {body}")
        return body  # type: ignore[no-any-return]

    def progressing(self, evaluation_id: str, timeout: float = 60) -> dict[str, Any]:
        """The evaluation once its agent has reported progress (it runs, and is part-way)."""
        return self.wait(  # type: ignore[no-any-return]
            lambda: (body := self.evaluation(evaluation_id))["progress"]["done"] > 0 and body,
            "the job to make progress",
            timeout,
        )

    def finished(self, evaluation_id: str, timeout: float = 90) -> dict[str, Any]:
        """The evaluation once it has finished (succeeded, failed or cancelled)."""

        def done() -> dict[str, Any] | None:
            body = self.evaluation(evaluation_id)
            return body if body["status"] in FINISHED else None

        return self.wait(done, f"evaluation {evaluation_id} to finish", timeout)  # type: ignore[no-any-return]

    def result_rows(self, evaluation_id: str) -> int:
        """Result rows of the evaluation, counted in the hub's own database."""
        query = "SELECT COUNT(*) FROM evaluations_result WHERE evaluation_id = "
        if self.database:
            import psycopg

            with psycopg.connect(self.env["DATABASE_URL"]) as connection:
                row = connection.execute(query + "%s", (evaluation_id,)).fetchone()
        else:
            with sqlite3.connect(self.folder / "var" / "db.sqlite3") as connection:
                row = connection.execute(query + "?", (evaluation_id.replace("-", ""),)).fetchone()
        if row is None:
            raise LiveHubError("COUNT(*) returned no row")
        return int(row[0])

    def websocket(self, path: str, token: str | None = None) -> WebSocket:
        """A WebSocket on the hub's `path` (/ws/…), authenticated with `?token=` (by default
        the user `token`; "" and no user token: anonymous)."""
        token = self.token if token is None else token
        return WebSocket(f"ws://127.0.0.1:{self.port}{path}" + (f"?token={token}" if token else ""))


@contextmanager
def running_hub(
    folder: Path,
    *,
    services: Services = "embedded",
    settings: Mapping[str, str] | None = None,
    manifests: bool = False,
    users: bool = False,
    timeout: float = 60,
) -> Iterator[LiveHub]:
    """A migrated hub in `folder`, served by daphne; with `manifests`, the built-in manifests
    loaded, with `users`, `add_users()`'s users. Closed afterwards, its agents included."""
    with LiveHub(folder, services=services, settings=settings) as hub:
        hub.migrate()
        if manifests:
            hub.load_manifests()
        if users:
            hub.add_users()
        hub.start(timeout)
        yield hub


def _end(processes: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM every process still running, then SIGKILL those that outlive `timeout`."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- WebSockets ---------------------------------------------------------------------------------


class Closed(Exception):
    """The server closed the WebSocket; `code` is its close code (1006: no close frame)."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"closed with {code} {reason}".strip())
        self.code = code


class WebSocket:
    """A WebSocket client (RFC 6455) over a plain socket that behaves as a browser's does while
    nobody writes to it: it answers the server's pings (daphne pings every 20 s and closes a
    socket whose pong does not come) and reports a close frame as `Closed`."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        key = base64.b64encode(secrets.token_bytes(16)).decode()
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        self.sock.sendall(
            (
                f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            byte = self.sock.recv(1)
            if not byte:
                raise Closed(1006, "during the handshake")
            head += byte
        if not head.startswith(b"HTTP/1.1 101"):
            raise Closed(1006, head.decode(errors="replace"))
        self.pings = 0

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise Closed(1006, "the connection ended without a close frame")
            data += chunk
        return data

    def _send(self, opcode: int, payload: bytes) -> None:
        """A masked frame, as a client sends them; pongs and closes only (< 126 bytes)."""
        mask = secrets.token_bytes(4)
        masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def receive(self, timeout: float = 30) -> dict[str, Any] | None:
        """The next text message, as JSON; None when none came within `timeout` seconds.
        Pings on the way are answered."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                first = self._exactly(1)[0]
            except TimeoutError:
                return None
            self.sock.settimeout(30)
            second = self._exactly(1)[0]
            length = second & 0x7F
            if length == 126:
                length = int.from_bytes(self._exactly(2), "big")
            elif length == 127:
                length = int.from_bytes(self._exactly(8), "big")
            payload = self._exactly(length)
            opcode = first & 0x0F
            if opcode == 0x9:  # ping
                self.pings += 1
                self._send(0xA, payload)
            elif opcode == 0x8:  # close
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                raise Closed(code, payload[2:].decode(errors="replace"))
            elif opcode == 0x1:
                return json.loads(payload)  # type: ignore[no-any-return]

    def close(self) -> None:
        try:
            self._send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        self.sock.close()


# --- A Redis server of its own -------------------------------------------------------------------


class RedisServer:
    """`redis-server` on a free port, without persistence (what it holds dies with it), that
    a test may kill and start again; `url` is its database 0. With `password`, its default user
    needs it (`--requirepass`, as docker-compose.yml runs Redis) and `url` carries it."""

    def __init__(self, folder: Path, password: str = "") -> None:
        self.folder = folder
        self.port = free_port()
        self.password = password
        credentials = f":{password}@" if password else ""
        self.url = f"redis://{credentials}127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def installed() -> bool:
        return shutil.which("redis-server") is not None

    def start(self, timeout: float = 10) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise LiveHubError("redis-server is not installed")
        self.process = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", str(self.folder)]
            + (["--requirepass", self.password] if self.password else []),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + timeout
        while True:
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise LiveHubError(f"redis-server did not start within {timeout} s") from None
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server (started again with `start()`)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
