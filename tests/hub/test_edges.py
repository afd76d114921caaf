"""Malformed input refused once, at the edges: every kind of value that no column holds, in a
URL's path or query (`hub.middleware`) or anywhere in a JSON or form body (`hub.api.parsers`),
answers a 4xx naming the problem and where it is, and nothing is written.

The kinds: a NUL character (PostgreSQL's text and JSON columns cannot hold one), a lone
surrogate (not Unicode text: it cannot be encoded), an integer outside 64 bits, a number past a
double's range (`1e999`) and the constants `NaN`, `Infinity` and `-Infinity`; integers within
64 bits that their column cannot hold (PositiveIntegerField: 2^31 - 1) are refused by the
serializers. PostgreSQL is where these became 500s: the test runs in both passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from evaluations.models import Evaluation, Result, StatusChange
from hub.models import ApiToken, Host, Manifest
from tests.evaluations.factories import (
    catalog_manifests,
    claim,
    launch,
    launched_id,
    register_hosts,
    result_body,
    url,
)
from tests.helpers import error_of
from tests.hub.factories import HOSTS_URL, TOKENS_URL
from tests.traces.factories import BASE, json_export, new_id, post
from traces.models import Trace

pytestmark = [pytest.mark.django_db, pytest.mark.both_stacks]

JSON = "application/json"


# --- URLs --------------------------------------------------------------------------------------

PAGES = [
    "/models/%00/",
    "/datasets/%00/",
    "/leaderboards/%00/%00/",
    "/groups/%00/",
    "/%00",
    "/leaderboards/?framework=%00",
]
API_URLS = [
    "/api/v1/groups/%00/",
    "/api/v1/groups/%00/members/",
    "/api/v1/manifests/%00/",
    "/api/v1/leaderboards/%00/%00/",
    "/api/v1/traces/%00",
    "/api/v1/traces/%00/timeline",
    "/api/v1/evaluations/%00/shares/",
    "/v1/traces%00",
]


@pytest.mark.parametrize("signed_in", [False, True], ids=["anonymous", "signed-in"])
@pytest.mark.parametrize("page", PAGES)
def test_a_nul_in_a_page_path_is_an_html_400(alice, signed_in, page) -> None:  # type: ignore[no-untyped-def]
    browser = Client()
    if signed_in:
        browser.force_login(alice)

    response = browser.get(page)

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert "holds a NUL character" in response.content.decode()


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "OPTIONS"])
@pytest.mark.parametrize("address", API_URLS)
def test_a_nul_in_an_api_path_is_a_json_400(alice_full_client, anonymous, address, method) -> None:  # type: ignore[no-untyped-def]
    for caller in (anonymous, alice_full_client):
        response = caller.generic(method, address)

        assert response.status_code == 400, (address, response.content)
        error = error_of(response)
        assert error["path"] == "" and "path holds a NUL character" in error["message"]


def test_a_nul_in_a_query_parameter_name_is_a_json_400_naming_it(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    response = alice_full_client.get("/api/v1/manifests/?na%00me=x")

    assert response.status_code == 400
    error = error_of(response)
    assert error["path"] == "na\\u0000me" and "NUL character" in error["message"]


# --- JSON bodies -------------------------------------------------------------------------------

# (JSON text of the value, what the error says). A placeholder in a body is replaced by it.
VALUES = {
    "nul": ('"a\\u0000b"', "NUL character"),
    "surrogate": ('"\\ud800"', "lone surrogate (\\ud800)"),
    "low-surrogate": ('"x\\udfffy"', "lone surrogate (\\udfff)"),
    "2^63": (str(2**63), "outside the range of a 64-bit integer"),
    "-2^63-1": (str(-(2**63) - 1), "outside the range of a 64-bit integer"),
    "10^400": ("1" + "0" * 400, "an integer of 401 digits"),
    "1e999": ("1e999", "beyond the range of a double"),
    "-1e999": ("-1e999", "beyond the range of a double"),
    "NaN": ("NaN", "is NaN, which is not a JSON number"),
    "Infinity": ("Infinity", "is Infinity, which is not a JSON number"),
    "-Infinity": ("-Infinity", "is -Infinity, which is not a JSON number"),
}
KEYS = {
    "nul-key": ('"k\\u0000"', "k\x00", "has a name that holds a NUL character"),
    "surrogate-key": ('"k\\udc00"', "k\\udc00", "has a name that holds a lone surrogate"),
}
VALUE = "@@value@@"
KEY = "@@key@@"


def _text(body: dict[str, Any], value: str | None = None, key: str | None = None) -> str:
    """`body` as JSON text, its placeholder value (`VALUE`) and key (`KEY`) replaced by raw JSON
    text (which `json.dumps` cannot write: NaN, 1e999, lone surrogates)."""
    text = json.dumps(body)
    if value is not None:
        text = text.replace(json.dumps(VALUE), value)
    if key is not None:
        text = text.replace(json.dumps(KEY), key)
    return text


@pytest.fixture
def claimed(alice_full_client, agent) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """An evaluation of Alice's that the operator's agent has claimed: (its id, the claim)."""
    catalog_manifests(alice_full_client)
    hosts = register_hosts(agent)
    evaluation_id = launched_id(launch(alice_full_client))
    target = Evaluation.objects.get(pk=evaluation_id).target_host or hosts["cpu-1"]
    response = claim(agent, evaluation_id, target)
    assert response.status_code == 200, response.content
    return evaluation_id, response.json()["claim"]


def _rows() -> dict[str, int]:
    """What a refused request must not have added to."""
    return {
        "tokens": ApiToken.objects.count(),
        "hosts": Host.objects.count(),
        "manifests": Manifest.objects.count(),
        "evaluations": Evaluation.objects.count(),
        "results": Result.objects.count(),
        "status changes": StatusChange.objects.count(),
        "traces": Trace.objects.count(),
    }


def _refused(response: Any, path: str, says: str, before: dict[str, int]) -> None:
    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["path"] == path, error
    assert says in error["message"]
    assert path.replace("\x00", "\\u0000") in error["message"], error
    assert _rows() == before


# Where a user's token sends a value: (url, body with the placeholder, the field's path).
USER_BODIES = {
    "token name": (TOKENS_URL, {"name": VALUE, "scopes": ["read"]}, "name"),
    "group description": ("/api/v1/groups/", {"name": "lab", "description": VALUE}, "description"),
    "launch override": (
        "/api/v1/evaluations/",
        {"model": "m", "framework": "onnxruntime", "dataset": "d", "overrides": [VALUE]},
        "overrides.0",
    ),
    "launch memory": (
        "/api/v1/evaluations/",
        {"model": "m", "framework": "onnxruntime", "dataset": "d", "min_memory_gb": VALUE},
        "min_memory_gb",
    ),
}


@pytest.mark.parametrize("kind", VALUES)
@pytest.mark.parametrize("where", USER_BODIES)
def test_a_value_no_column_holds_in_a_users_body_is_400_naming_it(
    alice_full_client, where, kind
) -> None:  # type: ignore[no-untyped-def]
    address, body, path = USER_BODIES[where]
    value, says = VALUES[kind]
    before = _rows()

    response = alice_full_client.generic("POST", address, _text(body, value), content_type=JSON)

    _refused(response, path, says, before)


@pytest.mark.parametrize("kind", KEYS)
def test_a_key_no_column_holds_is_400_naming_it(alice_full_client, agent, kind) -> None:  # type: ignore[no-untyped-def]
    raw, shown, says = KEYS[kind]
    before = _rows()
    body = {"name": "gpu-01", "frameworks": [], "software": {"pip": {KEY: "1"}}}

    response = agent.generic("POST", HOSTS_URL, _text(body, key=raw), content_type=JSON)

    _refused(response, f"software.pip.{shown}", says, before)
    # A key at the top of the body.
    response = alice_full_client.generic(
        "POST", TOKENS_URL, _text({"name": "t", "scopes": ["read"], KEY: 1}, key=raw), JSON
    )
    _refused(response, shown, says, before)


@pytest.mark.parametrize("kind", VALUES)
def test_a_value_no_column_holds_in_a_host_registration_is_400(agent, kind) -> None:  # type: ignore[no-untyped-def]
    value, says = VALUES[kind]
    before = _rows()
    body = {
        "name": "gpu-01",
        "frameworks": [{"name": "onnxruntime", "version": "1.17.0", "devices": ["cpu"]}],
        "hardware": {"gpus": [{"name": "A100", "memory_bytes": VALUE}]},
    }

    response = agent.generic("POST", HOSTS_URL, _text(body, value), content_type=JSON)

    _refused(response, "hardware.gpus.0.memory_bytes", says, before)


# Where an agent sends a value in a result: (a change of `result_body`, the field's path).
RESULT_FIELDS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "details": (lambda body: body["details"].update(x=VALUE), "details.x"),
    "stack": (lambda body: body["stack"]["cpu"].update(model=VALUE), "stack.cpu.model"),
    "latency count": (lambda body: body["latency"]["1"].update(count=VALUE), "latency.1.count"),
    "label": (
        lambda body: body["predictions"]["labels"].__setitem__(0, VALUE),
        "predictions.labels.0",
    ),
    "probability": (
        lambda body: body["predictions"]["probabilities"][1].__setitem__(0, VALUE),
        "predictions.probabilities.1.0",
    ),
}


def _assert_still_running(evaluation_id: str) -> None:
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.status == Evaluation.RUNNING and not Result.objects.exists()


@pytest.mark.parametrize("field", RESULT_FIELDS)
def test_a_value_no_column_holds_in_a_result_is_400_naming_it(agent, claimed, field) -> None:  # type: ignore[no-untyped-def]
    evaluation_id, claim_id = claimed
    change, path = RESULT_FIELDS[field]
    body = result_body(claim_id)
    change(body)
    before = _rows()

    for value, says in VALUES.values():
        response = agent.generic(
            "POST", url(evaluation_id, "result"), _text(body, value), content_type=JSON
        )

        _refused(response, path, says, before)
        _assert_still_running(evaluation_id)
    # The same result, well formed, is then taken.
    response = agent.post(url(evaluation_id, "result"), result_body(claim_id), format="json")
    assert response.status_code == 201


def test_a_value_no_column_holds_in_a_progress_report_is_400(agent, claimed) -> None:  # type: ignore[no-untyped-def]
    evaluation_id, claim_id = claimed
    before = _rows()
    body = {"claim": claim_id, "done": VALUE, "total": 10}

    for value, says in VALUES.values():
        response = agent.generic(
            "POST", url(evaluation_id, "progress"), _text(body, value), content_type=JSON
        )

        _refused(response, "done", says, before)
        assert Evaluation.objects.get(pk=evaluation_id).progress_done == 0


# Integers within 64 bits that their column cannot hold: (url action, change, path, the bound).
COLUMN_BOUNDS: dict[str, tuple[str, Callable[[dict[str, Any]], None], str, int]] = {
    "progress done": ("progress", lambda body: body.update(done=2**31), "done", 2**31 - 1),
    "progress total": ("progress", lambda body: body.update(total=2**40), "total", 2**31 - 1),
    "accuracy count": (
        "result",
        lambda body: body["accuracy"].update(count=2**31),
        "accuracy.count",
        2**31 - 1,
    ),
    "latency count": (
        "result",
        lambda body: body["latency"]["1"].update(count=2**62),
        "latency.1.count",
        2**31 - 1,
    ),
    "top_k": (
        "result",
        lambda body: body["predictions"].update(top_k=2**15),
        "predictions.top_k",
        2**15 - 1,
    ),
    "dispatch": ("claim", lambda body: body.update(dispatch=2**31), "dispatch", 2**31 - 1),
}


@pytest.mark.parametrize("case", COLUMN_BOUNDS)
def test_an_integer_past_its_column_is_refused_by_the_serializer(agent, claimed, case) -> None:  # type: ignore[no-untyped-def]
    evaluation_id, claim_id = claimed
    action, change, path, bound = COLUMN_BOUNDS[case]
    body: dict[str, Any] = {
        "progress": {"claim": claim_id, "done": 1, "total": 10},
        "result": result_body(claim_id),
        "claim": {"host": Evaluation.objects.get(pk=evaluation_id).host_id, "dispatch": 1},
    }[action]
    change(body)
    before = _rows()

    response = agent.post(url(evaluation_id, action), body, format="json")

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["path"] == path and str(bound) in error["message"]
    assert _rows() == before
    evaluation = Evaluation.objects.get(pk=evaluation_id)
    assert evaluation.progress_done == 0 and evaluation.status == Evaluation.RUNNING


def test_a_probability_past_a_float32_is_refused(agent, claimed) -> None:  # type: ignore[no-untyped-def]
    """Probabilities are stored as float32: 1e300 would be stored as infinity, which no read
    of the predictions could answer."""
    evaluation_id, claim_id = claimed
    body = result_body(claim_id)
    body["predictions"]["probabilities"][1][0] = 1e300

    response = agent.post(url(evaluation_id, "result"), body, format="json")

    assert response.status_code == 400
    error = error_of(response)
    assert error["path"] == "predictions.probabilities.1"
    assert "32-bit float" in error["message"]
    _assert_still_running(evaluation_id)


@pytest.mark.usefixtures("claimed")  # the catalog, the hosts and a running evaluation
def test_a_launch_limit_past_the_progress_columns_is_refused(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    before = _rows()

    response = launch(alice_full_client, limit=2**31)

    assert response.status_code == 400
    assert error_of(response)["path"] == "limit"
    assert _rows() == before


# --- String fields: a JSON string, checked as sent ------------------------------------------------

# (caller, url, body, the field): a number where the schema says `type: string`.
NUMBERS_FOR_STRINGS = {
    "token name": ("user", TOKENS_URL, {"name": 5, "scopes": ["read"]}, "name"),
    "group name": ("user", "/api/v1/groups/", {"name": 301350}, "name"),
    "group description": (
        "user",
        "/api/v1/groups/",
        {"name": "lab", "description": 1.5},
        "description",
    ),
    "launch model": (
        "user",
        "/api/v1/evaluations/",
        {"model": 7, "framework": "onnxruntime", "dataset": "d"},
        "model",
    ),
    "host name": (
        "agent",
        HOSTS_URL,
        {
            "name": 1,
            "frameworks": [{"name": "onnxruntime", "version": "1.17.0", "devices": ["cpu"]}],
        },
        "name",
    ),
    "framework version": (
        "agent",
        HOSTS_URL,
        {"name": "h", "frameworks": [{"name": "onnxruntime", "version": 1.17, "devices": ["cpu"]}]},
        "frameworks.0.version",
    ),
}


@pytest.mark.parametrize("case", NUMBERS_FOR_STRINGS)
def test_a_number_for_a_string_field_is_refused(alice_full_client, agent, case) -> None:  # type: ignore[no-untyped-def]
    """DRF's string fields took a number for its text (a group named "301350")."""
    caller, address, body, path = NUMBERS_FOR_STRINGS[case]
    before = _rows()

    response = {"user": alice_full_client, "agent": agent}[caller].post(
        address, body, format="json"
    )

    assert response.status_code == 400, response.content
    error = error_of(response)
    assert error["path"] == path and error["message"] == "Not a valid string."
    assert _rows() == before


