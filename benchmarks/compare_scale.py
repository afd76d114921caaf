"""Comparing eight evaluations whose traces hold a million spans each: the server's time of
`GET /api/v1/compare/`, cold (the first comparison of the eight) and warm (every later one),
against the same comparison of eight traces of a thousand spans in the same run. Every trace
is finished first, as the hub finishes an evaluation's trace when the evaluation ends
(`traces.finishing.finish`, in the background: compaction and per-layer aggregates), so a
comparison reads aggregates ready made.

    .venv/bin/python benchmarks/compare_scale.py [--spans 1000000] [--baseline-spans 1000]
        [--repeats 5]

A hub of its own in a temporary folder (the embedded default, `benchmarks/_hub.py`). One trace
of `--spans` spans (batch spans with resnet-18 layer spans and kernel spans nested in them, as
`first_paint.py` makes) is written through the hub's ingest path in-process; the seven others
are copies of its stored chunks under their own trace ids (the same spans, stored the same
way). Each of the eight evaluations gets a result with rows for three batch sizes. The
comparison is called in this process with Django's test client, so the time is the server's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _hub  # noqa: E402
import first_paint  # noqa: E402

EVALUATIONS = 8


def _with_result(evaluation: Any, rng_seed: int) -> None:
    from evaluations import leaderboards
    from evaluations.models import BatchResult, Result

    result = Result.objects.create(
        evaluation=evaluation, top1=0.9, top5=1.0, count=100, top_k=5,
        content_hash="c" * 64, cpu_model="bench CPU", stack={}, details={},
    )  # fmt: skip
    rows = [
        BatchResult(
            result=result,
            evaluation=evaluation,
            batch_size=size,
            count=50,
            mean_ms=size * (1 + rng_seed / 10),
            p50_ms=size,
            p90_ms=size,
            p99_ms=size,
            min_ms=size,
            max_ms=size,
            std_ms=0.1,
            throughput_ips=1000.0,
        )  # fmt: skip
        for size in (1, 8, 32)
    ]
    BatchResult.objects.bulk_create(rows)
    result.summarize(rows)
    result.configuration = leaderboards.configuration_of(evaluation, result)
    result.save()


def traces(user: Any, token: str, spans: int) -> list[str]:
    """Eight succeeded evaluations with results whose traces hold `spans` spans each."""
    from hub import storage
    from traces import finishing
    from traces.models import Trace
    from traces.store import chunk_folder

    first, trace_id, seconds, finished = first_paint.seed(user, token, spans, 512)
    _hub.log(f"  {spans:,} spans ingested in {seconds:.0f} s, finished in {finished:.1f} s")
    source = Trace.objects.get(trace_id=trace_id)
    ids = [first]
    for _ in range(EVALUATIONS - 1):
        evaluation = _hub.evaluation(user, finished=True)
        shutil.copytree(
            storage.resolve(chunk_folder(trace_id)),
            storage.resolve(chunk_folder(evaluation.trace_id)),
        )
        Trace.objects.create(
            trace_id=evaluation.trace_id, owner=user, evaluation=evaluation,
            span_count=source.span_count, chunk_count=source.chunk_count,
            start_ns=source.start_ns, end_ns=source.end_ns,
        )  # fmt: skip
        # Each finished as the hub finishes an evaluation's trace when it ends.
        finishing.finish(evaluation.trace_id)
        ids.append(str(evaluation.pk))
    from evaluations.models import Evaluation

    for position, evaluation in enumerate(Evaluation.objects.filter(pk__in=ids)):
        _with_result(evaluation, position)
    return ids


def timed(client: Any, ids: list[str]) -> float:
    started = time.perf_counter()
    response = client.get("/api/v1/compare/", {"evaluations": ",".join(ids)})
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, response.content[:300]
    assert response.json()["layers"]["rows"], "no layers matched"
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--baseline-spans", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlms-compare-") as folder:
        _hub.migrate(Path(folder))
        _hub.use_hub_django(Path(folder))
        from django.test import Client

        user, token = _hub.user_with_token("alice", ["read", "write", "evaluate"])
        client = Client()
        client.force_login(user)
        figures = {}
        for label, spans in (("baseline", args.baseline_spans), ("large", args.spans)):
            _hub.log(f"{EVALUATIONS} traces of {spans:,} spans")
            ids = traces(user, token, spans)
            cold = timed(client, ids)
            warm = [timed(client, ids) for _ in range(args.repeats)]
            figures[label] = (spans, cold, statistics.median(warm), max(warm))
    print(_hub.machine())
    print("| traces | cold (ms) | warm median (ms) | warm max (ms) |")
    print("|---|---|---|---|")
    for spans, cold, median, worst in figures.values():
        print(f"| {EVALUATIONS} × {spans:,} spans | {cold:.0f} | {median:.0f} | {worst:.0f} |")
    ratio = figures["large"][2] / figures["baseline"][2]
    print(f"\nwarm ratio (large / baseline): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
