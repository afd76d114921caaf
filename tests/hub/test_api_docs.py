"""The OpenAPI schema and the browsable docs describe every endpoint."""

from __future__ import annotations

import pytest
import yaml


@pytest.mark.django_db
def test_the_openapi_schema_lists_every_v1_endpoint(client) -> None:  # type: ignore[no-untyped-def]
    from openapi_spec_validator import validate

    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    validate(schema)
    paths = set(schema["paths"])
    for expected in (
        "/api/v1/manifests/",
        "/api/v1/manifests/{id}/",
        "/api/v1/datasets/",
        "/api/v1/hosts/",
        "/api/v1/hosts/{id}/heartbeat/",
        "/api/v1/tokens/",
        "/api/v1/resolve/",
        "/api/v1/schema/manifest.json",
    ):
        assert expected in paths, f"{expected} is missing from the OpenAPI schema"
    assert "bearerAuth" in str(schema["components"].get("securitySchemes", {})) or schema[
        "components"
    ].get("securitySchemes")


@pytest.mark.django_db
def test_the_docs_page_is_served_without_internet(client) -> None:  # type: ignore[no-untyped-def]
    page = client.get("/api/docs/")
    assert page.status_code == 200
    assert b"swagger-ui" in page.content.lower()
    assert b"https://cdn" not in page.content


@pytest.mark.django_db
def test_the_schema_declares_security_errors_validation_and_the_otlp_receiver(client) -> None:  # type: ignore[no-untyped-def]
    schema = yaml.safe_load(client.get("/api/schema/").content)
    paths = schema["paths"]

    # Public reads need no credentials; writes and agents' endpoints do.
    assert {} in paths["/api/v1/manifests/"]["get"]["security"]
    assert {} not in paths["/api/v1/manifests/"]["post"]["security"]
    assert paths["/api/v1/evaluations/{id}/claim/"]["post"]["security"] == [{"bearerAuth": []}]
    assert {"sessionAuth": []} in paths["/api/v1/evaluations/"]["post"]["security"]
    # The 4xx answers, in the API's error format.
    upload = paths["/api/v1/manifests/"]["post"]["responses"]
    assert {"201", "400", "401", "403", "409", "413", "415"} <= set(upload)
    assert upload["409"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    assert set(schema["components"]["schemas"]["Error"]["properties"]) == {
        "detail",
        "code",
        "errors",
    }
    assert "404" in paths["/api/v1/manifests/{id}/"]["get"]["responses"]
    # Validation rules: the page size's range, an enum, a pattern.
    parameters = {p["name"]: p for p in paths["/api/v1/manifests/"]["get"]["parameters"]}
    assert parameters["page_size"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500}
    assert sorted(parameters["kind"]["schema"]["enum"]) == ["dataset", "model"]
    trace = {p["name"]: p for p in paths["/api/v1/traces/{trace_id}"]["get"]["parameters"]}
    assert trace["trace_id"]["schema"]["pattern"] == "^[0-9a-f]{32}$"
    # The OTLP/HTTP receiver, a plain Django view.
    otlp = paths["/v1/traces"]["post"]
    assert set(otlp["requestBody"]["content"]) == {"application/x-protobuf", "application/json"}
    assert {"200", "400", "401", "403", "409", "413", "415"} <= set(otlp["responses"])
