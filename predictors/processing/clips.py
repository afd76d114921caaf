"""Whole audio clips (`type: audio` without `chunk`): each clip one input of a model that is not
a stream's, decoded as `predictors.processing.audio` decodes (libsndfile, mono, resampled), then
optionally turned into a spectrogram by librosa and cut into fixed windows.

Parameters:

- `sample_rate`, `element_type` (`float32`): as for streamed audio (both required);
- `spectrogram` (optional): a mel or log-mel spectrogram computed by the library it names, with
  that library's parameters and defaults (`Spectrogram`);
- `windows` (optional): fixed windows cut from the clip, with a hop, each a row of the model's
  batch, their outputs combined into the clip's (`Windows`). Without windows a batch stacks
  whole clips, which must then be of one length (a model of clips of any length runs at batch
  size 1);
- `layout` (optional, without a spectrogram): samples as (N, T) (`NT`, the default) or with a
  channel axis last, (N, T, 1) (`NTC`).

With a spectrogram, windows are counted in its frames (and the clip is padded in samples, before
the spectrogram, as packages that cut partial utterances from a spectrogram do); without one,
in samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from predictors.processing.audio import MAX_CLIP_SECONDS, AudioPreprocessor
from predictors.processing.parameters import ProcessingError, input_keys

__all__ = ["ClipPreprocessor", "Spectrogram", "Windows"]

PARAMETERS = ("sample_rate", "element_type")
_KNOWN = (*PARAMETERS, "spectrogram", "windows", "layout")
# Samples without a spectrogram: (N, T), or (N, T, 1) with a channel axis last.
SAMPLE_LAYOUTS = ("NT", "NTC")
# The stream's parameters, refused here by name.
_STREAM_ONLY = ("chunk", "tail", "context")
# Each clip's windows, at most; the values of a clip's spectrogram (complex, before the mel
# filters: librosa's STFT) and of its windows, at most.
MAX_WINDOWS = 4096
MAX_SPECTRUM_VALUES = 64 * 1024 * 1024
MAX_WINDOW_VALUES = 64 * 1024 * 1024

SPECTROGRAM_KINDS = ("mel", "log_mel")
LIBRARIES = ("librosa",)
LAYOUTS = ("frames_first", "mels_first")
# librosa's defaults of the optional keys (librosa.feature.melspectrogram, power_to_db).
_SPECTROGRAM_DEFAULTS: dict[str, Any] = {
    "win_length": None,
    "window": "hann",
    "center": True,
    "pad_mode": "constant",
    "power": 2.0,
    "fmin": 0.0,
    "fmax": None,
    "htk": False,
    "norm": "slaney",
}
_LOG_DEFAULTS: dict[str, Any] = {"ref": 1.0, "amin": 1e-10, "top_db": 80.0}
_SPECTROGRAM_REQUIRED = ("kind", "library", "n_fft", "hop_length", "n_mels", "layout")
WINDOW_KEYS = ("size", "hop", "combine")
_WINDOW_OPTIONAL = ("until", "min_coverage", "pad_start")
# How many windows a clip makes: while the window before ends within it (the last kept where
# the clip covers min_coverage of it), or one at every hop that starts within it.
UNTIL = ("end_covered", "start_in_clip")
COMBINES = ("mean", "max")


def _integer(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProcessingError(
            f"input parameter {name!r} must be an integer from {low} to {high}; got {value!r}",
            parameter=name,
        )
    return value


def _number(value: Any, name: str, low: float, high: float, *, none: bool = False) -> Any:
    if value is None and none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        refused = " or null" if none else ""
        raise ProcessingError(
            f"input parameter {name!r} must be a number from {low} to {high}{refused}; "
            f"got {value!r}",
            parameter=name,
        )
    return float(value)


def _mapping(value: Any, name: str, known: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ProcessingError(f"input parameter {name!r} must be a mapping", parameter=name)
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ProcessingError(
            f"unknown key {unknown[0]!r} in input parameter {name!r} (it takes {', '.join(known)})",
            parameter=f"{name}.{unknown[0]}",
        )
    return value


@dataclass(frozen=True)
class Spectrogram:
    """A clip's mel spectrogram by librosa (`librosa.feature.melspectrogram` with these keys,
    `power_to_db` after it for `log_mel`), as float32, `layout` frames first (T, n_mels) or
    mels first (n_mels, T)."""

    kind: str
    n_fft: int
    hop_length: int
    n_mels: int
    layout: str
    options: dict[str, Any]
    log: dict[str, Any]

    @classmethod
    def of(cls, value: Any, sample_rate: int) -> Spectrogram:
        known = (*_SPECTROGRAM_REQUIRED, *_SPECTROGRAM_DEFAULTS, *_LOG_DEFAULTS)
        given = _mapping(value, "spectrogram", known)
        for key in _SPECTROGRAM_REQUIRED:
            if key not in given:
                raise ProcessingError(
                    f"input parameter 'spectrogram' needs {key!r} (it requires "
                    f"{', '.join(_SPECTROGRAM_REQUIRED)})",
                    parameter=f"spectrogram.{key}",
                )
        kind = given["kind"]
        if kind not in SPECTROGRAM_KINDS:
            raise ProcessingError(
                f"spectrogram.kind must be one of {', '.join(SPECTROGRAM_KINDS)}; got {kind!r}",
                parameter="spectrogram.kind",
            )
        if given["library"] not in LIBRARIES:
            why = (
                " (torchaudio has no build for this torch)"
                if given["library"] == "torchaudio"
                else ""
            )
            raise ProcessingError(
                f"spectrogram.library must be librosa; got {given['library']!r}{why}",
                parameter="spectrogram.library",
            )
        if given["layout"] not in LAYOUTS:
            raise ProcessingError(
                f"spectrogram.layout must be one of {', '.join(LAYOUTS)}; got {given['layout']!r}",
                parameter="spectrogram.layout",
            )
        if kind == "mel":
            extra = sorted(set(given) & set(_LOG_DEFAULTS))
            if extra:
                raise ProcessingError(
                    f"spectrogram.{extra[0]} is a log_mel key (power_to_db's); this one is mel",
                    parameter=f"spectrogram.{extra[0]}",
                )
        n_fft = _integer(given["n_fft"], "spectrogram.n_fft", 2, 65536)
        options = {
            **_SPECTROGRAM_DEFAULTS,
            **{k: given[k] for k in _SPECTROGRAM_DEFAULTS if k in given},
        }
        if options["win_length"] is not None:
            _integer(options["win_length"], "spectrogram.win_length", 1, n_fft)
        for key in ("center", "htk"):
            if not isinstance(options[key], bool):
                raise ProcessingError(
                    f"spectrogram.{key} must be true or false", parameter=f"spectrogram.{key}"
                )
        if options["window"] not in ("hann", "hamming", "blackman", "boxcar"):
            raise ProcessingError(
                "spectrogram.window must be one of hann, hamming, blackman, boxcar",
                parameter="spectrogram.window",
            )
        if options["pad_mode"] not in ("constant", "reflect", "edge"):
            raise ProcessingError(
                "spectrogram.pad_mode must be one of constant, reflect, edge",
                parameter="spectrogram.pad_mode",
            )
        if options["norm"] not in ("slaney", None):
            raise ProcessingError(
                "spectrogram.norm must be slaney or null", parameter="spectrogram.norm"
            )
        options["power"] = _number(options["power"], "spectrogram.power", 0.5, 4.0)
        nyquist = sample_rate / 2
        options["fmin"] = _number(options["fmin"], "spectrogram.fmin", 0.0, nyquist)
        options["fmax"] = _number(
            options["fmax"], "spectrogram.fmax", options["fmin"], nyquist, none=True
        )
        log: dict[str, Any] = {}
        if kind == "log_mel":
            log = {**_LOG_DEFAULTS, **{k: given[k] for k in _LOG_DEFAULTS if k in given}}
            log["ref"] = _number(log["ref"], "spectrogram.ref", 1e-30, 1e30)
            log["amin"] = _number(log["amin"], "spectrogram.amin", 1e-30, 1.0)
            log["top_db"] = _number(log["top_db"], "spectrogram.top_db", 0.0, 1000.0, none=True)
        return cls(
            kind=kind,
            n_fft=n_fft,
            hop_length=_integer(given["hop_length"], "spectrogram.hop_length", 1, n_fft * 4),
            n_mels=_integer(given["n_mels"], "spectrogram.n_mels", 1, 1024),
            layout=str(given["layout"]),
            options=options,
            log=log,
        )

    def frames(self, samples: int) -> int:
        """The frames of a clip of `samples` samples."""
        if self.options["center"]:
            return 1 + samples // self.hop_length
        return 0 if samples < self.n_fft else 1 + (samples - self.n_fft) // self.hop_length

    def of_samples(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """The spectrogram (T, n_mels) of a clip's samples, float32."""
        import librosa

        values = (1 + self.n_fft // 2) * self.frames(len(samples))
        if values > MAX_SPECTRUM_VALUES:
            raise ProcessingError(
                f"the clip's spectrogram would hold {values:,} values ({1 + self.n_fft // 2} "
                f"bins in each of {self.frames(len(samples)):,} frames), more than "
                f"{MAX_SPECTRUM_VALUES:,}: raise spectrogram.hop_length or lower n_fft",
                parameter="spectrogram.hop_length",
            )
        mel = librosa.feature.melspectrogram(
            y=samples,
            sr=sample_rate,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            n_mels=self.n_mels,
            **self.options,
        )
        if self.log:
            mel = librosa.power_to_db(mel, **self.log)
        return np.ascontiguousarray(mel.astype(np.float32).T)


@dataclass(frozen=True)
class Windows:
    """Fixed windows of `size` units (spectrogram frames, or samples), one every `hop`, from
    the start of the clip with `pad_start` zero samples before it. With `until: end_covered`
    (the default) a window is cut while the one before it ends within the clip; the last is
    padded with zeros, and dropped when the clip covers less than `min_coverage` of it (in
    samples) unless it is the only one. With `until: start_in_clip` a window starts at every
    hop while its start lies within the clip (its `pad_start` zeros included), the last padded
    with zeros. Each clip's outputs are its windows' `combine`d (`mean` or `max` over
    them)."""

    size: int
    hop: int
    min_coverage: float
    combine: str
    until: str = "end_covered"
    pad_start: int = 0

    @classmethod
    def of(cls, value: Any) -> Windows:
        given = _mapping(value, "windows", (*WINDOW_KEYS, *_WINDOW_OPTIONAL))
        for key in WINDOW_KEYS:
            if key not in given:
                raise ProcessingError(
                    f"input parameter 'windows' needs {key!r} (it requires "
                    f"{', '.join(WINDOW_KEYS)}, and min_coverage where until is end_covered)",
                    parameter=f"windows.{key}",
                )
        size = _integer(given["size"], "windows.size", 1, 10_000_000)
        hop = _integer(given["hop"], "windows.hop", 1, size)
        until = given.get("until", "end_covered")
        if until not in UNTIL:
            raise ProcessingError(
                f"windows.until must be one of {', '.join(UNTIL)}; got {until!r}",
                parameter="windows.until",
            )
        coverage = 1.0
        if until == "end_covered":
            if "min_coverage" not in given:
                raise ProcessingError(
                    "input parameter 'windows' needs 'min_coverage' where until is end_covered "
                    "(the share of the last window the clip must cover)",
                    parameter="windows.min_coverage",
                )
            coverage = given["min_coverage"]
            if (
                isinstance(coverage, bool)
                or not isinstance(coverage, int | float)
                or not 0 < coverage <= 1
            ):
                raise ProcessingError(
                    "windows.min_coverage must be a number above 0 and at most 1; got "
                    f"{coverage!r}",
                    parameter="windows.min_coverage",
                )
        elif "min_coverage" in given:
            raise ProcessingError(
                "windows.min_coverage is read where until is end_covered; with start_in_clip "
                "every window that starts within the clip is kept",
                parameter="windows.min_coverage",
            )
        pad_start = _integer(given.get("pad_start", 0), "windows.pad_start", 0, 10_000_000)
        if given["combine"] not in COMBINES:
            raise ProcessingError(
                f"windows.combine must be one of {', '.join(COMBINES)}; got {given['combine']!r}",
                parameter="windows.combine",
            )
        return cls(size, hop, float(coverage), str(given["combine"]), str(until), pad_start)

    def starts(self, units: int, samples: int, unit_samples: int) -> list[int]:
        """The windows' first units, of a clip of `units` units (`samples` samples, a unit
        `unit_samples` of them), `until: end_covered`."""
        starts = [0]
        while starts[-1] + self.size <= units:
            starts.append(starts[-1] + self.hop)
            if len(starts) > MAX_WINDOWS:  # checked as they are made: the list stays small
                raise ProcessingError(
                    f"the clip makes more than {MAX_WINDOWS} windows of {self.size} with a hop "
                    f"of {self.hop}",
                    parameter="windows.hop",
                )
        covered = (samples - starts[-1] * unit_samples) / (self.size * unit_samples)
        if covered < self.min_coverage and len(starts) > 1:
            starts.pop()
        return starts

    def combined(self, outputs: np.ndarray, counts: Sequence[int]) -> np.ndarray:
        """Each clip's output (N, …) of its windows' (sum of counts, …)."""
        if len(outputs) != sum(counts):
            raise ProcessingError(
                f"the model gives {len(outputs)} outputs for {sum(counts)} windows: a window's "
                "output must be a row of the batch"
            )
        edges = np.cumsum([0, *counts])
        reduce = np.mean if self.combine == "mean" else np.max
        return np.stack(
            [reduce(outputs[a:b], axis=0) for a, b in zip(edges[:-1], edges[1:], strict=True)]
        )


class ClipPreprocessor:
    """Whole clips (see the module docstring). `batch` gives a batch of inputs; with windows,
    `windows` gives it with each clip's count of windows (`windowed` is true)."""

    def __init__(self, parameters: Mapping[str, Any]) -> None:
        if not isinstance(parameters, Mapping):
            raise ProcessingError("audio input parameters must be a mapping")
        streamed = [name for name in _STREAM_ONLY if name in parameters]
        if streamed and "chunk" not in parameters:
            raise ProcessingError(
                f"input parameter {streamed[0]!r} frames a stream, which needs 'chunk' too",
                parameter=streamed[0],
            )
        input_keys("audio", parameters, (*_KNOWN, *_STREAM_ONLY), PARAMETERS)
        # Decoding and resampling as for streams.
        self.decoder = AudioPreprocessor(
            {
                "sample_rate": parameters["sample_rate"],
                "element_type": parameters["element_type"],
                "chunk": 1,
                "tail": "drop",
            }
        )
        self.sample_rate = self.decoder.sample_rate
        self.spectrogram = (
            Spectrogram.of(parameters["spectrogram"], self.sample_rate)
            if "spectrogram" in parameters
            else None
        )
        self.windowing = Windows.of(parameters["windows"]) if "windows" in parameters else None
        self.windowed = self.windowing is not None
        if self.windowing is not None:
            # A window longer than the longest clip read holds nothing but padding.
            unit = self.spectrogram.hop_length if self.spectrogram is not None else 1
            longest = MAX_CLIP_SECONDS * self.sample_rate
            if (self.windowing.size * unit > longest) or self.windowing.pad_start > longest:
                raise ProcessingError(
                    f"windows.size and windows.pad_start are at most the longest clip read "
                    f"({MAX_CLIP_SECONDS} s, {longest:,} samples)",
                    parameter="windows.size",
                )
        self.layout = parameters.get("layout", "NT")
        if "layout" in parameters and self.spectrogram is not None:
            raise ProcessingError(
                "input parameter 'layout' lays out samples; a spectrogram's is spectrogram.layout",
                parameter="layout",
            )
        if self.layout not in SAMPLE_LAYOUTS:
            raise ProcessingError(
                f"input parameter 'layout' must be one of {', '.join(SAMPLE_LAYOUTS)}; got "
                f"{self.layout!r}",
                parameter="layout",
            )

    def samples(self, encoded: bytes) -> np.ndarray:
        return self.decoder.samples(encoded)

    def features(self, samples: np.ndarray) -> np.ndarray:
        """A clip's samples as the model reads them: the spectrogram (in its layout), or the
        samples."""
        if self.spectrogram is None:
            return samples
        return self.spectrogram.of_samples(samples, self.sample_rate)

    def laid_out(self, features: np.ndarray) -> np.ndarray:
        """(…, T, n_mels) in the spectrogram's layout; samples (…, T) in `layout`."""
        if self.spectrogram is not None and self.spectrogram.layout == "mels_first":
            return np.ascontiguousarray(np.swapaxes(features, -1, -2))
        if self.spectrogram is None and self.layout == "NTC":
            return features[..., None]
        return features

    def clip_windows(self, samples: np.ndarray) -> np.ndarray:
        """A clip's windows (K, size[, n_mels])."""
        windows = self.windowing
        assert windows is not None
        spectrogram = self.spectrogram
        unit = spectrogram.hop_length if spectrogram is not None else 1
        if windows.pad_start:
            samples = np.concatenate([np.zeros(windows.pad_start, np.float32), samples])
        units = spectrogram.frames(len(samples)) if spectrogram is not None else len(samples)
        if windows.until == "start_in_clip":
            if -(-max(units, 1) // windows.hop) > MAX_WINDOWS:
                raise ProcessingError(
                    f"the clip makes more than {MAX_WINDOWS} windows of {windows.size} with a "
                    f"hop of {windows.hop}",
                    parameter="windows.hop",
                )
            starts = list(range(0, max(units, 1), windows.hop))
        else:
            starts = windows.starts(units, len(samples), unit)
        width = spectrogram.n_mels if spectrogram is not None else 1
        if len(starts) * windows.size * width > MAX_WINDOW_VALUES:
            raise ProcessingError(
                f"the clip's {len(starts)} windows of {windows.size} would hold more than "
                f"{MAX_WINDOW_VALUES:,} values: raise windows.hop or shorten windows.size",
                parameter="windows.hop",
            )
        if spectrogram is not None and not spectrogram.options["center"]:
            # Frames not centred: the last window's last frame ends n_fft samples after its
            # start.
            end = (starts[-1] + windows.size - 1) * unit + spectrogram.n_fft
        else:
            end = (starts[-1] + windows.size) * unit
        if end >= len(samples):
            samples = np.concatenate([samples, np.zeros(end - len(samples), np.float32)])
        features = self.features(samples)
        return np.stack([features[start : start + windows.size] for start in starts])

    def windows(self, values: Sequence[bytes]) -> tuple[np.ndarray, list[int]]:
        """The windows of a batch of clips, each clip's after the one before, and how many each
        clip makes."""
        per_clip = [self.clip_windows(self.samples(value)) for value in values]
        return self.laid_out(np.concatenate(per_clip)), [len(w) for w in per_clip]

    def batch(self, values: Sequence[bytes]) -> np.ndarray:
        """A batch of clips: their windows one after another, or the whole clips stacked."""
        if self.windowed:
            return self.windows(values)[0]
        clips = [self.features(self.samples(value)) for value in values]
        lengths = sorted({len(clip) for clip in clips})
        if len(lengths) > 1:
            raise ProcessingError(
                f"clips of {lengths[0]} and {lengths[-1]} "
                f"{'frames' if self.spectrogram is not None else 'samples'} cannot be one batch: "
                "run clips of any length at batch size 1, or cut them into windows (input "
                "parameter windows)",
                parameter="windows",
            )
        return self.laid_out(np.stack(clips))
