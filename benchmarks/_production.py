"""A hub in production mode, for the reliability checks: `connections.py` and
`idle_websocket.py` here, `tests/hub/test_database_connections.py` and
`tests/evaluations/test_idle_websockets.py` in the suite. See docs/reliability.md.

It is the suite's live hub (`tests.livehub`: migrated, daphne on a free port)
with the production services instead of the embedded default: a fresh PostgreSQL database of
its own (`DATABASE_URL`, dropped afterwards), Redis as the Celery broker (`CELERY_BROKER_URL`)
and as the channel layer (`CHANNEL_LAYER_URL`): the servers of DATABASE_URL and
CHANNEL_LAYER_URL when set (as `make test-postgres` sets them), else the local ones. Seeded with
one user, a token of hers and a finished evaluation of hers, so that a client can read the API,
export spans into the evaluation's trace (`POST /v1/traces`) and follow it over a WebSocket.
"""

from __future__ import annotations

import http.client
import json
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import _hub  # noqa: E402
from tests import livehub  # noqa: E402

# Run by `manage.py shell` in the migrated hub: prints the token and the evaluation as JSON.
_SEED = """
import json
from benchmarks import _hub
user, token = _hub.user_with_token("alice", ["read", "write", "evaluate"])
evaluation = _hub.evaluation(user, finished=True)
print(json.dumps({"token": token, "evaluation": str(evaluation.pk), "trace_id": evaluation.trace_id}))
"""


class ProductionHub(livehub.LiveHub):
    """A live hub in production mode; `token` is alice's, `evaluation_id` (and `trace_id`) her
    finished evaluation's."""

    evaluation_id = ""
    trace_id = ""


@contextmanager
def production_hub(folder: Path, **settings: str) -> Iterator[ProductionHub]:
    """Migrate, seed and serve a hub in production mode in `folder`; `settings` are more
    environment variables of the hub (DATABASE_POOL_SIZE="5"). Drops its database afterwards."""
    # The hub's own sweep, as in production.
    settings = {"EVALUATION_SWEEP_SECONDS": "5", **settings}
    with ProductionHub(folder, services="production", settings=settings) as hub:
        hub.migrate()
        seed = json.loads(hub.shell(_SEED).splitlines()[-1])
        hub.token, hub.evaluation_id, hub.trace_id = (
            seed["token"],
            seed["evaluation"],
            seed["trace_id"],
        )
        hub.start()
        yield hub


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
        server = livehub.postgres_server()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
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


def follow(hub: ProductionHub) -> livehub.WebSocket:
    """A WebSocket on the hub's evaluation (`/ws/evaluations/<id>/?token=`), its snapshot read."""
    socket_ = hub.websocket(f"/ws/evaluations/{hub.evaluation_id}/")
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
