"""A result's timed batches (`samples_ms`): the hub computes every latency figure from them
itself (the statistics layer), keeps them apart from the row, and compare tests differences on
them; malformed samples are refused naming the field, storing nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evaluations.models import BatchResult, Evaluation, LatencySamples, Result
from predictors import statistics
from tests.evaluations.factories import (
    claim,
    error_paths,
    launch,
    launched_id,
    post_result,
    result_body,
)

pytestmark = pytest.mark.django_db


def _with_samples(body: dict[str, Any], samples: list[float]) -> dict[str, Any]:
    entry = body["latency"]["1"]
    # Figures that do not match the samples: the hub must not take them.
    body["latency"]["1"] = {**entry, "p50_ms": 99.0, "count": len(samples), "samples_ms": samples}
    return body


def _finished(
    alice_evaluator_client: Any,
    agent: Any,
    hosts: Any,
    samples: list[float],
    hygiene: list[dict[str, Any]] | None = None,
) -> str:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    body = _with_samples(result_body(job["claim"]), samples)
    if hygiene is not None:
        body["details"]["hygiene"] = hygiene
    response = post_result(agent, evaluation_id, body)
    assert response.status_code == 201, response.content
    return evaluation_id


def test_the_hub_summarises_the_samples_itself(alice_evaluator_client, agent, hosts) -> None:
    samples = [float(value) for value in range(1, 101)]
    evaluation_id = _finished(alice_evaluator_client, agent, hosts, samples)

    row = BatchResult.objects.get(evaluation_id=evaluation_id)
    expected = statistics.latency(np.asarray(samples) * 1e6)
    assert row.p50_ms == expected["p50_ms"] == pytest.approx(50.5)
    assert (row.p50_low_ms, row.p50_high_ms) == (expected["p50_low_ms"], expected["p50_high_ms"])
    assert row.p99_bounded is False and row.count == 100
    assert LatencySamples.objects.get(batch_result=row).samples_ms == samples
    result = Result.objects.get(evaluation_id=evaluation_id)
    assert (result.p50_ms_at_1, result.p50_low_ms_at_1) == (row.p50_ms, row.p50_low_ms)

    latency = alice_evaluator_client.get(f"/api/v1/evaluations/{evaluation_id}/").json()["result"][
        "latency"
    ]
    assert latency["1"]["p50_ms"] == row.p50_ms
    assert latency["1"]["text"] == statistics.latency_text(latency["1"])
    assert "samples_ms" not in latency["1"]


def test_compare_tests_the_difference_on_the_samples(alice_evaluator_client, agent, hosts) -> None:
    rng = np.random.default_rng(5)
    base = _finished(alice_evaluator_client, agent, hosts, rng.lognormal(0, 0.1, 200).tolist())
    slower = _finished(
        alice_evaluator_client, agent, hosts, (rng.lognormal(0, 0.1, 200) * 2).tolist()
    )

    report = alice_evaluator_client.get(f"/api/v1/compare/?evaluations={base},{slower}").json()
    cells = report["latency"]["batch_sizes"][0]["cells"]
    assert cells[0]["difference"] is None
    assert cells[1]["difference"]["verdict"] == "slower"
    assert cells[1]["difference"]["low"] <= 2.0 <= cells[1]["difference"]["high"]
    assert cells[1]["verdict"].startswith("slower (×")
    # A finer noise threshold is taken, and a bad one refused naming it.
    finer = alice_evaluator_client.get(f"/api/v1/compare/?evaluations={base},{slower}&noise=1%")
    assert finer.json()["latency"]["noise"] == 0.01
    for bad in ("-1", "51", "fast"):
        refused = alice_evaluator_client.get(
            f"/api/v1/compare/?evaluations={base},{slower}&noise={bad}"
        )
        assert refused.status_code == 400 and error_paths(refused) == ["noise"]


def test_a_difference_whose_run_its_hygiene_questions_says_so(
    alice_evaluator_client, agent, hosts, client, alice
) -> None:
    """The same samples, twice slower: the test calls it slower either way, but where the
    slower run's hygiene says other processes were busy during it, the verdict says it is in
    question, naming the run and the warning; warnings of another batch size, or that do not
    question the latencies, do not."""
    rng = np.random.default_rng(7)
    fast = rng.lognormal(0, 0.1, 200).tolist()
    slow = (np.asarray(fast) * 2).tolist()
    busy = {"code": "others_busy", "message": "other processes used 61% of the CPU", "share": 0.61}
    elsewhere = {"code": "spread", "message": "batch size 8: wide", "batch_size": 8}
    threads = {"code": "threads_over_cores", "message": "8 threads on 2 cores", "threads": 8}
    base = _finished(alice_evaluator_client, agent, hosts, fast, [threads, elsewhere])
    plain = _finished(alice_evaluator_client, agent, hosts, slow, [threads])
    questioned = _finished(alice_evaluator_client, agent, hosts, slow, [busy, elsewhere])

    report = alice_evaluator_client.get(
        f"/api/v1/compare/?evaluations={base},{plain},{questioned}"
    ).json()
    cells = report["latency"]["batch_sizes"][0]["cells"]
    assert [cell["questioned_by"] for cell in cells[:2]] == [[], []]
    assert cells[1]["verdict"].startswith("slower (×") and "in question" not in cells[1]["verdict"]
    (entry,) = cells[2]["questioned_by"]
    assert (entry["side"], entry["evaluation"]) == ("this", questioned)
    assert entry["codes"] == ["others_busy"] and entry["messages"] == [busy["message"]]
    assert cells[2]["difference"]["verdict"] == "slower"
    assert cells[2]["verdict"] == (
        f"{cells[2]['verdict'].split(';')[0]}; in question: this run warns others_busy"
    )
    # Against a questioned baseline, the baseline is the one named.
    swapped = alice_evaluator_client.get(f"/api/v1/compare/?evaluations={questioned},{base}")
    (entry,) = swapped.json()["latency"]["batch_sizes"][0]["cells"][1]["questioned_by"]
    assert (entry["side"], entry["evaluation"]) == ("baseline", questioned)
    # The page says it beside the verdict, the warning's message on hover.
    client.force_login(alice)
    page = client.get(f"/compare/?evaluations={base},{plain},{questioned}").content.decode()
    assert page.count('class="questioned small"') == 1
    assert f'title="{busy["message"]}"' in page and "this run: others_busy</div>" in page


def test_a_result_without_samples_gets_no_verdict(alice_evaluator_client, agent, hosts) -> None:
    ids = []
    for _ in range(2):
        evaluation_id = launched_id(launch(alice_evaluator_client))
        job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
        assert post_result(agent, evaluation_id, result_body(job["claim"])).status_code == 201
        ids.append(evaluation_id)
    row = BatchResult.objects.get(evaluation_id=ids[0])
    assert row.p50_ms == 1.4 and row.p50_low_ms is None
    cells = alice_evaluator_client.get(f"/api/v1/compare/?evaluations={ids[0]},{ids[1]}").json()[
        "latency"
    ]["batch_sizes"][0]["cells"]
    assert cells[1]["difference"] is None
    assert "no verdict" in cells[1]["verdict"]


@pytest.mark.parametrize(
    ("samples", "count", "message"),
    [
        ([1.0, 2.0], 3, "must hold count (3) samples"),
        ([1.0, "2"], 2, "numbers only"),
        ([1.0, True], 2, "numbers only"),
        ([1.0, -2.0], 2, "0 or more"),
        ("1,2", 2, "must be a list"),
        ([], 1, "1 to"),
    ],
)
def test_malformed_samples_are_refused_naming_the_field(
    alice_evaluator_client, agent, hosts, samples: Any, count: int, message: str
) -> None:
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    body = result_body(job["claim"])
    body["latency"]["1"] |= {"samples_ms": samples, "count": count}

    response = post_result(agent, evaluation_id, body)

    assert response.status_code == 400, response.content
    assert error_paths(response) == ["latency.1.samples_ms"]
    assert message in response.json()["errors"][0]["message"]
    assert not Result.objects.filter(evaluation_id=evaluation_id).exists()
    assert Evaluation.objects.get(pk=evaluation_id).status == "running"


def test_a_long_run_posts_all_its_samples(alice_evaluator_client, agent, hosts, settings) -> None:
    """60,000 timed batches (a body of about 800 KB, past the limit on other JSON bodies) are
    taken; a body past RESULT_MAX_BYTES is a 413 naming the limit, storing nothing."""
    samples = [1.0 + (index % 7) / 10 for index in range(60_000)]
    evaluation_id = _finished(alice_evaluator_client, agent, hosts, samples)
    row = BatchResult.objects.get(evaluation_id=evaluation_id)
    assert row.count == 60_000 and len(row.samples.samples_ms) == 60_000

    settings.RESULT_MAX_BYTES = 1024 * 1024
    evaluation_id = launched_id(launch(alice_evaluator_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    body = _with_samples(result_body(job["claim"]), [1.2345678901] * 100_000)
    response = post_result(agent, evaluation_id, body)
    assert response.status_code == 413, response.content
    assert "larger than the limit of 1048576 bytes" in response.json()["detail"]
    assert not Result.objects.filter(evaluation_id=evaluation_id).exists()
