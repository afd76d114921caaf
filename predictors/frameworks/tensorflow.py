"""The TensorFlow predictor: Keras 3 model files (`.keras`) run as a `tf.function`, on the CPU or
a GPU.

The model call is traced once into a graph (`tf.function` with a batch-free input signature), so
a batch costs one graph execution, not a Python walk over the layers.
"""

from __future__ import annotations

import os
from typing import Any

# TensorFlow logs informational lines to stderr when it starts unless told not to; they would
# bury the one-line messages of the command line. Keras must run on TensorFlow here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from predictors.frameworks import cuda_index  # noqa: E402
from predictors.manifests import Manifest  # noqa: E402
from predictors.predictor import (  # noqa: E402
    Predictor,
    PredictorError,
    PredictorOptions,
)


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


class TensorFlowPredictor(Predictor):
    framework = "tensorflow"

    def __init__(self) -> None:
        self._model: keras.Model | None = None
        self._function: Any = None
        self._device = "/CPU:0"

    @classmethod
    def check_device(cls, device: str) -> None:
        if device == "cpu":
            return
        try:
            index = cuda_index(device)
        except ValueError as exc:
            raise PredictorError(f"tensorflow: {exc}; use cpu or cuda[:N]") from None
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
        if options.threads is not None:
            _apply_threads(options.threads)
        if options.seed is not None:
            keras.utils.set_random_seed(options.seed)
        self._device = "/CPU:0" if options.device == "cpu" else f"/GPU:{cuda_index(options.device)}"
        try:
            with tf.device(self._device):
                model = keras.saving.load_model(options.graph_file, compile=False)
        except (OSError, ValueError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PredictorError(
                f"tensorflow cannot load {options.graph_file.name} as a Keras model: {first}"
            ) from exc
        spec = model.inputs[0]
        signature = tf.TensorSpec((None, *spec.shape[1:]), dtype=spec.dtype)

        def call(inputs: tf.Tensor) -> Any:
            with tf.device(self._device):
                return model(inputs, training=False)

        self._model = model
        self._function = tf.function(call, input_signature=[signature], jit_compile=False)

    def expected_input(self) -> tuple[tuple[int | None, ...], str] | None:
        assert self._model is not None, "load() first"
        spec = self._model.inputs[0]
        return tuple(spec.shape), str(spec.dtype)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        assert self._function is not None, "load() first"
        outputs = self._function(batch)
        if isinstance(outputs, tuple | list):
            outputs = outputs[0]
        elif isinstance(outputs, dict):
            outputs = next(iter(outputs.values()))
        return outputs.numpy()

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
        }

    def close(self) -> None:
        self._model = None
        self._function = None
        keras.backend.clear_session()
