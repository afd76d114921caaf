"""One set of defaults: every job option has one default, in the protocol
(`predictors.protocol.JOB_DEFAULTS`), and every entry point takes it from there. One request,
launched from the browser's form, the API, `mlms evaluate --hub` (the CLI's request through its
hub client, against a live server), Reproduce and `manage.py reference_results`, is stored with
identical job options; `mlms evaluate` here and `mlms study` build the loop's options from the
same. Reproduce copies every option the original ran with, a LoadGen run's included; and
`target_ci` is refused by name where it is no share."""

from __future__ import annotations

import dataclasses
import secrets
from html.parser import HTMLParser
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from evaluations.models import Evaluation
from frontend.forms import LaunchForm
from hub.models import Manifest
from predictors.agent.hub_client import HubClient
from predictors.cli import args as cli_args
from predictors.cli import commands, study
from predictors.cli import evaluate as cli
from predictors.evaluation import EvaluationOptions
from predictors.protocol import JOB_DEFAULTS, JobOptions
from tests.evaluations.factories import error_paths, launch, launched_id

pytestmark = pytest.mark.django_db

LAUNCH_URL = "/evaluate/"
# The request every entry point launches: reference results time batch sizes 1, 8 and 32.
SIZES = [1, 8, 32]


class _FormValues(HTMLParser):
    """What a browser submits from the page's launch form as it is shown: each field's value,
    a checked box's or radio's, a select's chosen option (else its first), a textarea's text."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.inside = False
        self.select: str | None = None
        self.first: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        given = {key: value or "" for key, value in attrs}
        if tag == "form" and given.get("id") == "launch-form":
            self.inside = True
        if not self.inside:
            return
        name = given.get("name", "")
        if tag == "input" and name:
            kind = given.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in given:
                    self.values[name] = given.get("value") or "on"
            elif kind not in ("submit", "button"):
                self.values[name] = given.get("value", "")
        elif tag == "select":
            self.select, self.first = name, None
        elif tag == "option" and self.select:
            if self.first is None:
                self.first = given.get("value", "")
            if "selected" in given:
                self.values[self.select] = given.get("value", "")
        elif tag == "textarea":
            self.textarea = name
            self.values[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select" and self.select:
            if self.select not in self.values and self.first is not None:
                self.values[self.select] = self.first
            self.select = None
        elif tag == "textarea" and self.textarea:
            # A textarea's first line break belongs to its markup (HTML's parsing rules).
            text = self.values[self.textarea]
            self.values[self.textarea] = text[1:] if text.startswith("\n") else text
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.values[self.textarea] += data


def _shown_form(client: Client, url: str) -> dict[str, str]:
    response = client.get(url)
    assert response.status_code == 200, response.content
    parser = _FormValues()
    parser.feed(response.content.decode())
    assert parser.values, "no launch form on the page"
    return parser.values


def _post(client: Client, values: dict[str, str], url: str = LAUNCH_URL) -> Any:
    """Submit the form: each submission a form of its own (a fresh nonce; the same one twice
    is the same submission, launched once)."""
    return client.post(url, {**values, "nonce": secrets.token_hex(16)})


def _submit(client: Client, values: dict[str, str], url: str = LAUNCH_URL) -> Evaluation:
    before = set(Evaluation.objects.values_list("pk", flat=True))
    response = _post(client, values, url)
    assert response.status_code == 302, response.content.decode()[-3000:]
    (launched,) = Evaluation.objects.exclude(pk__in=before)
    return launched


def _stored(evaluation: Evaluation) -> JobOptions:
    """The job options an evaluation is stored with: what its agent's claim answers."""
    request = evaluation.request
    return JobOptions.from_dict({name: request[name] for name in JobOptions.names()})


@pytest.fixture
def reference_model(catalog) -> None:  # type: ignore[no-untyped-def]
    """Model m and dataset d as built-in manifests, m's reference results measured on d."""
    Manifest.objects.filter(kind=Manifest.DATASET, name="d").update(builtin=True)
    for manifest in Manifest.objects.filter(kind=Manifest.MODEL, name="m"):
        content = dict(manifest.content)
        content["attributes"] = {**(content.get("attributes") or {}), "training_dataset": "d"}
        manifest.content = content
        manifest.builtin = True
        manifest.save()


