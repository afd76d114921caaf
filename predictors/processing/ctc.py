"""Reading an output of type `ctc`: a text recognizer's per-timestep class scores decoded into
text by Connectionist Temporal Classification (Graves et al., 2006).

The output is (N, T, C) (or (T, N, C) with `time_axis: 0`): for each of N inputs and each of T
timesteps, a score per class. One class is the blank (`blank`, 0 by default); the charset names
the other C - 1 in index order (the symbol of class i is `charset[i]` below the blank and
`charset[i - 1]` above it), so C must be len(charset) + 1. Scores may be probabilities (every
timestep's in [0, 1], summing to 1), logits or log-probabilities: they are read as
log-probabilities (probabilities through a log; the others through a log-softmax, which leaves
log-probabilities as they are), so the most probable class at a timestep is the highest score
whichever they are.

Decoding (`decoding`):

- `greedy` (the default, best path): the most probable class at every timestep; repeats
  collapsed, then blanks removed ("hh-e-ll-l-oo" → "hello", "-" the blank: a repeat separated
  by a blank is two symbols);
- `beam`: a prefix beam search of `beam_width` prefixes (10 by default), which sums the
  probability of every alignment of a prefix (Hannun et al., 2014, "First-Pass Large
  Vocabulary Continuous Speech Recognition using Bi-Directional Recurrent DNNs"). At each
  timestep only the `beam_width` most probable classes and the blank extend a prefix. It
  finds the most probable text where the best path does not (where several alignments of one
  text together outweigh the best single path).

A decoded text's confidence is the T-th root of the probability the decoder gives it: greedy,
its best path's; beam, the sum over the alignments the beam kept. It lies in [0, 1] and does
not shrink with the length of the output.

The charset is inline (`charset`, a list of symbols) or a text file (`charset_path`: repo://,
or https:// with `charset_sha256`), one symbol per line, UTF-8: a line holding a single space
is the space symbol; a file's final line break ends its last symbol (no empty symbol follows);
a CRLF line break counts as one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from predictors.processing.parameters import ProcessingError

__all__ = [
    "DECODINGS",
    "DEFAULT_BEAM_WIDTH",
    "CtcDecoder",
    "beam_search",
    "charset_from_text",
    "greedy_path",
    "load_charset",
    "log_probabilities",
]

DECODINGS = ("greedy", "beam")
DEFAULT_BEAM_WIDTH = 10
# Probabilities are told from logits by their sums: within this of 1 at every timestep.
_SUM_TOLERANCE = 1e-3


def charset_from_text(text: str) -> list[str]:
    """The symbols of a charset file's text: one per line (a line holding a single space is
    the space symbol). ProcessingError naming the first empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final line break ends the last symbol
    symbols = [line[:-1] if line.endswith("\r") else line for line in lines]
    if not symbols:
        raise ProcessingError("the charset file holds no symbol", parameter="charset_path")
    for number, symbol in enumerate(symbols, start=1):
        if symbol == "":
            raise ProcessingError(
                f"line {number} of the charset file is empty: each line holds one symbol (a "
                "line of a single space is the space symbol)",
                parameter="charset_path",
            )
    return symbols


def load_charset(
    parameters: Mapping[str, Any], fetch: Callable[[str, str | None], Path]
) -> list[str]:
    """The symbols of a ctc output: its inline `charset`, or its `charset_path` fetched (checked
    against `charset_sha256` where given). `fetch(url, sha256)` turns a URL into a local file
    (e.g. `DataManager.fetch`)."""
    inline = parameters.get("charset")
    path = parameters.get("charset_path")
    if (inline is None) == (path is None):
        raise ProcessingError(
            "a ctc output needs exactly one of 'charset' (a list of symbols) and 'charset_path' "
            "(a file of one symbol per line)",
            parameter="charset",
        )
    if inline is not None:
        if (
            not isinstance(inline, list)
            or not inline
            or not all(isinstance(symbol, str) and symbol for symbol in inline)
        ):
            raise ProcessingError(
                "'charset' must be a list of symbols (non-empty strings)", parameter="charset"
            )
        return list(inline)
    if not isinstance(path, str):
        raise ProcessingError("'charset_path' must be a URL", parameter="charset_path")
    sha256 = parameters.get("charset_sha256")
    file = fetch(path, sha256 if isinstance(sha256, str) else None)
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ProcessingError(
            f"the charset file {path} is not UTF-8 text: {error}", parameter="charset_path"
        ) from error
    return charset_from_text(text)


