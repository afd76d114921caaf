"""The public leaderboards (`/leaderboards/`) in a real browser, read anonymously: boards, rows
of published results only, filters, sorting, the accuracy-against-latency plot drawn by the
charting library the hub serves, the CSV, and Reproduce for a signed-in user."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from evaluations.models import BatchResult, Evaluation, Result
from hub.models import Manifest

pytestmark = pytest.mark.browser

# framework → (top-1, p50 ms at batch size 1, throughput at 8)
RUNS = {
    "pytorch": (0.962, 0.40, 9000.0),
    "tensorflow": (0.962, 0.90, 6000.0),
    "onnxruntime": (0.962, 0.25, 15000.0),
}


def published_result(
    user: Any, framework: str, top1: float, p50: float, throughput: float, **fields: Any
) -> Evaluation:
    """A succeeded evaluation of the built-in digits-cnn in `framework` with its result rows,
    as the hub stores an agent's report, published unless `published=False`."""
    model = Manifest.objects.get(kind="model", name="digits-cnn", framework=framework)
    dataset = Manifest.objects.get(kind="dataset", name="digits")
    now = timezone.now()
    evaluation = Evaluation.objects.create(
        user=user,
        model=model,
        dataset=dataset,
        model_name=model.name,
        model_version=model.version,
        framework=framework,
        framework_version="1.0.0",
        dataset_name=dataset.name,
        dataset_version=dataset.version,
        split="test",
        device="cpu",
        task=model.task,
        request={"batch_sizes": [1, 8], "seed": 0},
        status=Evaluation.SUCCEEDED,
        top1=top1,
        top5=1.0,
        published=fields.pop("published", True),
        finished_at=now - timedelta(minutes=len(framework)),
        **fields,
    )
    result = Result.objects.create(
        evaluation=evaluation,
        top1=top1,
        top5=1.0,
        count=360,
        top_k=5,
        content_hash=model.content_hash,
        cpu_model="Test CPU @ 2.0GHz",
        stack={"os": {"platform": "Linux-6.1"}, "python": {"version": "3.11.7"}},
        details={},
    )
    rows = [
        BatchResult(
            result=result,
            evaluation=evaluation,
            batch_size=size,
            count=10,
            throughput_ips=rate,
            mean_ms=latency,
            p50_ms=latency,
            p90_ms=latency * 1.2,
            p99_ms=latency * 1.5,
            min_ms=latency * 0.9,
            max_ms=latency * 1.6,
            std_ms=latency * 0.05,
        )
        for size, latency, rate in ((1, p50, 1000 / p50), (8, p50 * 4, throughput))
    ]
    BatchResult.objects.bulk_create(rows)
    result.summarize(rows)
    result.save()
    return evaluation


@pytest.fixture
def board(builtin_manifests, django_user_model) -> dict[str, Evaluation]:  # type: ignore[no-untyped-def]
    owner = django_user_model.objects.create_user("mlmodelscope")
    runs = {fw: published_result(owner, fw, *numbers) for fw, numbers in RUNS.items()}
    # An unpublished run never shows.
    runs["hidden"] = published_result(owner, "pytorch", 0.99, 0.01, 1e6, published=False)
    return runs


def _frameworks(page: Any) -> list[str]:
    return page.locator("#board tbody tr[data-framework]").evaluate_all(
        "rows => rows.map(r => r.dataset.framework)"
    )


