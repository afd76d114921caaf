"""Time to first paint of the timeline page (`/evaluations/<id>/timeline/`) in Chromium, for a
trace of a million spans against one of a thousand. A measurement, not a test; see
benchmarks/README.md.

    .venv/bin/python benchmarks/first_paint.py [--spans 1000000] [--baseline-spans 1000]
        [--repeats 5] [--request-spans 512] [--json]

A hub of its own (a temporary folder: SQLite, artifact store; migrated; served by daphne on a
free port) with two succeeded evaluations of one user. Their traces are written through the
hub's ingest path in-process (`traces.otlp.decode` and `traces.ingest.ingest`), in OTLP
exports of `--request-spans` spans each as the agents send them (512: the SDK's
BatchSpanProcessor default, so the large trace is stored as about 2,000 Parquet chunks, as an
agent's export of it would be): `_hub.agent_spans`, batch spans with resnet-18 layer spans and
kernel spans nested in them.

Each visit opens the page in a fresh context of headless Chromium (Debian's, by path:
/usr/bin/chromium, `--no-sandbox --disable-gpu --disable-background-networking`; Playwright
never downloads a browser here), signed in with a real session cookie of the user. A script
installed before the page's own (`add_init_script`) watches `data-drawn` of the canvas with a
MutationObserver and records `performance.now()` — milliseconds since the navigation started —
the first time it is set above 0, i.e. right after the first `draw()` that put spans on the
canvas (the pixels reach the screen at the next frame). Python waits for that with
`wait_for_function` (polling every 16 ms), which only decides when to read the figure. With it
are read, from the page's Resource Timing entry of the first `/timeline?` request, when that
request started and ended and the size of its body in bytes (decoded; the level of detail
caps it at `max_spans`, which the page derives from the canvas width).

Once ingested, each trace is finished as the hub finishes the trace of an evaluation that ends
(`traces.finishing.finish`, in the background there: its chunks compacted into one file with
its overview, its per-layer aggregates computed); the table gives how long that took. Per
trace: one visit first (*first visit*: the first ever of the page, its time to first paint
reported apart), then `--repeats` visits, alternating between the two traces; the table gives
the median and range of the measured visits, and the ratio of the medians (large /
baseline). Before the browser starts, the hub's time to answer a zoomed window (10 %, 1 % and
0.1 % of the trace, `max_spans` 4000, as the page asks when zooming) is taken in-process.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _hub  # noqa: E402
from _hub import log  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CONTENT_TYPE = "application/x-protobuf"

# Before the page's scripts: the moment the canvas first reports drawn spans.
OBSERVER = """
(() => {
  window.__mlmsFirstPaint = null;
  window.__mlmsDrawn = null;
  const observer = new MutationObserver((records) => {
    for (const record of records) {
      const drawn = Number(record.target.dataset && record.target.dataset.drawn);
      if (record.target.id === "timeline" && drawn > 0) {
        window.__mlmsFirstPaint = performance.now();
        window.__mlmsDrawn = drawn;
        observer.disconnect();
        return;
      }
    }
  });
  observer.observe(document, { subtree: true, attributes: true, attributeFilter: ["data-drawn"] });
})();
"""

READ = """
() => {
  const entry = performance.getEntriesByType("resource").find((e) => e.name.includes("/timeline?"));
  const canvas = document.getElementById("timeline");
  return {
    paint_ms: window.__mlmsFirstPaint,
    drawn: window.__mlmsDrawn,
    total: Number(canvas.dataset.total || 0),
    request_start_ms: entry ? entry.startTime : null,
    response_end_ms: entry ? entry.responseEnd : null,
    bytes: entry ? entry.decodedBodySize : null,
    url: entry ? entry.name : null,
  };
}
"""


def _produce(queue: Any, trace_id: str, spans: int, per_request: int) -> None:
    for body in _hub.export_bodies(trace_id, _hub.iter_agent_spans(spans), per_request):
        queue.put(body)
    queue.put(None)


def seed(user: Any, raw_token: str, spans: int, per_request: int) -> tuple[str, str, float, float]:
    """A succeeded evaluation of `user` whose trace holds `spans` spans, finished as the hub
    finishes a trace when its evaluation ends (`traces.finishing.finish`: compaction and
    aggregates); (id, trace id, seconds ingesting, seconds finishing). A child process builds
    the exports while this one ingests them."""
    import multiprocessing

    from hub.authentication import authenticate_token
    from traces.ingest import ingest
    from traces.models import Trace
    from traces.otlp import decode

    evaluation = _hub.evaluation(user, finished=True)
    token = authenticate_token(raw_token)
    start = time.perf_counter()
    context = multiprocessing.get_context("fork")
    queue = context.Queue(maxsize=32)
    producer = context.Process(
        target=_produce, args=(queue, evaluation.trace_id, spans, per_request), daemon=True
    )
    producer.start()
    sent = 0
    while (body := queue.get()) is not None:
        sent += ingest(token, decode(body, CONTENT_TYPE))
        if sent % 102_400 < per_request:
            log(f"  {sent:,} of {spans:,} spans")
    producer.join()
    stored = Trace.objects.get(trace_id=evaluation.trace_id).span_count
    if stored != spans:
        raise SystemExit(f"trace {evaluation.trace_id} stored {stored} spans of {spans}")
    ingested = time.perf_counter() - start
    from traces import finishing

    start = time.perf_counter()
    finishing.finish(evaluation.trace_id)
    return str(evaluation.pk), evaluation.trace_id, ingested, time.perf_counter() - start


ZOOMS = (0.1, 0.01, 0.001)


def zoomed_windows(trace_id: str, max_spans: int = 4000) -> dict[str, float]:
    """The hub's time (ms, median of 3, in this process) to answer a window of 10 %, 1 % and
    0.1 % of the trace, in its middle, as a zoom in the page asks for it (max_spans 4000)."""
    from traces import timeline
    from traces.models import Trace

    trace = Trace.objects.get(trace_id=trace_id)
    assert trace.start_ns is not None and trace.end_ns is not None
    length = trace.end_ns - trace.start_ns
    figures = {}
    for fraction in ZOOMS:
        start = trace.start_ns + int(length * 0.45)
        end = start + int(length * fraction)
        times = []
        for _ in range(3):
            began = time.perf_counter()
            timeline.timeline(trace_id, start, end, max_spans)
            times.append((time.perf_counter() - began) * 1000)
        figures[f"{fraction:g}"] = statistics.median(times)
    return figures


def visit(browser: Any, url: str, cookie: tuple[str, str], path: str) -> dict[str, Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": url}])
    context.add_init_script(OBSERVER)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(url + path, wait_until="commit")
        page.wait_for_function("window.__mlmsFirstPaint !== null", polling=16, timeout=300_000)
        result: dict[str, Any] = page.evaluate(READ)
        if page.url != url + path:
            raise SystemExit(f"the page went to {page.url}: not signed in?")
    finally:
        page.goto("about:blank")
        context.close()
    if errors:
        raise SystemExit(f"JavaScript errors on the page: {errors}")
    return result


# Before the page's scripts: every change of the canvas's span count, with the wall clock.
LIVE_OBSERVER = """
(() => {
  window.__mlmsTotals = [];
  const observer = new MutationObserver((records) => {
    for (const record of records) {
      if (record.target.id === "timeline") {
        window.__mlmsTotals.push([Date.now(), Number(record.target.dataset.total || 0)]);
      }
    }
  });
  observer.observe(document, { subtree: true, attributes: true, attributeFilter: ["data-total"] });
})();
"""


def live_exports(user: Any, exports: int) -> tuple[str, list[bytes], int]:
    """A running evaluation of `user`, and `exports` exports of one batch's spans each into its
    trace: (its id, the bodies, spans per body)."""
    evaluation = _hub.evaluation(user, finished=False)
    per_batch = len(_hub.agent_spans(1))
    bodies = list(
        _hub.export_bodies(
            evaluation.trace_id, _hub.iter_agent_spans(per_batch * exports), per_batch
        )
    )
    return str(evaluation.pk), bodies, per_batch


def live_latency(
    browser: Any,
    url: str,
    cookie: tuple[str, str],
    raw_token: str,
    live: tuple[str, list[bytes], int],
) -> list[float]:
    """Span-to-browser latency: a running evaluation's timeline open in a page, its exports
    (`live_exports`) posted to `/v1/traces` 300 ms apart, as an agent streams them; for each,
    the milliseconds from just before its POST to the first time the page's canvas counts its
    spans (the page draws right after it updates the count)."""
    import http.client
    from urllib.parse import urlsplit

    evaluation_id, bodies, per_batch = live
    exports = len(bodies)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": url}])
    context.add_init_script(LIVE_OBSERVER)
    page = context.new_page()
    page.goto(f"{url}/evaluations/{evaluation_id}/timeline/")
    page.wait_for_function("document.querySelector('#timeline').dataset.live === 'socket'")
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    sent: list[float] = []
    for body in bodies:
        sent.append(time.time() * 1000)
        connection.request(
            "POST",
            "/v1/traces",
            body,
            {"Authorization": f"Bearer {raw_token}", "Content-Type": CONTENT_TYPE},
        )
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            raise SystemExit(f"an export answered {answer.status}")
        time.sleep(0.3)
    expected = per_batch * exports
    page.wait_for_function(
        f"Number(document.querySelector('#timeline').dataset.total) >= {expected}",
        timeout=30_000,
    )
    totals: list[list[float]] = page.evaluate("window.__mlmsTotals")
    context.close()
    latencies = []
    for index, started in enumerate(sent):
        wanted = per_batch * (index + 1)
        seen = next(at for at, total in totals if total >= wanted)
        latencies.append(seen - started)
    return latencies


def _percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--spans",
        default="1000000,3000000",
        help="spans of the large traces, comma-separated",
    )
    parser.add_argument(
        "--live-exports",
        type=int,
        default=40,
        help="exports posted to a running evaluation's open timeline (0: none)",
    )
    parser.add_argument(
        "--baseline-spans", type=int, default=1_000, help="spans of the baseline trace"
    )
    parser.add_argument("--repeats", type=int, default=5, help="measured visits per trace")
    parser.add_argument(
        "--request-spans", type=int, default=512, help="spans per OTLP export when seeding"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--keep", action="store_true", help="keep the hub's temporary folder")
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        raise SystemExit(f"needs Chromium at {CHROMIUM} (apt-get install chromium)")

    folder = Path(tempfile.mkdtemp(prefix="mlms-first-paint-"))
    log(f"hub in {folder}; migrating")
    _hub.migrate(folder)
    _hub.use_hub_django(folder)
    user, raw_token = _hub.user_with_token("bench", ["write", "read"])
    from traces.models import Trace

    cases: dict[str, dict[str, Any]] = {}
    large = [int(text) for text in args.spans.split(",") if text.strip()]
    for label, spans in [("baseline", args.baseline_spans)] + [
        (f"{count:,} spans", count) for count in large
    ]:
        log(f"seeding the {label} trace: {spans:,} spans")
        evaluation_id, trace_id, seconds, finished = seed(
            user, raw_token, spans, args.request_spans
        )
        chunks = Trace.objects.get(trace_id=trace_id).chunk_count
        log(
            f"  built and ingested in {seconds:.1f} s ({spans / seconds:,.0f} spans/s), "
            f"{chunks} chunks; finished (compacted, aggregated) in {finished:.1f} s"
        )
        windows = zoomed_windows(trace_id)
        log("  windows of 10 %, 1 %, 0.1 %: " + ", ".join(f"{v:.0f} ms" for v in windows.values()))
        cases[label] = {
            "spans": spans,
            "chunks": chunks,
            "finish_s": finished,
            "windows_ms": windows,
            "path": f"/evaluations/{evaluation_id}/timeline/",
            "visits": [],
        }
    cookie = _hub.session_cookie(user)
    machine = _hub.machine()
    live = live_exports(user, args.live_exports) if args.live_exports else None

    from playwright.sync_api import sync_playwright

    with _hub.serve(folder) as url, sync_playwright() as playwright:
        log(f"daphne at {url}")
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        version = browser.version
        latencies = live_latency(browser, url, cookie, raw_token, live) if live else []
        if latencies:
            log(
                f"span to browser: p50 {_percentile(latencies, 0.5):.0f} ms, "
                f"p95 {_percentile(latencies, 0.95):.0f} ms over {len(latencies)} exports"
            )
        for label, case in cases.items():
            case["cold"] = visit(browser, url, cookie, case["path"])
            log(f"{label}, cold: first paint at {case['cold']['paint_ms']:.0f} ms")
        for repeat in range(args.repeats):
            order = list(cases) if repeat % 2 == 0 else list(reversed(cases))
            for label in order:
                result = visit(browser, url, cookie, cases[label]["path"])
                cases[label]["visits"].append(result)
                log(
                    f"{label}, visit {repeat + 1}: first paint at {result['paint_ms']:.0f} ms, "
                    f"{result['drawn']} drawn of {result['total']}, {result['bytes']} bytes"
                )
        browser.close()
    if not args.keep:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)

    for case in cases.values():
        visits = case["visits"]
        case["paint_ms"] = _summary([v["paint_ms"] for v in visits])
        case["response_end_ms"] = _summary([v["response_end_ms"] for v in visits])
        case["request_ms"] = _summary(
            [v["response_end_ms"] - v["request_start_ms"] for v in visits]
        )
        case["bytes"] = visits[0]["bytes"]
        case["drawn"] = visits[0]["drawn"]
        case["total"] = visits[0]["total"]
    base = cases["baseline"]["paint_ms"]["median"]
    ratios = {label: case["paint_ms"]["median"] / base for label, case in cases.items()}
    live = (
        {
            "exports": len(latencies),
            "p50_ms": _percentile(latencies, 0.5),
            "p95_ms": _percentile(latencies, 0.95),
            "max_ms": max(latencies),
        }
        if latencies
        else None
    )
    report = {
        "machine": machine,
        "chromium": version,
        "ratios": ratios,
        "cases": cases,
        "span_to_browser": live,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0

    def cell(summary: dict[str, float]) -> str:
        return f"{summary['median']:,.0f} ({summary['min']:,.0f}–{summary['max']:,.0f})"

    print(
        f"{machine}; Chromium {version}, headless, 1280×900; {args.repeats} visits per trace; "
        f"exports of {args.request_spans} spans\n"
    )
    print(
        "| trace | chunks | first paint ms, median (range) | first /timeline request ms "
        "| its response ends at ms | bytes of its body | spans drawn of total | first visit ms "
        "| finish s | window of 10 % / 1 % / 0.1 %, ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in cases.values():
        print(
            f"| {case['spans']:,} spans | {case['chunks']:,} | {cell(case['paint_ms'])} "
            f"| {cell(case['request_ms'])} | {cell(case['response_end_ms'])} "
            f"| {case['bytes']:,} | {case['drawn']:,} of {case['total']:,} "
            f"| {case['cold']['paint_ms']:,.0f} | {case['finish_s']:.1f} "
            f"| {' / '.join(f'{v:.0f}' for v in case['windows_ms'].values())} |"
        )
    print()
    for label, ratio in ratios.items():
        if label != "baseline":
            print(f"first paint of {label}, median / median of the baseline: {ratio:.1f}×")
    if live:
        print(
            f"span to browser over {live['exports']} exports: p50 {live['p50_ms']:.0f} ms, "
            f"p95 {live['p95_ms']:.0f} ms, max {live['max_ms']:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
