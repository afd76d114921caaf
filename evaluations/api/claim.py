"""`POST /api/v1/evaluations/<id>/claim/` (agent): take a dispatched evaluation.

The agent sends its host's id and the dispatch number its broker message carried. The first
claim wins and gets the job: the manifests, the options and a claim id that the agent's later
reports carry. Any other claim answers 409 saying why (a duplicate delivery, a superseded
dispatch, an evaluation cancelled meanwhile); the agent then drops the message.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evaluations import actions
from evaluations.api.serializers import ClaimSerializer
from evaluations.models import Evaluation
from evaluations.permissions import agent_token
from hub.api.openapi import error_response
from hub.models import Host, Manifest

# What the agent needs of the request to run the evaluation loop.
_OPTIONS = (
    "split",
    "limit",
    "batch_sizes",
    "warmup",
    "repeat",
    "seed",
    "threads",
    "cold_start",
    "trace_level",
)


class EvaluationClaim(APIView):
    required_scopes = {"POST": "agent"}

    @extend_schema(
        summary="Claim a dispatched evaluation (agents)",
        request=ClaimSerializer,
        responses={
            200: OpenApiTypes.OBJECT,
            409: error_response(
                409,
                "Another claim holds the evaluation, the dispatch was superseded, or the "
                "evaluation was cancelled or finished meanwhile: drop the message.",
            ),
        },
    )
    def post(self, request: Request, pk: UUID) -> Response:
        token = agent_token(request)
        serializer = ClaimSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        host = Host.objects.filter(pk=serializer.validated_data["host"]).first()
        if host is None or host.token_id != token.pk:
            raise PermissionDenied("This host is not registered with this agent token.")
        evaluation = actions.claim_evaluation(pk, host, serializer.validated_data["dispatch"])
        return Response(job(evaluation))


def job(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "id": str(evaluation.pk),
        "claim": evaluation.claim,
        "attempt": evaluation.attempts,
        "trace_id": evaluation.trace_id,
        "parent_span_id": evaluation.trace_parent_span_id or None,
        "device": evaluation.device,
        "model": _manifest(evaluation.model),
        "dataset": _manifest(evaluation.dataset),
        "options": {key: evaluation.request.get(key) for key in _OPTIONS},
    }


def _manifest(manifest: Manifest | None) -> dict[str, Any]:
    assert manifest is not None  # a claim is refused when a manifest was deleted
    return {
        "id": manifest.pk,
        "name": manifest.name,
        "version": manifest.version,
        "framework": manifest.framework,
        "content_hash": manifest.content_hash,
        "source": manifest.source,
    }
