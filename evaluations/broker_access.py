"""Which broker, with which credentials, the agent of a host consumes.

Jobs are sent to queues named after the host's scope (`pool.…`, `group-<id>.…`, `user-<id>.…`;
see `hub.models.Host`), so a stock agent only ever consumes jobs its owner may run. With Redis
the scope is also a wall:

- every key of a scope's messages (queues, bindings, unacknowledged messages) carries the key
  prefix `<namespace>:<scope>:` (kombu's `global_keyprefix`), and the agent gets a Redis user of
  its own scope, `mlms-<namespace>-<scope>`, created by the hub with `ACL SETUSER`, that may
  touch only keys with that prefix, subscribe to no channel, and run only the commands that
  kombu's Redis transport needs to consume with late acknowledgement (`AGENT_COMMANDS`): no
  `SCAN`, `KEYS`, `RANDOMKEY`, `DBSIZE`, `SELECT`, `INFO`, `CLIENT LIST`, `MONITOR`, `CONFIG`,
  `FLUSH*`, `PUBLISH` or `SUBSCRIBE`. An agent that connects with its credentials cannot read,
  or even list, another scope's job ids, nor the channel layer's keys (`asgi:*`).
- The namespace (`BROKER_NAMESPACE`, by default derived from SECRET_KEY: the replicas of one
  hub agree on it and two hubs with different secrets differ) keeps hubs that share one Redis
  apart: neither resets the other's users nor reads the other's queues.
- The broker is Redis database 0 (settings refuse another): an agent's user may not `SELECT`,
  and redis-py sends no `SELECT` for database 0.
- A Redis that lets a client with no credentials read the queues makes all of this moot, so
  the hub refuses to start on one (`refuse_open_redis`) unless
  BROKER_ALLOW_OPEN_DEFAULT_USER says that this is known and wanted (the test suite's Redis).

Other brokers:

- `filesystem://` (the embedded default): every process on the one machine shares the broker
  folder, as they share the database file; scoped queue names keep stock agents apart.
- `amqp://`: RabbitMQ needs a virtual host per scope, which the hub does not manage; its
  broker URL is handed to the agents of the operators' shared pool only, and an agent of any
  other scope is refused with a message saying so.

The password of a scope's Redis user is derived from SECRET_KEY, so every hub process computes
the same one and nothing is stored. `ensure_host_scopes` re-creates the users after a Redis restart
(the hub's sweep calls it); an agent that loses its connection reconnects with the same
credentials.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from hub.models import Host
from predictors.protocol import host_scope

logger = logging.getLogger(__name__)

REDIS = ("redis", "rediss")

# What an agent's broker user may run: what kombu's Redis transport (5.x) and a Celery worker
# consuming with acks_late send, recorded with MONITOR from a real agent worker (consume, ack,
# a cold shutdown that puts its job back, a worker killed mid-job whose job comes back after
# the visibility timeout) and read in kombu/transport/redis.py. Nothing else: no command that
# lists keys or reads the server's state, no other database, no pub/sub.
AGENT_COMMANDS = (
    # connecting (AUTH needs no permission): RESP3's HELLO (redis-py authenticates with it),
    # PING (kombu's and the agent's health checks), CLIENT SETNAME (kombu's client_name)
    "hello",
    "ping",
    "client|setname",
    # the queues: send and restore (LPUSH, RPUSH), consume (BRPOP, RPOP), size, declare, delete
    "lpush",
    "rpush",
    "brpop",
    "rpop",
    "llen",
    "exists",
    "del",
    # the exchanges' binding tables
    "sadd",
    "srem",
    "smembers",
    # the unacknowledged messages (acks_late): a hash of messages and a sorted set of times
    "hset",
    "hget",
    "hdel",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zrevrangebyscore",
    # the mutex of their restore: SET NX PX, released by redis-py's Lua script (GET, DEL), which
    # runs with these very permissions
    "set",
    "get",
    "evalsha",
    "script|load",
    # transactions (pipelines, and WATCH around a restore)
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
)


class BrokerAccessError(Exception):
    """The hub cannot give this host's agent broker access of its own scope."""


