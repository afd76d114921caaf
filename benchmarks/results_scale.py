"""Results at scale: the leaderboards and the history API over 100,000 evaluations with results,
on PostgreSQL, measured as the server's time per request (p50 and p95), against the same
requests over 1,000 evaluations in the same run (the baseline: the ratio is what growing the
table by 100x costs).

    .venv/bin/python benchmarks/results_scale.py [--evaluations 100000] [--requests 40]

It creates a PostgreSQL database of its own (`mlms_bench_scale`, on DATABASE_URL's server or
postgres://postgres@127.0.0.1:5432), migrated; seeds three users, the built-in-like manifests
of a model in three frameworks on a dataset, twelve hosts, and evaluations with their results
and rows (three batch sizes each; four in five published) by bulk inserts; and calls the
hub's views in this process with Django's test client, so that the time is the server's own
(no network, no client). The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DATABASE = "mlms_bench_scale"
SERVER = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres").rsplit(
    "/", 1
)[0]
FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
BATCH_SIZES = (1, 8, 32)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def setup_django(folder: Path) -> None:
    os.environ.update(
        {
            "DATABASE_URL": f"{SERVER}/{DATABASE}",
            "MLMS_VAR_DIR": str(folder),
            "ALLOWED_HOSTS": "testserver",
            "EVALUATION_SWEEP_SECONDS": "0",
            "LOG_LEVEL": "ERROR",
        }
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlmodelscope.settings")
    import django

    django.setup()


def psql(statement: str) -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as connection:
        connection.execute(statement)


def seed(count: int, start: int) -> None:
    """Evaluations `start` to `count` (with results and rows); the fixtures on the first call."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from evaluations import leaderboards
    from evaluations.models import BatchResult, Evaluation, Result
    from hub.models import Host, Manifest

    User = get_user_model()
    if start == 0:
        for name in ("alice", "bob", "carol"):
            User.objects.create_user(name)
        for framework in FRAMEWORKS:
            Manifest.objects.create(
                kind="model", name="digits-cnn", version="1.0.0", framework=framework,
                task="image_classification", content={"name": "digits-cnn"}, source="",
                content_hash=f"{framework:0<64}"[:64], visibility="public", builtin=True,
            )  # fmt: skip
        Manifest.objects.create(
            kind="dataset", name="digits", version="1.0.0", task="image_classification",
            content={"labels": list("0123456789")}, source="", content_hash="d" * 64,
            visibility="public", builtin=True,
        )  # fmt: skip
        operator = User.objects.create_user("operator", is_staff=True)
        for index in range(12):
            Host.objects.create(name=f"host-{index:02}", owner=operator, pool=True)
    users = list(User.objects.filter(username__in=("alice", "bob", "carol")))
    models = {m.framework: m for m in Manifest.objects.filter(kind="model")}
    dataset = Manifest.objects.get(kind="dataset")
    hosts = list(Host.objects.all())
    cpus = ["AMD EPYC 7B13", "Intel Xeon Platinum 8480+", "Apple M2", "AMD Ryzen 9 7950X"]
    rng = random.Random(start)
    now = timezone.now()
    step = 5000
    for first in range(start, count, step):
        size = min(step, count - first)
        evaluations = []
        for offset in range(size):
            framework = FRAMEWORKS[(first + offset) % 3]
            evaluations.append(
                Evaluation(
                    id=uuid.uuid4(),
                    user=users[(first + offset) % 3],
                    model=models[framework],
                    dataset=dataset,
                    model_name="digits-cnn",
                    model_version="1.0.0",
                    framework=framework,
                    framework_version="1.0.0",
                    dataset_name="digits",
                    dataset_version="1.0.0",
                    split="validation",
                    device="cpu",
                    task="image_classification",
                    request={"batch_sizes": list(BATCH_SIZES)},
                    status="succeeded",
                    published=rng.random() < 0.8,
                    top1=rng.uniform(0.9, 0.99),
                    top5=1.0,
                    host=hosts[(first + offset) % len(hosts)],
                    finished_at=now - timedelta(seconds=first + offset),
                )  # fmt: skip
            )
        Evaluation.objects.bulk_create(evaluations)
        results = [
            Result(
                evaluation=e,
                top1=e.top1,
                top5=1.0,
                count=360,
                top_k=5,
                content_hash=models[e.framework].content_hash,
                cpu_model=rng.choice(cpus),
                stack={},
                details={},
                host=e.host,
            )  # fmt: skip
            for e in evaluations
        ]
        Result.objects.bulk_create(results)
        rows = []
        for result in results:
            base = rng.uniform(0.02, 1.0)
            for batch_size in BATCH_SIZES:
                latency = base * (1 + batch_size / 8)
                rows.append(
                    BatchResult(
                        result=result,
                        evaluation=result.evaluation,
                        batch_size=batch_size,
                        mean_ms=latency,
                        p50_ms=latency,
                        p90_ms=latency * 1.1,
                        p99_ms=latency * 1.3,
                        min_ms=latency * 0.9,
                        max_ms=latency * 1.5,
                        std_ms=latency * 0.05,
                        count=20,
                        throughput_ips=batch_size * 1000 / latency,
                    )  # fmt: skip
                )
        BatchResult.objects.bulk_create(rows)
        for position, result in enumerate(results):
            result.summarize(rows[position * len(BATCH_SIZES) : (position + 1) * len(BATCH_SIZES)])
            result.configuration = leaderboards.configuration_of(result.evaluation, result)
        Result.objects.bulk_update(
            results,
            [
                "p50_ms_at_1",
                "p99_ms_at_1",
                "best_throughput_ips",
                "best_batch_size",
                "configuration",
            ],
            batch_size=2000,
        )
        log(f"  seeded {first + size:,} evaluations")
    for configuration in set(Result.objects.values_list("configuration", flat=True)):
        leaderboards.recount(configuration)
    from django.db import connection

    # As autovacuum leaves a table in production: statistics, and the visibility map that lets
    # a count read an index alone.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


