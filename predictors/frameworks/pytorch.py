"""The PyTorch predictor: TorchScript files (`torch.jit.load`) on the CPU or a CUDA device."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch

from predictors.frameworks import cuda_index
from predictors.manifests import Manifest
from predictors.predictor import Predictor, PredictorError, PredictorOptions
from predictors.tracing import CLOCK_TORCH_LAYERS, Layer, at_least

# One traced layer of one call: (layer index, offset from the call's start, duration, output
# shape); turned into `Layer`s after the timed loop, by `take_layers`.
_Mark = tuple[int, int, int, tuple[int, ...]]


class PyTorchPredictor(Predictor):
    framework = "pytorch"

    def __init__(self) -> None:
        self._model: torch.jit.ScriptModule | None = None
        self._run: Callable[[torch.Tensor], Any] | None = None
        self._device = torch.device("cpu")
        self._on_host = True
        # Layer tracing (trace level framework): the model's layers, and each call's marks.
        self._layers: list[tuple[str, str, torch.nn.Module]] | None = None
        self._calls: list[list[_Mark]] = []

    @classmethod
    def check_device(cls, device: str) -> None:
        if device == "cpu":
            return
        try:
            index = cuda_index(device)
        except ValueError as exc:
            raise PredictorError(f"pytorch: {exc}; use cpu or cuda[:N]") from None
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
        try:
            with warnings.catch_warnings():
                # TorchScript is the manifests' PyTorch format; torch 2.13 deprecates
                # torch.jit.load in favour of torch.export, and says so on every load.
                warnings.filterwarnings("ignore", message=".*torch.jit.load.* is deprecated")
                model = torch.jit.load(str(options.graph_file), map_location=self._device)
        except (RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PredictorError(
                f"pytorch cannot load {options.graph_file.name} as TorchScript: {first}"
            ) from exc
        # No parameter needs a gradient, so no call builds an autograd graph, whichever thread
        # makes it; the loop's runs also hold torch.inference_mode() (`inference_context`),
        # which skips autograd's dispatch altogether. Entering it on every call instead costs a
        # small TorchScript model about a tenth of its latency.
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        self._model = model.eval()
        self._run = self._model
        if at_least(options.trace_level, "framework"):
            self._layers = _sequential_layers(self._model)
            if self._layers is not None:
                self._run = self._run_layers

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

    def _run_layers(self, inputs: torch.Tensor) -> torch.Tensor:
        """The model run layer by layer, each layer timed (trace level framework).

        TorchScript modules take no forward hooks (`register_forward_pre_hook is not supported
        on ScriptModules`), so a model whose TorchScript module is a `Sequential` is run as its
        compiled `forward` runs it: each (compiled) layer in turn on the previous one's output.
        The outputs are the same; the optimizations TorchScript makes across layers are not."""
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

    def take_layers(self) -> list[list[Layer]] | None:
        if self._layers is None:
            return None
        layers = self._layers
        calls = [
            [
                Layer(
                    layers[index][0],
                    layers[index][1],
                    offset,
                    duration,
                    {"mlms.output_shape": list(shape), "mlms.clock": CLOCK_TORCH_LAYERS},
                )
                for index, offset, duration, shape in marks
            ]
            for marks in self._calls
        ]
        self._calls = []
        return calls

    def synchronize(self) -> None:
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    def settings(self) -> dict[str, Any]:
        return {
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        }

    def close(self) -> None:
        self._model = self._run = self._layers = None
        if self._device.type == "cuda":
            torch.cuda.empty_cache()


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
    """The layers (qualified name, type, module) of a TorchScript `Sequential`, nested
    `Sequential`s flattened, in the order its `forward` runs them; None for any other module,
    whose `forward` cannot be run layer by layer from Python."""
    if getattr(model, "original_name", None) != "Sequential":
        return None
    layers: list[tuple[str, str, torch.nn.Module]] = []
    for name, child in model.named_children():
        inner = _sequential_layers(child) if list(child.children()) else None
        if inner is not None:
            layers.extend((f"{name}.{n}", t, m) for n, t, m in inner)
        else:
            layers.append((name, str(getattr(child, "original_name", "")), child))
    return layers
