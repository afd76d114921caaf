"""The zoo's pitch detector and its dataset: which piano keys sound in a clip.

``piano-chords``: clips of 1 to 3 notes struck together (MIDI 45 to 84, A2 to C6), each a
tone of six harmonics with a quick attack and an exponential decay, 1 to 3 s at 22,050 Hz
with a little noise, made locally from a fixed seed; 16-bit FLAC. Each row's ``audio`` holds
the clip and its ``label`` the indices of its notes among the 88 piano keys (A0, the key of
MIDI 21, first).

``basic-pitch``: Spotify's Basic Pitch (ICASSP 2022), a polyphonic note transcription model,
as the basic-pitch 0.4.0 wheel ships it for TensorFlow Lite
(``basic_pitch/saved_models/icassp_2022/nmp.tflite``, checked by its SHA-256): windows of
43,844 samples at 22,050 Hz in, three outputs out per window of 172 frames (``note``: each
key's probability of sounding, ``onset``: of starting, ``contour``: a pitch salience of 264
bins). The manifest's audio input is the package's ``run_inference``: 3,840 zero samples
before the clip (half the 30 frames the windows overlap), a window every 36,164 samples while
it starts within the clip, the last padded with zeros. Its ``note`` output's ``frames`` parameter
keeps each window's frames without the 15 it overlaps at each end, as the package's
``unwrap_output`` does, and each key's highest probability over them; the windows' highest
make the clip's: which keys sound in it, scored as multi-label classification (no custom
code). ``onset`` and ``contour`` are computed and not read.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/piano-chords/1.0.0/validation.parquet``: ``audio`` (FLAC) and ``label``;
- ``models/basic-pitch/1.0.0/basic-pitch.tflite``.
"""

from __future__ import annotations

import io

import numpy as np

from predictors.zoo.common import build_generated
from predictors.zoo.pretrained import Pretrained, store_pretrained

DATASET = "piano-chords"
MODEL = "basic-pitch"
SEED = 20261130
RATE = 22_050
CLIPS = 80
LOWEST, HIGHEST = 45, 84  # the notes the chords take, MIDI (A2 to C6)
# The 88 piano keys, A0 (MIDI 21) to C8 (MIDI 108): the model's note axis.
NAMES = ("C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B")
KEYS = tuple(f"{NAMES[midi % 12]}{midi // 12 - 1}" for midi in range(21, 109))

TRANSCRIBER = Pretrained(
    name=MODEL,
    package="basic-pitch",
    version="0.4.0",
    module="basic_pitch",
    resource="saved_models/icassp_2022/nmp.tflite",
    sha256="3db297d54af8e01c6e5618245c956b1d71b6a2b978cb2dedb527173186552676",
    file="basic-pitch.tflite",
    license="Apache-2.0",
)


def _tone(rng: np.random.Generator, midi: int, length: int) -> np.ndarray:
    """A struck tone: six harmonics (those under the Nyquist frequency), each of a random
    level and phase, a 10 ms attack and an exponential decay."""
    frequency = 440.0 * 2 ** ((midi - 69) / 12)
    time = np.arange(length) / RATE
    tone = np.zeros(length)
    for harmonic in range(1, 7):
        if harmonic * frequency < RATE / 2:
            level = rng.uniform(0.6, 1.0) / harmonic**1.3
            phase = rng.uniform(0.0, 2 * np.pi)
            tone += level * np.sin(2 * np.pi * harmonic * frequency * time + phase)
    return tone * np.minimum(1.0, time / 0.01) * np.exp(-time / rng.uniform(0.8, 1.6))


def make_clips() -> tuple[list[bytes], list[list[int]]]:
    """Every clip as FLAC bytes (16-bit, mono, RATE) and its notes' key indices."""
    import soundfile

    rng = np.random.default_rng(SEED)
    clips: list[bytes] = []
    keys: list[list[int]] = []
    for _ in range(CLIPS):
        length = int(rng.uniform(1.0, 3.0) * RATE)
        notes = sorted(
            int(n)
            for n in rng.choice(np.arange(LOWEST, HIGHEST + 1), rng.integers(1, 4), replace=False)
        )
        start = int(rng.uniform(0.05, 0.3) * RATE)
        samples = np.zeros(length)
        for note in notes:
            samples[start:] += _tone(rng, note, length - start)
        samples = samples / np.abs(samples).max() * rng.uniform(0.4, 0.8)
        samples += rng.normal(0.0, 0.002, length)
        buffer = io.BytesIO()
        soundfile.write(
            buffer,
            np.clip(samples, -1.0, 1.0).astype(np.float32),
            RATE,
            format="FLAC",
            subtype="PCM_16",
        )
        clips.append(buffer.getvalue())
        keys.append([note - 21 for note in notes])
    return clips, keys


def build_dataset(store: str) -> dict:
    import pyarrow as pa

    clips, keys = make_clips()
    return build_generated(
        store,
        DATASET,
        list(KEYS),
        "flac",
        lambda split: [("audio", clips, pa.binary()), ("label", keys, pa.list_(pa.int64()))],
        ("validation",),
    )


def build_model(store: str) -> dict:
    return store_pretrained(store, TRANSCRIBER)
