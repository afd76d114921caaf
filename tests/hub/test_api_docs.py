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
