"""The evaluation page (`/evaluations/<id>/`): status, progress and results, kept current without
a reload: from the WebSocket, or by polling the REST endpoint once the socket is gone."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from playwright.sync_api import expect

from evaluations.models import Evaluation
from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
    progress,
    result_body,
)

pytestmark = pytest.mark.browser

# Set once the page has loaded: still there after the page changed, it shows no reload happened.
MARK = "window.__notReloaded = true"
NOT_RELOADED = "() => window.__notReloaded === true"


@pytest.fixture
def finished_with(make_client, alice, agent, hosts, broker):  # type: ignore[no-untyped-def]
    """`finished_with(details, **result)`: Alice's evaluation of m on d at batch size 1,
    claimed by the agent and finished with a result whose `details` are `details` (and whose
    other fields `result` overrides); its id."""

    def finish(details: dict, **result: object) -> str:
        evaluation_id = launched_id(launch(make_client(alice), batch_sizes=[1], limit=2))
        broker.drain("onnxruntime.cpu")
        claimed = claim(agent, evaluation_id, hosts["cpu-1"])
        assert claimed.status_code == 200, claimed.content
        body = result_body(claimed.json()["claim"], (1,))
        for key, value in result.items():
            body[key] = value
        body["details"] = details
        assert post_result(agent, evaluation_id, body).status_code == 201
        return evaluation_id

    return finish


@pytest.fixture
def launched(make_client, alice, hosts, broker) -> str:  # type: ignore[no-untyped-def]
    """Alice's evaluation of m on d at batch sizes 1 and 8, dispatched to onnxruntime.cpu."""
    evaluation_id = launched_id(launch(make_client(alice), batch_sizes=[1, 8], limit=2))
    broker.drain("onnxruntime.cpu")
    return evaluation_id


def test_the_page_polls_the_api_when_there_is_no_socket_and_shows_the_result(
    page, sign_in, alice, agent, hosts, launched, shoot
) -> None:
    sign_in(page, alice)
    page.goto(f"/evaluations/{launched}/")
    page.evaluate(MARK)
    expect(page.locator("#status")).to_have_text("dispatched")
    # The in-process test server speaks no WebSocket: the page falls back to polling.
    expect(page.locator("#live")).to_have_class("live polling")

    claimed = claim(agent, launched, hosts["cpu-1"])
    assert claimed.status_code == 200, claimed.content
    claim_id = claimed.json()["claim"]
    expect(page.locator("#status")).to_have_text("running")
    expect(page.locator("#fact-host")).to_have_text("cpu-1")

    assert progress(agent, launched, claim_id, 1, 2).status_code == 200
    expect(page.locator("#progress-text")).to_have_text("1 of 2 predictions (50 %)")
    expect(page.locator("#progress")).to_have_attribute("aria-valuenow", "1")

    assert post_result(agent, launched, result_body(claim_id, (1, 8))).status_code == 201
    expect(page.locator("#status")).to_have_text("succeeded")
    expect(page.locator("#results")).to_be_visible()
    expect(page.locator("#accuracy")).to_contain_text("50.00 %")
    expect(page.locator("#latency tbody tr")).to_have_count(2)
    expect(page.locator('#latency tr[data-batch-size="8"]')).to_contain_text("4800.0")
    expect(page.locator("#cancel-form")).to_be_hidden()
    expect(page.locator("#live")).to_have_class("live done")
    assert page.evaluate(NOT_RELOADED)
    shoot(page, "evaluation-succeeded-polling")


def test_cancelling_a_dispatched_evaluation(page, sign_in, alice, launched) -> None:
    sign_in(page, alice)
    page.goto(f"/evaluations/{launched}/")

    page.once("dialog", lambda dialog: dialog.accept())  # "Cancel this evaluation? …"
    page.get_by_role("button", name="Cancel").click()

    expect(page.locator(".message.success")).to_have_text("Cancellation requested.")
    expect(page.locator("#status")).to_have_text("cancelled")
    expect(page.locator("#status-reason")).to_contain_text("cancelled by alice before it started")
    assert Evaluation.objects.get(pk=launched).status == Evaluation.CANCELLED


