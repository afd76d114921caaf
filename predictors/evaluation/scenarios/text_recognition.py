"""Text recognition: the scenario of `text_recognition` models, which read an image of a text
line and give per-timestep class scores, decoded by CTC into the line's text.

The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions, spans).
The model's one scored output, of type `ctc`, is (N, T, C) (or (T, N, C), `time_axis: 0`);
its charset names the classes besides the blank (the run's labels). Each input's text is
decoded greedily or by a prefix beam search (`predictors.processing.ctc`); the dataset's
`text` column holds each line's true text (`DatasetReader`, target `text`).

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
of the outputs is each input's confidence at every timestep (the probability of its most
probable class there), not every class's score.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import numpy as np

from predictors.evaluation.base import FirstPass, Staged
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import FixedBatches
from predictors.processing.ctc import CtcDecoder
from predictors.processing.parameters import ProcessingError

__all__ = ["TextRecognition", "text_metrics"]


def text_metrics(
    references: list[str], hypotheses: list[str], decoder: CtcDecoder
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
        **({"beam_width": decoder.beam_width} if decoder.decoding == "beam" else {}),
        "library": f"jiwer {metadata.version('jiwer')}",
    }


@register("text_recognition", tasks=("text_recognition",))
class TextRecognition(FixedBatches):
    """The text recognition scenario; see the module docstring."""

    def configure(self) -> None:
        output = self.spec.output_parameters
        try:
            self.decoder = CtcDecoder.of(output, self.labels)
        except ProcessingError as error:
            raise EvaluationError(f"{self.what}'s ctc output: {error}") from error

    def output_type(self) -> str:
        return "frame_confidences"

    def classes(self) -> int:
        # The output's classes were checked against the charset on every batch.
        return len(self.labels)

    def collect(self, stage: Staged, stage_outputs: list[Any]) -> None:
        """Decode a stage's outputs of the first pass, and keep each input's text, its
        per-timestep confidences and its true text."""
        for outputs, texts in zip(stage_outputs, stage.labels, strict=True):
            try:
                log_probs = self.decoder.log_probabilities(outputs)
            except ProcessingError as error:
                raise EvaluationError(f"{self.what}'s ctc output: {error}") from error
            if len(log_probs) != len(texts):
                raise EvaluationError(
                    f"{self.what} gives {len(log_probs)} outputs for a batch of {len(texts)} "
                    "inputs: check the ctc output's time_axis"
                )
            self.collected_predictions.extend(self.postprocess_batch(log_probs))
            self.collected_outputs.append(np.exp(log_probs.max(axis=2)).astype(np.float32))
            self.collected_labels.append(texts)

    def postprocess_batch(self, outputs: np.ndarray) -> list[list[tuple[int, str, float]]]:
        """Each input's decoded text and its confidence, of (N, T, C) log-probabilities."""
        return [[(0, text, confidence)] for text, confidence in self.decoder.decode_log(outputs)]

    def score(self) -> tuple[dict[str, Any], int]:
        references = [str(text) for texts in self.collected_labels for text in texts]
        hypotheses = [row[0][1] for row in self.collected_predictions]
        if self.first is None:
            # No class per input: the per-input label is -1; the texts are the predictions.
            # Outputs of fewer timesteps than the longest are padded with confidence 0.
            steps = max(frames.shape[1] for frames in self.collected_outputs)
            frames = np.concatenate(
                [
                    np.pad(f, ((0, 0), (0, steps - f.shape[1])), constant_values=0.0)
                    for f in self.collected_outputs
                ]
            )
            self.first = FirstPass.unlabelled(frames, self.collected_predictions)
        return text_metrics(references, hypotheses, self.decoder), len(references)
