"""Hosts: agents register with an agent token and send heartbeats; a silent host is not live."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from hub.models import Host
from tests.hub.factories import HOSTS_URL, error_paths, register_host

ONNX = [("onnxruntime", "1.17.0", ["cpu", "gpu"])]


def _heartbeat(client, host: Host):  # type: ignore[no-untyped-def]
    return client.post(f"{HOSTS_URL}{host.pk}/heartbeat/")


def _age(host: Host, seconds: float) -> None:
    """Make the host's last heartbeat `seconds` old."""
    Host.objects.filter(pk=host.pk).update(
        last_heartbeat=timezone.now() - timedelta(seconds=seconds)
    )


@pytest.fixture
def host(alice_agent) -> Host:  # type: ignore[no-untyped-def]
    response = register_host(alice_agent, "gpu-01", ONNX)
    assert response.status_code == 201, response.content
    return Host.objects.get(name="gpu-01")


def test_an_agent_registers_its_host(alice_agent) -> None:
    response = register_host(
        alice_agent,
        "gpu-01",
        ONNX,
        hardware={"cpu": "Xeon", "gpus": [{"model": "H100", "memory_gb": 80}]},
        software={"os": "Ubuntu 24.04"},
        queues=["onnxruntime.cpu", "onnxruntime.gpu"],
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["live"] is True
    assert body["owner"] == "alice"
    host = Host.objects.get(name="gpu-01")
    assert host.owner.username == "alice"
    assert host.token is not None and host.token.scopes == ["agent"]
    assert host.frameworks == [
        {"name": "onnxruntime", "version": "1.17.0", "devices": ["cpu", "gpu"]}
    ]
    assert host.hardware["gpus"][0]["model"] == "H100"
    # The hub names the queues, in the host's scope: its owner's.
    scope = f"user-{host.owner_id}"
    assert body["scope"] == scope and body["pool"] is False and body["group"] is None
    assert host.queues == [
        f"{scope}.host.gpu-01",
        f"{scope}.onnxruntime.cpu",
        f"{scope}.onnxruntime.gpu",
    ]
    assert host.last_heartbeat is not None


def test_a_host_offers_every_capability_it_registers_unless_queues_choose(alice_agent) -> None:
    response = register_host(alice_agent, "gpu-01", ONNX)

    assert response.status_code == 201, response.content
    scope = response.json()["scope"]
    assert response.json()["queues"] == [
        f"{scope}.host.gpu-01",
        f"{scope}.onnxruntime.cpu",
        f"{scope}.onnxruntime.gpu",
    ]


@pytest.mark.parametrize(
    "queue", ["onnxruntime.cuda", "pytorch.cpu", "pool.onnxruntime.cpu", "user-1.onnxruntime.cpu"]
)
def test_a_queue_that_is_not_a_capability_of_the_host_is_refused(alice_agent, queue) -> None:
    response = register_host(alice_agent, "gpu-01", ONNX, queues=["onnxruntime.cpu", queue])

    assert response.status_code == 400
    assert error_paths(response) == ["queues.1"]
    assert queue in response.json()["errors"][0]["message"]
    assert not Host.objects.exists()


def test_only_staff_put_a_host_in_the_shared_pool(
    alice_agent, make_client, django_user_model
) -> None:
    refused = register_host(alice_agent, "gpu-01", ONNX, pool=True)
    assert refused.status_code == 403
    assert error_paths(refused) == ["pool"]
    assert not Host.objects.exists()

    operator = make_client(
        django_user_model.objects.create_user("ops", is_staff=True), scopes=["agent"]
    )
    accepted = register_host(operator, "gpu-01", ONNX, pool=True)
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["scope"] == "pool"
    assert Host.objects.get().queues[0] == "pool.host.gpu-01"


def test_a_host_is_lent_only_to_a_group_its_owner_belongs_to(alice, alice_agent) -> None:
    from django.contrib.auth.models import Group

    lab = Group.objects.create(name="lab")
    refused = register_host(alice_agent, "gpu-01", ONNX, group="lab")
    assert refused.status_code == 403
    assert error_paths(refused) == ["group"]
    unknown = register_host(alice_agent, "gpu-01", ONNX, group="nobody-has-this")
    assert unknown.status_code == 403  # the same answer: group names are not revealed
    assert not Host.objects.exists()

    alice.groups.add(lab)
    accepted = register_host(alice_agent, "gpu-01", ONNX, group="lab")
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["group"] == "lab"
    assert accepted.json()["scope"] == f"group-{lab.pk}"
    both = register_host(alice_agent, "gpu-01", ONNX, group="lab", pool=True)
    assert both.status_code in (400, 403)


def test_registering_the_same_name_again_updates_the_host(alice_agent, host) -> None:
    _age(host, 30)

    response = register_host(alice_agent, "gpu-01", [("pytorch", "2.1.0")])

    assert response.status_code == 200, response.content
    assert Host.objects.count() == 1
    host.refresh_from_db()
    assert host.frameworks == [{"name": "pytorch", "version": "2.1.0", "devices": ["cpu"]}]
    assert timezone.now() - host.last_heartbeat < timedelta(seconds=5)


def test_another_users_host_name_is_refused_with_409(bob_agent, host) -> None:
    response = register_host(bob_agent, "gpu-01", [("pytorch", "2.1.0")])

    assert response.status_code == 409
    assert error_paths(response) == ["name"]
    host.refresh_from_db()
    assert host.owner.username == "alice"
    assert host.frameworks[0]["name"] == "onnxruntime"


def test_a_heartbeat_updates_the_last_heartbeat(alice_agent, host) -> None:
    _age(host, 30)
    before = Host.objects.get(pk=host.pk).last_heartbeat

    response = _heartbeat(alice_agent, host)

    assert response.status_code == 200
    host.refresh_from_db()
    assert host.last_heartbeat > before
    assert response.json()["live"] is True


def test_a_heartbeat_for_another_users_host_is_refused(bob_agent, host) -> None:
    _age(host, 30)
    before = Host.objects.get(pk=host.pk).last_heartbeat

    response = _heartbeat(bob_agent, host)

    assert response.status_code == 403
    host.refresh_from_db()
    assert host.last_heartbeat == before


def test_a_heartbeat_for_a_missing_host_is_404(alice_agent) -> None:
    assert alice_agent.post(f"{HOSTS_URL}4242/heartbeat/").status_code == 404


@pytest.mark.parametrize("scopes", [["read"], ["read", "write", "evaluate"]])
def test_a_token_without_the_agent_scope_cannot_send_heartbeats(
    make_client, alice, host, scopes
) -> None:
    # Registering without the agent scope is refused too: see test_permissions.py.
    _age(host, 30)
    before = Host.objects.get(pk=host.pk).last_heartbeat

    response = _heartbeat(make_client(alice, scopes=scopes), host)

    assert response.status_code == 403
    assert "'agent'" in response.json()["detail"]
    host.refresh_from_db()
    assert host.last_heartbeat == before


def test_a_signed_in_browser_cannot_register_a_host(alice) -> None:
    client = APIClient()
    client.force_login(alice)

    assert register_host(client, "cpu-01", ONNX).status_code == 403
    assert not Host.objects.exists()


BIG = "x" * (64 * 1024)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"name": "bad name"}, "name"),
        ({"name": ""}, "name"),
        ({"name": "-leading-dash"}, "name"),
        ({"name": "x" * 129}, "name"),
        ({"name": ["gpu-01"]}, "name"),
        (
            {"frameworks": [{"name": "caffe", "version": "1.0.0", "devices": ["cpu"]}]},
            "frameworks.0.name",
        ),
        (
            {"frameworks": [{"name": "pytorch", "version": "2.1", "devices": ["cpu"]}]},
            "frameworks.0.version",
        ),
        (
            {"frameworks": [{"name": "pytorch", "version": "latest", "devices": ["cpu"]}]},
            "frameworks.0.version",
        ),
        (
            {"frameworks": [{"name": "pytorch", "version": 2, "devices": ["cpu"]}]},
            "frameworks.0.version",
        ),
        (
            {"frameworks": [{"name": "pytorch", "version": "2.1.0", "devices": ["tpu"]}]},
            "frameworks.0.devices.0",
        ),
        (
            {"frameworks": [{"name": "pytorch", "version": "2.1.0", "devices": []}]},
            "frameworks.0.devices",
        ),
        (
            {"frameworks": [{"name": "pytorch", "version": "2.1.0", "devices": "cpu"}]},
            "frameworks.0.devices",
        ),
        ({"frameworks": [{"name": "pytorch", "version": "2.1.0"}]}, "frameworks.0.devices"),
        ({"frameworks": "onnxruntime"}, "frameworks"),
        ({"frameworks": None}, "frameworks"),
        ({"frameworks": [["onnxruntime", "1.17.0"]]}, "frameworks.0"),
        ({"hardware": ["H100"]}, "hardware"),
        ({"hardware": {"blob": BIG}}, "hardware"),
        ({"hardware": {"gpus": [{"model": "H\x00100"}]}}, "hardware.gpus.0.model"),
        ({"software": {"os\x00": "linux"}}, "software.os\x00"),
        ({"software": "linux"}, "software"),
        ({"software": {"blob": BIG}}, "software"),
        # A field the hub does not take: refused, naming it.
        ({"devices": ["cpu", "gpu:0"]}, "devices"),
        # One the hub only shows (it decides them): refused too, not ignored.
        ({"live": False}, "live"),
        ({"scope": "pool"}, "scope"),
        ({"queues": [{"name": "q"}]}, "queues.0"),
        ({"queues": ["q"] * 65}, "queues"),
    ],
)
def test_an_invalid_registration_gets_400_naming_the_field(alice_agent, change, field) -> None:
    payload = {
        "name": "gpu-01",
        "frameworks": [{"name": "onnxruntime", "version": "1.17.0", "devices": ["cpu"]}],
        **change,
    }

    response = alice_agent.post(HOSTS_URL, payload, format="json")

    assert response.status_code == 400, response.content
    assert field in error_paths(response)
    assert not Host.objects.exists()


