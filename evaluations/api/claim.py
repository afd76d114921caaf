"""`POST /api/v1/evaluations/<id>/claim/` (agent): take a dispatched evaluation.

The agent sends its host's id and the dispatch number its broker message carried. The first
claim wins and gets the job (a `predictors.protocol.Job`): the manifests, the options and a
claim id that the agent's later reports carry. Any other claim answers 409 saying why (a
duplicate delivery, a superseded dispatch, an evaluation cancelled meanwhile), with a code
(`predictors.protocol.Code`) by which the agent drops the message.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any
from uuid import UUID

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from evaluations import actions
from evaluations.api.agents import AgentEndpoint, agent_body
from evaluations.api.serializers import ClaimSerializer
from evaluations.models import Evaluation
from hub.api.openapi import error_response
from hub.errors import Forbidden
from hub.models import Host, Manifest
from predictors.protocol import Code, Job, JobOptions, ManifestRef


class EvaluationClaim(AgentEndpoint):
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
        token, data = agent_body(request, ClaimSerializer)
        host = Host.objects.filter(pk=data["host"]).first()
        if host is None or host.token_id != token.pk:
            raise Forbidden(
                "This host is not registered with this agent token.", code=Code.HOST_NOT_YOURS
            )
        evaluation = actions.claim_evaluation(pk, host, data["dispatch"])
        return Response(job(evaluation).to_dict())


def job(evaluation: Evaluation) -> Job:
    """The job of a claimed evaluation: its options are the request's job options."""
    request = evaluation.request
    return Job(
        id=str(evaluation.pk),
        claim=evaluation.claim,
        attempt=evaluation.attempts,
        trace_id=evaluation.trace_id,
        parent_span_id=evaluation.trace_parent_span_id or None,
        device=evaluation.device,
        model=_manifest(evaluation.model),
        dataset=_manifest(evaluation.dataset),
        options=JobOptions.from_dict({k: request[k] for k in JobOptions.names() if k in request}),
        limits=_limits(request),
    )


def _limits(request: dict[str, Any]) -> dict[str, Any] | None:
    """The request's container limits, or None when it set none."""
    cpus, memory = request.get("container_cpus"), request.get("container_memory_mb")
    if cpus is None and memory is None:
        return None
    return {"cpus": cpus, "memory_mb": memory}


def _manifest(manifest: Manifest | None) -> ManifestRef:
    assert manifest is not None  # a claim is refused when a manifest was deleted
    # Each field of the reference is the manifest's of the same name.
    return ManifestRef(
        **{field.name: getattr(manifest, field.name) for field in fields(ManifestRef)}
    )
