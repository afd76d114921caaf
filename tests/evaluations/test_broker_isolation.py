"""Broker isolation: what an agent's Redis user may do, hubs that share one Redis, and a hub that
refuses to start on a Redis anyone may read (`evaluations.broker_access`).

The `redis` tests run in the Redis pass, against the suite's Redis (CELERY_BROKER_URL, the
channel layer on CHANNEL_LAYER_URL); the start-up tests start redis-servers of their own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
from rest_framework.test import APIClient

from evaluations import broker_access
from evaluations.tasks import send_evaluation
from hub.models import Host
from mlmodelscope.env import redis_database
from predictors.agent.main import choose_broker
from tests.hub.factories import register_host
from tests.livehub import ROOT, LiveHub, LiveHubError, RedisServer, free_port

ONNX = [("onnxruntime", "1.17.0", ["cpu"])]


# --- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture
def bobs_agent(make_client, bob) -> APIClient:  # type: ignore[no-untyped-def]
    return make_client(bob, scopes=["agent"])  # type: ignore[no-any-return]


@pytest.fixture
def bobs_box(bobs_agent) -> Host:  # type: ignore[no-untyped-def]
    """Bob's self-hosted host (scope `user-<bob>`), consuming its own and onnxruntime.cpu."""
    response = register_host(bobs_agent, "bob-box", ONNX, queues=["onnxruntime.cpu"])
    assert response.status_code == 201, response.content
    return Host.objects.get(name="bob-box")


def _config(agent: APIClient, host: Host) -> dict[str, Any]:
    response = agent.get(f"/api/v1/agent/config/?host={host.pk}")
    assert response.status_code == 200, response.content
    return response.json()  # type: ignore[no-any-return]


def _admin(db: int = 0) -> Any:
    """A client of the suite's Redis with the hub's own credentials."""
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.CELERY_BROKER_URL, db=db)


def _refused(call: Callable[[], Any]) -> bool:
    import redis

    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    except redis.ResponseError as exc:  # a script's command refused
        return "can't" in str(exc) or "NOPERM" in str(exc)
    return False


def _refusals(user: str) -> int:
    """How many commands Redis refused to `user` so far (its ACL LOG)."""
    admin = _admin()
    try:
        entries = admin.acl_log(count=128)
    finally:
        admin.close()
    named = (e for e in entries if _text(e.get("username")) == user)
    return sum(int(e.get("count", 1)) for e in named)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- what an agent's user may do ------------------------------------------------------------


