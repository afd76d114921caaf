"""The diff of many traces (`GET /api/v1/compare/traces/`, `evaluations.compare.diff`): two
sides of runs whose traces are ingested through the OTLP receiver with durations known by
construction, compared item by item at every level; the limits and refusals by parameter; and
real evaluations of a zoo model through the evaluation loop, their spans ingested into the
hub's trace store, five runs against five."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from evaluations.compare import diff
from evaluations.models import Evaluation
from predictors import statistics
from tests.evaluations.runs import MODEL, SEP, Layer, Op, evaluation, ingest_run, spans_of
from tests.helpers import error_of

URL = "/api/v1/compare/traces/"


@pytest.fixture
def run_of(bob, bob_client) -> Callable[..., Evaluation]:  # type: ignore[no-untyped-def]
    """`run_of(spans, framework=…)`: a succeeded evaluation of Bob's whose trace holds
    `spans`, ingested through the OTLP receiver."""

    def make(spans: list[tuple[Any, ...]], framework: str = "onnxruntime") -> Evaluation:
        return ingest_run(bob_client, spans, bob, framework)

    return make


def _ids(evaluations: list[Evaluation]) -> str:
    return ",".join(str(evaluation.pk) for evaluation in evaluations)


def _diff(client: Any, a: list[Evaluation], b: list[Evaluation], **params: Any) -> dict[str, Any]:
    response = client.get(URL, {"a": _ids(a), "b": _ids(b), **params})
    assert response.status_code == 200, response.content
    return response.json()  # type: ignore[no-any-return]


def _by_key(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["key"]: item for item in report["items"]}


def test_a_layer_twice_as_slow_in_every_run_is_slower_x2_and_the_largest_contributor(
    run_of, bob_client
) -> None:  # type: ignore[no-untyped-def]
    a = [run_of(spans_of(MODEL, run)) for run in range(5)]
    b = [run_of(spans_of(MODEL, run, scale={"conv1": 2.0})) for run in range(5)]

    report = _diff(bob_client, a, b)

    assert report["level"] == "layer" and report["unit"] == diff.RUN
    assert report["runs"] == {"a": 5, "b": 5} and report["batch_size"] == 1
    assert report["matched_by"] == "structure" and report["test"] == statistics.RUNS_TEST
    items = report["items"]
    assert [item["key"] for item in items][0] == "conv1" == report["largest"]
    conv = items[0]
    assert conv["verdict"] == "slower" and conv["ratio"] == pytest.approx(2.0)
    assert conv["words"] == "slower (×2.00)"
    assert conv["difference"]["test"] == statistics.RUNS_TEST
    assert conv["difference"]["baseline_count"] == conv["difference"]["other_count"] == 5
    # Five vs five, completely apart: the least p-value five against five can give (the exact
    # one, 2/252; the normal approximation where runs tie).
    assert conv["difference"]["p_value"] < 0.01
    assert conv["difference"]["low"] <= 2.0 <= conv["difference"]["high"]
    # The median over five runs, and its interval: five runs cannot bound it at 95 %.
    a_conv = [
        0.4 * (1 + 0.01 * ((run * 7 + batch * 3) % 5)) for run in range(5) for batch in range(8)
    ]
    assert conv["a"]["runs"] == 5 and conv["a"]["low"] is None and conv["a"]["high"] is None
    assert min(a_conv) <= conv["a"]["median"] <= max(a_conv)
    assert conv["text"]["a"].endswith("[not bounded, n=5]")
    # Its contribution: B's time per inference less A's (one call per inference).
    assert conv["a"]["calls_per_inference"] == 1.0
    assert conv["contribution_ms"] == pytest.approx(conv["b"]["median"] - conv["a"]["median"])
    assert conv["contribution_ms"] == pytest.approx(conv["a"]["median"])
    for item in items[1:]:
        assert item["verdict"] == statistics.NO_DIFFERENCE and item["ratio"] == 1.0
        assert item["contribution_ms"] == 0
    # The level's total, and the waterfall that sums to it.
    layers = {entry["level"]: entry for entry in report["levels"]}["layer"]
    assert layers["difference_ms"] == pytest.approx(conv["contribution_ms"])
    waterfall = report["waterfall"]
    assert waterfall["labels"][0] == "conv1" and waterfall["measures"][-1] == "total"
    assert sum(waterfall["values"][:-1]) == pytest.approx(waterfall["values"][-1])
    assert waterfall["values"][-1] == pytest.approx(layers["difference_ms"])
    # Every level the traces hold is listed.
    assert [entry["level"] for entry in report["levels"]] == list(diff.LEVELS)


def test_identical_sides_show_no_detectable_difference_at_any_level(run_of, bob_client) -> None:  # type: ignore[no-untyped-def]
    a = [run_of(spans_of(MODEL, run)) for run in range(3)]
    b = [run_of(spans_of(MODEL, run)) for run in range(3)]

    for level in diff.LEVELS:
        report = _diff(bob_client, a, b, level=level)
        assert report["items"], level
        for item in report["items"]:
            assert item["status"] == "matched"
            assert item["verdict"] == statistics.NO_DIFFERENCE, (level, item)
            assert item["ratio"] == 1.0
    counters = _diff(bob_client, a, b, level="counter")
    assert _by_key(counters)[f"host{SEP}cpu.utilization_pct"]["a"]["median"] == 50


def test_added_and_removed_items_are_on_one_side_only(run_of, bob_client) -> None:  # type: ignore[no-untyped-def]
    other = (*MODEL[:2], Layer("dropout", "Dropout", 30_000))
    a = [run_of(spans_of(MODEL, run)) for run in range(2)]
    b = [run_of(spans_of(other, run)) for run in range(2)]

    report = _diff(bob_client, a, b)

    items = _by_key(report)
    assert items["fc"]["status"] == "removed" and items["fc"]["b"] is None
    assert items["dropout"]["status"] == "added" and items["dropout"]["a"] is None
    assert items["fc"]["contribution_ms"] == pytest.approx(-items["fc"]["a"]["per_inference_ms"])
    assert items["dropout"]["words"] == "added" and items["fc"]["words"] == "removed"
    assert report["added"] == ["dropout"] and report["removed"] == ["fc"]
    # fc's op and kernel are gone with it.
    ops = _diff(bob_client, a, b, level="op")
    assert _by_key(ops)[f"fc{SEP}MatMul"]["status"] == "removed"
    assert _by_key(ops)[f"conv1{SEP}MatMul"]["status"] == "matched"


def test_an_op_is_matched_inside_its_layer_and_drills_down_to_its_kernels(
    run_of, bob_client
) -> None:  # type: ignore[no-untyped-def]
    a = [run_of(spans_of(MODEL, run)) for run in range(4)]
    b = [run_of(spans_of(MODEL, run, scale={f"fc{SEP}MatMul": 3.0})) for run in range(4)]

    ops = _by_key(_diff(bob_client, a, b, level="op"))
    # One op name in two layers: two items, only the one in fc slower.
    assert set(ops) == {f"conv1{SEP}MatMul", f"fc{SEP}MatMul"}
    assert ops[f"fc{SEP}MatMul"]["verdict"] == "slower"
    assert ops[f"fc{SEP}MatMul"]["ratio"] == pytest.approx(3.0, rel=0.01)
    assert ops[f"conv1{SEP}MatMul"]["verdict"] == statistics.NO_DIFFERENCE
    # A layer lists its ops: the rows of a drill-down.
    layers = _by_key(_diff(bob_client, a, b))
    assert layers["fc"]["children"] == 1 and layers["relu1"]["children"] == 0
    inside = _diff(bob_client, a, b, level="op", parent="fc")
    assert [item["key"] for item in inside["items"]] == [f"fc{SEP}MatMul"]
    assert inside["parent"] == "fc" and inside["items"][0]["children"] == 1
    kernels = _diff(bob_client, a, b, level="kernel", parent=f"fc{SEP}MatMul")
    assert [item["key"] for item in kernels["items"]] == [f"fc{SEP}MatMul{SEP}gemm_kernel"]
    assert kernels["items"][0]["verdict"] == "slower"
    conv_kernels = _diff(bob_client, a, b, level="kernel", parent=f"conv1{SEP}MatMul")
    assert conv_kernels["items"][0]["verdict"] == statistics.NO_DIFFERENCE
    # A layer's kernels: those of its ops.
    layer_kernels = _diff(bob_client, a, b, level="kernel", parent="fc")
    assert [item["key"] for item in layer_kernels["items"]] == [f"fc{SEP}MatMul{SEP}gemm_kernel"]


def test_layers_are_paired_across_frameworks_by_op_type_and_order(run_of, bob_client) -> None:  # type: ignore[no-untyped-def]
    torch_model = (
        Layer("features.0 (Conv2d)", "Conv2d", 400_000, (Op("MatMul", 300_000),)),
        Layer("features.1 (ReLU)", "ReLU", 50_000),
        Layer("classifier", "Linear", 200_000, (Op("MatMul", 150_000),)),
    )
    # Four runs a side: the fewest whose test can reject (three against three never gives a
    # p-value under 0.1).
    a = [run_of(spans_of(MODEL, run)) for run in range(4)]
    b = [
        run_of(spans_of(torch_model, run, scale={"classifier": 1.5}), "pytorch") for run in range(4)
    ]

    report = _diff(bob_client, a, b)

    assert report["matched_by"] == "op type and order"
    items = _by_key(report)
    assert set(items) == {"conv1", "relu1", "fc"}
    assert items["conv1"]["b_name"] == "features.0 (Conv2d)"
    assert items["fc"]["b_name"] == "classifier" and items["fc"]["verdict"] == "slower"
    assert items["fc"]["ratio"] == pytest.approx(1.5, rel=0.01)
    assert all(item["status"] == "matched" for item in items.values())
    # Their ops move under A's name of the layer.
    ops = _by_key(_diff(bob_client, a, b, level="op", parent="fc"))
    assert ops[f"fc{SEP}MatMul"]["status"] == "matched"


def test_one_run_against_one_compares_their_spans(run_of, bob_client) -> None:  # type: ignore[no-untyped-def]
    a = [run_of(spans_of(MODEL, 0, batches=30))]
    b = [run_of(spans_of(MODEL, 0, batches=30, scale={"relu1": 2.0}))]

    report = _diff(bob_client, a, b)

    assert report["unit"] == diff.SPAN and report["test"] == statistics.LATENCY_TEST
    relu = _by_key(report)["relu1"]
    assert relu["verdict"] == "slower" and relu["ratio"] == pytest.approx(2.0, rel=0.01)
    assert relu["a"]["count"] == 30 and relu["a"]["low"] is not None
    assert report["largest"] == "relu1"
    assert _by_key(report)["conv1"]["verdict"] == statistics.NO_DIFFERENCE


def test_the_sides_limits_and_refusals_name_the_parameter(run_of, bob_client, bob) -> None:  # type: ignore[no-untyped-def]
    runs = [evaluation(bob) for _ in range(33)]

    def refused(status: int, **params: Any) -> str:
        response = bob_client.get(URL, params)
        assert response.status_code == status, response.content
        return str(error_of(response)["path"])

    assert refused(400, a=_ids(runs[:32]), b=_ids(runs[32:])) == "a"
    assert refused(400, a=_ids(runs[:20]), b=_ids(runs[20:])) == "b"
    assert refused(400, a=_ids(runs[:1])) == "b"
    assert refused(400, a="not-an-id", b=_ids(runs[:1])) == "a"
    assert refused(400, a=_ids(runs[:1]), b=_ids(runs[:1])) == "b"
    assert refused(400, a=_ids(runs[:2] + runs[:1]), b=_ids(runs[2:3])) == "a"
    traced = [run_of(spans_of(MODEL, run)) for run in range(2)]
    sides = {"a": _ids(traced[:1]), "b": _ids(traced[1:])}
    assert refused(400, **sides, level="everything") == "level"
    assert refused(400, **sides, parent="conv1") == "parent"
    assert refused(400, **sides, level="op", parent="no such layer") == "parent"
    assert refused(400, **sides, batch_size="two") == "batch_size"
    assert refused(400, **sides, batch_size="8") == "batch_size"
    assert refused(400, **sides, noise="90") == "noise"
    assert bob_client.get(URL, {**sides, "colour": "red"}).status_code == 400
    # 31 on one side and one on the other is the most there may be.
    assert bob_client.get(URL, {"a": _ids(runs[:31]), "b": _ids(runs[31:32])}).status_code == 200


def test_another_users_private_evaluation_is_not_found(
    run_of, bob_client, alice, make_client
) -> None:  # type: ignore[no-untyped-def]
    mine = run_of(spans_of(MODEL, 0))
    hers = evaluation(alice)
    for side, other in (("a", "b"), ("b", "a")):
        response = bob_client.get(URL, {side: str(hers.pk), other: str(mine.pk)})
        assert response.status_code == 404 and error_of(response)["path"] == side
        # Exactly as for an id that does not exist.
        assert error_of(response)["message"] == f"no evaluation {hers.pk} that you may read"
    # Its owner reads it.
    also_hers = evaluation(alice)
    alice_client = make_client(alice)
    assert alice_client.get(URL, {"a": str(hers.pk), "b": str(also_hers.pk)}).status_code == 200
    anonymous = bob_client.__class__()
    assert anonymous.get(URL, {"a": str(mine.pk), "b": str(hers.pk)}).status_code == 404


def test_the_page_shows_the_diff_and_refuses_by_parameter(run_of, bob) -> None:  # type: ignore[no-untyped-def]
    from django.test import Client

    a = [run_of(spans_of(MODEL, run)) for run in range(2)]
    b = [run_of(spans_of(MODEL, run, scale={"conv1": 2.0})) for run in range(2)]
    client = Client()
    client.force_login(bob)

    page = client.get("/compare/traces/", {"a": _ids(a), "b": _ids(b)})

    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="diff-data"' in text and "trace_diff.js" in text and "plotly" in text
    assert page.context["report"]["largest"] == "conv1"
    refused = client.get("/compare/traces/", {"a": _ids(a), "b": "nope"})
    assert refused.status_code == 400 and refused.context["path"] == "b"
    # The side-by-side comparison links to the diff, its baseline on side A.
    compare = client.get("/compare/", {"evaluations": _ids([*a, *b])}).content.decode()
    assert f"/compare/traces/?a={a[0].pk}&amp;b={a[1].pk}%2C{b[0].pk}%2C{b[1].pk}" in compare


# -- real evaluations through the evaluation loop ---------------------------------------------


@pytest.fixture
def evaluated(bob) -> Callable[..., Evaluation]:  # type: ignore[no-untyped-def]
    """`evaluated(**options)`: the zoo's digits-cnn evaluated on digits through the evaluation
    loop (`predictors.evaluation.evaluate`) at trace level framework into the agent's tracer
    (`predictors.tracing.Tracer`, its spans kept), encoded as its OTLP exporter encodes them
    and ingested into the hub's trace store as the trace of an evaluation of Bob's."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from hub.models import ApiToken
    from predictors.data import DataManager
    from predictors.evaluation import EvaluationOptions, evaluate
    from predictors.manifests.catalog import Catalog
    from predictors.tracing import Tracer
    from tests.predictors.zoo_store import zoo_store
    from traces.ingest import ingest

    store = zoo_store(("digits", "digits-cnn"))
    catalog = Catalog()
    model = catalog.find_model("digits-cnn", "*", "onnxruntime")
    dataset = catalog.find_dataset("digits")
    token, _raw = ApiToken.issue(bob, name="spans", scopes=["write"])

    def run(**options: Any) -> Evaluation:
        made = evaluation(bob, status=Evaluation.RUNNING)
        tracer = Tracer(service="mlms-agent")
        tracer.start(attributes={"model": model.name}, trace_id=made.trace_id)
        settings = {"batch_sizes": (1,), "limit": 60, "trace_level": "framework", **options}
        fetch = DataManager(store_dir=store).fetch
        evaluate(model, dataset, EvaluationOptions(**settings), fetch, sink=tracer)
        tracer.finish()
        spans = list(tracer.finished())
        tracer.shutdown()
        assert ingest(token, encode_spans(spans)) == len(spans)
        Evaluation.objects.filter(pk=made.pk).update(status=Evaluation.SUCCEEDED)
        return made

    return run


