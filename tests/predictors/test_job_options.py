"""The job options as the loop takes them: `EvaluationOptions` is `JobOptions` and what the host
decides, so an option written in the protocol reaches the loop by its field alone; the newest,
`cooldown_ms`, acts there (its entry points: tests/evaluations/test_job_option_entry_points.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from predictors.evaluation import EvaluationError, EvaluationOptions
from predictors.protocol import JOB_DEFAULTS, JobOptions
from tests.predictors.conftest import RunEvaluation
from tests.predictors.zoo_store import zoo_store

pytestmark = pytest.mark.database_free


@pytest.fixture(scope="module")
def store() -> Path:
    return zoo_store(("digits-cnn",))


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    return {
        "model": "digits-cnn",
        "dataset": "digits",
        "framework": "onnxruntime",
        "threads": 1,
        "limit": 16,
        "batch_sizes": (1, 4, 8),
        "warmup": 1,
        "trace_level": "application",
    }


def test_the_loops_options_are_the_job_options_and_the_hosts() -> None:
    loop = {spec.name: spec.default for spec in dataclasses.fields(EvaluationOptions)}
    assert {name: loop[name] for name in JobOptions.names()} == dict(JOB_DEFAULTS)
    assert set(loop) - set(JobOptions.names()) == {
        "device",
        "stage_bytes",
        "graph_optimization",
        "custom_code",
        "custom_code_seconds",
    }
    # The protocol's checks hold for the loop's options, naming the option.
    with pytest.raises(EvaluationError, match="cooldown_ms must be at most 600000"):
        EvaluationOptions(cooldown_ms=600001)


def _gaps(evaluation: Any) -> list[float]:
    """The seconds between one batch size's last span and the next one's first."""
    spans = [s for s in evaluation.spans if "batch_size" in s.attributes]
    sizes = list(dict.fromkeys(s.attributes["batch_size"] for s in spans))
    ends = [max(s.end_ns for s in spans if s.attributes["batch_size"] == n) for n in sizes]
    starts = [min(s.start_ns for s in spans if s.attributes["batch_size"] == n) for n in sizes]
    return [(start - end) / 1e9 for end, start in zip(ends, starts[1:], strict=False)]


@pytest.mark.frameworks
def test_the_cooldown_pauses_before_each_batch_size_after_the_first(
    run_evaluation: RunEvaluation,
) -> None:
    rested = run_evaluation(cooldown_ms=1000)
    assert len(_gaps(rested)) == 2 and all(gap >= 1.0 for gap in _gaps(rested))
    assert rested.result["batch_sizes"][0]["batch_size"] == 1

    straight = run_evaluation()  # the default: no pause
    assert all(gap < 1.0 for gap in _gaps(straight))
