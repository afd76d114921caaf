"""`mlms watch` against a live hub: create, run with a changed option, show the series as a
table (each run's median and interval, verdict and what changed), and refusals as one line with
exit status 1 (2 for a command line that cannot be run)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evaluations.models import Evaluation, Watch
from predictors import statistics
from predictors.cli.commands import main
from tests.evaluations.factories import claim, post_result, result_body

pytestmark = pytest.mark.django_db(transaction=True)


def _mlms(live_server: Any, token: str, capsys: Any, *words: str) -> tuple[int, str, str]:
    status = main([*words, "--hub", live_server.url, "--token", token])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _finish(agent: Any, host: Any, evaluation: Evaluation, samples: list[float]) -> None:
    job = claim(agent, evaluation.pk, host).json()
    body = result_body(job["claim"])
    body["latency"]["1"] = {**body["latency"]["1"], "count": len(samples), "samples_ms": samples}
    assert post_result(agent, evaluation.pk, body).status_code == 201


def test_create_run_and_show_a_series(
    live_server, alice_evaluator_client, agent, hosts, capsys
) -> None:
    token = alice_evaluator_client.raw_token
    status, out, _ = _mlms(
        live_server,
        token,
        capsys,
        "watch",
        "create",
        "--model",
        "m",
        "--framework",
        "onnxruntime",
        "--dataset",
        "d",
        "--host",
        "cpu-1",
        "--threads",
        "2",
    )
    assert status == 0, out
    watch = Watch.objects.get()
    assert out.strip() == f"watch m-onnxruntime-cpu-1 ({watch.pk}) created"
    assert watch.request["threads"] == 2 and watch.host is not None

    rng = np.random.default_rng(4)
    for number in range(1, 8):
        words = ["--threads", "1"] if number == 6 else []
        status, out, err = _mlms(
            live_server, token, capsys, "watch", "run", "m-onnxruntime-cpu-1", *words
        )
        assert status == 0, err
        evaluation = Evaluation.objects.get(pk=out.split("evaluation ")[1].split()[0])
        factor = 1.6 if number == 6 else 1.0
        samples = (rng.lognormal(np.log(2.0), 0.05, 60) * factor).tolist()
        _finish(agent, hosts["cpu-1"], evaluation, samples)
    assert Evaluation.objects.get(request__threads=1).watch == watch

    status, out, _ = _mlms(live_server, token, capsys, "watch", "show", str(watch.pk))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("watch m-onnxruntime-cpu-1: m on onnxruntime, d, batch size 1")
    sixth = next(line for line in lines if line.split()[:1] == ["6"])
    assert "regression (×" in sixth and sixth.rstrip().endswith("threads: 2 → 1")
    row = next(r for r in Evaluation.objects.get(request__threads=1).batch_results.all())
    text = statistics.latency_text(row.latency)
    assert f"{text['p50']} [{text['p50_interval']}]" in sixth
    assert lines[-1] == "7 runs: 1 regression(s), 0 improvement(s)"

    status, out, _ = _mlms(live_server, token, capsys, "watch", "list", "--model", "m")
    assert status == 0 and "m-onnxruntime-cpu-1" in out and "by hand" in out


@pytest.mark.parametrize(
    ("words", "status", "message"),
    [
        (["watch", "run", "nope"], 1, "no watch of yours named 'nope'"),
        (["watch", "run", "w", "--threads", "0"], 2, "--threads"),
        (["watch", "run", "w", "--trace-level", "all"], 2, "--trace-level"),
        (["watch", "create", "--model", "m", "--framework", "onnxruntime"], 2, "--dataset"),
        (
            ["watch", "create", "--model", "m", "--framework", "onnxruntime", "--dataset", "d"]
            + ["--every", "2"],
            1,
            "every:",
        ),
        (
            ["watch", "create", "--model", "nope", "--framework", "onnxruntime", "--dataset", "d"],
            1,
            "request.model:",
        ),
    ],
)
def test_refusals_are_one_line(
    live_server,
    alice,
    alice_evaluator_client,
    hosts,
    capsys,
    words: list[str],
    status: int,
    message: str,
) -> None:
    Watch.objects.create(
        user=alice,
        name="w",
        request={"model": "m", "framework": "onnxruntime", "dataset": "d"},
        model_name="m",
        batch_size=1,
    )
    got, out, err = _mlms(live_server, alice_evaluator_client.raw_token, capsys, *words)
    assert got == status, (out, err)
    assert err.startswith("mlms: error: ") and message in err and len(err.splitlines()) == 1
