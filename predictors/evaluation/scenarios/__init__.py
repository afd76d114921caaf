"""The scenarios: the ways the loop drives a model, one module each, every one registered by
name and by the tasks it scores (`predictors.evaluation.scenario`).

- `fixed_batches`: the fixed-batch closed loop, the scenario of classification and of any task
  no other scenario registers; the scenarios of staged batches below build on it;
- `detection` (object detection, COCO's mAP), `segmentation` (semantic segmentation, per
  pixel), `multilabel` (multi-label classification), `regression`, `text_recognition` (CTC
  decoding, character and word error rates), `embedding` (feature extraction, by retrieval and
  verification): its loop, their outputs and metrics;
- `latency`: a model timed without scoring it (a `latency_only` job, of any task);
- `streams`: ordered streams side by side, a state carried from call to call (sequence
  labelling);
- `loadgen`: MLPerf LoadGen's scenarios, after the scenario, on the same loaded model (a
  follow-up, by the job option `scenario`); `loadgen_logs` reads its logs apart.
"""

from __future__ import annotations

from predictors.evaluation.base import Scenario
from predictors.evaluation.scenario import (
    BY_NAME,
    BY_TASK,
    DEFAULT,
    FOLLOW_UPS,
    LATENCY_ONLY,
    FollowUp,
)
from predictors.evaluation.scenarios import (
    detection,
    embedding,
    fixed_batches,
    latency,
    loadgen,
    multilabel,
    regression,
    segmentation,
    streams,
    text_recognition,
)

__all__ = [
    "detection",
    "embedding",
    "fixed_batches",
    "follow_up_for",
    "latency",
    "loadgen",
    "multilabel",
    "regression",
    "scenario_for",
    "segmentation",
    "streams",
    "text_recognition",
]


def scenario_for(task: str, latency_only: bool = False) -> type[Scenario]:
    """The scenario of a job: the latency-only one for a job timed only, else its task's, else
    the fixed-batch closed loop."""
    if latency_only:
        return BY_NAME[LATENCY_ONLY]
    return BY_TASK.get(task, BY_NAME[DEFAULT])


def follow_up_for(scenario: str) -> FollowUp | None:
    """What drives the model after the scenario for the job option `scenario` (None for the
    fixed batches alone)."""
    return FOLLOW_UPS.get(scenario)
