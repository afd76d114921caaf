"""Fixtures of the predictor tests: `run_evaluation`, one evaluation through the evaluation loop
(`predictors.evaluation.evaluate`) on the test module's `store`.

A module that uses it defines a `store` fixture (the artifact store the evaluation fetches from)
and may override `evaluation_defaults` for defaults of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from predictors.data import DataManager
from predictors.evaluation import Evaluation, EvaluationOptions, Progress, SpanSink, evaluate
from predictors.manifests import Manifest
from predictors.manifests.catalog import Catalog

RunEvaluation = Callable[..., Evaluation]


@functools.cache
def _catalog() -> Catalog:
    """The built-in manifests of manifests/."""
    return Catalog()


@pytest.fixture
def evaluation_defaults() -> dict[str, Any]:
    """What `run_evaluation` runs unless told otherwise: `model`, `framework` and `dataset`
    (names in the built-in catalog, or manifests), and EvaluationOptions' fields.

    By default the zoo's digits-cnn on `digits` with one intra-op thread: TensorFlow sizes its
    thread pools once per process, so the evaluations of one session must agree on the number.
    A module overrides this fixture for its own defaults (requesting `evaluation_defaults` in
    the override extends these)."""
    return {"model": "digits-cnn", "dataset": "digits", "threads": 1}


@pytest.fixture
def run_evaluation(store: Path, evaluation_defaults: dict[str, Any]) -> RunEvaluation:
    """`run_evaluation(model, framework, dataset, *, progress, cancelled, sink, **options)`:
    evaluate `model` (a name in the built-in catalog, its highest version for `framework`, or
    a manifest) on
    `dataset` (a catalog name or a manifest), with EvaluationOptions `options`, fetching from
    the module's `store`. What is not given comes from `evaluation_defaults`."""

    def run(
        model: str | Manifest | None = None,
        framework: str | None = None,
        dataset: str | Manifest | None = None,
        *,
        progress: Progress | None = None,
        cancelled: Callable[[], bool] | None = None,
        sink: SpanSink | None = None,
        **options: Any,
    ) -> Evaluation:
        given = {"model": model, "framework": framework, "dataset": dataset}
        settings = {
            **evaluation_defaults,
            **{key: value for key, value in given.items() if value is not None},
            **options,
        }
        model, framework, dataset = (settings.pop(key, None) for key in given)
        if isinstance(model, str):
            if framework is None:
                raise TypeError(f"run_evaluation: name the framework of model {model}")
            model = _catalog().find_model(model, "*", framework)
        if model is None or dataset is None:
            raise TypeError("run_evaluation: needs a model and a dataset")
        if isinstance(dataset, str):
            dataset = _catalog().find_dataset(dataset)
        return evaluate(
            model,
            dataset,
            EvaluationOptions(**settings),
            DataManager(store_dir=store).fetch,
            progress=progress,
            cancelled=cancelled,
            sink=sink,
        )

    return run
