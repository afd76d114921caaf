"""A finished evaluation's trace is compacted and aggregated in the background when the
evaluation ends (`traces.finishing`), not on its first visit; an export that comes later is
folded in again, and the sweep finishes what a stopped hub did not get to."""

from __future__ import annotations

import secrets

import pytest

from evaluations.models import Evaluation
from tests.evaluations.factories import claim, launch, launched_id, post_result, result_body
from tests.traces.factories import chunks, export, post
from traces import finishing
from traces.models import SpanAggregate, Trace

pytestmark = pytest.mark.django_db(transaction=True)


def _layers(trace_id: str, first: int, count: int, size: int = 1) -> bytes:
    attributes = {"mlms.level": "framework", "mlms.op_type": "Conv", "batch_size": size}
    return export(
        trace_id,
        *((f"conv{i % 3}", i * 100, 10 + i, attributes) for i in range(first, first + count)),
    )


def test_a_finished_evaluations_trace_is_compacted_and_aggregated_without_a_read(
    bob_client, agent, hosts, settings
) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    job = claim(agent, evaluation.pk, hosts["cpu-1"]).json()
    headers = {"HTTP_X_MLMS_CLAIM": job["claim"]}
    for first in (0, 30, 60):
        assert post(agent, _layers(evaluation.trace_id, first, 30), **headers).status_code == 200
    trace = Trace.objects.get(trace_id=evaluation.trace_id)
    assert trace.chunk_count == 3 and not SpanAggregate.objects.filter(trace=trace).exists()

    assert post_result(agent, evaluation.pk, result_body(job["claim"])).status_code == 201
    finishing.wait()

    trace.refresh_from_db()
    assert (trace.finished_chunks, trace.aggregated_chunks) == (3, 3)
    names = [path.name for path in chunks(settings, evaluation.trace_id)]
    data = [name for name in names if name.endswith(".parquet") and not name.startswith("_")]
    assert len(data) == 1 and data[0].startswith("compact-"), names
    assert any(name.startswith("_overview-") for name in names)
    rows = {(r.name, r.batch_size): r for r in SpanAggregate.objects.filter(trace=trace)}
    assert set(rows) == {("conv0", 1), ("conv1", 1), ("conv2", 1)}
    assert sum(row.count for row in rows.values()) == 90

    # An export that arrives after the end is folded in again: the evaluation's user's own
    # (the agent's claim ended with the job: its late exports are refused).
    assert post(agent, _layers(evaluation.trace_id, 90, 6, size=4), **headers).status_code == 409
    late = post(bob_client, _layers(evaluation.trace_id, 90, 6, size=4))
    assert late.status_code == 200
    finishing.wait()
    trace.refresh_from_db()
    assert (trace.chunk_count, trace.finished_chunks, trace.aggregated_chunks) == (4, 4, 4)
    assert SpanAggregate.objects.filter(trace=trace, batch_size=4).count() == 3


def test_the_sweep_finishes_what_a_stopped_hub_did_not(bob_client, agent, hosts) -> None:  # type: ignore[no-untyped-def]
    evaluation = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    job = claim(agent, evaluation.pk, hosts["cpu-1"]).json()
    headers = {"HTTP_X_MLMS_CLAIM": job["claim"]}
    assert post(agent, _layers(evaluation.trace_id, 0, 12), **headers).status_code == 200
    assert post_result(agent, evaluation.pk, result_body(job["claim"])).status_code == 201
    finishing.wait()
    # As if the hub had stopped before its finish ran.
    Trace.objects.filter(trace_id=evaluation.trace_id).update(
        finished_chunks=0, aggregated_chunks=0
    )
    SpanAggregate.objects.filter(trace__trace_id=evaluation.trace_id).delete()
    running = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    Trace.objects.create(
        trace_id=running.trace_id, owner=running.user, evaluation=running, chunk_count=1
    )

    assert finishing.unfinished() == [evaluation.trace_id]  # not the running one's
    assert finishing.sweep() == 1
    finishing.wait()

    trace = Trace.objects.get(trace_id=evaluation.trace_id)
    assert (trace.finished_chunks, trace.aggregated_chunks) == (1, 1)
    assert SpanAggregate.objects.filter(trace=trace).count() == 3
    assert finishing.unfinished() == []
    assert finishing.finish(secrets.token_hex(16)) is False  # no such trace