@pytest.mark.parametrize(
    "address, body, path",
    [
        ("/api/v1/groups/", {"name": " lab"}, "name"),
        ("/api/v1/groups/", {"name": "lab\n"}, "name"),
        (
            "/api/v1/evaluations/",
            {"model": " m", "framework": "onnxruntime", "dataset": "d"},
            "model",
        ),
    ],
)
def test_a_name_is_checked_as_sent_not_trimmed(alice_full_client, address, body, path) -> None:  # type: ignore[no-untyped-def]
    """`" lab"` was trimmed to `lab` before the name's rule, which refuses a space."""
    before = _rows()

    response = alice_full_client.post(address, body, format="json")

    assert response.status_code == 400, response.content
    assert error_of(response)["path"] == path
    assert _rows() == before


def test_a_token_name_is_kept_as_sent(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    response = alice_full_client.post(
        TOKENS_URL, {"name": " ci token ", "scopes": ["read"]}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["name"] == " ci token "


# --- Forms and multipart bodies ------------------------------------------------------------------


def test_a_nul_in_a_form_value_or_name_is_400_naming_it(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    before = _rows()
    for body, path in (
        ({"name": "a\x00b", "scopes": "read"}, "name"),
        ({"name": "t", "scopes": "read", "x\x00y": "1"}, "x\x00y"),
    ):
        for fmt in ("multipart", None):
            if fmt:
                response = alice_full_client.post(TOKENS_URL, body, format=fmt)
            else:
                form = "&".join(
                    f"{k.replace(chr(0), '%00')}={v.replace(chr(0), '%00')}"
                    for k, v in body.items()
                )
                response = alice_full_client.generic(
                    "POST", TOKENS_URL, form, content_type="application/x-www-form-urlencoded"
                )
            _refused(response, path, "NUL character", before)


@pytest.mark.parametrize("fmt", ["multipart", "form"])
def test_a_form_of_too_many_fields_is_a_json_400(alice_full_client, fmt) -> None:  # type: ignore[no-untyped-def]
    """Django refuses more than DATA_UPLOAD_MAX_NUMBER_FIELDS fields with a SuspiciousOperation,
    which was its bare 400 page."""
    before = _rows()
    fields = {f"f{index}": "x" for index in range(1001)}
    if fmt == "multipart":
        response = alice_full_client.post(TOKENS_URL, fields, format="multipart")
    else:
        form = "&".join(f"{name}={value}" for name, value in fields.items())
        response = alice_full_client.generic(
            "POST", TOKENS_URL, form, content_type="application/x-www-form-urlencoded"
        )

    assert response.status_code == 400
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in error_of(response)["message"]
    assert _rows() == before


@pytest.mark.parametrize(
    "content_type, body",
    [
        ("multipart/form-data", b"--x\r\n"),  # no boundary
        ("multipart/form-data; boundary=x", b"no parts at all"),
        (
            "multipart/form-data; boundary=x",
            b'--x\r\nContent-Disposition: form-data; name="manifest"\r\n',
        ),
        ("multipart/form-data; boundary=" + "x" * 300, b"--x--\r\n"),  # an overlong boundary
    ],
)
def test_a_malformed_multipart_body_is_400_saying_so(alice_full_client, content_type, body) -> None:  # type: ignore[no-untyped-def]
    before = _rows()

    response = alice_full_client.generic(
        "POST", "/api/v1/manifests/", body, content_type=content_type
    )

    assert 400 <= response.status_code < 500, response.content
    error = error_of(response)
    assert error["message"], error
    assert _rows() == before


# --- The OTLP receiver's JSON ------------------------------------------------------------------


def _span_json(trace_id: str, value: str, where: str) -> bytes:
    body = json.loads(json_export(trace_id, ("s", 0, 10, {"k": "v"})))
    span = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    if where == "name":
        span["name"] = VALUE
    elif where == "start":
        span["startTimeUnixNano"] = VALUE
    elif where == "key":
        span["attributes"][0]["key"] = VALUE
    else:
        span["attributes"][0]["value"] = {where: VALUE}
    return _text(body, value).encode()


@pytest.mark.parametrize(
    "where", ["name", "start", "key", "stringValue", "intValue", "doubleValue"]
)
@pytest.mark.parametrize("kind", VALUES)
def test_the_otlp_receivers_json_never_answers_500(alice_full_client, where, kind) -> None:  # type: ignore[no-untyped-def]
    """NUL characters are replaced and NaN and ±Infinity doubles stored as strings, as
    docs/api.md says; everything else that no column holds is 400, and nothing is stored."""
    trace_id = new_id()

    response = post(alice_full_client, _span_json(trace_id, VALUES[kind][0], where), JSON)

    assert response.status_code in (200, 400), response.content
    assert response["Content-Type"] == JSON
    if response.status_code == 400:
        error_of(response)
        assert not Trace.objects.filter(trace_id=trace_id).exists()
    else:
        assert alice_full_client.get(f"/api/v1/traces/{trace_id}/timeline").status_code == 200


# --- The timeline of a trace with hardware counters ----------------------------------------------


def test_a_timeline_from_0_of_a_trace_with_counters_answers(alice_full_client) -> None:  # type: ignore[no-untyped-def]
    """A window from 0 puts its counter samples 1.7e18 ns in: past 2^53, which a double holds
    only rounded."""
    trace_id = new_id()
    counter = {
        "mlms.level": "hardware",
        "mlms.op_type": "counter",
        "mlms.device": "cuda:0",
        "mlms.counter.gpu.power_w": 5.0,
    }
    body = json_export(
        trace_id, ("predict", 0, 10_000, {"mlms.level": "model"}), ("nvml", 0, 10, counter)
    )
    assert post(alice_full_client, body, JSON).status_code == 200

    for query in ({"start": 0}, {"start": 0, "end": 2**63 - 1}, {"end": BASE + 5}):
        response = alice_full_client.get(f"/api/v1/traces/{trace_id}/timeline", query)

        assert response.status_code == 200, (query, response.content)
        assert response.json()["counters"]["gpu.power_w"]["points"] == [[BASE, 5.0]]