REQUESTS = {
    "leaderboards (list)": ("anonymous", "/api/v1/leaderboards/"),
    "leaderboard, best top-1": ("anonymous", "/api/v1/leaderboards/image_classification/digits/"),
    "leaderboard, PyTorch by p50": (
        "anonymous",
        "/api/v1/leaderboards/image_classification/digits/?framework=pytorch&ordering=p50_ms",
    ),
    "leaderboard page (HTML, plot)": ("anonymous", "/leaderboards/image_classification/digits/"),
    "history, newest": ("alice", "/api/v1/evaluations/"),
    "history, PyTorch at batch 1 by p50": (
        "alice",
        "/api/v1/evaluations/?framework=pytorch&batch_size=1&ordering=p50_ms",
    ),
    "history, published by top-1": (
        "anonymous",
        "/api/v1/evaluations/?published=true&ordering=-top1",
    ),
}


def measure(requests: int) -> dict[str, tuple[float, float]]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    clients = {"anonymous": Client()}
    alice = Client()
    alice.force_login(get_user_model().objects.get(username="alice"))
    clients["alice"] = alice
    figures = {}
    for name, (who, path) in REQUESTS.items():
        client = clients[who]
        for _ in range(3):  # warm-up
            response = client.get(path)
            assert response.status_code == 200, (path, response.status_code, response.content[:300])
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        times.sort()
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        figures[name] = (statistics.median(times), p95)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=100_000)
    parser.add_argument("--baseline", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument(
        "--keep", action="store_true", help="keep the database afterwards (to EXPLAIN queries)"
    )
    parser.add_argument(
        "--measure-only",
        action="store_true",
        help="measure the database a --keep run left (migrated again), without seeding",
    )
    args = parser.parse_args()
    if args.measure_only:
        with tempfile.TemporaryDirectory(prefix="mlms-scale-") as folder:
            setup_django(Path(folder))
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            for name, (p50, p95) in measure(args.requests).items():
                print(f"| {name} | {p50:.1f} | {p95:.1f} |")
        return 0
    psql(f"DROP DATABASE IF EXISTS {DATABASE}")
    psql(f"CREATE DATABASE {DATABASE}")
    try:
        with tempfile.TemporaryDirectory(prefix="mlms-scale-") as folder:
            setup_django(Path(folder))
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            log(f"seeding {args.baseline:,} evaluations (the baseline)")
            seed(args.baseline, 0)
            baseline = measure(args.requests)
            log(f"seeding up to {args.evaluations:,} evaluations")
            started = time.perf_counter()
            seed(args.evaluations, args.baseline)
            log(f"  in {time.perf_counter() - started:.0f} s")
            scaled = measure(args.requests)
            from django.db import connections

            connections.close_all()
    finally:
        if not args.keep:
            psql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    print(f"| request | p50 at {args.baseline:,} (ms) | p50 at {args.evaluations:,} (ms) | "
          f"p95 at {args.evaluations:,} (ms) | p95 ratio |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name in REQUESTS:
        base_p50, base_p95 = baseline[name]
        p50, p95 = scaled[name]
        print(f"| {name} | {base_p50:.1f} | {p50:.1f} | {p95:.1f} | {p95 / base_p95:.2f} |")
    worst = max(p95 for _p50, p95 in scaled.values())
    print(f"\nslowest p95 at {args.evaluations:,} evaluations: {worst:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
