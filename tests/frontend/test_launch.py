"""The launch form (`/evaluate/`): the API's request, as HTML, launched by the same action."""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import expect

from evaluations.models import Evaluation
from tests.evaluations.factories import catalog_manifests, register_hosts

pytestmark = pytest.mark.browser


@pytest.fixture
def catalog(make_client, django_user_model):  # type: ignore[no-untyped-def]
    """Public model `m` (1.0.0, 1.1.0, onnxruntime) and dataset `d`, uploaded by Bob."""
    bob = django_user_model.objects.create_user("bob")
    return catalog_manifests(make_client(bob, scopes=["read", "write"]))


@pytest.fixture
def hosts(make_client, django_user_model, catalog):  # type: ignore[no-untyped-def]
    operator = django_user_model.objects.create_user("operator", is_staff=True)
    return register_hosts(make_client(operator, scopes=["agent"]))


def test_launching_from_the_form_dispatches_an_evaluation_and_opens_its_page(
    page, sign_in, alice, hosts, broker, shoot
) -> None:
    sign_in(page, alice)
    page.goto("/models/m/")
    page.get_by_role("link", name="Evaluate this model").click()

    expect(page).to_have_url("/evaluate/?model=m&version=1.1.0&framework=onnxruntime")
    expect(page.get_by_label("Model", exact=True)).to_have_value("m")
    expect(page.get_by_label("Model version")).to_have_value("1.1.0")
    expect(page.locator("#live-hosts li")).to_have_count(3)
    page.get_by_label("Dataset", exact=True).select_option("d")
    page.get_by_label("Limit").fill("2")
    page.get_by_label("Batch sizes").fill("1, 8")
    page.get_by_label("Trace level").select_option("framework")
    shoot(page, "launch-form")
    page.get_by_role("button", name="Launch").click()

    evaluation = Evaluation.objects.get()
    expect(page).to_have_url(f"/evaluations/{evaluation.pk}/")
    assert evaluation.user == alice
    assert (evaluation.model_name, evaluation.model_version) == ("m", "1.1.0")
    assert evaluation.request["batch_sizes"] == [1, 8]
    assert evaluation.request["trace_level"] == "framework"
    assert evaluation.request["limit"] == 2
    assert evaluation.status == Evaluation.DISPATCHED
    expect(page.locator("#status")).to_have_text("dispatched")
    expect(page.locator("#history tbody tr")).to_have_count(2)  # queued, dispatched
    assert broker.take(evaluation.queue)  # the job is on its queue
    shoot(page, "evaluation-dispatched")


def test_every_invalid_field_is_shown_beside_it_and_nothing_launches(
    page, sign_in, alice, hosts, shoot
) -> None:
    sign_in(page, alice)
    page.goto("/evaluate/?model=m")
    page.get_by_label("Model version").fill("^^1")
    page.get_by_label("Batch sizes").fill("1, 0")
    page.get_by_text("Warm-up, repetitions, seed, threads").click()
    page.get_by_label("Repetitions").fill("0")
    page.get_by_role("button", name="Launch").click()

    expect(page.locator("#error-summary")).to_contain_text("The evaluation was not launched")
    expect(page.locator("#field-model_version .field-errors")).to_contain_text("^^1")
    expect(page.locator("#field-batch_sizes .field-errors")).to_contain_text("item 2:")
    expect(page.locator("#field-repeat .field-errors")).not_to_be_empty()
    expect(page.get_by_label("Batch sizes")).to_have_value("1, 0")
    expect(page.get_by_label("Batch sizes")).to_have_attribute("aria-invalid", "true")
    shoot(page, "launch-invalid")
    assert not Evaluation.objects.exists()


def test_a_request_no_live_host_can_run_says_which_constraint_failed(
    page, sign_in, alice, hosts
) -> None:
    sign_in(page, alice)
    page.goto("/evaluate/?model=m")
    page.get_by_label("GPU (CUDA)").check()
    page.get_by_label("GPU model").fill("H100")
    page.get_by_role("button", name="Launch").click()

    expect(page.locator("#field-gpu_model .field-errors")).to_contain_text("H100")
    expect(page.locator("#launch-errors")).to_contain_text("GPU model:")
    page.locator("#launch-errors").get_by_role("link", name="GPU model").click()
    expect(page).to_have_url("/evaluate/?model=m#field-gpu_model")
    assert not Evaluation.objects.exists()


