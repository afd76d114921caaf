"""schemathesis over the whole API: every operation of `/api/schema/` (`POST /v1/traces`
included) answers as the schema says, for an anonymous caller, a user's token and an agent's.

The schema is loaded from the hub itself and every operation is called in-process (Django's
WSGI handler, the test's database: SQLite in the first CI pass, PostgreSQL with Redis in the
second) with `MAX_EXAMPLES` cases generated from the schema (`GenerationMode.POSITIVE`) and as
many that break it (`NEGATIVE`: a wrong type, a value out of range or outside an enum, a missing
required field or credential). Each response is checked by schemathesis (`call_and_validate`):

- not_a_server_error: no 5xx;
- status_code_conformance: the status is one the operation declares;
- content_type_conformance and response_schema_conformance: the body is of a declared media
  type and matches the schema of that status (errors included: the `Error` component);
- response_headers_conformance: declared headers are present and valid (`WWW-Authenticate`);
- negative_data_rejection: a request the schema calls invalid gets a 4xx (the schema's rules,
  lengths, patterns, ranges, enums, are really enforced);
- ignored_auth: an operation whose security requires credentials refuses a request without.

positive_data_acceptance ("a request the schema calls valid gets a 2xx") is left out: what the
hub checks beyond any schema (a manifest's YAML content, npm version ranges, whether a named
model exists, whose host a claim names) answers 400, 404 or 409, as the schema declares. Unknown
query parameters are ignored, as HTTP APIs conventionally do (`allow-extra-parameters`).

Paths that name objects get, besides generated ids, the ids of real ones (`Seeded`): public and
private manifests, an artifact, the agent's hosts, a spare token, a finished, a running and a
queued evaluation, and a trace with spans. Operations run GETs first and DELETEs last, so that
deletions do not hide what the reads would reach; a caller whose token a fuzzed
`DELETE /tokens/{id}/` revoked gets a new one.

schemathesis calls only the operations the schema declares, which declares no OPTIONS:
`test_options_answers_on_every_path` calls OPTIONS on every path of the schema, with real ids,
as each caller (a 2xx with the endpoint's metadata or a 4xx in the `Error` format, never a 5xx).

Bounds: `MAX_EXAMPLES` (25 unless MLMS_FUZZ_EXAMPLES says otherwise) per operation and mode,
no shrinking, derandomized (the same cases every run; an exploratory run sets MLMS_FUZZ_SEED
to draw others, with `--timeout 0` past pytest-timeout's 300 s): 3 callers × 34 operations ×
2 modes × 25 ≈ 5,000 requests in the SQLite pass; `make test-postgres` sets 10 (≈ 2,000
requests, still derandomized), enough for what that pass adds, PostgreSQL's own answers to the
same kinds of request, at less than half the time.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from rest_framework.test import APIClient
from schemathesis import GenerationMode
from schemathesis.core.failures import Failure, FailureGroup

from evaluations.models import Divergence, Evaluation, Watch
from hub.models import ApiToken, Manifest, hash_token
from tests.evaluations.factories import (
    catalog_manifests,
    claim,
    launch,
    launched_id,
    post_result,
    register_hosts,
    result_body,
)
from tests.hub.factories import (
    dataset_manifest,
    framework_entries,
    model_manifest,
    model_yaml,
    onnx_graph,
    upload,
)

# SQLite and PostgreSQL refuse different values (integers past 64 bits, NUL bytes): both passes.
pytestmark = pytest.mark.both_stacks

MAX_EXAMPLES = int(os.environ.get("MLMS_FUZZ_EXAMPLES", "25"))
# Exploratory runs draw other cases: MLMS_FUZZ_SEED=<n> turns derandomization off and seeds
# hypothesis with n (CI leaves it unset: the same cases every run).
FUZZ_SEED = os.environ.get("MLMS_FUZZ_SEED")
CALLERS = ("anonymous", "user", "agent")
ARTIFACT = "models/withfile/1.0.0/model.onnx"
YAML = "application/x-yaml"
# GETs first, DELETEs last (see the module's docstring).
METHOD_ORDER = {"GET": 0, "POST": 1, "DELETE": 2}

CONFIG: dict[str, Any] = {
    "seed": 20261124,
    "generation": {"database": "none", "allow-extra-parameters": False},
    "checks": {"positive_data_acceptance": {"enabled": False}},
}


@dataclass
class Seeded:
    """The real objects the fuzzed paths may name, and the raw tokens of the callers."""

    user_token: str
    agent_token: str
    ids: dict[str, list[Any]] = field(default_factory=dict)


def _spans(trace_id: str) -> dict[str, Any]:
    """An OTLP/JSON export of two spans of `trace_id` (a model span and a layer under it)."""
    base = 1_700_000_000_000_000_000

    def span(span_id: str, name: str, level: str, offset: int, parent: str = "") -> dict:
        return {
            "traceId": trace_id,
            "spanId": span_id,
            "parentSpanId": parent,
            "name": name,
            "kind": 1,
            "startTimeUnixNano": str(base + offset),
            "endTimeUnixNano": str(base + offset + 5_000),
            "attributes": [{"key": "mlms.level", "value": {"stringValue": level}}],
        }

    return {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "scope": {"name": "fuzz"},
                        "spans": [
                            span("0102030405060708", "predict", "model", 0),
                            span(
                                "1112131415161718", "conv1", "framework", 1_000, "0102030405060708"
                            ),
                        ],
                    }
                ],
            }
        ]
    }


@pytest.fixture
def seeded(make_client, django_user_model) -> Seeded:  # type: ignore[no-untyped-def]
    """Alice (a user token of scopes read, write, evaluate) with her catalog and evaluations;
    an operator whose agent token registered the shared pool's hosts and runs her jobs."""
    alice = django_user_model.objects.create_user("alice")
    operator = django_user_model.objects.create_user("operator", is_staff=True)
    user: APIClient = make_client(alice, scopes=["read", "write", "evaluate"])
    agent: APIClient = make_client(operator, scopes=["agent"])
    catalog_manifests(user)
    with_file = model_yaml("withfile", graph_file="model.onnx", visibility="public")
    assert upload(user, with_file, {"model.onnx": onnx_graph()}).status_code == 201
    hosts = register_hosts(agent)
    spare, _ = ApiToken.issue(alice, name="spare", scopes=["read"])

    finished, running, queued = (launched_id(launch(user)) for _ in range(3))
    for evaluation_id in (finished, running):
        target = Evaluation.objects.get(pk=evaluation_id).target_host or hosts["cpu-1"]
        response = claim(agent, evaluation_id, target)
        assert response.status_code == 200, response.content
        if evaluation_id == finished:
            answer = post_result(agent, evaluation_id, result_body(response.json()["claim"]))
            assert answer.status_code == 201, answer.content
    trace = Evaluation.objects.get(pk=finished).trace_id
    exported = user.post("/v1/traces", _spans(trace), format="json")
    assert exported.status_code == 200, exported.content

    divergence = Divergence.objects.create(
        user=alice, a_id=finished, b_id=running, inputs=[0], tolerance=1e-4
    )
    watch = Watch.objects.create(
        user=alice,
        name="nightly",
        request=Evaluation.objects.get(pk=finished).request,
        model_name="m",
        batch_size=1,
    )

    def ids(kind: str) -> list[int]:
        return list(Manifest.objects.filter(kind=kind).values_list("pk", flat=True))

    return Seeded(
        user_token=user.raw_token,  # type: ignore[attr-defined]
        agent_token=agent.raw_token,  # type: ignore[attr-defined]
        ids={
            "manifests": ids(Manifest.MODEL),
            "datasets": ids(Manifest.DATASET),
            "hosts": [host.pk for host in hosts.values()],
            "tokens": [spare.pk],
            "evaluations": [finished, running, queued],
            "divergence": [divergence.pk],
            "watches": [watch.pk],
            "traces": list(
                Evaluation.objects.filter(pk__in=[finished, running]).values_list(
                    "trace_id", flat=True
                )
            ),
        },
    )


