"""The ONNX Runtime predictor: `.onnx` files on the CPU provider or the CUDA provider.

Its layer outputs (`layer_outputs`) come from a session of their own on a copy of the graph in
which every node's output computed from the model's input is also a graph output, with the
timed session's providers and options (graph optimizations cannot fuse away a node whose output
is asked for, so the nodes are the graph's). Each is named by its node's module path where the
exporter wrote one (`predictors.frameworks.layer_outputs`).

A graph whose weights lie beside it (ONNX external data) comes with the manifest's
`weights_path`, the one file its tensors name. The agent's cache names files after their
content, not as the graph names them, so the session loads the graph from a temporary folder
of its own where the weights sit under the name the graph gives (`_Staged`: hard links where
it can, symbolic links or copies otherwise), removed at `close`.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from predictors.frameworks import cuda_index
from predictors.frameworks.layer_outputs import (
    MAX_CAPTURE_BYTES,
    LayerOutput,
    numbered,
    onnx_layer_name,
    size_refusal,
)
from predictors.frameworks.predictor import (
    Predictor,
    PredictorError,
    PredictorOptions,
    cuda_device,
    first_line,
)
from predictors.manifests import Manifest, graph_check
from predictors.manifests.formats import model_format
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
        # Layer outputs: how the timed session was made, and the capture session once made.
        self._options: PredictorOptions | None = None
        self._providers: list[Any] = []
        self._capture: _EveryNode | None = None
        # The graph beside its external data, where it has some.
        self._staged: _Staged | None = None

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
        fmt = model_format(manifest.data)
        if fmt != "onnx":
            raise PredictorError(f"onnxruntime reads model.format onnx only, not {fmt}")
        graph = options.graph_file
        if options.weights_file is not None:
            self._staged = _Staged(options.graph_file, options.weights_file)
            graph = self._staged.graph
        session_options = _session_options(options)
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
                str(graph), sess_options=session_options, providers=providers
            )
        except Exception as exc:  # onnxruntime raises its own, unexported exception types
            self.close()
            problem = first_line(exc)
            if options.weights_file is None:  # external data the manifest does not give?
                found = graph_check.external_data_problems(options.graph_file, None)
                problem = (
                    "; ".join(
                        f"{path}: {message}"
                        for path, message in found
                        if "external data" in message
                    )
                    or problem
                )
            raise PredictorError(
                f"onnxruntime cannot load {options.graph_file.name}: {problem}"
            ) from exc
        if options.device != "cpu" and session.get_providers()[0] != "CUDAExecutionProvider":
            self.close()
            # ONNX Runtime falls back to the CPU silently when the CUDA provider fails to start.
            raise PredictorError(
                f"onnxruntime could not start the CUDA provider for {options.device} "
                f"(the session runs on {', '.join(session.get_providers())})"
            )
        found = list(graph_check.problems(manifest.data, graph_check.session_signature(session)))
        if found:
            self.close()
            raise PredictorError(
                f"{manifest.name} {manifest.version}: the manifest does not fit its ONNX graph: "
                + "; ".join(f"{path}: {message}" for path, message in found)
            )
        self._session = session
        self._options = options
        self._providers = providers
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

    def layer_outputs(
        self, batch: np.ndarray, *, max_bytes: int = MAX_CAPTURE_BYTES
    ) -> list[LayerOutput]:
        assert self._options is not None, "load() first"
        if self._capture is None:
            self._capture = _EveryNode(self._options, self._providers, self._staged)
        return self._capture.run(self._input, batch, max_bytes)

    def signature(self) -> graph_check.Signature | None:
        """The session's inputs and outputs (`graph_check.session_signature`)."""
        assert self._session is not None, "load() first"
        return graph_check.session_signature(self._session)

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
        self._session = self._capture = None
        if self._profile_dir is not None:
            self._profile_dir.cleanup()
            self._profile_dir = None
        if self._staged is not None:
            self._staged.cleanup()
            self._staged = None


def _session_options(options: PredictorOptions) -> ort.SessionOptions:
    """The session options `options` ask for (profiling aside)."""
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3  # errors only: warnings would clutter stderr
    if options.threads is not None:
        session_options.intra_op_num_threads = options.threads
        session_options.inter_op_num_threads = 1
    session_options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if options.graph_optimization is not None:
        session_options.graph_optimization_level = _OPTIMIZATION_LEVELS[options.graph_optimization]
    return session_options


class _Staged:
    """An ONNX graph and its external-data file in a temporary folder, the weights under the
    name the graph's tensors give (`location`); PredictorError where the two do not fit
    (`graph_check.external_files_problems`)."""

    def __init__(self, graph_file: Path, weights_file: Path) -> None:
        where = f"onnxruntime cannot load {graph_file.name} with its external data"
        try:
            files = graph_check.external_data(graph_file)
        except graph_check.GraphError as error:
            raise PredictorError(f"onnxruntime cannot load {graph_file.name}: {error}") from None
        found = graph_check.external_files_problems(files, weights_file)
        if found:
            raise PredictorError(
                f"{where} {weights_file.name}: "
                + "; ".join(f"{path}: {message}" for path, message in found)
            )
        location = files[0].location
        try:  # beside the weights, on their file system, where hard links cost nothing
            self._folder = tempfile.TemporaryDirectory(
                prefix="mlms-onnx-", dir=weights_file.resolve().parent.parent
            )
        except OSError:  # a read-only folder (a container's files): the temporary folder
            self._folder = tempfile.TemporaryDirectory(prefix="mlms-onnx-")
        self.folder = Path(self._folder.name)
        # Names of its own for the graph (and the capture's graph), which no location takes.
        self.graph = self.folder / f"{_free_name(location)}.onnx"
        weights = self.folder / location
        weights.parent.mkdir(parents=True, exist_ok=True)
        _place(graph_file, self.graph)
        _place(weights_file, weights)

    def cleanup(self) -> None:
        self._folder.cleanup()