def namespace() -> str:
    """This hub's part of the broker's names: BROKER_NAMESPACE, else 8 hex digits derived from
    SECRET_KEY (the same in every replica of the hub; unrelated between two hubs)."""
    configured = str(getattr(settings, "BROKER_NAMESPACE", "") or "")
    if configured:
        return configured
    digest = hmac.new(settings.SECRET_KEY.encode(), b"broker-namespace", hashlib.sha256)
    return digest.hexdigest()[:8]


def key_prefix(scope: str) -> str:
    return f"{namespace()}:{scope}:"


def redis_user(scope: str) -> str:
    return f"mlms-{namespace()}-{scope}"


def redis_password(scope: str) -> str:
    return hmac.new(
        settings.SECRET_KEY.encode(),
        f"agent-broker:{namespace()}:{scope}".encode(),
        hashlib.sha256,
    ).hexdigest()


def scheme(url: str) -> str:
    return urlsplit(url).scheme.lower()


def scope_options(broker_url: str, scope: str) -> dict[str, Any]:
    """The transport options that confine a connection to `broker_url` to the messages of
    `scope` (with Redis: its key prefix), added to the broker's own."""
    return {"global_keyprefix": key_prefix(scope)} if scheme(broker_url) in REDIS else {}


def agent_broker(host: Host) -> tuple[str, dict[str, Any]]:
    """(broker URL, transport options) for the agent of `host`; BrokerAccessError when the
    broker cannot isolate the host's scope."""
    url = settings.AGENT_BROKER_URL
    options = dict(settings.AGENT_BROKER_TRANSPORT_OPTIONS)
    kind = scheme(url)
    if kind in REDIS:
        ensure_scopes([host.scope])
        options["global_keyprefix"] = key_prefix(host.scope)
        return _with_credentials(url, redis_user(host.scope), redis_password(host.scope)), options
    if kind == "filesystem" or host.pool:
        return url, options
    raise BrokerAccessError(
        f"this hub's broker ({kind}) cannot give host {host.name} credentials that reach only "
        "its own jobs, so only hosts of the operators' shared pool may consume it; run the hub "
        "with a Redis broker (CELERY_BROKER_URL=redis://…) to serve self-hosted agents"
    )


def user_rules(scope: str) -> list[str]:
    """The `ACL SETUSER` rules of the Redis user of `scope`, its password aside: its keys, no
    channel, `AGENT_COMMANDS` only."""
    return [
        f"~{key_prefix(scope)}*",
        "resetchannels",
        "-@all",
        *(f"+{command}" for command in AGENT_COMMANDS),
    ]


def ensure_scopes(scopes: Iterable[str]) -> None:
    """Create (or refresh) the Redis user of each scope. No-op unless the broker is Redis."""
    if scheme(settings.CELERY_BROKER_URL) not in REDIS:
        return
    import redis

    names = sorted(set(scopes))
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)
    try:
        for scope in names:
            client.execute_command(
                "ACL",
                "SETUSER",
                redis_user(scope),
                "reset",
                "on",
                f">{redis_password(scope)}",
                *user_rules(scope),
            )
    except redis.RedisError as exc:
        raise BrokerAccessError(
            f"the hub could not create the broker user of scope(s) {', '.join(names)} in "
            f"Redis ({exc}); the hub's CELERY_BROKER_URL must be allowed to run ACL SETUSER"
        ) from exc
    finally:
        client.close()


