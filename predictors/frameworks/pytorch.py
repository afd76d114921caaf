"""The PyTorch predictor, on the CPU or a CUDA device: TorchScript files (`torch.jit.load`),
torch.export programs and state dicts with their module's source, as the manifest's
`model.format` says (`predictors.frameworks.torch_formats`).

Tracing (`PredictorOptions.trace_level`), two ways:

- at `framework`, a model whose module is a `Sequential` (TorchScript or a state dict's) runs
  layer by layer, each layer timed with perf_counter (`_run_layers`): cheap, and enough for a
  chain of layers;
- any other model at `framework`, and every model at `ml_library` or finer, runs under
  torch.profiler (Kineto) with its module hierarchy recorded, each call wrapped in a
  `record_function` annotation; at `system_library` or finer with CUDA activities (CUPTI) too
  on a GPU, and at `full` with input shapes. `take_layers` cuts the profiler's trace into each
  call's layers, ops, runtime calls and GPU kernels (`predictors.frameworks.torch_trace`).
  Kineto records the hierarchy of TorchScript modules itself; other modules annotate each of
  their module calls (`ModuleAnnotations`, `annotate_hierarchy`), a torch.export program
  unflattened into its modules for it (`torch_formats.unflattened`).

Its layer outputs (`layer_outputs`) come from a second copy of the TorchScript module whose
graphs record every module's output (`predictors.frameworks.torch_capture`), or from forward
hooks on a copy of any other module (`torch_formats.ModuleCapture`).
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from predictors.frameworks.layer_outputs import MAX_CAPTURE_BYTES, LayerOutput
from predictors.frameworks.predictor import (
    LayerTimingPredictor,
    PredictorError,
    PredictorOptions,
    StateReset,
    cuda_device,
)
from predictors.frameworks.torch_capture import TorchCapture
from predictors.frameworks.torch_formats import (
    ModuleCapture,
    error_line,
    load_program,
    load_state_dict_module,
    misread,
    module_type,
    program_input,
    program_signature,
    unflattened,
)
from predictors.frameworks.torch_trace import CALL_PREFIX, call_name, module_label, steps_by_call
from predictors.manifests import Manifest
from predictors.manifests.formats import FORMATS, model_format
from predictors.manifests.graph_check import Signature
from predictors.protocol import Attr, at_least
from predictors.tasks import data_input_name
from predictors.tracing import CLOCK_TORCH_LAYERS, Layer

# Where to keep a copy of torch.profiler's own Chrome trace of each profiled evaluation.
KEEP_TRACE_VARIABLE = "MLMS_TORCH_TRACE_DIR"

# The methods of a module that reset a state it keeps inside itself (buffers or attributes its
# `forward` updates), in the order they are looked for, taking no argument: in TorchScript
# exported with `@torch.jit.export` (Silero VAD's TorchScript model has `reset_states`).
RESET_METHODS = ("reset_state", "reset_states", "reset")

# The prefix of the profiler annotation around each module call (`ModuleAnnotations`), and
# the categories of Kineto's events that take a module hierarchy.
MODULE_ANNOTATION = "mlms.module#"
_HOST_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")

# One traced layer of one call: (layer index, offset from the call's start, duration, output
# shape); turned into `Layer`s after the timed loop, by `take_layers`.
_Mark = tuple[int, int, int, tuple[int, ...]]


class PyTorchPredictor(LayerTimingPredictor):
    framework = "pytorch"
    finest_trace_level = "system_library"

    def __init__(self) -> None:
        super().__init__()
        self._model: torch.nn.Module | None = None
        self._format = "torchscript"
        # The module as messages name it, and a torch.export model's program.
        self._what = "the TorchScript module"
        self._program: torch.export.ExportedProgram | None = None
        self._data_index = 0
        self._input_names: list[str] = []
        self._output_names: list[str] = []
        self._run: Callable[[torch.Tensor], Any] | None = None
        self._device = torch.device("cpu")
        self._on_host = True
        # Layer tracing (trace level framework): the model's layers, and each call's marks.
        self._layers: list[tuple[str, str, torch.nn.Module]] | None = None
        self._calls: list[list[_Mark]] = []
        # Profiler tracing: the level, and the profiler once started.
        self._profile_level: str | None = None
        self._profiler: Any = None
        self._stopped: Any = None  # the profiler after stop_tracing, for take_layers
        # A module that is no TorchScript annotates its module calls for the profiler.
        self._annotations: ModuleAnnotations | None = None
        # Layer outputs: the model's file, and its capturing copy once `layer_outputs` made it.
        self._graph_file: Path | None = None
        self._capture: TorchCapture | ModuleCapture | None = None

    @classmethod
    def check_device(cls, device: str) -> None:
        index = cuda_device(cls.framework, device)
        if index is None:
            return
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else "no CUDA device found"
            raise PredictorError(
                f"pytorch cannot use {device}: torch.cuda.is_available() is false "
                f"(torch {torch.__version__}, {build})"
            )
        if index >= torch.cuda.device_count():
            raise PredictorError(
                f"pytorch cannot use {device}: there are {torch.cuda.device_count()} CUDA devices"
            )

    @classmethod
    def software(cls) -> dict[str, Any]:
        cuda = torch.cuda.is_available()
        return {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "mkldnn": torch.backends.mkldnn.is_available(),
        }

    def load(self, manifest: Manifest, options: PredictorOptions) -> None:
        self.check_device(options.device)
        if options.threads is not None:
            torch.set_num_threads(options.threads)
            try:
                torch.set_num_interop_threads(1)
            except RuntimeError:
                pass  # settable once per process only; TorchScript inference does not use it
        if options.seed is not None:
            torch.manual_seed(options.seed)
        self._device = torch.device(options.device)
        self._on_host = self._device.type == "cpu"
        self._format = model_format(manifest.data)
        files = manifest.data.get("model") or {}
        if self._format == "torchscript":
            model: torch.nn.Module = _load_torchscript(options.graph_file, self._device)
        elif self._format == "torch_export":
            self._program = load_program(options.graph_file, self._device)
            self._what = "the torch.export program"
            model = self._program.module()
        elif self._format == "state_dict":
            entry = str(files.get("entry") or "")
            model = load_state_dict_module(
                options.graph_file,
                options.weights_file,
                entry,
                self._device,
                state_key=files.get("state_key") or None,
            )
            self._what = f"the module {entry}()"
        else:
            raise PredictorError(
                f"pytorch cannot read model.format {self._format}; it reads "
                + ", ".join(FORMATS["pytorch"])
            )
        # No parameter needs a gradient, so no call builds an autograd graph, whichever thread
        # makes it; the loop's runs also hold torch.inference_mode() (`inference_context`),
        # which skips autograd's dispatch altogether. Entering it on every call instead costs a
        # small TorchScript model about a tenth of its latency.
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        if self._program is None:  # a program runs as exported: its module has no eval()
            model.eval()
        self._model = model
        self._run = self._model
        self._graph_file = options.graph_file
        # `run` calls the module with the inputs in the manifest's order and reads its outputs
        # (a tensor, or a tuple or list of them) in the manifest's order.
        self._input_names = [str(entry["name"]) for entry in manifest.data["inputs"]]
        self._output_names = [str(entry["name"]) for entry in manifest.data["outputs"]]
        data = data_input_name(manifest.data)
        self._data_index = self._input_names.index(data) if data in self._input_names else 0
        if at_least(options.trace_level, "ml_library"):
            self._profile(options)
        elif at_least(options.trace_level, "framework"):
            self._layers = _sequential_layers(self._model)
            if self._layers is not None:
                self._run = self._run_layers
            else:
                self._profile(options)

    def _profile(self, options: PredictorOptions) -> None:
        """Trace through torch.profiler: every call annotated once the loop has started
        tracing (`start_tracing`, after the warm-up); a module that is no TorchScript runs
        with its module calls annotated too (a program unflattened into its modules)."""
        self._profile_level = options.trace_level
        if self._format != "torchscript":
            assert self._model is not None
            traced = self._model if self._program is None else unflattened(self._program)
            self._annotations = ModuleAnnotations(traced)
            self._run = traced
        # The whole call is annotated, copies to and from the device included.
        self.predict = self._predict_profiled  # type: ignore[method-assign]

    def start_tracing(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        level = self._profile_level
        if level is None or self._profiler is not None:
            return
        self.synchronize()
        if self._annotations is not None:
            self._annotations.install()
        activities = [ProfilerActivity.CPU]
        if self._device.type == "cuda" and at_least(level, "system_library"):
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(
            activities=activities,
            record_shapes=at_least(level, "full"),
            with_modules=True,
        )
        with _quiet_stderr():
            self._profiler.start()

    def _predict_profiled(self, batch: np.ndarray) -> np.ndarray:
        """`predict` under the profiler, annotated with the call's index (`call_name`)."""
        from torch.profiler import record_function

        index = self._call_count
        self._call_count += 1
        if self._profiler is None:  # before the loop started tracing: a warm-up call
            return PyTorchPredictor.predict(self, batch)
        with record_function(call_name(index)):
            return PyTorchPredictor.predict(self, batch)

    def inference_context(self) -> AbstractContextManager[object]:
        return torch.inference_mode()

    def predict(self, batch: np.ndarray) -> np.ndarray:
        # The hot path of every timed batch: a small model runs in about 100 µs on a CPU, so
        # each attribute lookup and check here shows in its latency.
        run = self._run
        assert run is not None, "load() first"
        if self._on_host:
            outputs = run(torch.from_numpy(batch))
        else:
            outputs = run(torch.from_numpy(batch).to(self._device))
        if not isinstance(outputs, torch.Tensor):
            outputs = _first(outputs)
        return outputs.numpy() if self._on_host else outputs.cpu().numpy()

    def predict_feeds(self, feeds: dict[str, np.ndarray], output: str) -> np.ndarray:
        """The module called with every input in the manifest's order; its first output, as
        `predict` reads a one-input module's (a module may return more than the manifest
        declares)."""
        model = self._model
        assert model is not None, "load() first"
        device = self._device
        outputs = model(*(torch.from_numpy(feeds[name]).to(device) for name in self._input_names))
        if not isinstance(outputs, torch.Tensor):
            outputs = _first(outputs)
        return outputs.detach().cpu().numpy()

    def run(self, feeds: dict[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
        model = self._model
        assert model is not None, "load() first"
        device = self._device
        outputs = model(*(torch.from_numpy(feeds[name]).to(device) for name in self._input_names))
        if isinstance(outputs, dict) and set(outputs) == set(self._output_names):
            outputs = tuple(outputs[name] for name in self._output_names)  # by name
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        if not isinstance(outputs, tuple | list) or not all(
            isinstance(output, torch.Tensor) for output in outputs
        ):
            raise PredictorError(
                f"{self._what} returned {type(outputs).__name__}; the loop reads a tensor, a "
                "tuple of tensors in the order of the manifest's outputs, or a dict of them by "
                "the manifest's output names"
            )
        if len(outputs) != len(self._output_names):
            raise PredictorError(
                f"{self._what} returned {len(outputs)} outputs; the manifest declares "
                f"{len(self._output_names)} ({', '.join(self._output_names)})"
            )
        by_name = dict(zip(self._output_names, outputs, strict=True))
        return [by_name[name].detach().cpu().numpy() for name in names]

    def layer_outputs(
        self, batch: np.ndarray, *, max_bytes: int = MAX_CAPTURE_BYTES
    ) -> list[LayerOutput]:
        """Every module's output, from a rewritten copy of the TorchScript module
        (`predictors.frameworks.torch_capture`), or from hooks on a copy of any other module
        (a program unflattened into its modules)."""
        assert self._graph_file is not None and self._model is not None, "load() first"
        if self._capture is None:
            if self._format == "torchscript":
                self._capture = TorchCapture(self._graph_file, self._device)
            elif self._program is not None:
                self._capture = ModuleCapture(unflattened(self._program), self._device)
            else:
                self._capture = ModuleCapture(copy.deepcopy(self._model), self._device)
        return self._capture.run(batch, max_bytes)

    def signature(self) -> Signature | None:
        """A torch.export program's inputs and outputs (`torch_formats.program_signature`);
        None for TorchScript and state dicts, whose files do not record them."""
        return program_signature(self._program) if self._program is not None else None

    def expected_input(self) -> tuple[tuple[int | None, ...], str] | None:
        if self._program is None:
            return None
        return program_input(self._program, self._data_index)

    def _run_layers(self, inputs: torch.Tensor) -> torch.Tensor:
        """The model run layer by layer, each layer timed (trace level framework).

        TorchScript modules take no forward hooks (`register_forward_pre_hook is not supported
        on ScriptModules`), so a model whose module is a `Sequential` is run as its `forward`
        runs it: each (compiled) layer in turn on the previous one's output. The outputs are
        the same; the optimizations TorchScript makes across layers are not."""
        assert self._layers is not None
        perf = time.perf_counter_ns
        marks: list[_Mark] = []
        outputs = inputs
        start = previous = perf()
        for index, (_, _, layer) in enumerate(self._layers):
            outputs = layer(outputs)
            now = perf()
            marks.append((index, previous - start, now - previous, tuple(outputs.shape)))
            previous = now
        self._calls.append(marks)
        return outputs

    def profiles_layers(self) -> bool:
        # Otherwise a Sequential is timed layer by layer (torch.profiler stops once).
        return self._profile_level is not None

    def timed_layers(
        self, layers: list[tuple[str, str, torch.nn.Module]], calls: list[list[_Mark]]
    ) -> list[list[Layer]]:
        return [
            [
                Layer(
                    module_label(layers[index][0], layers[index][1]),
                    layers[index][1],
                    offset,
                    duration,
                    {
                        Attr.OUTPUT_SHAPE: list(shape),
                        Attr.CLOCK: CLOCK_TORCH_LAYERS,
                        Attr.MODULE: layers[index][0],
                    },
                )
                for index, offset, duration, shape in marks
            ]
            for marks in calls
        ]

    def stop_tracing(self) -> None:
        if self._profiler is not None:
            self.synchronize()
            profiler, self._profiler = self._profiler, None
            with _quiet_stderr():
                profiler.stop()
            self._stopped = profiler
        if self._annotations is not None:
            self._annotations.remove()

    def _take_profiled(self) -> list[list[Layer]]:
        """Stop the profiler; each call's steps from its trace (warm-up calls: none)."""
        from torch.autograd import DeviceType

        calls = self._call_count
        level = self._profile_level
        assert level is not None
        self.stop_tracing()
        profiler, self._stopped = self._stopped, None
        if profiler is None:
            return [[] for _ in range(calls)]
        handle, path = tempfile.mkstemp(prefix="mlms-torch-trace-", suffix=".json")
        os.close(handle)
        try:
            profiler.export_chrome_trace(path)
            with open(path, encoding="utf-8") as file:
                trace = json.load(file)
            if self._annotations is not None:
                annotate_hierarchy(trace)
            keep = os.environ.get(KEEP_TRACE_VARIABLE)
            if keep:  # torch.profiler's own trace, for Perfetto or TensorBoard
                os.makedirs(keep, exist_ok=True)
                stamp = time.strftime("%Y%m%dT%H%M%S")
                shutil.copyfile(path, os.path.join(keep, f"torch-{stamp}-{os.getpid()}.json"))
        finally:
            os.unlink(path)
        steps, counts = steps_by_call(trace, calls, level, str(self._device))
        # torch.profiler's own count of the GPU activities it recorded (its FunctionEvent
        # parse, not ours), to check ours (`gpu_activities_matched`) against: both cover every
        # profiled call, later batch sizes' warm-up calls included, whose spans the loop
        # drops. Its device events also hold each call's annotation projected onto the GPU
        # timeline, which is no activity.
        device_events = [e for e in profiler.events() if e.device_type == DeviceType.CUDA]
        annotations = [
            e
            for e in device_events
            if getattr(e, "is_user_annotation", False) or e.name.startswith(CALL_PREFIX)
        ]
        self._summary = {
            "profiler": "torch.profiler",
            "profiled_calls": counts["calls"],
            "profiler_gpu_activities": len(device_events) - len(annotations),
            "profiler_gpu_annotations": len(annotations),
            **counts,
        }
        self._call_count = 0
        return [steps.get(index, []) for index in range(calls)]

    def state_reset(self) -> StateReset | None:
        model = self._model
        assert model is not None, "load() first"
        for name in RESET_METHODS:
            method = getattr(model, name, None)
            if method is None:
                continue
            if self._format == "torchscript":
                # A compiled method of the module itself, whose only argument is the module.
                schema = getattr(method, "schema", None)
                if schema is None or len(schema.arguments) != 1:
                    continue
            elif not inspect.ismethod(method) or not _takes_no_argument(method):
                continue
            return StateReset(f"{self._what}'s {name}()", method)
        return None

    def synchronize(self) -> None:
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    def settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        }
        if self._device.type == "cuda":
            # TF32 changes convolution and matmul results on the GPU (cuDNN allows it for
            # convolutions by default): it is part of what a GPU number means.
            settings["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
            settings["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
            settings["cudnn_benchmark"] = torch.backends.cudnn.benchmark
        return settings

    def close(self) -> None:
        if self._profiler is not None:
            self._profiler.stop()
            self._profiler = None
        if self._annotations is not None:
            self._annotations.remove()
        self._model = self._run = self._layers = self._capture = None
        self._program = self._annotations = None
        self._graph_file = None
        self.__dict__.pop("predict", None)
        if self._device.type == "cuda":
            torch.cuda.empty_cache()


def _frame_name(text: str) -> str:
    """A name as a frame of Kineto's module hierarchy takes it (no dots, no parentheses)."""
    return "".join(c for c in text if c not in ".()") or "_"


class ModuleAnnotations:
    """A `record_function` annotation around every call of every module of `model`, itself
    included, from `install` to `remove`: named `mlms.module#conv1(Conv2d)` after the module's
    attribute name and class, the model itself `mlms.module#TOP(Net)`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = model
        self._handles: list[Any] = []
        self._open: list[Any] = []

    def install(self) -> None:
        if self._handles:
            return
        for path, module in self._model.named_modules():
            attribute = path.rsplit(".", 1)[-1] if path else "TOP"
            name = (
                f"{MODULE_ANNOTATION}{_frame_name(attribute)}({_frame_name(module_type(module))})"
            )
            self._handles.append(module.register_forward_pre_hook(self._enter(name)))
            self._handles.append(module.register_forward_hook(self._leave, always_call=True))

    def _enter(self, name: str) -> Any:
        def enter(module: torch.nn.Module, args: Any) -> None:
            annotation = torch.autograd.profiler.record_function(name)
            annotation.__enter__()
            self._open.append(annotation)

        return enter

    def _leave(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._open:
            self._open.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        while self._open:
            self._open.pop().__exit__(None, None, None)


def annotate_hierarchy(trace: dict[str, Any]) -> None:
    """Give each host op and CUDA runtime call of a Kineto trace the module hierarchy of the
    `ModuleAnnotations` around it, in the form Kineto records for TorchScript
    (`TOP(Net)::forward.block(Block)::forward.conv(Conv2d)::forward.`, in
    `args["Module Hierarchy"]`), so that `torch_trace.steps_by_call` cuts each call into the
    same layers."""
    by_thread: dict[tuple[Any, Any], list[tuple[float, int, float, int, dict[str, Any]]]] = {}
    for index, raw in enumerate(trace.get("traceEvents", ())):
        if raw.get("ph") != "X" or not isinstance(raw.get("ts"), int | float):
            continue
        name = str(raw.get("name", ""))
        category = raw.get("cat", "")
        if category == "user_annotation" and name.startswith(MODULE_ANNOTATION):
            order = 0  # an annotation opens before an op that starts with it
        elif category in _HOST_CATEGORIES:
            order = 1
        else:
            continue
        start = float(raw["ts"])
        end = start + float(raw.get("dur", 0))
        thread = (raw.get("pid"), raw.get("tid"))
        by_thread.setdefault(thread, []).append((start, order, -end, index, raw))
    for items in by_thread.values():
        items.sort(key=lambda item: item[:4])
        stack: list[tuple[float, str]] = []  # (end, frame) of the annotations open
        for start, order, negative_end, _, raw in items:
            while stack and stack[-1][0] <= start:
                stack.pop()
            if order == 0:
                stack.append((-negative_end, f"{raw['name'][len(MODULE_ANNOTATION) :]}::forward."))
            elif stack:
                args = raw.setdefault("args", {})
                args["Module Hierarchy"] = "".join(frame for _, frame in stack)


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Kineto prints a line to the process's stderr (file descriptor 2, from C++) whenever a
    profiler starts or stops; it would break `mlms evaluate`'s progress bar. Silenced for the
    length of the call only."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _load_torchscript(graph_file: Path, device: torch.device) -> torch.nn.Module:
    """The TorchScript module in `graph_file`; a file that is something else (a state dict, a
    torch.export program) is refused naming the `model.format` that reads it."""
    try:
        with warnings.catch_warnings():
            # torch 2.13 deprecates torch.jit.load in favour of torch.export, and says so on
            # every load.
            warnings.filterwarnings("ignore", message=".*torch.jit.load.* is deprecated")
            module: torch.nn.Module = torch.jit.load(str(graph_file), map_location=device)
    except (RuntimeError, ValueError) as exc:
        # torch calls every file it cannot read a corrupted checkpoint: say what it is.
        what = misread(graph_file, "torchscript") or error_line(exc)
        raise PredictorError(
            f"pytorch cannot load {graph_file.name} as TorchScript: {what}"
        ) from exc
    return module


def _takes_no_argument(method: Callable[..., Any]) -> bool:
    """Whether a bound method can be called with no argument."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters
    )


def _first(outputs: Any) -> torch.Tensor:
    """The first output of a model that returns several (a tuple, list or dict of tensors)."""
    if isinstance(outputs, dict):
        outputs = next(iter(outputs.values()))
    elif isinstance(outputs, tuple | list):
        outputs = outputs[0]
    if not isinstance(outputs, torch.Tensor):
        raise PredictorError(f"the model returned {type(outputs).__name__}, not a tensor")
    return outputs


def _sequential_layers(model: torch.nn.Module) -> list[tuple[str, str, torch.nn.Module]] | None:
    """The layers (qualified name, type, module) of a `Sequential` (TorchScript or not), nested
    `Sequential`s flattened, in the order its `forward` runs them; None for any other module,
    whose `forward` cannot be run layer by layer from Python."""
    is_sequential = (
        type(model) is torch.nn.Sequential  # its forward is the chain (a subclass may not be)
        or (
            isinstance(model, torch.jit.ScriptModule)
            and getattr(model, "original_name", None) == "Sequential"
        )
    )
    if not is_sequential:
        return None
    layers: list[tuple[str, str, torch.nn.Module]] = []
    for name, child in model.named_children():
        inner = _sequential_layers(child) if list(child.children()) else None
        if inner is not None:
            layers.extend((f"{name}.{n}", t, m) for n, t, m in inner)
        else:
            layers.append((name, module_type(child), child))
    return layers
