"""Embeddings: the scenario of `feature_extraction` models whose scored output is of type
`embedding`, one vector per input, scored by what a user of the vectors does with them:
retrieval and verification, over the inputs of the split, each labelled with its identity (the
dataset's `label` column: a speaker, a face, a class; its `labels` name them).

The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions, spans).
An input cut into windows (an audio clip's `windows`, `predictors.processing.clips`) is the
windows' outputs combined (their mean or maximum) before it is scored.

Every metric reads the cosine similarity of two inputs' vectors (each vector divided by its
norm; a vector of norm 0 is refused):

- `recall_at_1`, `recall_at_5` (the headline `top1` and `top5`): of the inputs whose identity
  has another input (`queries`), the share whose 1 or 5 most similar other inputs hold one of
  that identity, ties counted against the query (its own identity's input ranked below every
  other identity's as similar); a split where no identity has two inputs is refused;
- `eer`: verification over every pair of inputs (`pairs`), a pair accepted where its similarity
  is at least a threshold: the rate at which the false acceptances (pairs of two identities
  accepted) equal the false rejections (pairs of one identity rejected), from scikit-learn's
  ROC curve, linearly interpolated between its two points where the one rate passes the other;
  `eer_threshold` the similarity there. Null where the split has no pair of two identities.
  Every pair is compared, of at most `MAX_INPUTS` inputs, a block of rows of the similarity
  matrix at a time.

Each input's prediction is its most similar other input's identity: `(class, label,
similarity)`. What the result keeps of the outputs is each input's vector, divided by its norm.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import Any

import numpy as np

from predictors.evaluation.base import FirstPass, Staged
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import FixedBatches

__all__ = [
    "MAX_INPUTS",
    "Embedding",
    "Scan",
    "embedding_metrics",
    "equal_error_rate",
    "scan",
    "unit_vectors",
]

RECALL_AT = (1, 5)


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its norm (float64); EvaluationError naming a row of norm 0."""
    rows = np.asarray(vectors, np.float64).reshape(len(vectors), -1)
    if not np.isfinite(rows).all():
        bad = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
        raise EvaluationError(f"input {bad}'s embedding holds NaN or infinity")
    norms = np.linalg.norm(rows, axis=1)
    if (norms == 0).any():
        raise EvaluationError(
            f"input {int(np.flatnonzero(norms == 0)[0])}'s embedding is all zeros: it has no "
            "direction to compare"
        )
    return rows / norms[:, None]


def equal_error_rate(same: np.ndarray, scores: np.ndarray) -> tuple[float, float] | None:
    """(EER, the score there) of pairs `same` (bool) scored `scores`, higher meaning more alike,
    from scikit-learn's ROC curve (every point kept); None without pairs of both kinds."""
    from sklearn.metrics import roc_curve

    if same.all() or not same.any():
        return None
    false_accept, true_accept, thresholds = roc_curve(same, scores, drop_intermediate=False)
    false_reject = 1 - true_accept
    # The first point where false acceptance has reached false rejection (the curve starts at
    # no acceptance, false rejection 1, and ends at every pair accepted, false acceptance 1).
    index = int(np.flatnonzero(false_accept >= false_reject)[0])
    if index == 0 or false_accept[index] == false_reject[index]:
        return float(false_accept[index]), float(min(thresholds[index], 1.0))
    before = index - 1
    # Where the two rates cross on the segment between the two points.
    gap_before = false_reject[before] - false_accept[before]
    gap_after = false_accept[index] - false_reject[index]
    t = gap_before / (gap_before + gap_after)
    rate = false_accept[before] + t * (false_accept[index] - false_accept[before])
    threshold = min(float(thresholds[before]), 1.0) + t * (
        float(thresholds[index]) - min(float(thresholds[before]), 1.0)
    )
    return float(rate), float(threshold)


# The most inputs scored: every pair is compared (33.5 million pairs at this bound).
MAX_INPUTS = 8192
# Rows of the similarity matrix held at once.
_BLOCK = 512


@dataclass
class Scan:
    """What one pass over the similarity matrix, a block of rows at a time, finds: each
    input's retrieval hits at each k, its most similar other input and their similarity, and
    every pair's similarity and whether it is of one identity (i < j)."""

    hits: dict[int, np.ndarray]
    nearest: np.ndarray
    nearest_similarity: np.ndarray
    pair_scores: np.ndarray
    pair_same: np.ndarray