def ensure_host_scopes() -> None:
    """Re-create the Redis user of every registered host's scope that Redis lacks (after a
    Redis restart, which forgets them). Not only live hosts: an agent that lost its broker
    stops heartbeating until it can connect again, with these very credentials. One `ACL USERS`
    a call when nothing is missing. No-op unless the broker is Redis."""
    if scheme(settings.CELERY_BROKER_URL) not in REDIS:
        return
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)
    try:
        present = {
            name.decode() if isinstance(name, bytes) else name for name in client.acl_users()
        }
    except redis.RedisError as exc:
        logger.warning("could not list the broker's users: %s", exc)
        return
    finally:
        client.close()
    scopes = {
        host_scope(pool=pool, group_id=group_id, owner_id=owner_id)
        for pool, group_id, owner_id in Host.objects.values_list("pool", "group_id", "owner_id")
    }
    missing = {scope for scope in scopes if redis_user(scope) not in present}
    if missing:
        try:
            ensure_scopes(missing)
        except BrokerAccessError as exc:
            logger.warning("%s", exc)


# --- a Redis that anyone may read --------------------------------------------------------------


def refuse_open_redis() -> None:
    """Refuse to start (ImproperlyConfigured, naming the setting) when the hub's Redis, the
    broker (CELERY_BROKER_URL) or the channel layer (CHANNEL_LAYER_URL), lets a client that
    sends no credentials read a queue of the agents or a key of the channel layer, or list the
    keys: with a password-less default user the scoped users above protect nothing. One
    connection per Redis URL, at start-up. BROKER_ALLOW_OPEN_DEFAULT_USER=true skips it (a
    test machine's Redis, reachable from nowhere else). A Redis that does not answer is not
    judged: the hub starts and says so in its log."""
    if getattr(settings, "BROKER_ALLOW_OPEN_DEFAULT_USER", False):
        return
    probes = (
        ("CELERY_BROKER_URL", settings.CELERY_BROKER_URL, ("LLEN", f"{key_prefix('pool')}pool")),
        ("CHANNEL_LAYER_URL", getattr(settings, "CHANNEL_LAYER_URL", ""), ("ZCARD", "asgi:probe")),
    )
    for variable, url, read in probes:
        if scheme(url) not in REDIS:
            continue
        what = open_to_anonymous(url, read)
        if what:
            raise ImproperlyConfigured(
                f"the Redis server of {variable} ({anonymous_url(url)}) lets a client that "
                f"sends no password {what}, so anyone who can reach it (an agent too) gets "
                "past the agents' scoped broker users to every scope's jobs and the channel "
                "layer. Give its default user a password (requirepass) or switch it off (ACL "
                f"SETUSER default off) and put the credentials in {variable} "
                "(redis://:<password>@host:6379/0), or set BROKER_ALLOW_OPEN_DEFAULT_USER=true "
                "to start anyway (only where nobody else can reach that Redis, e.g. a test "
                "machine)"
            )


def anonymous_url(url: str) -> str:
    """`url` without its user name and password (in the address or the query)."""
    parts = urlsplit(url)
    query = [
        (key, value)
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
        if key.lower() not in ("username", "password")
    ]
    return urlunsplit(
        parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1], query=urlencode(query))
    )


def open_to_anonymous(url: str, read: tuple[str, ...]) -> str:
    """What a client that sends no credentials may do on the Redis of `url` ('read …',
    'list …'); '' when it may do neither, or when the server does not answer (logged)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis.from_url(
        anonymous_url(url),
        socket_timeout=3,
        socket_connect_timeout=3,
        retry=Retry(NoBackoff(), 0),
        protocol=2,
    )
    try:
        for command, description in (
            (read, f"read the key {read[1]}"),
            (("SCAN", "0", "COUNT", "1"), "list the keys (SCAN)"),
        ):
            try:
                client.execute_command(*command)
            except (redis.AuthenticationError, redis.exceptions.NoPermissionError):
                continue  # refused: what the hub wants
            except redis.ResponseError as exc:
                if str(exc).upper().startswith(("NOAUTH", "NOPERM", "WRONGPASS")):
                    continue
                # Any other answer (WRONGTYPE…) means that the command ran.
            return description
        return ""
    except redis.RedisError as exc:
        logger.warning(
            "could not ask the Redis at %s whether a client without a password may read it "
            "(%s); starting anyway",
            anonymous_url(url),
            exc,
        )
        return ""
    finally:
        client.close()


def _with_credentials(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{quote(user)}:{quote(password)}@{netloc}"))
