"""The TensorFlow predictor: Keras 3 model files (`.keras`) run as a `tf.function`, on the CPU or
a GPU.

The model call is traced once into a graph (`tf.function` with a batch-free input signature), so
a batch costs one graph execution, not a Python walk over the layers.

At trace level `ml_library` or finer the graph runs under TensorFlow's profiler, and each call's
layers and ops come from its trace (`predictors.frameworks.tf_trace`). At trace level
`framework`, a model whose layers form one chain (a `keras.Sequential`,
or a functional model that runs each layer once on the previous layer's output) runs instead
in one graph with a `tf.timestamp()` reading between layers (`take_layers`; clock
`CLOCK_TF_LAYERS`).

Its layer outputs (`layer_outputs`) come from a second Keras model on the same layers, whose
outputs are every layer's (a functional or Sequential model only: Keras records no layer
outputs of a subclassed model's Python `call`).

The manifest's `model.format` says what `graph_path` is: `keras` (the default) and `h5` load as
a Keras model, as above; `saved_model` (an archive of a SavedModel folder) and `tflite` load
through `predictors.frameworks.tf_formats`, and are fed and read by the names their signature
gives, which the manifest's inputs and outputs must be (checked at load). A SavedModel is traced
by the profiler too, at `framework` (one layer per name scope under the model's) and finer; a
TFLite interpreter records nothing inside a call, so it refuses trace levels finer than `model`.
Layer outputs are captured for Keras models only.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# TensorFlow logs informational lines to stderr when it starts unless told not to; they would
# bury the one-line messages of the command line. Keras must run on TensorFlow here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from predictors.frameworks import cuda_index  # noqa: E402
from predictors.frameworks.layer_outputs import (  # noqa: E402
    MAX_CAPTURE_BYTES,
    LayerOutput,
    numbered,
    size_refusal,
)
from predictors.frameworks.predictor import (  # noqa: E402
    LayerTimingPredictor,
    PredictorError,
    PredictorOptions,
    StateReset,
    cuda_device,
    first_line,
)
from predictors.frameworks.tf_formats import (  # noqa: E402
    SavedModelGraph,
    TFLiteGraph,
    format_hint,
    keras_signature,
    unpack_saved_model,
)
from predictors.frameworks.tf_trace import CALL_ANNOTATION  # noqa: E402
from predictors.frameworks.tf_trace import steps_by_call as tf_steps_by_call  # noqa: E402
from predictors.manifests import Manifest, graph_check  # noqa: E402
from predictors.manifests.formats import DEFAULT_SIGNATURE, FORMAT_NAMES, model_format  # noqa: E402
from predictors.protocol import Attr, at_least  # noqa: E402
from predictors.tasks import data_input_name, scored_output_name  # noqa: E402
from predictors.tracing import CLOCK_TF_LAYERS, Layer  # noqa: E402

# One traced layer of one call: (layer index, offset from the call's start, duration); a call's
# marks are kept with its batch size, and turned into `Layer`s after the timed loop.
_Mark = tuple[int, int, int]


def _apply_threads(threads: int) -> None:
    """Set TensorFlow's thread pools: `threads` intra-op, 1 inter-op.

    TensorFlow sizes its pools once per process, when it first runs something; after that they
    can only be read. A request that matches the pools already made is fine, any other is an
    error (the numbers would silently not apply).
    """
    threading = tf.config.threading
    try:
        threading.set_intra_op_parallelism_threads(threads)
        threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        current = (
            threading.get_intra_op_parallelism_threads(),
            threading.get_inter_op_parallelism_threads(),
        )
        if current != (threads, 1):
            raise PredictorError(
                "tensorflow has already set up its thread pools in this process "
                f"(intra-op {current[0] or 'default'}, inter-op {current[1] or 'default'}); "
                f"{threads} intra-op threads need a new process"
            ) from None


def thread_pools_problem(threads: int) -> str | None:
    """Why this process cannot run a model with `threads` intra-op threads (TensorFlow made its
    pools already, of other sizes), or None: then the pools are, or are now, of that size."""
    try:
        _apply_threads(threads)
    except PredictorError as error:
        return str(error)
    return None


class TensorFlowPredictor(LayerTimingPredictor):
    framework = "tensorflow"
    finest_trace_level = "ml_library"

    def __init__(self) -> None:
        super().__init__()
        self._model: keras.Model | None = None
        self._function: Any = None
        self._run: Any = None
        self._device = "/CPU:0"
        # Layer tracing (trace level framework): the model's chain of layers, each call's marks.
        self._layers: list[keras.layers.Layer] | None = None
        self._timed: Any = None
        self._calls: list[tuple[int, list[_Mark]]] = []
        # Profiler tracing (trace level ml_library and finer).
        self._profile_dir: tempfile.TemporaryDirectory[str] | None = None
        self._profiling = False
        self._stopped = False  # the profiler ran and was stopped: take_layers reads its trace
        # Layer outputs: a model whose outputs are every layer's, once `layer_outputs` made it.
        self._capture: tuple[Any, list[tuple[str, str]]] | None = None
        # The file's format; a SavedModel or TFLite model (None for a Keras model), the folder
        # a SavedModel archive was unpacked into, and the input and output `predict` uses.
        self._format = "keras"
        self._graph: SavedModelGraph | TFLiteGraph | None = None
        self._unpacked: tempfile.TemporaryDirectory[str] | None = None
        self._framework_only = False  # the profiler's layers without their ops (level framework)
        self._input = self._output = ""
        self._declared_type: str | None = None
        self._keras_output = 0
        self._keras_inputs: list[str] = []

    @classmethod
    def check_device(cls, device: str) -> None:
        index = cuda_device(cls.framework, device)
        if index is None:
            return
        gpus = tf.config.list_physical_devices("GPU")
        if index >= len(gpus):
            if tf.sysconfig.get_build_info().get("is_cuda_build"):
                why = f"it sees {len(gpus)} GPU(s)"
            else:
                why = "this build has no CUDA support (install tensorflow[and-cuda])"
            raise PredictorError(f"tensorflow {tf.__version__} cannot use {device}: {why}")

    @classmethod
    def software(cls) -> dict[str, Any]:
        build = tf.sysconfig.get_build_info()
        return {
            "version": tf.__version__,
            "keras": keras.__version__,
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
        }

    def load(self, manifest: Manifest, options: PredictorOptions) -> None:
        self.check_device(options.device)
        if keras.backend.backend() != "tensorflow":
            raise PredictorError(
                f"keras runs on {keras.backend.backend()} in this process (KERAS_BACKEND); the "
                "tensorflow predictor needs KERAS_BACKEND=tensorflow"
            )
        # A Keras file runs without a manifest too (tests of the model alone): its first input
        # and output are the ones fed and read.
        data: dict[str, Any] = manifest.data if manifest is not None else {}
        self._format = model_format(data) if manifest is not None else "keras"
        if self._format not in ("keras", "h5", "saved_model", "tflite"):
            raise PredictorError(
                f"tensorflow reads model.format keras, h5, saved_model or tflite, not "
                f"{self._format!r}"
            )
        if self._format == "tflite" and at_least(options.trace_level, "framework"):
            raise PredictorError(
                f"trace level {options.trace_level}: TensorFlow's TFLite interpreter records "
                "nothing inside a call (model.format tflite); ask for trace level model or coarser"
            )
        if self._format == "tflite" and options.device != "cpu":
            raise PredictorError(
                f"tensorflow runs a TFLite model (model.format tflite) on the CPU only, not on "
                f"{options.device}"
            )
        if options.threads is not None:
            _apply_threads(options.threads)
        if options.seed is not None:
            keras.utils.set_random_seed(options.seed)
        self._device = "/CPU:0" if options.device == "cpu" else f"/GPU:{cuda_index(options.device)}"
        self._input = data_input_name(data) if data.get("inputs") else ""
        self._output = scored_output_name(data) if data.get("outputs") else ""
        declared: dict[str, Any] = next(
            (i for i in data.get("inputs") or [] if i.get("name") == self._input), {}
        )
        self._declared_type = (declared.get("parameters") or {}).get("element_type")
        self._layers = None
        self._calls = []
        if self._format in ("keras", "h5"):
            self._load_keras(options)
        else:
            self._load_graph(manifest, options)
        if at_least(options.trace_level, "ml_library") or (
            self._graph is not None and at_least(options.trace_level, "framework")
        ):
            # TensorFlow's profiler times every op the graph runs; `take_layers` reads it.
            self._profile_dir = tempfile.TemporaryDirectory(prefix="mlms-tf-profile-")
            self._framework_only = not at_least(options.trace_level, "ml_library")
            self._call_count = 0
            self._run = self._run_profiled

    def _cannot_load(self, path: Path, problem: str) -> PredictorError:
        return PredictorError(
            f"tensorflow cannot load {path.name} as {FORMAT_NAMES[self._format]}: {problem}"
        )

    def _load_keras(self, options: PredictorOptions) -> None:
        """A Keras 3 file or a Keras HDF5 file, its call traced into one graph."""
        path = options.graph_file
        hint = format_hint(path, self._format)
        if hint:
            raise self._cannot_load(path, hint)
        # Keras tells its formats apart by the file name's ending; a fetched file may lack it.
        suffix = ".keras" if self._format == "keras" else ".h5"
        with tempfile.TemporaryDirectory(prefix="mlms-keras-") as directory:
            named = path
            if path.suffix != suffix and not (self._format == "h5" and path.suffix == ".hdf5"):
                named = Path(directory) / f"model{suffix}"
                named.symlink_to(path.resolve())
            try:
                with tf.device(self._device):
                    model = keras.saving.load_model(named, compile=False, safe_mode=True)
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise self._cannot_load(path, first_line(exc)) from exc
        self._model = model
        self._keras_inputs = [tensor.name for tensor in model.inputs]
        names = list(getattr(model, "output_names", []) or [])
        self._keras_output = names.index(self._output) if self._output in names else 0
        specs = [tf.TensorSpec((None, *t.shape[1:]), dtype=t.dtype) for t in model.inputs]

        def call(inputs: Any) -> Any:
            with tf.device(self._device):
                return model(inputs, training=False)

        # One input: the function takes the batch; several: a list of them, in the model's order.
        signature = specs if len(specs) == 1 else [specs]
        self._function = tf.function(call, input_signature=signature, jit_compile=False)
        self._run = self._function
        if at_least(options.trace_level, "framework") and len(specs) == 1:
            self._layers = _chain(model)
            if self._layers is not None:
                self._timed = _timed_chain(self._layers, specs[0])
                self._run = self._run_layers

    def _load_graph(self, manifest: Manifest, options: PredictorOptions) -> None:
        """A SavedModel archive or a TFLite file, whose inputs and outputs must be the
        manifest's, by name."""
        path = options.graph_file
        graph: SavedModelGraph | TFLiteGraph
        try:
            if self._format == "tflite":
                hint = format_hint(path, "tflite")
                if hint:
                    raise ValueError(hint)
                graph = TFLiteGraph(path, options.threads)
            else:
                self._unpacked = tempfile.TemporaryDirectory(prefix="mlms-saved-model-")
                directory = unpack_saved_model(path, Path(self._unpacked.name))
                files = manifest.data.get("model") or {}
                graph = SavedModelGraph(
                    directory, files.get("signature") or DEFAULT_SIGNATURE, self._device
                )
        except ValueError as exc:
            self.close()
            raise self._cannot_load(path, str(exc)) from exc
        found = list(graph_check.problems(manifest.data, graph.signature))
        if found:
            self.close()
            raise PredictorError(
                f"{manifest.name} {manifest.version}: the manifest does not fit its model "
                f"({path.name}, {FORMAT_NAMES[self._format]}): "
                + "; ".join(f"{field}: {message}" for field, message in found)
            )
        self._graph = graph
        self._function = self._run = graph.call

    def start_tracing(self) -> None:
        if self._profile_dir is None or self._profiling:
            return
        self.synchronize()
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=1
        )
        tf.profiler.experimental.start(self._profile_dir.name, options=options)
        self._profiling = True

    def _run_profiled(self, inputs: Any) -> Any:
        """The model's graph, each call annotated for the profiler once it runs."""
        index = self._call_count
        self._call_count += 1
        if not self._profiling:  # before the loop started tracing: a warm-up call
            return self._function(inputs)
        with tf.profiler.experimental.Trace(CALL_ANNOTATION, call=index):
            return self._function(inputs)

    def expected_input(self) -> tuple[tuple[int | None, ...], str] | None:
        if isinstance(self._graph, TFLiteGraph):
            return self._graph.expected(self._input, self._declared_type)
        if isinstance(self._graph, SavedModelGraph):
            return self._graph.expected(self._input)
        assert self._model is not None, "load() first"
        if len(self._model.inputs) != 1:
            return None
        spec = self._model.inputs[0]
        return tuple(spec.shape), str(spec.dtype)

    def signature(self) -> graph_check.Signature | None:
        if self._graph is not None:
            return self._graph.signature
        assert self._model is not None, "load() first"
        return keras_signature(self._model)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        run = self._run
        assert run is not None, "load() first"
        if self._graph is not None:
            return np.asarray(run({self._input: batch})[self._output])
        if len(self._keras_inputs) != 1:
            raise PredictorError(
                f"the Keras model takes {len(self._keras_inputs)} inputs "
                f"({', '.join(self._keras_inputs)}); it runs through run(), fed each by name"
            )
        outputs = run(batch)
        if isinstance(outputs, tuple | list):
            outputs = outputs[self._keras_output]
        elif isinstance(outputs, dict):
            outputs = next(iter(outputs.values()))
        return np.asarray(outputs)

    def run(self, feeds: dict[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
        """Every input by the manifest's names: a SavedModel signature's or a TFLite model's
        input names, or a Keras model's `keras.Input` names (a model of one input takes its one
        feed whatever its name); the outputs `names`: the signature's or the TFLite model's
        output names, or the names of the layers that make a Keras model's outputs (a model of
        one output gives it for one name, whatever it is)."""
        run = self._run
        assert run is not None, "load() first"
        if self._graph is not None:
            self._graph.check_outputs(names)
            outputs = run(feeds)
            return [np.asarray(outputs[name]) for name in names]
        assert self._model is not None
        if len(self._keras_inputs) == 1 and len(feeds) == 1:
            result = run(next(iter(feeds.values())))
        else:
            missing = [name for name in self._keras_inputs if name not in feeds]
            if missing or len(feeds) != len(self._keras_inputs):
                raise PredictorError(
                    f"the Keras model takes the inputs {', '.join(self._keras_inputs)}; fed "
                    f"{', '.join(feeds) or 'none'}"
                )
            result = run([feeds[name] for name in self._keras_inputs])
        arrays = list(result) if isinstance(result, list | tuple) else [result]
        known = list(getattr(self._model, "output_names", []) or [])
        if len(arrays) == 1 and len(names) == 1:
            return [np.asarray(arrays[0])]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise PredictorError(
                f"the Keras model has no output {', '.join(repr(n) for n in unknown)} (its "
                f"outputs, by the layers that make them: {', '.join(known)})"
            )
        return [np.asarray(arrays[known.index(name)]) for name in names]

    def layer_outputs(
        self, batch: np.ndarray, *, max_bytes: int = MAX_CAPTURE_BYTES
    ) -> list[LayerOutput]:
        """Every layer's output, from a second Keras model on the same layers whose outputs are
        theirs (`_every_layer`)."""
        if self._graph is not None:
            raise PredictorError(
                f"tensorflow captures layer outputs of Keras models only (model.format keras or "
                f"h5), not of {FORMAT_NAMES[self._format]} (model.format {self._format})"
            )
        assert self._model is not None, "load() first"
        if self._capture is None:
            self._capture = _every_layer(self._model)
        model, layers = self._capture
        # Sized before the run by the outputs' shapes (a free axis other than the batch's
        # counts for nothing there), and after it exactly.
        rows = len(batch)
        shapes = [tuple(output.shape[1:]) for output in model.outputs]
        estimate = sum(
            rows * int(np.prod([d or 0 for d in shape])) * np.dtype(output.dtype).itemsize
            for shape, output in zip(shapes, model.outputs, strict=True)
        )
        unsized = any(None in shape for shape in shapes)
        if estimate > max_bytes:
            raise PredictorError(
                size_refusal(
                    "tensorflow",
                    estimate,
                    max_bytes,
                    f"{len(layers)} layer outputs",
                    at_least=unsized,
                )
            )
        with tf.device(self._device):
            arrays = model(tf.convert_to_tensor(batch), training=False)
        if not isinstance(arrays, list | tuple):
            arrays = [arrays]
        arrays = [np.asarray(array) for array in arrays]
        total = sum(array.nbytes for array in arrays)
        if total > max_bytes:
            raise PredictorError(
                size_refusal(
                    "tensorflow", total, max_bytes, f"{len(layers)} layer outputs", at_least=False
                )
            )
        return [
            LayerOutput(name, op_type, array)
            for (name, op_type), array in zip(layers, arrays, strict=True)
        ]

    def _run_layers(self, batch: np.ndarray) -> tf.Tensor:
        """The model's layers in one graph, timed between layers (trace level framework).

        The graph (`_timed_chain`) calls each Keras layer (training=False) on the previous
        one's output, as the model's own call does, and reads `tf.timestamp()` before the first
        layer and after each one, each reading ordered after the layer's output and before the
        next layer by control dependencies. The outputs are the model's; the layer boundaries
        are kept, so TensorFlow optimizes within layers but not across them
        (`CLOCK_TF_LAYERS`)."""
        assert self._layers is not None and self._timed is not None
        called = time.time_ns()
        with tf.device(self._device):
            outputs, stamps = self._timed(batch)
        times = (stamps.numpy() * 1e9).astype(np.int64)
        marks = [
            (index, int(times[index] - called), int(times[index + 1] - times[index]))
            for index in range(len(self._layers))
        ]
        self._calls.append((len(batch), marks))
        return outputs

    def profiles_layers(self) -> bool:
        # Otherwise the layers are timed in the model's graph (TensorFlow's profiler stops once).
        return self._profile_dir is not None

    def timed_layers(
        self, layers: list[keras.layers.Layer], calls: list[tuple[int, list[_Mark]]]
    ) -> list[list[Layer]]:
        shapes = [_output_shape(layer) for layer in layers]
        return [
            [
                Layer(
                    layers[index].name,
                    type(layers[index]).__name__,
                    max(offset, 0),
                    max(duration, 0),
                    {
                        Attr.OUTPUT_SHAPE: [size, *shapes[index]],
                        Attr.CLOCK: CLOCK_TF_LAYERS,
                    },
                )
                for index, offset, duration in marks
            ]
            for size, marks in calls
        ]

    def stop_tracing(self) -> None:
        if self._profiling:
            self.synchronize()
            tf.profiler.experimental.stop()
            self._profiling = False
            self._stopped = True

    def _take_profiled(self) -> list[list[Layer]]:
        """Stop the profiler; each call's layers and ops from its XSpace (warm-up: none)."""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        assert self._profile_dir is not None
        calls = self._call_count
        self.stop_tracing()
        if not self._stopped:
            return [[] for _ in range(calls)]
        self._stopped = False
        files = sorted(Path(self._profile_dir.name).rglob("*.xplane.pb"))
        if not files:
            raise PredictorError("the TensorFlow profiler wrote no trace (*.xplane.pb)")
        space = xplane_pb2.XSpace()
        space.ParseFromString(files[-1].read_bytes())
        if isinstance(self._graph, SavedModelGraph):
            # A SavedModel keeps no layer objects: its layers are its graph's name scopes.
            types = dict.fromkeys(self._graph.scopes(), "name scope")
        else:
            assert self._model is not None
            types = {layer.name: type(layer).__name__ for layer in self._model.layers}
        steps, counts = tf_steps_by_call(space, calls, list(types), types)
        self._summary = {"profiler": "tensorflow profiler (XPlane)", **counts}
        self._call_count = 0
        if self._framework_only:  # level framework: the layers, not the ops inside them
            steps = {
                index: [step for step in found if step.level == "framework"]
                for index, found in steps.items()
            }
        return [steps.get(index, []) for index in range(calls)]

    def state_reset(self) -> StateReset | None:
        """Keras's own: the `reset_state()` of every stateful layer (a recurrent layer made with
        `stateful=True` carries its state from one call to the next). None for a SavedModel or
        a TFLite model, which offer none."""
        if self._graph is not None:
            return None
        assert self._model is not None, "load() first"
        layers = [layer for layer in _all_layers(self._model) if getattr(layer, "stateful", False)]
        layers = [layer for layer in layers if callable(getattr(layer, "reset_state", None))]
        if not layers:
            return None

        def reset() -> None:
            for layer in layers:
                layer.reset_state()

        names = ", ".join(layer.name for layer in layers)
        return StateReset(f"reset_state() of the Keras model's stateful layers ({names})", reset)

    def synchronize(self) -> None:
        if self._device != "/CPU:0":
            tf.test.experimental.sync_devices()

    def settings(self) -> dict[str, Any]:
        threading = tf.config.threading
        return {
            # 0 is TensorFlow's default: one thread per core.
            "intra_op_threads": threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": threading.get_inter_op_parallelism_threads(),
            "device": self._device,
            "format": self._format,
            **(self._graph.settings() if self._graph is not None else {}),
        }

    def close(self) -> None:
        if self._profiling:
            tf.profiler.experimental.stop()
            self._profiling = False
        if self._profile_dir is not None:
            self._profile_dir.cleanup()
            self._profile_dir = None
        self._model = self._graph = None
        self._function = self._run = self._layers = None
        self._timed = self._capture = None
        self._calls = []
        if self._unpacked is not None:
            self._unpacked.cleanup()
            self._unpacked = None
        keras.backend.clear_session()


def _all_layers(model: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The layers of a Keras model, those of its nested models included."""
    found: list[keras.layers.Layer] = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        found.extend(_all_layers(layer))
    return found


def _every_layer(model: keras.Model) -> tuple[keras.Model, list[tuple[str, str]]]:
    """A Keras model on `model`'s input whose outputs are the output of each of its layers, in
    the order of its layers (a nested model counts as one layer), and each output's (layer
    name, layer class); a layer with several outputs gives each, the second `name:1`, and a
    layer the model calls more than once the output of its first call. Keras records the
    outputs of a functional model's layers (a `Sequential` is one); a subclassed model's `call`
    is Python, whose layer outputs Keras does not record: refused."""
    if not isinstance(model, keras.src.models.functional.Functional) or not model.inputs:
        raise PredictorError(
            f"the Keras model {model.name!r} ({type(model).__name__}) is no built functional or "
            "Sequential model: Keras records the layer outputs of those only (a subclassed "
            "model's call is Python)"
        )
    outputs: list[Any] = []
    layers: list[tuple[str, str]] = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        try:
            output = layer.output
        except (AttributeError, ValueError) as exc:  # a layer Keras never called
            raise PredictorError(
                f"the Keras layer {layer.name!r} has no output to capture: {exc}"
            ) from exc
        found = list(output) if isinstance(output, list | tuple) else [output]
        for index, tensor in enumerate(found):
            outputs.append(tensor)
            layers.append(
                (layer.name if index == 0 else f"{layer.name}:{index}", type(layer).__name__)
            )
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    names = numbered(name for name, _ in layers)
    capture = keras.Model(inputs, outputs, name=f"{model.name}_layer_outputs")
    return capture, [(name, op_type) for name, (_, op_type) in zip(names, layers, strict=True)]


def _timed_chain(layers: list[keras.layers.Layer], signature: tf.TensorSpec) -> Any:
    """One graph running `layers` in turn, returning (the last output, the `tf.timestamp()`
    readings in seconds: one before the first layer, one after each)."""

    def call(inputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        stamp = tf.timestamp()
        stamps = [stamp]
        with tf.control_dependencies([stamp]):
            outputs = tf.identity(inputs)
        for layer in layers:
            outputs = layer(outputs, training=False)
            with tf.control_dependencies([outputs]):
                stamp = tf.timestamp()
            stamps.append(stamp)
            with tf.control_dependencies([stamp]):
                outputs = tf.identity(outputs)
        return outputs, tf.stack(stamps)

    return tf.function(call, input_signature=[signature], jit_compile=False)


def _output_shape(layer: keras.layers.Layer) -> list[int]:
    """A layer's output shape past the batch axis (-1 where Keras does not know it)."""
    try:
        shape = tuple(layer.output.shape)[1:]
    except (AttributeError, ValueError):
        return []
    return [-1 if d is None else int(d) for d in shape]


def _chain(model: keras.Model) -> list[keras.layers.Layer] | None:
    """The layers of a model that is one chain of layers, in the order its call runs them
    (`InputLayer`s left out): a `keras.Sequential`'s layers, or a functional model's when each
    runs once, on the previous layer's output alone (the first on the model's one input) with
    no other argument, and the last one's output is the model's one output. None for any other
    model (branches, shared layers, bare operations between layers, several inputs or outputs,
    subclassed models), which cannot be run layer by layer from its layer list."""
    if isinstance(model, keras.Sequential):
        layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
        return layers or None
    if not isinstance(model, keras.src.models.functional.Functional):
        return None
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        return None
    layers = []
    previous = model.inputs[0]
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        nodes = layer._inbound_nodes
        if len(nodes) != 1:
            return None
        arguments = nodes[0].arguments
        if (
            len(arguments.args) != 1
            or arguments.args[0] is not previous
            or arguments.kwargs
            or len(nodes[0].outputs) != 1
        ):
            return None
        previous = nodes[0].outputs[0]
        layers.append(layer)
    if not layers or previous is not model.outputs[0]:
        return None
    return layers