class Caller:
    """The credentials sent with every case: none, or a token, renewed when a fuzzed
    `DELETE /tokens/{id}/` revoked it."""

    def __init__(self, kind: str, seeded: Seeded) -> None:
        self.kind = kind
        self.raw = {"user": seeded.user_token, "agent": seeded.agent_token}.get(kind)

    def headers(self) -> dict[str, str]:
        if self.raw is None:
            return {}
        token = ApiToken.objects.get(key_hash=hash_token(self.raw))
        if token.revoked_at is not None:
            _token, self.raw = ApiToken.issue(token.user, name="fuzz", scopes=token.scopes)
        return {"Authorization": f"Bearer {self.raw}"}


def _with_real(strategy: Any, name: str, values: list[Any]) -> Any:
    """`strategy`'s path parameters with `name` replaced by one of `values`."""

    def put(pair: tuple[Any, Any]) -> dict[str, Any]:
        real, generated = pair
        # A plain mapping, without the generated value's record of what it mutated: with a
        # real id in place, the case is no longer the negative one it was generated as.
        values = generated.value if hasattr(generated, "value") else generated
        return {**values, name: real}

    return st.tuples(st.sampled_from(values), strategy).map(put)


def _real_path_parameters(seeded: Seeded) -> Callable[[Any, Any], Any]:
    """A schemathesis hook: a path's id is a real object's as often as a generated one."""

    def before_generate_path_parameters(context: Any, strategy: Any) -> Any:
        path = context.operation.path
        if "{path}" in path:
            return st.one_of(st.just({"path": ARTIFACT}), strategy)
        # A real id beside the path's other parameters as generated (`/evaluations/{id}/
        # shares/{group}/`), or everything generated.
        if "{trace_id}" in path:
            return st.one_of(_with_real(strategy, "trace_id", seeded.ids["traces"]), strategy)
        for collection, values in seeded.ids.items():
            if f"/{collection}/{{id}}" in path:
                return st.one_of(_with_real(strategy, "id", values), strategy)
        return strategy

    return before_generate_path_parameters


