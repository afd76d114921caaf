"""Which broker, with which credentials, the agent of a host consumes.

Jobs are sent to queues named after the host's scope (`pool.…`, `group-<id>.…`, `user-<id>.…`;
see `hub.models.Host`), so a stock agent only ever consumes jobs its owner may run. With Redis
the scope is also a wall: every key of a scope's messages (queues, bindings, unacknowledged
messages) carries the key prefix `<scope>:`, and the agent gets a Redis user of its own scope
(`mlms-<scope>`, created by the hub with `ACL SETUSER`) that may touch only keys with that
prefix and no pub/sub channel. An agent that connects with its credentials cannot read, or even
list, another scope's job ids.

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
from urllib.parse import quote, urlsplit, urlunsplit

from django.conf import settings

from hub.models import Host, host_scope

logger = logging.getLogger(__name__)

REDIS = ("redis", "rediss")


class BrokerAccessError(Exception):
    """The hub cannot give this host's agent broker access of its own scope."""


def key_prefix(scope: str) -> str:
    return f"{scope}:"


def redis_user(scope: str) -> str:
    return f"mlms-{scope}"


def redis_password(scope: str) -> str:
    return hmac.new(
        settings.SECRET_KEY.encode(), f"agent-broker:{scope}".encode(), hashlib.sha256
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


def ensure_scopes(scopes: Iterable[str]) -> None:
    """Create (or refresh) the Redis user of each scope. No-op unless the broker is Redis."""
    if scheme(settings.CELERY_BROKER_URL) not in REDIS:
        return
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5)
    try:
        for scope in sorted(set(scopes)):
            client.execute_command(
                "ACL",
                "SETUSER",
                redis_user(scope),
                "reset",
                "on",
                f">{redis_password(scope)}",
                f"~{key_prefix(scope)}*",
                "resetchannels",
                "+@all",
                "-@admin",
                "-@dangerous",
            )
    except redis.RedisError as exc:
        raise BrokerAccessError(
            f"the hub could not create the broker user of scope(s) {', '.join(scopes)} in "
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


def _with_credentials(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{quote(user)}:{quote(password)}@{netloc}"))