def test_another_users_evaluation_is_not_found(launched, django_user_model) -> None:
    mallory = django_user_model.objects.create_user("mallory")
    client = Client()
    client.force_login(mallory)

    assert client.get(f"/evaluations/{launched}/").status_code == 404
    assert client.post(f"/evaluations/{launched}/cancel/").status_code == 404
    assert Evaluation.objects.get(pk=launched).status == Evaluation.DISPATCHED


def test_the_evaluations_list_shows_the_users_evaluations(
    page, sign_in, alice, launched, shoot
) -> None:
    sign_in(page, alice)
    page.goto("/evaluations/")

    row = page.locator(f'#evaluations tr[data-evaluation="{launched}"]')
    expect(row).to_contain_text("dispatched")
    shoot(page, "evaluations-list")
    row.get_by_role("link", name=launched[:8]).click()
    expect(page).to_have_url(f"/evaluations/{launched}/")


def test_the_page_follows_an_evaluation_live_over_the_websocket(
    hub, model_and_host, hub_page, shoot
) -> None:
    page = hub_page
    host = model_and_host
    api_reads: list[str] = []
    page.on(
        "request",
        lambda request: (
            api_reads.append(request.url) if "/api/v1/evaluations/" in request.url else None
        ),
    )

    page.goto("/accounts/login/?next=/evaluate/%3Fmodel%3Dm")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill("correct-horse-battery-staple")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_label("Batch sizes").fill("1, 8")
    page.get_by_role("button", name="Launch").click()

    expect(page).to_have_url(re.compile(r"/evaluations/[0-9a-f-]{36}/$"))
    evaluation_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    page.evaluate(MARK)
    expect(page.locator("#live")).to_have_class("live connected")
    expect(page.locator("#status")).to_have_text("dispatched")

    status, claimed = hub.request(
        "POST",
        f"/api/v1/evaluations/{evaluation_id}/claim/",
        {"host": host["id"], "dispatch": 1},
        token=hub.agent_token,
    )
    assert status == 200, claimed
    claim_id = claimed["claim"]
    expect(page.locator("#status")).to_have_text("running")
    for done in (1, 2):
        hub.request(
            "POST",
            f"/api/v1/evaluations/{evaluation_id}/progress/",
            {"claim": claim_id, "done": done, "total": 2},
            token=hub.agent_token,
        )
        expect(page.locator("#progress-text")).to_contain_text(f"{done} of 2 predictions")
    shoot(page, "evaluation-running-websocket")
    status, _ = hub.request(
        "POST",
        f"/api/v1/evaluations/{evaluation_id}/result/",
        result_body(claim_id, (1, 8)),
        token=hub.agent_token,
    )
    assert status == 201

    expect(page.locator("#status")).to_have_text("succeeded")
    expect(page.locator("#latency tbody tr")).to_have_count(2)
    expect(page.locator("#history tbody tr")).to_have_count(
        4
    )  # queued, dispatched, running, succeeded
    assert page.evaluate(NOT_RELOADED)
    # Every change came over the socket; the REST endpoint was read once, for the result.
    assert len(api_reads) == 1, api_reads
    shoot(page, "evaluation-succeeded-websocket")


