"""Which backing services are reachable. Used by the Makefile and the test suite.

`python -m tests.services postgres redis` exits 0 when all named services answer.
"""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlsplit

DEFAULTS = {
    "postgres": os.environ.get(
        "TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mlmodelscope"
    ),
    "redis": os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
}


def reachable(service: str, timeout: float = 1.0) -> bool:
    parts = urlsplit(DEFAULTS[service])
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 0), timeout=timeout
        ):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    names = sys.argv[1:] or list(DEFAULTS)
    missing = [name for name in names if not reachable(name)]
    for name in names:
        print(f"{name}: {'reachable' if name not in missing else 'unreachable'} ({DEFAULTS[name]})")
    sys.exit(1 if missing else 0)
