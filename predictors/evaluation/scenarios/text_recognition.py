"""Text recognition: the scenario of `text_recognition` models, which read an input (an image
of a text line, a text) and give its text, by one of two outputs:

- `ctc`: per-timestep class scores, (N, T, C) (or (T, N, C), `time_axis: 0`), decoded by CTC
  greedily or by a prefix beam search (`predictors.processing.ctc`); its charset names the
  classes besides the blank (the run's labels);
- `token_ids`: the (N, L) token ids a sequence-to-sequence model emitted, decoded by the
  tokenizer file the output names (`predictors.processing.token_ids`); no labels.

The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions, spans).
The dataset's `text` column holds each input's true text (`DatasetReader`, target `text`).

Metrics by jiwer (`text_metrics`), over the whole split at once (corpus level: the edits of
every line summed, divided by the characters or words of every true text, as jiwer computes
over lists): `cer` (character error rate: substitutions, deletions and insertions of
characters) and `wer` (word error rate, of words); both are 0 for a perfect reading and can
pass 1 where the model inserts more than the texts hold. jiwer strips each text's outer
whitespace first (and, for words, collapses runs of spaces). `exact_match` is the share of
lines decoded exactly as their text (compared as the rates read them: outer whitespace stripped,
runs of whitespace one space). `top1` is the CER and `top5` the
WER (the result's two accuracy columns, labelled by task where they are shown): lower is
better.

Each input's prediction is `(0, text, confidence)` (`CtcDecoder.decode`); what the result keeps
of a ctc output is each input's confidence at every timestep (the probability of its most
probable class there), not every class's score. Emitted token ids carry no probability: their
prediction is `(0, text, None)`, and the result keeps the ids (float32, each input's row padded
with -1 to the longest), output type `token_ids`.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from typing import Any

import numpy as np

from predictors.evaluation.base import FirstPass, Prediction, Staged
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import FixedBatches
from predictors.processing.ctc import CtcDecoder
from predictors.processing.parameters import ProcessingError
from predictors.processing.token_ids import TokenIdsDecoder

__all__ = ["TextRecognition", "text_metrics"]


def text_metrics(
    references: list[str], hypotheses: list[str], decoder: CtcDecoder | TokenIdsDecoder
) -> dict[str, Any]:
    """The metrics of the module docstring, of each line's true text and its decoded text."""
    import jiwer

    if len(references) != len(hypotheses):
        raise EvaluationError(
            f"{len(hypotheses)} decoded texts for {len(references)} lines: they cannot be scored"
        )
    if not references:
        raise EvaluationError("no line to score: the split is empty")
    cer = float(jiwer.cer(references, hypotheses))
    wer = float(jiwer.wer(references, hypotheses))
    # As jiwer reads the texts for the rates: outer whitespace stripped, runs of spaces one.
    exact = sum(
        " ".join(r.split()) == " ".join(h.split())
        for r, h in zip(references, hypotheses, strict=True)
    ) / len(references)
    return {
        "top1": cer,
        "top5": wer,
        "count": len(references),
        "cer": cer,
        "wer": wer,
        "exact_match": float(exact),
        "decoding": decoder.decoding,
        **(
            {"beam_width": decoder.beam_width}
            if isinstance(decoder, CtcDecoder) and decoder.decoding == "beam"
            else {}
        ),
        "library": f"jiwer {metadata.version('jiwer')}",
    }


@register("text_recognition", tasks=("text_recognition",))
class TextRecognition(FixedBatches):
    """The text recognition scenario; see the module docstring."""

    def configure(self) -> None:
        output = self.spec.output_parameters
        self.ids = self.spec.output_type == "token_ids"
        self.decoder: CtcDecoder | TokenIdsDecoder
        try:
            if self.ids:
                fetch = self.setup.fetch
                if fetch is None:
                    raise ProcessingError("no way to fetch the tokenizer file was given")
                self.decoder = TokenIdsDecoder.of(output, fetch)
            else:
                self.decoder = CtcDecoder.of(output, self.labels)
        except ProcessingError as error:
            raise EvaluationError(
                f"{self.what}'s {self.spec.output_type} output: {error}"
            ) from error

    def output_type(self) -> str:
        return "token_ids" if self.ids else "frame_confidences"

    def classes(self) -> int:
        # The output's classes were checked against the charset on every batch (emitted ids
        # have none).
        return len(self.labels)

    def collect(self, stage: Staged, stage_outputs: list[Any]) -> None:
        """Decode a stage's outputs of the first pass, and keep each input's text, its
        per-timestep confidences (or its ids) and its true text."""
        for outputs, texts in zip(stage_outputs, stage.labels, strict=True):
            try:
                if isinstance(self.decoder, TokenIdsDecoder):
                    rows = self.decoder.ids(outputs, len(self.collected_predictions))
                    decoded = self.decoder.texts(rows)
                    kept = _padded([np.asarray(row, np.float32) for row in rows])
                    predictions: Sequence[Sequence[Prediction]] = [
                        [(0, text, None)] for text in decoded
                    ]
                else:
                    log_probs = self.decoder.log_probabilities(outputs)
                    predictions = self.postprocess_batch(log_probs)
                    kept = np.exp(log_probs.max(axis=2)).astype(np.float32)
            except ProcessingError as error:
                raise EvaluationError(
                    f"{self.what}'s {self.spec.output_type} output: {error}"
                ) from error
            if len(predictions) != len(texts):
                raise EvaluationError(
                    f"{self.what} gives {len(predictions)} outputs for a batch of {len(texts)} "
                    "inputs: "
                    + (
                        "a token_ids output is (N, L), batch first"
                        if self.ids
                        else "check the ctc output's time_axis"
                    )
                )
            self.collected_predictions.extend(predictions)
            self.collected_outputs.append(kept)
            self.collected_labels.append(texts)

    def postprocess_batch(self, outputs: np.ndarray) -> list[list[tuple[int, str, float]]]:
        """Each input's decoded text and its confidence, of (N, T, C) log-probabilities."""
        assert isinstance(self.decoder, CtcDecoder)
        return [[(0, text, confidence)] for text, confidence in self.decoder.decode_log(outputs)]

    def score(self) -> tuple[dict[str, Any], int]:
        references = [str(text) for texts in self.collected_labels for text in texts]
        hypotheses = [row[0][1] for row in self.collected_predictions]
        if self.first is None:
            # No class per input: the per-input label is -1; the texts are the predictions.
            # Outputs of fewer timesteps (or ids) than the longest are padded: confidences
            # with 0, ids with -1 (no id).
            self.first = FirstPass.unlabelled(
                _padded(self.collected_outputs, -1.0 if self.ids else 0.0),
                self.collected_predictions,
            )
        return text_metrics(references, hypotheses, self.decoder), len(references)


def _padded(rows: list[np.ndarray], fill: float = -1.0) -> np.ndarray:
    """Arrays of one row each (1-d) or of several (2-d), stacked into one 2-d array, each row
    padded with `fill` to the longest."""
    blocks = [row[None, :] if row.ndim == 1 else row for row in rows]
    steps = max((block.shape[1] for block in blocks), default=0)
    if not blocks:
        return np.zeros((0, 0), np.float32)
    return np.concatenate(
        [
            np.pad(b, ((0, 0), (0, steps - b.shape[1])), constant_values=fill).astype(np.float32)
            for b in blocks
        ]
    )
