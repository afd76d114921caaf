"""An agent without containers runs a job its own process can no longer take (TensorFlow's
thread pools, sized once per process) in a fresh process: the same protocol as a container,
the same result."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from predictors.agent.process import ProcessRunner
from predictors.data import DataManager
from predictors.evaluation import EvaluationError
from predictors.manifests.catalog import Catalog
from predictors.protocol import Job, JobOptions, ManifestRef
from tests.predictors.zoo_store import REPO_ROOT, zoo_store

pytestmark = pytest.mark.database_free


def _job(framework: str, threads: int | None, **options: object) -> Job:
    catalog = Catalog(REPO_ROOT / "manifests")
    model = catalog.find_model("digits-cnn", "*", framework)
    dataset = catalog.find_dataset("digits", "*")
    model_ref = ManifestRef(1, "digits-cnn", "1.0.0", framework, "0" * 64, model.source)
    dataset_ref = ManifestRef(2, "digits", "1.0.0", "", "0" * 64, dataset.source)
    job_options = JobOptions(batch_sizes=(1, 4), limit=24, threads=threads, **options)  # type: ignore[arg-type]
    return Job(
        "e" * 32, "c" * 32, 1, "cpu", model_ref, dataset_ref, job_options, trace_id="ab" * 16
    )


def test_a_job_in_a_fresh_process_reports_its_result_progress_and_spans(tmp_path: Path) -> None:
    store = zoo_store(("digits-cnn", "digits"))
    fetch = DataManager(store_dir=store).fetch
    progress: list[tuple[int, int]] = []
    spans: list[object] = []
    job = _job("tensorflow", 1, trace_level="model")

    upload = ProcessRunner(tmp_path).run(
        job,
        fetch,
        lambda done, total: progress.append((done, total)),
        lambda: False,
        spans.extend,
        why="a test",
    )

    assert upload.accuracy.count == 24
    assert upload.stack["process"]["fresh"] == "a test"
    assert upload.stack["process"]["pid"] != os.getpid()
    assert upload.details.settings.intra_op_threads == 1
    assert progress and progress[-1][0] == progress[-1][1] > 0
    assert {"load", "warm-up", "postprocess"} <= {span.name for span in spans}  # type: ignore[attr-defined]
    assert list((tmp_path / "runs").iterdir()) == []  # the job's folder is gone


def test_a_failure_in_the_fresh_process_is_the_evaluations_own_message(tmp_path: Path) -> None:
    store = zoo_store(("digits-cnn", "digits"))
    fetch = DataManager(store_dir=store).fetch
    job = _job("onnxruntime", 1, overrides=("inputs.0.parameters.resize_size=[9, 9]",))

    with pytest.raises(
        EvaluationError,
        match=r"takes input of shape \(N, 1, 8, 8\), but the preprocessing gives \(1, 1, 9, 9\)",
    ):
        ProcessRunner(tmp_path).run(job, fetch, lambda d, t: None, lambda: False, None)


SCRIPT = """
import sys
from predictors.agent.process import fresh_process_reason
from tests.predictors.test_fresh_process import _job
assert fresh_process_reason(_job("tensorflow", None)) is None
assert fresh_process_reason(_job("onnxruntime", 3)) is None
assert fresh_process_reason(_job("tensorflow", 2)) is None   # the first: the pools are made now
import tensorflow as tf
tf.constant(1.0) + 1.0
assert fresh_process_reason(_job("tensorflow", 2)) is None   # the same: this process will do
print(fresh_process_reason(_job("tensorflow", 3)))
"""


def test_a_tensorflow_job_asking_for_other_threads_than_the_process_has_needs_a_fresh_one() -> None:
    # In a process of its own: TensorFlow's pools, once made, stay for the process's life.
    finished = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    reason = finished.stdout.strip().splitlines()[-1]
    assert "thread pools" in reason and "3" in reason, reason