def log_probabilities(scores: np.ndarray) -> np.ndarray:
    """(…, C) scores as log-probabilities (float64), timestep by timestep: a row of
    probabilities (every score in [0, 1], summing to 1) through a log, any other row (logits,
    log-probabilities) through a log-softmax."""
    values = np.asarray(scores, np.float64)
    if values.size and not np.all(np.isfinite(values)):
        raise ProcessingError("the ctc output is not finite (NaN or inf)", parameter="type")
    shifted = values - values.max(axis=-1, keepdims=True)
    softmaxed = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    probabilities = (
        (values.min(axis=-1) >= 0.0)
        & (values.max(axis=-1) <= 1.0)
        & (np.abs(values.sum(axis=-1) - 1.0) <= _SUM_TOLERANCE)
    )
    with np.errstate(divide="ignore", invalid="ignore"):  # the rows not taken: logits
        return np.where(probabilities[..., None], np.log(values), softmaxed)


def greedy_path(log_probs: np.ndarray, blank: int) -> tuple[list[int], float]:
    """The best path of one input's (T, C) log-probabilities: its classes with repeats
    collapsed and blanks removed, and the path's log-probability."""
    best = log_probs.argmax(axis=1)
    score = float(log_probs[np.arange(len(best)), best].sum())
    new = np.ones(len(best), bool)
    new[1:] = best[1:] != best[:-1]
    return [int(c) for c in best[new & (best != blank)]], score


def _log_add(a: float, b: float) -> float:
    """log(exp(a) + exp(b)), without leaving log space."""
    if a < b:
        a, b = b, a
    if b == -math.inf:
        return a
    return a + math.log1p(math.exp(b - a))


def beam_search(log_probs: np.ndarray, blank: int, width: int) -> tuple[list[int], float]:
    """The most probable labelling (classes, blanks removed) of one input's (T, C)
    log-probabilities by a prefix beam search of `width` prefixes, and its log-probability
    (summed over the alignments the beam kept). Ties go to the prefix that sorts first."""
    minus_inf = -math.inf
    # Each prefix's log-probability of ending in a blank and in its last symbol.
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, minus_inf)}
    classes = log_probs.shape[1]
    count = min(width, classes)

    def order(item: tuple[tuple[int, ...], Any]) -> tuple[float, tuple[int, ...]]:
        return -_log_add(item[1][0], item[1][1]), item[0]

    for row in log_probs:
        frame = row.tolist()
        if count < classes:
            candidates = np.argpartition(-row, count - 1)[:count].tolist()
        else:
            candidates = list(range(classes))
        extending = [c for c in candidates if c != blank]
        after: dict[tuple[int, ...], list[float]] = {}
        blank_score = frame[blank]
        for prefix, (ends_blank, ends_symbol) in beams.items():
            total = _log_add(ends_blank, ends_symbol)
            same = after.setdefault(prefix, [minus_inf, minus_inf])
            same[0] = _log_add(same[0], total + blank_score)
            last = prefix[-1] if prefix else None
            if last is not None:  # the last symbol again, no blank between: collapsed
                same[1] = _log_add(same[1], ends_symbol + frame[last])
            for symbol in extending:
                longer = after.setdefault((*prefix, symbol), [minus_inf, minus_inf])
                # A repeat is a new symbol only after a blank.
                source = ends_blank if symbol == last else total
                longer[1] = _log_add(longer[1], source + frame[symbol])
        kept = sorted(after.items(), key=order)[:width]
        beams = {prefix: (scores[0], scores[1]) for prefix, scores in kept}
    prefix, (ends_blank, ends_symbol) = min(beams.items(), key=order)
    return list(prefix), _log_add(ends_blank, ends_symbol)