@dataclass
class Report:
    """What a run did and found: cases per operation and status, and each distinct failure."""

    caller: str
    cases: int = 0
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: dict[tuple[str, str, str], str] = field(default_factory=dict)
    no_negative: list[str] = field(default_factory=list)

    def record(
        self, label: str, mode: str, error: Failure | FailureGroup, case: Any, sent: dict
    ) -> None:
        group = error.exceptions if isinstance(error, FailureGroup) else (error,)
        for failure in group:
            first = failure.message.splitlines()[0] if failure.message else ""
            key = (label, mode, f"{failure.title}: {first}"[:120])
            self.failures.setdefault(key, f"{failure.message}\n{case.as_curl_command(sent)}")

    def text(self) -> str:
        lines = [f"{len(self.failures)} distinct failures as {self.caller}:"]
        for (label, mode, title), detail in sorted(self.failures.items()):
            lines.append(f"--- {label} [{mode}] {title}\n{detail[:1500]}")
        return "\n".join(lines)


def _valid_requests(operation: Any) -> list[Any]:
    """Requests that succeed for the caller allowed to make them (generated ones seldom do):
    uploads, a launch and a host registration, so that their answers are checked too; each
    runs twice, and the second upload answers 409."""
    bodies: dict[str, tuple[Any, str]] = {
        "POST /api/v1/manifests/": (model_manifest("fuzzed", visibility="public"), YAML),
        "POST /api/v1/datasets/": (dataset_manifest("fuzzed", visibility="public"), YAML),
        "POST /api/v1/evaluations/": (
            {"model": "m", "framework": "onnxruntime", "dataset": "d", "hosts": "all"},
            "application/json",
        ),
        "POST /api/v1/hosts/": (
            {"name": "fuzzed", "frameworks": framework_entries([("onnxruntime", "1.17.0")])},
            "application/json",
        ),
    }
    if operation.label not in bodies:
        return []
    body, media_type = bodies[operation.label]
    return [operation.Case(body=body, media_type=media_type)] * 2


def _run_operation(operation: Any, mode: GenerationMode, caller: Caller, report: Report) -> None:
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=FUZZ_SEED is None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        report.cases += 1
        headers = caller.headers()
        try:
            response = case.call_and_validate(headers=headers)
        except (Failure, FailureGroup) as error:
            report.record(operation.label, str(mode), error, case, headers)
            return
        report.statuses[(operation.label, response.status_code)] += 1

    if FUZZ_SEED is not None:
        run = seed(int(FUZZ_SEED))(run)
    if mode == GenerationMode.POSITIVE:
        for case in _valid_requests(operation):
            run = example(case=case)(run)
    try:
        run()
    except Unsatisfiable:  # nothing in the operation that a negative case could break
        report.no_negative.append(operation.label)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("caller_kind", CALLERS)