@pytest.mark.frameworks
def test_five_runs_against_five_of_one_configuration_and_threads_1_against_2(
    evaluated, bob_client
) -> None:  # type: ignore[no-untyped-def]
    # Interleaved, so that the machine's drift falls on both sides alike.
    same_a, same_b, two = [], [], []
    for _ in range(5):
        same_a.append(evaluated(threads=1))
        same_b.append(evaluated(threads=1))
        two.append(evaluated(threads=2))

    same = _diff(bob_client, same_a, same_b, level="layer")

    assert same["unit"] == diff.RUN and same["runs"] == {"a": 5, "b": 5}
    assert len(same["items"]) >= 5
    quiet = [item for item in same["items"] if item["verdict"] == statistics.NO_DIFFERENCE]
    assert len(quiet) >= 0.95 * len(same["items"]), [
        (item["key"], item["words"]) for item in same["items"]
    ]
    # Threads 1 against 2: every layer listed with its ratio, interval and verdict (on two
    # cores a model this small need not be faster with two threads).
    threads = _diff(bob_client, same_a, two, level="layer")
    assert {item["key"] for item in threads["items"]} == {item["key"] for item in same["items"]}
    for item in threads["items"]:
        assert item["status"] == "matched" and item["ratio"] > 0
        assert item["difference"]["low"] <= item["ratio"] <= item["difference"]["high"]
        assert item["verdict"] in statistics.VERDICTS
