"""The trace levels below `framework`: PyTorch through torch.profiler (module hierarchy, aten
ops, CUDA kernels), hardware counters, and the conversion of torch.profiler's Chrome trace.

The GPU tests run wherever CUDA is; the conversion of a real GPU trace is tested everywhere,
from a trace recorded on an H100 (`tests/fixtures/traces/`)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from predictors.frameworks.torch_trace import steps_by_call
from predictors.tracing import Span
from predictors.tracing.counters import CounterSampler
from tests.helpers import has_cuda
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
GPU_TRACE = FIXTURES / "digits-cnn-h100-system_library.json.gz"


needs_cuda = pytest.mark.skipif(not has_cuda(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn", "resnet-18"))


@pytest.fixture
def evaluation_defaults(evaluation_defaults: dict[str, Any]) -> dict[str, Any]:
    """PyTorch, through torch.profiler, unless a test names another framework."""
    return {**evaluation_defaults, "framework": "pytorch"}


def by_level(spans: list[Span], level: str) -> list[Span]:
    return [s for s in spans if s.attributes.get("mlms.level") == level]


def children(spans: list[Span], parent: Span) -> list[Span]:
    return [s for s in spans if s.parent_id == parent.span_id]


# -- PyTorch through torch.profiler, on the CPU ---------------------------------------------------


@pytest.mark.frameworks
def test_a_non_sequential_model_gets_layer_spans_from_its_module_hierarchy(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation("resnet-18", trace_level="framework", batch_sizes=(2,), limit=4)
    batches = by_level(evaluation.spans, "model")
    assert len(batches) == 2
    first = [s.name for s in children(evaluation.spans, batches[0])]
    second = [s.name for s in children(evaluation.spans, batches[1])]
    assert first == second
    # ResNet-18's modules in the order its forward runs them; a BasicBlock's own ops (the
    # residual add) are a layer of the block.
    assert first[1:6] == ["conv1", "bn1", "relu", "maxpool", "layer1.0.conv1"]
    assert "layer1.0 (BasicBlock)" in first and "layer4.1.conv2" in first and first[-2] == "fc"
    assert first[0] == first[-1] == "(outside the model)"
    layers = children(evaluation.spans, batches[0])
    types = {s.name: s.attributes["mlms.op_type"] for s in layers}
    assert types["conv1"] == "Conv2d" and types["layer1.0 (BasicBlock)"] == "BasicBlock"
    assert types["fc"] == "Linear"
    assert [s.attributes["mlms.layer_index"] for s in layers] == list(range(len(layers)))
    assert all(batches[0].start_ns <= s.start_ns <= s.end_ns <= batches[0].end_ns for s in layers)
    assert "torch.profiler" in layers[1].attributes["mlms.clock"]
    assert not by_level(evaluation.spans, "ml_library")
    # The same outputs as untraced.
    untraced = run_evaluation("resnet-18", trace_level="none", batch_sizes=(2,), limit=4)
    np.testing.assert_allclose(evaluation.outputs, untraced.outputs, rtol=1e-4, atol=1e-4)


@pytest.mark.frameworks
def test_ml_library_nests_aten_ops_in_their_layers(run_evaluation: RunEvaluation) -> None:
    evaluation = run_evaluation("digits-cnn", trace_level="ml_library", batch_sizes=(8,), limit=16)
    spans = evaluation.spans
    batches = by_level(spans, "model")
    layers = by_level(spans, "framework")
    ops = by_level(spans, "ml_library")
    assert len(batches) == 2 and ops
    # digits-cnn is a Sequential: its layers are named by position and type, as at framework
    # level, their module path kept apart.
    names = [s.name for s in children(spans, batches[0])]
    assert names[1:4] == ["0 (Conv2d)", "1 (ReLU)", "2 (Conv2d)"]
    by_id = {s.span_id: s for s in spans}
    for op in ops:
        parent = by_id[op.parent_id]
        assert parent.attributes["mlms.level"] in ("framework", "ml_library")
        assert op.attributes["mlms.op_type"] == op.name and op.name.startswith("aten::")
        # An op carries its layer's index and name.
        layer = parent
        while layer.attributes["mlms.level"] != "framework":
            layer = by_id[layer.parent_id]
        assert op.attributes["mlms.layer_name"] == layer.name
        assert op.attributes["mlms.layer_index"] == layer.attributes["mlms.layer_index"]
        assert parent.start_ns <= op.start_ns and op.end_ns <= parent.end_ns + 1_000
    conv = next(s for s in layers if s.name == "0 (Conv2d)")
    assert conv.attributes["mlms.module"] == "0"
    assert {s.name for s in children(spans, conv)} & {"aten::_convolution", "aten::conv2d"}
    assert "mlms.shapes" not in ops[0].attributes
    summary = evaluation.result["trace"]
    assert summary["levels"]["ml_library"] == len(ops)
    assert summary["profiler"]["profiled_calls"] == 2
    assert "gpu_activity_spans" not in summary


@pytest.mark.frameworks
def test_full_records_op_input_shapes_and_warm_up_is_never_profiled(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(
        "digits-cnn", trace_level="full", batch_sizes=(8,), limit=16, warmup=3
    )
    ops = by_level(evaluation.spans, "ml_library")
    shaped = [s for s in ops if s.attributes.get("mlms.shapes")]
    assert shaped and [8, 1, 8, 8] in json.loads(json.dumps(shaped[0].attributes["mlms.shapes"]))
    assert evaluation.result["trace"]["profiler"]["profiled_calls"] == 2
    assert "no CUDA runtime calls" in " ".join(evaluation.result["notes"])


@pytest.mark.frameworks
def test_hardware_level_samples_host_counters(run_evaluation: RunEvaluation) -> None:
    evaluation = run_evaluation("resnet-18", trace_level="hardware", batch_sizes=(2,), limit=6)
    counters = by_level(evaluation.spans, "hardware")
    assert len(counters) >= 2
    for span in counters:
        assert span.name == "host" and span.attributes["mlms.op_type"] == "counter"
        assert 0.0 <= span.attributes["mlms.counter.cpu.util_pct"] <= 100.0
        assert span.attributes["mlms.counter.process.rss_mib"] > 50
        assert span.end_ns > span.start_ns and span.parent_id == 0
    starts = [s.start_ns for s in counters]
    assert starts == sorted(starts)
    # The samples cover the timed batches.
    batches = by_level(evaluation.spans, "model")
    assert starts[0] <= batches[0].start_ns and batches[-1].end_ns <= counters[-1].end_ns


def test_counter_sampler_refuses_a_bad_interval_and_a_second_start() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        CounterSampler("cpu", interval_s=0)
    sampler = CounterSampler("cpu", interval_s=0.005)
    sampler.start()
    with pytest.raises(RuntimeError, match="already running"):
        sampler.start()
    spans = sampler.stop()
    assert len(spans) >= 2 and sampler.stop() == []


def test_counter_sampler_on_a_gpu_without_nvml_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    sampler = CounterSampler("cuda:0", interval_s=0.005)
    sampler.start()
    spans = sampler.stop()
    assert {s.name for s in spans} == {"host"}
    assert any("NVML is not available" in note for note in sampler.notes)


# -- torch.profiler's trace of a GPU run, converted anywhere ------------------------------------


def _gpu_trace() -> dict[str, Any]:
    if not GPU_TRACE.is_file():
        pytest.fail(f"missing fixture {GPU_TRACE}")
    with gzip.open(GPU_TRACE, "rt", encoding="utf-8") as file:
        document: dict[str, Any] = json.load(file)
    return document


def test_kernels_of_a_recorded_gpu_trace_are_correlated_to_ops_and_layers() -> None:
    document = _gpu_trace()
    trace, calls = document["trace"], document["calls"]
    steps, counts = steps_by_call(trace, calls, "system_library", "cuda:0")
    raw = Counter(e.get("cat") for e in trace["traceEvents"] if e.get("ph") == "X")
    gpu_raw = raw["kernel"] + raw["gpu_memcpy"] + raw["gpu_memset"]
    assert gpu_raw > 0
    # Every GPU activity of the profiled calls is matched to the runtime call that launched it.
    assert counts["gpu_activities"] == gpu_raw
    assert counts["gpu_activities_matched"] + counts["gpu_activities_unmatched"] == gpu_raw
    assert counts["gpu_activities_matched"] == document["profiler_gpu_activities"]
    for call in steps.values():
        kernels = [s for s in call if s.op_type == "kernel"]
        copies = [s for s in call if s.op_type == "memcpy"]
        assert kernels and copies  # the input's copy to the device, the output's back
        for kernel in kernels:
            launch = call[kernel.parent]
            assert launch.level == "system_library" and launch.op_type == "cuda_runtime"
            assert kernel.attributes["mlms.launch"] == launch.name
            assert len(kernel.attributes["mlms.grid"]) == 3
            assert len(kernel.attributes["mlms.block"]) == 3
            assert kernel.attributes["mlms.device"].startswith("cuda:")
            # Up the chain: launch -> op -> layer.
            step = launch
            while step.level != "framework":
                step = call[step.parent]
            assert step.name != "(outside the model)"
        # The GPU runs a kernel after its launch.
        for kernel in kernels:
            assert kernel.offset_ns >= call[kernel.parent].offset_ns


def test_below_system_library_a_gpu_trace_gives_no_gpu_steps() -> None:
    document = _gpu_trace()
    steps, counts = steps_by_call(document["trace"], document["calls"], "ml_library")
    assert counts["gpu_activities_matched"] == 0
    for call in steps.values():
        assert {s.level for s in call} == {"framework", "ml_library"}


def test_a_trace_without_annotations_gives_no_steps() -> None:
    steps, counts = steps_by_call({"traceEvents": [{"ph": "X", "cat": "cpu_op"}]}, 3, "full")
    assert steps == {} and counts["calls"] == 0


# -- on a GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
def test_system_library_on_cuda_spans_every_gpu_activity_torch_profiler_counted(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(
        "resnet-18",
        trace_level="system_library",
        batch_sizes=(4,),
        limit=8,
        device="cuda",
    )
    summary = evaluation.result["trace"]
    spans = evaluation.spans
    gpu = [s for s in spans if s.attributes.get("mlms.op_type") in ("kernel", "memcpy", "memset")]
    assert gpu and summary["gpu_activity_spans"] == len(gpu)
    assert len(gpu) == summary["profiler"]["profiler_gpu_activities"]
    kernels = [s for s in gpu if s.attributes["mlms.op_type"] == "kernel"]
    assert all("mlms.layer_name" in s.attributes for s in kernels)
    assert {s.attributes["mlms.layer_name"] for s in kernels} >= {"conv1", "fc"}
    batches = {s.span_id: s for s in by_level(spans, "model")}
    by_id = {s.span_id: s for s in spans}
    for kernel in kernels:
        step = kernel
        while step.parent_id not in batches:
            step = by_id[step.parent_id]
        batch = batches[step.parent_id]
        assert batch.start_ns <= kernel.start_ns <= kernel.end_ns <= batch.end_ns


@pytest.mark.gpu
@needs_cuda
def test_hardware_level_on_cuda_samples_nvml_counters(run_evaluation: RunEvaluation) -> None:
    evaluation = run_evaluation(
        "resnet-18", trace_level="hardware", batch_sizes=(8,), limit=64, device="cuda"
    )
    nvml = [s for s in by_level(evaluation.spans, "hardware") if s.name.startswith("nvml")]
    assert nvml
    sample = nvml[-1].attributes
    assert sample["mlms.counter.gpu.power_w"] > 0
    assert sample["mlms.counter.gpu.mem_used_mib"] > 0
    assert 0 <= sample["mlms.counter.gpu.sm_util_pct"] <= 100
    assert sample["mlms.device"] == "cuda"


# -- ONNX Runtime and TensorFlow below framework --------------------------------------------------


@pytest.mark.frameworks
def test_onnxruntime_ml_library_nests_each_nodes_kernel_in_it(
    run_evaluation: RunEvaluation,
) -> None:
    evaluation = run_evaluation(
        "digits-cnn", "onnxruntime", trace_level="ml_library", batch_sizes=(8,), limit=16
    )
    spans = evaluation.spans
    by_id = {s.span_id: s for s in spans}
    nodes = by_level(spans, "framework")
    kernels = by_level(spans, "ml_library")
    assert len(kernels) == len(nodes) > 0
    for kernel in kernels:
        node = by_id[kernel.parent_id]
        assert node.attributes["mlms.level"] == "framework"
        assert (kernel.start_ns, kernel.end_ns) == (node.start_ns, node.end_ns)
        assert kernel.attributes["mlms.op_type"] == node.attributes["mlms.op_type"]
        assert kernel.name.endswith("(CPU)")
        assert kernel.attributes["mlms.layer_name"] == node.name
        # One intra-op thread: the profiler reports thread statistics only when a pool ran.
        assert kernel.attributes.get("mlms.threads", 1) == 1
    conv = next(k for k in kernels if k.attributes["mlms.op_type"] in ("Conv", "FusedConv"))
    assert conv.attributes["mlms.parameter_bytes"] > 0
    assert conv.attributes["mlms.input_shapes"][0][0] == 8  # the batch
    assert not any("traces down to" in note for note in evaluation.result["notes"])