@pytest.mark.redis
def test_an_agents_broker_user_consumes_its_own_queue_and_can_list_or_read_nothing_else(
    bobs_agent, bobs_box, settings
) -> None:  # type: ignore[no-untyped-def]
    import redis
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    config = _config(bobs_agent, bobs_box)
    user = broker_access.redis_user(bobs_box.scope)
    prefix = config["broker_transport_options"]["global_keyprefix"]
    assert config["broker_url"].startswith(f"redis://{user}:")
    assert prefix == f"{broker_access.namespace()}:{bobs_box.scope}:"
    # A key of the channel layer that names another user's evaluation, as the hub makes one.
    group = f"evaluation.{uuid.uuid4()}"
    layer = get_channel_layer()
    async_to_sync(layer.group_add)(group, "specific.probe!channel")  # type: ignore[union-attr]
    channel_layer = redis.Redis.from_url(settings.CHANNEL_LAYER_URL)
    assert channel_layer.exists(f"asgi:group:{group}")
    # ...and a key of another scope.
    pools = f"{broker_access.key_prefix('pool')}isolation-probe"
    admin = _admin()
    admin.lpush(pools, b"not bob's")

    # The URL needs no SELECT (database 0), and works; another database does not.
    assert redis_database(config["broker_url"]) == 0
    agent = redis.Redis.from_url(config["broker_url"])
    try:
        assert agent.ping()
        # Its own queue: push, pop, block-pop.
        queue = f"{prefix}{bobs_box.queues[0]}"
        agent.lpush(queue, b"mine")
        assert agent.llen(queue) == 1
        assert agent.brpop([queue], timeout=1) == (queue.encode(), b"mine")

        # Nothing that lists keys, reads the server's state or reaches another database.
        for name, call in {
            "SCAN": lambda: agent.scan(0),
            "KEYS": lambda: agent.keys("*"),
            "RANDOMKEY": lambda: agent.randomkey(),
            "DBSIZE": lambda: agent.dbsize(),
            "SELECT 1": lambda: agent.execute_command("SELECT", 1),
            "SELECT 0": lambda: agent.execute_command("SELECT", 0),
            "INFO": lambda: agent.info("keyspace"),
            "CLIENT LIST": lambda: agent.client_list(),
            "CONFIG GET": lambda: agent.config_get("*"),
            "PUBLISH": lambda: agent.publish("x", "y"),
            "OBJECT": lambda: agent.object("encoding", queue),
            "EVAL": lambda: agent.eval("return 1", 0),
            # Another scope's queue, and the channel layer's keys (in any database).
            "LRANGE pool": lambda: agent.lrange(pools, 0, -1),
            "TYPE asgi": lambda: agent.type(f"asgi:group:{group}"),
            "ZRANGE asgi": lambda: agent.zrange(f"asgi:group:{group}", 0, -1),
            "EXISTS asgi": lambda: agent.exists(f"asgi:group:{group}"),
            # A script runs with the user's permissions: no way around them.
            "script KEYS": lambda: agent.evalsha(
                agent.script_load("return redis.call('keys', '*')"), 0
            ),
            "script ZRANGE asgi": lambda: agent.evalsha(
                agent.script_load("return redis.call('zrange', KEYS[1], 0, -1)"),
                1,
                f"asgi:group:{group}",
            ),
        }.items():
            assert _refused(call), f"{name} was allowed"
        with pytest.raises(redis.exceptions.NoPermissionError):  # SELECT on connect: refused
            redis.Redis.from_url(
                urlunsplit(urlsplit(config["broker_url"])._replace(path="/1"))
            ).ping()

        # Commands that would harm others, asked without running them (ACL DRYRUN).
        for command in (
            ["FLUSHALL"],
            ["FLUSHDB"],
            ["SHUTDOWN"],
            ["MONITOR"],
            ["SUBSCRIBE", f"asgi:group:{group}"],
            ["PSUBSCRIBE", "*"],
            ["CLIENT", "KILL", "ID", "1"],
            ["CONFIG", "SET", "maxmemory", "1"],
            ["DEBUG", "SLEEP", "0"],
            ["SWAPDB", "0", "1"],
            ["MOVE", queue, "1"],
            ["SCRIPT", "FLUSH"],
            ["ACL", "SETUSER", user, "+@all"],
        ):
            answer = admin.execute_command("ACL", "DRYRUN", user, *command)
            assert answer not in (b"OK", "OK"), f"{' '.join(command)} would be allowed"
        assert _refusals(user) > 0  # what Redis refused it, it logged under its name
    finally:
        agent.close()
        async_to_sync(layer.group_discard)(group, "specific.probe!channel")  # type: ignore[union-attr]
        channel_layer.close()
        admin.delete(pools)
        admin.close()


# A real agent worker (predictors.agent.daemon's Celery worker, as `mlms agent` runs it) in a process of
# its own; its job writes "start <id>" and "end <id>" to a file instead of evaluating.
_WORKER = """
import json, sys, threading, time
from pathlib import Path
from predictors.agent.daemon import Agent
url, options, queues, out, seconds = sys.argv[1:6]
def run_job(evaluation_id, dispatch):
    with open(out, "a") as f: f.write(f"start {evaluation_id}\\n")
    if evaluation_id.startswith("slow"): time.sleep(float(seconds))
    with open(out, "a") as f: f.write(f"end {evaluation_id}\\n")
    return "done"
agent = Agent.__new__(Agent)
agent.name, agent.hub_queues, agent.concurrency = "isolation", queues.split(","), 1
agent.stopping, agent.run_job = threading.Event(), run_job
agent.work(url, json.loads(options))
"""


