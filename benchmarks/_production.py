"""A hub in production mode, for the reliability checks: `connections.py` and
`idle_websocket.py` here, `tests/hub/test_database_connections.py` and
`tests/evaluations/test_idle_websockets.py` in the suite. See docs/reliability.md.

It is `_hub.py`'s hub (migrated with `_hub.migrate`, served by `_hub.serve`'s daphne on a free
port) with the production services instead of the embedded default: a fresh PostgreSQL database
of its own (`DATABASE_URL`, dropped afterwards), Redis as the Celery broker (`CELERY_BROKER_URL`)
and as the channel layer (`CHANNEL_LAYER_URL`). Seeded with one user, a token of hers and a
finished evaluation of hers, so that a client can read the API, export spans into the
evaluation's trace (`POST /v1/traces`) and follow it over a WebSocket.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import secrets
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import _hub  # noqa: E402

# The servers: those of DATABASE_URL and CHANNEL_LAYER_URL when set (as `make test-postgres` sets
# them), else the local ones; the hub gets a database of its own and Redis databases 0 and 1.
_DATABASE_URL = os.environ.get("DATABASE_URL", "")
_CHANNEL_LAYER_URL = os.environ.get("CHANNEL_LAYER_URL", "")
POSTGRES_SERVER = (
    _DATABASE_URL.rsplit("/", 1)[0]
    if _DATABASE_URL.startswith(("postgres", "pgsql"))
    else "postgres://postgres@127.0.0.1:5432"
)
REDIS_SERVER = (
    _CHANNEL_LAYER_URL.rsplit("/", 1)[0]
    if _CHANNEL_LAYER_URL.startswith("redis")
    else "redis://127.0.0.1:6379"
)

# Run by `manage.py shell` in the migrated hub: prints the token and the evaluation as JSON.
_SEED = """
import json
from benchmarks import _hub
user, token = _hub.user_with_token("alice", ["read", "write", "evaluate"])
evaluation = _hub.evaluation(user, finished=True)
print(json.dumps({"token": token, "evaluation": str(evaluation.pk), "trace_id": evaluation.trace_id}))
"""


@dataclass
class ProductionHub:
    url: str
    folder: Path
    database: str
    env: dict[str, str]
    token: str
    evaluation: str
    trace_id: str

    def log(self) -> str:
        return (self.folder / "daphne.log").read_text(errors="replace")[-4000:]


def _postgres(statement: str) -> None:
    import psycopg

    with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True) as connection:
        connection.execute(statement)  # type: ignore[arg-type]


@contextmanager
def production_hub(folder: Path, **settings: str) -> Iterator[ProductionHub]:
    """Migrate, seed and serve a hub in production mode in `folder`; `settings` are more
    environment variables of the hub (DATABASE_POOL_SIZE="5"). Drops its database afterwards."""
    database = f"mlms_reliability_{secrets.token_hex(4)}"
    env = {
        **_hub.hub_env(folder),
        "DATABASE_URL": f"{POSTGRES_SERVER}/{database}",
        "CELERY_BROKER_URL": f"{REDIS_SERVER}/0",
        "CHANNEL_LAYER_URL": f"{REDIS_SERVER}/1",
        "EVALUATION_SWEEP_SECONDS": "5",  # the hub's own sweep, as in production
        **settings,
    }
    _postgres(f"CREATE DATABASE {database}")
    try:
        # _hub's helpers run the hub on the environment hub_env() gives; this one instead.
        with mock.patch.object(_hub, "hub_env", lambda _folder: env):
            _hub.migrate(folder)
            seeded = subprocess.run(
                [sys.executable, "manage.py", "shell", "-c", _SEED],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if seeded.returncode != 0:
                raise RuntimeError(f"seeding the hub failed:\n{seeded.stderr}")
            seed = json.loads(seeded.stdout.strip().splitlines()[-1])
            with _hub.serve(folder) as url:
                yield ProductionHub(url, folder, database, env, **seed)
    finally:
        _postgres(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


# --- PostgreSQL connections -------------------------------------------------------------------


class ConnectionSampler(threading.Thread):
    """Counts the connections to `database` in pg_stat_activity every `interval` seconds, from
    a connection to the server's `postgres` database (so that it does not count itself)."""

    def __init__(self, database: str, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.interval = interval
        self.samples: list[int] = []
        self._done = threading.Event()

    def run(self) -> None:
        import psycopg

        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
        with psycopg.connect(f"{POSTGRES_SERVER}/postgres", autocommit=True) as connection:
            while not self._done.is_set():
                row = connection.execute(query, (self.database,)).fetchone()
                self.samples.append(int(row[0]) if row else 0)
                self._done.wait(self.interval)

    def stop(self) -> list[int]:
        self._done.set()
        self.join(timeout=10)
        return self.samples


# --- Load: API reads and OTLP exports ---------------------------------------------------------


@dataclass
class Load:
    """What the clients got: answers by status, and errors that got no answer at all."""

    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def requests(self) -> int:
        return sum(self.statuses.values()) + len(self.errors)

    @property
    def server_errors(self) -> int:
        return sum(count for status, count in self.statuses.items() if status >= 500)


TARGETS = ("both", "manifests", "otlp")


def drive(
    hub: ProductionHub,
    clients: int,
    seconds: float,
    spans_per_export: int = 64,
    target: str = "both",
) -> Load:
    """`clients` threads, each with a keep-alive connection, that send `GET /api/v1/manifests/`
    (`target` "manifests"), `POST /v1/traces` (an OTLP export of `spans_per_export` spans into a
    trace of the client's own, as an agent sends them; "otlp"), or the two in turn ("both") for
    `seconds`, as fast as the hub answers. A connection the hub drops is opened again."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, not {target!r}")
    parts = urlsplit(hub.url)
    load = Load()
    deadline = time.monotonic() + seconds
    spans = _hub.agent_spans(spans_per_export)

    def client() -> None:
        export = next(_hub.export_bodies(secrets.token_hex(16), spans, spans_per_export))
        requests = [
            ("GET", "/api/v1/manifests/", None, {}),
            ("POST", "/v1/traces", export, {"Content-Type": "application/x-protobuf"}),
        ]
        if target != "both":
            requests = [r for r in requests if (r[1] == "/v1/traces") == (target == "otlp")]
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        sent = 0
        while time.monotonic() < deadline:
            method, path, body, headers = requests[sent % len(requests)]
            sent += 1
            try:
                connection.request(
                    method, path, body, {**headers, "Authorization": f"Bearer {hub.token}"}
                )
                response = connection.getresponse()
                response.read()
            except (OSError, http.client.HTTPException) as error:
                with load.lock:
                    load.errors.append(f"{method} {path}: {error!r}")
                connection.close()
                connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
                continue
            with load.lock:
                load.statuses[response.status] += 1
        connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 120)
    return load


# --- WebSockets -------------------------------------------------------------------------------


class Closed(Exception):
    """The server closed the WebSocket; `code` is its close code (1006: no close frame)."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"closed with {code} {reason}".strip())
        self.code = code


class WebSocket:
    """A WebSocket client (RFC 6455) that behaves as a browser's does while nobody writes to
    it: it answers the server's pings (daphne pings every 20 s and closes a socket whose pong
    does not come) and reports a close frame as `Closed`."""

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

    def receive(self, timeout: float) -> dict[str, Any] | None:
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


def follow(hub: ProductionHub) -> WebSocket:
    """A WebSocket on the hub's evaluation (`/ws/evaluations/<id>/?token=`), its snapshot read."""
    url = hub.url.replace("http://", "ws://")
    socket_ = WebSocket(f"{url}/ws/evaluations/{hub.evaluation}/?token={hub.token}")
    snapshot = socket_.receive(timeout=30)
    if not snapshot or snapshot.get("type") != "snapshot":
        raise RuntimeError(f"expected the evaluation's snapshot, got {snapshot!r}")
    return socket_


def export_spans(hub: ProductionHub, count: int = 8) -> None:
    """`POST /v1/traces` of `count` spans into the evaluation's trace: the hub then sends a
    `spans` event to the evaluation's WebSockets."""
    body = next(_hub.export_bodies(hub.trace_id, _hub.agent_spans(count), count))
    parts = urlsplit(hub.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Authorization": f"Bearer {hub.token}", "Content-Type": "application/x-protobuf"}
    connection.request("POST", "/v1/traces", body, headers)
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"POST /v1/traces: {response.status} {answer[:300]!r}")
