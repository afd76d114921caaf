"""OTLP ingest throughput of the hub, in spans per second, end to end over HTTP, against the same
payloads ingested in-process. A measurement, not a test; see benchmarks/README.md.

    .venv/bin/python benchmarks/ingest.py [--spans 200000] [--request-spans 512,4096]
        [--clients 1,4] [--rounds 3] [--json]

A hub of its own (a temporary folder: SQLite, artifact store; migrated; served by daphne on a
free port), a user with a token of scope `write`, and for every run a running evaluation of
hers whose trace the spans go into (so the hub also sends its `spans` events, as for an agent's
export). The spans are those of an evaluation at trace level `ml_library` as the agents export
them (`_hub.agent_spans`: batch spans, resnet-18 layer spans nested in them with the `mlms.*`
attributes of ONNX Runtime's profiler, kernel spans nested in the convolutions), serialized
before any clock starts into OTLP protobuf ExportTraceServiceRequests of `--request-spans`
spans each (512 is the SDK's BatchSpanProcessor default).

For each request size:

- *parse*: `ExportTraceServiceRequest.ParseFromString` of every body, in this process: the
  floor, what any OTLP receiver written in Python pays;
- *in-process*: the hub's ingest path without HTTP, in this process, one body after the other:
  `traces.otlp.decode` then `traces.ingest.ingest` (rows, authorization, an LZ4
  Parquet chunk written to the artifact store, the Trace row, the evaluation's event, which a
  process without an event loop sends through a thread of its own: about 1 ms) — the
  baseline;
- *http*: `POST /v1/traces` with `Authorization: Bearer …` and
  `Content-Type: application/x-protobuf`, from `--clients` threads with a keep-alive connection
  each, to daphne (which hands the exports to its ingest processes, `traces.ingest_processes`):
  the wall time from the first request to the last answer. Before the first
  size's runs, the same exports are sent once, untimed, into a trace of their own: a hub that
  has run a while (its first exports start its ingest processes, `traces.ingest_processes`, and
  are stored in daphne's own thread until they are ready).

Each export carries an export id (`X-MLMS-Export`, in-process the `key` argument), as the
agents' exports do (`predictors.tracing.delivery`), so that the hub does its exactly-once work.

Each path runs `--rounds` times, the paths interleaved (round 1: parse, in-process, http with
each client count; round 2: …), each run into a trace of its own; the table gives the median
and the range. spans/s is spans sent / wall time; the ratio is http (or parse) over
in-process (medians), so that the
share of HTTP, ASGI, authentication and concurrency (below 1) or of storage (parse, above 1)
is visible. After every run the trace's `span_count` is read from the hub's database and must
equal the spans sent; a mismatch (or any answer but 200) is an error exit. The client threads
run on the same machine as the hub and take some of its CPU, as an agent on the same host would.
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _hub  # noqa: E402
from _hub import log  # noqa: E402

CONTENT_TYPE = "application/x-protobuf"


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def retarget(bodies: list[bytes], old: str, new: str) -> list[bytes]:
    """The same exports with every span in trace `new` instead of `old` (16 bytes each)."""
    before, after = bytes.fromhex(old), bytes.fromhex(new)
    return [body.replace(before, after) for body in bodies]


def run_parse(bodies: list[bytes]) -> float:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    start = time.perf_counter()
    for body in bodies:
        trace_service_pb2.ExportTraceServiceRequest().ParseFromString(body)
    return time.perf_counter() - start


def run_in_process(bodies: list[bytes], keys: list[str], raw_token: str) -> float:
    from hub.authentication import authenticate_token
    from traces.ingest import ingest
    from traces.otlp import decode

    token = authenticate_token(raw_token)
    start = time.perf_counter()
    for body, key in zip(bodies, keys, strict=True):
        ingest(token, decode(body, CONTENT_TYPE), key=key)
    return time.perf_counter() - start


def run_http(url: str, bodies: list[bytes], keys: list[str], raw_token: str, clients: int) -> float:
    host, port = url.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {raw_token}", "Content-Type": CONTENT_TYPE}
    lock = threading.Lock()
    next_body = iter(range(len(bodies)))
    failures: list[str] = []
    ready = threading.Barrier(clients + 1)

    def client() -> None:
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        ready.wait()
        while not failures:
            with lock:
                index = next(next_body, None)
            if index is None:
                break
            try:
                connection.request(
                    "POST", "/v1/traces", bodies[index], {**headers, "X-MLMS-Export": keys[index]}
                )
                response = connection.getresponse()
                answer = response.read()
            except (OSError, http.client.HTTPException) as error:
                failures.append(f"request {index}: {error!r}")
                break
            if response.status != 200:
                failures.append(f"request {index}: {response.status} {answer[:300]!r}")
        connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"the hub refused an export: {failures[0]}")
    return elapsed


def stored_spans(trace_id: str) -> int:
    from traces.models import Trace

    trace = Trace.objects.filter(trace_id=trace_id).first()
    return trace.span_count if trace else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=200_000, help="spans per run")
    parser.add_argument(
        "--request-spans",
        default="512,4096",
        help="spans per export request, comma-separated (default 512,4096)",
    )
    parser.add_argument(
        "--clients",
        default="1,4",
        help="concurrent HTTP client threads, comma-separated (default 1,4)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="runs of each path per request size, interleaved; the median is reported",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--keep", action="store_true", help="keep the hub's temporary folder")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    sizes, client_counts = _ints(args.request_spans), _ints(args.clients)

    folder = Path(tempfile.mkdtemp(prefix="mlms-ingest-"))
    log(f"hub in {folder}; migrating")
    _hub.migrate(folder)
    _hub.use_hub_django(folder)
    user, raw_token = _hub.user_with_token("bench", ["write"])

    log(f"building {args.spans} agent spans")
    spans = _hub.agent_spans(args.spans)
    template = secrets.token_hex(16)
    rows: list[dict[str, Any]] = []
    machine = _hub.machine()
    started = time.monotonic()
    with _hub.serve(folder) as url:
        log(f"daphne at {url}")
        for size in sizes:
            bodies = list(_hub.export_bodies(template, spans, size))
            mean_kib = statistics.fmean(len(b) for b in bodies) / 1024
            keys = [secrets.token_hex(16) for _ in bodies]  # an export id each
            log(f"{size} spans/request: {len(bodies)} requests of {mean_kib:.0f} KiB on average")

            def trace_for_run(bodies: list[bytes] = bodies) -> tuple[str, list[bytes]]:
                """A new running evaluation's trace id, and the exports retargeted to it."""
                trace_id = _hub.evaluation(user, finished=False).trace_id
                return trace_id, retarget(bodies, template, trace_id)

            if size == sizes[0]:
                # Untimed: a running hub's state. The hub's first exports start its ingest
                # processes (traces.ingest_processes), and are stored in its own thread until they
                # are ready.
                _scratch, own = trace_for_run()
                seconds = run_http(url, own, [secrets.token_hex(16) for _ in own], raw_token, 4)
                log(f"  warm-up (untimed), 4 clients: {args.spans / seconds:,.0f} spans/s")
            # Rounds interleave the paths, so that a slower minute of a shared machine falls
            # on all of them; each run goes into a trace of its own.
            paths = [("parse", 1), ("in-process", 1), *(("http", c) for c in client_counts)]
            seconds_of: dict[tuple[str, int], list[float]] = {path: [] for path in paths}
            for round_number in range(1, args.rounds + 1):
                for path, clients in paths:
                    trace_id = None
                    if path == "parse":
                        seconds = run_parse(bodies)
                    elif path == "in-process":
                        trace_id, own = trace_for_run()
                        seconds = run_in_process(own, keys, raw_token)
                    else:
                        trace_id, own = trace_for_run()
                        seconds = run_http(url, own, keys, raw_token, clients)
                    stored = stored_spans(trace_id) if trace_id else None
                    if stored is not None and stored != args.spans:
                        raise SystemExit(
                            f"trace {trace_id} ({path}, {clients} clients) stored {stored} "
                            f"spans of {args.spans} sent"
                        )
                    seconds_of[(path, clients)].append(seconds)
                    log(
                        f"  round {round_number}, {path}"
                        + (f", {clients} clients" if path == "http" else "")
                        + f": {args.spans / seconds:,.0f} spans/s"
                    )

            baseline = args.spans / statistics.median(seconds_of[("in-process", 1)])
            for (path, clients), times in seconds_of.items():
                rates = sorted(args.spans / seconds for seconds in times)
                rate = statistics.median(rates)
                rows.append(
                    {
                        "request_spans": size,
                        "requests": len(bodies),
                        "request_kib": round(mean_kib, 1),
                        "path": path,
                        "clients": clients,
                        "spans": args.spans,
                        "rounds": len(rates),
                        "spans_per_s": round(rate),
                        "spans_per_s_min": round(rates[0]),
                        "spans_per_s_max": round(rates[-1]),
                        "ratio": round(rate / baseline, 3),
                        "stored_span_count": None if path == "parse" else args.spans,
                    }
                )
    log(f"done in {time.monotonic() - started:.0f} s")
    if not args.keep:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)

    if args.json:
        print(json.dumps({"machine": machine, "runs": rows}, indent=2))
        return 0
    print(
        f"{machine}; {args.spans} spans per run, {_hub.SPANS_PER_BATCH} spans per batch, "
        f"{args.rounds} rounds\n"
    )
    print(
        "| spans/request | requests | KiB/request | path | clients | spans/s, median "
        "| min–max | ratio to in-process | stored span_count |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        stored = "—" if row["stored_span_count"] is None else str(row["stored_span_count"])
        print(
            f"| {row['request_spans']} | {row['requests']} | {row['request_kib']:.0f} "
            f"| {row['path']} | {row['clients']} | {row['spans_per_s']:,} "
            f"| {row['spans_per_s_min']:,}–{row['spans_per_s_max']:,} | {row['ratio']:.2f} "
            f"| {stored} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
