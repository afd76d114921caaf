"""A pretrained TensorFlow Lite model of several outputs, brought in with a manifest: Spotify's
Basic Pitch as its wheel ships it, reading whole clips cut into overlapping windows, its
its note output's frames pooled into one probability per key. Which piano keys sound in each clip
of `piano-chords` is, clip for clip, what the package's own pipeline (`run_inference`: its
windows, its TFLite model, `unwrap_output`) gives on the same clips, and so are the metrics
(docs/models.md writes down the procedure). The manifest says it all with parameters: the
windows of its audio input, and its note output's frames trimmed and pooled.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from predictors.evaluation.scenarios.multilabel import multilabel_metrics
from predictors.manifests.catalog import Catalog
from predictors.processing import ProcessingError
from predictors.processing.clips import ClipPreprocessor
from predictors.zoo.notes import KEYS, TRANSCRIBER
from predictors.zoo.pretrained import package_file
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

RATE = 22_050
WINDOWS = {
    "size": 43_844,
    "hop": 36_164,
    "pad_start": 3_840,
    "until": "start_in_clip",
    "combine": "max",
}


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("basic-pitch", "piano-chords"))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "model": "basic-pitch",
        "framework": "tensorflow",
        "dataset": "piano-chords",
        "threads": 1,
        "repeat": 1,
    }


def _package() -> Any:
    """The package's own inference, its TFLite model loaded (its SavedModel does not load in
    the TensorFlow pinned here: the package falls back on the same file's TFLite form)."""
    logging.getLogger().setLevel(logging.ERROR)  # its import warns of packages it may use
    from basic_pitch import inference

    return inference


def test_every_clips_keys_and_the_metrics_are_the_packages_own(
    store: Path, run_evaluation: RunEvaluation, tmp_path: Path
) -> None:
    inference = _package()
    table = pq.read_table(store / "datasets/piano-chords/1.0.0/validation.parquet")
    clips, keys = table.column("audio").to_pylist(), table.column("label").to_pylist()
    model = inference.Model(store / "models/basic-pitch/1.0.0/basic-pitch.tflite")
    theirs = []
    for index, clip in enumerate(clips):
        path = tmp_path / f"{index}.flac"
        path.write_bytes(clip)
        theirs.append(inference.run_inference(path, model)["note"].max(axis=0))
    their_probabilities = np.stack(theirs)
    truth = np.zeros((len(clips), 88), np.uint8)
    for row, present in enumerate(keys):
        truth[row, present] = 1
    expected = multilabel_metrics(their_probabilities, truth, list(KEYS), 0.5)

    for batch_size in (1, 4):
        evaluation = run_evaluation(batch_sizes=(batch_size,))
        accuracy = evaluation.result["accuracy"]
        assert accuracy["count"] == len(clips) == 80
        for key in ("map", "f1_micro", "exact_match"):
            assert abs(accuracy[key] - expected[key]) <= 0.005, (key, accuracy, expected)
        ours = evaluation.outputs
        assert ours.shape == (80, 88)
        # Clip for clip: the same keys at the threshold, the probabilities near the package's.
        agreement = np.mean(np.all((ours >= 0.5) == (their_probabilities >= 0.5), axis=1))
        assert agreement >= 0.99, agreement
        # Where a key is likely to sound, the same probability; elsewhere the windows' maximum
        # also holds the frames past the clip's end that unwrap_output drops (the last
        # window's padding), where every key sits near 0.1.
        likely = np.maximum(ours, their_probabilities) >= 0.3
        assert likely.any()
        np.testing.assert_allclose(ours[likely], their_probabilities[likely], atol=1e-6)
        assert np.abs(ours - their_probabilities).max() < 0.15
        assert evaluation.result["batch_sizes"][0]["timed_inputs"] == 80
    # A transcriber worth its name on clean tones of one to three notes.
    assert expected["map"] >= 0.8 and expected["exact_match"] >= 0.6


def test_timed_only_it_counts_clips_not_windows(run_evaluation: RunEvaluation) -> None:
    timed = run_evaluation(batch_sizes=(4,), limit=8, latency_only=True)
    assert timed.result["accuracy"] is None
    assert timed.result["dataset"]["count"] == 8
    assert timed.result["batch_sizes"][0]["timed_inputs"] == 8
    assert timed.outputs.shape[0] == 8


def test_the_scored_output_is_the_first_that_is_read_whatever_the_order() -> None:
    from predictors.tasks import scored_output_name, unsupported

    data = dict(Catalog().find_model("basic-pitch", "*", "tensorflow").data)
    data["outputs"] = [data["outputs"][1], data["outputs"][2], data["outputs"][0]]
    assert unsupported(data) is None
    assert scored_output_name(data) == "note"