def test_an_anonymous_visitor_reads_a_board_with_its_plot(page, board, shoot) -> None:  # type: ignore[no-untyped-def]
    page.goto("/leaderboards/")
    row = page.locator('#boards tr[data-dataset="digits"]')
    expect(row).to_contain_text("3")
    row.locator("a.name").click()

    expect(page.get_by_role("heading", name="digits · image classification")).to_be_visible()
    # Top-1 ties: the order is then the newest first; every framework has its row.
    assert sorted(_frameworks(page)) == ["onnxruntime", "pytorch", "tensorflow"]
    assert str(board["hidden"].pk) not in page.content()
    expect(page.locator("#board tbody tr").first).to_contain_text("96.20 %")

    # The plot: Plotly, served by the hub, draws a trace per framework and the front.
    expect(page.locator("#pareto-plot")).to_have_attribute("data-drawn", "3")
    expect(page.locator("#pareto-plot .main-svg").first).to_be_attached()
    assert page.locator("#pareto-plot .scatterlayer .trace").count() == 4
    # The vertical axis is the board's first accuracy column, by its task's name.
    expect(page.locator("#pareto-plot .ytitle")).to_have_text("Top-1 (%)")
    legend = page.locator("#pareto-plot .legend").text_content() or ""
    for name in ("PyTorch", "TensorFlow", "ONNX Runtime", "Pareto front"):
        assert name in legend

    # Sorting by p50 latency (fastest first), then the other way.
    page.get_by_role("link", name="Median (ms, batch 1, 95 % CI)").click()
    assert _frameworks(page) == ["onnxruntime", "pytorch", "tensorflow"]
    page.get_by_role("link", name="Median (ms, batch 1, 95 % CI) ▲").click()
    assert _frameworks(page) == ["tensorflow", "pytorch", "onnxruntime"]

    # Filtering by framework.
    page.select_option("#f-framework", "pytorch")
    page.get_by_role("button", name="Filter").click()
    assert _frameworks(page) == ["pytorch"]
    expect(page.locator("#board tbody tr").first).to_contain_text("9000.0/s")

    # What reproduces a row, and no Reproduce button for an anonymous visitor.
    page.locator("#board tbody tr summary").first.click()
    pins = page.locator("#board tbody tr dl").first
    expect(pins).to_contain_text("Python 3.11.7")
    expect(pins).to_contain_text(board["pytorch"].result.content_hash[:16])
    expect(page.get_by_role("link", name="Reproduce")).to_have_count(0)
    shoot(page, "leaderboard")

    csv = page.request.get(page.locator("#csv").get_attribute("href"))
    lines = csv.text().splitlines()
    assert csv.ok and len(lines) == 2 and lines[1].startswith("digits-cnn,")


def test_a_board_refuses_a_bad_ordering_and_an_unknown_board_is_404(page, board) -> None:  # type: ignore[no-untyped-def]
    response = page.goto("/leaderboards/image_classification/digits/?ordering=fastest")
    assert response.status == 400
    expect(page.locator("#board-error")).to_contain_text("ordering must be one of")
    assert page.goto("/leaderboards/image_classification/nothing/").status == 404


def test_reproduce_fills_the_launch_form_with_the_rows_request(  # type: ignore[no-untyped-def]
    page, board, sign_in, django_user_model
) -> None:
    alice = django_user_model.objects.create_user("alice")
    evaluation = board["onnxruntime"]
    evaluation.overrides = "inputs.0.parameters.color_mode=BGR"
    evaluation.request = {
        **evaluation.request,
        "seed": 7,
        "batch_sizes": [1, 8],
        "overrides": [evaluation.overrides],
    }
    evaluation.save()
    sign_in(page, alice)
    page.goto("/leaderboards/image_classification/digits/?framework=onnxruntime")
    page.get_by_role("link", name="Reproduce").click()
    expect(page.locator("#id_model")).to_have_value("digits-cnn")
    expect(page.locator("#id_framework")).to_have_value("onnxruntime")
    expect(page.locator("#id_model_version")).to_have_value(evaluation.model_version)
    expect(page.locator("#id_seed")).to_have_value("7")
    expect(page.locator("#id_batch_sizes")).to_have_value("1, 8")
    expect(page.locator("#id_overrides")).to_have_value("inputs.0.parameters.color_mode=BGR")


def test_a_result_of_an_untrained_model_is_marked_wherever_it_is_shown(  # type: ignore[no-untyped-def]
    page, board, shoot
) -> None:
    owner = board["pytorch"].user
    seeded = published_result(owner, "onnxruntime", 0.11, 0.05, 20000.0, untrained=True)

    page.goto("/leaderboards/image_classification/digits/")
    marked = page.locator("#board tbody tr:has(.badge.untrained)")
    expect(marked).to_have_count(1)
    expect(marked).to_have_attribute("data-evaluation", str(seeded.pk))
    expect(marked.locator(".badge.untrained")).to_have_text("not trained")
    shoot(page, "leaderboard-untrained-row")

    page.goto(f"/evaluations/{seeded.pk}/")
    expect(page.locator("h1 .badge.untrained")).to_have_text("not trained")
    page.goto(f"/evaluations/{board['pytorch'].pk}/")
    expect(page.locator(".badge.untrained")).to_have_count(0)

    body = page.request.get(f"/api/v1/evaluations/{seeded.pk}/").json()
    assert body["untrained"] is True
    rows = page.request.get("/api/v1/leaderboards/image_classification/digits/").json()["results"]
    assert {row["evaluation"]: row["untrained"] for row in rows}[str(seeded.pk)] is True
    assert sum(row["untrained"] for row in rows) == 1
