"""Publish a trace that `benchmarks/gpu.py` recorded (on a GPU machine) to a fresh hub, through
OTLP like an agent, check what the hub stored against the recording, and take screenshots of
its timeline page: the whole trace, and one batch zoomed in to its layers and kernels.

    .venv/bin/python benchmarks/trace_view.py TRACE.json.gz [--out docs/images] [--layer NAME]

The hub is the embedded default in a temporary folder (`benchmarks/_hub.py`); the spans go
through `predictors.tracing.Tracer` to `POST /v1/traces` with an agent-like user token, under
the trace id of a succeeded evaluation created for them. It prints the span and GPU-activity
counts the recording holds, the ones the hub's Chrome export returns, and torch.profiler's own
count from the recording's result; a mismatch exits 1.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import _hub  # noqa: E402

from predictors.protocol import Attr
from predictors.tracing import Span, Tracer  # noqa: E402

GPU = ("kernel", "memcpy", "memset")


def load(path: Path) -> tuple[dict[str, Any], list[Span]]:
    with gzip.open(path, "rt", encoding="utf-8") as file:
        document = json.load(file)
    spans = [
        Span(
            s["name"],
            int(s["start_ns"]),
            int(s["end_ns"]),
            s["attributes"],
            span_id=int(s["span_id"]),
            parent_id=int(s["parent_id"]),
        )
        for s in document["spans"]
    ]
    return document["result"], spans


def evaluation_for(user: Any, result: dict[str, Any]) -> Any:
    from django.utils import timezone

    from evaluations.models import Evaluation

    now = timezone.now()
    return Evaluation.objects.create(
        user=user,
        model_name=result["model"]["name"],
        model_version=result["model"]["version"],
        framework=result["framework"]["name"],
        dataset_name=result["dataset"]["name"],
        dataset_version=result["dataset"]["version"],
        split=result["dataset"]["split"],
        device="gpu" if str(result["device"]).startswith("cuda") else "cpu",
        request={
            "trace_level": result["options"]["trace_level"],
            "batch_sizes": result["options"]["batch_sizes"],
        },
        status=Evaluation.SUCCEEDED,
        started_at=now,
        finished_at=now,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    parser.add_argument("--name", default="resnet-50-h100", help="screenshot file name prefix")
    parser.add_argument("--layer", default="layer3.0.conv2", help="the layer to zoom into")
    args = parser.parse_args(argv)

    result, spans = load(args.trace)
    recorded_gpu = sum(1 for s in spans if s.attributes.get(Attr.OP_TYPE) in GPU)
    profiler = (result.get("trace") or {}).get("profiler") or {}
    with tempfile.TemporaryDirectory(prefix="mlms-trace-view-") as temporary:
        folder = Path(temporary)
        _hub.migrate(folder)
        _hub.use_hub_django(folder)
        user, token = _hub.user_with_token("gpu", ["read", "write"])
        evaluation = evaluation_for(user, result)
        cookie = _hub.session_cookie(user)
        with _hub.serve(folder) as url:
            tracer = Tracer(hub=url, token=token, service="mlms-agent")
            tracer.record(
                spans,
                attributes={
                    "model": result["model"]["name"],
                    "framework": result["framework"]["name"],
                    "device": result["device"],
                },
                trace_id=evaluation.trace_id,
            )
            tracer.shutdown()
            if tracer.export_failures:
                print(f"{tracer.export_failures} exports failed", file=sys.stderr)
                return 1
            request = urllib.request.Request(  # noqa: S310 - our own hub
                f"{url}/api/v1/traces/{evaluation.trace_id}?format=chrome",
                headers={"Authorization": f"Bearer {token}"},
            )
            with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
                chrome = json.load(response)
            complete = [e for e in chrome["traceEvents"] if e.get("ph") == "X"]
            stored_gpu = sum(1 for e in complete if e.get("args", {}).get(Attr.OP_TYPE) in GPU)
            counters = {e["name"] for e in chrome["traceEvents"] if e.get("ph") == "C"}
            samples = {(e["name"], e["ts"]) for e in chrome["traceEvents"] if e.get("ph") == "C"}
            figures = {
                "recorded_spans": len(spans),
                "recorded_counter_samples": sum(
                    1 for s in spans if s.attributes.get(Attr.OP_TYPE) == "counter"
                ),
                "hub_span_events": len(complete),
                "hub_counter_values": len(samples),
                "recorded_gpu_activities": recorded_gpu,
                "hub_gpu_activities": stored_gpu,
                "torch_profiler_gpu_activities": profiler.get("profiler_gpu_activities"),
                "hub_counter_tracks": sorted(counters),
            }
            print(json.dumps(figures, indent=2))
            if not (recorded_gpu == stored_gpu == profiler.get("profiler_gpu_activities")):
                print("the GPU activity counts differ", file=sys.stderr)
                return 1
            shoot(url, cookie, evaluation, spans, args)
    return 0


def shoot(url: str, cookie: tuple[str, str], evaluation: Any, spans: list[Span], args: Any) -> None:
    from playwright.sync_api import sync_playwright

    batches = [s for s in spans if s.attributes.get(Attr.LEVEL) == "model"]
    layer = next(
        s
        for s in spans
        if s.attributes.get(Attr.LEVEL) == "framework"
        and s.name == args.layer
        and s.parent_id == batches[1].span_id
    )
    args.out.mkdir(parents=True, exist_ok=True)
    page_url = f"{url}/evaluations/{evaluation.pk}/timeline/"
    views = {
        "timeline": page_url,
        "batch": f"{page_url}#window={batches[1].start_ns}-{batches[1].end_ns}",
        "layer": f"{page_url}#window={layer.start_ns - 20_000}-{layer.end_ns + 60_000}",
    }
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            for name, address in views.items():
                context = browser.new_context(viewport={"width": 1600, "height": 1000})
                context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": url}])
                page = context.new_page()
                page.goto(address)
                page.wait_for_function(
                    "() => { const c = document.querySelector('canvas');"
                    " return c && Number(c.dataset.drawn || 0) > 0"
                    " && (c.dataset.counters || '').length > 0; }",
                    timeout=60_000,
                )
                page.wait_for_timeout(1_500)  # the windowed fetch after the hash's zoom
                target = args.out / f"{args.name}-{name}.png"
                page.locator("canvas").first.screenshot(path=str(target))
                print(f"wrote {target}", file=sys.stderr)
                context.close()
        finally:
            browser.close()


if __name__ == "__main__":
    raise SystemExit(main())
