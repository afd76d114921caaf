"""A pretrained PyTorch model shipped as a state dict with its class, reading whole audio clips
as mel spectrograms cut into windows, scored as embeddings: Resemblyzer's speaker encoder as its
wheel ships it (an old-style training checkpoint). Its recall and equal error rate on
`speaker-clips` are those of the package's own pipeline (`VoiceEncoder.embed_utterance`) on the
same clips, and so is every clip's embedding (docs/models.md writes down the procedure).

The clip input's spectrogram is librosa's, its windows are the package's partial utterances
(checked against `VoiceEncoder.compute_partial_slices` on many lengths), and the metrics are
checked on embeddings whose answer is known by construction.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenarios.embedding import embedding_metrics, equal_error_rate
from predictors.manifests.catalog import Catalog
from predictors.manifests.rules import validate
from predictors.processing import ProcessingError, preprocessor_for
from predictors.processing.clips import ClipPreprocessor
from predictors.tasks import unsupported
from predictors.zoo.pretrained import package_file
from predictors.zoo.speakers import ENCODER, SPEAKERS
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free

RATE = 16_000
MELS = {
    "kind": "mel",
    "library": "librosa",
    "n_fft": 400,
    "hop_length": 160,
    "n_mels": 40,
    "layout": "frames_first",
}
PARTIALS = {"size": 160, "hop": 77, "min_coverage": 0.75, "combine": "mean"}
CLIPS = {"sample_rate": RATE, "element_type": "float32", "spectrogram": MELS, "windows": PARTIALS}


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("speaker-encoder", "speaker-clips"))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "model": "speaker-encoder",
        "framework": "pytorch",
        "dataset": "speaker-clips",
        "threads": 1,
        "repeat": 1,
        "custom_code": True,
    }


def _clips(store: Path) -> tuple[list[bytes], list[int]]:
    table = pq.read_table(store / "datasets/speaker-clips/1.0.0/validation.parquet")
    return table.column("audio").to_pylist(), table.column("label").to_pylist()


def _samples(clip: bytes) -> np.ndarray:
    import soundfile

    samples, rate = soundfile.read(io.BytesIO(clip), dtype="float32")
    assert rate == RATE
    return samples


def test_recall_eer_and_every_embedding_are_the_packages_own(
    store: Path, run_evaluation: RunEvaluation
) -> None:
    from resemblyzer import VoiceEncoder

    clips, speakers = _clips(store)
    encoder = VoiceEncoder("cpu", verbose=False)
    theirs = np.stack([encoder.embed_utterance(_samples(clip)) for clip in clips])
    expected = embedding_metrics(theirs, np.asarray(speakers))
    their_nearest = _nearest(theirs)

    for batch_size in (1, 4):
        evaluation = run_evaluation(batch_sizes=(batch_size,))
        accuracy = evaluation.result["accuracy"]
        assert accuracy["count"] == len(clips) == 60
        for key in ("recall_at_1", "recall_at_5", "eer"):
            assert abs(accuracy[key] - expected[key]) <= 0.005, (key, accuracy, expected)
        assert accuracy["top1"] == accuracy["recall_at_1"]
        assert accuracy["top5"] == accuracy["recall_at_5"]
        assert accuracy["identities"] == len(SPEAKERS) and accuracy["pairs"] == 60 * 59 // 2
        # Clip by clip: the same embedding, and the same nearest other clip.
        ours = evaluation.outputs
        assert ours.shape == (60, 256)
        cosines = np.sum(ours * theirs, axis=1) / np.linalg.norm(ours, axis=1)
        assert cosines.min() >= 0.9999, cosines.min()
        agreement = float(np.mean(_nearest(ours) == their_nearest))
        assert agreement >= 0.99, agreement
        # Each prediction names the nearest other clip's speaker.
        named = [prediction[0][1] for prediction in evaluation.predictions]
        assert named == [SPEAKERS[speakers[j]] for j in their_nearest]
        # A batch of N clips is one call on all their windows: N inputs timed per batch.
        assert evaluation.result["batch_sizes"][0]["timed_inputs"] == 60
    # An encoder worth its name on ten synthetic voices.
    assert expected["recall_at_1"] >= 0.6 and expected["eer"] <= 0.2


def _nearest(vectors: np.ndarray) -> np.ndarray:
    units = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = units @ units.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity.argmax(axis=1)


def test_the_checkpoint_is_the_wheels_and_loads_strictly_under_its_key(store: Path) -> None:
    import torch

    from predictors.frameworks.torch_formats import load_state_dict_module, state_dict_problems

    folder = store / "models/speaker-encoder/1.0.0"
    weights = (folder / ENCODER.file).read_bytes()
    assert weights == package_file(ENCODER)
    assert hashlib.sha256(weights).hexdigest() == ENCODER.sha256
    source = folder / "voice_encoder.py"
    assert state_dict_problems(source, folder / ENCODER.file, "VoiceEncoder", "model_state") == []
    # Without the key the file is named for what it is, with the key to give.
    (problem,) = state_dict_problems(source, folder / ENCODER.file, "VoiceEncoder")
    assert "under the key 'model_state'" in problem and "model.state_key: model_state" in problem
    (problem,) = state_dict_problems(source, folder / ENCODER.file, "VoiceEncoder", "weights")
    assert "model.state_key is 'weights'" in problem and "'model_state'" in problem
    module = load_state_dict_module(
        source, folder / ENCODER.file, "VoiceEncoder", torch.device("cpu"), state_key="model_state"
    )
    from resemblyzer import VoiceEncoder

    theirs = VoiceEncoder("cpu", verbose=False)
    mels = torch.randn(3, 160, 40).abs()
    with torch.no_grad():
        torch.testing.assert_close(module(mels), theirs(mels))


def test_the_windows_are_the_packages_partial_utterances() -> None:
    from resemblyzer import VoiceEncoder, wav_to_mel_spectrogram

    preprocessor = ClipPreprocessor(CLIPS)
    assert preprocessor.windowing is not None and preprocessor.spectrogram is not None
    rng = np.random.default_rng(3)
    lengths = [400, 12_320, 25_599, 25_600, 25_601, 37_919, 37_920, 37_921, 160_000]
    lengths += rng.integers(1_000, 200_000, 40).tolist()
    for length in lengths:
        _, slices = VoiceEncoder.compute_partial_slices(length, 1.3, 0.75)
        starts = preprocessor.windowing.starts(1 + length // 160, length, 160)
        assert starts == [s.start for s in slices], length
    # The windows themselves: the package's partial spectrograms of the zero-padded clip.
    samples = rng.uniform(-0.5, 0.5, 50_000).astype(np.float32)
    windows = preprocessor.clip_windows(samples)
    wav_slices, mel_slices = VoiceEncoder.compute_partial_slices(len(samples), 1.3, 0.75)
    padded = np.pad(samples, (0, max(0, wav_slices[-1].stop - len(samples))))
    mel = wav_to_mel_spectrogram(padded)
    np.testing.assert_array_equal(windows, np.stack([mel[s] for s in mel_slices]))


def test_the_spectrogram_is_librosas_in_each_kind_and_layout() -> None:
    import librosa

    samples = np.random.default_rng(4).uniform(-0.5, 0.5, 8_000).astype(np.float32)
    mel = librosa.feature.melspectrogram(y=samples, sr=RATE, n_fft=400, hop_length=160, n_mels=40)
    plain = ClipPreprocessor({"sample_rate": RATE, "element_type": "float32", "spectrogram": MELS})
    np.testing.assert_array_equal(plain.features(samples), mel.astype(np.float32).T)
    logged = ClipPreprocessor(
        {
            "sample_rate": RATE,
            "element_type": "float32",
            "spectrogram": {**MELS, "kind": "log_mel", "layout": "mels_first", "top_db": None},
        }
    )
    clip = _flac(samples)
    batch = logged.batch([clip, clip])
    decoded = plain.samples(clip)
    expected = librosa.power_to_db(
        librosa.feature.melspectrogram(y=decoded, sr=RATE, n_fft=400, hop_length=160, n_mels=40),
        top_db=None,
    ).astype(np.float32)
    assert batch.shape == (2, 40, 51)
    np.testing.assert_array_equal(batch[1], expected)
    # Whole clips of two lengths cannot be stacked: the message says what to do.
    with pytest.raises(ProcessingError, match="batch size 1, or cut them into windows"):
        plain.batch([clip, _flac(samples[:4_000])])
    # Windows of samples (no spectrogram), combined by max.
    raw = ClipPreprocessor(
        {
            "sample_rate": RATE,
            "element_type": "float32",
            "windows": {"size": 3_000, "hop": 2_000, "min_coverage": 0.5, "combine": "max"},
        }
    )
    windows, counts = raw.windows([clip])
    # 8,000 samples: windows at 0, 2,000, 4,000 and 6,000 (covering 2,000 of 3,000: kept).
    assert counts == [4] and windows.shape == (4, 3_000)
    np.testing.assert_array_equal(windows[3, 2_000:], 0)
    outputs = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(raw.windowing.combined(outputs, [1, 3]), [[0, 1], [6, 7]])


def test_a_clip_too_large_to_hold_is_refused_before_it_is_made() -> None:
    long_windows = {**PARTIALS, "size": 3_700 * 100}  # 160 samples a frame: past an hour
    with pytest.raises(ProcessingError, match="at most the longest clip read") as raised:
        ClipPreprocessor({**CLIPS, "windows": long_windows})
    assert raised.value.parameter == "windows.size"
    dense = ClipPreprocessor(
        {"sample_rate": RATE, "element_type": "float32", "spectrogram": {**MELS, "hop_length": 1}}
    )
    with pytest.raises(ProcessingError, match="raise spectrogram.hop_length or lower n_fft"):
        dense.features(np.zeros(RATE * 60, np.float32))
    many = ClipPreprocessor(
        {
            "sample_rate": RATE,
            "element_type": "float32",
            "windows": {"size": 4, "hop": 1, "until": "start_in_clip", "combine": "mean"},
        }
    )
    with pytest.raises(ProcessingError, match="more than 4096 windows"):
        many.clip_windows(np.zeros(10_000, np.float32))
    wide = ClipPreprocessor(
        {
            "sample_rate": RATE,
            "element_type": "float32",
            "windows": {"size": 40_000, "hop": 12, "min_coverage": 1, "combine": "mean"},
        }
    )
    with pytest.raises(ProcessingError, match="would hold more than"):
        wide.clip_windows(np.zeros(80_000, np.float32))  # 3,334 windows of 40,000
    # Frames not centred: each window still has its size in frames, for any clip length.
    uncentred = ClipPreprocessor(
        {**CLIPS, "spectrogram": {**MELS, "center": False}, "windows": PARTIALS}
    )
    for length in (100, 16_000, 25_999, 40_000):
        windows = uncentred.clip_windows(np.ones(length, np.float32))
        assert windows.shape[1:] == (160, 40), length


def _flac(samples: np.ndarray) -> bytes:
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, RATE, format="FLAC", subtype="PCM_24")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("changes", "parameter", "words"),
    [
        ({"spectrogram": {**MELS, "kind": "mfcc"}}, "spectrogram.kind", "mel, log_mel"),
        ({"spectrogram": {**MELS, "library": "torchaudio"}}, "spectrogram.library", "no build"),
        ({"spectrogram": {**MELS, "n_fft": 1}}, "spectrogram.n_fft", "from 2 to"),
        ({"spectrogram": {**MELS, "top_db": 80}}, "spectrogram.top_db", "log_mel key"),
        ({"spectrogram": {**MELS, "fmax": 9_000}}, "spectrogram.fmax", "to 8000.0"),
        ({"spectrogram": {**MELS, "colour": 1}}, "spectrogram.colour", "unknown key"),
        (
            {"spectrogram": {k: v for k, v in MELS.items() if k != "layout"}},
            "spectrogram.layout",
            "needs",
        ),
        ({"windows": {**PARTIALS, "hop": 161}}, "windows.hop", "from 1 to 160"),
        ({"windows": {**PARTIALS, "min_coverage": 0}}, "windows.min_coverage", "above 0"),
        ({"windows": {**PARTIALS, "combine": "first"}}, "windows.combine", "mean, max"),
        ({"tail": "pad"}, "tail", "needs 'chunk'"),
        ({"gain": 2}, "gain", "unknown audio input parameter"),
    ],
)
def test_a_bad_clip_parameter_is_refused_naming_it(
    changes: dict[str, Any], parameter: str, words: str
) -> None:
    with pytest.raises(ProcessingError) as raised:
        ClipPreprocessor({**CLIPS, **changes})
    assert raised.value.parameter == parameter
    assert words in str(raised.value)
    # And the manifest says so at upload, at that field.
    data = _manifest()
    data["inputs"][0]["parameters"] = {**CLIPS, **changes}
    problems = {problem["path"]: problem["message"] for problem in validate(data, "model", {})}
    where = "inputs.0.parameters"
    assert any(path.startswith(where) for path in problems), problems


def _manifest() -> dict[str, Any]:
    import copy

    return copy.deepcopy(dict(Catalog().find_model("speaker-encoder", "*", "pytorch").data))


def test_the_task_takes_whole_clips_and_a_stream_takes_chunks() -> None:
    data = _manifest()
    assert unsupported(data) is None and validate(data, "model", {}) == []
    assert isinstance(preprocessor_for(data["inputs"][0]), ClipPreprocessor)
    streamed = _manifest()
    streamed["inputs"][0]["parameters"] = {**CLIPS, "chunk": 512, "tail": "pad"}
    problems = validate(streamed, "model", {})
    assert [p["path"] for p in problems] == ["inputs.0.parameters.spectrogram"], problems
    streamed["inputs"][0]["parameters"] = {
        "sample_rate": RATE,
        "element_type": "float32",
        "chunk": 512,
        "tail": "pad",
    }
    assert "only sequence_labelling models run on streams" in str(unsupported(streamed))
    classifier = {**_manifest(), "task": "image_classification"}
    assert "for feature_extraction models" in str(unsupported(classifier))
    # LoadGen drives samples of one shape: not clips of any length.
    from predictors.tasks import loadgen_problem

    assert "LoadGen scenarios drive samples of one shape" in str(
        loadgen_problem(_manifest(), "Offline")
    )
    labelled = _manifest()
    labelled["outputs"][0]["parameters"] = {"labels": ["a"]}
    problems = validate(labelled, "model", {})
    assert [p["path"] for p in problems] == ["outputs.0.parameters.labels"], problems


def test_the_metrics_on_embeddings_whose_answer_is_known() -> None:
    rng = np.random.default_rng(5)
    identities = np.repeat(np.arange(6), 5)
    # Each identity its own axis, a little noise: every neighbour is of the same identity.
    apart = np.eye(8)[identities] + rng.normal(0, 0.01, (30, 8))
    metrics = embedding_metrics(apart, identities)
    assert metrics["recall_at_1"] == metrics["recall_at_5"] == 1.0 and metrics["eer"] == 0.0
    assert metrics["queries"] == 30 and metrics["pairs"] == 435 and metrics["identities"] == 6
    # Directions that say nothing of the identity: an EER of a half, a recall@1 of chance.
    noise = rng.normal(size=(600, 64))
    labels = np.repeat(np.arange(30), 20)
    metrics = embedding_metrics(noise, labels)
    assert abs(metrics["eer"] - 0.5) < 0.03
    assert abs(metrics["recall_at_1"] - 19 / 599) < 0.03
    # A pair list worked by hand: same-identity scores 0.9, 0.8, 0.7, 0.2 and other 0.75, 0.3,
    # 0.1, 0.05. At 0.7 one of four of each is wrong either way: an EER of 0.25.
    same = np.array([True] * 4 + [False] * 4)
    scores = np.array([0.9, 0.8, 0.7, 0.2, 0.75, 0.3, 0.1, 0.05])
    rate, threshold = equal_error_rate(same, scores)
    assert rate == pytest.approx(0.25) and threshold == pytest.approx(0.7)
    assert equal_error_rate(np.array([True, True]), np.array([0.1, 0.2])) is None
    # A clip whose identity has no other clip is no query; an all-zero embedding is refused.
    lone = embedding_metrics(np.array([[1.0, 0.0], [-1.0, 0.0], [0.9, 0.1]]), np.array([0, 0, 1]))
    assert lone["queries"] == 2 and lone["recall_at_1"] == 0.0 and lone["recall_at_5"] == 1.0
    with pytest.raises(EvaluationError, match="input 1's embedding is all zeros"):
        embedding_metrics(np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([0, 1]))
    # Ties count against the query, whatever the order of the split: embeddings that say
    # nothing (all alike) retrieve nothing.
    alike = np.ones((30, 4))
    for order in (np.repeat(np.arange(6), 5), np.tile(np.arange(6), 5)):
        metrics = embedding_metrics(alike, order)
        assert metrics["recall_at_1"] == metrics["recall_at_5"] == 0.0
        assert metrics["eer"] == pytest.approx(0.5, abs=0.5)  # one threshold: no crossing
    with pytest.raises(EvaluationError, match="no identity has two of the 3 inputs"):
        embedding_metrics(np.eye(3), np.array([0, 1, 2]))


def test_every_pair_of_at_most_max_inputs_is_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    from predictors.evaluation.scenarios import embedding

    rng = np.random.default_rng(8)
    vectors, identities = rng.normal(size=(1500, 16)), np.repeat(np.arange(300), 5)
    # Blocks of rows give what the whole matrix gives.
    monkeypatch.setattr(embedding, "_BLOCK", 97)
    blocked = embedding_metrics(vectors, identities)
    monkeypatch.setattr(embedding, "_BLOCK", 4096)
    assert embedding_metrics(vectors, identities) == blocked
    assert blocked["pairs"] == 1500 * 1499 // 2
    monkeypatch.setattr(embedding, "MAX_INPUTS", 1000)
    with pytest.raises(EvaluationError, match="every pair of at most 1000 inputs"):
        embedding_metrics(vectors, identities)