def test_the_model_is_the_wheels_tflite_file_with_three_outputs(store: Path) -> None:
    import tensorflow as tf

    graph = (store / "models/basic-pitch/1.0.0" / TRANSCRIBER.file).read_bytes()
    assert graph == package_file(TRANSCRIBER)
    assert hashlib.sha256(graph).hexdigest() == TRANSCRIBER.sha256
    interpreter = tf.lite.Interpreter(model_content=graph)
    assert interpreter.get_signature_list() == {
        "serving_default": {"inputs": ["input_2"], "outputs": ["contour", "note", "onset"]}
    }
    manifest = Catalog().find_model("basic-pitch", "*", "tensorflow").data
    assert [o["name"] for o in manifest["outputs"]] == ["note", "onset", "contour"]
    assert manifest["outputs"][0]["parameters"]["labels"] == list(KEYS)
    assert Catalog().find_dataset("piano-chords").data["labels"] == list(KEYS)


def test_the_windows_are_the_packages() -> None:
    inference = _package()
    preprocessor = ClipPreprocessor(
        {"sample_rate": RATE, "element_type": "float32", "layout": "NTC", "windows": WINDOWS}
    )
    rng = np.random.default_rng(6)
    for length in (1, 500, 32_323, 32_324, 32_325, 36_164, 72_328, 90_000, 150_001):
        samples = rng.uniform(-0.5, 0.5, length).astype(np.float32)
        padded = np.concatenate([np.zeros(3_840, np.float32), samples])
        theirs = np.stack([window for window, _ in inference.window_audio_file(padded, 36_164)])
        ours = preprocessor.laid_out(preprocessor.clip_windows(samples))
        assert ours.shape == theirs.shape, length
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize(
    ("changes", "parameter", "words"),
    [
        ({"until": "always"}, "windows.until", "end_covered, start_in_clip"),
        ({"min_coverage": 0.5}, "windows.min_coverage", "read where until is end_covered"),
        ({"until": "end_covered"}, "windows.min_coverage", "needs 'min_coverage'"),
        ({"pad_start": -1}, "windows.pad_start", "from 0 to"),
    ],
)
def test_a_bad_window_parameter_is_refused_naming_it(
    changes: dict[str, Any], parameter: str, words: str
) -> None:
    with pytest.raises(ProcessingError) as raised:
        ClipPreprocessor(
            {"sample_rate": RATE, "element_type": "float32", "windows": {**WINDOWS, **changes}}
        )
    assert raised.value.parameter == parameter
    assert words in str(raised.value)
    with pytest.raises(ProcessingError, match="a spectrogram's is spectrogram.layout"):
        ClipPreprocessor(
            {
                "sample_rate": RATE,
                "element_type": "float32",
                "layout": "NTC",
                "spectrogram": {
                    "kind": "mel",
                    "library": "librosa",
                    "n_fft": 400,
                    "hop_length": 160,
                    "n_mels": 40,
                    "layout": "frames_first",
                },
            }
        )


def test_frames_are_trimmed_and_pooled_and_refused_where_they_cannot_be() -> None:
    from predictors.manifests.rules import validate
    from predictors.processing.frames import pool_frames

    scores = np.arange(2 * 6 * 3, dtype=np.float32).reshape(2, 6, 3)
    pooled = pool_frames(scores, {"axis": 1, "trim": 2, "pool": "max"})
    np.testing.assert_array_equal(pooled, scores[:, 3, :])
    mean = pool_frames(np.swapaxes(scores, 1, 2), {"axis": 2, "trim": 1, "pool": "mean"})
    np.testing.assert_allclose(mean, scores[:, 1:5, :].mean(axis=1))
    with pytest.raises(ProcessingError, match="none would be left"):
        pool_frames(scores, {"axis": 1, "trim": 3, "pool": "max"})
    with pytest.raises(ProcessingError, match="the model gives shape"):
        pool_frames(scores[:, 0, :], {"axis": 1, "pool": "max"})
    data = dict(Catalog().find_model("basic-pitch", "*", "tensorflow").data)
    coded = {**data, "postprocess": "def postprocess(outputs):\n    return outputs\n"}
    problems = {p["path"]: p["message"] for p in validate(coded, "model", {})}
    assert "do one or the other" in problems["outputs.0.parameters.frames"], problems
    tagged = {**data, "task": "semantic_segmentation"}
    problems = {p["path"]: p["message"] for p in validate(tagged, "model", {})}
    assert "this is a semantic_segmentation model" in problems["outputs.0.parameters.frames"]
