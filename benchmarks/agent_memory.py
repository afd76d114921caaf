"""The agent's peak memory while it exports a large evaluation's spans. A measurement, not a
test; see benchmarks/README.md.

    .venv/bin/python benchmarks/agent_memory.py [--spans 100000] [--runs 3] [--json]

Each run is a fresh Python process that does what the agent does after an evaluation: it holds
the evaluation's spans (`predictors.tracing.Span`, `--spans` of them: batch spans with layer
spans nested in them, carrying the `mlms.*` attributes a layer span has), then records them on a
`Tracer` that exports them over OTLP/HTTP to a receiver on this machine (a thread in the same
process that answers 200 to every export and counts the spans) and flushes. Its peak resident
memory (`ru_maxrss`) is read once the spans are built (*held*) and again after the export
(*peak*); *export* is the difference, what the export itself cost.

Three ways are run alternately, `--runs` times each:

- *kept*: all the spans held, then recorded on a tracer that also keeps every OpenTelemetry span
  in memory (`keep=True`: a second copy of the whole trace, as the agent's tracer did);
- *held*: all the spans held, then recorded on an exporting tracer that keeps none;
- *streamed*: what the agent does today: the loop writes each batch size's spans to the tracer
  (`Tracer.start`, `write` per batch size — 10 here —, `finish`) as it goes, so the whole
  trace is never held; *held MB* is then the memory before the first batch size.

The ratios are over *kept* (below 1: less memory). Every run must deliver every span.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, resource, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from predictors.protocol import Attr
from predictors.tracing import Span, Tracer

spans_wanted, way = int(sys.argv[1]), sys.argv[2]
received = [0]

class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        message = ExportTraceServiceRequest.FromString(body)
        received[0] += sum(len(g.spans) for r in message.resource_spans for g in r.scope_spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

state = {"next_id": 1, "t": 1_700_000_000_000_000_000}
LAYERS_PER_BATCH = 63

def make(count):
    spans = []
    while len(spans) < count:
        t, batch_id = state["t"], state["next_id"]
        state["next_id"] += 1
        spans.append(Span("batch", t, t + 1_000_000, {Attr.LEVEL: "model", "batch_size": 8},
                          span_id=batch_id))
        for index in range(min(LAYERS_PER_BATCH, count - len(spans))):
            spans.append(Span(f"layer{index}.conv", t + index * 10_000,
                              t + index * 10_000 + 9_000, {
                Attr.LEVEL: "framework", Attr.OP_TYPE: "Conv2d", Attr.LAYER_INDEX: index,
                Attr.LAYER_NAME: f"layer{index}.conv", Attr.OUTPUT_SHAPE: [8, 64, 56, 56],
                Attr.DEVICE: "cpu", Attr.CLOCK: "perf_counter around each layer",
            }, span_id=state["next_id"], parent_id=batch_id))
            state["next_id"] += 1
        state["t"] += 1_000_000
    return spans

tracer = Tracer(hub=f"http://127.0.0.1:{server.server_address[1]}", token="t",
                service="mlms-agent", keep=True if way == "kept" else None, retry_seconds=30)
attributes = {"model": "m", "framework": "onnxruntime"}
if way == "streamed":
    held = peak_mb()
    tracer.start(attributes=attributes, trace_id="ab" * 16)
    for _ in range(10):
        tracer.write(make(spans_wanted // 10))
    tracer.finish()
    sent = 10 * (spans_wanted // 10) + 1
else:
    spans = make(spans_wanted)
    held = peak_mb()
    tracer.record(spans, attributes=attributes, trace_id="ab" * 16)
    sent = len(spans) + 1
tracer.flush()
tracer.shutdown()
print(json.dumps({"held_mb": held, "peak_mb": peak_mb(), "sent": sent, "received": received[0]}))
"""


def _run(spans: int, way: str) -> dict[str, float]:
    answer = subprocess.run(
        [sys.executable, "-c", _CHILD, str(spans), way],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(answer.stdout.strip().splitlines()[-1])
    if result["received"] != result["sent"]:
        raise SystemExit(f"{way}: {result['received']} of {result['sent']} spans delivered")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    ways = ("kept", "held", "streamed")
    results: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    for run in range(args.runs):
        for way in ways:
            results[way].append(_run(args.spans, way))
            last = results[way][-1]
            print(
                f"run {run + 1} {way:>8}: held {last['held_mb']:.0f} MB, peak "
                f"{last['peak_mb']:.0f} MB",
                file=sys.stderr,
            )
    summary = {}
    for way, runs in results.items():
        summary[way] = {
            "held_mb": statistics.median(r["held_mb"] for r in runs),
            "peak_mb": statistics.median(r["peak_mb"] for r in runs),
            "export_mb": statistics.median(r["peak_mb"] - r["held_mb"] for r in runs),
        }
    for way in ("held", "streamed"):
        summary[way]["peak_ratio"] = summary[way]["peak_mb"] / summary["kept"]["peak_mb"]
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{args.spans} spans, median of {args.runs} runs each")
        print(f"{'way':>10} {'held MB':>8} {'peak MB':>8} {'export MB':>10} {'peak/kept':>10}")
        for way in ways:
            row = summary[way]
            print(
                f"{way:>10} {row['held_mb']:8.0f} {row['peak_mb']:8.0f} "
                f"{row['export_mb']:10.0f} {row.get('peak_ratio', 1.0):10.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
