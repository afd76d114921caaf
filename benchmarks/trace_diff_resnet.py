"""Five runs of resnet-18 against five, at trace level framework, through the diff of traces: the
same configuration on both sides (the share of layers with no detectable difference), and one
intra-op thread against two (every layer with its ratio, interval and verdict). A measurement,
not a test; see benchmarks/README.md.

    .venv/bin/python benchmarks/trace_diff_resnet.py [--runs 5] [--limit 40]
        [--framework onnxruntime] [--store var/artifacts]

The zoo's resnet-18 (seeded weights) is evaluated on the digits dataset at batch size 1,
`--limit` batches a run after one warm-up, through the evaluation loop
(`predictors.evaluation.evaluate`) into the agent's tracer (`predictors.tracing.Tracer`, its
spans kept in memory), whose spans are encoded as its OTLP exporter encodes them and ingested
in-process into a hub of its own (a temporary folder, the embedded default,
`benchmarks/_hub.py`) as the trace of one evaluation per run. The runs are interleaved (A, A',
B, A, A', B, …: threads 1, threads 1 again, threads 2) so that the machine's drift falls on
every side alike. The model comes from `--store` (the full zoo of `make zoo`); where it is not
there, only resnet-18 and the digits dataset are built into it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _hub  # noqa: E402

from predictors.statistics import ratio  # noqa: E402

ENTRIES = ("resnet-18", "digits")


def zoo(store: Path) -> Path:
    """`store`, with resnet-18 and the digits dataset built into it where missing."""
    from predictors.zoo.build import build, select

    entries, _ = select(ENTRIES)
    if not all((store / e.directory / name).is_file() for e in entries for name in e.files):
        _hub.log(f"building {', '.join(ENTRIES)} into {store}")
        build(store, only=ENTRIES)
    return store


def runner(user: Any, store: Path, framework: str, limit: int) -> Any:
    """`run(threads)`: one evaluation of `user`'s of resnet-18 with `threads` intra-op
    threads, its trace ingested with a token of hers and finished; the evaluation."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from evaluations.models import Evaluation
    from hub.authentication import authenticate_token
    from hub.models import ApiToken
    from predictors.data import DataManager
    from predictors.evaluation import EvaluationOptions, evaluate
    from predictors.manifests.catalog import Catalog
    from predictors.tracing import Tracer
    from traces import finishing
    from traces.ingest import ingest

    _token, raw = ApiToken.issue(user, name="spans", scopes=["write"])
    token = authenticate_token(raw)
    catalog = Catalog()
    model = catalog.find_model("resnet-18", "*", framework)
    dataset = catalog.find_dataset("digits")
    fetch = DataManager(store_dir=store).fetch

    def run(threads: int) -> Any:
        evaluation = _hub.evaluation(user, finished=False, trace_level="framework")
        Evaluation.objects.filter(pk=evaluation.pk).update(framework=framework)
        tracer = Tracer(service="mlms-agent")
        tracer.start(attributes={"model": model.name}, trace_id=evaluation.trace_id)
        options = EvaluationOptions(
            batch_sizes=(1,), limit=limit, warmup=1, threads=threads, trace_level="framework"
        )
        evaluate(model, dataset, options, fetch, sink=tracer)
        tracer.finish()
        spans = list(tracer.finished())
        tracer.shutdown()
        ingest(token, encode_spans(spans))
        Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.SUCCEEDED)
        finishing.finish(evaluation.trace_id)
        return evaluation

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--framework", default="onnxruntime")
    parser.add_argument("--store", type=Path, default=_hub.REPO_ROOT / "var" / "artifacts")
    args = parser.parse_args()
    store = zoo(args.store.resolve())
    with tempfile.TemporaryDirectory(prefix="mlms-diff-resnet-") as folder:
        _hub.migrate(Path(folder))
        _hub.use_hub_django(Path(folder))
        from django.test import Client

        user, _ = _hub.user_with_token("alice", ["read"])
        run = runner(user, store, args.framework, args.limit)
        sides: dict[str, list[Any]] = {"threads 1": [], "threads 1 again": [], "threads 2": []}
        started = time.perf_counter()
        for number in range(args.runs):
            for label, threads in (("threads 1", 1), ("threads 1 again", 1), ("threads 2", 2)):
                sides[label].append(run(threads))
            _hub.log(f"  round {number + 1}/{args.runs} in {time.perf_counter() - started:.0f} s")
        client = Client()
        client.force_login(user)
        reports = {}
        for label in ("threads 1 again", "threads 2"):
            params = {
                "a": ",".join(str(e.pk) for e in sides["threads 1"]),
                "b": ",".join(str(e.pk) for e in sides[label]),
                "level": "layer",
            }
            began = time.perf_counter()
            response = client.get("/api/v1/compare/traces/", params)
            elapsed = (time.perf_counter() - began) * 1000
            assert response.status_code == 200, response.content[:300]
            reports[label] = (response.json(), elapsed)
    print(_hub.machine())
    print(
        f"\nresnet-18 ({args.framework}), digits, batch size 1, {args.limit} batches a run, "
        f"{args.runs} runs a side, trace level framework\n"
    )
    for label, (report, elapsed) in reports.items():
        items = report["items"]
        quiet = sum(item["verdict"] == "no detectable difference" for item in items)
        counts: dict[str, int] = {}
        for item in items:
            counts[item["verdict"] or item["words"]] = (
                counts.get(item["verdict"] or item["words"], 0) + 1
            )
        layers = {entry["level"]: entry for entry in report["levels"]}["layer"]
        print(
            f"### threads 1 against {label}: {len(items)} layers, {quiet} "
            f"({quiet / len(items):.0%}) no detectable difference; verdicts {counts}; "
            f"layers' time per inference A {layers['text']['a']} ms, B {layers['text']['b']} ms "
            f"({layers['text']['difference']} ms); answered in {elapsed:.0f} ms\n"
        )
        print(
            "| layer | A median [interval] (ms) | B median [interval] (ms) | B/A [interval] | verdict | contribution (ms) |"
        )
        print("|---|---|---|---|---|---|")
        for item in items[:12]:
            difference = item["difference"] or {}
            bounds = (
                f"[{ratio(difference['low'])}–{ratio(difference['high'])}]" if difference else ""
            )
            print(
                f"| {item['key']} | {item['text']['a']} | {item['text']['b']} | "
                f"{item['text']['ratio']} {bounds} | {item['words']} | {item['text']['contribution']} |"
            )
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
