"""The zoo's speaker encoder and its dataset: voices told apart by their embeddings.

``speaker-clips``: utterances of phrases of the Zen of Python, each spoken by one of ten
eSpeak NG voices (Debian's ``espeak-ng``: its English voices with voice variants, each a
speaker of its own), at varied speeds and pitches, on a little noise; 6 utterances a speaker,
16 kHz FLAC. Each clip is as the encoder's package prepares an utterance before it embeds it
(``resemblyzer.preprocess_wav``: its volume normalized to -30 dBFS, silences longer than its
WebRTC VAD allows cut out), so that the dataset holds what the model's pipeline reads. Each
row's ``audio`` holds the clip and its ``label`` the speaker's index among ``SPEAKERS``.

``speaker-encoder``: Resemblyzer's voice encoder (a GE2E speaker encoder: three LSTM layers of
256 over 40-band mel spectrograms, a linear layer to 256 and a ReLU, each partial utterance's
embedding L2-normalized) as the Resemblyzer 0.1.4 wheel ships it: ``resemblyzer/pretrained.pt``,
an old-style training checkpoint (``{"step", "model_state", "optimizer_state"}``), copied as
it is and checked by its SHA-256; the module's source (``voice_encoder.py``, ``VoiceEncoder``)
is written here from the architecture. The manifest's audio input is the package's
``embed_utterance``: a mel spectrogram by librosa (n_fft 400, hop 160, 40 bands), partial
utterances of 160 frames every 77 (1.3 a second), the last kept where the clip covers 75 % of
it, their embeddings' mean.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/speaker-clips/1.0.0/validation.parquet``: ``audio`` (FLAC) and ``label``;
- ``models/speaker-encoder/1.0.0/{speaker-encoder.pt,voice_encoder.py}``.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from predictors.zoo.common import build_generated
from predictors.zoo.pretrained import Pretrained, package_file
from predictors.zoo.speech import RATE, _espeak, _speak
from predictors.zoo.store import VERSION, Staging

DATASET = "speaker-clips"
MODEL = "speaker-encoder"
SEED = 20261128
PER_SPEAKER = 6
# Each speaker: an eSpeak NG voice with a variant of its own.
SPEAKERS = (
    "en+m1",
    "en+m3",
    "en+f2",
    "en+f4",
    "en-us+m7",
    "en-gb-x-rp+f3",
    "en+croak",
    "en-029+m2",
    "en-gb-scotland+f5",
    "en-us-nyc+m4",
)

ENCODER = Pretrained(
    name=MODEL,
    package="Resemblyzer",
    version="0.1.4",
    module="resemblyzer",
    resource="pretrained.pt",
    sha256="39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e",
    file="speaker-encoder.pt",
    license="Apache-2.0",
)

# The module the checkpoint's `model_state` is loaded into (strictly: the two similarity
# parameters of training's GE2E loss are there too, unused by the forward pass).
SOURCE = '''"""Resemblyzer's voice encoder: mel spectrograms (N, 160, 40) in, embeddings (N, 256) out."""

import torch
from torch import nn


class VoiceEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(40, 256, 3, batch_first=True)
        self.linear = nn.Linear(256, 256)
        self.relu = nn.ReLU()
        # GE2E's similarity scale and bias, kept by the training checkpoint.
        self.similarity_weight = nn.Parameter(torch.tensor([10.0]))
        self.similarity_bias = nn.Parameter(torch.tensor([-5.0]))

    def forward(self, mels):
        _, (hidden, _) = self.lstm(mels)
        embeddings = self.relu(self.linear(hidden[-1]))
        return embeddings / torch.norm(embeddings, dim=1, keepdim=True)
'''


def make_clips() -> tuple[list[bytes], list[int]]:
    """Every clip as FLAC bytes (16-bit, mono, RATE) and its speaker's index."""
    import soundfile
    from resemblyzer import preprocess_wav

    from predictors.zoo.datasets import zen_lines

    program = _espeak()
    phrases = zen_lines()
    rng = np.random.default_rng(SEED)
    clips: list[bytes] = []
    speakers: list[int] = []
    for speaker, voice in enumerate(SPEAKERS):
        chosen = rng.choice(len(phrases), PER_SPEAKER, replace=False)
        for index in chosen:
            samples = _speak(
                program,
                phrases[int(index)],
                voice,
                int(rng.integers(130, 190)),
                int(rng.integers(30, 70)),
            )
            samples = samples + rng.normal(0.0, 0.002, len(samples)).astype(np.float32)
            prepared = preprocess_wav(np.clip(samples, -1.0, 1.0).astype(np.float32))
            buffer = io.BytesIO()
            soundfile.write(
                buffer, np.clip(prepared, -1.0, 1.0), RATE, format="FLAC", subtype="PCM_16"
            )
            clips.append(buffer.getvalue())
            speakers.append(speaker)
    return clips, speakers


def build_dataset(store: str) -> dict:
    import pyarrow as pa

    clips, speakers = make_clips()
    return build_generated(
        store,
        DATASET,
        list(SPEAKERS),
        "flac",
        lambda split: [("audio", clips, pa.binary()), ("label", speakers, pa.int64())],
        ("validation",),
    )


def build_model(store: str) -> dict:
    with Staging(Path(store), f"models/{MODEL}/{VERSION}") as staging:
        staging.write(ENCODER.file, package_file(ENCODER))
        staging.write("voice_encoder.py", SOURCE.encode())
        files = staging.commit()
    return {
        "files": files,
        "trained": True,
        "source": f"{ENCODER.package}=={ENCODER.version} ({ENCODER.resource}, {ENCODER.license})",
    }