@pytest.mark.parametrize(
    ("details", "top5", "shown", "absent"),
    [
        (
            {
                "model": {"task": "object_detection"},
                "accuracy": {
                    "map": 0.6922,
                    "map_50": 0.9762,
                    "map_75": 0.81,
                    "mar_100": 0.75,
                    "objects": 812,
                },
            },
            0.9762,
            ["mAP (IoU .50:.95)", "0.6922", "mAP@.50", "0.9762", "AR@100", "Objects", "812"],
            ["Top-1"],
        ),
        (
            {
                "model": {"task": "sequence_labelling"},
                "accuracy": {
                    "top1": 1.0,
                    "precision": 1.0,
                    "recall": 1.0,
                    "f1": 1.0,
                    "roc_auc": None,
                },
                "accuracy_state_reset": {"top1": 0.5261},
            },
            None,
            [
                "Accuracy (state carried)",
                "100.00 %",
                "Accuracy (state reset)",
                "52.61 %",
                "ROC AUC",
                "—",
            ],
            ["Top-5"],
        ),
        (
            {
                "model": {"task": "semantic_segmentation"},
                "accuracy": {
                    "miou": 0.6444,
                    "pixel_accuracy": 0.9517,
                    "mean_class_accuracy": 0.7069,
                    "iou": {"background": 0.95, "circle": None},
                },
            },
            0.9517,
            [
                "mIoU",
                "0.6444",
                "Pixel accuracy",
                "95.17 %",
                "IoU background",
                "0.9500",
                "IoU circle",
            ],
            ["Top-1"],
        ),
        (
            {
                "model": {"task": "multi_label_classification"},
                "accuracy": {
                    "map": 0.9772,
                    "map_micro": 0.9801,
                    "f1_micro": 0.9194,
                    "f1_macro": 0.918,
                    "exact_match": 0.8275,
                    "hamming_loss": 0.0431,
                    "threshold": 0.5,
                    "average_precision": {"circle": 0.972, "ring": None},
                },
            },
            0.9194,
            ["mAP", "0.9772", "F1 (micro)", "0.9194", "Exact match", "82.75 %", "AP ring"],
            ["Top-1"],
        ),
        (
            {
                "model": {"task": "regression"},
                "accuracy": {"mae": 46.82, "rmse": 59.11, "r2": 0.3706, "max_error": 151.3},
            },
            0.9,
            ["MAE", "46.82", "RMSE", "59.11", "R²", "0.3706", "Max error", "151.3"],
            ["Top-1", "%"],
        ),
        ({"model": {"task": "image_classification"}}, None, ["Top-1", "50.00 %"], ["Top-5"]),
    ],
)
def test_the_result_shows_the_metrics_of_its_task(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finished_with, details, top5, shown, absent
) -> None:
    evaluation_id = finished_with(
        {"device": "cpu", **details}, accuracy={"top1": 0.5, "top5": top5, "count": 2}
    )

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    accuracy = page.locator("#accuracy")
    for text in shown:
        expect(accuracy).to_contain_text(text)
    for text in absent:
        expect(accuracy).not_to_contain_text(text)


def test_a_latency_only_result_says_it_was_not_scored(  # type: ignore[no-untyped-def]
    page, sign_in, alice, agent, hosts, make_client, broker
) -> None:
    evaluation_id = launched_id(
        launch(make_client(alice), batch_sizes=[1], limit=2, latency_only=True)
    )
    broker.drain("onnxruntime.cpu")
    claimed = claim(agent, evaluation_id, hosts["cpu-1"])
    body = result_body(claimed.json()["claim"], (1,))
    body["accuracy"] = {"top1": None, "top5": None, "count": 2}
    body["details"] = {"device": "cpu", "model": {"task": "image_classification"}}
    assert post_result(agent, evaluation_id, body).status_code == 201

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    accuracy = page.locator("#accuracy")
    expect(accuracy).to_contain_text("not scored (latency only)")
    expect(accuracy).to_contain_text("Inputs timed")
    expect(accuracy).not_to_contain_text("Top-1")
    # Its latency is all there is, and it is there.
    expect(page.locator("#latency tbody tr")).to_have_count(1)


def test_the_runs_hygiene_warnings_are_shown_labelled(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finished_with
) -> None:
    evaluation_id = finished_with(
        {
            "device": "cpu",
            "model": {"task": "image_classification"},
            "batch_sizes": [{"batch_size": 1, "first_call_ms": 12.5}],
            "trace": {
                "level": "model",
                "overhead": {
                    "measured": True,
                    "level": "model",
                    "batch_size": 1,
                    "calls": 32,
                    "traced_p50_ms": 1.4,
                    "untraced_p50_ms": 1.25,
                    "overhead": 0.12,
                },
            },
            "hygiene": [
                {
                    "code": "threads_over_cores",
                    "message": "16 threads on 2 usable cores: the threads take turns",
                    "threads": 16,
                    "cores": 2,
                },
                {
                    "code": "others_busy",
                    "message": "other processes used 74% of the machine's CPU time during the run",
                    "share": 0.74,
                },
            ],
        }
    )

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    warnings = page.locator("#hygiene li")
    expect(warnings).to_have_count(2)
    expect(warnings.first).to_contain_text("threads over cores: 16 threads on 2 usable cores")
    expect(page.locator('#hygiene li[data-code="others_busy"]')).to_contain_text("74%")
    # The cold first call, apart from the warm latency.
    expect(page.locator('#latency tr[data-batch-size="1"]')).to_contain_text("12.5")
    expect(page.locator("#tracing-overhead")).to_have_text(
        "Tracing overhead at level model: +12.0 % (p50 1.400 ms traced, 1.250 ms untraced, "
        "batch size 1, 32 calls)"
    )


