"""Trace levels on the zoo's real models, and the OpenTelemetry export of the spans."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors.evaluation import Evaluation
from predictors.protocol import at_least
from predictors.tracing import Span, Tracer
from predictors.tracing.chrome import chrome_trace, rows_of_spans
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.frameworks

# digits-cnn's TorchScript module: Conv2d ReLU Conv2d ReLU MaxPool2d Flatten Dropout Linear ReLU
# Dropout Linear.
TORCH_LAYERS = 11


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn",))


def batches_and_layers(evaluation: Evaluation) -> tuple[list[Span], dict[int, list[Span]]]:
    batches = [s for s in evaluation.spans if s.attributes["mlms.level"] == "model"]
    layers: dict[int, list[Span]] = {b.span_id: [] for b in batches}
    for span in evaluation.spans:
        if span.attributes["mlms.level"] == "framework":
            layers[span.parent_id].append(span)
    return batches, layers


def test_levels_are_ordered() -> None:
    assert at_least("framework", "model") and at_least("model", "model")
    assert not at_least("model", "framework") and not at_least("none", "application")


def test_pytorch_framework_level_has_one_span_per_layer_per_batch_nested_in_it(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(
        framework="pytorch", trace_level="framework", batch_sizes=(8,), limit=32
    )

    batches, layers = batches_and_layers(evaluation)
    assert len(batches) == 4
    # Stages: load, read and preprocess per batch, warm-up, predict, postprocess.
    stages = 1 + 2 * 4 + 3
    trace = dict(evaluation.result["trace"])
    overhead = trace.pop("overhead")
    assert trace == {
        "level": "framework",
        "spans": stages + 4 + 4 * TORCH_LAYERS,
        "levels": {"application": stages, "model": 4, "framework": 4 * TORCH_LAYERS},
        "layer_spans": 4 * TORCH_LAYERS,
    }
    # Calibrated against the model loaded again untraced: no span of it is in the trace.
    assert overhead["measured"] and overhead["level"] == "framework"
    for batch in batches:
        children = layers[batch.span_id]
        assert [s.attributes["mlms.layer_index"] for s in children] == list(range(TORCH_LAYERS))
        assert [s.attributes["mlms.op_type"] for s in children][:3] == [
            "Conv2d",
            "ReLU",
            "Conv2d",
        ]
        assert children[-1].attributes["mlms.output_shape"] == [8, 10]
        assert all(batch.start_ns <= s.start_ns <= s.end_ns <= batch.end_ns for s in children)
        assert all(a.end_ns <= b.start_ns for a, b in zip(children, children[1:], strict=False))
        assert "host wall clock" in children[0].attributes["mlms.clock"]
    # Running layer by layer gives the model's outputs.
    untraced = run_evaluation(framework="pytorch", trace_level="none", batch_sizes=(8,), limit=32)
    np.testing.assert_allclose(evaluation.outputs, untraced.outputs, atol=1e-5)
    # The Chrome trace holds the layer spans, on the framework level's thread.
    document = chrome_trace(rows_of_spans(evaluation.spans))
    events = [e for e in document["traceEvents"] if e["ph"] == "X"]
    assert len(events) == stages + 4 + 4 * TORCH_LAYERS
    assert {e["tid"] for e in events if e["cat"] == "framework"} == {3}


@pytest.mark.parametrize("optimization", ["none", "all"])
def test_onnxruntime_framework_level_spans_the_profiled_nodes(
    run_evaluation: RunEvaluation, optimization: str
) -> None:
    evaluation = run_evaluation(
        framework="onnxruntime",
        trace_level="framework",
        batch_sizes=(8,),
        limit=32,
        graph_optimization=optimization,
    )

    batches, layers = batches_and_layers(evaluation)
    assert len(batches) == 4
    ops = [[s.attributes["mlms.op_type"] for s in layers[b.span_id]] for b in batches]
    assert all(o == ops[0] for o in ops) and ops[0]
    if optimization == "none":  # the graph's own nodes: Conv Relu Conv Relu MaxPool … Gemm
        assert ops[0][:2] == ["Conv", "Relu"] and ops[0][-1] == "Gemm"
    else:  # fused: Conv+Relu is one node, Gemm+Relu another
        assert "FusedGemm" in ops[0] and "Relu" not in ops[0]
    for batch in batches:
        for span in layers[batch.span_id]:
            assert batch.start_ns <= span.start_ns <= span.end_ns <= batch.end_ns
            assert span.attributes["mlms.layer_name"] == span.name
            assert span.attributes["mlms.provider"] == "CPUExecutionProvider"
    assert evaluation.result["settings"]["graph_optimization"] == optimization


def test_model_level_has_stages_and_batch_spans_and_none_records_nothing(
    run_evaluation: RunEvaluation,
) -> None:
    for framework in ("pytorch", "onnxruntime"):
        model = run_evaluation(framework=framework, trace_level="model", batch_sizes=(8,), limit=32)
        assert {s.attributes["mlms.level"] for s in model.spans} == {"application", "model"}
        batches = [s for s in model.spans if s.attributes["mlms.level"] == "model"]
        (stage,) = [s for s in model.spans if s.name == "predict" and s not in batches]
        assert len(batches) == 4
        assert all(s.name == "predict" and s.parent_id == stage.span_id for s in batches)
        assert stage.start_ns <= batches[0].start_ns and batches[-1].end_ns <= stage.end_ns
        assert "layer_spans" not in model.result["trace"]
        none = run_evaluation(framework=framework, trace_level="none", batch_sizes=(8,), limit=32)
        assert none.spans == [] and none.result["trace"]["spans"] == 0


def test_application_level_records_the_pipeline_stages_only(run_evaluation: RunEvaluation) -> None:
    evaluation = run_evaluation(
        framework="onnxruntime", trace_level="application", batch_sizes=(8,), limit=32
    )
    names = [s.name for s in evaluation.spans]
    assert {s.attributes["mlms.level"] for s in evaluation.spans} == {"application"}
    assert names[0] == "load"
    assert names.count("read") == names.count("preprocess") == 4
    assert names[-3:] == ["warm-up", "predict", "postprocess"]
    assert all(s.parent_id == 0 and s.start_ns <= s.end_ns for s in evaluation.spans)
    # The stages follow one another in time.
    ordered = [s for s in evaluation.spans if s.name != "load"]
    assert all(a.start_ns <= b.start_ns for a, b in zip(ordered, ordered[1:], strict=False))


class _Collector(BaseHTTPRequestHandler):
    requests: list[tuple[str, dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        headers = {key.lower(): value for key, value in self.headers.items()}
        self.requests.append((self.path, headers, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    requests: list[tuple[str, dict[str, str], bytes]] = []
    handler = type("Handler", (_Collector,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def test_spans_are_exported_over_otlp_http_with_our_attributes(
    run_evaluation: RunEvaluation, collector: tuple[str, list[tuple[str, dict[str, str], bytes]]]
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    hub, requests = collector
    evaluation = run_evaluation(
        framework="pytorch", trace_level="framework", batch_sizes=(8,), limit=16
    )
    tracer = Tracer(hub=hub, token="secret-token")
    tracer.record(evaluation.spans, attributes={"model": "digits-cnn", "framework": "pytorch"})
    tracer.shutdown()  # flushes the batch processor

    assert requests and all(path == "/v1/traces" for path, _, _ in requests)
    assert requests[0][1]["authorization"] == "Bearer secret-token"
    spans = []
    for _, _, body in requests:
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                spans.extend(scope.spans)
    # The evaluation, its stages (load, 2 reads, 2 preprocesses, warm-up, predict,
    # postprocess), its batches and their layers.
    assert len(spans) == 1 + 8 + 2 + 2 * TORCH_LAYERS

    def attributes(span: Any) -> dict[str, Any]:
        values = {}
        for a in span.attributes:
            kind = a.value.WhichOneof("value")
            value = getattr(a.value, kind)
            if kind == "array_value":
                value = [getattr(v, v.WhichOneof("value")) for v in value.values]
            values[a.key] = value
        return values

    by_id = {span.span_id: span for span in spans}
    root = next(s for s in spans if s.name == "evaluation")
    assert len({s.trace_id for s in spans}) == 1
    layers = [s for s in spans if attributes(s).get("mlms.level") == "framework"]
    assert len(layers) == 2 * TORCH_LAYERS
    for layer in layers:
        batch = by_id[layer.parent_span_id]
        stage = by_id[batch.parent_span_id]
        assert batch.name == stage.name == "predict" and stage.parent_span_id == root.span_id
        assert batch.start_time_unix_nano <= layer.start_time_unix_nano
        assert layer.end_time_unix_nano <= batch.end_time_unix_nano
    first = attributes(layers[0])
    assert first["mlms.layer_name"] == "0 (Conv2d)" and first["mlms.module"] == "0"
    assert first["mlms.op_type"] == "Conv2d"
    assert first["mlms.layer_index"] == 0
    assert first["mlms.device"] == "cpu"
    assert "host wall clock" in first["mlms.clock"]
    assert first["mlms.output_shape"] == [8, 32, 8, 8]
    # An exporting tracer keeps no copy: the agent holds the spans once.
    assert list(tracer.finished()) == []


def test_mlms_evaluate_writes_the_layer_spans_to_the_trace_file(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from predictors.cli import main

    trace_file = tmp_path / "trace.json"
    status = main(
        [
            "evaluate", "digits-cnn",
            "--framework", "pytorch,onnxruntime",
            "--dataset", "digits:validation",
            "--batch-sizes", "8",
            "--limit", "32",
            "--threads", "1",
            "--trace-level", "framework",
            "--graph-optimization", "none",
            "--trace-file", str(trace_file),
            "--store", str(store),
            "--format", "json",
            "--no-progress",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0
    results = json.loads(out)["results"]
    assert results[0]["trace"]["layer_spans"] == 4 * TORCH_LAYERS
    events = [e for e in json.loads(trace_file.read_text())["traceEvents"] if e["ph"] == "X"]
    layers = [e for e in events if e["args"]["mlms.level"] == "framework"]
    assert {e["args"]["framework"] for e in layers} == {"pytorch", "onnxruntime"}
    assert sum(e["args"]["framework"] == "pytorch" for e in layers) == 4 * TORCH_LAYERS
    assert results[1]["trace"]["layer_spans"] == sum(
        e["args"]["framework"] == "onnxruntime" for e in layers
    )


def test_a_large_evaluation_loses_no_span_to_the_export_queue(
    collector: tuple[str, list[tuple[str, dict[str, str], bytes]]],
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from predictors.tracing import QUEUE_SPANS

    hub, requests = collector
    count = 3 * QUEUE_SPANS  # more than the batch processor's queue holds at once
    spans = [
        Span(f"s{i}", 1_000 + i, 2_000 + i, {"mlms.level": "ml_library"}, span_id=i + 1)
        for i in range(count)
    ]
    tracer = Tracer(hub=hub, token="t")
    tracer.record(spans, attributes={"model": "m"})
    tracer.shutdown()
    received = 0
    for _, _, body in requests:
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        received += sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
    assert received == count + 1  # and the root span
    assert tracer.export_failures == 0


def test_the_loop_applies_the_options_overrides_to_the_manifest(
    run_evaluation: RunEvaluation,
) -> None:
    """A hub job's `overrides` reach the loop by name and change the manifest that runs."""
    from predictors.manifests import ManifestError

    evaluation = run_evaluation(
        framework="onnxruntime",
        limit=8,
        batch_sizes=(8,),
        overrides=("outputs.0.parameters.top_k=1",),
    )

    assert all(len(p) == 1 for p in evaluation.predictions)
    assert evaluation.result["options"]["overrides"] == ["outputs.0.parameters.top_k=1"]
    with pytest.raises(ManifestError, match="top_k"):
        run_evaluation(
            framework="onnxruntime", limit=8, overrides=("outputs.0.parameters.top_k=none",)
        )


