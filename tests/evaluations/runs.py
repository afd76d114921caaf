"""Runs with traces of known durations, for the tests of the diff of traces: a small model's
spans (stages, batches, layers, ops in them, kernels in the ops, a counter sample) made run by
run with a known jitter, and ingested through the OTLP receiver as an evaluation's trace."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from evaluations.models import Evaluation
from tests.traces.factories import export, post

SEP = " › "


@dataclass(frozen=True)
class Op:
    name: str
    ns: int
    kernels: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Layer:
    name: str
    op_type: str
    ns: int
    ops: tuple[Op, ...] = field(default=())


# A small model: two layers with the same op (`MatMul`) in each, kernels in the ops.
MODEL = (
    Layer("conv1", "Conv", 400_000, (Op("MatMul", 300_000, (("gemm_kernel", 250_000),)),)),
    Layer("relu1", "Relu", 50_000),
    Layer("fc", "Gemm", 200_000, (Op("MatMul", 150_000, (("gemm_kernel", 120_000),)),)),
)


def spans_of(
    layers: tuple[Layer, ...], run: int, batches: int = 8, scale: dict[str, float] | None = None
) -> list[tuple[Any, ...]]:
    """One run's spans at batch size 1: per batch a `preprocess` stage, a batch span, and in it
    the layers, their ops and the ops' kernels, one after another. Durations are the model's
    times the run's and batch's jitter (1.00 to 1.04, the same for every side's run `run`) and
    `scale` (by layer name, or an op's key `layer › op`); a counter sample per run."""
    scale = scale or {}
    ids = itertools.count(1)

    def new() -> str:
        return f"{next(ids):016x}"

    spans: list[tuple[Any, ...]] = []
    offset = 0
    for batch in range(batches):
        jitter = 1 + 0.01 * ((run * 7 + batch * 3) % 5)
        spans.append(
            ("preprocess", offset, int(100_000 * jitter), {**_level("application"), "mlms.op_type": "stage", "batch_size": 1})
        )  # fmt: skip
        offset += 200_000
        batch_id, start, children = new(), offset, []
        for index, layer in enumerate(layers):
            factor = jitter * scale.get(layer.name, 1.0)
            layer_id, duration = new(), int(layer.ns * factor)
            children.append(
                (layer.name, offset, duration, {**_level("framework"), "mlms.op_type": layer.op_type,
                 "mlms.layer_index": index, "mlms.layer_name": layer.name}, layer_id, batch_id)
            )  # fmt: skip
            at = offset
            for op in layer.ops:
                op_factor = factor * scale.get(f"{layer.name}{SEP}{op.name}", 1.0)
                op_id, op_duration = new(), int(op.ns * op_factor)
                children.append(
                    (op.name, at, op_duration, {**_level("ml_library"), "mlms.op_type": op.name,
                     "mlms.layer_name": layer.name}, op_id, layer_id)
                )  # fmt: skip
                for kernel, kernel_ns in op.kernels:
                    children.append(
                        (kernel, at, int(kernel_ns * op_factor), {**_level("system_library"),
                         "mlms.op_type": "kernel", "mlms.layer_name": layer.name}, new(), op_id)
                    )  # fmt: skip
                at += op_duration
            offset += duration
        spans.append(
            ("predict", start, offset - start, {**_level("model"), "batch_size": 1}, batch_id)
        )
        spans += children
        offset += 50_000
    counter = {
        **_level("hardware"),
        "mlms.op_type": "counter",
        "mlms.counter.cpu.utilization_pct": 50,
    }
    spans.append(("host", 0, 10_000_000, counter))
    return spans


def _level(level: str) -> dict[str, str]:
    return {"mlms.level": level}


def evaluation(
    user: Any, framework: str = "onnxruntime", status: str = Evaluation.SUCCEEDED
) -> Evaluation:
    """An evaluation of `user`'s (succeeded unless told) with no spans yet (model `m` on
    `d`)."""
    return Evaluation.objects.create(
        user=user, model_name="m", model_version="1.0.0", framework=framework,
        dataset_name="d", dataset_version="1.0.0", split="validation", device="cpu",
        request={"trace_level": "system_library"}, status=status,
    )  # fmt: skip


def ingest_run(
    client: Any, spans: list[tuple[Any, ...]], owner: Any, framework: str = "onnxruntime"
) -> Evaluation:
    """A succeeded evaluation of `owner`'s whose trace holds `spans`, posted to the OTLP
    receiver with `client` (a client of `owner`'s token)."""
    made = evaluation(owner, framework, status=Evaluation.RUNNING)
    for part in range(0, len(spans), 200):
        response = post(client, export(made.trace_id, *spans[part : part + 200]))
        assert response.status_code == 200, response.content
    # Finished once its spans are in (an export into a finished evaluation's trace finishes
    # the trace again in the background).
    Evaluation.objects.filter(pk=made.pk).update(status=Evaluation.SUCCEEDED)
    made.status = Evaluation.SUCCEEDED
    return made
