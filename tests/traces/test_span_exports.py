"""Spans stored exactly once, for the attempt that holds the job, and counted on the evaluation:
the hub's side of `predictors.tracing.delivery` (`X-MLMS-Export`, `X-MLMS-Claim`) and the
evaluation's `spans` (sent by the agent, stored by the hub)."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from evaluations import actions
from evaluations.models import Evaluation
from hub.models import Host
from tests.evaluations.factories import claim, launch, launched_id, post_result, result_body, url
from tests.traces.factories import chunks, export, post
from traces.models import SpanExport, Trace

pytestmark = pytest.mark.django_db


def _headers(key: str = "", claim_id: str = "") -> dict[str, str]:
    headers = {}
    if key:
        headers["HTTP_X_MLMS_EXPORT"] = key
    if claim_id:
        headers["HTTP_X_MLMS_CLAIM"] = claim_id
    return headers


def _spans(trace_id: str, count: int) -> bytes:
    return export(trace_id, *((f"s{i}", i, 10, {"mlms.level": "model"}) for i in range(count)))


def test_an_export_sent_again_is_stored_once(bob_client, agent, hosts, settings) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    job = claim(agent, evaluation.pk, hosts["cpu-1"]).json()
    body = _spans(evaluation.trace_id, 5)
    key = secrets.token_hex(16)

    first = post(agent, body, **_headers(key, job["claim"]))
    again = post(agent, body, **_headers(key, job["claim"]))  # its first answer was lost
    other = post(
        agent, _spans(evaluation.trace_id, 3), **_headers(secrets.token_hex(16), job["claim"])
    )

    assert first.status_code == again.status_code == other.status_code == 200
    trace = Trace.objects.get(trace_id=evaluation.trace_id)
    assert trace.span_count == 8 and trace.chunk_count == 2
    assert len(chunks(settings, evaluation.trace_id)) == 2
    assert SpanExport.objects.filter(trace=trace).count() == 2
    assert bob_client.get(url(evaluation.pk)).json()["spans"] == {"sent": None, "stored": 8}


def test_an_export_of_two_traces_sent_again_is_stored_once_in_each(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    first, second = sorted([secrets.token_hex(16), secrets.token_hex(16)])
    key = secrets.token_hex(16)
    # An earlier delivery of the export reached the hub with the second trace's spans only.
    assert post(bob_client, _spans(second, 2), **_headers(key)).status_code == 200
    both = _spans(first, 3) + _spans(second, 2)  # protobuf: one export of both traces

    assert post(bob_client, both, **_headers(key)).status_code == 200
    assert post(bob_client, both, **_headers(key)).status_code == 200

    counts = {t.trace_id: (t.span_count, t.chunk_count) for t in Trace.objects.all()}
    assert counts == {first: (3, 1), second: (2, 1)}
    assert len(chunks(settings, first)) == len(chunks(settings, second)) == 1
    assert SpanExport.objects.filter(key=key).count() == 2


def test_the_spans_of_an_attempt_the_hub_gave_away_are_refused(
    bob, bob_client, agent, hosts, django_capture_on_commit_callbacks
) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    old = claim(agent, evaluation.pk, hosts["cpu-1"]).json()
    assert (
        post(agent, _spans(evaluation.trace_id, 4), **_headers(claim_id=old["claim"])).status_code
        == 200
    )
    # The claimant went silent: the sweep gives the job to a new attempt on another host.
    before = timezone.now() - timedelta(minutes=5)
    Evaluation.objects.filter(pk=evaluation.pk).update(last_report_at=before, updated_at=before)
    Host.objects.filter(pk=hosts["cpu-1"].pk).update(last_heartbeat=before)
    with django_capture_on_commit_callbacks(execute=True):
        assert actions.requeue_lost()
    new = claim(agent, evaluation.pk, hosts["cpu-2"], dispatch=2).json()
    assert new["attempt"] == 2

    late = post(agent, _spans(evaluation.trace_id, 6), **_headers(claim_id=old["claim"]))
    assert late.status_code == 409
    assert "no longer current" in late.json()["detail"]
    assert (
        post(agent, _spans(evaluation.trace_id, 7), **_headers(claim_id=new["claim"])).status_code
        == 200
    )

    trace = Trace.objects.get(trace_id=evaluation.trace_id)
    assert trace.span_count == 4 + 7  # the refused export stored nothing
    exports = SpanExport.objects.filter(trace=trace).order_by("id")
    assert [(e.attempt, e.spans) for e in exports] == [(1, 4), (2, 7)]
    body = result_body(new["claim"])
    body["details"]["spans"] = {"sent": 7, "stored": 7}
    assert post_result(agent, evaluation.pk, body).status_code == 201
    # The evaluation counts the spans of the attempt that produced its result.
    assert bob_client.get(url(evaluation.pk)).json()["spans"] == {"sent": 7, "stored": 7}
    browser = Client()
    browser.force_login(bob)
    page = browser.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert '<dd id="fact-spans">7 stored of 7 sent</dd>' in page


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("HTTP_X_MLMS_EXPORT", "not-hex"),
        ("HTTP_X_MLMS_CLAIM", "A" * 32),
        ("HTTP_X_MLMS_EXPORT", "0" * 33),
    ],
)
def test_a_malformed_delivery_header_is_refused_naming_it(
    bob_client, header: str, value: str
) -> None:  # type: ignore[no-untyped-def]
    trace_id = secrets.token_hex(16)
    response = post(bob_client, _spans(trace_id, 1), **{header: value})
    assert response.status_code == 400
    name = "X-MLMS-Export" if "EXPORT" in header else "X-MLMS-Claim"
    assert name in response.json()["detail"]
    assert not Trace.objects.filter(trace_id=trace_id).exists()


@pytest.mark.parametrize(
    "spans", [{"sent": -1}, {"sent": "many"}, {"stored": 3}, [], {"sent": True}]
)
def test_a_result_with_bad_span_counts_is_refused(bob_client, agent, hosts, spans: Any) -> None:  # type: ignore[no-untyped-def]
    evaluation_id = launched_id(launch(bob_client))
    job = claim(agent, evaluation_id, hosts["cpu-1"]).json()
    body = result_body(job["claim"])
    body["details"]["spans"] = spans
    response = post_result(agent, evaluation_id, body)
    assert response.status_code == 400
    assert "spans" in str(response.json())
    assert Evaluation.objects.get(pk=evaluation_id).status == "running"


def test_after_a_job_ends_its_agent_adds_no_span_and_stored_never_exceeds_sent(
    bob_client, agent, hosts
) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    job = claim(agent, evaluation.pk, hosts["cpu-1"]).json()
    held = _headers(secrets.token_hex(16), job["claim"])
    assert post(agent, _spans(evaluation.trace_id, 5), **held).status_code == 200
    body = result_body(job["claim"])
    body["details"]["spans"] = {"sent": 5, "stored": 5}
    assert post_result(agent, evaluation.pk, body).status_code == 201

    # The claim died with the job: late exports are refused, with the claim or without it.
    late = post(agent, _spans(evaluation.trace_id, 1), **_headers(claim_id=job["claim"]))
    assert late.status_code == 409
    assert "the job ended" in late.json()["detail"]
    assert post(agent, _spans(evaluation.trace_id, 1)).status_code == 403

    # The evaluation's user may still add spans of their own to the trace (their application's,
    # joined by traceparent): they join the trace, not the attempt's count.
    assert post(bob_client, _spans(evaluation.trace_id, 2)).status_code == 200
    assert Trace.objects.get(trace_id=evaluation.trace_id).span_count == 7
    assert bob_client.get(url(evaluation.pk)).json()["spans"] == {"sent": 5, "stored": 5}
