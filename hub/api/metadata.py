"""What `OPTIONS` answers on every endpoint of the API (settings: DEFAULT_METADATA_CLASS).

DRF's default (`SimpleMetadata`) describes the body of a POST or PUT from the view's
`serializer_class`: on a view without one (the shares, members and publish endpoints) that
raised, a 500 for every signed-in caller; and where a view has one, it is often the serializer
of the answer, not of the request (a manifest upload is YAML; a host registration's answer has
fields the request cannot set). The OpenAPI schema describes every request and answer
(`/api/schema/`), so OPTIONS says what the view is and points there.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework.metadata import BaseMetadata
from rest_framework.request import Request


class Metadata(BaseMetadata):
    """{"name", "description", "renders", "parses", "methods", "schema"}: the view's name and
    description, the media types it answers in and takes, the methods it allows (as the
    `Allow` header), and the URL of the OpenAPI schema that describes its bodies."""

    def determine_metadata(self, request: Request, view: Any) -> dict[str, Any]:
        return {
            "name": view.get_view_name(),
            "description": view.get_view_description(),
            "renders": [renderer.media_type for renderer in view.renderer_classes],
            "parses": [parser.media_type for parser in view.parser_classes],
            "methods": list(view.allowed_methods),
            "schema": reverse("api-schema"),
        }