@pytest.mark.redis
def test_a_real_agent_worker_consumes_acks_and_restores_with_its_user_and_is_refused_nothing(
    bobs_agent, bobs_box, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Everything kombu's Redis transport and a Celery worker with acks_late do: consume and
    acknowledge, and after the worker is killed mid-job, restore the unacknowledged job (past
    the visibility timeout) and run it again; Redis refuses the agent's user nothing."""
    config = _config(bobs_agent, bobs_box)
    user = broker_access.redis_user(bobs_box.scope)
    prefix = config["broker_transport_options"]["global_keyprefix"]
    own, shared = bobs_box.queues
    out = tmp_path / "jobs.txt"
    out.touch()
    refused_before = _refusals(user)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "CELERY"))}

    def start(options: dict[str, Any], seconds: float) -> subprocess.Popen[bytes]:
        log = (tmp_path / "worker.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-c", _WORKER, config["broker_url"], json.dumps(options)]
            + [",".join(bobs_box.queues), str(out), str(seconds)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def wait_for(line: str, count: int = 1, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while out.read_text().splitlines().count(line) < count:
            if time.monotonic() > deadline:
                log = (tmp_path / "worker.log").read_text()[-3000:]
                pytest.fail(f"no {line!r} after {timeout} s:\n{out.read_text()}\n{log}")
            time.sleep(0.1)

    options = dict(config["broker_transport_options"])
    send_evaluation("before", 1, shared)  # sent before any agent consumes: it waits
    worker = start(options, 30)
    try:
        wait_for("end before")
        send_evaluation("own", 1, own)
        wait_for("end own")
        send_evaluation("slow", 1, shared)
        wait_for("start slow")
        worker.send_signal(signal.SIGKILL)  # lost mid-job: its message stays unacknowledged
        worker.wait(timeout=10)
        time.sleep(1.5)
        # A new worker that takes a job unacknowledged for 1 s as lost puts it back and runs it.
        worker = start({**options, "visibility_timeout": 1}, 0)
        wait_for("end slow")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)

    assert out.read_text().splitlines() == [
        "start before",
        "end before",
        "start own",
        "end own",
        "start slow",
        "start slow",
        "end slow",
    ]
    admin = _admin()
    try:
        assert admin.llen(f"{prefix}{own}") == admin.llen(f"{prefix}{shared}") == 0
        assert admin.hlen(f"{prefix}unacked") == 0  # every job acknowledged
    finally:
        admin.close()
    assert _refusals(user) == refused_before, "Redis refused the agent's user a command"


# --- two hubs on one Redis ------------------------------------------------------------------


@pytest.mark.redis
def test_two_hubs_on_one_redis_keep_their_agents_users_and_queues_apart(
    bobs_agent, bobs_box, settings
) -> None:  # type: ignore[no-untyped-def]
    """Hub B (another SECRET_KEY, hence another namespace) makes the broker user of the same
    scope: hub A's agent keeps its credentials and its queue, and each hub's agent consumes its
    own hub's job only."""
    from kombu import Connection

    settings.BROKER_NAMESPACE = ""  # both hubs derive theirs from their SECRET_KEY
    queue = bobs_box.queues[1]  # user-<bob>.onnxruntime.cpu, the same name at both hubs
    hub_a = _config(bobs_agent, bobs_box)
    user_a = broker_access.redis_user(bobs_box.scope)
    admin = _admin()
    rules_a = admin.acl_getuser(user_a)
    send_evaluation("job-of-a", 1, queue)

    settings.SECRET_KEY = "another hub's secret key, of at least 32 characters"
    hub_b = _config(bobs_agent, bobs_box)
    user_b = broker_access.redis_user(bobs_box.scope)
    prefix_a = hub_a["broker_transport_options"]["global_keyprefix"]
    prefix_b = hub_b["broker_transport_options"]["global_keyprefix"]
    try:
        assert user_b != user_a and prefix_b != prefix_a
        assert hub_b["broker_url"] != hub_a["broker_url"]
        send_evaluation("job-of-b", 1, queue)

        # B made its user; A's is as it was, and A's credentials still authenticate.
        assert admin.acl_getuser(user_a) == rules_a
        assert admin.exists(f"{prefix_a}{queue}") and admin.exists(f"{prefix_b}{queue}")

        def consume(config: dict[str, Any]) -> list[Any]:
            with Connection(
                config["broker_url"], transport_options=config["broker_transport_options"]
            ) as connection:
                simple = connection.SimpleQueue(queue)
                try:
                    taken: list[Any] = []
                    while True:
                        try:
                            message = simple.get(timeout=1)
                        except simple.Empty:
                            return taken
                        taken.append(message.payload[0])
                        message.ack()
                finally:
                    simple.close()

        assert consume(hub_a) == [["job-of-a", 1]]
        assert consume(hub_b) == [["job-of-b", 1]]

        # Neither agent reads the other hub's queue.
        import redis

        for mine, theirs in ((hub_a, prefix_b), (hub_b, prefix_a)):
            client = redis.Redis.from_url(mine["broker_url"])
            try:
                assert _refused(lambda: client.llen(f"{theirs}{queue}"))  # noqa: B023
            finally:
                client.close()

        # After a Redis restart (both users gone), the sweep's ensure_host_scopes makes B's.
        admin.acl_deluser(user_b)
        broker_access.ensure_host_scopes()
        assert admin.acl_getuser(user_b) is not None
        assert redis.Redis.from_url(hub_b["broker_url"]).ping()
    finally:
        for key in admin.scan_iter(match=f"{prefix_b}*"):
            admin.delete(key)
        admin.acl_deluser(user_b)
        admin.close()


@pytest.mark.database_free
def test_the_namespace_is_derived_from_the_secret_key_unless_set(settings) -> None:  # type: ignore[no-untyped-def]
    settings.BROKER_NAMESPACE = ""
    settings.SECRET_KEY = "a" * 40
    first = broker_access.namespace()
    assert first == broker_access.namespace() and len(first) == 8
    settings.SECRET_KEY = "b" * 40
    assert broker_access.namespace() != first
    settings.BROKER_NAMESPACE = "lab-hub"
    assert broker_access.redis_user("group-4") == "mlms-lab-hub-group-4"
    assert broker_access.key_prefix("group-4") == "lab-hub:group-4:"
    assert broker_access.scope_options("redis://r:6379/0", "pool") == {
        "global_keyprefix": "lab-hub:pool:"
    }


def _settings_error(**variables: str) -> str:
    """Import the settings in a fresh process with `variables`; its stderr ('' if it did)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CHANNEL_LAYER_URL", "AGENT_BROKER_URL")
    }
    done = subprocess.run(
        [sys.executable, "-c", "import mlmodelscope.settings"],
        cwd=ROOT,
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "" if done.returncode == 0 else done.stderr


@pytest.mark.database_free
def test_the_settings_refuse_a_bad_namespace_and_a_broker_on_another_database() -> None:
    assert "BROKER_NAMESPACE" in _settings_error(BROKER_NAMESPACE="Hub_A")
    assert "BROKER_NAMESPACE" in _settings_error(BROKER_NAMESPACE="a" * 17)
    error = _settings_error(CELERY_BROKER_URL="redis://127.0.0.1:6379/2")
    assert "CELERY_BROKER_URL must name Redis database 0" in error
    error = _settings_error(AGENT_BROKER_URL="redis://broker.example:6379/0?db=3")
    assert "AGENT_BROKER_URL must name Redis database 0" in error
    assert (
        _settings_error(CELERY_BROKER_URL="redis://127.0.0.1:6379", BROKER_NAMESPACE="hub-1") == ""
    )


def test_an_agents_own_broker_address_carries_its_scopes_credentials() -> None:
    """`mlms agent --broker` names another address of the hub's broker: without credentials
    of its own it takes the scope's user and password, and always keeps to the scope's prefix."""
    config = {
        "broker_url": "redis://mlms-ns-user-3:secret@10.0.0.5:6379/0",
        "broker_transport_options": {"global_keyprefix": "ns:user-3:", "other": 1},
    }
    assert choose_broker(None, config) == (config["broker_url"], config["broker_transport_options"])
    assert choose_broker("redis://broker.lan:6380/0", config) == (
        "redis://mlms-ns-user-3:secret@broker.lan:6380/0",
        {"global_keyprefix": "ns:user-3:"},
    )
    assert (
        choose_broker("redis://me:mine@broker.lan/0", config)[0] == "redis://me:mine@broker.lan/0"
    )


# --- a hub refuses to start on a Redis anyone may read ----------------------------------------


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    started: list[RedisServer] = []

    def make(password: str = "") -> RedisServer:
        folder = tmp_path / f"redis-{len(started)}"
        folder.mkdir()
        server = RedisServer(folder, password)
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.kill()


def _serve(folder: Path, broker: str, **settings: str) -> LiveHub:
    """daphne serving the hub (`mlmodelscope.asgi`) on `broker` (database 0, the channel layer
    on database 1), as the process "hub"; `settings` are more of its variables."""
    hub = LiveHub(
        folder,
        settings={
            "CELERY_BROKER_URL": broker,
            "CHANNEL_LAYER_URL": broker[:-1] + "1",
            "EVALUATION_SWEEP_SECONDS": "0",
            **settings,
        },
    )
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(hub.port)]
    hub.spawn("hub", [*command, "mlmodelscope.asgi:application"], hub.env)
    return hub


def _answers(hub: LiveHub) -> int:
    return hub.wait(lambda: requests.get(hub.url + "/", timeout=5).status_code, "daphne", 60)  # type: ignore[no-any-return]


@pytest.mark.database_free
def test_a_hub_refuses_to_start_on_a_redis_anyone_may_read_unless_told(
    tmp_path: Path, redis_servers: Callable[..., RedisServer]
) -> None:
    open_redis = redis_servers()
    # No override: daphne exits, naming the setting; so does the sweeper.
    with _serve(
        tmp_path / "refused", open_redis.url, BROKER_ALLOW_OPEN_DEFAULT_USER="false"
    ) as hub:
        process = hub.processes["hub"]
        assert process.wait(timeout=60) != 0
        log = (hub.folder / "hub.log").read_text()
        assert "BROKER_ALLOW_OPEN_DEFAULT_USER=true" in log and "CELERY_BROKER_URL" in log, log
        with pytest.raises(LiveHubError, match="BROKER_ALLOW_OPEN_DEFAULT_USER"):
            hub.manage("sweep", "--once")

    # A channel layer on a Redis anyone may read is refused too, though the broker has a password.
    guarded = redis_servers(password="s3cret-of-the-test")
    with _serve(
        tmp_path / "open-layer",
        guarded.url,
        CHANNEL_LAYER_URL=open_redis.url[:-1] + "1",
        BROKER_ALLOW_OPEN_DEFAULT_USER="false",
    ) as hub:
        assert hub.processes["hub"].wait(timeout=60) != 0
        assert "CHANNEL_LAYER_URL" in (hub.folder / "hub.log").read_text()

    # With the override it starts (the test suite's own Redis is such a one).
    with _serve(tmp_path / "told", open_redis.url, BROKER_ALLOW_OPEN_DEFAULT_USER="true") as hub:
        assert _answers(hub)


@pytest.mark.database_free
def test_a_hub_starts_on_a_redis_with_a_password_as_docker_compose_runs_it(
    tmp_path: Path, redis_servers: Callable[..., RedisServer]
) -> None:
    guarded = redis_servers(password="s3cret-of-the-test")
    with _serve(tmp_path / "hub", guarded.url, BROKER_ALLOW_OPEN_DEFAULT_USER="false") as hub:
        hub.migrate()  # the sweep reads the database
        assert _answers(hub)
        assert hub.manage("sweep", "--once") == ""


@pytest.mark.database_free
def test_the_check_asks_the_server_itself(
    redis_servers: Callable[..., RedisServer], settings
) -> None:  # type: ignore[no-untyped-def]
    """Without the override, `refuse_open_redis` judges by what a client without credentials
    may do: read or list on a password-less server, nothing with a password or when the
    default user is switched off; a server that does not answer is not judged."""
    from django.core.exceptions import ImproperlyConfigured

    settings.BROKER_ALLOW_OPEN_DEFAULT_USER = False
    settings.CHANNEL_LAYER_URL = ""
    open_redis = redis_servers()
    settings.CELERY_BROKER_URL = open_redis.url
    with pytest.raises(ImproperlyConfigured, match="CELERY_BROKER_URL.*read the key"):
        broker_access.refuse_open_redis()

    import redis

    # The default user may list the keys (SCAN) but read none: still refused.
    admin = redis.Redis.from_url(open_redis.url)
    admin.acl_setuser(
        "admin", enabled=True, passwords=["+admin-pw"], keys=["*"], commands=["+@all"]
    )
    admin.acl_setuser(
        "default", reset_keys=True, commands=["-@all", "+scan"], enabled=True, nopass=True
    )
    settings.CELERY_BROKER_URL = f"redis://admin:admin-pw@127.0.0.1:{open_redis.port}/0"
    with pytest.raises(ImproperlyConfigured, match=r"list the keys \(SCAN\)"):
        broker_access.refuse_open_redis()
    # The default user switched off: accepted.
    admin = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    admin.acl_setuser("default", enabled=False)
    broker_access.refuse_open_redis()

    settings.CELERY_BROKER_URL = redis_servers(password="pw-of-the-test").url
    broker_access.refuse_open_redis()
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"  # nobody there
    broker_access.refuse_open_redis()
    settings.BROKER_ALLOW_OPEN_DEFAULT_USER = True  # the override: not even asked
    settings.CELERY_BROKER_URL = open_redis.url
    broker_access.refuse_open_redis()
