"""The agent's end of a container's socket (`predictors.agent.relay.Relay`), without Docker:
what a container may ask of the agent. The containers themselves run in tests/docker/."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from predictors.agent.containers import Limits, Runner, parse_memory
from predictors.agent.relay import FILES_MOUNT, JobCalls, Relay, RunFolders
from predictors.evaluation import EvaluationError
from predictors.protocol import Job, JobOptions, ManifestRef
from tests.predictors.zoo_store import REPO_ROOT

MANIFESTS = REPO_ROOT / "manifests"
SPLIT = "repo://datasets/digits/1.0.0/validation.parquet"


def _job(**options: Any) -> Job:
    model = (MANIFESTS / "models" / "digits-cnn" / "onnxruntime.yaml").read_text()
    dataset = (MANIFESTS / "datasets" / "digits.yaml").read_text()
    return Job(
        id="0" * 32,
        claim="1" * 32,
        attempt=1,
        device="cpu",
        model=ManifestRef(1, "digits-cnn", "1.0.0", "onnxruntime", "0" * 64, model),
        dataset=ManifestRef(2, "digits", "1.0.0", "", "0" * 64, dataset),
        options=JobOptions(**options),
    )


@pytest.fixture
def relay(tmp_path: Path) -> Any:
    cache = tmp_path / "cache"
    source = cache / "sha256" / "abc" / "validation.parquet"
    source.parent.mkdir(parents=True)
    source.write_bytes(b"rows")
    fetched: list[str] = []

    def fetch(url: str, sha256: str | None) -> Path:
        fetched.append(url)
        return source

    runner = Runner(None, "box", cache)
    job = _job()
    work = RunFolders(runner.cache_dir, job)
    relay = Relay(job, JobCalls(fetch, lambda d, t: None, lambda: False, None), work)
    relay.fetched = fetched
    yield relay
    relay._server.close()
    work.remove()


def test_a_container_gets_only_the_files_its_jobs_manifests_name(relay: Any) -> None:
    answer = relay.answer({"op": "fetch", "url": SPLIT, "sha256": None})
    assert answer["path"].startswith(f"{FILES_MOUNT}/") and answer["path"].endswith(".parquet")
    linked = relay.work.files / Path(answer["path"]).name
    assert linked.read_bytes() == b"rows"
    assert os.stat(linked).st_ino == os.stat(relay.calls.fetch(SPLIT, None)).st_ino  # a hard link

    for url in (
        "https://metadata.example.internal/latest",
        "repo://datasets/private/1.0.0/train.parquet",
        "repo://models/digits-cnn/1.0.0/../../secret/model.onnx",
    ):
        with pytest.raises(EvaluationError, match="is not a file of this job's manifests"):
            relay.answer({"op": "fetch", "url": url, "sha256": None})
    assert relay.fetched == [SPLIT, SPLIT]  # nothing else was fetched


def test_the_files_folder_holds_nothing_of_the_cache_but_the_jobs_files(relay: Any) -> None:
    assert list(relay.work.files.iterdir()) == []
    assert (relay.work.socket / "agent.sock").exists()
    assert oct(relay.work.socket.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize(
    "span",
    [
        "a span",
        {"name": 7, "start_ns": 1, "end_ns": 2},
        {"name": "x", "start_ns": "1", "end_ns": 2},
        {"name": "x", "start_ns": 1, "end_ns": 2, "attributes": []},
        {"name": "x", "start_ns": 1, "end_ns": 2, "span_id": True},
    ],
)
def test_spans_in_another_shape_are_refused(relay: Any, span: Any) -> None:
    with pytest.raises(ValueError):
        relay.answer({"op": "spans", "spans": [span]})


def test_the_requests_limits_are_capped_by_the_hosts() -> None:
    runner = Runner(None, "box", Path("/tmp/unused"), limits=Limits(cpus=2, memory=2**30))
    asked = _job()
    limits = runner.limits_for(Job(**{**asked.__dict__, "limits": {"cpus": 4, "memory_mb": 256}}))
    assert limits == Limits(cpus=2, memory=256 * 2**20)
    assert runner.limits_for(asked) == Limits(cpus=2, memory=2**30)
    assert Runner(None, "box", Path("/tmp/unused")).limits_for(asked) == Limits()


@pytest.mark.parametrize("text", ["inf", "nan", "1e30g", "-4g", "lots"])
def test_a_size_that_is_no_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_memory(text)
