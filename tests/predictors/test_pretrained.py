"""A pretrained model that ships inside a PyPI package, brought in with a manifest only: the
accuracy MLModelScope reports equals the package's own pipeline's on the same locally made data
(docs/models.md writes down the procedure).

The text-direction classifier is the one rapidocr-onnxruntime's wheel ships; the package's
`TextClassifier` (its own preprocessing, batching and ONNX Runtime session) is the reference.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from predictors.zoo.datasets import read_split
from predictors.zoo.pretrained import PRETRAINED, PretrainedError, package_file
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

LABELS = ["0", "180"]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("text-direction", "text-lines"))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {"model": "text-direction", "framework": "onnxruntime", "dataset": "text-lines"}


def _package_predictions(images: list[bytes]) -> list[str]:
    """The package's own pipeline on the images, decoded as it decodes a file (cv2.imread)."""
    import cv2
    from rapidocr_onnxruntime.ch_ppocr_cls import TextClassifier

    root = resources.files("rapidocr_onnxruntime")
    config = yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8"))["Cls"]
    config["model_path"] = str(root / config["model_path"])
    classifier = TextClassifier(config)
    decoded = [cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) for data in images]
    _, results, _ = classifier(decoded)
    return [label for label, _score in results]


def test_the_accuracy_reported_is_the_packages_own(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    split = read_split(store / "datasets/text-lines/1.0.0/validation.parquet")
    theirs = _package_predictions(split.images)
    their_top1 = float(
        np.mean([LABELS.index(p) == y for p, y in zip(theirs, split.labels, strict=True)])
    )

    for batch_size in (1, 8):
        evaluation = run_evaluation(batch_sizes=(batch_size,))
        ours = [prediction[0][1] for prediction in evaluation.predictions]
        our_top1 = evaluation.result["accuracy"]["top1"]
        assert abs(our_top1 - their_top1) <= 0.005, (our_top1, their_top1)
        # Input by input, not only on average.
        agreement = float(np.mean([a == b for a, b in zip(ours, theirs, strict=True)]))
        assert agreement >= 0.995, agreement
        assert evaluation.result["accuracy"]["count"] == len(split.labels) == 600
    # A model worth its name on this data: upright and upside-down lines are told apart.
    assert their_top1 >= 0.9


def test_stretching_instead_of_padding_is_a_different_input(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    """The manifest's geometry matters: stretched to 48x192 instead of resized by height and
    padded, the outputs move (the pitfall the parameters exist for)."""
    padded = run_evaluation(batch_sizes=(8,))
    stretched = run_evaluation(
        batch_sizes=(8,),
        overrides=(
            "inputs.0.parameters.resize_side=null",
            "inputs.0.parameters.pad=null",
            "inputs.0.parameters.resize_size=[48, 192]",
        ),
    )
    assert not np.allclose(padded.outputs, stretched.outputs, atol=1e-3)


def test_the_model_file_is_the_packages_byte_for_byte(store: Path) -> None:
    entry = PRETRAINED["text-direction"]
    stored = (store / "models/text-direction/1.0.0" / entry.file).read_bytes()
    assert stored == package_file(entry)
    assert hashlib.sha256(stored).hexdigest() == entry.sha256


def test_a_package_that_is_missing_or_of_another_version_is_refused() -> None:
    import dataclasses

    entry = PRETRAINED["text-direction"]
    missing = dataclasses.replace(entry, package="mlms-no-such-package")
    with pytest.raises(
        PretrainedError, match="mlms-no-such-package==1.4.4, which is not installed"
    ):
        package_file(missing)
    other = dataclasses.replace(entry, version="1.4.3")
    with pytest.raises(PretrainedError, match=r"rapidocr-onnxruntime==1.4.3, but 1.4.4 is"):
        package_file(other)
    changed = dataclasses.replace(entry, sha256="0" * 64)
    with pytest.raises(PretrainedError, match="not the recorded 0000"):
        package_file(changed)