def test_every_operation_answers_as_the_schema_says(seeded: Seeded, caller_kind: str) -> None:
    schema = schemathesis.openapi.from_wsgi(
        "/api/schema/", WSGIHandler(), config=schemathesis.Config.from_dict(CONFIG)
    )
    schema.hook(_real_path_parameters(seeded))
    operations = [result.ok() for result in schema.get_all_operations()]
    operations.sort(key=lambda operation: METHOD_ORDER.get(operation.method.upper(), 3))
    caller = Caller(caller_kind, seeded)
    report = Report(caller_kind)
    started = time.monotonic()

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run_operation(operation, mode, caller, report)

    elapsed = time.monotonic() - started
    print(
        f"\n{caller_kind}: {len(operations)} operations, {report.cases} cases, "
        f"{len(report.failures)} failures, {elapsed:.1f} s"
    )
    for (label, status), count in sorted(report.statuses.items()):
        print(f"  {label}: {status} × {count}")
    labels = {operation.label for operation in operations}
    assert "POST /v1/traces" in labels and len(labels) >= 34, sorted(labels)
    assert report.cases >= len(operations) * 2, "too few cases ran"
    assert not report.failures, report.text()


# --- OPTIONS on every path ------------------------------------------------------------------------
#
# schemathesis calls only the operations the schema declares, and it declares no OPTIONS: this
# calls OPTIONS on every path of the schema, with real ids, for each caller.

PATH_VALUES = {
    "path": ARTIFACT,
    "span_id": "0102030405060708",
    "digest": "sha256:" + "0" * 64,
    "other": "sha256:" + "1" * 64,
    "index": 0,
    "username": "alice",
}


def _filled(template: str, values: dict[str, Any]) -> str:
    """`template` (a schema path) with its parameters replaced by `values`; `{id}` by the first
    id of the collection it follows."""
    path = template
    for collection, ids in values["ids"].items():
        path = path.replace(f"/{collection}/{{id}}", f"/{collection}/{ids[0]}")
    for name, value in values.items():
        if name != "ids":
            path = path.replace(f"{{{name}}}", str(value))
    assert "{" not in path, path
    return path


@pytest.mark.django_db
@pytest.mark.parametrize("caller_kind", CALLERS)
def test_options_answers_on_every_path(seeded: Seeded, caller_kind: str) -> None:
    """2xx with what the endpoint is (DRF's metadata, `hub.api.metadata`), or a 4xx in the
    API's error format (401 anonymous, 403 a token without the scope the endpoint reads with):
    never a 5xx, always JSON."""
    user = APIClient()
    user.credentials(HTTP_AUTHORIZATION=f"Bearer {seeded.user_token}")
    assert user.post("/api/v1/groups/", {"name": "lab"}, format="json").status_code == 201
    finished = Evaluation.objects.get(pk=seeded.ids["evaluations"][0])
    values: dict[str, Any] = {
        **PATH_VALUES,
        "ids": seeded.ids,
        "trace_id": seeded.ids["traces"][0],
        "group": "lab",
        "name": "lab",
        "task": finished.task,
        "dataset": finished.dataset_name,
    }
    schema = user.get("/api/schema/", {"format": "json"}).json()
    caller = Caller(caller_kind, seeded)
    client = APIClient()
    statuses: Counter[int] = Counter()

    for template in schema["paths"]:
        address = _filled(template, values)
        response = client.options(address, headers=caller.headers())

        statuses[response.status_code] += 1
        assert response.status_code < 500, (address, response.content)
        assert response["Content-Type"] == "application/json", (address, response.content)
        body = response.json()
        if response.status_code < 300:
            assert {"name", "methods", "renders", "parses"} <= set(body), (address, body)
            assert "OPTIONS" in response["Allow"] and "OPTIONS" in body["methods"]
        else:
            assert set(body) == {"detail", "code", "errors"}, (address, body)
    print(f"\n{caller_kind}: OPTIONS on {len(schema['paths'])} paths: {dict(statuses)}")
    assert len(schema["paths"]) >= 40
