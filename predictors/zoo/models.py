"""Building the zoo's models: train (or seed), export, check every export, then store them.

Each function here runs in a fresh process (see ``build.py``): torch's process-wide settings
(deterministic algorithms, one thread) stay out of the caller, and TorchScript type names do
not depend on what else the process traced before.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from predictors.zoo import architectures, export
from predictors.zoo.common import labels_text
from predictors.zoo.datasets import DATASETS, decode, normalize, pitfall_inputs, read_split
from predictors.zoo.store import VERSION, Staging
from predictors.zoo.training import TrainingPlan, make_deterministic, train

# Exports must agree with each other on every validation input within this (max |delta logit|).
AGREEMENT_TOLERANCE = 1e-3
FRAMEWORKS = ("pytorch", "onnxruntime", "tensorflow")
LAYOUTS = {"pytorch": "NCHW", "onnxruntime": "NCHW", "tensorflow": "NHWC"}


@dataclass(frozen=True)
class TrainedModel:
    name: str
    dataset: str
    factory: Callable[[], nn.Sequential]
    plan: TrainingPlan
    target_top1: float

    @property
    def directory(self) -> str:
        return f"models/{self.name}/{VERSION}"


PLAN = TrainingPlan(epochs=20, batch_size=32, learning_rate=2e-3)
TRAINED = {
    model.name: model
    for model in (
        TrainedModel("digits-cnn", "digits", architectures.digits_cnn, PLAN, target_top1=0.97),
        TrainedModel(
            "shapes-color", "shapes-color", architectures.shapes_cnn, PLAN, target_top1=0.95
        ),
    )
}

STANDARD_INPUT = (3, 224, 224)
STANDARD_LABELS = tuple(f"class-{i}" for i in range(1000))


def _log(message: str) -> None:
    print(f"[zoo] {message}", file=sys.stderr, flush=True)


def build_trained_model(store: str, name: str) -> dict:
    """Train ``name`` on its dataset's train split, export it three ways, check, store."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    spec = TRAINED[name]
    dataset = DATASETS[spec.dataset]
    root = Path(store)
    train_split = read_split(root / dataset.split_path("train"))
    validation = read_split(root / dataset.split_path("validation"))

    make_deterministic(spec.plan.seed)
    model = spec.factory()
    _log(f"models/{name}: training on {len(train_split.labels)} images (one thread)")
    x_train = normalize(decode(train_split.images, dataset.image), dataset.image)
    training = train(model, x_train, train_split.labels, spec.plan, name)
    pixels = decode(validation.images, dataset.image)
    x = normalize(pixels, dataset.image)
    labels = validation.labels
    example = torch.from_numpy(x[:1])

    started = time.perf_counter()
    with Staging(root, spec.directory) as staging:
        _log(f"models/{name}: exporting TorchScript, ONNX, Keras")
        paths = {
            "pytorch": staging.write(f"{name}.pt", export.torchscript_bytes(model, example)),
            "onnxruntime": staging.write(f"{name}.onnx", export.onnx_bytes(model, example)),
            "tensorflow": staging.write(
                f"{name}.keras",
                export.keras_bytes(export.to_keras(model, tuple(x.shape[1:]))),
            ),
        }
        staging.write("labels.txt", labels_text(dataset.labels))

        _log(f"models/{name}: checking the exports on {len(labels)} validation images")
        logits = {
            "pytorch": export.run_torchscript(paths["pytorch"], x),
            "onnxruntime": export.run_onnx(paths["onnxruntime"], x),
            "tensorflow": export.run_keras(paths["tensorflow"], x.transpose(0, 2, 3, 1)),
        }
        top1 = {fw: float(np.mean(out.argmax(1) == labels)) for fw, out in logits.items()}
        agreement = {
            f"{a}-{b}": float(np.abs(logits[a] - logits[b]).max())
            for i, a in enumerate(FRAMEWORKS)
            for b in FRAMEWORKS[i + 1 :]
        }
        for pair, delta in agreement.items():
            if not delta < AGREEMENT_TOLERANCE:
                raise RuntimeError(f"{name}: exports disagree ({pair}: max |Δ logits| {delta:.3g})")
        for framework, accuracy in top1.items():
            if accuracy < spec.target_top1:
                raise RuntimeError(
                    f"{name}: validation top-1 {accuracy:.4f} in {framework} is below the "
                    f"target {spec.target_top1}"
                )
        pitfalls = {
            pitfall: float(
                np.mean(export.run_onnx(paths["onnxruntime"], wrong).argmax(1) == labels)
            )
            for pitfall, wrong in pitfall_inputs(pixels, dataset.image).items()
        }
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "dataset": spec.dataset,
        "parameters": sum(p.numel() for p in model.parameters()),
        "input": {
            "color_mode": dataset.image.color_mode,
            "size": list(dataset.image.size),
            "scale": dataset.image.scale,
            "mean": list(dataset.image.mean),
            "std": list(dataset.image.std),
            "layout": LAYOUTS,
        },
        "training": training,
        "target_top1": spec.target_top1,
        "validation_count": len(labels),
        "validation_top1": top1,
        "max_abs_logit_diff": agreement,
        "pitfall_top1_onnxruntime": pitfalls,
        "export_seconds": round(time.perf_counter() - started, 2),
    }


def build_standard_model(store: str, name: str) -> dict:
    """Seed ``name``'s weights (torch.manual_seed(0)), export TorchScript and ONNX, check, store."""
    _log(f"models/{name}: seeding weights")
    torch.manual_seed(0)
    model = architectures.STANDARD[name]().eval()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, *STANDARD_INPUT, generator=generator)
    with torch.inference_mode():
        reference = model(x).numpy()
    directory = f"models/{name}/{VERSION}"
    with Staging(Path(store), directory) as staging:
        _log(f"models/{name}: exporting TorchScript, ONNX")
        paths = {
            "pytorch": staging.write(f"{name}.pt", export.torchscript_bytes(model, x[:1])),
            "onnxruntime": staging.write(f"{name}.onnx", export.onnx_bytes(model, x[:1])),
        }
        staging.write("labels.txt", labels_text(STANDARD_LABELS))
        # Batch 2 while the exports were traced with batch 1: the batch axis must be dynamic.
        outputs = {
            "pytorch": export.run_torchscript(paths["pytorch"], x.numpy()),
            "onnxruntime": export.run_onnx(paths["onnxruntime"], x.numpy()),
        }
        scale = max(1.0, float(np.abs(reference).max()))
        agreement = {fw: float(np.abs(out - reference).max()) for fw, out in outputs.items()}
        for framework, delta in agreement.items():
            if not delta / scale < AGREEMENT_TOLERANCE:
                raise RuntimeError(f"{name}: {framework} export differs from eager ({delta:.3g})")
        files = staging.commit()
    return {
        "files": files,
        "trained": False,
        "parameters": sum(p.numel() for p in model.parameters()),
        "input": {"shape": list(STANDARD_INPUT), "layout": "NCHW"},
        "max_abs_logit_diff_vs_eager": agreement,
        "max_abs_logit": float(np.abs(reference).max()),
    }
