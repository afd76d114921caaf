"""Audio inputs (`predictors.processing.audio`): clips decoded by libsndfile, mixed to mono, resampled and
framed into chunks whose labels come from the clip's segments; and the checks of clip splits."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from predictors.data import split_problems
from predictors.processing import ProcessingError, preprocessor_for
from predictors.processing.audio import AudioPreprocessor
from predictors.tasks import unsupported

pytestmark = pytest.mark.database_free

PARAMETERS = {"sample_rate": 16000, "chunk": 400, "tail": "drop", "element_type": "float32"}


def _clip(samples: np.ndarray, rate: int, audio_format: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(
        buffer,
        samples,
        rate,
        format=audio_format,
        subtype="FLOAT" if audio_format == "WAV" else "PCM_16",
    )
    return buffer.getvalue()


def test_a_stereo_clip_at_another_rate_is_mixed_resampled_and_framed() -> None:
    rate = 44100
    time = np.arange(rate) / rate  # one second
    left = 0.5 * np.sin(2 * np.pi * 440 * time)
    stereo = np.stack([left, -left * 0.0 + 0.25], axis=1).astype(np.float32)
    encoded = _clip(stereo, rate)
    preprocessor = AudioPreprocessor(PARAMETERS)
    mono = preprocessor.samples(encoded)
    assert len(mono) == 16000
    # The mean of the two channels, resampled: the tone's half plus a constant quarter's half.
    assert float(np.mean(mono)) == pytest.approx(0.125, abs=2e-3)
    chunks, labels = preprocessor.frames(encoded, [], [])
    assert chunks.shape == (40, 400) and preprocessor.chunks_in(encoded) == 40
    assert labels.tolist() == [0] * 40


def test_chunks_take_the_class_that_covers_most_of_them() -> None:
    encoded = _clip(np.zeros(16000 * 2, np.float32), 16000, "FLAC")
    preprocessor = AudioPreprocessor({**PARAMETERS, "tail": "pad", "chunk": 1000})
    # Chunks of 1000 samples (62.5 ms): 0.5..1.0 s is class 1 (chunks 8 to 15), 1.0..1.21 s
    # class 2 (chunks 16 to 18; chunk 19 holds 360 samples of it, less than half: background).
    chunks, labels = preprocessor.frames(encoded, [[0.5, 1.0], [1.0, 1.21]], [1, 2])
    assert chunks.shape == (32, 1000)
    assert labels[7] == 0 and labels[8:16].tolist() == [1] * 8
    assert labels[16:19].tolist() == [2, 2, 2] and labels[19] == 0
    odd = _clip(np.zeros(16500, np.float32), 16000)
    assert AudioPreprocessor({**PARAMETERS, "tail": "pad", "chunk": 1000}).chunks_in(odd) == 17
    assert AudioPreprocessor({**PARAMETERS, "chunk": 1000}).chunks_in(odd) == 16


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({**PARAMETERS, "tail": "keep"}, "'tail' must be drop or pad"),
        ({**PARAMETERS, "chunk": 0}, "'chunk' must be an integer >= 1"),
        ({k: v for k, v in PARAMETERS.items() if k != "sample_rate"}, "'sample_rate' is missing"),
        ({**PARAMETERS, "gain": 2}, "unknown audio input parameter 'gain'"),
    ],
)
def test_audio_parameters_are_checked_naming_them(parameters: dict[str, Any], message: str) -> None:
    with pytest.raises(ProcessingError, match=message):
        preprocessor_for({"name": "a", "type": "audio", "parameters": parameters})


def test_a_clip_libsndfile_cannot_read_is_an_error_saying_so() -> None:
    with pytest.raises(ProcessingError, match="cannot be read as audio"):
        AudioPreprocessor(PARAMETERS).chunks_in(b"RIFF....not a wave")


@pytest.mark.parametrize(
    ("audio", "segments", "classes", "message"),
    [
        (None, [[0.1, 0.2]], [1], "row 0 has no audio"),
        ("ok", [[0.5, 0.2]], [1], "row 0 has segment 0 [0.5, 0.2], not [start, end]"),
        ("ok", [[0.1, 0.2]], [5], "row 0 has class 5 for segment 0, but the dataset has 2"),
        ("ok", [[0.1, 0.2]], [1, 1], "row 0 has 1 segments but 2 segment_classes"),
        (b"fLaC-but-not", [], [], "row 0 has audio that cannot be read as audio"),
        (b"RIFFxxxxWAVE", [], [], "row 0's audio is not FLAC"),
    ],
)
def test_a_clip_split_is_checked_clip_by_clip(
    tmp_path: Path, audio: Any, segments: Any, classes: Any, message: str
) -> None:
    if audio == "ok":
        audio = _clip(np.zeros(1600, np.float32), 16000, "FLAC")
    path = tmp_path / "c.parquet"
    pq.write_table(
        pa.table(
            {
                "audio": pa.array([audio], pa.binary()),
                "segments": pa.array([segments], pa.list_(pa.list_(pa.float64()))),
                "segment_classes": pa.array([classes], pa.list_(pa.int64())),
            }
        ),
        path,
    )
    problems = split_problems(path, labels=2, encoding="flac", count=1, clips=True)
    assert any(message in problem for problem in problems), problems


def test_a_streamed_audio_input_is_for_sequence_labelling_models_only() -> None:
    data = {
        "kind": "model",
        "name": "vad",
        "task": "image_classification",
        "inputs": [{"name": "x", "type": "audio", "parameters": PARAMETERS}],
        "outputs": [{"name": "y", "type": "logits", "parameters": {"top_k": 1, "labels": ["a"]}}],
    }
    assert "is audio framed into chunks of a stream (parameter chunk)" in str(unsupported(data))
    # Whole clips (no chunk) are for feature extraction; a stream's model needs its chunks.
    whole = {"sample_rate": 16000, "element_type": "float32"}
    data["inputs"][0]["parameters"] = whole
    assert "for feature_extraction models" in str(unsupported(data))
    data["task"] = "sequence_labelling"
    assert "give the parameters chunk and tail" in str(unsupported(data))


def test_overlapping_segments_of_one_class_count_once() -> None:
    encoded = _clip(np.zeros(4000, np.float32), 16000)
    preprocessor = AudioPreprocessor({**PARAMETERS, "chunk": 1000})
    # Two 30 % segments of the first chunk, overlapping: 400 samples covered, not 600.
    _, labels = preprocessor.frames(encoded, [[0.0, 0.01875], [0.00625, 0.025]], [1, 1])
    assert labels[0] == 0
    _, labels = preprocessor.frames(encoded, [[0.0, 0.01875], [0.025, 0.04375]], [1, 1])
    assert labels[0] == 1  # disjoint: 300 + 300 samples


def test_a_clip_shorter_than_a_chunk_makes_no_stream(tmp_path: Path) -> None:
    from predictors.data import ClipStreams

    path = tmp_path / "c.parquet"
    clips = [_clip(np.zeros(n, np.float32), 16000, "FLAC") for n in (1000, 100, 2500)]
    pq.write_table(
        pa.table(
            {
                "audio": pa.array(clips, pa.binary()),
                "segments": pa.array([[], [], []], pa.list_(pa.list_(pa.float64()))),
                "segment_classes": pa.array([[], [], []], pa.list_(pa.int64())),
            }
        ),
        path,
    )
    preprocessor = AudioPreprocessor({**PARAMETERS, "chunk": 500})
    streams = ClipStreams(path, preprocessor)
    assert streams.lengths == [2, 5] and streams.count == 7
    assert [preprocessor.stream(*item)[0].shape for item in streams] == [(2, 500), (5, 500)]
    assert ClipStreams(path, preprocessor, limit=3).lengths == [2, 1]


def test_an_audio_model_with_custom_preprocess_code_is_refused() -> None:
    data = {
        "kind": "model",
        "name": "vad",
        "task": "sequence_labelling",
        "preprocess": "def preprocess(example):\n    return example\n",
        "inputs": [{"name": "x", "type": "audio", "parameters": PARAMETERS}],
        "outputs": [{"name": "y", "type": "logits", "parameters": {"top_k": 1, "labels": ["a"]}}],
    }
    assert "custom preprocess code does not run on it" in str(unsupported(data))
