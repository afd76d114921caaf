"""PostgreSQL connections of a hub in production mode under a steady light load, and the answers
it gives. A measurement, not a test; see docs/reliability.md and benchmarks/README.md.

    .venv/bin/python benchmarks/connections.py [--clients 4] [--seconds 60] [--pool-size N]
        [--target both|manifests|otlp] [--json]

A hub of its own (`_production.production_hub`: daphne, a fresh PostgreSQL database, Redis as
broker and channel layer); `--clients` threads send `GET /api/v1/manifests/` (`--target
manifests`), OTLP exports of 64 spans (`POST /v1/traces`, `--target otlp`), or the two in turn
(`both`, the default) for `--seconds`, as fast as the hub answers, while the
connections to the hub's database in pg_stat_activity are counted every 0.5 s. Prints the
peak and the last count, the requests, and how many answers were 5xx or no answer at all.
`--pool-size` sets the hub's DATABASE_POOL_SIZE (default: the hub's own default).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _hub, _production  # noqa: E402
from benchmarks._hub import log  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--pool-size", type=int, default=None, help="DATABASE_POOL_SIZE")
    parser.add_argument(
        "--target",
        choices=_production.TARGETS,
        default="both",
        help="the requests each client sends (default: both in turn)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of lines")
    args = parser.parse_args(argv)
    if args.clients < 1:
        parser.error("--clients must be at least 1")
    if args.seconds <= 0:
        parser.error("--seconds must be more than 0")
    if args.pool_size is not None and args.pool_size < 1:
        parser.error("--pool-size must be at least 1")
    settings = {"DATABASE_POOL_SIZE": str(args.pool_size)} if args.pool_size else {}

    machine = _hub.machine()
    with tempfile.TemporaryDirectory(prefix="mlms-connections-") as folder:
        with _production.production_hub(Path(folder), **settings) as hub:
            log(f"daphne at {hub.url}, database {hub.database}")
            sampler = _production.ConnectionSampler(hub.database)
            sampler.start()
            started = time.monotonic()
            load = _production.drive(hub, args.clients, args.seconds, target=args.target)
            elapsed = time.monotonic() - started
            samples = sampler.stop()
    figures = {
        "target": args.target,
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "pool_size": args.pool_size or "unset (the hub's default)",
        "requests": load.requests,
        "requests_per_s": round(load.requests / elapsed, 1),
        "statuses": dict(sorted(load.statuses.items())),
        "server_errors": load.server_errors,
        "no_answer": len(load.errors),
        "peak_connections": max(samples, default=0),
        "last_connections": samples[-1] if samples else 0,
        "samples": len(samples),
        "machine": machine,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    if load.errors:
        log(f"first request without an answer: {load.errors[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
