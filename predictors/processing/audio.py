"""Audio inputs (`type: audio`): an encoded clip decoded, mixed to mono, resampled and framed
into chunks, each a call of a streaming model; the clip's labelled segments give each chunk
its label.

Parameters (all required but `context`, which is the streaming loop's, as for tensors):

- `sample_rate`: the rate the model takes, in Hz; a clip at another rate is resampled to it
  with scipy's polyphase filter (`resample_poly`, the exact ratio of the two rates);
- `chunk`: samples per chunk (per call);
- `tail`: `drop` (a last chunk shorter than `chunk` is left out) or `pad` (filled with zeros,
  as streaming pipelines feed a clip's end);
- `element_type`: `float32`, the samples in [-1, 1];
- `context` (optional): as for tensor inputs, the last `context` samples of the chunk before
  put in front of each chunk (`predictors.evaluation.scenarios.streams`).

Clips are decoded by libsndfile (the `soundfile` package): WAV, FLAC and the other formats it
reads; several channels are averaged. A dataset of clips (`predictors.data.ClipReader`, streamed
by `predictors.data.ClipStreams`) gives each clip its `segments` ([start, end] in seconds) and
`segment_classes` (one class index per segment); a chunk takes the class that covers most of
its samples, and the first label (index 0, the background) where no segment covers half of it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError, input_keys

PARAMETERS = ("sample_rate", "chunk", "tail", "element_type")
_KNOWN = (*PARAMETERS, "context")
MAX_CLIP_SECONDS = 3600
MAX_CHANNELS = 64
MAX_SAMPLE_RATE = 768_000
# The most samples (of every channel) one clip decodes to: an hour of stereo at 48 kHz.
MAX_DECODED_SAMPLES = MAX_CLIP_SECONDS * 48_000 * 2


def clip_info(encoded: bytes) -> tuple[int, int]:
    """(frames, sample rate) of an encoded clip, read from its header."""
    import soundfile

    try:
        info = soundfile.info(io.BytesIO(encoded))
    except (RuntimeError, soundfile.LibsndfileError, TypeError) as exc:
        raise ProcessingError(f"the clip cannot be read as audio: {exc}") from None
    return int(info.frames), int(info.samplerate)


class AudioPreprocessor:
    """Clips into chunks (see the module docstring)."""

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        if not isinstance(parameters, Mapping):
            raise ProcessingError("audio input parameters must be a mapping")
        input_keys("audio", parameters, _KNOWN, PARAMETERS)
        rate, chunk = parameters["sample_rate"], parameters["chunk"]
        for name, value in (("sample_rate", rate), ("chunk", chunk)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProcessingError(
                    f"input parameter {name!r} must be an integer >= 1", parameter=name
                )
        if parameters["tail"] not in ("drop", "pad"):
            raise ProcessingError("input parameter 'tail' must be drop or pad", parameter="tail")
        if parameters["element_type"] != "float32":
            raise ProcessingError(
                "input parameter 'element_type' of an audio input must be float32",
                parameter="element_type",
            )
        self.sample_rate, self.chunk, self.tail = int(rate), int(chunk), str(parameters["tail"])

    def chunks_in(self, encoded: bytes) -> int:
        """How many chunks a clip makes, from its header (no decoding)."""
        frames, rate = clip_info(encoded)
        samples = math.ceil(frames * Fraction(self.sample_rate, rate))
        whole, rest = divmod(samples, self.chunk)
        return whole + (1 if rest and self.tail == "pad" else 0)

    def samples(self, encoded: bytes) -> np.ndarray:
        """The clip decoded, mono, at `sample_rate`, float32 in [-1, 1]."""
        import soundfile

        # Its length and channels from its header, before anything is decoded.
        try:
            info = soundfile.info(io.BytesIO(encoded))
        except (RuntimeError, soundfile.LibsndfileError, TypeError) as exc:
            raise ProcessingError(f"the clip cannot be read as audio: {exc}") from None
        if info.frames > MAX_CLIP_SECONDS * info.samplerate:
            raise ProcessingError(
                f"the clip is longer than {MAX_CLIP_SECONDS} seconds, or does not say how long "
                "it is"
            )
        if info.frames * info.channels > MAX_DECODED_SAMPLES:
            raise ProcessingError(
                f"the clip holds {info.frames * info.channels:,} samples ({info.channels} "
                f"channels of {info.frames:,}); at most {MAX_DECODED_SAMPLES:,} are decoded"
            )
        if info.channels > MAX_CHANNELS or info.samplerate > MAX_SAMPLE_RATE:
            raise ProcessingError(
                f"the clip has {info.channels} channels at {info.samplerate} Hz; clips of at "
                f"most {MAX_CHANNELS} channels at {MAX_SAMPLE_RATE} Hz are read"
            )
        try:
            data, rate = soundfile.read(io.BytesIO(encoded), dtype="float32", always_2d=True)
        except (RuntimeError, soundfile.LibsndfileError, TypeError) as exc:
            raise ProcessingError(f"the clip cannot be decoded as audio: {exc}") from None
        if data.shape[0] > MAX_CLIP_SECONDS * rate:
            raise ProcessingError(f"the clip is longer than {MAX_CLIP_SECONDS} seconds")
        mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
        if rate != self.sample_rate:
            from scipy.signal import resample_poly

            ratio = Fraction(self.sample_rate, rate)
            mono = resample_poly(mono, ratio.numerator, ratio.denominator).astype(np.float32)
        return np.ascontiguousarray(mono, dtype=np.float32)

    def batch(self, values: Any) -> np.ndarray:
        raise ProcessingError(
            "audio inputs are framed by the streaming loop: they are for sequence_labelling models"
        )

    def stream(self, values: Sequence[bytes], labels: Any) -> tuple[np.ndarray, np.ndarray]:
        """One clip (`values`: [encoded], `labels`: (segments, classes, chunks to keep)) as its
        chunks and their labels."""
        segments, classes, keep = labels
        chunks, chunk_labels = self.frames(values[0], segments, classes)
        if len(chunks) < keep:
            raise ProcessingError(
                f"a clip decodes to {len(chunks)} chunks, but its header promised {keep}"
            )
        return chunks[:keep], chunk_labels[:keep]

    def frames(
        self, encoded: bytes, segments: Sequence[Sequence[float]], classes: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The clip's chunks (T, chunk) and each chunk's label (T,)."""
        mono = self.samples(encoded)
        count = len(mono) // self.chunk
        if self.tail == "pad" and len(mono) % self.chunk:
            count += 1
            mono = np.concatenate([mono, np.zeros(count * self.chunk - len(mono), np.float32)])
        chunks = mono[: count * self.chunk].reshape(count, self.chunk)
        # Each chunk's samples covered by each class: the class that covers most of it, where
        # that is at least half of it; the background (0) elsewhere.
        # Each class's segments are merged first: overlapping ones count once.
        coverage = np.zeros((count, max([0, *classes]) + 1), np.int64)
        starts = np.arange(count) * self.chunk
        for kind in sorted(set(classes)):
            spans = sorted(
                (round(start * self.sample_rate), round(end * self.sample_rate))
                for (start, end), of in zip(segments, classes, strict=True)
                if of == kind
            )
            merged: list[list[int]] = []
            for first, last in spans:
                if merged and first <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], last)
                else:
                    merged.append([first, last])
            for first, last in merged:
                overlap = np.minimum(starts + self.chunk, last) - np.maximum(starts, first)
                coverage[:, kind] += np.clip(overlap, 0, None)
        best = coverage.argmax(axis=1)
        labels = np.where(coverage.max(axis=1) * 2 >= self.chunk, best, 0).astype(np.int64)
        return chunks, labels
