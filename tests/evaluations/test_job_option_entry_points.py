"""A job option is one field of `predictors.protocol.JobOptions`: the API's schema, the launch
form, `mlms evaluate --help` (and `mlms study`'s) and Reproduce are made from it. Shown for
every option, and for the newest, `cooldown_ms`, whose whole making is its field in the protocol
and its use in the loop (`predictors.evaluation.run`; that it acts:
tests/predictors/test_job_options.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from typing import Any

import pytest
import yaml
from django.test import Client

from evaluations.models import Evaluation
from predictors.cli import commands, study
from predictors.cli import evaluate as cli
from predictors.cli.options import flag
from predictors.protocol import JOB_DEFAULTS, JobOptions
from tests.evaluations.factories import launch, launched_id
from tests.evaluations.test_defaults import LAUNCH_URL, _shown_form, _submit

pytestmark = pytest.mark.django_db

ARGV = ["evaluate", "m", "--framework", "onnxruntime", "--dataset", "d"]


def _schema(client: Client) -> dict[str, Any]:
    """The launch request's properties in the OpenAPI schema."""
    schema = yaml.safe_load(client.get("/api/schema/").content)
    return dict(schema["components"]["schemas"]["EvaluationRequestRequest"]["properties"])


def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        commands.parser().parse_args([*argv, "--help"])
    return out.getvalue()


def test_every_job_option_is_in_the_schema_the_form_and_the_cli(signed_in, hosts) -> None:  # type: ignore[no-untyped-def]
    properties = _schema(signed_in)
    page = signed_in.get(f"{LAUNCH_URL}?model=m").content.decode()
    evaluate_help, study_help = _help("evaluate"), _help("study")
    for spec in dataclasses.fields(JobOptions):
        name = spec.name
        # (drf-spectacular adds a choice field's choices after its help.)
        assert properties[name]["description"].startswith(spec.metadata["help"]), name
        assert f'name="{name}"' in page and spec.metadata["label"] in page, name
        if "part_of" not in spec.metadata:  # the split is --dataset NAME:SPLIT's
            assert flag(name) in evaluate_help, name
            # A study sweeps the thread counts and seeds, by flags of its own.
            assert flag(name) in study_help or name in study.SWEPT, name


def test_a_study_takes_the_job_options_mlms_evaluate_takes() -> None:
    argv = ["study", "m", "--framework", "onnxruntime", "--dataset", "d", "--cold-start"]
    args = commands.parser().parse_args([*argv, "--target-ci", "2%", "--set", "a.b=1"])
    options = study.study_options(args, "validation", "cpu")
    assert (options.cold_start, options.warmup, options.target_ci) == (True, 0, 0.02)
    assert args.overrides == ["a.b=1"] and options.overrides == ()  # applied to the manifest


def test_the_cooldown_is_in_the_schema_the_form_the_cli_and_reproduce(
    signed_in, alice_evaluator_client, hosts
) -> None:  # type: ignore[no-untyped-def]
    """`cooldown_ms` came as one field of `JobOptions` and its use in the loop, nothing else."""
    spec = JobOptions.__dataclass_fields__["cooldown_ms"]
    assert JOB_DEFAULTS["cooldown_ms"] == 0

    # The API's schema, with the protocol's bounds, default and help.
    schema = _schema(signed_in)["cooldown_ms"]
    assert (schema["type"], schema["minimum"], schema["maximum"]) == ("integer", 0, 600000)
    assert (schema["default"], schema["description"]) == (0, spec.metadata["help"])
    assert launch(alice_evaluator_client, cooldown_ms=600001).status_code == 400

    # The launch form: its field, shown with the default, under "more".
    page = signed_in.get(f"{LAUNCH_URL}?model=m").content.decode()
    assert '<label for="id_cooldown_ms">Cool-down (ms)</label>' in page
    assert _shown_form(signed_in, f"{LAUNCH_URL}?model=m")["cooldown_ms"] == "0"
    summary = page[page.index("<summary>") : page.index("</summary>")]
    assert "cool-down (ms)" in summary

    # mlms evaluate: its flag, with the protocol's help and default, here and with --hub.
    assert "--cooldown-ms MS" in _help("evaluate")
    assert "(default: 0)" in _help("evaluate").split("--cooldown-ms MS")[1]
    args = commands.parser().parse_args([*ARGV, "--cooldown-ms", "250"])
    assert cli.local_options(args).cooldown_ms == 250
    hub = commands.parser().parse_args(
        [*ARGV, "--cooldown-ms", "250", "--hub", "h", "--token", "t"]
    )
    assert cli.remote_request(hub)["cooldown_ms"] == 250

    # Reproduce: the form filled as the evaluation ran, launched again alike.
    original = Evaluation.objects.get(
        pk=launched_id(launch(alice_evaluator_client, cooldown_ms=250, batch_sizes=[1, 4]))
    )
    assert original.request["cooldown_ms"] == 250
    url = f"{LAUNCH_URL}?reproduce={original.pk}"
    shown = _shown_form(signed_in, url)
    assert shown["cooldown_ms"] == "250"
    again = _submit(signed_in, shown, url)
    assert again.request["cooldown_ms"] == 250