@pytest.mark.parametrize(
    ("state", "shown"),
    [
        (
            {
                "stateful": True,
                "reset": "the TorchScript module's reset_state()",
                "handling": "reset before each stream via the TorchScript module's reset_state()",
                "difference": "the output: 2 of 2 values differ, largest difference 10",
                "checked": "before timing",
                "rtol": 1e-05,
                "atol": 1e-06,
            },
            "Model state: the model keeps a state inside itself between calls (two calls on the "
            "same input differed: the output: 2 of 2 values differ, largest difference 10); it "
            "was reset before each stream via the TorchScript module's reset_state(), outside "
            "the timed calls.",
        ),
        (
            {"stateful": False, "checked": "before timing", "rtol": 1e-05, "atol": 1e-06},
            "Model state: none kept between calls (two calls on the same input agreed, before "
            "timing).",
        ),
    ],
)
def test_whether_the_model_keeps_a_state_is_shown(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finished_with, state, shown
) -> None:
    """The loop's check of a state hidden in the model, as the agent uploads it (the result's
    `state`, kept in its details)."""
    evaluation_id = finished_with(
        {"device": "cpu", "model": {"task": "image_classification"}, "state": state}
    )
    assert Evaluation.objects.get(pk=evaluation_id).result.details["state"] == state

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    expect(page.locator("#model-state")).to_have_text(shown)
    expect(page.locator("#model-state")).to_have_attribute(
        "data-stateful", str(state["stateful"]).lower()
    )