@dataclass(frozen=True)
class CtcDecoder:
    """A ctc output's reading: its charset, blank, time axis and decoding (see the module
    docstring)."""

    charset: tuple[str, ...]
    blank: int = 0
    time_axis: int = 1
    decoding: str = "greedy"
    beam_width: int = DEFAULT_BEAM_WIDTH

    @classmethod
    def of(cls, parameters: Mapping[str, Any], charset: Sequence[str]) -> CtcDecoder:
        """The decoder a ctc output's parameters describe, with its charset loaded
        (`load_charset`); ProcessingError naming the parameter at fault."""
        blank = parameters.get("blank", 0)
        time_axis = parameters.get("time_axis", 1)
        decoding = parameters.get("decoding", "greedy")
        width = parameters.get("beam_width", DEFAULT_BEAM_WIDTH)
        if not charset:
            raise ProcessingError("the charset holds no symbol", parameter="charset")
        if isinstance(blank, bool) or not isinstance(blank, int) or not 0 <= blank <= len(charset):
            raise ProcessingError(
                f"blank must be a class index from 0 to {len(charset)} (the charset's "
                f"{len(charset)} symbols and the blank make {len(charset) + 1} classes); got "
                f"{blank!r}",
                parameter="blank",
            )
        if time_axis not in (0, 1) or isinstance(time_axis, bool):
            raise ProcessingError(
                f"time_axis must be 1 (N, T, C) or 0 (T, N, C); got {time_axis!r}",
                parameter="time_axis",
            )
        if decoding not in DECODINGS:
            raise ProcessingError(
                f"decoding must be greedy or beam; got {decoding!r}", parameter="decoding"
            )
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ProcessingError(
                f"beam_width must be an integer >= 1; got {width!r}", parameter="beam_width"
            )
        return cls(tuple(charset), blank, int(time_axis), str(decoding), width)

    @property
    def classes(self) -> int:
        """The classes the output gives per timestep: the charset's symbols and the blank."""
        return len(self.charset) + 1

    def describe(self) -> str:
        """The decoding in words: "greedy", "beam (width 10)"."""
        return "greedy" if self.decoding == "greedy" else f"beam (width {self.beam_width})"

    def text(self, classes: Sequence[int]) -> str:
        """The text of a labelling (class indices, blanks removed)."""
        blank, charset = self.blank, self.charset
        return "".join(charset[c] if c < blank else charset[c - 1] for c in classes)

    def log_probabilities(self, outputs: Any) -> np.ndarray:
        """A batch of the output as (N, T, C) log-probabilities, its shape checked against the
        time axis and the charset."""
        scores = np.asarray(outputs)
        if scores.ndim != 3:
            layout = "(N, T, C)" if self.time_axis == 1 else "(T, N, C)"
            raise ProcessingError(
                f"a ctc output is {layout} (time_axis {self.time_axis}): a score per class at "
                f"each timestep of each input; got shape {scores.shape}",
                parameter="time_axis",
            )
        if self.time_axis == 0:
            scores = scores.transpose(1, 0, 2)
        if scores.shape[2] != self.classes:
            raise ProcessingError(
                f"the output gives {scores.shape[2]} classes per timestep, but the charset has "
                f"{len(self.charset)} symbols: with the blank, {self.classes} classes",
                parameter="charset",
            )
        if scores.shape[1] == 0:
            raise ProcessingError(
                f"the output has no timestep (shape {np.asarray(outputs).shape})",
                parameter="time_axis",
            )
        return log_probabilities(scores)

    def decode(self, outputs: Any) -> list[tuple[str, float]]:
        """Each input's text and its confidence (see the module docstring), of a batch of the
        output as the model gives it."""
        return self.decode_log(self.log_probabilities(outputs))

    def decode_log(self, log_probs: np.ndarray) -> list[tuple[str, float]]:
        """`decode` of a batch already read as (N, T, C) log-probabilities
        (`log_probabilities`)."""
        steps = log_probs.shape[1]
        decoded = []
        for row in log_probs:
            if self.decoding == "beam":
                classes, score = beam_search(row, self.blank, self.beam_width)
            else:
                classes, score = greedy_path(row, self.blank)
            decoded.append((self.text(classes), math.exp(score / steps)))
        return decoded
