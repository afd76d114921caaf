"""Results of the tasks whose metrics are no top-1 accuracy: a regression's errors (lower is
better, in the target's units) and a multi-label classifier's mAP, through the hub: what a
result may say for its task, how boards sort and label them, and a split checked on upload."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
    result_body,
    url,
)
from tests.helpers import error_of
from tests.hub.factories import dataset_manifest, model_manifest, to_yaml, upload

pytestmark = pytest.mark.django_db


def _regression(owner: APIClient) -> None:
    model = model_manifest("fit", visibility="public")
    model["task"] = "regression"
    model["inputs"] = [
        {"name": "x", "type": "tensor", "parameters": {"element_type": "float32", "shape": [3]}}
    ]
    model["outputs"] = [{"name": "y", "type": "values", "parameters": {"labels": ["level"]}}]
    assert upload(owner, to_yaml(model)).status_code == 201
    dataset = dataset_manifest("levels", visibility="public")
    dataset.update(task="regression", encoding="npy", labels=["level"])
    assert upload(owner, to_yaml(dataset)).status_code == 201


def _finish(client: APIClient, agent: APIClient, host: Any, top1: float, top5: float) -> Any:
    evaluation_id = launched_id(launch(client, model="fit", dataset="levels", batch_sizes=[1]))
    claimed = claim(agent, evaluation_id, host).json()
    body = result_body(claimed["claim"])
    body["accuracy"] = {"top1": top1, "top5": top5, "count": 2}
    body["details"] = {"model": {"task": "regression"}}
    return evaluation_id, post_result(agent, evaluation_id, body)


def test_a_regression_result_is_its_error_and_its_board_puts_the_lowest_first(
    bob_client, agent, hosts
) -> None:
    _regression(bob_client)
    worse, stored = _finish(bob_client, agent, hosts["cpu-1"], 52.5, 61.0)
    assert stored.status_code == 201, stored.content
    better, stored = _finish(bob_client, agent, hosts["cpu-2"], 46.8, 59.1)
    assert stored.status_code == 201, stored.content
    detail = bob_client.get(url(better)).json()
    assert detail["accuracy"]["top1"] == 46.8
    assert detail["reason"] == "MAE 46.8, RMSE 59.1 on 2 inputs"
    for evaluation_id in (worse, better):
        assert bob_client.post(url(evaluation_id, "publish")).status_code == 200

    board = APIClient().get("/api/v1/leaderboards/regression/levels/").json()["results"]
    assert [row["evaluation"] for row in board] == [better, worse]
    descending = (
        APIClient()
        .get("/api/v1/leaderboards/regression/levels/", {"ordering": "-top1"})
        .json()["results"]
    )
    assert [row["evaluation"] for row in descending] == [worse, better]

    page = APIClient().get("/leaderboards/regression/levels/")
    html = page.content.decode()
    assert page.status_code == 200
    assert ">MAE" in html and ">RMSE" in html and "46.8<" in html and "4680" not in html
    plot = page.context["plot"]
    assert plot["metric"] == "MAE" and plot["unit"] == "" and plot["lower_is_better"]
    # The best (lowest) error is alone on the front, whatever the latencies.
    assert plot["front"]["y"] == [46.8]


def test_a_result_whose_metric_its_task_cannot_have_is_refused_naming_it(
    bob_client, agent, hosts
) -> None:
    _regression(bob_client)
    evaluation_id, refused = _finish(bob_client, agent, hosts["cpu-1"], -1.0, 2.0)
    assert refused.status_code == 400
    assert error_of(refused)["path"] == "accuracy.top1"
    # A classifier's accuracy is a fraction: 46.8 is no accuracy.
    classified = launched_id(launch(bob_client, batch_sizes=[1]))
    claimed = claim(agent, classified, hosts["cpu-1"]).json()
    body = result_body(claimed["claim"])
    body["accuracy"]["top1"] = 46.8
    refused = post_result(agent, classified, body)
    assert refused.status_code == 400
    error = error_of(refused)
    assert error["path"] == "accuracy.top1" and "fraction from 0 to 1" in error["message"]
    assert bob_client.get(url(classified)).json()["status"] == "running"  # nothing stored


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_a_multi_label_split_is_checked_on_upload_class_by_class(bob_client) -> None:
    dataset = dataset_manifest("tags", split_file="validation.parquet")
    dataset.update(task="multi_label_classification", labels=["a", "b", "c"])
    buffer = io.BytesIO()
    labels = pa.array([[0, 2], [3]], pa.list_(pa.int64()))
    pq.write_table(pa.table({"image": pa.array([_png(), _png()]), "label": labels}), buffer)
    refused = upload(bob_client, to_yaml(dataset), {"validation.parquet": buffer.getvalue()})
    assert refused.status_code == 400
    error = error_of(refused)
    assert error["path"] == "splits.validation.path"
    assert "row 1 has a class 3, but the dataset has 3 labels" in error["message"]
    assert bob_client.get("/api/v1/manifests/datasets/tags/").status_code == 404

    buffer = io.BytesIO()
    labels = pa.array([[0, 2], []], pa.list_(pa.int64()))
    pq.write_table(pa.table({"image": pa.array([_png(), _png()]), "label": labels}), buffer)
    stored = upload(bob_client, to_yaml(dataset), {"validation.parquet": buffer.getvalue()})
    assert stored.status_code == 201, stored.content


def test_a_latency_only_result_has_no_accuracy_and_stays_off_the_boards(
    bob, bob_client, agent, hosts
) -> None:
    timed = launched_id(launch(bob_client, batch_sizes=[1], latency_only=True))
    assert bob_client.get(url(timed)).json()["request"]["latency_only"] is True
    claimed = claim(agent, timed, hosts["cpu-1"]).json()
    body = result_body(claimed["claim"])
    refused = post_result(agent, timed, body)  # an accuracy it cannot have
    assert refused.status_code == 400
    assert "the evaluation is latency-only" in error_of(refused)["message"]
    body["accuracy"] = {"top1": None, "top5": None, "count": 2}
    body["predictions"].update(classes=[[], []], probabilities=[[], []], labels=[-1, -1])
    stored = post_result(agent, timed, body)
    assert stored.status_code == 201, stored.content
    detail = bob_client.get(url(timed)).json()
    assert detail["accuracy"]["top1"] is None
    assert (
        detail["reason"]
        == "latency only (not scored): 2 inputs timed, p50 1.400 ms at batch size 1"
    )
    assert bob_client.post(url(timed, "publish")).status_code == 200
    assert APIClient().get(url(timed)).status_code == 200  # published: anyone reads it
    assert APIClient().get("/api/v1/leaderboards/").json() == []  # but no board ranks it
    browser = Client()
    browser.force_login(bob)
    page = browser.get("/evaluations/").content.decode()
    cell = page[page.index(f'data-evaluation="{timed}"') :]
    assert (
        cell[cell.index('data-field="top1"') :].split("</td>")[0].endswith(">latency only</span>")
    )
    assert APIClient().get(f"/evaluations/{timed}/").status_code == 200

    # A scored evaluation must report its accuracy.
    scored = launched_id(launch(bob_client, batch_sizes=[1]))
    claimed = claim(agent, scored, hosts["cpu-2"]).json()
    body = result_body(claimed["claim"])
    body["accuracy"]["top1"] = None
    refused = post_result(agent, scored, body)
    assert refused.status_code == 400 and error_of(refused)["path"] == "accuracy.top1"


def test_a_model_without_labels_is_launched_for_latency_only(bob_client, hosts) -> None:
    model = model_manifest("embedder", visibility="public")
    model["task"] = "feature_extraction"
    model["outputs"] = [{"name": "embedding", "type": "tensor"}]
    assert upload(bob_client, to_yaml(model)).status_code == 201
    refused = launch(bob_client, model="embedder")
    assert refused.status_code == 400
    error = error_of(refused)
    # No dataset is for feature_extraction: the launch says how to time the model.
    assert error["path"] == "dataset" and "with latency_only" in error["message"]
    # Timed, it runs on any dataset its inputs fit (d is an image_classification dataset).
    launched_id(launch(bob_client, model="embedder", latency_only=True))
    refused = launch(bob_client, model="embedder", latency_only="maybe")
    assert refused.status_code == 400 and error_of(refused)["path"] == "latency_only"


def test_two_regressions_compare_by_their_values_and_need_both_errors(
    bob_client, agent, hosts
) -> None:
    _regression(bob_client)
    ids = []
    for host, values in ((hosts["cpu-1"], [150.0, 80.0]), (hosts["cpu-2"], [10.0, 300.0])):
        evaluation_id = launched_id(
            launch(bob_client, model="fit", dataset="levels", batch_sizes=[1])
        )
        claimed = claim(agent, evaluation_id, host).json()
        body = result_body(claimed["claim"])
        body["accuracy"] = {"top1": 40.0, "top5": None, "count": 2}
        refused = post_result(agent, evaluation_id, body)  # a regression gives both errors
        assert refused.status_code == 400
        assert error_of(refused)["path"] == "accuracy.top5"
        body["accuracy"]["top5"] = 45.0
        body["predictions"] = {
            "top_k": 1,
            "labels": [-1, -1],
            "classes": [[0], [0]],
            "probabilities": [[values[0]], [values[1]]],
        }
        assert post_result(agent, evaluation_id, body).status_code == 201
        ids.append(evaluation_id)
    compared = bob_client.get("/api/v1/compare/", {"evaluations": ",".join(ids)}).json()
    other = compared["accuracy"]["rows"][1]
    # The values as stored, not as a distribution: |80 - 300| = 220.
    assert other["max_abs_difference"] == 220.0
    assert other["agreement"] is None and other["kl_mean"] is None
    assert compared["accuracy"]["distributions"].startswith("none: a regression's values")