def test_the_theoretical_performance_is_shown_with_its_roofline(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finished_with, shoot
) -> None:
    """The counts the loop makes (digits-cnn's ONNX graph, counted for real at the shape it
    fed) on this machine's roofline for ONNX Runtime at one thread: the page states the roof
    drawn and why, each peak with how it was obtained, the share of the peak, lists the layers
    and plots the model on the roofline."""
    import numpy as np

    from predictors.analysis import flops, roofline
    from tests.predictors.zoo_store import zoo_store

    graph = zoo_store(("digits-cnn",)) / "models" / "digits-cnn" / "1.0.0" / "digits-cnn.onnx"
    batch_sizes = [{"batch_size": 1, "latency": {"p50_ms": 0.05}}]
    sample = np.zeros((1, 1, 8, 8), np.float32)
    theoretical = roofline.attach(
        flops.theoretical("onnxruntime", graph, "input", sample, batch_sizes),
        "cpu",
        "onnxruntime",
        1,
        sample,
    )
    roof = theoretical["roofline"]
    evaluation_id = finished_with(
        {
            "device": "cpu",
            "model": {"task": "image_classification"},
            "batch_sizes": batch_sizes,
            "trace": {"level": "model"},
            "theoretical": theoretical,
        }
    )

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    expect(page.locator("#theoretical")).to_be_visible()
    expect(page.locator("#theoretical-summary")).to_contain_text(
        "1.330 M multiply-adds (2.661 MFLOPs) and 151,306 parameters per input (input [1, 8, 8]"
    )
    expect(page.locator("#theoretical-summary")).to_contain_text(
        f"{theoretical['achieved'][0]['gflops_per_s']:.2f} GFLOP/s at batch size 1"
    )
    summary = page.locator("#roofline-summary")
    expect(summary).to_contain_text(f"for onnxruntime: peak {roof['peak_gflops_per_s']} GFLOP/s")
    share = 100 * theoretical["achieved"][0]["of_peak"]
    expect(summary).to_contain_text(f"Share of that peak: batch size 1 {share:.1f} %")
    # Each peak with how it was obtained, beside the plot.
    peaks = page.locator("#roofline-peaks")
    expect(peaks.locator('[data-peak="roof"]')).to_contain_text(roof["roof"]["why"])
    expect(peaks.locator('[data-peak="measured"]')).to_contain_text(
        f"{roof['peaks']['measured']['gflops']} GFLOP/s: onnxruntime MatMul 512×512 and "
        "1024×1024 float32, 1 intra-op thread,"
    )
    expect(peaks.locator('[data-peak="theoretical"]')).to_contain_text(
        roof["peaks"]["theoretical"].get("method") or roof["peaks"]["theoretical"]["reason"]
    )
    expect(peaks.locator('[data-peak="bandwidth"]')).to_contain_text("STREAM triad a = b + s·c")
    page.locator("#theoretical-details summary").click()
    rows = page.locator("#theoretical-layers tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.first).to_contain_text("/0/Conv")
    expect(rows.first).to_contain_text("18.432 K")
    # The model's point on the roofline (no per-layer times without a framework-level trace).
    expect(page.locator("#roofline-plot")).to_have_attribute("data-points", "1")
    expect(page.locator("#roofline-plot .scatterlayer .trace")).to_have_count(2)
    shoot(page, "evaluation-theoretical")


def test_a_point_above_every_peak_is_drawn_apart_with_its_reason(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finished_with
) -> None:
    """A latency too short for the counted work (digits-cnn at batch size 32 in a nanosecond)
    passes both peaks: the roof is that point (the page says so), its share is 100 %, and it is
    drawn apart with the reason beside the plot."""
    import numpy as np

    from predictors.analysis import flops, roofline
    from tests.predictors.zoo_store import zoo_store

    graph = zoo_store(("digits-cnn",)) / "models" / "digits-cnn" / "1.0.0" / "digits-cnn.onnx"
    batch_sizes = [
        {"batch_size": 1, "latency": {"p50_ms": 1.0}},
        {"batch_size": 32, "latency": {"p50_ms": 1e-6}},
    ]
    sample = np.zeros((1, 1, 8, 8), np.float32)
    theoretical = roofline.attach(
        flops.theoretical("onnxruntime", graph, "input", sample, batch_sizes),
        "cpu",
        "onnxruntime",
        1,
        sample,
    )
    assert theoretical["roofline"]["roof"]["source"] == "best point"
    evaluation_id = finished_with(
        {
            "device": "cpu",
            "model": {"task": "image_classification"},
            "batch_sizes": batch_sizes,
            "trace": {"level": "model"},
            "theoretical": theoretical,
        }
    )

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    expect(page.locator("#roofline-summary")).to_contain_text("(best point)")
    expect(page.locator("#roofline-summary")).to_contain_text("batch size 32 100.0 %")
    expect(page.locator('#roofline-peaks [data-peak="roof"]')).to_contain_text(
        "the best point, batch size 32"
    )
    note = page.locator('#roofline-notes li[data-point="batch 32"]')
    expect(note).to_contain_text("an error of the counts")
    expect(page.locator("#roofline-notes li")).to_have_count(1)
    expect(page.locator("#roofline-plot")).to_have_attribute("data-above", "1")
    # The roof, the model's point under it, and the one above it, drawn apart.
    expect(page.locator("#roofline-plot .scatterlayer .trace")).to_have_count(3)


@pytest.mark.parametrize(
    ("bound", "start", "queries", "limit"),
    [(25.0, 100, 500, 32), (0.01, 400, 8, 16)],
    ids=["valid-peak", "no-valid-run"],
)
def test_loadgens_verdict_summary_and_marked_row_are_of_one_run(  # type: ignore[no-untyped-def]
    page, sign_in, alice, finished_with, shoot, bound, start, queries, limit
) -> None:
    """A real LoadGen server run with a QPS search of digits-cnn (run here by the loop) as its
    result carries it: the heading's verdict and target, the run the page says it shows, the
    row marked in the curve and LoadGen's summary are all of one run (the highest VALID
    target; where no run was VALID, the lowest, INVALID). LoadGen's notes are apart from its
    warnings. In the first case every run sends at least 500 queries, enough for early stopping
    to back a p99 at any rate; the second case's bound (10 microseconds) no rate can hold."""
    from predictors.data import DataManager
    from predictors.evaluation import EvaluationOptions, evaluate
    from predictors.manifests.catalog import Catalog
    from tests.predictors.zoo_store import zoo_store

    catalog = Catalog()
    run = evaluate(
        catalog.find_model("digits-cnn", "*", "onnxruntime"),
        catalog.find_dataset("digits"),
        EvaluationOptions(
            limit=limit,
            scenario="server",
            find_peak_qps=True,
            target_qps=start,
            latency_bound_ms=bound,
            min_duration_ms=100,
            min_query_count=queries,
        ),  # fmt: skip
        DataManager(store_dir=zoo_store(("digits-cnn",))).fetch,
    )
    loadgen = run.result["loadgen"]
    evaluation_id = finished_with(
        {
            "device": "cpu",
            "model": {"task": "image_classification"},
            "trace": {"level": "model"},
            "loadgen": loadgen,
        }
    )
    curve = loadgen["search"]["curve"]
    row = next(point for point in curve if point["reported"])
    word = "VALID" if row["valid"] else "INVALID"
    qps = f"{row['target_qps']:.3f}".rstrip("0").rstrip(".")

    sign_in(page, alice)
    page.goto(f"/evaluations/{evaluation_id}/")
    # The heading: the reported run's verdict and target.
    verdict = page.locator("#loadgen-verdict")
    expect(verdict).to_contain_text(f"LoadGen server (performance mode): {word} · target {qps} QPS")
    expect(verdict).to_have_attribute("data-valid", "true" if row["valid"] else "false")
    expect(verdict).to_have_attribute("data-target-qps", qps)
    expect(verdict).to_have_attribute("data-run", str(row["run"]))
    expect(page.locator("#loadgen-reported")).to_contain_text(
        f"Showing run {row['run']} of {len(curve)}: {qps} QPS, "
    )
    expect(page.locator("#loadgen-settings")).to_contain_text(f"p99 bound {bound:g} ms")
    # The row marked in the curve is that run.
    expect(page.locator("#qps-curve tbody tr")).to_have_count(len(curve))
    marked = page.locator("#qps-curve tbody tr.reported")
    expect(marked).to_have_count(1)
    expect(marked).to_have_attribute("data-run", str(row["run"]))
    cells = marked.locator("td")
    expect(cells.nth(0)).to_have_text(str(row["run"]))
    expect(cells.nth(1)).to_have_text(qps)
    expect(cells.nth(5)).to_have_text(word)
    expect(page.locator("#qps-plot")).to_have_attribute("data-points", str(len(curve)))
    # LoadGen's summary, as it wrote it, is that run's.
    page.get_by_text("LoadGen's summary").click()
    summary = page.locator("#loadgen-summary")
    expect(summary).to_contain_text(f"Result is : {word}")
    expect(summary).to_contain_text(
        "Completed samples per second    : " + loadgen["summary"]["Completed samples per second"]
    )
    warnings = page.locator("#loadgen-warnings")
    expect(warnings).not_to_contain_text("Run successful")
    if row["valid"]:
        expect(page.locator("#loadgen-peak")).to_contain_text(
            f"Peak: {qps} QPS, the highest target LoadGen judged VALID"
        )
        expect(page.locator("#loadgen-notes")).to_contain_text("Early stopping: Run successful.")
        shoot(page, "evaluation-loadgen")
    else:
        expect(page.locator("#loadgen-reported")).to_contain_text("no run was VALID")
        expect(page.locator("#loadgen-peak")).to_contain_text("No run was VALID")
        for reason in loadgen["invalid_reasons"]:
            expect(warnings).to_contain_text(f"INVALID: {reason}")
        if bound < 1:
            expect(warnings).to_contain_text("INVALID: Performance constraints not satisfied")
        shoot(page, "evaluation-loadgen-invalid")
