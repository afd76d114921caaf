"""`mlms evaluations list` and `show`: each result's metrics in words, by its task (a
percentage, a regression's error, a latency-only run's "not scored")."""

from __future__ import annotations

from typing import Any

import pytest

from predictors.cli.history import _detail, _listing

pytestmark = pytest.mark.database_free


def _evaluation(task: str, top1: float | None, top5: float | None) -> dict[str, Any]:
    return {
        "id": "0123456789abcdef",
        "status": "succeeded",
        "reason": "",
        "task": task,
        "model": {"name": "m", "version": "1.0.0"},
        "framework": "onnxruntime",
        "framework_version": "1.31.1",
        "dataset": {"name": "d", "version": "1.0.0", "split": "validation"},
        "device": "cpu",
        "host": "h",
        "created_at": "2026-11-25T18:00:00Z",
        "user": "alice",
        "accuracy": {"top1": top1, "top5": top5, "count": 100},
        "result": {
            "accuracy": {"top1": top1, "top5": top5, "count": 100},
            "latency": {"1": {"p50_ms": 1.0, "p90_ms": 1.2, "p99_ms": 1.5}},
            "throughput": {"1": 950.0},
        },
    }


@pytest.mark.parametrize(
    ("task", "top1", "top5", "cell", "words"),
    [
        ("image_classification", 0.962, 0.991, "96.20%", "top-1 96.20%, top-5 99.10%"),
        ("regression", 46.82, 59.11, "46.82 MAE", "MAE 46.82, RMSE 59.11"),
        ("multi_label_classification", 0.9772, 0.9194, "97.72% mAP", "mAP 97.72%, F1 (micro)"),
        ("image_classification", None, None, "latency only", "latency only (not scored)"),
    ],
)
def test_results_are_shown_by_their_task(
    task: str, top1: float | None, top5: float | None, cell: str, words: str
) -> None:
    evaluation = _evaluation(task, top1, top5)
    listing = _listing({"results": [evaluation], "count": 1}, None)
    assert listing.splitlines()[0].split()[-1] == "result"
    assert listing.splitlines()[2].endswith(cell)
    assert f"accuracy   {words}" in _detail(evaluation)
