"""The ONNX Runtime predictor: `.onnx` files on the CPU provider or the CUDA provider."""

from __future__ import annotations

import bisect
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from predictors.frameworks import cuda_index
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
    PredictorOptions,
    cuda_device,
)
from predictors.manifests import Manifest, graph_check
from predictors.protocol import Attr, at_least
from predictors.tasks import data_input_name, scored_output_name
from predictors.tracing import CLOCK_ORT_PROFILER, Layer

_OPTIMIZATION_LEVELS = {
    "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class OnnxRuntimePredictor(Predictor):
    framework = "onnxruntime"
    finest_trace_level = "ml_library"

    def __init__(self) -> None:
        self._session: ort.InferenceSession | None = None
        self._input = ""
        self._output = ""
        self._profile_dir: tempfile.TemporaryDirectory[str] | None = None
        self._optimization: str | None = None
        self._level = "none"

    @classmethod
    def check_device(cls, device: str) -> None:
        if cuda_device(cls.framework, device) is None:
            return
        providers = ort.get_available_providers()
        if "CUDAExecutionProvider" not in providers:
            raise PredictorError(
                f"onnxruntime {ort.__version__} cannot use {device}: it has no "
                f"CUDAExecutionProvider (it has {', '.join(providers)}); install onnxruntime-gpu"
            )

    @classmethod
    def software(cls) -> dict[str, Any]:
        return {"version": ort.__version__, "providers": ort.get_available_providers()}

    def load(self, manifest: Manifest, options: PredictorOptions) -> None:
        self.check_device(options.device)
        session_options = ort.SessionOptions()
        session_options.log_severity_level = 3  # errors only: warnings would clutter stderr
        if options.threads is not None:
            session_options.intra_op_num_threads = options.threads
            session_options.inter_op_num_threads = 1
        session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if options.graph_optimization is not None:
            session_options.graph_optimization_level = _OPTIMIZATION_LEVELS[
                options.graph_optimization
            ]
        self._optimization = options.graph_optimization
        self._level = options.trace_level
        if at_least(options.trace_level, "framework"):
            # ONNX Runtime's profiler times every node of every run; `take_layers` reads it.
            self._profile_dir = tempfile.TemporaryDirectory(prefix="mlms-ort-profile-")
            session_options.enable_profiling = True
            session_options.profile_file_prefix = os.path.join(self._profile_dir.name, "ort")
        if options.seed is not None:
            ort.set_seed(options.seed)
        providers: list[Any] = ["CPUExecutionProvider"]
        if options.device != "cpu":
            device_id = cuda_index(options.device)
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device_id}))
        try:
            session = ort.InferenceSession(
                str(options.graph_file), sess_options=session_options, providers=providers
            )
        except Exception as exc:  # onnxruntime raises its own, unexported exception types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PredictorError(
                f"onnxruntime cannot load {options.graph_file.name}: {first}"
            ) from exc
        if options.device != "cpu" and session.get_providers()[0] != "CUDAExecutionProvider":
            # ONNX Runtime falls back to the CPU silently when the CUDA provider fails to start.
            raise PredictorError(
                f"onnxruntime could not start the CUDA provider for {options.device} "
                f"(the session runs on {', '.join(session.get_providers())})"
            )
        found = list(graph_check.problems(manifest.data, graph_check.session_signature(session)))
        if found:
            raise PredictorError(
                f"{manifest.name} {manifest.version}: the manifest does not fit its ONNX graph: "
                + "; ".join(f"{path}: {message}" for path, message in found)
            )
        self._session = session
        # By the names the manifest declares (checked above to be the graph's).
        self._input = data_input_name(manifest.data)
        self._output = scored_output_name(manifest.data)
        self._threads = options.threads

    def expected_input(self) -> tuple[tuple[int | None, ...], str] | None:
        assert self._session is not None, "load() first"
        spec = next(i for i in self._session.get_inputs() if i.name == self._input)
        shape = tuple(d if isinstance(d, int) and d > 0 else None for d in spec.shape)
        return shape, graph_check.ORT_TYPES.get(spec.type, spec.type)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        assert self._session is not None, "load() first"
        return self._session.run([self._output], {self._input: batch})[0]

    def run(self, feeds: dict[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
        assert self._session is not None, "load() first"
        outputs: list[np.ndarray] = self._session.run(list(names), feeds)
        return outputs

    def take_layers(self) -> list[list[Layer]] | None:
        """The profiler's node events of every run, by run. Profiling ends here: runs after
        the first `take_layers` are not traced."""
        if self._profile_dir is None or self._session is None:
            return None
        path = Path(self._session.end_profiling())
        try:
            events = json.loads(path.read_text(encoding="utf-8"))
        finally:
            path.unlink(missing_ok=True)
        return _runs(events, kernels=at_least(self._level, "ml_library"))

    def settings(self) -> dict[str, Any]:
        assert self._session is not None, "load() first"
        return {
            "graph_optimization": self._optimization or "default (all)",
            "providers": self._session.get_providers(),
            # 0 is ONNX Runtime's default: one thread per physical core.
            "intra_op_threads": self._threads if self._threads is not None else 0,
            "inter_op_threads": 1 if self._threads is not None else 0,
            "execution_mode": "sequential",
        }

    def close(self) -> None:
        self._session = None
        if self._profile_dir is not None:
            self._profile_dir.cleanup()
            self._profile_dir = None


def _runs(events: list[dict[str, Any]], kernels: bool = False) -> list[list[Layer]]:
    """ONNX Runtime profile events (Chrome trace JSON, microseconds) as the layers of each run:
    the `Node` events (`<node>_kernel_time`) within each `model_run` event, in run order.

    With `kernels` (trace level ml_library), each node also gets its execution provider's
    kernel as a step nested in it: the profiler times one kernel run per node, so the two
    share their times, and the kernel carries how it ran — its provider, input shapes, the
    bytes of its parameters, activations and output, and the intra-op threads that worked on
    it (`mlms.threads`, with the calling thread's run and wait time in microseconds)."""
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
        key=lambda e: e["ts"],
    )
    starts = [int(e["ts"]) for e in runs]
    layers: list[list[Layer]] = [[] for _ in runs]
    suffix = "_kernel_time"
    nodes = sorted(
        (e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith(suffix)),
        key=lambda e: e["ts"],
    )
    for event in nodes:
        index = bisect.bisect_right(starts, int(event["ts"])) - 1
        if index < 0:
            continue
        args = event.get("args") or {}
        shapes = [list(s.values())[0] for s in args.get("output_type_shape") or [] if s]
        attributes: dict[str, Any] = {
            Attr.CLOCK: CLOCK_ORT_PROFILER,
            Attr.PROVIDER: args.get("provider", ""),
        }
        if shapes:
            attributes[Attr.OUTPUT_SHAPE] = shapes[0] if len(shapes) == 1 else shapes
        offset = (int(event["ts"]) - starts[index]) * 1000
        duration = int(event["dur"]) * 1000
        op_name = str(args.get("op_name", ""))
        layers[index].append(
            Layer(event["name"][: -len(suffix)], op_name, offset, duration, attributes)
        )
        if kernels:
            layers[index].append(
                Layer(
                    f"{op_name} ({str(args.get('provider', '')).removesuffix('ExecutionProvider')})",
                    op_name,
                    offset,
                    duration,
                    _kernel_attributes(args),
                    level="ml_library",
                    parent=len(layers[index]) - 1,
                )
            )
    return layers


def _kernel_attributes(args: dict[str, Any]) -> dict[str, Any]:
    """What ONNX Runtime's profiler says of how a node's kernel ran."""
    attributes: dict[str, Any] = {
        Attr.CLOCK: CLOCK_ORT_PROFILER,
        Attr.PROVIDER: args.get("provider", ""),
    }
    shapes = [list(s.values())[0] for s in args.get("input_type_shape") or [] if s]
    if shapes:
        attributes[Attr.INPUT_SHAPES] = shapes
    for key, name in (
        ("parameter_size", Attr.PARAMETER_BYTES),
        ("activation_size", Attr.ACTIVATION_BYTES),
        ("output_size", Attr.OUTPUT_BYTES),
    ):
        if str(args.get(key, "")).isdigit():
            attributes[name] = int(args[key])
    stats = args.get("thread_scheduling_stats") or {}
    main = stats.get("main_thread") or {}
    helpers = [t for t in (stats.get("sub_threads") or {}).values() if t.get("num_run")]
    if main:
        attributes[Attr.THREADS] = 1 + len(helpers)
        attributes[Attr.MAIN_THREAD_RUN_US] = main.get("Run", 0)
        attributes[Attr.MAIN_THREAD_WAIT_US] = main.get("Wait", 0)
    return attributes
