"""The pages' rules that need no browser: visibility, sign-in, CSRF, and nothing written on error."""

from __future__ import annotations

import pytest
from django.test import Client

from hub import actions
from hub.models import Artifact, Manifest
from predictors import manifests as spec
from tests.hub.factories import dataset_yaml, model_yaml, to_yaml

pytestmark = pytest.mark.django_db


def test_a_private_model_and_dataset_are_absent_for_everyone_else(alice, django_user_model) -> None:
    actions.register_manifest(spec.load(model_yaml("secret-net")), owner=alice)
    actions.register_manifest(spec.load(dataset_yaml("secret-data")), owner=alice)
    bob = Client()
    bob.force_login(django_user_model.objects.create_user("bob"))

    for client in (Client(), bob):
        catalog = client.get("/").content.decode()
        assert "secret-net" not in catalog and "secret-data" not in catalog
        assert "secret-net" not in client.get("/?search=secret").content.decode()
        assert client.get("/models/secret-net/").status_code == 404
        assert client.get("/datasets/secret-data/").status_code == 404
    assert "secret-net" not in bob.get("/evaluate/?model=secret-net").content.decode()


def test_the_catalog_filters_on_the_training_dataset(alice) -> None:
    for name, dataset in (("a-net", "digits"), ("b-net", "imagenet")):
        data = spec.load(model_yaml(name, visibility="public")).data
        data["attributes"] = {"training_dataset": dataset}
        actions.register_manifest(spec.load(to_yaml(data)), owner=alice)

    page = Client().get("/?dataset=imagenet").content.decode()

    assert 'data-name="b-net"' in page
    assert 'data-name="a-net"' not in page


def test_an_unknown_version_of_a_model_is_a_404(alice) -> None:
    actions.register_manifest(spec.load(model_yaml("v-net", visibility="public")), owner=alice)

    assert Client().get("/models/v-net/?version=9.9.9").status_code == 404
    assert Client().get("/models/v-net/?version=1.0.0&framework=pytorch").status_code == 404
    assert Client().get("/models/v-net/?version=1.0.0").status_code == 200


def test_an_invalid_upload_answers_400_with_every_error_and_writes_nothing(
    signed_in, artifact_root
) -> None:
    text = model_yaml("bad", graph_file="g.onnx").replace("layout: NCHW", "layout: XYZ")

    response = signed_in.post("/upload/", {"manifest": text})

    assert response.status_code == 400
    paths = [e["path"] for e in response.context["manifest_errors"]]
    assert paths == ["inputs.0.parameters.layout"]
    assert (
        response.context["manifest_errors"][0]["line"]
        == text.splitlines().index("    layout: XYZ") + 1
    )
    assert not Manifest.objects.exists() and not Artifact.objects.exists()
    assert not any(artifact_root.rglob("*"))


def test_the_upload_form_refuses_a_post_without_its_csrf_token(alice) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    response = client.post("/upload/", {"manifest": model_yaml("m")})

    assert response.status_code == 403
    assert not Manifest.objects.exists()


def test_the_upload_form_needs_a_signed_in_user() -> None:
    response = Client().post("/upload/", {"manifest": model_yaml("m")})

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/upload/"
    assert not Manifest.objects.exists()