def test_one_request_is_stored_with_the_same_job_options_from_every_entry_point(
    live_server, alice, alice_evaluator_client, signed_in, hosts, reference_model
) -> None:  # type: ignore[no-untyped-def]
    launched: dict[str, Evaluation] = {}

    # The API.
    response = launch(alice_evaluator_client, batch_sizes=SIZES)
    launched["api"] = Evaluation.objects.get(pk=launched_id(response))

    # The browser's form, as it is shown, with the dataset and batch sizes chosen.
    values = _shown_form(signed_in, f"{LAUNCH_URL}?model=m")
    values.update(dataset="d", batch_sizes=", ".join(str(size) for size in SIZES))
    launched["form"] = _submit(signed_in, values)

    # mlms evaluate --hub: the request the CLI builds, sent by its hub client.
    argv = ["evaluate", "m", "--framework", "onnxruntime", "--dataset", "d"]
    argv += ["--batch-sizes", ",".join(str(size) for size in SIZES)]
    args = commands.parser().parse_args([*argv, "--hub", live_server.url, "--token", "-"])
    request = cli.remote_request(args)
    answer = HubClient(live_server.url, alice_evaluator_client.raw_token).launch(request)
    launched["cli --hub"] = Evaluation.objects.get(pk=answer["evaluations"][0]["id"])

    # Reproduce: the form as Reproduce fills it, submitted as it is.
    url = f"{LAUNCH_URL}?reproduce={launched['api'].pk}"
    launched["reproduce"] = _submit(signed_in, _shown_form(signed_in, url), url)

    # manage.py reference_results (it launches on every live host; none runs them here).
    with pytest.raises(CommandError, match="unfinished"):
        call_command("reference_results", "--model", "m", "--timeout", "0")
    references = list(Evaluation.objects.filter(user__username="mlmodelscope"))
    assert len(references) == 3
    for index, evaluation in enumerate(references):
        launched[f"reference results {index}"] = evaluation

    stored = {where: _stored(evaluation) for where, evaluation in launched.items()}
    expected = JobOptions(batch_sizes=tuple(SIZES))
    assert expected.warmup == JOB_DEFAULTS["warmup"] == 2
    assert {where: options for where, options in stored.items() if options != expected} == {}

    # Here, with no hub: `mlms evaluate` and `mlms study` build the loop's options alike.
    loop = EvaluationOptions.from_job(expected, device="cpu")
    assert cli.local_options(commands.parser().parse_args(argv)) == loop
    study_argv = ["study", "m", "--framework", "onnxruntime", "--dataset", "d"]
    study_args = commands.parser().parse_args([*study_argv, "--batch-sizes", "1,8,32"])
    assert study.study_options(study_args, "validation", "cpu") == loop


def test_a_cold_start_runs_no_warmup_from_every_entry_point(
    alice_evaluator_client, signed_in, hosts
) -> None:  # type: ignore[no-untyped-def]
    api = Evaluation.objects.get(pk=launched_id(launch(alice_evaluator_client, cold_start=True)))

    values = _shown_form(signed_in, f"{LAUNCH_URL}?model=m")
    assert values["warmup"] == str(JOB_DEFAULTS["warmup"])
    values.update(dataset="d", cold_start="on")  # the warm-up left as shown
    form = _submit(signed_in, values)

    argv = ["evaluate", "m", "--framework", "onnxruntime", "--dataset", "d", "--cold-start"]
    args = commands.parser().parse_args(argv)
    remote = JobOptions.from_dict(
        {name: value for name, value in cli.remote_request(
            commands.parser().parse_args([*argv, "--hub", "http://hub", "--token", "t"])
        ).items() if name in JobOptions.names()}
    )  # fmt: skip
    local = cli.local_options(args)

    for options in (_stored(api), _stored(form), remote, local):
        assert (options.cold_start, options.warmup) == (True, 0)

    # A warm-up asked with a cold start is refused, naming the warm-up, everywhere.
    assert error_paths(launch(alice_evaluator_client, cold_start=True, warmup=3)) == ["warmup"]
    refused = _post(signed_in, {**values, "warmup": "3"})
    assert refused.status_code == 400
    assert b'id="field-warmup"' in refused.content and b"a cold start runs no warm-up" in (
        refused.content
    )
    with pytest.raises(cli_args.UsageError, match="--warmup: a cold start runs no warm-up"):
        cli.local_options(commands.parser().parse_args([*argv, "--warmup", "3"]))


