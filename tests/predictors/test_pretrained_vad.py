"""A second pretrained model from a PyPI wheel, of another modality and task: Silero VAD (voice
activity, audio, stateful), brought in with a manifest only. On clips spoken locally by eSpeak
NG (`predictors/zoo/speech.py`), the accuracy MLModelScope reports equals the package's own
streaming pipeline's (its `OnnxWrapper`: the context window and the state it keeps between
calls), input by input; and the state is what makes it (docs/models.md)."""

from __future__ import annotations

import hashlib
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from predictors.zoo import speech
from predictors.zoo.pretrained import PRETRAINED, package_file
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = [pytest.mark.frameworks, pytest.mark.database_free]


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("silero-vad", "speech-clips"))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "model": "silero-vad",
        "framework": "onnxruntime",
        "dataset": "speech-clips",
        "repeat": 1,
        "threads": 1,
    }


def _package_probabilities(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The package's own pipeline, clip by clip: each FLAC decoded by soundfile, cut into
    512-sample chunks, `load_silero_vad(onnx=True)` called on each at 16 kHz, its state reset
    at the start of each clip; each chunk's truth: speech when half of it lies in a phrase."""
    import soundfile
    import torch
    from silero_vad import load_silero_vad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_silero_vad(onnx=True)
    probabilities, labels = [], []
    for row in pq.read_table(path).to_pylist():
        samples, rate = soundfile.read(io.BytesIO(row["audio"]), dtype="float32")
        assert rate == speech.RATE
        spoken = np.zeros(len(samples), bool)
        for start, end in row["segments"]:
            spoken[round(start * rate) : round(end * rate)] = True
        model.reset_states()
        for first in range(0, len(samples) - 511, 512):
            chunk = torch.from_numpy(samples[first : first + 512])
            probabilities.append(float(model(chunk, speech.RATE)))
            labels.append(int(spoken[first : first + 512].mean() >= 0.5))
    return np.asarray(probabilities), np.asarray(labels)


def test_the_accuracy_reported_is_the_packages_own(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    theirs, labels = _package_probabilities(
        store / "datasets/speech-clips/1.0.0/validation.parquet"
    )
    their_accuracy = float(np.mean((theirs >= 0.5) == labels))

    for batch_size in (1, 8):
        evaluation = run_evaluation(batch_sizes=[batch_size])
        assert np.array_equal(evaluation.labels, labels)
        ours = evaluation.outputs[:, 1]
        our_accuracy = evaluation.result["accuracy"]["top1"]
        assert abs(our_accuracy - their_accuracy) <= 0.005, (our_accuracy, their_accuracy)
        # Input by input, not only on average.
        agreement = float(np.mean((ours >= 0.5) == (theirs >= 0.5)))
        assert agreement >= 0.995, agreement
        np.testing.assert_allclose(ours, theirs, atol=1e-3)
        # The state is what makes it: reset at every call, it labels far fewer chunks right.
        reset = evaluation.result["accuracy_state_reset"]["top1"]
        assert reset <= our_accuracy - 0.2, (reset, our_accuracy)
    assert their_accuracy >= 0.9  # a detector worth its name on this data


def test_the_model_file_is_the_packages_byte_for_byte(store: Path) -> None:
    entry = PRETRAINED["silero-vad"]
    stored = (store / "models/silero-vad/1.0.0" / entry.file).read_bytes()
    assert stored == package_file(entry)
    assert hashlib.sha256(stored).hexdigest() == entry.sha256


def test_without_its_synthesizer_the_dataset_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(speech.SynthesizerMissing, match="apt-get install espeak-ng"):
        speech.make_clips()