def test_the_launch_form_needs_a_signed_in_user(db) -> None:
    response = Client().get("/evaluate/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/evaluate/"


def test_the_launch_form_refuses_a_post_without_its_csrf_token(alice, hosts) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    response = client.post("/evaluate/", {"model": "m", "framework": "onnxruntime", "dataset": "d"})

    assert response.status_code == 403
    assert not Evaluation.objects.exists()


FORM = {
    "model": "m",
    "framework": "onnxruntime",
    "dataset": "d",
    "device": "cpu",
    "hosts": "one",
    "trace_level": "model",
}


def test_the_same_form_submitted_twice_launches_once(alice, hosts) -> None:
    client = Client()
    client.force_login(alice)
    form = {**FORM, "nonce": "a1" * 16}

    first = client.post("/evaluate/", form)
    second = client.post("/evaluate/", form)  # Enter pressed twice

    evaluation = Evaluation.objects.get()
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == f"/evaluations/{evaluation.pk}/"
    assert client.post("/evaluate/", {**form, "nonce": "b2" * 16}).status_code == 302
    assert Evaluation.objects.count() == 2


def test_the_host_choice_offers_only_hosts_the_user_may_use(
    alice, hosts, make_client, django_user_model
) -> None:
    from tests.hub.factories import register_host

    carol = django_user_model.objects.create_user("carol")
    own = [("onnxruntime", "1.17.0", ["cpu"])]
    assert register_host(make_client(carol, scopes=["agent"]), "carol-box", own).status_code == 201
    client = Client()
    client.force_login(alice)

    page = client.get("/evaluate/").content.decode()

    assert "cpu-1 (shared pool)" in page and "carol-box" not in page
    response = client.post("/evaluate/", {**FORM, "host": "cpu-2"})
    assert response.status_code == 302
    assert Evaluation.objects.get().target_host == hosts["cpu-2"]


def test_a_loadgen_scenario_is_launched_from_the_form_and_a_misfit_refused(
    page, sign_in, alice, hosts, broker
) -> None:
    """The form's LoadGen fields make the API's request; a server run without its latency
    bound is refused beside that field, and nothing launches."""
    sign_in(page, alice)
    page.goto("/evaluate/?model=m")
    page.get_by_label("Dataset", exact=True).select_option("d")
    page.get_by_label("Scenario").select_option("server")
    page.get_by_label("Target QPS").fill("12.5")
    page.get_by_role("button", name="Launch").click()
    expect(page.locator("#field-latency_bound_ms .field-errors")).to_contain_text(
        "scenario server needs the latency bound"
    )
    assert not Evaluation.objects.exists()

    page.get_by_label("Latency bound (ms)").fill("40")
    page.get_by_label("Minimum queries").fill("64")
    page.get_by_role("button", name="Launch").click()
    evaluation = Evaluation.objects.get()
    expect(page).to_have_url(f"/evaluations/{evaluation.pk}/")
    request = evaluation.request
    assert (request["scenario"], request["target_qps"], request["latency_bound_ms"]) == (
        "server", 12.5, 40.0
    )  # fmt: skip
    assert request["min_query_count"] == 64 and request["find_peak_qps"] is False


def test_a_link_to_a_model_one_may_not_run_says_so(page, sign_in, alice, hosts) -> None:
    """Bob's private `secret`, or a name that does not exist, in the launch form's link: the
    form says so rather than offering another model in its place as if it were the one."""
    sign_in(page, alice)
    for name in ("secret", "no-such-model"):
        page.goto(f"/evaluate/?model={name}")
        expect(page.locator(".messages")).to_contain_text(
            "The model this link names is none that you may run: choose one below."
        )
        assert name not in page.locator(".messages").inner_text()
        assert name not in page.get_by_label("Model", exact=True).inner_text()
    page.goto("/evaluate/?model=m")
    expect(page.locator(".messages")).to_have_count(0)
    expect(page.get_by_label("Model", exact=True)).to_have_value("m")


def test_the_catalog_counts_the_live_hosts_one_may_use(
    page, sign_in, alice, hosts, make_client, django_user_model
) -> None:
    """Another user's own host is none of alice's business: the catalog counts the pool's
    three, where its owner counts four."""
    from tests.hub.factories import register_host

    bob = django_user_model.objects.get(username="bob")
    box = register_host(make_client(bob, scopes=["agent"]), "bob-box", [("onnxruntime", "1.17.0")])
    assert box.status_code == 201, box.content
    page.goto("/")
    expect(page.locator("#live-hosts")).to_have_text("3 live hosts")
    sign_in(page, alice)
    page.goto("/")
    expect(page.locator("#live-hosts")).to_have_text("3 live hosts")
    sign_in(page, bob)
    page.goto("/")
    expect(page.locator("#live-hosts")).to_have_text("4 live hosts")
