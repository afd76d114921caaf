"""The diff of many traces at scale: 32 evaluations whose traces hold a million spans each, in
two sides of 16 runs, and the server's time of `GET /api/v1/compare/traces/` over them. A
measurement, not a test; see benchmarks/README.md.

    .venv/bin/python benchmarks/trace_diff.py [--traces 32] [--spans 1000000] [--requests 20]

A hub of its own in a temporary folder (the embedded default, `benchmarks/_hub.py`). Each trace
is one evaluation's (succeeded, trace level `system_library`): batch after batch a `predict`
span (level `model`, batch size 1), in it resnet-18's layers (`_hub`'s graph, level
`framework`), in each layer its op (`ml_library`), in each op its kernels (`system_library`:
three in a convolution, one elsewhere), 179 spans a batch, cut at `--spans`. Durations are
lognormal about each step's own time, drawn per run (its seed); side B's `layer3.0.conv1`, its
op and kernels are 1.5 times as long, and one of B's kernels has another name (an item removed,
one added). The spans are built column-wise with NumPy and stored through the trace store
(`traces.store.get_store().add_chunk`, chunks of 65,536 spans, as ingest stores an export),
without OTLP decoding; each trace is then finished as the hub finishes an evaluation's trace
when it ends (`traces.finishing.finish`: compaction, then per-layer aggregates), so the diff
reads aggregates ready made.

Then `--requests` requests of each kind are timed in this process with Django's test client
(server time): the default answer (level layer), the op and kernel levels whole, and a drill
into one layer's ops; the table gives p50 and p95 (nearest rank) of each, and the first
(cold) request apart.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _hub  # noqa: E402

CHUNK = 65_536
SLOWER_LAYER = "layer3.0.conv1"
SLOWER = 1.5
RENAMED_KERNEL = ("MlasActivation", "MlasActivationAvx512")


def _template() -> dict[str, list[Any]]:
    """One batch's spans, parents first: name, level, op type, layer name, layer index, the
    index of the parent within the batch (-1: the batch span), duration (ns) and start offset
    (ns) within the batch."""
    spans: dict[str, list[Any]] = {
        key: [] for key in ("name", "level", "op_type", "layer", "index", "parent", "ns", "at")
    }

    def add(name: str, level: str, op_type: str, layer: str | None, index: int | None,
            parent: int, ns: int, at: int) -> int:  # fmt: skip
        for key, value in zip(
            spans, (name, level, op_type, layer, index, parent, ns, at), strict=True
        ):
            spans[key].append(value)
        return len(spans["name"]) - 1

    batch = add("predict", "model", "", None, None, -2, 0, 0)
    at = 10_000
    for index, (name, op_type, shape) in enumerate(_hub._RESNET):
        size = math.prod(shape) // 8
        ns = int(2_000 + size * (2.0 if op_type == "Conv" else 0.2))
        layer = add(name, "framework", op_type, name, index, batch, ns, at)
        op = add(f"{op_type} (CPU)", "ml_library", op_type, name, index, layer, int(ns * 0.95), at)
        kernels = _hub._KERNELS.get(op_type, (f"Mlas{op_type}",))
        for position, kernel in enumerate(kernels):
            part = int(ns * 0.9 / len(kernels))
            add(kernel, "system_library", "kernel", name, index, op, part, at + position * part)
        at += ns + 1_000
    spans["ns"][batch] = at
    return spans


TEMPLATE = _template()
PER_BATCH = len(TEMPLATE["name"])


def trace_table(trace_id: str, spans: int, seed: int, side_b: bool) -> Any:
    """A trace of `spans` spans (see the module's text) as one Arrow table in the store's
    schema."""
    import pyarrow as pa

    from traces.store import SCHEMA

    rng = np.random.default_rng(seed)
    batches = -(-spans // PER_BATCH)
    names = np.asarray(TEMPLATE["name"], dtype=object)
    ns = np.asarray(TEMPLATE["ns"], dtype=np.float64)
    if side_b:
        layers = np.asarray(TEMPLATE["layer"], dtype=object)
        ns = np.where(layers == SLOWER_LAYER, ns * SLOWER, ns)
        names = np.where(names == RENAMED_KERNEL[0], RENAMED_KERNEL[1], names)
    # Per run a level of its own (a machine's drift), per span lognormal noise.
    run_level = rng.lognormal(0, 0.01)
    durations = (ns[None, :] * run_level * rng.lognormal(0, 0.05, (batches, PER_BATCH))).astype(
        np.int64
    )
    batch_ns = durations[:, 0] + 20_000
    starts = np.concatenate([[0], np.cumsum(batch_ns)[:-1]]) + 1_700_000_000_000_000_000
    offsets = np.asarray(TEMPLATE["at"], dtype=np.int64)
    begin = starts[:, None] + offsets[None, :]
    ids = np.arange(batches * PER_BATCH, dtype=np.int64).reshape(batches, PER_BATCH) + 2
    parents = np.asarray(TEMPLATE["parent"], dtype=np.int64)
    parent_ids = np.where(
        parents[None, :] >= 0,
        ids[:, np.maximum(parents, 0)],
        np.where(parents[None, :] == -2, 1, 0),
    )
    count = spans - 1
    span_id = [f"{i:016x}" for i in ids.ravel()[:count]]
    parent_id = [f"{i:016x}" for i in parent_ids.ravel()[:count]]
    levels = np.tile(np.asarray(TEMPLATE["level"], dtype=object), batches)[:count]
    layer = np.tile(np.asarray(TEMPLATE["layer"], dtype=object), batches)[:count]
    index = np.tile(np.asarray([-1 if i is None else i for i in TEMPLATE["index"]]), batches)
    sizes = np.where(levels == "model", 1, -1)
    start = begin.ravel()[:count]
    end = start + durations.ravel()[:count]
    root_end = int(end.max())
    columns = {
        "trace_id": [trace_id] * spans,
        "span_id": [f"{1:016x}", *span_id],
        "parent_span_id": [None, *parent_id],
        "name": ["evaluation", *np.tile(names, batches)[:count]],
        "kind": [1] * spans,
        "start_ns": [int(starts[0]), *start.tolist()],
        "end_ns": [root_end, *end.tolist()],
        "attributes": ["{}"] * spans,
        "resource": ["{}"] * spans,
        "scope": ["mlms.predictors"] * spans,
        "status": [0] * spans,
        "status_message": [""] * spans,
        "level": ["application", *levels],
        "layer_index": [None, *[None if i < 0 else int(i) for i in index[:count]]],
        "layer_name": [None, *layer],
        "op_type": [None, *np.tile(np.asarray(TEMPLATE["op_type"], dtype=object), batches)[:count]],
        "device": ["cpu"] * spans,
        "counters": [None] * spans,
        "batch_size": [None, *[None if s < 0 else 1 for s in sizes]],
    }
    return pa.table(columns, schema=SCHEMA)


def seed_traces(user: Any, count: int, spans: int) -> tuple[list[str], list[str], dict[str, float]]:
    """`count` succeeded evaluations of `user`, half on each side, whose traces hold `spans`
    spans each, finished; (side A's ids, side B's ids, seconds spent building, storing and
    finishing)."""
    from traces import finishing
    from traces.models import Trace
    from traces.store import get_store

    store = get_store()
    sides: tuple[list[str], list[str]] = ([], [])
    seconds = {"build": 0.0, "store": 0.0, "finish": 0.0}
    for number in range(count):
        side_b = number % 2 == 1
        evaluation = _hub.evaluation(user, finished=True, trace_level="system_library")
        began = time.perf_counter()
        table = trace_table(evaluation.trace_id, spans, seed=number, side_b=side_b)
        built = time.perf_counter()
        for offset in range(0, table.num_rows, CHUNK):
            store.add_chunk(evaluation.trace_id, table.slice(offset, CHUNK))
        Trace.objects.create(
            trace_id=evaluation.trace_id, owner=user, evaluation=evaluation,
            span_count=table.num_rows, chunk_count=-(-table.num_rows // CHUNK),
            start_ns=int(table["start_ns"][0].as_py()), end_ns=int(table["end_ns"][0].as_py()),
        )  # fmt: skip
        stored = time.perf_counter()
        finishing.finish(evaluation.trace_id)
        finished = time.perf_counter()
        seconds["build"] += built - began
        seconds["store"] += stored - built
        seconds["finish"] += finished - stored
        sides[side_b].append(str(evaluation.pk))
        _hub.log(
            f"  trace {number + 1}/{count}: {table.num_rows:,} spans, built {built - began:.1f} s, "
            f"stored {stored - built:.1f} s, finished {finished - stored:.1f} s"
        )
    return sides[0], sides[1], seconds


def nearest_rank(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def timed(client: Any, params: dict[str, str], requests: int) -> tuple[float, list[float], Any]:
    """The first request's time (ms), then `requests` more, and the last answer."""
    times = []
    body = None
    for _ in range(requests + 1):
        began = time.perf_counter()
        response = client.get("/api/v1/compare/traces/", params)
        times.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, response.content[:300]
        body = response.json()
    return times[0], times[1:], body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=32)
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlms-trace-diff-") as folder:
        _hub.migrate(Path(folder))
        _hub.use_hub_django(Path(folder))
        from django.test import Client

        user, _token = _hub.user_with_token("alice", ["read"])
        _hub.log(f"{args.traces} traces of {args.spans:,} spans")
        started = time.perf_counter()
        a, b, seconds = seed_traces(user, args.traces, args.spans)
        seeded = time.perf_counter() - started
        client = Client()
        client.force_login(user)
        sides = {"a": ",".join(a), "b": ",".join(b)}
        rows = []
        for label, extra in (
            ("layers (the default)", {}),
            ("ops, whole level", {"level": "op"}),
            ("kernels, whole level", {"level": "kernel"}),
            (f"ops of {SLOWER_LAYER}", {"level": "op", "parent": SLOWER_LAYER}),
        ):
            cold, warm, body = timed(client, {**sides, **extra}, args.requests)
            rows.append((label, cold, warm, body))
            _hub.log(f"  {label}: cold {cold:.0f} ms, p50 {nearest_rank(warm, 0.5):.0f} ms")
    print(_hub.machine())
    print(
        f"\n{args.traces} traces × {args.spans:,} spans ({len(a)} against {len(b)} runs) seeded "
        f"in {seeded:.0f} s: built {seconds['build']:.0f} s, stored {seconds['store']:.0f} s, "
        f"finished (compaction and aggregates) {seconds['finish']:.0f} s\n"
    )
    print("| request | items | cold (ms) | p50 (ms) | p95 (ms) | n |")
    print("|---|---|---|---|---|---|")
    for label, cold, warm, body in rows:
        print(
            f"| {label} | {body['items_total']} | {cold:.0f} | {nearest_rank(warm, 0.5):.0f} | "
            f"{nearest_rank(warm, 0.95):.0f} | {len(warm)} |"
        )
    first = rows[0][3]["items"][0]
    print(
        f"\nlargest contributor: {first['key']} {first['words']}, "
        f"{first['text']['contribution']} ms per inference; "
        f"removed {rows[2][3]['removed'][:1]}, added {rows[2][3]['added'][:1]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