def _free_name(location: str) -> str:
    """A file name stem that neither `location` nor `<stem>.every-node.onnx` is."""
    stem = "graph"
    while location.startswith(stem):
        stem = f"_{stem}"
    return stem


def _place(source: Path, target: Path) -> None:
    """`source` at `target`: a hard link where the file system allows one, else a copy (not a
    symbolic link: ONNX Runtime resolves one and refuses external data outside the graph's
    folder)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


class _EveryNode:
    """A session on a copy of the graph whose outputs are every node's outputs computed from
    the model's inputs (nodes of constants only, such as the exporter's weight `Identity`s, are
    left out), in the graph's order. A graph with external data (`staged`) is written beside
    it, its weights read from there rather than copied into the session's graph."""

    def __init__(
        self, options: PredictorOptions, providers: list[Any], staged: _Staged | None = None
    ) -> None:
        import onnx

        if staged is not None:
            model = onnx.load(str(staged.graph), load_external_data=False)
        else:
            model = onnx.load(str(options.graph_file))
        graph = model.graph
        initializers = {tensor.name for tensor in graph.initializer}
        computed = {value.name for value in graph.input if value.name not in initializers}
        found: list[tuple[str, str, str, str]] = []  # (layer name, op type, node, output)
        for node in graph.node:
            if not any(name in computed for name in node.input):
                continue
            outputs = [name for name in node.output if name]
            computed.update(outputs)
            layer = onnx_layer_name(node.name, outputs[0] if outputs else "")
            for index, output in enumerate(outputs):
                name = layer if index == 0 else f"{layer}:{index}"
                found.append((name, node.op_type, node.name, output))
        self._sizes = _sizes(model, [output for *_, output in found])
        graph_outputs = {value.name for value in graph.output}
        for *_, output in found:
            if output not in graph_outputs:
                graph.output.append(onnx.ValueInfoProto(name=output))
        names = numbered(name for name, *_ in found)
        self._layers = [
            (name, op_type, node, output)
            for name, (_, op_type, node, output) in zip(names, found, strict=True)
        ]
        if staged is not None:
            capture = staged.graph.with_suffix(".every-node.onnx")
            onnx.save_model(model, str(capture))
        source = str(capture) if staged is not None else model.SerializeToString()
        try:
            self._session = ort.InferenceSession(
                source,
                sess_options=_session_options(options),
                providers=providers,
            )
        except Exception as exc:  # onnxruntime raises its own, unexported exception types
            raise PredictorError(
                f"onnxruntime cannot make a session that outputs every node of "
                f"{options.graph_file.name}: {first_line(exc)}"
            ) from exc

    def run(self, input_name: str, batch: np.ndarray, max_bytes: int) -> list[LayerOutput]:
        rows = len(batch) if batch.ndim else 1
        estimate = sum(size * (rows if per_row else 1) for size, per_row in self._sizes.values())
        if estimate > max_bytes:
            raise PredictorError(
                size_refusal(
                    "onnxruntime",
                    estimate,
                    max_bytes,
                    f"{len(self._sizes)} of {len(self._layers)} node outputs, sized by shape "
                    "inference before the run",
                    at_least=True,
                )
            )
        try:
            arrays = self._session.run([output for *_, output in self._layers], {input_name: batch})
        except Exception as exc:  # onnxruntime raises its own, unexported exception types
            raise PredictorError(
                f"onnxruntime failed to capture the layer outputs: {first_line(exc)}"
            ) from exc
        total = sum(int(np.asarray(array).nbytes) for array in arrays)
        if total > max_bytes:
            raise PredictorError(
                size_refusal(
                    "onnxruntime", total, max_bytes, f"{len(arrays)} node outputs", at_least=False
                )
            )
        return [
            LayerOutput(name, op_type, np.asarray(array), node)
            for (name, op_type, node, _), array in zip(self._layers, arrays, strict=True)
        ]


def _sizes(model: Any, outputs: list[str]) -> dict[str, tuple[int, bool]]:
    """The bytes of each output that shape inference can size, and whether per row of the
    batch (its first axis is the input's batch axis): a lower bound of a capture's size, an
    output it cannot size counting for nothing."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a model shape inference cannot read is sized after its run
        return {}
    graph = inferred.graph
    batch_axes = {
        value.type.tensor_type.shape.dim[0].dim_param
        for value in graph.input
        if value.type.tensor_type.shape.dim
    } - {""}
    types = {value.name: value.type for value in [*graph.value_info, *graph.output]}
    sizes: dict[str, tuple[int, bool]] = {}
    for output in outputs:
        kind = types.get(output)
        if kind is None or not kind.HasField("tensor_type") or not kind.tensor_type.elem_type:
            continue
        dims = list(kind.tensor_type.shape.dim)
        per_row = bool(dims) and dims[0].dim_param in batch_axes
        if per_row:
            dims = dims[1:]
        if not all(dim.HasField("dim_value") for dim in dims):
            continue
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(kind.tensor_type.elem_type).itemsize
        sizes[output] = (itemsize * int(np.prod([dim.dim_value for dim in dims])), per_row)
    return sizes


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
