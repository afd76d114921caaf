"""Typed readers for environment variables. A bad value stops start-up with a message naming it."""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qs, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={raw!r} is not a boolean; use one of 1/0, true/false, yes/no, on/off"
    )


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def envurl(name: str, schemes: tuple[str, ...]) -> str:
    """An optional URL whose scheme must be one of `schemes`; '' when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    scheme = urlsplit(raw).scheme
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name}={raw!r} has scheme {scheme!r}; expected one of: {', '.join(schemes)}"
        )
    return raw


def envname(name: str, pattern: str, rule: str) -> str:
    """An optional name that must match `pattern` entirely ('' when unset); `rule` says, in
    words, what the pattern allows."""
    raw = os.environ.get(name, "").strip()
    if raw and not re.fullmatch(pattern, raw):
        raise ImproperlyConfigured(f"{name}={raw!r} is not allowed: {rule}")
    return raw


def redis_database(url: str) -> int:
    """The database number a redis:// URL selects (its path, else its `db` query; 0 when it
    names none), as redis-py reads it."""
    parts = urlsplit(url)
    raw = parse_qs(parts.query).get("db", [""])[0] or parts.path.strip("/")
    try:
        return int(raw) if raw else 0
    except ValueError:
        return -1
