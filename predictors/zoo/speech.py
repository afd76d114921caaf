"""The zoo's speech clips: made locally by a speech synthesizer, labelled chunk by chunk.

A voice-activity detector is judged on audio whose speech it did not hear before, with the
truth of where the speech is. Nothing can be downloaded, so the clips are made here: phrases
of the Zen of Python spoken by eSpeak NG (Debian's `espeak-ng`, in varied voices, speeds and
pitches), resampled to 16 kHz, placed with pauses in between on a background of noise and hum,
at varied loudness, and stored as FLAC with its spoken phrases as labelled segments (from each
phrase's first to its last audible sample: the pauses between the words of a phrase count as
speech, as a VAD that keeps a phrase whole treats them). A model's audio input frames each clip
into chunks (`predictors.processing.audio`): a chunk is speech (1) when at least half of it lies inside a
phrase.

``datasets/speech-clips/1.0.0/validation.parquet``: a row per clip, the columns ``audio`` (FLAC,
16-bit, mono, 16 kHz), ``segments`` (the phrases' [start, end] in seconds) and
``segment_classes`` (1, speech, for each).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from predictors.zoo.common import build_splits, dataset_metadata, parquet_bytes
from predictors.zoo.store import Unavailable

DATASET = "speech-clips"
LABELS = ("non-speech", "speech")
RATE = 16_000
SEED = 20261126
CLIPS = 48
VOICES = ("en", "en-us", "en-gb-x-rp", "en+f3", "en+m3", "en-us+f2", "en+m7", "en-029")
# A phrase's audible extent: from the first to the last sample above this (of full scale).
AUDIBLE = 0.02


class SynthesizerMissing(Unavailable):
    """espeak-ng is not installed."""


def _espeak() -> str:
    program = shutil.which("espeak-ng")
    if program is None:
        raise SynthesizerMissing(
            f"datasets/{DATASET} is spoken by eSpeak NG, which is not installed: "
            "apt-get install espeak-ng (make zoo installs it where it may)"
        )
    return program


def _speak(program: str, text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """The phrase as float32 samples at RATE, trimmed to its audible extent."""
    from scipy.signal import resample_poly

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "phrase.wav"
        subprocess.run(
            [program, "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(path), text],
            check=True,
            capture_output=True,
            timeout=60,
        )
        with wave.open(str(path)) as audio:
            rate = audio.getframerate()
            frames = audio.readframes(audio.getnframes())
    samples = np.frombuffer(frames, dtype="<i2").astype(np.float64) / 32768.0
    samples = resample_poly(samples, RATE, rate)
    audible = np.flatnonzero(np.abs(samples) > AUDIBLE)
    return samples[audible[0] : audible[-1] + 1].astype(np.float32)


def _clip(
    rng: np.random.Generator, program: str, phrases: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """One clip (float32 samples) and the mask of its spoken samples."""
    pieces: list[np.ndarray] = []
    spoken: list[np.ndarray] = []

    def pause() -> None:
        length = int(rng.uniform(0.3, 1.6) * RATE)
        pieces.append(np.zeros(length, np.float32))
        spoken.append(np.zeros(length, bool))

    pause()
    for _ in range(int(rng.integers(1, 4))):
        voice = VOICES[int(rng.integers(len(VOICES)))]
        text = phrases[int(rng.integers(len(phrases)))]
        phrase = _speak(
            program, text, voice, int(rng.integers(120, 200)), int(rng.integers(25, 75))
        )
        pieces.append(phrase * float(rng.uniform(0.3, 1.0)))
        spoken.append(np.ones(len(phrase), bool))
        pause()
    samples = np.concatenate(pieces)
    time = np.arange(len(samples)) / RATE
    background = rng.normal(0.0, rng.uniform(0.001, 0.01), len(samples))
    background += rng.uniform(0.0, 0.01) * np.sin(2 * np.pi * rng.choice([50.0, 60.0]) * time)
    audio = np.clip(samples + background, -1.0, 1.0).astype(np.float32)
    return audio, np.concatenate(spoken)


def make_clips() -> list[tuple[bytes, list[list[float]]]]:
    """Every clip as FLAC bytes (16-bit, mono, RATE), with its spoken phrases as [start, end]
    in seconds."""
    import soundfile

    from predictors.zoo.datasets import zen_lines

    program = _espeak()
    phrases = zen_lines()
    rng = np.random.default_rng(SEED)
    clips = []
    for _ in range(CLIPS):
        audio, spoken = _clip(rng, program, phrases)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], spoken.astype(np.int8), [0]])))
        segments = [[start / RATE, end / RATE] for start, end in edges.reshape(-1, 2).tolist()]
        buffer = io.BytesIO()
        soundfile.write(buffer, audio, RATE, format="FLAC", subtype="PCM_16")
        clips.append((buffer.getvalue(), segments))
    return clips


def to_parquet(clips: list[tuple[bytes, list[list[float]]]]) -> bytes:
    import pyarrow as pa

    columns = [
        ("audio", [audio for audio, _ in clips], pa.binary()),
        ("segments", [segments for _, segments in clips], pa.list_(pa.list_(pa.float64(), 2))),
        ("segment_classes", [[1] * len(segments) for _, segments in clips], pa.list_(pa.int64())),
    ]
    return parquet_bytes(columns, dataset_metadata(DATASET, LABELS), row_group_size=16)


def build_dataset(store: str) -> dict:
    clips = make_clips()
    return build_splits(
        store, DATASET, LABELS, "flac", {"validation": (to_parquet(clips), len(clips))}
    )
