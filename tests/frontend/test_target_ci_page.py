"""`target_ci` from the launch to the page: an evaluation launched with a target interval is
claimed with it, the loop runs to it (the zoo's digits-cnn in ONNX Runtime), the agent's upload
carries what stopped each batch size to the hub, and the evaluation page (and `mlms evaluate
--hub`'s output) says it in a line per batch size."""

from __future__ import annotations

import importlib.util

import pytest
from playwright.sync_api import expect

from predictors.agent.results import result_upload
from predictors.cli.report import format_remote
from predictors.data import DataManager
from predictors.evaluation import EvaluationOptions, evaluate
from predictors.manifests.catalog import Catalog
from predictors.protocol import Job
from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
)
from tests.predictors.zoo_store import zoo_store

pytestmark = [
    pytest.mark.browser,
    pytest.mark.frameworks,
    pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="needs onnxruntime"),
]


def test_what_stopped_each_batch_size_reaches_the_hub_and_the_page(  # type: ignore[no-untyped-def]
    page, sign_in, alice, make_client, agent, hosts, broker, shoot
) -> None:
    body = {"batch_sizes": [1, 8], "limit": 32, "trace_level": "none"}
    evaluation_id = launched_id(
        launch(make_client(alice), **body, target_ci=0.05, target_ci_seconds=20)
    )
    broker.drain("onnxruntime.cpu")
    claimed = claim(agent, evaluation_id, hosts["cpu-1"])
    assert claimed.status_code == 200, claimed.content
    job = Job.from_dict(claimed.json())
    assert (job.options.target_ci, job.options.target_ci_seconds) == (0.05, 20)

    # The loop, as the agent runs it, on the zoo's model; the upload, as the agent posts it.
    catalog = Catalog()
    ran = evaluate(
        catalog.find_model("digits-cnn", "*", "onnxruntime"),
        catalog.find_dataset("digits"),
        EvaluationOptions.from_job(job.options, device="cpu"),
        DataManager(store_dir=zoo_store(("digits-cnn",))).fetch,
    )
    upload = result_upload(job, ran).to_dict()
    assert post_result(agent, evaluation_id, {"claim": job.claim, **upload}).status_code == 201

    answer = make_client(alice).get(f"/api/v1/evaluations/{evaluation_id}/").json()
    entries = answer["result"]["details"]["batch_sizes"]
    targets = {entry["batch_size"]: entry["target_ci"] for entry in entries}
    assert set(targets) == {1, 8}
    assert all(
        t["asked"] == 0.05 and t["stopped"] in ("interval", "time bound") for t in targets.values()
    )

    # `mlms evaluate --hub` prints the same lines from the hub's answer.
    printed = format_remote({"evaluations": [answer]}).splitlines()
    for size, target in targets.items():
        assert f"  target CI: batch size {size}: {target['text']}" in printed

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    lines = page.locator("#target-ci li")
    expect(lines).to_have_count(2)
    for size, target in targets.items():
        line = page.locator(f'#target-ci li[data-batch-size="{size}"]')
        expect(line).to_have_text(f"Batch size {size}: {target['text']}")
        expect(line).to_have_attribute("data-stopped", target["stopped"])
    shoot(page, "evaluation-target-ci")
