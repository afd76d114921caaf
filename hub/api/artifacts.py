"""`/api/v1/artifacts/<path>`: download a file of the artifact store (what `repo://` names).

A file is served to whoever can see a manifest that references it: anonymous callers (public
manifests), a browser session and tokens with the `read` scope. A token of scope `agent` fetches
the files of the jobs its hosts hold a live claim on, private ones included, while they hold it
(`evaluations.permissions.agent_may_fetch`); an agent token without `read` fetches nothing else
but public files, not even its owner's own private ones.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser
from django.http import FileResponse, Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from hub import access, storage
from hub.authentication import scopes_of
from hub.models import ApiToken, Artifact, Manifest


class ArtifactDownload(APIView):
    anonymous_methods = ("GET", "HEAD")
    required_scopes = {"GET": ("read", "agent"), "HEAD": ("read", "agent")}

    @extend_schema(
        summary="Download an artifact",
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
    )
    def get(self, request: Request, path: str) -> FileResponse:
        try:
            storage.check_path(path)
        except storage.StorePathError:
            raise Http404 from None
        artifact = Artifact.objects.filter(path=path).first()
        if artifact is None:
            raise Http404
        if not _read(request, artifact) and not _fetched_by_its_agent(request, artifact):
            raise Http404
        try:
            file = storage.resolve(path)
        except storage.StorePathError:  # a symlink in the store that leads outside it
            raise Http404 from None
        if not file.is_file():
            raise Http404
        response = FileResponse(file.open("rb"), as_attachment=True, filename=file.name)
        response["X-Checksum-Sha256"] = artifact.sha256
        return response


def _read(request: Request, artifact: Artifact) -> bool:
    """Whether the caller may read a manifest referencing `artifact`: a session or a token of
    scope `read` as its user, anyone else (an agent token without `read`) as anonymous."""
    reader = request.user if "read" in scopes_of(request) else AnonymousUser()
    return Manifest.objects.visible_to(reader).filter(artifacts=artifact).exists()


def _fetched_by_its_agent(request: Request, artifact: Artifact) -> bool:
    if not isinstance(request.auth, ApiToken):
        return False
    return access.agent_may_fetch(request.auth, artifact)
