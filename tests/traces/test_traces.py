"""Traces: the OTLP/HTTP receiver, who may write and read a trace, the stored chunks, and the
Chrome, OTLP, timeline and aggregate views."""

from __future__ import annotations

import gzip
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from evaluations.models import Evaluation
from tests.evaluations.factories import claim, launch, launched_id
from tests.traces.factories import (
    BASE,
    OTLP,
    PROTOBUF,
    chunks,
    export,
    json_export,
    new_id,
    post,
)
from traces.models import SpanAggregate, Trace
from traces.store import read_table

pytestmark = pytest.mark.django_db


def test_the_opentelemetry_sdk_exports_a_span_that_the_api_returns(
    live_server, make_client, django_user_model
) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    user = django_user_model.objects.create_user("carol")
    client = make_client(user, scopes=["read", "write"])
    exporter = OTLPSpanExporter(
        endpoint=live_server.url + OTLP,
        headers={"Authorization": f"Bearer {client.raw_token}"},
        timeout=10,
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "my-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("preprocess", attributes={"mlms.level": "application"}):
        pass
    provider.shutdown()
    spans = list(Trace.objects.all())
    assert len(spans) == 1, "the export did not arrive"
    trace = spans[0]
    assert trace.owner == user and trace.span_count == 1 and trace.evaluation is None

    response = client.get(f"/api/v1/traces/{trace.trace_id}")

    assert response.status_code == 200
    events = [e for e in response.json()["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in events] == ["preprocess"]
    assert events[0]["tid"] == 1 and events[0]["args"]["mlms.level"] == "application"
    otlp = client.get(f"/api/v1/traces/{trace.trace_id}?format=otlp").json()
    span = otlp["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == trace.trace_id and span["name"] == "preprocess"
    service = otlp["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "my-app"}} in service


def test_json_otlp_is_accepted_and_answered_in_json(bob, bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "scope": {"name": "json"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": "0102030405060708",
                                "name": "decode",
                                "kind": 1,
                                "startTimeUnixNano": str(BASE),
                                "endTimeUnixNano": str(BASE + 2000),
                                "attributes": [
                                    {"key": "mlms.level", "value": {"stringValue": "model"}},
                                    {"key": "mlms.layer_index", "value": {"intValue": "3"}},
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }

    response = post(bob_client, json.dumps(body).encode(), "application/json")

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json" and response.json() == {}
    assert Trace.objects.get(trace_id=trace_id).owner == bob
    assert len(chunks(settings, trace_id)) == 1
    spans = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    assert spans[0]["span_id"] == "0102030405060708"
    assert spans[0]["level"] == "model" and spans[0]["layer_index"] == 3
    assert spans[0]["duration_ns"] == 2000


def test_a_protobuf_export_is_answered_in_protobuf(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()

    response = post(bob_client, export(trace_id, ("a", 0, 10, {})))

    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF
    answer = trace_service_pb2.ExportTraceServiceResponse()
    answer.ParseFromString(response.content)
    assert not answer.HasField("partial_success")
    path = chunks(settings, trace_id)[0]
    assert path.suffix == ".parquet"
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    # A chunk is LZ4 (fast to write); its trace's compaction rewrites it with zstd.
    assert metadata.row_group(0).column(0).compression == "LZ4"


def test_a_gzip_export_is_accepted(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    body = gzip.compress(export(trace_id, ("a", 0, 10, {})))

    response = post(bob_client, body, HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 200
    assert Trace.objects.get(trace_id=trace_id).span_count == 1


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"\xff\xff\xff garbage", PROTOBUF, 400),
        (b"{not json", "application/json", 400),
        (b'{"resourceSpans": [{"bogus": 1}]}', "application/json", 400),
        (b"{}", "text/plain", 415),
    ],
)
def test_bad_exports_are_refused_and_nothing_is_stored(
    bob_client, settings, body, content_type, status
) -> None:  # type: ignore[no-untyped-def]
    response = post(bob_client, body, content_type)

    assert response.status_code == status, response.content
    assert response.json()["errors"][0]["message"]
    assert not Trace.objects.exists()
    assert not (Path(settings.ARTIFACT_ROOT) / "traces").exists()


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"resourceSpans": [[]]}, "resourceSpans.0"),
        ({"resourceSpans": {}}, "resourceSpans"),
        ({"resourceSpans": [{"resource": []}]}, "resourceSpans.0.resource"),
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]},
            "resourceSpans.0.scopeSpans.0.spans.0",
        ),
    ],
)
def test_otlp_json_whose_messages_are_not_objects_is_refused_naming_where(
    bob_client, body: Any, path: str
) -> None:  # type: ignore[no-untyped-def]
    response = post(bob_client, json.dumps(body).encode(), "application/json")

    assert response.status_code == 400, response.content
    assert response.json()["errors"][0]["path"] == path
    assert not Trace.objects.exists()


