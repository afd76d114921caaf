"""Searching a whole trace (`/api/v1/traces/<id>/search`) by name, op type and layer name,
and reading one span's parent and children (`/api/v1/traces/<id>/spans/<span_id>`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.traces.factories import export, new_id, post
from traces import store

pytestmark = pytest.mark.django_db


def _trace(client: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """Three exports of 40 batches: a batch span, a Conv layer `conv1` and its kernel, a Relu
    layer `act`; compacted (as a finished trace is) except for the last export."""
    trace_id = new_id()
    for part in range(3):
        spans: list[tuple[Any, ...]] = []
        for batch in range(part * 40, part * 40 + 40):
            start = batch * 1000
            batch_id, conv_id = f"{batch + 1:016x}", f"{batch + 1001:016x}"
            spans.append(("predict", start, 900, {"mlms.level": "model"}, batch_id))
            conv = {"mlms.level": "framework", "mlms.op_type": "Conv", "mlms.layer_name": "conv1"}
            spans.append(("conv1", start + 10, 500, conv, conv_id, batch_id))
            kernel = {"mlms.level": "system_library", "mlms.op_type": "kernel"}
            kernel["mlms.layer_name"] = "conv1"
            spans.append(("winograd", start + 20, 300, kernel, f"{batch + 2001:016x}", conv_id))
            relu = {"mlms.level": "framework", "mlms.op_type": "Relu"}
            spans.append(("act", start + 600, 100, relu, f"{batch + 3001:016x}", batch_id))
        assert post(client, export(trace_id, *spans)).status_code == 200
        if part == 1:
            store.get_store().compact(trace_id)
    return trace_id


def test_search_finds_op_types_names_and_layers_over_the_whole_trace(
    bob_client, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    trace_id = _trace(bob_client, monkeypatch)
    url = f"/api/v1/traces/{trace_id}/search"

    conv = bob_client.get(url, {"q": "conv", "limit": 1000}).json()
    # op type Conv (conv1), and the kernels whose layer is conv1: 120 of each, in time order
    assert conv["total"] == 240 and len(conv["spans"]) == 240
    assert [s["start_ns"] for s in conv["spans"]] == sorted(s["start_ns"] for s in conv["spans"])
    assert {s["name"] for s in conv["spans"]} == {"conv1", "winograd"}
    only_ops = bob_client.get(url, {"q": "CONV", "fields": "op_type"}).json()
    assert only_ops["total"] == 120 and {s["name"] for s in only_ops["spans"]} == {"conv1"}
    page = bob_client.get(url, {"q": "Relu", "offset": 110, "limit": 5}).json()
    assert page["total"] == 120 and len(page["spans"]) == 5 and page["offset"] == 110
    assert page["spans"][0]["start_ns"] - conv["spans"][0]["start_ns"] == 110 * 1000 + 590
    assert bob_client.get(url, {"q": "nothing-like-it"}).json()["total"] == 0


def test_a_span_names_its_parent_and_children(bob_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    trace_id = _trace(bob_client, monkeypatch)

    batch = bob_client.get(f"/api/v1/traces/{trace_id}/spans/{41:016x}").json()
    conv = bob_client.get(f"/api/v1/traces/{trace_id}/spans/{1041:016x}").json()

    assert batch["span"]["name"] == "predict" and batch["span"]["parent_span_id"] is None
    assert [c["name"] for c in batch["children"]] == ["conv1", "act"]
    assert conv["span"]["parent_span_id"] == f"{41:016x}"
    assert [c["name"] for c in conv["children"]] == ["winograd"]
    missing = bob_client.get(f"/api/v1/traces/{trace_id}/spans/{9999:016x}")
    assert missing.status_code == 404 and "no span" in missing.json()["detail"]


@pytest.mark.parametrize(
    ("params", "path", "message"),
    [
        ({}, "q", "q must name the text"),
        ({"q": " "}, "q", "q must name the text"),
        ({"q": "x" * 201}, "q", "at most 200"),
        ({"q": "conv", "fields": "name,attributes"}, "fields", "not attributes"),
        ({"q": "conv", "limit": "0"}, "limit", "at least 1"),
        ({"q": "conv", "offset": "-1"}, "offset", "at least 0"),
    ],
)
def test_bad_searches_are_refused_naming_the_parameter(  # type: ignore[no-untyped-def]
    bob_client, params, path, message
) -> None:
    trace_id = new_id()
    assert post(bob_client, export(trace_id, ("a", 0, 1, {}))).status_code == 200

    answer = bob_client.get(f"/api/v1/traces/{trace_id}/search", params)

    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == path and message in answer.json()["detail"]


def test_another_users_trace_cannot_be_searched(bob_client, make_client, django_user_model) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    assert post(bob_client, export(trace_id, ("secret", 0, 1, {}))).status_code == 200
    eve = make_client(django_user_model.objects.create_user("eve"))

    assert eve.get(f"/api/v1/traces/{trace_id}/search", {"q": "secret"}).status_code == 404
    assert eve.get(f"/api/v1/traces/{trace_id}/spans/{1:016x}").status_code == 404
    bad = bob_client.get(f"/api/v1/traces/{trace_id}/spans/xyz")
    assert bad.status_code == 400 and bad.json()["errors"][0]["path"] == "span_id"


def test_a_selection_counts_every_span_in_its_range(bob_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    trace_id = _trace(bob_client, monkeypatch)
    url = f"/api/v1/traces/{trace_id}/selection"
    base = 1_700_000_000_000_000_000  # tests.traces.factories.BASE

    # Batches 10 to 19 whole, and half of batch 20's predict span (20,000 to 20,450).
    chosen = bob_client.get(url, {"start": base + 10_000, "end": base + 20_450}).json()

    assert chosen["levels"] == {"model": 11, "framework": 21, "system_library": 11}
    assert chosen["total"] == 43
    top = {(row["level"], row["name"]): row for row in chosen["top"]}
    assert top["model", "predict"]["count"] == 11
    assert top["model", "predict"]["inside_ns"] == 10 * 900 + 450
    assert top["framework", "conv1"]["inside_ns"] == 10 * 500 + 440  # 20,010 to 20,450
    assert [row["name"] for row in chosen["top"]][:2] == ["predict", "conv1"]
    # conv1 (10–510) and act (600–700) of each batch never overlap: busy is their sum.
    assert chosen["busy_ns"]["framework"] == 10 * 600 + 440
    assert chosen["busy_ns"]["model"] == 10 * 900 + 450


@pytest.mark.parametrize(
    ("params", "path"),
    [({"end": "5"}, "start"), ({"start": "5"}, "end"), ({"start": "5", "end": "5"}, "end")],
)
def test_a_selection_needs_a_range(bob_client, params, path) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    assert post(bob_client, export(trace_id, ("a", 0, 1, {}))).status_code == 200

    answer = bob_client.get(f"/api/v1/traces/{trace_id}/selection", params)

    assert answer.status_code == 400 and answer.json()["errors"][0]["path"] == path
