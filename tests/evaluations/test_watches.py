"""Watches (`/api/v1/watches/`): a pinned launch request re-run through the real launch path,
by hand or by the sweep, and its series labelled regression, improvement or noise, each verdict
naming what changed. Runs are claimed and their results posted as an agent does; their timed
batches are drawn from a known distribution (a run at the slower setting is slower by
construction), or are real runs of the zoo's digits-cnn recorded by
benchmarks/watch_series.py (tests/fixtures/series/)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from evaluations import sweeper, watches
from evaluations.models import Evaluation, Watch
from hub.models import Host
from tests.evaluations.factories import (
    claim,
    launch,
    launched_id,
    post_result,
    result_body,
)
from tests.helpers import error_of
from tests.hub.factories import register_host

pytestmark = pytest.mark.django_db

WATCHES = "/api/v1/watches/"
SERIES = Path(__file__).resolve().parents[1] / "fixtures" / "series"
REQUEST = {"model": "m", "framework": "onnxruntime", "dataset": "d", "host": "cpu-1"}
NOISE = ["noise"] * 10
SLOWER = {"trace_level": "framework"}


def _create(client: Any, **fields: Any) -> Any:
    return client.post(WATCHES, {"name": "nightly", "request": REQUEST, **fields}, format="json")


def _watch(client: Any, **fields: Any) -> str:
    response = _create(client, **fields)
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def _run(client: Any, watch_id: str, **options: Any) -> str:
    response = client.post(f"{WATCHES}{watch_id}/runs/", options, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["evaluation"]["id"])


def _finish(agent: Any, host: Host, evaluation_id: str, samples: list[float]) -> None:
    """Claim the run on `host` and post its result with these timed batches, as an agent
    does."""
    job = claim(agent, evaluation_id, host).json()
    body = result_body(job["claim"])
    body["latency"]["1"] = {**body["latency"]["1"], "count": len(samples), "samples_ms": samples}
    response = post_result(agent, evaluation_id, body)
    assert response.status_code == 201, response.content


def _series(client: Any, watch_id: str) -> list[dict[str, Any]]:
    response = client.get(f"{WATCHES}{watch_id}/")
    assert response.status_code == 200, response.content
    return response.json()["series"]  # type: ignore[no-any-return]


def _replay(client: Any, agent: Any, hosts: Any, runs: list[tuple[dict[str, Any], Any]]) -> str:
    """A watch whose runs are launched with these job options and measure these batches."""
    watch_id = _watch(client)
    for options, samples in runs:
        _finish(agent, hosts["cpu-1"], _run(client, watch_id, **options), list(samples))
    return watch_id


def _drawn(seed: int, slower: set[int]) -> list[tuple[dict[str, Any], Any]]:
    """Ten runs of a 2 ms configuration (each run's level off by 2 % from run to run, its
    batches by 10 %); the runs in `slower` (from 1) at trace level framework, twice as slow."""
    rng = np.random.default_rng(seed)
    runs = []
    for number in range(1, 11):
        level = np.log(2.0) + rng.normal(0, 0.02) + (np.log(2.0) if number in slower else 0)
        options = SLOWER if number in slower else {}
        runs.append((options, np.exp(rng.normal(level, 0.1, 100)).tolist()))
    return runs


@pytest.mark.parametrize("seed", range(3))
def test_ten_runs_the_eighth_slower_is_the_regression_named(
    alice_evaluator_client, agent, hosts, seed: int
) -> None:
    watch_id = _replay(alice_evaluator_client, agent, hosts, _drawn(seed, {8}))

    series = _series(alice_evaluator_client, watch_id)
    assert [run["verdict"] for run in series] == NOISE[:7] + ["regression"] + NOISE[8:]
    eighth = series[7]
    assert eighth["changed"] == [
        {"section": "request", "key": "trace_level", "before": "model", "after": "framework"}
    ]
    assert eighth["changed_text"] == "trace_level: model → framework"
    assert eighth["options"] == SLOWER and eighth["words"].startswith("regression (×")
    assert eighth["reference"] == 7 and eighth["evidence"]["segment"] == [1, 2, 3, 4, 5, 6, 7]
    assert eighth["evidence"]["ratio"] > 1 + eighth["evidence"]["noise"]
    assert eighth["evidence"]["p_value"] < 0.05 and eighth["evidence"]["history"] == 7
    assert eighth["note"] == "an outlier: run 9 returned to the level"
    # Runs 9 and 10 are compared with the stable segment, not with the outlier, and nothing
    # of theirs changed against its latest run.
    assert series[8]["evidence"]["segment"] == [1, 2, 3, 4, 5, 6, 7]
    assert series[9]["evidence"]["segment"] == [1, 2, 3, 4, 5, 6, 7, 9]
    assert series[8]["changed"] == series[9]["changed"] == []
    assert all(run["latency"]["p50_ms"] > 0 for run in series)
    detail = alice_evaluator_client.get(f"{WATCHES}{watch_id}/").json()
    assert detail["summary"] == {"runs": 10, "regressions": 1, "improvements": 0, "latest": "noise"}
    assert Evaluation.objects.filter(watch_id=watch_id).count() == 10


def test_a_level_shift_is_one_regression_and_noise_at_the_new_level(
    alice_evaluator_client, agent, hosts
) -> None:
    watch_id = _replay(alice_evaluator_client, agent, hosts, _drawn(0, {8, 9, 10}))

    series = _series(alice_evaluator_client, watch_id)
    assert [run["verdict"] for run in series] == NOISE[:7] + ["regression"] + NOISE[8:]
    assert series[7]["changed_text"] == "trace_level: model → framework"
    assert series[7]["note"] == "a level shift, confirmed by run 9"
    assert series[8]["note"] == "noise against the new level since run 8"
    # 9 and 10 are noise against the new level, and nothing changed against it.
    assert series[8]["evidence"]["segment"] == [8] and series[9]["evidence"]["segment"] == [8, 9]
    assert series[8]["changed"] == [] and series[9]["changed"] == []


def test_unchanged_runs_are_noise(alice_evaluator_client, agent, hosts) -> None:
    watch_id = _replay(alice_evaluator_client, agent, hosts, _drawn(1, set()))

    assert [run["verdict"] for run in _series(alice_evaluator_client, watch_id)] == NOISE


def _recorded(name: str) -> list[tuple[dict[str, Any], Any]]:
    """The recorded series `name` (benchmarks/watch_series.py --record): each run's trace
    level and timed batches."""
    (runs,) = json.loads((SERIES / f"{name}.json").read_text())["series"]
    return [
        (SLOWER if run["trace_level"] == "framework" else {}, run["samples_ms"]) for run in runs
    ]


def test_real_runs_name_the_setting_that_changed(alice_evaluator_client, agent, hosts) -> None:
    """Real runs on a shared two-core machine: the eighth, at trace level framework (ONNX
    Runtime's profiler on), is a regression naming it. The host also has runs about 1.45×
    slower with nothing changed (other machines' work on the same cores); a verdict on such a
    run names no change: the request, processing and stack were the same."""
    watch_id = _replay(alice_evaluator_client, agent, hosts, _recorded("eighth-slower"))

    series = _series(alice_evaluator_client, watch_id)
    assert series[7]["verdict"] == "regression"
    assert series[7]["changed_text"] == "trace_level: model → framework"
    assert series[8]["verdict"] == series[9]["verdict"] == "noise"
    others = [run for run in series if run["number"] != 8]
    assert all(run["changed"] == [] for run in others)
    assert all(run["verdict"] == "noise" or run["evidence"]["ratio"] > 1.3 for run in others)


def test_the_verdict_names_the_threads_a_run_changed(alice_evaluator_client, agent, hosts) -> None:
    rng = np.random.default_rng(3)
    watch_id = _watch(alice_evaluator_client, request={**REQUEST, "threads": 2})
    for number in range(1, 8):
        options = {"threads": 1} if number == 6 else {}
        factor = 1.6 if number == 6 else 1.0
        samples = (rng.lognormal(np.log(2.0), 0.05, 60) * factor).tolist()
        _finish(agent, hosts["cpu-1"], _run(alice_evaluator_client, watch_id, **options), samples)

    sixth = _series(alice_evaluator_client, watch_id)[5]
    assert sixth["verdict"] == "regression"
    assert sixth["options"] == {"threads": 1}
    assert sixth["changed_text"] == "threads: 2 → 1"  # the request's and the stack's, once


def test_what_changed_names_the_model_version_that_ran(alice_evaluator_client, hosts) -> None:
    older = Evaluation.objects.get(
        pk=launched_id(launch(alice_evaluator_client, model_version="1.0.0"))
    )
    newer = Evaluation.objects.get(pk=launched_id(launch(alice_evaluator_client)))

    changed = {item["key"]: item for item in watches.changes(older, newer)}
    assert changed["model version"] == {
        "section": "model",
        "key": "model version",
        "before": "1.0.0",
        "after": "1.1.0",
    }
    assert changed["model_version"]["before"] == "1.0.0"  # the range the request asked for
    assert watches.changed_text(list(changed.values())).startswith("model version: 1.0.0 → 1.1.0; ")


def test_runs_not_measured_are_listed_without_a_verdict(alice_evaluator_client, agent, hosts):  # type: ignore[no-untyped-def]
    watch_id = _watch(alice_evaluator_client)
    queued = _run(alice_evaluator_client, watch_id)

    (run,) = _series(alice_evaluator_client, watch_id)
    assert run["evaluation"] == queued and run["verdict"] is None
    assert run["words"] == "not measured (dispatched)"


def test_another_users_watch_is_not_found_on_every_path(
    alice_evaluator_client, bob_client, hosts
) -> None:
    watch_id = _watch(alice_evaluator_client)

    assert bob_client.get(WATCHES).json()["results"] == []
    for method, path in (
        ("get", f"{WATCHES}{watch_id}/"),
        ("delete", f"{WATCHES}{watch_id}/"),
        ("post", f"{WATCHES}{watch_id}/runs/"),
    ):
        response = getattr(bob_client, method)(path, {}, format="json")
        assert response.status_code == 404, (method, path, response.content)
    assert Watch.objects.filter(pk=watch_id).exists()
    assert not Evaluation.objects.filter(watch_id=watch_id).exists()


def test_the_list_filters_by_model_and_name_and_delete_keeps_the_runs(
    alice_evaluator_client, hosts
) -> None:
    watch_id = _watch(alice_evaluator_client)
    run_id = _run(alice_evaluator_client, watch_id)

    listed = alice_evaluator_client.get(f"{WATCHES}?model=m").json()["results"]
    assert [(w["id"], w["name"], w["host"], w["runs"]) for w in listed] == [
        (watch_id, "nightly", "cpu-1", 1)
    ]
    assert alice_evaluator_client.get(f"{WATCHES}?model=other").json()["results"] == []
    assert len(alice_evaluator_client.get(f"{WATCHES}?name=nightly").json()["results"]) == 1
    assert alice_evaluator_client.delete(f"{WATCHES}{watch_id}/").status_code == 204
    assert Evaluation.objects.get(pk=run_id).watch is None


@pytest.mark.parametrize(
    ("body", "status", "path"),
    [
        ({"request": REQUEST}, 400, "name"),
        ({"name": "a b", "request": REQUEST}, 400, "name"),
        ({"name": "w", "request": "m"}, 400, "request"),
        ({"name": "w", "request": {**REQUEST, "framework": "caffe"}}, 400, "request.framework"),
        ({"name": "w", "request": {**REQUEST, "threads": 0}}, 400, "request.threads"),
        ({"name": "w", "request": {**REQUEST, "colour": "red"}}, 400, "request.colour"),
        ({"name": "w", "request": {**REQUEST, "host": "", "hosts": "all"}}, 400, "request.hosts"),
        ({"name": "w", "request": REQUEST, "batch_size": 8}, 400, "batch_size"),
        ({"name": "w", "request": REQUEST, "every": 1}, 400, "every"),
        ({"name": "w", "request": REQUEST, "every": "daily"}, 400, "every"),
        ({"name": "w", "request": REQUEST, "when": "now"}, 400, "when"),
        ({"name": "w", "request": {**REQUEST, "model": "nope"}}, 404, "request.model"),
        ({"name": "w", "request": {**REQUEST, "model": "secret"}}, 404, "request.model"),
        ({"name": "w", "request": {**REQUEST, "dataset": "hidden"}}, 404, "request.dataset"),
        ({"name": "w", "request": {**REQUEST, "host": "elsewhere"}}, 404, "request.host"),
    ],
)
def test_a_bad_watch_is_refused_naming_the_field(
    alice_evaluator_client, hosts, body: dict[str, Any], status: int, path: str
) -> None:
    response = alice_evaluator_client.post(WATCHES, body, format="json")
    assert response.status_code == status, response.content
    assert error_of(response)["path"] == path
    assert not Watch.objects.exists()


def test_a_name_is_taken_once_per_user(alice_evaluator_client, bob_client, hosts) -> None:
    _watch(alice_evaluator_client)
    again = _create(alice_evaluator_client)
    assert again.status_code == 409 and error_of(again)["path"] == "name"
    assert _create(bob_client).status_code == 201


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"model": "other"}, "model"),
        ({"host": "cpu-2"}, "host"),
        ({"threads": 0}, "threads"),
        ({"trace_level": "everything"}, "trace_level"),
        ({"overrides": ["inputs.0.parameters.colour=RGB"]}, "overrides"),
        # The series follows batch size 1 on one split: a run that leaves either is refused.
        ({"batch_sizes": [8]}, "batch_sizes"),
        ({"split": "train"}, "split"),
    ],
)
def test_a_bad_run_is_refused_naming_the_option(
    alice_evaluator_client, hosts, body: dict[str, Any], path: str
) -> None:
    watch_id = _watch(alice_evaluator_client)
    response = alice_evaluator_client.post(f"{WATCHES}{watch_id}/runs/", body, format="json")
    assert response.status_code == 400, response.content
    assert error_of(response)["path"] == path
    assert not Evaluation.objects.exists()


def test_a_run_body_must_be_an_object(alice_evaluator_client, hosts) -> None:
    watch_id = _watch(alice_evaluator_client)
    response = alice_evaluator_client.post(f"{WATCHES}{watch_id}/runs/", [1], format="json")
    assert response.status_code == 400 and error_of(response)["path"] == ""


# The sweep runs outside any transaction, as in a hub process (it closes old connections).
@pytest.mark.django_db(transaction=True)
def test_the_sweep_launches_a_due_watch_once(alice_evaluator_client, hosts) -> None:
    watch_id = _watch(alice_evaluator_client, every=60)
    created = Watch.objects.get(pk=watch_id)
    assert created.next_run_at is not None and created.next_run_at <= timezone.now()

    sweeper.sweep_once()
    sweeper.sweep_once()
    (run,) = Evaluation.objects.filter(watch_id=watch_id)
    assert run.request["host"] == "cpu-1" and run.user.get_username() == "alice"
    following = Watch.objects.get(pk=watch_id).next_run_at
    assert following is not None and following >= created.next_run_at + timedelta(minutes=60)
    (launched,) = watches.run_due(following)
    assert launched.watch_id == created.pk


def test_two_hub_processes_take_a_due_run_once(alice_evaluator_client, hosts) -> None:
    watch_id = _watch(alice_evaluator_client, every=60)
    # Both read the due row before either moved it on.
    first, second = Watch.objects.get(pk=watch_id), Watch.objects.get(pk=watch_id)
    now = timezone.now()

    assert watches.take_due(first, now) is True
    assert watches.take_due(second, now) is False


def test_a_refused_scheduled_run_is_kept_and_the_schedule_goes_on(
    alice_evaluator_client, hosts
) -> None:
    watch_id = _watch(alice_evaluator_client, every=30)
    Host.objects.filter(name="cpu-1").delete()

    assert watches.run_due() == []
    watch = Watch.objects.get(pk=watch_id)
    assert "host" in watch.last_error and watch.host is None
    assert watch.next_run_at is not None and watch.next_run_at > timezone.now()
    assert not Evaluation.objects.exists()


def test_a_run_of_one_timed_batch_is_listed_without_a_verdict(
    alice_evaluator_client, agent, hosts
) -> None:
    """One timed batch has no spread: the run is listed, the series still answers."""
    watch_id = _watch(alice_evaluator_client)
    for samples in ([1.0, 1.01, 0.99, 1.0], [1.0, 1.02, 0.98, 1.0], [1.01, 1.0, 0.99, 1.0], [1.0]):
        _finish(agent, hosts["cpu-1"], _run(alice_evaluator_client, watch_id), samples)
    series = _series(alice_evaluator_client, watch_id)
    assert series[-1]["verdict"] is None and "too few timed batches" in series[-1]["words"]


def test_a_deactivated_users_watch_is_not_run(alice_evaluator_client, hosts) -> None:
    watch_id = _watch(alice_evaluator_client, every=30)
    Watch.objects.get(pk=watch_id).user.__class__.objects.filter(username="alice").update(
        is_active=False
    )
    assert watches.run_due() == []
    assert not Evaluation.objects.filter(watch_id=watch_id).exists()


def test_a_host_registered_again_under_the_name_is_not_the_watchs(
    alice_evaluator_client, agent, hosts
) -> None:
    """The watch pinned host cpu-1; cpu-1 is removed and another host registers as cpu-1: the
    watch's runs are refused naming the host rather than sent to the newcomer."""
    watch_id = _watch(alice_evaluator_client)
    Host.objects.filter(name="cpu-1").delete()
    cpu = {"architecture": "amd64", "memory_bytes": 16 * 2**30, "gpus": []}
    again = register_host(
        agent,
        "cpu-1",
        [("onnxruntime", "1.17.0")],
        hardware=cpu,
        queues=["host.cpu-1", "onnxruntime.cpu"],
        pool=True,
    )
    assert again.status_code == 201, again.content
    response = alice_evaluator_client.post(f"{WATCHES}{watch_id}/runs/", {}, format="json")
    assert response.status_code == 400, response.content
    assert error_of(response)["path"] == "host"
