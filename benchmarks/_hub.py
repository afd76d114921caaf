"""Helpers of the tracing benchmarks (`ingest.py`, `first_paint.py`): a hub of their own, and OTLP
exports shaped like the ones the agents send.

A benchmark's hub (`tests.livehub`, the suite's live hub) lives in a fresh
temporary folder (`MLMS_VAR_DIR`: its SQLite database and artifact store, the embedded default
of `make run`, without the sweep), is migrated (a copy of a database `manage.py migrate` made
once per process: `LiveHub.migrate`), and is served by daphne
on a free port in a process of its own. The benchmark's own process points Django at the same
folder (`use_hub_django`), so that it can seed users, tokens and evaluations with the ORM and
call the hub's ingest path in-process, as the baselines do.
"""

from __future__ import annotations

import itertools
import os
import platform
import secrets
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from predictors.protocol import Attr

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.livehub import LiveHub  # noqa: E402

# The benchmarks' hub: the embedded default, without the sweep.
SETTINGS = {"EVALUATION_SWEEP_SECONDS": "0"}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> str:
    """One line about this machine, for the README."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        memory = f", {pages / 2**30:.1f} GiB"
    except (OSError, ValueError):
        pass
    cores = len(os.sched_getaffinity(0))
    return (
        f"{cpu}, {cores} usable cores, Linux {platform.release()}, "
        f"Python {platform.python_version()}{memory}, load average {os.getloadavg()[0]:.2f}"
    )


def migrate(folder: Path) -> None:
    """Migrate a fresh hub in `folder`."""
    LiveHub(folder, settings=SETTINGS).migrate()


def use_hub_django(folder: Path) -> None:
    """Configure Django in this process on the hub in `folder` (migrated first)."""
    LiveHub(folder, settings=SETTINGS).use_django()


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """daphne serving the hub in `folder` (as `make run` does); yields its base URL."""
    with LiveHub(folder, settings=SETTINGS) as hub:
        hub.start()
        yield hub.url


# --- seeding (after use_hub_django) -----------------------------------------------------------


def user_with_token(name: str, scopes: list[str]) -> tuple[Any, str]:
    """A new user and the raw value of a new API token of hers."""
    from django.contrib.auth import get_user_model

    from hub.models import ApiToken

    user = get_user_model().objects.create_user(name)
    _token, raw = ApiToken.issue(user, name="benchmark", scopes=scopes)
    return user, raw


def evaluation(user: Any, *, finished: bool, trace_level: str = "framework") -> Any:
    """An evaluation of `user` (resnet-18 on onnxruntime), running or succeeded, with a trace
    id of its own; no manifests, host or result: the trace pages and the ingest path need none."""
    from django.utils import timezone

    from evaluations.models import Evaluation

    now = timezone.now()
    return Evaluation.objects.create(
        user=user,
        model_name="resnet-18",
        model_version="1.0.0",
        framework="onnxruntime",
        dataset_name="shapes-color",
        dataset_version="1.0.0",
        split="validation",
        device="cpu",
        request={"trace_level": trace_level, "batch_sizes": [8]},
        status=Evaluation.SUCCEEDED if finished else Evaluation.RUNNING,
        started_at=now,
        finished_at=now if finished else None,
    )


def session_cookie(user: Any) -> tuple[str, str]:
    """(name, value) of a real session cookie of `user` (as tests/frontend signs in)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    return cookie.key, cookie.value


# --- OTLP exports as the agents send them -----------------------------------------------------

# A resnet-18-like graph as ONNX Runtime's profiler reports it: (layer name, op type, output
# shape at batch 8), with the ML-library kernels ("ops") that run inside the convolutions.
_RESNET: list[tuple[str, str, list[int]]] = [("conv1", "Conv", [8, 64, 112, 112])]
_RESNET += [("relu", "Relu", [8, 64, 112, 112]), ("maxpool", "MaxPool", [8, 64, 56, 56])]
for _stage, (_channels, _size) in enumerate(((64, 56), (128, 28), (256, 14), (512, 7)), 1):
    for _block in range(2):
        _prefix = f"layer{_stage}.{_block}"
        _shape = [8, _channels, _size, _size]
        _RESNET += [
            (f"{_prefix}.conv1", "Conv", _shape),
            (f"{_prefix}.relu", "Relu", _shape),
            (f"{_prefix}.conv2", "Conv", _shape),
            (f"{_prefix}.add", "Add", _shape),
            (f"{_prefix}.relu_1", "Relu", _shape),
        ]
_RESNET += [("avgpool", "GlobalAveragePool", [8, 512, 1, 1]), ("flatten", "Flatten", [8, 512])]
_RESNET += [("fc", "Gemm", [8, 1000])]
_KERNELS = {"Conv": ("MlasConvPrepare", "MlasGemm", "MlasActivation")}
CLOCK = (
    "onnxruntime profiler: node start offsets and durations within the run, placed at the "
    "start of their batch span"
)
# Spans of one batch: its `predict` span, its layers, and the kernels of its convolutions.
SPANS_PER_BATCH = 1 + len(_RESNET) + 3 * sum(1 for _n, op, _s in _RESNET if op == "Conv")


@dataclass(frozen=True)
class SpanSpec:
    name: str
    span_id: bytes
    parent_id: bytes
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