def test_a_registration_that_is_not_an_object_gets_400(alice_agent) -> None:
    response = alice_agent.post(HOSTS_URL, ["gpu-01"], format="json")

    assert response.status_code == 400
    assert not Host.objects.exists()


def test_a_framework_version_with_build_metadata_is_accepted(alice_agent) -> None:
    response = register_host(alice_agent, "gpu-01", [("pytorch", "2.1.0+cu121", ["gpu"])])

    assert response.status_code == 201, response.content


def test_a_host_is_not_live_once_its_heartbeat_is_older_than_host_live_seconds(
    alice_full_client, host, settings
) -> None:
    settings.HOST_LIVE_SECONDS = 20
    _age(host, 10)
    assert alice_full_client.get(f"{HOSTS_URL}{host.pk}/").json()["live"] is True
    assert [h["name"] for h in alice_full_client.get(f"{HOSTS_URL}?live=1").json()["results"]] == [
        "gpu-01"
    ]

    _age(host, 30)

    assert alice_full_client.get(f"{HOSTS_URL}{host.pk}/").json()["live"] is False
    assert alice_full_client.get(f"{HOSTS_URL}?live=1").json()["results"] == []
    assert [h["name"] for h in alice_full_client.get(HOSTS_URL).json()["results"]] == ["gpu-01"]
    assert not Host.objects.live().exists()


def test_a_heartbeat_makes_a_silent_host_live_again(alice_agent, alice_full_client, host) -> None:
    _age(host, 3600)
    assert alice_full_client.get(f"{HOSTS_URL}{host.pk}/").json()["live"] is False

    _heartbeat(alice_agent, host)

    assert alice_full_client.get(f"{HOSTS_URL}{host.pk}/").json()["live"] is True


def test_only_the_owner_removes_a_host(alice_full_client, bob_client, host) -> None:
    # Bob does not even see Alice's own host: it runs Alice's jobs only.
    assert bob_client.delete(f"{HOSTS_URL}{host.pk}/").status_code == 404
    assert Host.objects.filter(pk=host.pk).exists()

    assert alice_full_client.delete(f"{HOSTS_URL}{host.pk}/").status_code == 204
    assert not Host.objects.exists()


def test_an_agent_token_cannot_remove_its_host(alice_agent, host) -> None:
    response = alice_agent.delete(f"{HOSTS_URL}{host.pk}/")

    assert response.status_code == 403
    assert Host.objects.filter(pk=host.pk).exists()