def test_a_span_with_a_bad_trace_id_is_refused(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    body = export("00" * 16, ("a", 0, 10, {}))

    assert post(bob_client, body).status_code == 400
    assert not Trace.objects.exists()


def test_an_oversized_export_is_refused(bob_client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRACE_MAX_BYTES = 1024
    trace_id = new_id()
    body = export(trace_id, *[(f"span-{i}", i, 10, {"pad": "x" * 50}) for i in range(40)])
    assert len(body) > 1024

    assert post(bob_client, body).status_code == 413
    assert post(bob_client, gzip.compress(body), HTTP_CONTENT_ENCODING="gzip").status_code == 413
    assert not Trace.objects.exists() and not chunks(settings, trace_id)


def test_authentication_and_scopes(make_client, bob) -> None:  # type: ignore[no-untyped-def]
    body = export(new_id(), ("a", 0, 10, {}))
    anonymous = make_client()
    assert post(anonymous, body).status_code == 401
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    assert post(anonymous, body).status_code == 401
    assert post(make_client(bob, scopes=["read"]), body).status_code == 403
    assert not Trace.objects.exists()


def test_another_users_trace_is_refused_on_write_and_hidden_on_read(
    bob_client, alice_evaluator_client, settings
) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    assert post(bob_client, export(trace_id, ("mine", 0, 10, {}))).status_code == 200

    response = post(alice_evaluator_client, export(trace_id, ("theirs", 0, 10, {})))

    assert response.status_code == 403
    assert Trace.objects.get(trace_id=trace_id).span_count == 1
    assert len(chunks(settings, trace_id)) == 1
    for path in ("", "/timeline", "/layers"):
        assert alice_evaluator_client.get(f"/api/v1/traces/{trace_id}{path}").status_code == 404
        assert bob_client.get(f"/api/v1/traces/{trace_id}{path}").status_code == 200
    assert alice_evaluator_client.get(f"/api/v1/traces/{new_id()}").status_code == 404
    assert alice_evaluator_client.get("/api/v1/traces/not-a-trace").status_code == 404


def test_attributes_of_every_kind_read_back_as_sent(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    nested = common_pb2.AnyValue()
    nested.kvlist_value.values.add(key="z", value=common_pb2.AnyValue(int_value=1))
    nested.kvlist_value.values.add(key="a", value=common_pb2.AnyValue())
    array = common_pb2.AnyValue()
    array.array_value.values.extend(
        [common_pb2.AnyValue(string_value="x"), common_pb2.AnyValue(bytes_value=b"\x01\x02")]
    )
    attributes = [
        ("mlms.level", common_pb2.AnyValue(string_value="framework")),
        ("mlms.layer_index", common_pb2.AnyValue(int_value=7)),
        ("batch_size", common_pb2.AnyValue(int_value=4)),
        ("ratio", common_pb2.AnyValue(double_value=0.25)),
        ("flag", common_pb2.AnyValue(bool_value=True)),
        ("config", nested),
        ("shape", array),
        ("batch_size", common_pb2.AnyValue(int_value=8)),  # given twice: the last counts
    ]
    expected = {
        "batch_size": 8,
        "config": {"a": None, "z": 1},
        "flag": True,
        "mlms.layer_index": 7,
        "mlms.level": "framework",
        "ratio": 0.25,
        "shape": ["x", "AQI="],
    }
    # Two exports: the second repeats the first's attributes (decoded once, then remembered).
    for name in ("first", "second"):
        message = trace_service_pb2.ExportTraceServiceRequest()
        spans = message.resource_spans.add().scope_spans.add().spans
        for index in range(2):
            span = spans.add(name=f"{name}-{index}")
            span.trace_id, span.span_id = bytes.fromhex(trace_id), secrets.token_bytes(8)
            span.start_time_unix_nano = BASE + index
            span.end_time_unix_nano = BASE + 10
            for key, value in attributes[: 8 if index else 3]:
                span.attributes.add(key=key, value=value)
        assert post(bob_client, message.SerializeToString()).status_code == 200

    stored = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["spans"]
    by_name = {span["name"]: span for span in stored}
    assert by_name["first-1"]["attributes"] == by_name["second-1"]["attributes"] == expected
    assert by_name["second-0"]["attributes"] == {
        "mlms.layer_index": 7,
        "mlms.level": "framework",
        "batch_size": 4,
    }
    assert by_name["second-1"]["level"] == "framework"
    rows = read_table(trace_id, ["name", "layer_index", "batch_size"]).to_pylist()
    assert {(r["name"], r["layer_index"], r["batch_size"]) for r in rows} == {
        (f"{name}-{index}", 7, 4 if index == 0 else 8)
        for name in ("first", "second")
        for index in range(2)
    }
    exported = bob_client.get(f"/api/v1/traces/{trace_id}?format=otlp").json()
    [span] = [
        s for s in exported["resourceSpans"][0]["scopeSpans"][0]["spans"] if s["name"] == "first-1"
    ]
    assert {"key": "flag", "value": {"boolValue": True}} in span["attributes"]


def test_an_export_with_one_forbidden_trace_stores_nothing(
    bob_client, alice_evaluator_client
) -> None:  # type: ignore[no-untyped-def]
    bobs = new_id()
    assert post(bob_client, export(bobs, ("mine", 0, 10, {}))).status_code == 200
    fresh = new_id()
    message = trace_service_pb2.ExportTraceServiceRequest()
    message.ParseFromString(export(fresh, ("a", 0, 10, {})))
    message.MergeFromString(export(bobs, ("b", 0, 10, {})))

    assert post(alice_evaluator_client, message.SerializeToString()).status_code == 403
    assert not Trace.objects.filter(trace_id=fresh).exists()


def test_an_agent_writes_its_own_jobs_trace_only(
    bob_client, alice_evaluator_client, agent, make_client, django_user_model, hosts, settings
) -> None:  # type: ignore[no-untyped-def]
    mine = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    other = Evaluation.objects.get(pk=launched_id(launch(bob_client)))
    job = claim(agent, mine.pk, hosts["cpu-1"])
    assert job.status_code == 200
    held = {"HTTP_X_MLMS_CLAIM": job.json()["claim"]}
    other_agent = make_client(django_user_model.objects.create_user("other"), scopes=["agent"])

    body = export(mine.trace_id, ("predict", 0, 100, {"mlms.level": "model"}))
    assert post(agent, body).status_code == 403  # an agent writes under its claim only
    assert post(agent, body, **held).status_code == 200
    assert post(other_agent, body).status_code == 403
    assert post(other_agent, body, **held).status_code == 403
    assert post(agent, export(other.trace_id, ("x", 0, 1, {})), **held).status_code == 403
    assert post(agent, export(new_id(), ("x", 0, 1, {}))).status_code == 403  # agents: jobs only
    assert post(alice_evaluator_client, body).status_code == 403  # not Alice's evaluation
    assert post(bob_client, export(mine.trace_id, ("app", 0, 500, {}))).status_code == 200

    trace = Trace.objects.get(trace_id=mine.trace_id)
    assert trace.evaluation == mine and trace.owner.username == "bob" and trace.span_count == 2
    assert not Trace.objects.filter(trace_id=other.trace_id).exists()
    events = bob_client.get(f"/api/v1/evaluations/{mine.pk}/trace").json()["traceEvents"]
    assert sorted(e["name"] for e in events if e["ph"] == "X") == ["app", "predict"]
    assert bob_client.get(f"/api/v1/traces/{mine.trace_id}").status_code == 200
    assert alice_evaluator_client.get(f"/api/v1/traces/{mine.trace_id}").status_code == 404
    assert alice_evaluator_client.get(f"/api/v1/evaluations/{mine.pk}/trace").status_code == 404
    empty = bob_client.get(f"/api/v1/evaluations/{other.pk}/trace?format=otlp").json()
    assert empty == {}


def test_chrome_export_is_valid_json_with_one_thread_per_level(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    body = export(
        trace_id,
        ("predict", 0, 10_000, {"mlms.level": "model"}),
        ("conv1", 1_000, 3_000, {"mlms.level": "framework", "mlms.layer_index": 0}),
        ("relu", 4_000, 1_000, {"mlms.level": "framework", "mlms.layer_index": 1}),
        ("mine", 0, 20_000, {}),
    )
    assert post(bob_client, body).status_code == 200

    response = bob_client.get(f"/api/v1/traces/{trace_id}?format=chrome")

    document = json.loads(response.content)
    spans = {e["name"]: e for e in document["traceEvents"] if e["ph"] == "X"}
    assert set(spans) == {"predict", "conv1", "relu", "mine"}
    assert spans["conv1"]["ts"] == (BASE + 1_000) / 1000 and spans["conv1"]["dur"] == 3.0
    assert spans["conv1"]["tid"] == spans["relu"]["tid"] != spans["predict"]["tid"]
    assert spans["mine"]["tid"] == 0
    names = {e["tid"]: e["args"]["name"] for e in document["traceEvents"] if e["ph"] == "M"}
    assert names == {0: "other", 2: "model", 3: "framework"}
    assert bob_client.get(f"/api/v1/traces/{trace_id}?format=svg").status_code == 400


def test_the_timeline_serves_the_longest_spans_of_a_window(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    spans: list[tuple[str, int, int, dict[str, Any]]] = [
        (f"s{i}", i * 100, (i + 1) * 10, {}) for i in range(10)
    ]  # s_i: [100 i, 100 i + 10(i+1)]
    assert post(bob_client, export(trace_id, *spans[:5])).status_code == 200
    assert post(bob_client, export(trace_id, *spans[5:])).status_code == 200
    url = f"/api/v1/traces/{trace_id}/timeline"

    everything = bob_client.get(url).json()
    window = bob_client.get(url, {"start": BASE + 250, "end": BASE + 600, "max_spans": 2}).json()

    assert everything["total"] == 10 and everything["spans"][0]["name"] == "s9"
    assert everything["trace_start"] == BASE and everything["trace_end"] == BASE + 900 + 100
    assert window["total"] == 4  # s2 (200–230) ends before 250: s3, s4, s5, s6 overlap
    assert [s["name"] for s in window["spans"]] == ["s6", "s5"]
    assert bob_client.get(url, {"max_spans": 0}).status_code == 400
    assert bob_client.get(url, {"start": "soon"}).status_code == 400


def test_layer_aggregates(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    conv = {"mlms.level": "framework", "mlms.op_type": "Conv", "mlms.layer_index": 0}
    relu = {"mlms.level": "framework", "mlms.op_type": "Relu", "mlms.layer_index": 1}
    durations = [10, 20, 30, 40, 100]
    body = export(
        trace_id,
        *[("conv1", i * 1000, d, conv) for i, d in enumerate(durations)],
        ("relu1", 9000, 7, relu),
    )
    assert post(bob_client, body).status_code == 200
    url = f"/api/v1/traces/{trace_id}/layers"

    rows = {row["name"]: row for row in bob_client.get(url).json()["aggregates"]}

    assert rows["conv1"] == {
        "level": "framework",
        "name": "conv1",
        "op_type": "Conv",
        "batch_size": None,
        "layer_index": 0,
        "parent": "",
        "count": 5,
        "total_ns": 200,
        "mean_ns": 40.0,
        "p50_ns": 30,
        "p99_ns": 100,
        "min_ns": 10,
        "max_ns": 100,
    }
    assert rows["relu1"]["count"] == 1 and rows["relu1"]["p99_ns"] == 7
    # A later export is folded in when the aggregates are next read.
    assert post(bob_client, export(trace_id, ("relu1", 10_000, 9, relu))).status_code == 200
    rows = {row["name"]: row for row in bob_client.get(url).json()["aggregates"]}
    assert rows["relu1"]["count"] == 2 and rows["relu1"]["total_ns"] == 16
    assert SpanAggregate.objects.filter(trace__trace_id=trace_id).count() == 2


# --- Hardware counters and GPU activity ----------------------------------------------------------


def counter(device: str, **values: float) -> dict[str, Any]:
    """A counter sample's attributes: `gpu__power_w=5.0` is `mlms.counter.gpu.power_w`."""
    return {
        "mlms.level": "hardware",
        "mlms.op_type": "counter",
        "mlms.device": device,
        **{f"mlms.counter.{key.replace('__', '.')}": value for key, value in values.items()},
    }


def samples(count: int) -> list[tuple[str, int, int, dict[str, Any]]]:
    """`count` samples 10 ns apart: power i % 7 W, SM use 50 %, and a host sample every 100 ns
    (RSS 100 + i / 10 MiB)."""
    spans = [
        (
            "nvml cuda:0",
            i * 10,
            10,
            counter("cuda:0", gpu__power_w=float(i % 7), gpu__sm_util_pct=50),
        )
        for i in range(count)
    ]
    spans += [
        ("host", i * 10, 100, counter("cpu", process__rss_mib=100.0 + i // 10))
        for i in range(0, count, 10)
    ]
    return spans


def test_counter_spans_are_served_as_downsampled_counters(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    body = json_export(
        trace_id,
        ("predict", 0, 10_000, {"mlms.level": "model"}),
        ("conv1", 1_000, 2_000, {"mlms.level": "framework", "mlms.layer_name": "conv1"}),
        *samples(1000),
    )
    assert post(bob_client, body, "application/json").status_code == 200, "export refused"
    url = f"/api/v1/traces/{trace_id}/timeline"

    everything = bob_client.get(url).json()

    # The counter spans are not among the spans, nor counted in `total`.
    assert everything["total"] == 2
    assert sorted(s["name"] for s in everything["spans"]) == ["conv1", "predict"]
    assert everything["counter_samples"] == 1100
    counters = everything["counters"]
    assert set(counters) == {"gpu.power_w", "gpu.sm_util_pct", "process.rss_mib"}
    power = counters["gpu.power_w"]
    assert power["unit"] == "w" and power["device"] == "cuda:0"
    assert counters["gpu.sm_util_pct"]["unit"] == "pct"
    rss = counters["process.rss_mib"]
    assert rss["unit"] == "mib" and rss["device"] == "cpu"
    # At most the default 1000 points; with room for every sample, each is a point of its own
    # (times are absolute, in ns, ascending).
    assert 900 < len(power["points"]) <= 1000
    power = bob_client.get(url, {"max_points": 2000}).json()["counters"]["gpu.power_w"]
    assert len(power["points"]) == 1000
    assert power["points"][:3] == [[BASE, 0.0], [BASE + 10, 1.0], [BASE + 20, 2.0]]
    assert len(rss["points"]) == 100 and rss["points"][-1] == [BASE + 9900, 199.0]
    assert rss["points"][:2] == [[BASE, 100.0], [BASE + 100, 101.0]]

    # Downsampled: at most max_points points per counter, each its bucket's largest sample.
    few = bob_client.get(url, {"max_points": 10}).json()["counters"]
    assert all(len(c["points"]) <= 10 for c in few.values())
    assert [value for _t, value in few["gpu.power_w"]["points"]] == [6.0] * 10
    times = [t for t, _value in few["gpu.power_w"]["points"]]
    assert times == sorted(times) and all((t - BASE) % 70 == 60 for t in times)
    assert [value for _t, value in few["gpu.sm_util_pct"]["points"]] == [50.0] * 10
    assert few["process.rss_mib"]["points"][-1][1] == 199.0  # the max of the last bucket

    # A window: only its samples, downsampled over it.
    window = bob_client.get(url, {"start": BASE + 2000, "end": BASE + 2990, "max_points": 5})
    body = window.json()
    assert body["counter_samples"] == 100 + 10 and body["total"] == 2
    # The sample before the window, whose interval reaches into it, holds until the first.
    held, *points = body["counters"]["gpu.power_w"]["points"]
    assert held == [BASE + 1990, 3.0]
    assert len(points) == 5 and all(BASE + 2000 <= t <= BASE + 2990 for t, _v in points)
    assert {value for _t, value in points} == {6.0}
    rss_points = body["counters"]["process.rss_mib"]["points"]
    assert [value for _t, value in rss_points][1:] == [121.0, 123.0, 125.0, 127.0, 129.0]
    # Between two samples of a counter, the earlier one's value.
    between = bob_client.get(url, {"start": BASE + 1995, "end": BASE + 1999}).json()
    assert between["counter_samples"] == 0
    assert between["counters"]["gpu.power_w"]["points"] == [[BASE + 1990, 3.0]]
    # A window with no samples has no counters.
    empty = bob_client.get(url, {"start": BASE + 20_000, "end": BASE + 30_000}).json()
    assert empty["counters"] == {} and empty["counter_samples"] == 0

    for bad in ("0", "abc", "-3"):
        response = bob_client.get(url, {"max_points": bad})
        assert response.status_code == 400, bad
        assert response.json()["errors"][0]["path"] == "max_points"


def test_a_counter_sampled_on_several_devices_has_a_key_per_device(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    body = json_export(
        trace_id,
        ("nvml cuda:0", 0, 10, counter("cuda:0", gpu__power_w=100.0)),
        ("nvml cuda:1", 0, 10, counter("cuda:1", gpu__power_w=200.0)),
        ("host", 0, 10, counter("cpu", cpu__util_pct=12.5)),
    )
    assert post(bob_client, body, "application/json").status_code == 200

    counters = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()["counters"]

    assert counters == {
        "gpu.power_w@cuda:0": {"unit": "w", "device": "cuda:0", "points": [[BASE, 100.0]]},
        "gpu.power_w@cuda:1": {"unit": "w", "device": "cuda:1", "points": [[BASE, 200.0]]},
        "cpu.util_pct": {"unit": "pct", "device": "cpu", "points": [[BASE, 12.5]]},
    }


def kernel(layer: str | None, correlation: int) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "mlms.level": "system_library",
        "mlms.op_type": "kernel",
        "mlms.grid": [8, 1, 1],
        "mlms.block": [256, 1, 1],
        "mlms.stream": 7,
        "mlms.correlation_id": correlation,
    }
    if layer is not None:
        attributes.update({"mlms.layer_name": layer, "mlms.layer_index": 0})
    return attributes


def test_layer_statistics_are_never_mixed_across_batch_sizes(bob_client) -> None:  # type: ignore[no-untyped-def]
    """Two batch sizes: a layer gets a row per batch size, its batch size read from its own
    `batch_size` attribute or, lacking one, from its nearest ancestor's (a batch span)."""
    trace_id = new_id()
    conv = {"mlms.level": "framework", "mlms.op_type": "Conv", "mlms.layer_name": "conv1"}
    spans: list[tuple[Any, ...]] = []
    for number, (size, layer_ns) in enumerate([(1, 10), (1, 12), (8, 70), (8, 90), (8, 80)]):
        batch_id, layer_id = f"{number + 1:016x}", f"{number + 100:016x}"
        start = number * 1000
        spans.append(("predict", start, 500, {"mlms.level": "model", "batch_size": size}, batch_id))
        # Layers of batch size 8 carry no batch size: they inherit their batch span's.
        attributes = dict(conv, batch_size=size) if size == 1 else conv
        spans.append(("conv1", start + 10, layer_ns, attributes, layer_id, batch_id))
        kernel_attributes = {"mlms.level": "system_library", "mlms.op_type": "kernel"}
        kernel_attributes["mlms.layer_name"] = "conv1"
        spans.append(
            ("gemm", start + 11, layer_ns // 2, kernel_attributes, f"{number + 200:016x}", layer_id)
        )
    spans.append(("evaluation", 0, 6000, {"mlms.level": "application"}))
    assert post(bob_client, export(trace_id, *spans)).status_code == 200

    answer = bob_client.get(f"/api/v1/traces/{trace_id}/layers").json()

    assert answer["batch_sizes"] == [1, 8]
    rows = {(r["name"], r["batch_size"]): r for r in answer["aggregates"]}
    assert (rows["conv1", 1]["count"], rows["conv1", 1]["total_ns"]) == (2, 22)
    assert (rows["conv1", 8]["count"], rows["conv1", 8]["p50_ns"]) == (3, 80)
    assert (rows["conv1", 8]["kernel_count"], rows["conv1", 8]["kernel_total_ns"]) == (3, 120)
    assert (rows["conv1", 1]["kernel_count"], rows["conv1", 1]["kernel_total_ns"]) == (2, 11)
    assert rows["predict", 8]["count"] == 3 and rows["evaluation", None]["count"] == 1
    assert [(k["name"], k["batch_size"], k["count"]) for k in answer["kernels"]] == [
        ("gemm", 1, 2),
        ("gemm", 8, 3),
    ]


def test_layers_count_their_kernels_and_the_top_kernels_are_listed(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    conv = {"mlms.level": "framework", "mlms.op_type": "Conv", "mlms.layer_index": 0}
    conv["mlms.layer_name"] = "conv1"
    relu = {"mlms.level": "framework", "mlms.op_type": "Relu", "mlms.layer_index": 1}
    relu["mlms.layer_name"] = "relu1"
    aten = {"mlms.level": "ml_library", "mlms.op_type": "aten::conv2d", "mlms.layer_name": "conv1"}
    body = json_export(
        trace_id,
        ("conv1", 0, 1000, conv),
        ("relu1", 1000, 100, relu),
        ("aten::conv2d", 10, 900, aten),
        ("implicit_gemm", 100, 300, kernel("conv1", 1)),
        ("implicit_gemm", 500, 200, kernel("conv1", 2)),
        ("bias_add", 800, 50, kernel("conv1", 3)),
        ("uncorrelated", 2000, 1000, kernel(None, 4)),
        (
            "cudaLaunchKernel",
            90,
            5,
            {"mlms.level": "system_library", "mlms.op_type": "cuda_runtime"},
        ),
        ("memcpy HtoD", 0, 20, {"mlms.level": "system_library", "mlms.op_type": "memcpy"}),
        ("nvml cuda:0", 0, 10, counter("cuda:0", gpu__power_w=100.0)),
    )
    assert post(bob_client, body, "application/json").status_code == 200

    answer = bob_client.get(f"/api/v1/traces/{trace_id}/layers").json()

    rows = {(row["level"], row["name"]): row for row in answer["aggregates"]}
    assert rows["framework", "conv1"]["kernel_count"] == 3
    assert rows["framework", "conv1"]["kernel_total_ns"] == 550
    assert rows["framework", "conv1"]["total_ns"] == 1000  # the existing keys are unchanged
    for key in [("framework", "relu1"), ("ml_library", "aten::conv2d")]:
        assert "kernel_count" not in rows[key] and "kernel_total_ns" not in rows[key]
    assert answer["kernels"] == [
        {
            "name": "uncorrelated",
            "batch_size": None,
            "count": 1,
            "total_ns": 1000,
            "mean_ns": 1000.0,
        },
        {
            "name": "implicit_gemm",
            "batch_size": None,
            "count": 2,
            "total_ns": 500,
            "mean_ns": 250.0,
        },
        {"name": "bias_add", "batch_size": None, "count": 1, "total_ns": 50, "mean_ns": 50.0},
    ]
    timeline = bob_client.get(f"/api/v1/traces/{trace_id}/timeline").json()
    kernels = {s["start_ns"] - BASE: s for s in timeline["spans"] if s["op_type"] == "kernel"}
    assert kernels[100]["level"] == "system_library" and kernels[100]["layer_name"] == "conv1"
    assert kernels[100]["attributes"]["mlms.grid"] == [8, 1, 1]
    assert kernels[100]["attributes"]["mlms.correlation_id"] == 1
    assert kernels[2000]["layer_name"] is None
    # A trace without kernels has no kernel fields and an empty summary.
    plain = new_id()
    assert (
        post(bob_client, json_export(plain, ("conv1", 0, 10, conv)), "application/json").status_code
        == 200
    )
    answer = bob_client.get(f"/api/v1/traces/{plain}/layers").json()
    assert answer["kernels"] == [] and "kernel_count" not in answer["aggregates"][0]


def test_the_chrome_export_has_counter_events(bob_client) -> None:  # type: ignore[no-untyped-def]
    trace_id = new_id()
    body = json_export(
        trace_id,
        ("predict", 0, 100, {"mlms.level": "model"}),
        ("gemm", 10, 50, kernel("fc1", 1)),
        ("nvml cuda:0", 0, 10, counter("cuda:0", gpu__power_w=100.0, gpu__sm_util_pct=40)),
        ("nvml cuda:0", 10, 10, counter("cuda:0", gpu__power_w=120.5, gpu__sm_util_pct=90)),
    )
    assert post(bob_client, body, "application/json").status_code == 200

    document = json.loads(bob_client.get(f"/api/v1/traces/{trace_id}?format=chrome").content)

    events = document["traceEvents"]
    assert sorted(e["name"] for e in events if e["ph"] == "X") == ["gemm", "predict"]
    counters = [e for e in events if e["ph"] == "C"]
    assert counters == [
        {
            "name": "gpu.power_w",
            "cat": "hardware",
            "ph": "C",
            "ts": BASE / 1000,
            "pid": 1,
            "args": {"gpu.power_w": 100.0},
        },
        {
            "name": "gpu.sm_util_pct",
            "cat": "hardware",
            "ph": "C",
            "ts": BASE / 1000,
            "pid": 1,
            "args": {"gpu.sm_util_pct": 40.0},
        },
        {
            "name": "gpu.power_w",
            "cat": "hardware",
            "ph": "C",
            "ts": (BASE + 10) / 1000,
            "pid": 1,
            "args": {"gpu.power_w": 120.5},
        },
        {
            "name": "gpu.sm_util_pct",
            "cat": "hardware",
            "ph": "C",
            "ts": (BASE + 10) / 1000,
            "pid": 1,
            "args": {"gpu.sm_util_pct": 90.0},
        },
    ]
    # No thread for the hardware level: its only spans are counters.
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {2: "model", 5: "system_library"}