def iter_agent_spans(
    count: int, *, start_ns: int = 1_750_000_000_000_000_000
) -> Iterator[SpanSpec]:
    """`count` spans of an evaluation at trace level `ml_library`: an `evaluation` root span,
    then batch after batch a `predict` span (level `model`) with the resnet-18 layers nested in
    it (level `framework`, `mlms.layer_*`, `mlms.op_type`, `mlms.output_shape`, the profiler's
    clock), and in each convolution its kernels (level `ml_library`). Batches of 4 ms every
    5 ms; the stream is cut after `count` spans."""
    rng = secrets.SystemRandom()
    root_id = secrets.token_bytes(8)
    batches = max(1, -(-(count - 1) // SPANS_PER_BATCH))
    root = {
        Attr.EVALUATION: "00000000-0000-0000-0000-000000000000",
        Attr.ATTEMPT: 1,
        Attr.LEVEL: "application",
        "framework": "onnxruntime",
        "model": "resnet-18",
        "dataset": "shapes-color",
        "device": "cpu",
    }
    yield SpanSpec("evaluation", root_id, b"", start_ns, start_ns + batches * 5_000_000, root)
    made = 1
    layer_ns = 4_000_000 // len(_RESNET)
    for batch in range(batches):
        batch_start = start_ns + batch * 5_000_000
        batch_id = secrets.token_bytes(8)
        spans = [
            SpanSpec(
                "predict",
                batch_id,
                root_id,
                batch_start,
                batch_start + 4_000_000,
                {
                    "framework": "onnxruntime",
                    "model": "resnet-18",
                    "batch_size": 8,
                    "inputs": 8,
                    "repetition": 0,
                    "batch_index": batch,
                    Attr.LEVEL: "model",
                },
            )
        ]
        for index, (name, op_type, shape) in enumerate(_RESNET):
            start = batch_start + index * layer_ns
            duration = int(layer_ns * rng.uniform(0.6, 0.95))
            layer_id = secrets.token_bytes(8)
            spans.append(
                SpanSpec(
                    name,
                    layer_id,
                    batch_id,
                    start,
                    start + duration,
                    {
                        "framework": "onnxruntime",
                        "batch_size": 8,
                        "batch_index": batch,
                        Attr.LEVEL: "framework",
                        Attr.LAYER_INDEX: index,
                        Attr.LAYER_NAME: name,
                        Attr.OP_TYPE: op_type,
                        Attr.DEVICE: "cpu",
                        Attr.CLOCK: CLOCK,
                        Attr.PROVIDER: "CPUExecutionProvider",
                        Attr.OUTPUT_SHAPE: shape,
                    },
                )
            )
            kernels = _KERNELS.get(op_type, ())
            for k, kernel in enumerate(kernels):
                part = duration // len(kernels)
                spans.append(
                    SpanSpec(
                        kernel,
                        secrets.token_bytes(8),
                        layer_id,
                        start + k * part,
                        start + (k + 1) * part,
                        {
                            Attr.LEVEL: "ml_library",
                            Attr.OP_TYPE: kernel,
                            Attr.LAYER_NAME: name,
                            Attr.DEVICE: "cpu",
                        },
                    )
                )
        yield from spans[: count - made]
        made += len(spans)


def agent_spans(count: int) -> list[SpanSpec]:
    """`iter_agent_spans(count)` as a list."""
    return list(iter_agent_spans(count))


def _any_value(value: Any) -> Any:
    from opentelemetry.proto.common.v1 import common_pb2

    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    if isinstance(value, list):
        return common_pb2.AnyValue(
            array_value=common_pb2.ArrayValue(values=[_any_value(v) for v in value])
        )
    return common_pb2.AnyValue(string_value=str(value))


def _key_values(attributes: dict[str, Any]) -> list[Any]:
    from opentelemetry.proto.common.v1 import common_pb2

    return [common_pb2.KeyValue(key=k, value=_any_value(v)) for k, v in attributes.items()]


RESOURCE = {
    "service.name": "mlms-agent",
    "telemetry.sdk.language": "python",
    "telemetry.sdk.name": "opentelemetry",
    "telemetry.sdk.version": "1.38.0",
}


def export_bodies(trace_id: str, spans: Iterable[SpanSpec], per_request: int) -> Iterator[bytes]:
    """The spans as serialized OTLP ExportTraceServiceRequests of `per_request` spans each, as
    the SDK's OTLPSpanExporter sends them (one resource, one scope `mlms.predictors`)."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    trace = bytes.fromhex(trace_id)
    resource = resource_pb2.Resource(attributes=_key_values(RESOURCE))
    scope = common_pb2.InstrumentationScope(name=Attr.PREDICTORS)
    internal = trace_pb2.Span.SpanKind.SPAN_KIND_INTERNAL
    stream = iter(spans)
    while chunk := list(itertools.islice(stream, per_request)):
        message = trace_service_pb2.ExportTraceServiceRequest()
        resource_spans = message.resource_spans.add()
        resource_spans.resource.CopyFrom(resource)
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.CopyFrom(scope)
        for spec in chunk:
            span = scope_spans.spans.add()
            span.trace_id = trace
            span.span_id = spec.span_id
            if spec.parent_id:
                span.parent_span_id = spec.parent_id
            span.name = spec.name
            span.kind = internal
            span.start_time_unix_nano = spec.start_ns
            span.end_time_unix_nano = spec.end_ns
            span.attributes.extend(_key_values(spec.attributes))
            span.status.code = trace_pb2.Status.StatusCode.STATUS_CODE_UNSET
        yield message.SerializeToString()