def test_layers_timed_by_the_predictor_reach_the_sink_at_the_end_of_each_batch_size(
    run_evaluation: RunEvaluation,
) -> None:
    """PyTorch times a Sequential's layers itself: each batch size's layer spans go to the sink
    when that batch size ends, before the next one's batches, not all at the end."""
    writes: list[list[Span]] = []

    class Recording:
        def write(self, spans: Any) -> None:
            writes.append(list(spans))

    run_evaluation(
        framework="pytorch",
        trace_level="framework",
        batch_sizes=(8, 16),
        limit=32,
        sink=Recording(),
    )

    def first_write(predicate: Any) -> int:
        return next(n for n, spans in enumerate(writes) if any(predicate(s) for s in spans))

    def level(span: Span) -> str:
        return str(span.attributes.get("mlms.level"))

    layers_of_8 = first_write(lambda s: level(s) == "framework" and s.attributes["batch_size"] == 8)
    batches_of_16 = first_write(lambda s: level(s) == "model" and s.attributes["batch_size"] == 16)
    assert layers_of_8 < batches_of_16
    every = [span for spans in writes for span in spans]
    assert sum(level(s) == "framework" for s in every) == (4 + 2) * TORCH_LAYERS
    ids = {s.span_id for s in every}
    assert all(s.parent_id in ids for s in every if level(s) == "framework")


def test_a_parent_written_after_its_children_keeps_them_nested() -> None:
    """A stage span ends after the batch spans streamed inside it: the tracer fixes the
    parent's ids when a child first names it, and the parent gets them when it comes."""
    tracer = Tracer(keep=True)
    tracer.start(attributes={"model": "m"}, start_ns=1_000)
    tracer.write([Span("predict", 1_100, 1_200, {"mlms.level": "model"}, span_id=2, parent_id=1)])
    tracer.write([Span("predict", 1_200, 1_300, {"mlms.level": "model"}, span_id=3, parent_id=1)])
    tracer.write([Span("stage", 1_050, 1_400, {"mlms.level": "application"}, span_id=1)])
    tracer.finish()

    spans = {span.name: span for span in tracer.finished() if span.name != "predict"}
    batches = [span for span in tracer.finished() if span.name == "predict"]
    stage, root = spans["stage"], spans["evaluation"]
    assert len(batches) == 2
    assert {b.parent.span_id for b in batches} == {stage.context.span_id}
    assert stage.parent.span_id == root.context.span_id
    assert len({b.context.span_id for b in batches} | {stage.context.span_id}) == 3
    assert {s.context.trace_id for s in tracer.finished()} == {root.context.trace_id}
