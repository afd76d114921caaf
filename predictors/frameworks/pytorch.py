"""The PyTorch predictor: TorchScript files (`torch.jit.load`) on the CPU or a CUDA device."""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch

from predictors.frameworks import cuda_index
from predictors.manifests import Manifest
from predictors.predictor import Predictor, PredictorError, PredictorOptions


class PyTorchPredictor(Predictor):
    framework = "pytorch"

    def __init__(self) -> None:
        self._model: torch.jit.ScriptModule | None = None
        self._device = torch.device("cpu")
        self._on_host = True

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

    def inference_context(self) -> AbstractContextManager[object]:
        return torch.inference_mode()

    def predict(self, batch: np.ndarray) -> np.ndarray:
        # The hot path of every timed batch: a small model runs in about 100 µs on a CPU, so
        # each attribute lookup and check here shows in its latency.
        model = self._model
        assert model is not None, "load() first"
        if self._on_host:
            outputs = model(torch.from_numpy(batch))
        else:
            outputs = model(torch.from_numpy(batch).to(self._device))
        if not isinstance(outputs, torch.Tensor):
            outputs = _first(outputs)
        return outputs.numpy() if self._on_host else outputs.cpu().numpy()

    def synchronize(self) -> None:
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    def settings(self) -> dict[str, Any]:
        return {
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
        }

    def close(self) -> None:
        self._model = None
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