def scan(units: np.ndarray, identities: np.ndarray) -> Scan:
    """The `Scan` of unit vectors and their identities. A retrieval hit at k counts ties
    against the query: its most similar input of its own identity is ranked below every
    other identity's input as similar (so that the order of the split changes nothing)."""
    n = len(units)
    hits = {k: np.zeros(n, bool) for k in RECALL_AT}
    nearest = np.zeros(n, np.int64)
    nearest_similarity = np.zeros(n, np.float64)
    scores: list[np.ndarray] = []
    sames: list[np.ndarray] = []
    for first in range(0, n, _BLOCK):
        rows = np.arange(first, min(n, first + _BLOCK))
        similarity = units[rows] @ units.T
        own = np.arange(len(rows))
        similarity[own, rows] = -np.inf
        same = identities[rows][:, None] == identities[None, :]
        same[own, rows] = False
        best_same = np.where(same, similarity, -np.inf).max(axis=1)
        impostors_ahead = ((similarity >= best_same[:, None]) & ~same).sum(axis=1)
        for k in RECALL_AT:
            hits[k][rows] = np.isfinite(best_same) & (impostors_ahead < min(k, n - 1))
        nearest[rows] = similarity.argmax(axis=1)
        nearest_similarity[rows] = similarity[own, nearest[rows]]
        upper = np.arange(n)[None, :] > rows[:, None]
        scores.append(similarity[upper].astype(np.float32))
        sames.append(same[upper])
    return Scan(hits, nearest, nearest_similarity, np.concatenate(scores), np.concatenate(sames))


def too_many(count: int) -> str | None:
    """Why `count` inputs cannot be scored as embeddings, or None."""
    if count > MAX_INPUTS:
        return (
            f"{count} inputs: embeddings are scored over every pair of at most {MAX_INPUTS} "
            "inputs (limit the evaluation's inputs)"
        )
    return None


def embedding_metrics(
    vectors: np.ndarray, identities: np.ndarray, found: Scan | None = None
) -> dict[str, Any]:
    """The metrics of the module docstring, of each input's vector and identity (`found`:
    their `scan`, where it is made already)."""
    units = unit_vectors(vectors)
    identities = np.asarray(identities, np.int64)
    n = len(units)
    if n < 2:
        raise EvaluationError(f"{n} input: embeddings are compared in pairs, so at least two")
    problem = too_many(n)
    if problem:
        raise EvaluationError(problem)
    counts = np.bincount(identities)
    queries = counts[identities] > 1
    if not queries.any():
        raise EvaluationError(
            f"no identity has two of the {n} inputs: retrieval and verification compare inputs "
            "of one identity with each other"
        )
    found = found if found is not None else scan(units, identities)
    recall = {k: float(found.hits[k][queries].mean()) for k in RECALL_AT}
    eer = equal_error_rate(found.pair_same, found.pair_scores)
    return {
        "top1": recall[1],
        "top5": recall[5],
        "count": n,
        "recall_at_1": recall[1],
        "recall_at_5": recall[5],
        "eer": None if eer is None else eer[0],
        "eer_threshold": None if eer is None else eer[1],
        "queries": int(queries.sum()),
        "identities": int((counts > 0).sum()),
        "pairs": len(found.pair_scores),
        "similarity": "cosine",
        "library": f"scikit-learn {metadata.version('scikit-learn')} (roc_curve)",
    }


@register("embedding", tasks=("feature_extraction",))
class Embedding(FixedBatches):
    """The embedding scenario; see the module docstring."""

    def output_type(self) -> str:
        return "embedding"

    def run(self, reader: Any, preprocessor: Any) -> dict[str, Any]:
        """Refused before anything is timed where the inputs are more than are scored."""
        problem = too_many(reader.count)
        if problem:
            raise EvaluationError(problem)
        return super().run(reader, preprocessor)

    def classes(self) -> int:
        return len(self.labels)

    def collect(self, stage: Staged, stage_outputs: list[Any]) -> None:
        """Keep a stage's vectors of the first pass (its windows' combined) and identities."""
        for batch_outputs, batch_labels in zip(stage_outputs, stage.labels, strict=True):
            combined, labels = self.per_input(batch_outputs, batch_labels)
            outputs = np.asarray(combined)
            if outputs.ndim < 1 or len(outputs) != len(labels):
                raise EvaluationError(
                    f"{self.what} gives {len(outputs) if outputs.ndim else 0} embeddings for a "
                    f"batch of {len(labels)} inputs: its output's first axis must be the batch"
                )
            self.collected_outputs.append(outputs.reshape(len(outputs), -1))
            self.collected_labels.append(np.asarray(labels, np.int64))

    def score(self) -> tuple[dict[str, Any], int]:
        vectors = np.concatenate(self.collected_outputs)
        identities = np.concatenate(self.collected_labels)
        if len(identities) and (identities.min() < 0 or identities.max() >= len(self.labels)):
            wrong = identities[(identities < 0) | (identities >= len(self.labels))][0]
            raise EvaluationError(
                f"an input's identity is {int(wrong)}, but the dataset names "
                f"{len(self.labels)} identities"
            )
        units = unit_vectors(vectors)
        problem = too_many(len(units))
        if problem:
            raise EvaluationError(problem)
        found = scan(units, identities)
        metrics = embedding_metrics(vectors, identities, found)
        if self.first is None:
            predictions = [
                [(int(identities[j]), self.labels[int(identities[j])], float(similarity))]
                for j, similarity in zip(found.nearest, found.nearest_similarity, strict=True)
            ]
            self.first = FirstPass(units.astype(np.float32), identities, predictions)
        return metrics, len(identities)