@pytest.mark.parametrize(
    "loadgen",
    [
        {
            "scenario": "server",
            "target_qps": 250.5,
            "latency_bound_ms": 40.0,
            "min_duration_ms": 2500,
            "min_query_count": 400,
        },
        {"scenario": "multi_stream", "samples_per_query": 4, "loadgen_mode": "performance"},
        {"scenario": "offline", "target_qps": 900.0, "min_query_count": 2000},
        {"scenario": "server", "latency_bound_ms": 25.0, "find_peak_qps": True},
    ],
    ids=["server", "multi_stream", "offline", "server peak search"],
)
def test_reproduce_copies_every_option_a_loadgen_run_ran_with(
    alice_evaluator_client, signed_in, hosts, loadgen
) -> None:  # type: ignore[no-untyped-def]
    asked = {
        "batch_sizes": [1, 4],
        "limit": 2,
        "warmup": 3,
        "repeat": 2,
        "seed": 7,
        "threads": 2,
        "trace_level": "none",
        "overrides": ["inputs.0.parameters.color_mode=BGR"],
        "target_ci": 0.02,
        "target_ci_seconds": 30.0,
        **loadgen,
    }
    original = Evaluation.objects.get(pk=launched_id(launch(alice_evaluator_client, **asked)))

    url = f"{LAUNCH_URL}?reproduce={original.pk}"
    again = _submit(signed_in, _shown_form(signed_in, url), url)

    assert _stored(again) == _stored(original)
    assert _stored(again).scenario == loadgen["scenario"]
    assert {name: again.request[name] for name in asked} == {
        name: original.request[name] for name in asked
    }
    assert (again.model_version, again.dataset_version) == (
        original.model_version,
        original.dataset_version,
    )


def test_every_job_option_has_a_cli_flag_a_form_field_and_the_loops_default() -> None:
    argv = ["evaluate", "m", "--framework", "onnxruntime", "--dataset", "d"]
    flags = set(vars(commands.parser().parse_args(argv)))
    # The split is --dataset NAME:SPLIT's.
    assert set(JobOptions.names()) - {"split"} <= flags
    assert set(JobOptions.names()) <= set(LaunchForm.base_fields)
    loop = {spec.name: spec.default for spec in dataclasses.fields(EvaluationOptions)}
    assert {name: loop[name] for name in JobOptions.names()} == dict(JOB_DEFAULTS)


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"target_ci": 0}, "target_ci"),
        ({"target_ci": -0.02}, "target_ci"),
        ({"target_ci": 1}, "target_ci"),
        ({"target_ci": 1.5}, "target_ci"),
        ({"target_ci": "2%"}, "target_ci"),
        ({"target_ci": True}, "target_ci"),
        ({"target_ci_seconds": 5}, "target_ci_seconds"),  # nothing to bound
        ({"target_ci": 0.02, "target_ci_seconds": 0.01}, "target_ci_seconds"),
        ({"target_ci": 0.02, "target_ci_seconds": 7200}, "target_ci_seconds"),
    ],
)
def test_the_api_refuses_a_target_that_is_no_share_naming_it(
    alice_evaluator_client, hosts, fields, path
) -> None:  # type: ignore[no-untyped-def]
    response = launch(alice_evaluator_client, **fields)
    assert response.status_code == 400, response.content
    assert error_paths(response) == [path]
    assert Evaluation.objects.count() == 0


def test_the_form_takes_a_percentage_and_refuses_what_is_no_share_beside_the_field(
    signed_in, hosts
) -> None:  # type: ignore[no-untyped-def]
    values = _shown_form(signed_in, f"{LAUNCH_URL}?model=m")
    values["dataset"] = "d"
    for text, message in (
        ("two", b"is not a share: write e.g. 2% or 0.02"),
        ("150%", b"must be a share more than 0 and less than 1"),
        ("0", b"must be a share more than 0 and less than 1"),
    ):
        response = _post(signed_in, {**values, "target_ci": text})
        assert response.status_code == 400, text
        page = response.content.decode()
        field = page[page.index('id="field-target_ci"') :]
        assert message.decode() in field[: field.index('id="field-target_ci_seconds"')], text
    refused = _post(signed_in, {**values, "target_ci_seconds": "5"})
    assert refused.status_code == 400
    assert b"applies with target_ci only" in refused.content
    assert Evaluation.objects.count() == 0

    launched = _submit(signed_in, {**values, "target_ci": "2 %", "target_ci_seconds": "20"})
    assert (launched.request["target_ci"], launched.request["target_ci_seconds"]) == (0.02, 20)
