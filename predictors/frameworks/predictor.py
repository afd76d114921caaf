"""The framework-neutral predictor API, and the registry of predictors by framework name.

A predictor runs one model in one framework. It does nothing but `load`, `predict`,
`synchronize` and `close` (plus a device check and a description of its framework); everything
around it (warm-up, batching, timing, repetitions, result collection) is the one evaluation loop
in `predictors.evaluation`, shared by every framework.

Framework modules live in `predictors.frameworks` and are imported only when a predictor of
theirs is asked for, so `import predictors` never imports torch, TensorFlow or ONNX Runtime.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from predictors.frameworks.layer_outputs import MAX_CAPTURE_BYTES, LayerOutput
from predictors.manifests import Manifest
from predictors.manifests.graph_check import Signature
from predictors.protocol import LOCAL_DEVICES, cuda_index
from predictors.tracing import Layer

__all__ = [
    "DEVICES",
    "FRAMEWORKS",
    "LayerTimingPredictor",
    "Predictor",
    "PredictorError",
    "PredictorOptions",
    "StateReset",
    "cuda_device",
    "predictor_class",
    "register",
    "registered",
    "unregister",
]

# The frameworks with a built-in predictor, and the module that holds each.
FRAMEWORKS = ("pytorch", "tensorflow", "onnxruntime")
_BUILT_IN = {
    "pytorch": ("predictors.frameworks.pytorch", "PyTorchPredictor"),
    "tensorflow": ("predictors.frameworks.tensorflow", "TensorFlowPredictor"),
    "onnxruntime": ("predictors.frameworks.onnxruntime", "OnnxRuntimePredictor"),
}

# A predictor's devices (`cuda:N` too): the protocol's local spelling.
DEVICES = LOCAL_DEVICES


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none): what a
    refusal quotes of a framework's own error."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PredictorError(RuntimeError):
    """A model cannot be loaded or run: the message says why, in words a user can act on."""


def cuda_device(framework: str, device: str) -> int | None:
    """The CUDA device index of `device`, None for the CPU; PredictorError (naming
    `framework`) for any other device."""
    if device == "cpu":
        return None
    try:
        return cuda_index(device)
    except ValueError as exc:
        raise PredictorError(f"{framework}: {exc}; use cpu or cuda[:N]") from None


@dataclass(frozen=True)
class PredictorOptions:
    """How to load a model.

    `graph_file` and `weights_file` are local files (the manifest's `model.graph_path` and
    `model.weights_path`, fetched). `threads`, when set, is the number of intra-op threads (and
    inter-op threads are set to 1); None leaves the framework's defaults. `seed` seeds the
    framework's random generators. `trace_level` is the evaluation's (`predictors.tracing`):
    at `framework` or finer a predictor that can traces each layer of every `predict` call
    (`Predictor.take_layers`); below it, it installs nothing. `graph_optimization` (none, basic,
    extended, all) is ONNX Runtime's graph optimization level (e.g. `none` for no fusion, so
    that the layers are the graph's nodes); None leaves the framework's default.
    A predictor that traces through a profiler starts it when the loop calls
    `start_tracing` (right before the first timed call, after the warm-up), so that its start-up
    costs no timed call anything, and stops it at `stop_tracing`.
    """

    graph_file: Path
    weights_file: Path | None = None
    device: str = "cpu"
    threads: int | None = None
    seed: int | None = None
    trace_level: str = "none"
    graph_optimization: str | None = None


@dataclass(frozen=True)
class StateReset:
    """A model's own reset of the state it keeps inside itself between calls: `how` says
    which (e.g. "the TorchScript module's reset_state()"), `reset()` does it."""

    how: str
    reset: Callable[[], None]


class Predictor(ABC):
    """One model loaded in one framework.

    Usage: `predictor.load(manifest, options)`, then `predictor.predict(batch)` any number of
    times (and `predictor.layer_outputs(batch)` to see inside the model), then
    `predictor.close()`. `predict` takes the batch the manifest's preprocessing produces (a
    NumPy array, batch axis first) and returns the model's first output as a NumPy array on the
    host, batch axis first.
    """

    framework: ClassVar[str]
    # The finest trace level this predictor records inside a call.
    finest_trace_level: ClassVar[str] = "framework"

    @classmethod
    @abstractmethod
    def check_device(cls, device: str) -> None:
        """Raise PredictorError unless this framework can run on `device` here."""

    @classmethod
    @abstractmethod
    def software(cls) -> dict[str, Any]:
        """The framework's version and build details (a JSON-able dict with a `version` key)."""

    @abstractmethod
    def load(self, manifest: Manifest, options: PredictorOptions) -> None:
        """Load the model the manifest describes, from `options.graph_file`."""

    @abstractmethod
    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Run the model on one batch; the first output, on the host, batch axis first."""

    def run(self, feeds: dict[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
        """Run the model on every input (`feeds`, by the manifest's input names, each batch
        on its own batch axis); the outputs `names` (manifest output names), on the host. The
        evaluation loop calls it for models with constant or state inputs; `predict` stays the
        path of single-input models."""
        raise PredictorError(
            f"the {self.framework} predictor feeds one input; models with constant or state "
            "inputs run in ONNX Runtime or PyTorch"
        )

    def predict_feeds(self, feeds: dict[str, np.ndarray], output: str) -> np.ndarray:
        """Run the model on every input (`feeds`, by the manifest's input names); its scored
        output `output`, as `predict` gives a one-input model's. By default through `run`."""
        return self.run(feeds, [output])[0]

    def layer_outputs(
        self, batch: np.ndarray, *, max_bytes: int = MAX_CAPTURE_BYTES
    ) -> list[LayerOutput]:
        """Every layer's output for `batch`, in the order the model computes them
        (`predictors.frameworks.layer_outputs`), on the host. Called after `load`; it runs a
        copy of the model of its own, made on the first call, so that the timed model is left
        as it was. PyTorch, ONNX Runtime and Keras capture; PredictorError where the predictor
        cannot, or where the outputs would take more than `max_bytes`."""
        raise PredictorError(f"the {self.framework} predictor does not capture layer outputs")

    def expected_input(self) -> tuple[tuple[int | None, ...], str] | None:
        """The loaded model's input (shape with None for free dimensions, element type), where
        the framework records it; the evaluation loop checks the first batch against it."""
        return None

    def signature(self) -> Signature | None:
        """The loaded model's inputs and outputs (names, element types, ranks) as the file
        declares them, where it declares them; checked against the manifest at upload (a
        sandboxed load) and at load. None where the framework records none (the default)."""
        return None

    def inference_context(self) -> AbstractContextManager[object]:
        """A context the evaluation loop holds around a run of `predict` calls, in the thread
        that makes them: a framework's thread-local inference mode (PyTorch's), entered once
        instead of once per call. `predict` works outside it too. Default: nothing."""
        return nullcontext()

    def synchronize(self) -> None:  # noqa: B027 - an optional hook, empty on the host
        """Wait until the device has finished all work queued so far (a no-op on the CPU)."""

    def start_tracing(self) -> None:  # noqa: B027 - an optional hook
        """Called by the loop once, right before its first timed `predict` call: a predictor
        that traces through a profiler starts it here (the default does nothing). Later batch
        sizes' warm-up calls are traced too; the loop drops their steps."""

    def stop_tracing(self) -> None:  # noqa: B027 - an optional hook
        """Called by the loop once, after its last timed `predict` call and before
        `take_layers`: a profiler stops here (the default does nothing)."""

    def take_layers(self) -> list[list[Layer]] | None:
        """At trace level `framework` or finer: the layers of every `predict` call since the
        last `take_layers` (or `load`), one list per call in call order. None where the
        predictor does not trace layers (the default)."""
        return None

    def layers_as_they_come(self) -> bool:
        """Whether `take_layers` may be called between batch sizes, each time giving the calls
        since the last (a predictor that times its layers itself), so that the loop exports
        them at the end of each batch size; a profiler that stops once for the run gives them
        at the end only (the default)."""
        return False

    def trace_summary(self) -> dict[str, Any] | None:
        """After `take_layers`: what the predictor's profiler itself counted (for instance
        torch.profiler's count of GPU activities), to check the spans against. None where the
        predictor has nothing to add (the default)."""
        return None

    def state_reset(self) -> StateReset | None:
        """The loaded model's own reset of a state it keeps inside itself between calls, where
        its module offers one; None where it offers none (the default). The evaluation loop
        asks for it only for a model that gives different outputs for the same input on two
        calls (`predictors.evaluation.state`), and resets it where each call or stream must
        start afresh."""
        return None

    def settings(self) -> dict[str, Any]:
        """The settings the loaded model runs with (threads, providers, …), as applied."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Release the model and whatever device memory it holds."""


class LayerTimingPredictor(Predictor):
    """A predictor that times a chain of layers itself, call by call, where no profiler records
    them: the marks of each timed call (`_calls`) become `Layer`s whenever the loop takes them
    (`timed_layers`), between batch sizes."""

    # The chain of layers it times (None: the model is no chain), and each timed call's marks.
    _layers: Sequence[Any] | None
    _calls: list[Any]

    def __init__(self) -> None:
        # The predict calls since its profiler started, and what the profiler counted.
        self._call_count = 0
        self._summary: dict[str, Any] | None = None

    @abstractmethod
    def profiles_layers(self) -> bool:
        """Whether a profiler records the layers instead (read once, by `_take_profiled`)."""

    @abstractmethod
    def _take_profiled(self) -> list[list[Layer]]:
        """Stop the profiler; each call's layers from its trace."""

    @abstractmethod
    def timed_layers(self, layers: Any, calls: list[Any]) -> list[list[Layer]]:
        """The `Layer`s of each timed call of `calls`, over the chain `layers`."""

    def layers_as_they_come(self) -> bool:
        return not self.profiles_layers() and self._layers is not None

    def take_layers(self) -> list[list[Layer]] | None:
        if self.profiles_layers():
            return self._take_profiled()
        if self._layers is None:
            return None
        calls = self.timed_layers(self._layers, self._calls)
        self._calls = []
        return calls

    def trace_summary(self) -> dict[str, Any] | None:
        return self._summary


P = TypeVar("P", bound=type[Predictor])

# Predictors registered at run time (plug-ins, tests); they take precedence over the built-ins.
_registry: dict[str, type[Predictor]] = {}


def register(name: str) -> Callable[[P], P]:
    """Class decorator: make the class the predictor of framework `name` (it replaces a
    built-in of that name until `unregister`)."""

    def decorate(cls: P) -> P:
        cls.framework = name
        _registry[name] = cls
        return cls

    return decorate


def unregister(name: str) -> None:
    """Forget the predictor registered under `name`; a built-in of that name applies again."""
    _registry.pop(name, None)


def registered() -> list[str]:
    """The framework names a predictor can be asked for: the built-ins and any registered."""
    return sorted(set(FRAMEWORKS) | set(_registry))


def predictor_class(name: str) -> type[Predictor]:
    """The predictor class of framework `name`, importing a built-in's module on first use."""
    if name in _registry:
        return _registry[name]
    if name not in _BUILT_IN:
        raise PredictorError(
            f"unknown framework {name!r}; known frameworks: {', '.join(registered())}"
        )
    module_name, class_name = _BUILT_IN[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PredictorError(
            f"the {name} predictor cannot be imported: {exc} (is {name} installed?)"
        ) from exc
    cls: type[Predictor] = getattr(module, class_name)
    return cls
